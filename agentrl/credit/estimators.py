"""Registry of credit-assignment estimators and their shared return type.

An estimator is a pure function ``fn(batch, graph, cfg) -> Advantages``: ``batch`` is a
:class:`~agentrl.credit.batch.StepBatch`, ``graph`` the batch's
:class:`~agentrl.credit.graph.TrajectoryGraph` (``None`` for estimators registered with
``needs_graph=False``), ``cfg`` the estimator's own frozen config dataclass. Register with::

    @register_estimator("grpo", config=GRPOConfig)
    def grpo(batch, graph, cfg): ...

Estimators that rescore responses with the model (RELACE) register with ``needs_scorer=True``
and receive a :class:`Scorer` as the one extra keyword argument ``scorer``; they never reach
into the trainer.

Estimators that keep state across iterations (BV-Blend's per-cluster reward moments,
Constrained GRPO's Lagrange multipliers) register with ``stateful=True``. They receive their
previous state as the keyword argument ``state`` (``None`` the first time) and return the new one
in :attr:`Advantages.state`, purely: no hidden globals, and the input state is never mutated. The
state must be plain data (``None``, bool, int, float, str, and lists, tuples and str-keyed dicts
of those; :func:`check_state`), because the trainer keeps it between iterations and saves it in
its checkpoints, which are loaded with ``torch.load(weights_only=True)``; numpy values must be
converted (``float(x)``, ``x.tolist()``). Under torchrun every rank computes credit on the same
gathered batch, so the state stays identical on every rank. Estimators log their state's key
scalars (e.g. ``credit/lambda_<k>``) in their metrics.

Estimators that need a learned value function (GAE) register with ``critic="module:Class"``:
the trainer builds that :class:`Critic` once, passes it as the keyword argument ``critic``,
trains it after every policy update on the ``values``/``returns`` the estimator reports in its
:class:`Advantages`, and keeps its state in checkpoints.

Registering a name twice raises; an unknown name lists the valid ones. The trainer only ever
calls :func:`compute_advantages`, never an estimator by name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agentrl.configuration import ConfigError, closest, from_mapping
from agentrl.credit.batch import StepBatch
from agentrl.registry import same_definition, where


@dataclass(frozen=True)
class Advantages:
    """Per-step advantages and diagnostics.

    Attributes:
        step: (N,) float64 — one advantage per environment step, broadcast over the tokens of
            that step's response by the learner.
        metrics: scalar diagnostics, logged under ``credit/``.
        state: the new state of a stateful estimator (plain data, see :func:`check_state`);
            None for stateless ones.
    """

    step: np.ndarray
    metrics: dict[str, float] = field(default_factory=dict)
    state: Any = None
    values: np.ndarray | None = None
    """(N,) float64 — V(s_t) a critic-based estimator used (the critic's targets are made with
    it; also its clipping anchor); None for other estimators. 0 for lost steps."""
    returns: np.ndarray | None = None
    """(N,) float64 — the value targets of a critic-based estimator (GAE: A_t + V(s_t)); None
    for other estimators. 0 for lost steps."""


Estimator = Callable[..., Advantages]


class Scorer(Protocol):
    """Teacher-forced scoring of responses, implemented by the policy model.

    ``score(contexts, responses)`` returns an (n,) float64 array: the mean token log-prob of
    each response given its context (the user message; the scorer applies chat formatting).
    """

    def score(self, contexts: Sequence[str], responses: Sequence[str]) -> np.ndarray: ...


class Critic(Protocol):
    """A learned value function of prompts that an estimator registered with ``critic=`` uses.

    The trainer builds it as ``Class(run_cfg, policy, tokenizer)`` (``policy``: the model that
    generates), hands it to the estimator, and after each policy update calls ``after_update``
    with the batch and the estimator's :class:`Advantages` (``values`` and ``returns`` set);
    ``state_dict``/``load_state_dict`` carry it through checkpoints (tensors and plain data,
    loadable with ``weights_only=True``) and ``save(path)`` writes what another run may load
    from a checkpoint folder.
    """

    def values(self, prompts: Sequence[str]) -> np.ndarray:
        """V of each user message (chat-formatted and truncated as the rollout's): (n,)."""
        ...

    def after_update(
        self, batch: StepBatch, adv: Advantages, rng: np.random.Generator
    ) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def save(self, path: Any) -> None: ...


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator: its function, config dataclass and what it needs."""

    name: str
    fn: Estimator
    config_cls: type
    needs_graph: bool
    needs_scorer: bool = False
    learner_hints: tuple[tuple[str, Any], ...] = ()
    """Learner settings the method is designed for (``learner.<key>=<value>``); the trainer
    warns when the run's learner config differs, benchmarks apply them."""
    driver: str | None = None
    """``"module:Class"`` of a rollout driver that replaces the plain episode rollout (AC2's
    prefix/chunk sampling with a critic); None for estimators over ordinary episodes."""
    group_based: bool = True
    """Whether the estimator compares the ``rollout.group_size`` rollouts of a task (GRPO's
    group baseline, GiGPO's step groups, ...): with one rollout per task its advantages are
    all 0, and the trainer warns."""
    stateful: bool = False
    """Whether the estimator keeps state across iterations: it is called with ``state=`` (None
    the first time) and returns the new state in :attr:`Advantages.state`."""
    critic: str | None = None
    """``"module:Class"`` of the learned value function (a :class:`Critic`) the estimator is
    called with as ``critic=``; None for estimators without one."""


_ESTIMATORS: dict[str, EstimatorSpec] = {}


@dataclass(frozen=True)
class NoConfig:
    """Config of an estimator without options."""


def register_estimator(
    name: str,
    config: type = NoConfig,
    needs_graph: bool = False,
    needs_scorer: bool = False,
    learner_hints: Mapping[str, Any] | None = None,
    driver: str | None = None,
    group_based: bool = True,
    stateful: bool = False,
    critic: str | None = None,
) -> Callable[[Estimator], Estimator]:
    """Decorator registering an estimator under ``name`` with its config dataclass.

    Registering the same definition again (its module imported twice) is harmless, as for
    environments (:func:`agentrl.registry.same_definition`).

    Raises:
        ValueError: if ``name`` is already registered to another function or options.
    """

    def deco(fn: Estimator) -> Estimator:
        hints = tuple(sorted((learner_hints or {}).items()))
        spec = EstimatorSpec(
            name,
            fn,
            config,
            needs_graph,
            needs_scorer,
            hints,
            driver,
            group_based,
            stateful,
            critic=critic,
        )
        old = _ESTIMATORS.get(name)
        if old is not None and not same_definition(old, spec):
            raise ValueError(
                f"estimator {name!r} is already registered ({where(old.fn)}); choose another name"
            )
        _ESTIMATORS[name] = spec
        return fn

    return deco


def _ensure_builtin() -> None:
    from agentrl.registry import load_plugins

    load_plugins("agentrl.algos")


def list_estimators() -> list[str]:
    """Names of every registered estimator, sorted."""
    _ensure_builtin()
    return sorted(_ESTIMATORS)


def get_estimator(name: str) -> EstimatorSpec:
    """The estimator registered as ``name``; unknown names list the valid ones."""
    _ensure_builtin()
    if name not in _ESTIMATORS:
        raise ConfigError(
            f"unknown estimator algo={name!r}; registered estimators are {sorted(_ESTIMATORS)}."
            + closest(name, _ESTIMATORS)
        )
    return _ESTIMATORS[name]


def estimator_config(name: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """Build the config dataclass of estimator ``name`` (errors name ``algo.<key>``)."""
    return from_mapping(get_estimator(name).config_cls, overrides, path="algo")


def compute_advantages(
    name: str,
    batch: StepBatch,
    cfg: Any = None,
    graph: Any = None,
    scorer: Scorer | None = None,
    state: Any = None,
    critic: Critic | None = None,
) -> Advantages:
    """Run estimator ``name`` on ``batch`` and add the shared diagnostics.

    ``state`` is a stateful estimator's previous state (None the first time; it must be None
    for a stateless one); the result carries the new state in :attr:`Advantages.state`, checked
    to be plain data (:func:`check_state`). When every episode was lost the state is returned
    unchanged.

    Lost episodes (``batch.traj_lost``: cut short by a failed environment or env worker) are
    removed first, once for every estimator: the estimator runs on
    ``kept = batch.without_lost()``, so they enter no group statistic, and their steps get
    advantage exactly 0 (callers also drop them from the learner's samples, so they give no
    gradient). ``graph`` is built here from ``kept`` if the estimator needs one and none is
    given; callers that build it themselves (to share it between estimators) must build it from
    ``batch.without_lost()``. Adds ``credit/solve_time_s``, ``credit/adv_mean``,
    ``credit/adv_std``, ``credit/nonsingleton_frac`` (fraction of steps whose anchor was visited
    by more than one step of its group; all three over the kept steps) and
    ``credit/lost_episodes`` (the number of lost episodes) to the estimator's own metrics.
    """
    spec = get_estimator(name)
    if cfg is None:
        cfg = spec.config_cls()
    kept = batch.without_lost()
    if spec.needs_graph and graph is None:
        from agentrl.credit.graph import build_graph

        graph = build_graph(kept)
    if spec.needs_graph and graph.step_state.shape != (kept.n_steps,):
        raise ValueError(
            f"the graph has {graph.step_state.shape[0]} steps but the batch without its "
            f"{batch.n_lost} lost episodes has {kept.n_steps}: build it with "
            "build_graph(batch.without_lost())"
        )
    extra: dict[str, Any] = {}
    if spec.stateful:
        extra["state"] = state
    elif state is not None:
        raise ValueError(f"estimator {name!r} keeps no state, but a state was passed")
    if spec.needs_scorer:
        if scorer is None:
            raise ValueError(f"estimator {name!r} needs a scorer (the policy model)")
        extra["scorer"] = scorer
    if spec.critic:
        if critic is None:
            raise ValueError(f"estimator {name!r} needs a critic ({spec.critic})")
        extra["critic"] = critic
    t0 = time.perf_counter()
    if kept.n_trajs or kept is batch:
        out = spec.fn(kept, graph if spec.needs_graph else None, cfg, **extra)
    else:  # every episode was lost: nothing to assign credit to (the state stays as it was)
        out = Advantages(step=np.zeros(0), metrics={}, state=state)
    elapsed = time.perf_counter() - t0
    if out.step.shape != (kept.n_steps,):
        raise ValueError(f"{name} returned shape {out.step.shape}, expected ({kept.n_steps},)")
    if not np.all(np.isfinite(out.step)):
        raise FloatingPointError(f"{name} returned non-finite advantages")
    if spec.stateful:
        check_state(out.state, f"the state returned by {name}")
    step = out.step
    if kept is not batch:  # scatter back: lost steps get exactly 0
        step = np.zeros(batch.n_steps, dtype=np.float64)
        step[~batch.step_lost] = out.step
    metrics = {f"credit/{k}": float(v) for k, v in out.metrics.items()}
    metrics.update(step_metrics(kept, out.step))
    metrics["credit/solve_time_s"] = elapsed
    metrics["credit/lost_episodes"] = float(batch.n_lost)
    values, returns = (_scattered(a, batch, kept, name) for a in (out.values, out.returns))
    return Advantages(
        step=step,
        metrics=metrics,
        state=out.state if spec.stateful else None,
        values=values,
        returns=returns,
    )


def _scattered(
    arr: np.ndarray | None, batch: StepBatch, kept: StepBatch, name: str
) -> np.ndarray | None:
    """A per-step array of ``kept`` spread over ``batch``'s steps (0 on lost steps)."""
    if arr is None:
        return None
    arr = np.asarray(arr, dtype=np.float64)
    if arr.shape != (kept.n_steps,) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} returned values/returns that are not ({kept.n_steps},) finite")
    if kept is batch:
        return arr
    out = np.zeros(batch.n_steps, dtype=np.float64)
    out[~batch.step_lost] = arr
    return out


_LEAVES = frozenset({type(None), bool, int, float, str})


def _plain(obj: Any) -> bool:
    """Whether :func:`check_state` accepts ``obj``."""
    kind = type(obj)
    if kind in _LEAVES:
        return True
    if kind is list or kind is tuple:
        return all(type(v) in _LEAVES or _plain(v) for v in obj)
    if kind is dict:
        return all(type(k) is str for k in obj) and all(
            type(v) in _LEAVES or _plain(v) for v in obj.values()
        )
    return False


def check_state(obj: Any, path: str = "state") -> None:
    """Raise ``TypeError`` unless ``obj`` is plain data that a checkpoint can hold.

    Plain data: None, bool, int, float, str, and lists, tuples and dicts with str keys of plain
    data — what ``torch.load(weights_only=True)`` reads back exactly. numpy scalars and arrays
    are refused (convert them with ``float(x)`` / ``x.tolist()``).
    """
    if _plain(obj):  # the common case, without building the paths of the messages
        return
    if obj is None or type(obj) in (bool, int, float, str):
        return
    if type(obj) in (list, tuple):
        for i, v in enumerate(obj):
            check_state(v, f"{path}[{i}]")
        return
    if type(obj) is dict:
        for k, v in obj.items():
            if type(k) is not str:
                raise TypeError(f"{path} has the key {k!r} of type {type(k).__name__}; use str")
            check_state(v, f"{path}[{k!r}]")
        return
    raise TypeError(
        f"{path} is a {type(obj).__module__}.{type(obj).__name__}; an estimator's state must be "
        "plain data (None, bool, int, float, str, list, tuple, dict with str keys): convert "
        "numpy values with float(x) or x.tolist()"
    )


def step_metrics(batch: StepBatch, step_adv: np.ndarray) -> dict[str, float]:
    """Advantage mean/std and the non-singleton anchor fraction of a batch."""
    if batch.n_steps == 0:
        return {"credit/adv_mean": 0.0, "credit/adv_std": 0.0, "credit/nonsingleton_frac": 0.0}
    counts = np.bincount(batch.step_anchor)
    return {
        "credit/adv_mean": float(step_adv.mean()),
        "credit/adv_std": float(step_adv.std()),
        "credit/nonsingleton_frac": float((counts[batch.step_anchor] > 1).mean()),
    }


def group_mean_std(
    values: np.ndarray, groups: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group mean, unbiased std and size of ``values``, gathered back to each element.

    Args:
        values: (L,) float — one value per element.
        groups: (L,) int in [0, n_groups) — group of each element.
    Returns:
        (mean, std, count), each (L,): for groups of one element the std is 0 (callers decide
        how to treat singletons).
    """
    count = np.bincount(groups, minlength=n_groups).astype(np.float64)
    total = np.bincount(groups, weights=values, minlength=n_groups)
    safe = np.maximum(count, 1.0)
    mean = total / safe
    dev2 = np.bincount(groups, weights=(values - mean[groups]) ** 2, minlength=n_groups)
    std = np.sqrt(dev2 / np.maximum(count - 1.0, 1.0))
    return mean[groups], std[groups], count[groups]


def steps_from_end(step_traj: np.ndarray) -> np.ndarray:
    """(N,) int64 — how many steps follow each step in its trajectory (0 for the last).

    Args:
        step_traj: (N,) trajectory index; steps of a trajectory contiguous, in turn order.
    """
    n = step_traj.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    lengths = np.bincount(step_traj)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    t = np.arange(n) - starts[step_traj]
    return lengths[step_traj] - 1 - t


def discounted_returns(step_reward: np.ndarray, step_traj: np.ndarray, gamma: float) -> np.ndarray:
    """Return-to-go G_{i,t} = Σ_{k≥t} γ^{k−t} r_{i,k} within each trajectory.

    Vectorised over trajectories: one pass per distance-from-the-end (≤ the longest
    trajectory), each a numpy operation over all steps at that distance.

    Args:
        step_reward: (N,) float rewards.
        step_traj: (N,) trajectory index; steps of a trajectory contiguous, in turn order.
    Returns:
        (N,) float64 returns.
    """
    ret = np.asarray(step_reward, dtype=np.float64).copy()
    if ret.shape[0] == 0:
        return ret
    lengths = np.bincount(step_traj)
    # The last step of every trajectory, the longest first: the steps with d steps after them
    # are then ends[:longer[d]] − d, where longer[d] counts the trajectories longer than d.
    # No sort of the N steps by their distance from the end (the M lengths are sorted
    # instead): at 1M steps that sort took half the time.
    by_length = np.argsort(-lengths, kind="stable")
    ends = (np.cumsum(lengths) - 1)[by_length]
    longest = int(lengths[by_length[0]])
    longer = np.searchsorted(-lengths[by_length], -np.arange(longest), side="left")
    for d in range(1, longest):
        idx = ends[: longer[d]] - d  # steps with d steps after them
        ret[idx] += gamma * ret[idx + 1]
    return ret
