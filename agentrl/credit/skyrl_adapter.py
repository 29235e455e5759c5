"""SkyRL's advantage-estimator registry, answered by agentrl's estimators.

SkyRL (``skyrl`` on PyPI, ``NovaSky-AI/SkyRL``) picks its advantage estimator by name,
``trainer.algorithm.advantage_estimator=<name>``, from ``AdvantageEstimatorRegistry``
(``skyrl.backends.skyrl_train.utils.ppo_utils``). :func:`register_skyrl_estimators` registers
agentrl's estimators there as ``agentrl_<method>`` (``agentrl_crbc``, ``agentrl_gigpo``, …), so
that SkyRL's config check accepts the names.

A registry entry alone cannot see turns: SkyRL 0.3.0's trainer
(``RayPPOTrainer.compute_advantages_and_returns``) calls an estimator with the token-level
rewards, the response mask and the prompt uids only, and with ``step_wise_trajectories=true`` it
calls it on the *last* step of each episode and copies that one value to every turn. State keys,
actions and validity never reach it. What does reach it is anything passed as a keyword to
``ppo_utils.compute_advantages_and_returns``, which hands its ``**kwargs`` on to the estimator.
So the hook is:

1. **One row per turn.** SkyRL's own step-wise layout (``generator.step_wise_trajectories=true``,
   ``generator.merge_stepwise_output=false``): its generator emits one row per environment
   turn, in episode order, with ``trajectory_ids`` (prompt uid and repetition) and
   ``is_last_step``, and each row's reward is that turn's reward.
2. **The environment's turn log.** The environment lists its turns in
   ``get_metrics()["agentrl_turns"]``: one dict per turn, in order, with the fields of
   :func:`agentrl.credit.assign` that only it knows (``state_key``, ``action``, ``valid``,
   ``terminated``, ``truncated``, ``success``; optionally ``next_state_key``, ``costs``,
   ``rubric_reward``, ``task``, …). SkyRL's generator calls ``get_metrics()`` when an episode
   ends and stores it in ``GeneratorOutput["env_metrics"]`` of the episode's last row; the
   default ``aggregate_metrics`` drops non-numbers, so the log stays out of the logged metrics
   (an environment that overrides ``aggregate_metrics`` should skip the key too).
   The adapter adds the rest: ``group_id`` (the prompt uid), ``trajectory_id`` (uid and
   repetition), ``turn_index`` (the row's position in its episode) and ``reward`` (the row's
   reward, the sum of its token rewards; a ``reward`` in the log must agree with it).
3. **A trainer subclass** (:class:`AgentrlTrainer`, or :class:`AgentrlCreditMixin` on any
   subclass of ``RayPPOTrainer``, the fully asynchronous one included) overrides two public
   methods: ``convert_to_training_input`` keeps the records in the batch's
   ``metadata["agentrl_turns"]``, and ``compute_advantages_and_returns`` calls SkyRL's
   ``ppo_utils.compute_advantages_and_returns`` over *all* rows with ``agentrl_turns=`` the
   records, so the registered ``agentrl_<method>`` computes one advantage per turn (the
   :func:`agentrl.credit.assign` value) and spreads it over the row's response mask. Returns
   equal advantages, as SkyRL's GRPO does. Estimators other than ``agentrl_*`` run SkyRL's own
   code unchanged.

:func:`main` wires the three for SkyRL's CLI::

    python -m skyrl.train.entrypoints.main_base \\
        trainer.override_entrypoint=agentrl.credit.skyrl_adapter \\
        trainer.algorithm.advantage_estimator=agentrl_crbc \\
        generator.step_wise_trajectories=true ...

with the method's options as JSON in ``AGENTRL_CREDIT_CONFIG`` (``'{"w_step": 5.0}'``).

Versions: tested with skyrl 0.3.0 (the latest release) only. The hook relies on the trainer's
public ``convert_to_training_input`` / ``compute_advantages_and_returns`` methods, on
``ppo_utils.compute_advantages_and_returns`` passing ``**kwargs`` to the estimator, on the
step-wise ``GeneratorOutput`` fields (``trajectory_ids``, ``is_last_step``, per-row
``env_metrics``) and on ``main_base``'s ``trainer.override_entrypoint``; a release without one
of them fails with the errors below rather than giving other numbers. SkyRL 0.3.0 itself imports
only on Python >= 3.12: below that, pydantic refuses the ``typing.TypedDict`` in one of its
models (``skyrl/tinker/types.py``).

Limits: an episode cut by SkyRL at ``generator.max_input_length`` ends without the environment
finishing, so SkyRL never asks it for metrics and its turn log is missing; such an episode is
treated as *lost* (advantage 0, left out of every statistic, as agentrl treats an environment
that failed), or raises with ``unlogged="error"``. A stateful estimator's state (``tigpo``,
``bv_blend``, …) lives in the trainer process and is not saved in SkyRL's checkpoints.
``use_kl_in_reward`` (agentrl credits the environment's rewards; use ``use_kl_loss``),
``dynamic_sampling`` (it rewrites rows without their metrics) and ``merge_stepwise_output``
(one row would hold several turns) are refused at start-up.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from skyrl.backends.skyrl_train.utils import ppo_utils
from skyrl.backends.skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry
from skyrl.train.trainer import RayPPOTrainer

from agentrl.configuration import ConfigError
from agentrl.credit.estimators import get_estimator
from agentrl.credit.records import (
    RecordError,
    assign,
    options_from_environment,
    records_config,
    standalone_methods,
)

PREFIX = "agentrl_"
"""SkyRL names agentrl's estimator ``m`` as ``agentrl_m``."""
TURNS_KEY = "agentrl_turns"
"""The key of the turn log in the environment's ``get_metrics()`` and of the records in the
training batch's ``metadata``."""
ADAPTER_FIELDS = ("group_id", "trajectory_id", "turn_index")
"""Record fields the adapter sets from SkyRL's rows; a turn log must not give them."""
CONFIG_ENV = "AGENTRL_CREDIT_CONFIG"
"""Environment variable with the method's options (a JSON object) for :func:`main`."""


def skyrl_name(method: str) -> str:
    """The SkyRL estimator name of agentrl's ``method``: ``"crbc"`` -> ``"agentrl_crbc"``."""
    return PREFIX + method


def agentrl_method(name: str) -> str | None:
    """agentrl's method behind SkyRL estimator ``name``, or None when it is not an agentrl one."""
    return name[len(PREFIX) :] if isinstance(name, str) and name.startswith(PREFIX) else None


def usable_methods() -> list[str]:
    """agentrl estimators SkyRL's rows can feed: no learned critic, no rollout driver of their
    own, no rescoring with the policy model."""
    return standalone_methods()


# ------------------------------------------------------------------------------ records


def _row_reward(reward: Any, row: int) -> float:
    """One row's reward: SkyRL gives a float or a list of per-token rewards (summed)."""
    if isinstance(reward, (list, tuple, np.ndarray, torch.Tensor)):
        total = float(sum(float(x) for x in reward))
    elif isinstance(reward, numbers.Real) and not isinstance(reward, bool):
        total = float(reward)
    else:
        raise RecordError(f"row {row}: rewards[{row}] must be a number or a list, got {reward!r}")
    if not math.isfinite(total):
        raise RecordError(f"row {row}: its reward {total!r} is not finite")
    return total


def _trajectory_key(tid: Any, row: int) -> tuple[Hashable, tuple[Hashable, Hashable]]:
    """(group id, trajectory id) of SkyRL's ``TrajectoryID`` (instance_id, repetition_id)."""
    try:
        instance, repetition = tid.instance_id, tid.repetition_id
    except AttributeError:
        raise RecordError(
            f"row {row}: trajectory_ids[{row}] must be a TrajectoryID (instance_id, "
            f"repetition_id), got {tid!r}"
        ) from None
    return instance, (instance, repetition)


def _spans(is_last_step: Sequence[Any], tids: Sequence[Any]) -> list[tuple[int, int]]:
    """[start, end) rows of each episode: contiguous rows up to and including a last step."""
    spans, start, seen = [], 0, set()
    for row, last in enumerate(is_last_step):
        if not isinstance(last, (bool, np.bool_)):
            raise RecordError(f"row {row}: is_last_step[{row}] must be true or false, got {last!r}")
        _, traj = _trajectory_key(tids[row], row)
        _, first = _trajectory_key(tids[start], start)
        if traj != first:
            raise RecordError(
                f"row {row} belongs to trajectory {traj!r} but the episode that began at row "
                f"{start} ({first!r}) has not ended (no is_last_step): an episode's turns must be "
                "consecutive rows ending with is_last_step=True"
            )
        if last:
            if traj in seen:
                raise RecordError(
                    f"trajectory {traj!r} appears again at rows {start}..{row}: an episode's "
                    "turns must be consecutive rows"
                )
            seen.add(traj)
            spans.append((start, row + 1))
            start = row + 1
    if start != len(is_last_step):
        raise RecordError(
            f"rows {start}..{len(is_last_step) - 1} end without is_last_step=True: the output "
            "holds part of an episode"
        )
    return spans


def skyrl_turn_records(
    generator_output: Mapping[str, Any], *, unlogged: Literal["lost", "error"] = "lost"
) -> list[dict[str, Any]]:
    """The records of :func:`agentrl.credit.assign` for a step-wise SkyRL ``GeneratorOutput``.

    Args:
        generator_output: SkyRL's ``GeneratorOutput`` with N rows, one per turn
            (``generator.step_wise_trajectories=true``): ``response_ids``, ``rewards``,
            ``trajectory_ids``, ``is_last_step`` and ``env_metrics``, whose last row per episode
            holds the turn log under ``"agentrl_turns"`` (see the module docstring).
        unlogged: what an episode without a turn log becomes: ``"lost"`` (advantage 0, left
            out of the statistics; SkyRL cut it at ``max_input_length``) or ``"error"``.
    Returns:
        N records, row by row.
    Raises:
        RecordError: the output is not step-wise or breaks the layout; the message names the
            row, the trajectory and the field.
    """
    if unlogged not in ("lost", "error"):
        raise ConfigError(f"unlogged={unlogged!r} must be one of ['lost', 'error']")
    if not isinstance(generator_output, Mapping):
        raise RecordError(f"generator_output must be a mapping, got {type(generator_output)}")
    for key in ("trajectory_ids", "is_last_step"):
        if generator_output.get(key) is None:
            raise RecordError(
                f"the generator output has no {key!r}: agentrl's estimators need one row per "
                "turn, SkyRL's step-wise layout (set generator.step_wise_trajectories=true)"
            )
    n = len(generator_output["response_ids"])
    columns = ("rewards", "trajectory_ids", "is_last_step", "env_metrics")
    for key in columns:
        values = generator_output.get(key)
        if values is None or len(values) != n:
            got = "missing" if values is None else f"{len(values)} long"
            raise RecordError(
                f"generator output {key!r} is {got}, expected one entry per row ({n})"
            )
    tids, metrics = generator_output["trajectory_ids"], generator_output["env_metrics"]
    records: list[dict[str, Any]] = []
    for start, end in _spans(generator_output["is_last_step"], tids):
        group, traj = _trajectory_key(tids[start], start)
        rewards = [_row_reward(generator_output["rewards"][r], r) for r in range(start, end)]
        for r in range(start, end - 1):
            if isinstance(metrics[r], Mapping) and TURNS_KEY in metrics[r]:
                raise RecordError(
                    f"row {r} (trajectory {traj!r}) has a turn log but is not its episode's last "
                    "row: the log belongs in get_metrics(), which SkyRL calls when the episode ends"
                )
        last = metrics[end - 1]
        log = last.get(TURNS_KEY) if isinstance(last, Mapping) else None
        if log is None:
            if unlogged == "error":
                raise RecordError(
                    f"trajectory {traj!r} (rows {start}..{end - 1}) has no turn log: its "
                    f"environment's get_metrics() must return {{{TURNS_KEY!r}: [one dict per "
                    "turn]}} (SkyRL leaves it out when it cuts an episode at max_input_length)"
                )
            records += _unlogged(group, traj, rewards)
            continue
        if isinstance(log, (str, bytes, Mapping)) or not isinstance(log, Sequence):
            raise RecordError(
                f"trajectory {traj!r}: env_metrics[{end - 1}][{TURNS_KEY!r}] must be a list with "
                f"one dict per turn, got {type(log).__name__}"
            )
        if len(log) != end - start:
            raise RecordError(
                f"trajectory {traj!r} has {end - start} rows (rows {start}..{end - 1}) but its "
                f"turn log has {len(log)} entries: one row per turn is needed (is "
                "generator.merge_stepwise_output on?)"
            )
        for t, (entry, reward) in enumerate(zip(log, rewards)):
            records.append(_record(entry, group, traj, t, reward, start + t))
    return records


def _record(
    entry: Any, group: Hashable, traj: Hashable, t: int, reward: float, row: int
) -> dict[str, Any]:
    """One turn's record: the environment's entry plus the ids, index and reward of its row."""
    at = f"row {row} (trajectory {traj!r}, turn {t})"
    if not isinstance(entry, Mapping):
        raise RecordError(f"{at}: a turn log entry must be a dict, got {type(entry).__name__}")
    clash = [k for k in ADAPTER_FIELDS if k in entry]
    if clash:
        raise RecordError(
            f"{at}: the turn log gives {clash}, which the adapter sets from SkyRL's rows "
            "(group = prompt uid, trajectory = uid and repetition, turn = position)"
        )
    logged = entry.get("reward")
    if logged is not None:
        ok = isinstance(logged, numbers.Real) and not isinstance(logged, bool)
        if not ok or not math.isclose(float(logged), reward, rel_tol=1e-6, abs_tol=1e-6):
            raise RecordError(
                f"{at}: the turn log's reward is {logged!r} but SkyRL's row has {reward!r} "
                "(the log and the rows are out of step, or generator.zero_reward_on_non_stop "
                "changed the reward)"
            )
    return {**entry, "group_id": group, "trajectory_id": traj, "turn_index": t, "reward": reward}


def _unlogged(group: Hashable, traj: Hashable, rewards: list[float]) -> list[dict[str, Any]]:
    """Placeholder records of an episode without a turn log: lost, so credit leaves it out."""
    n = len(rewards)
    return [
        {
            "group_id": group,
            "trajectory_id": traj,
            "turn_index": t,
            "state_key": ("agentrl-unlogged", traj, t),
            "action": None,
            "valid": True,
            "terminated": False,
            "truncated": t == n - 1,
            "success": False,
            "reward": r,
            "lost": True,
        }
        for t, r in enumerate(rewards)
    ]


# ------------------------------------------------------------------------------ estimator


@dataclass(frozen=True)
class SkyRLSettings:
    """How a registered ``agentrl_<method>`` turns SkyRL's rows into credit."""

    method: str = "graphgpo"
    """A registered agentrl estimator (:func:`usable_methods`)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The estimator's options (its config fields, as ``algo.<key>`` in an agentrl run)."""
    allow_mixed_versions: bool = False
    """Accept turn logs whose ``policy_version`` differ (SkyRL's fully asynchronous trainer)."""
    unlogged: Literal["lost", "error"] = "lost"
    """An episode without a turn log: ``lost`` (advantage 0) or ``error``."""

    def __post_init__(self) -> None:
        if self.unlogged not in ("lost", "error"):
            raise ConfigError(f"unlogged={self.unlogged!r} must be one of ['lost', 'error']")
        if not isinstance(self.options, Mapping):
            raise ConfigError(f"options must be a mapping of option names, got {self.options!r}")
        records_config(self.method, self.options)  # unknown method or option: fail here


class SkyRLEstimator:
    """SkyRL's estimator signature, answered by ``assign``: ``est(token_level_rewards=,
    response_mask=, index=, agentrl_turns=, **kwargs) -> (advantages, returns)``.

    Registered by :func:`register_skyrl_estimators`; Ray pickles it into SkyRL's trainer
    process, where it keeps a stateful estimator's :attr:`state` from one call to the next and
    the last call's :attr:`metrics`.
    """

    def __init__(self, settings: SkyRLSettings):
        self.settings = settings
        self.state: Any = None
        self.metrics: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"SkyRLEstimator({self.settings!r})"

    def turn_advantages(self, records: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """(N,) float64 — one advantage per record (row), what :func:`assign` gives them; the
        state and metrics are updated."""
        s = self.settings
        out = assign(
            list(records),
            s.method,
            state=self.state,
            allow_mixed_versions=s.allow_mixed_versions,
            sort_ids=False,  # keep SkyRL's row order: the numbers follow its layout
            **dict(s.options),
        )
        if get_estimator(s.method).stateful:
            self.state = out.state
        self.metrics = out.metrics
        return out.advantages

    def __call__(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any] | np.ndarray | None = None,
        agentrl_turns: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-turn advantages on SkyRL's (B, T) token grid.

        Args:
            token_level_rewards: (B, T) float — read for its shape and dtype only; each turn's
                reward is in its record.
            response_mask: (B, T) — the response tokens of each row.
            index: (B,) prompt uids; row i must belong to the group of record i.
            agentrl_turns: N ≤ B records, row by row (:func:`skyrl_turn_records`); rows N..B−1
                are SkyRL's padding and get 0.
            **kwargs: SkyRL's other arguments (``config``, ``gamma``, ``values``, …), unused:
                the method's options come from the settings.
        Returns:
            (advantages, returns): (B, T) in the rewards' dtype, the turn's advantage on each of
            its response tokens; returns equal advantages.
        """
        name = skyrl_name(self.settings.method)
        if agentrl_turns is None:
            raise ValueError(
                f"advantage estimator {name!r} needs the per-turn records (agentrl_turns=), which "
                "SkyRL's stock trainer does not pass: train with "
                "agentrl.credit.skyrl_adapter.AgentrlTrainer (or its mixin), e.g. "
                "trainer.override_entrypoint=agentrl.credit.skyrl_adapter"
            )
        if token_level_rewards.ndim != 2 or response_mask.shape != token_level_rewards.shape:
            raise ValueError(
                f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
                f"{tuple(response_mask.shape)} must both be (B, T)"
            )
        b, n = token_level_rewards.shape[0], len(agentrl_turns)
        if n > b:
            raise RecordError(f"{n} records for {b} rows: at most one record per row")
        if index is not None:
            if len(index) != b:
                raise RecordError(f"index has {len(index)} uids for {b} rows")
            for i, rec in enumerate(agentrl_turns):
                if isinstance(rec, Mapping) and str(index[i]) != str(rec.get("group_id")):
                    raise RecordError(
                        f"row {i} has uid {index[i]!r} but its record is in group "
                        f"{rec.get('group_id')!r}: the records and rows are out of step"
                    )
        adv = torch.zeros(b, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
        if n:
            turn = self.turn_advantages(agentrl_turns)
            adv[:n] = torch.as_tensor(turn, dtype=adv.dtype, device=adv.device)
        advantages = adv[:, None] * response_mask.to(adv.dtype)  # (B, T)
        return advantages, advantages


def register_skyrl_estimators(
    methods: Iterable[str] | None = None,
    *,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    allow_mixed_versions: bool = False,
    unlogged: Literal["lost", "error"] = "lost",
    replace: bool = False,
) -> list[str]:
    """Register agentrl's estimators in SkyRL's ``AdvantageEstimatorRegistry``.

    Call it in the driver before ``ray.init`` (SkyRL's ``initialize_ray`` then copies the
    registry to its named Ray actor, where the trainer process finds it).

    Args:
        methods: agentrl methods to register (default: every one of :func:`usable_methods`).
        options: per-method options, ``{"crbc": {"w_step": 5.0}}``.
        allow_mixed_versions, unlogged: see :class:`SkyRLSettings`.
        replace: replace names already registered with other settings (otherwise that raises).
    Returns:
        The SkyRL names registered, ``["agentrl_crbc", …]``.
    Raises:
        ConfigError / ValueError: an unknown method or option, a method SkyRL's rows cannot
            feed, options for a method not registered, or a name taken.
    """
    chosen = usable_methods() if methods is None else list(methods)
    if isinstance(methods, str):
        raise ConfigError(f"methods must be a list of names, got the string {methods!r}")
    options = dict(options or {})
    stray = sorted(set(options) - set(chosen))
    if stray:
        raise ConfigError(f"options for {stray}, which are not among the methods {chosen}")
    settings = [
        SkyRLSettings(m, dict(options.get(m, {})), allow_mixed_versions, unlogged) for m in chosen
    ]
    names = []
    for s in settings:
        name = skyrl_name(s.method)
        if name in AdvantageEstimatorRegistry.list_available():
            old = AdvantageEstimatorRegistry.get(name)
            if isinstance(old, SkyRLEstimator) and old.settings == s:
                names.append(name)  # registering twice with the same settings is harmless
                continue
            if not replace:
                raise ValueError(
                    f"SkyRL already has an advantage estimator {name!r} ({old!r}); pass "
                    "replace=True to replace it"
                )
            AdvantageEstimatorRegistry.unregister(name)
        AdvantageEstimatorRegistry.register(name, SkyRLEstimator(s))
        names.append(name)
    return names


# ------------------------------------------------------------------------------ trainer


def check_skyrl_config(cfg: Any) -> None:
    """Refuse SkyRL settings that an ``agentrl_*`` estimator cannot work with (nothing to check
    for SkyRL's own estimators).

    Raises:
        ConfigError: the message names the setting and its fix.
    """
    name = cfg.trainer.algorithm.advantage_estimator
    if agentrl_method(name) is None:
        return
    if name not in AdvantageEstimatorRegistry.list_available():
        raise ConfigError(
            f"trainer.algorithm.advantage_estimator={name} is not registered: call "
            "agentrl.credit.skyrl_adapter.register_skyrl_estimators() before SkyRL starts "
            f"(agentrl's names: {[skyrl_name(m) for m in usable_methods()]})"
        )
    wrong = [
        (
            not cfg.generator.step_wise_trajectories,
            "generator.step_wise_trajectories=true",
            "agentrl's estimators give one advantage per turn, so they need one row per turn",
        ),
        (
            cfg.generator.merge_stepwise_output,
            "generator.merge_stepwise_output=false",
            "merging puts several turns in one row",
        ),
        (
            cfg.trainer.algorithm.use_kl_in_reward,
            "trainer.algorithm.use_kl_in_reward=false",
            "agentrl credits the environment's rewards; use trainer.algorithm.use_kl_loss",
        ),
        (
            cfg.trainer.algorithm.dynamic_sampling.type is not None,
            "trainer.algorithm.dynamic_sampling.type=null",
            "dynamic sampling rewrites rows without their turn logs",
        ),
    ]
    for bad, fix, why in wrong:
        if bad:
            raise ConfigError(f"advantage_estimator={name} needs {fix}: {why}")


class AgentrlCreditMixin:
    """Put before SkyRL's ``RayPPOTrainer`` (or a subclass) in the bases: keeps the per-turn
    records with the batch and hands them to a registered ``agentrl_*`` estimator."""

    cfg: Any
    all_metrics: dict[str, Any]

    def convert_to_training_input(self, generator_output: Any, uids: list[str]) -> Any:
        """SkyRL's conversion, plus ``metadata["agentrl_turns"]``: one record per row."""
        data = super().convert_to_training_input(generator_output, uids)  # type: ignore[misc]
        name = self.cfg.trainer.algorithm.advantage_estimator
        method = agentrl_method(name)
        if method is not None:
            check_skyrl_config(self.cfg)
            estimator = AdvantageEstimatorRegistry.get(name)
            unlogged = (
                estimator.settings.unlogged if isinstance(estimator, SkyRLEstimator) else "lost"
            )
            data.metadata[TURNS_KEY] = skyrl_turn_records(generator_output, unlogged=unlogged)
        return data

    @torch.no_grad()
    def compute_advantages_and_returns(self, data: Any) -> Any:
        """SkyRL's step for its own estimators; for ``agentrl_*`` one call over every row with
        the records, then SkyRL's advantage metrics."""
        algo = self.cfg.trainer.algorithm
        name = algo.advantage_estimator
        if agentrl_method(name) is None:
            return super().compute_advantages_and_returns(data)  # type: ignore[misc]
        records = data.metadata.pop(TURNS_KEY, None)
        if records is None:
            raise RecordError(
                f"the batch has no metadata[{TURNS_KEY!r}]: it was not built by "
                "AgentrlCreditMixin.convert_to_training_input"
            )
        rewards = data["rewards"]
        advantages, returns = ppo_utils.compute_advantages_and_returns(
            token_level_rewards=rewards,
            response_mask=data["response_mask"],
            index=np.array(data.metadata["uids"]),
            adv_estimator=name,
            config=algo,
            values=data["values"],
            gamma=algo.gamma,
            lambd=algo.lambd,
            grpo_norm_by_std=algo.grpo_norm_by_std,
            agentrl_turns=records,
        )
        data["advantages"], data["returns"] = advantages, returns
        self._log_advantages(data, name, len(records))
        return data

    def _log_advantages(self, data: Any, name: str, n: int) -> None:
        """SkyRL's advantage metrics (over the N real rows), plus the estimator's own."""
        rewards, mask = data["rewards"][:n], data["response_mask"][:n].bool()
        last = torch.tensor(data.metadata.get("is_last_step", [True] * n)[:n], dtype=torch.bool)
        avg_reward = rewards[last].sum(dim=-1).mean().item() if last.any() else 0.0
        valid = torch.masked_select(data["advantages"][:n].cpu(), mask.cpu())
        mean = valid.mean().item() if valid.numel() else 0.0
        mean_abs = valid.abs().mean().item() if valid.numel() else 0.0
        data.metadata.setdefault("metrics", {}).update(
            {
                "avg_final_rewards": avg_reward,
                "avg_response_length": data.metadata.get("avg_response_length"),
                "avg_advantages": mean,
                "avg_advantages_abs": mean_abs,
            }
        )
        self.all_metrics.update(
            {
                "loss/avg_final_rewards": avg_reward,
                "loss/avg_raw_advantages": mean,
                "loss/avg_raw_advantages_abs": mean_abs,
            }
        )
        estimator = AdvantageEstimatorRegistry.get(name)
        for key, value in getattr(estimator, "metrics", {}).items():
            self.all_metrics[f"agentrl/{key}"] = value


class AgentrlTrainer(AgentrlCreditMixin, RayPPOTrainer):
    """SkyRL's ``RayPPOTrainer`` with agentrl's per-turn credit for ``agentrl_*`` estimators."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        check_skyrl_config(self.cfg)  # fail at start-up, not after the first rollout


# ------------------------------------------------------------------------------ entry point


def _options_from_environment() -> dict[str, Any]:
    return options_from_environment(CONFIG_ENV)


def run_experiment(cfg: Any) -> None:
    """SkyRL's experiment with :class:`AgentrlTrainer` (what :func:`main` runs on a Ray worker)."""
    method = agentrl_method(cfg.trainer.algorithm.advantage_estimator)
    if method is not None:  # a fresh worker process: register here too (same settings)
        register_skyrl_estimators([method], options={method: _options_from_environment()})
    # main_base switches multiprocessing to "spawn" when imported: only here, in SkyRL's process.
    from skyrl.train.entrypoints.main_base import BasePPOExp

    class AgentrlPPOExp(BasePPOExp):
        def get_trainer(
            self,
            cfg: Any,
            tracker: Any,
            tokenizer: Any,
            train_dataset: Any,
            eval_dataset: Any,
            inference_engine_client: Any,
            generator: Any,
            colocate_pg: Any,
        ) -> AgentrlTrainer:
            return AgentrlTrainer(
                cfg=cfg,
                tracker=tracker,
                tokenizer=tokenizer,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                inference_engine_client=inference_engine_client,
                generator=generator,
                colocate_pg=colocate_pg,
            )

    AgentrlPPOExp(cfg).run()


def main(argv: Sequence[str] | None = None) -> None:
    """SkyRL's ``main_base`` with agentrl's credit: ``python -m skyrl.train.entrypoints.main_base
    trainer.override_entrypoint=agentrl.credit.skyrl_adapter <SkyRL overrides>`` (or
    ``python -m agentrl.credit.skyrl_adapter <SkyRL overrides>``).

    Registers the configured ``agentrl_<method>`` with the options in ``AGENTRL_CREDIT_CONFIG``,
    checks the config (SkyRL's checks and :func:`check_skyrl_config`), starts Ray and runs
    SkyRL's experiment with :class:`AgentrlTrainer`.
    """
    import ray
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.utils import validate_cfg
    from skyrl.train.utils.utils import initialize_ray

    args = [a for a in (sys.argv[1:] if argv is None else argv)]
    args = [a for a in args if not a.startswith("trainer.override_entrypoint=")]
    cfg = SkyRLTrainConfig.from_cli_overrides(args)
    method = agentrl_method(cfg.trainer.algorithm.advantage_estimator)
    if method is not None:
        register_skyrl_estimators([method], options={method: _options_from_environment()})
    check_skyrl_config(cfg)
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(ray.remote(num_cpus=1)(run_experiment).remote(cfg))


if __name__ == "__main__":
    # Through the module's import name, so that Ray pickles its functions by reference.
    from agentrl.credit.skyrl_adapter import main as _main

    _main()
