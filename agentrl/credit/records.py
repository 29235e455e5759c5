"""Credit for another trainer's episodes: per-turn records in, one advantage per record out.

:func:`assign` is the framework-free entry point to agentrl's estimators. A trainer that plays
its own episodes (verl, SkyRL, Relax, a custom loop) hands over one *record* per environment
turn; ``assign`` checks the records, rebuilds the episodes exactly as agentrl's rollout records
them (:class:`~agentrl.credit.batch.TrajectoryGroup` of :class:`~agentrl.credit.batch.Trajectory`
of :class:`~agentrl.credit.batch.Step`) and runs the trainer's own Credit stage
(:class:`~agentrl.credit.stage.CreditStage`) on them. The advantages are therefore agentrl's
numbers by construction, not a re-implementation of them.

A record is a mapping with these fields (extra fields are ignored, so records may carry the
other trainer's own bookkeeping):

Required:

- ``group_id`` (hashable): the group of rollouts of one task that group-based estimators
  compare (GRPO's group; agentrl's task group).
- ``trajectory_id`` (hashable): the episode; unique across groups.
- ``turn_index`` (int): 0, 1, …, T−1 within the episode, without gaps.
- ``state_key`` (hashable): the state the turn acted in (agentrl's *anchor*). Turns of one group
  with equal keys are the same state for step-level estimators (GiGPO, GraphGPO, CRBC, …).
  Unhashable keys (lists, arrays) become tuples.
- ``action`` (str or None): the executed action, as canonical text; every invalid turn counts as
  the one action ``"<invalid>"``.
- ``valid`` (bool): the response was a valid action.
- ``terminated`` (bool): the episode reached a true end of its task at this turn.
- ``truncated`` (bool): the episode was cut at this turn (step limit, failure). Only the last
  turn may be terminated or truncated, and it must be one of them: records hold whole episodes.
- ``success`` (bool): the episode solved its task; the same on all its turns.
- ``reward`` (float): the turn's reward, invalid-action penalties included; or, instead,
- ``episode_return`` (float): the episode's return, the same on all its turns. Without ``reward``
  it becomes the last turn's reward (0 on the others); with it, it must equal the sum of the
  episode's rewards.

Optional:

- ``next_state_key`` (hashable): the state after the turn; when given it must equal the next
  turn's ``state_key``. A check only: estimators read the next turn's ``state_key``.
- ``policy_version`` (hashable): the policy that sampled the turn; one version per call unless
  ``allow_mixed_versions=True``.
- ``costs`` (mapping of str to float ≥ 0): named step costs (``steps``, ``invalid``, …) for
  ``constrained_grpo`` or GraphGPO's ``edge_cost``.
- ``rubric_reward`` (float): the turn's process reward, kept apart from ``reward`` (``trca``).
- ``logprob`` (float): the mean token log-prob of the response at sampling (``gaca``).
- ``prompt``, ``response`` (str): the user message the policy answered and the text it generated
  (``tigpo``; estimators that rescore responses).
- ``lost`` (bool): the environment failed at this turn; the episode is left out of credit and
  gets advantage 0.
- ``task`` (str): the task's instruction. Estimators that keep statistics across calls
  (``bv_blend``, ``basis``, ``tigpo``) pool groups by it; the same on all turns of a group;
  default ``str(group_id)``.
- ``task_type`` (str): a task category; when given, the pooling key instead of ``task``.
- ``score`` (float): the environment's own grade of the episode (partial-credit diagnostics).
- ``final_observation``, ``final_prompt`` (str): the observation and the user message after the
  last turn (estimators that rescore responses).

``task_type``, ``score``, ``final_observation`` and ``final_prompt`` are read from an episode's
last turn. A missing optional value may be ``None`` (or NaN for numbers: how dataframes store
gaps).

Records come as a list of mappings or as columns: a mapping of equal-length sequences or numpy
arrays, a pandas ``DataFrame`` or a pyarrow ``Table`` (read through their own ``to_dict`` /
``to_pydict``; neither library is imported, let alone required).

Order: groups are ordered by ``group_id`` and the episodes of a group by ``trajectory_id``
when those ids are all integers or all strings, so the numbers do not depend on the order of the
rows; other ids (or ``sort_ids=False``) keep their order of first appearance. It matters because
estimators are invariant to the order only up to floating-point rounding and tie-breaking.
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
import numbers
import os
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl.credit.batch import Step, Trajectory, TrajectoryGroup
from agentrl.credit.estimators import Scorer, estimator_config, get_estimator
from agentrl.credit.stage import CreditStage

REQUIRED_FIELDS = (
    "group_id",
    "trajectory_id",
    "turn_index",
    "state_key",
    "action",
    "valid",
    "terminated",
    "truncated",
    "success",
)
"""Fields every record must have (plus ``reward`` or ``episode_return``)."""
OPTIONAL_FIELDS = (
    "reward",
    "episode_return",
    "next_state_key",
    "policy_version",
    "costs",
    "rubric_reward",
    "logprob",
    "prompt",
    "response",
    "lost",
    "task",
    "task_type",
    "score",
    "final_observation",
    "final_prompt",
)
"""Fields a record may have; see the module docstring."""


class RecordError(ValueError):
    """Records that break the contract; the message names the record and the field."""


@dataclass(frozen=True, eq=False)  # eq on arrays is ambiguous
class Assigned:
    """What :func:`assign` returns; a pair: ``advantages, metrics = assign(...)``.

    Attributes:
        advantages: (N,) float64 — one advantage per record, in the input's row order.
        metrics: the Credit stage's ``credit/`` and ``diag/`` metrics of the batch.
        state: a stateful estimator's new state (plain data), to pass as ``state=`` to the
            next call; None for stateless estimators.
    """

    advantages: np.ndarray
    metrics: dict[str, float]
    state: Any = None

    # A pair, not a triple: most estimators keep no state, and callers that want it read
    # ``.state``.
    def __iter__(self) -> Iterator[Any]:
        return iter((self.advantages, self.metrics))

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> Any:
        return (self.advantages, self.metrics)[i]


@dataclass(frozen=True)
class _Turn:
    """One parsed record (internal)."""

    row: int
    group: Hashable
    traj: Hashable
    t: int
    state: Hashable
    next_state: Hashable | None
    action: str | None
    valid: bool
    terminated: bool
    truncated: bool
    success: bool
    reward: float | None
    episode_return: float | None
    version: Hashable | None
    costs: dict[str, float] | None
    rubric: float | None
    logprob: float | None
    prompt: str
    response: str
    lost: bool
    task: str | None
    task_type: str | None
    score: float | None
    final_obs: str
    final_prompt: str

    @property
    def where(self) -> str:
        return f"record {self.row} (trajectory {self.traj!r}, turn {self.t})"


def assign(
    records: Any,
    method: str,
    *,
    state: Any = None,
    scorer: Scorer | None = None,
    allow_mixed_versions: bool = False,
    sort_ids: bool = True,
    **config: Any,
) -> Assigned:
    """Advantages of estimator ``method`` for per-turn ``records`` (N of them).

    Args:
        records: N records (see the module docstring for the fields): a sequence of mappings,
            a mapping of N-long columns, a pandas DataFrame or a pyarrow Table.
        method: a registered estimator (:func:`agentrl.credit.list_estimators`), e.g.
            ``"grpo"``, ``"gigpo"``, ``"graphgpo"``, ``"crbc"``.
        state: a stateful estimator's state from the previous call (``Assigned.state``; None
            the first time). Stateful estimators (``bv_blend``, ``basis``,
            ``constrained_grpo``, ``tigpo``) learn across calls; passing nothing starts afresh.
        scorer: the policy model's rescoring (:class:`~agentrl.credit.Scorer`) for estimators
            that need one (``relace``, ``hcapo``); records then need ``prompt`` and
            ``response``.
        allow_mixed_versions: accept records sampled by different policy versions.
        sort_ids: order groups and episodes by their ids (see the module docstring).
        **config: the estimator's options (its config dataclass, as ``algo.<key>`` in a run).

    Returns:
        :class:`Assigned`: (N,) float64 advantages in the input's row order, the metrics, the
        new state.

    Raises:
        RecordError: a record breaks the contract (the message names the record and field).
        ConfigError: unknown estimator or option.
        ValueError: the estimator needs what records cannot give (a learned critic, its own
            rollout driver) or a scorer that was not passed.
    """
    cfg = records_config(method, config, scorer)
    spec = get_estimator(method)
    if state is not None and not spec.stateful:
        raise ValueError(f"estimator {method!r} keeps no state, but state= was passed")
    turns = [_parse(i, rec) for i, rec in enumerate(_rows(records))]
    if not turns:
        return Assigned(np.zeros(0, dtype=np.float64), {}, state)
    _check_versions(turns, allow_mixed_versions)
    groups, order = _episodes(turns, sort_ids)
    stage = CreditStage(method, cfg, scorer=scorer)
    stage.state = state
    credited = stage.assign(groups)
    adv = np.empty(len(turns), dtype=np.float64)
    adv[np.asarray(order, dtype=np.int64)] = credited.advantages.step
    return Assigned(adv, dict(credited.metrics), stage.state if spec.stateful else None)


def standalone_methods() -> list[str]:
    """Registered estimators that per-turn records alone can feed: no learned critic, no rollout
    driver of their own, no rescoring with the policy model (what the trainer adapters
    register)."""
    from agentrl.credit.estimators import list_estimators

    out = []
    for name in list_estimators():
        spec = get_estimator(name)
        if not (spec.critic or spec.driver or spec.needs_scorer):
            out.append(name)
    return out


def options_from_environment(var: str) -> dict[str, Any]:
    """Estimator options from the JSON object in environment variable ``var`` (unset or empty:
    none), for hooks that another trainer calls without arguments.

    Raises:
        ConfigError: the value is not JSON, or not an object.
    """
    from agentrl.configuration import ConfigError

    raw = os.environ.get(var, "") or "{}"
    try:
        options = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{var}={raw!r} is not JSON: {exc}") from None
    if not isinstance(options, dict):
        raise ConfigError(f"{var}={raw!r} must be a JSON object of options")
    return options


def records_config(method: str, config: Mapping[str, Any], scorer: Scorer | None = None) -> Any:
    """The config of estimator ``method`` with options ``config``, after checking that records
    can feed it (what :func:`assign` checks first; adapters call it to fail at start-up).

    Raises:
        ConfigError: unknown estimator or option.
        ValueError: the estimator samples its own rollouts, needs a learned critic, or needs a
            scorer and ``scorer`` is None.
    """
    spec = get_estimator(method)
    if spec.driver:
        raise ValueError(
            f"estimator {method!r} samples its own rollouts (driver {spec.driver}): it cannot "
            "assign credit to episodes another trainer played"
        )
    if spec.critic:
        raise ValueError(
            f"estimator {method!r} needs a learned value function ({spec.critic}) that agentrl's "
            "trainer trains alongside the policy; records alone cannot provide it"
        )
    if spec.needs_scorer and scorer is None:
        raise ValueError(
            f"estimator {method!r} rescores responses with the policy model: pass scorer=, an "
            "object with score(contexts, responses) -> (n,) mean token log-probs, and give the "
            "records 'prompt' and 'response'"
        )
    return estimator_config(method, config)


# ------------------------------------------------------------------------------ rows


def _rows(records: Any) -> list[Mapping]:
    """The records as a list of mappings, whatever container they came in."""
    if hasattr(records, "to_pydict"):  # pyarrow.Table / RecordBatch
        return _columns_to_rows(records.to_pydict())
    if hasattr(records, "to_dict") and hasattr(records, "columns"):  # pandas.DataFrame
        return _columns_to_rows(records.to_dict(orient="list"))
    if isinstance(records, Mapping):
        return _columns_to_rows(records)
    if isinstance(records, (str, bytes)) or not isinstance(records, Sequence):
        raise RecordError(
            f"records must be a list of mappings or a mapping of columns, got "
            f"{type(records).__name__}"
        )
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise RecordError(f"record {i} is a {type(rec).__name__}, not a mapping of fields")
    return list(records)


def _columns_to_rows(columns: Mapping) -> list[dict]:
    """Columns (name → N values) as N row dicts; numpy arrays become Python values."""
    cols: dict[str, list] = {}
    for name, values in columns.items():
        if isinstance(values, np.ndarray):
            values = values.tolist()  # Python scalars (object arrays keep their objects)
        elif isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise RecordError(
                f"column {name!r} is a {type(values).__name__}, not a sequence with one value "
                "per record"
            )
        cols[str(name)] = list(values)
    lengths = {name: len(v) for name, v in cols.items()}
    if len(set(lengths.values())) > 1:
        raise RecordError(f"columns have different lengths: {lengths}")
    n = next(iter(lengths.values()), 0)
    return [{name: v[i] for name, v in cols.items()} for i in range(n)]


# ------------------------------------------------------------------------------ one record


def _plain(v: Any) -> Any:
    """numpy scalars and arrays as Python values (columns and dataframes hand out numpy)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def _absent(v: Any) -> bool:
    """A missing optional value: None, or NaN (how dataframes store gaps)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def _freeze(v: Any) -> Any:
    """An unhashable key (a list, say, from a dataframe column) as a hashable one."""
    v = _plain(v)
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, Mapping):
        return tuple(sorted((str(k), _freeze(x)) for k, x in v.items()))
    if isinstance(v, set):
        return frozenset(_freeze(x) for x in v)
    return v


class _Fields:
    """Typed access to one record's fields, errors naming the record and the field."""

    def __init__(self, row: int, rec: Mapping):
        self.row, self.rec, self.where = row, rec, f"record {row}"

    def fail(self, name: str, what: str) -> RecordError:
        return RecordError(f"{self.where}: field {name!r} {what}")

    def get(self, name: str) -> Any:
        return _plain(self.rec.get(name))

    def key(self, name: str, optional: bool = False) -> Hashable | None:
        v = self.get(name)
        if optional and _absent(v):
            return None
        try:
            hash(v)
            return v  # hashable keys are kept as given, so estimators see the same objects
        except TypeError:
            pass
        frozen = _freeze(v)
        try:
            hash(frozen)
        except TypeError:
            raise self.fail(name, f"must be hashable, got {v!r}") from None
        return frozen

    def boolean(self, name: str, default: bool | None = None) -> bool:
        v = self.get(name)
        if default is not None and _absent(v):
            return default
        if not isinstance(v, bool):
            raise self.fail(name, f"must be true or false, got {v!r}")
        return v

    def number(self, name: str, optional: bool = True) -> float | None:
        v = self.get(name)
        if _absent(v):
            if optional:
                return None
            raise self.fail(name, "is missing")
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise self.fail(name, f"must be a number, got {v!r}")
        if not math.isfinite(v):
            raise self.fail(name, f"must be finite, got {v!r}")
        return float(v)

    def text(self, name: str) -> str | None:
        v = self.get(name)
        if _absent(v):
            return None
        if not isinstance(v, str):
            raise self.fail(name, f"must be a string, got {v!r}")
        return v


def _parse(row: int, rec: Mapping) -> _Turn:
    """Check one record's fields and types."""
    missing = [f for f in REQUIRED_FIELDS if f not in rec]
    if missing:
        extra = [k for k in map(str, rec) if k not in REQUIRED_FIELDS + OPTIONAL_FIELDS]
        hints = [
            f" Is {m[0]!r} a misspelling of {f!r}?"
            for f in missing
            if (m := difflib.get_close_matches(f, extra, n=1, cutoff=0.6))
        ]
        raise RecordError(
            f"record {row} lacks the required fields {missing} (it has {sorted(map(str, rec))})."
            + "".join(hints)
        )
    f = _Fields(row, rec)
    t = f.get("turn_index")
    if isinstance(t, bool) or not isinstance(t, int) or t < 0:
        raise f.fail("turn_index", f"must be an integer >= 0, got {t!r}")
    traj = f.key("trajectory_id")
    f.where = f"record {row} (trajectory {traj!r}, turn {t})"
    for name in ("group_id", "trajectory_id", "state_key"):
        if _absent(f.get(name)):
            raise f.fail(name, "is missing (None)")
    action = f.get("action")
    action = None if _absent(action) else action
    if action is not None and not isinstance(action, str):
        raise f.fail("action", f"must be a string (or None for an invalid turn), got {action!r}")
    return _Turn(
        row=row,
        group=f.key("group_id"),
        traj=traj,
        t=t,
        state=f.key("state_key"),
        next_state=f.key("next_state_key", optional=True),
        action=action,
        valid=f.boolean("valid"),
        terminated=f.boolean("terminated"),
        truncated=f.boolean("truncated"),
        success=f.boolean("success"),
        reward=f.number("reward"),
        episode_return=f.number("episode_return"),
        version=f.key("policy_version", optional=True),
        costs=_costs(f),
        rubric=f.number("rubric_reward"),
        logprob=f.number("logprob"),
        prompt=f.text("prompt") or "",
        response=f.text("response") or "",
        lost=f.boolean("lost", default=False),
        task=f.text("task"),
        task_type=f.text("task_type"),
        score=f.number("score"),
        final_obs=f.text("final_observation") or "",
        final_prompt=f.text("final_prompt") or "",
    )


def _costs(f: _Fields) -> dict[str, float] | None:
    raw = f.get("costs")
    if _absent(raw):
        return None
    if not isinstance(raw, Mapping):
        raise f.fail("costs", f"must be a mapping of cost names to numbers, got {raw!r}")
    out = {}
    for k, v in raw.items():
        v = _plain(v)
        if _absent(v):  # a columnar store fills a name other rows report with a gap: cost 0
            continue
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
        if not isinstance(k, str) or not ok or v < 0:
            raise f.fail("costs", f"has the entry {k!r}: {v!r}; costs are str -> finite >= 0")
        out[k] = float(v)
    return out


# ------------------------------------------------------------------------------ episodes


def _check_versions(turns: Sequence[_Turn], allow_mixed: bool) -> None:
    """One policy version per call: estimators compare rollouts of the same policy."""
    first: dict[Hashable | None, _Turn] = {}
    for turn in turns:
        first.setdefault(turn.version, turn)
    if len(first) > 1 and not allow_mixed:
        seen = ", ".join(f"{v!r} at {t.where}" for v, t in list(first.items())[:4])
        raise RecordError(
            f"the records mix policy versions ({seen}); group statistics compare rollouts of "
            "one policy. Pass allow_mixed_versions=True to accept off-policy records "
            "(None means the record gives no version)."
        )


def _ordered(keys: list, sort_ids: bool) -> list:
    """``keys`` (in first-appearance order) sorted when they are all ints or all strings."""
    if sort_ids and keys:
        kinds = {type(k) for k in keys}
        if kinds == {int} or kinds == {str}:
            return sorted(keys)
    return keys


def _episode(turns: list[_Turn]) -> list[float]:
    """Check one episode's turns (sorted by turn index) and return its per-turn rewards."""
    for a, b in itertools.pairwise(turns):
        if a.t == b.t:
            raise RecordError(
                f"records {a.row} and {b.row} are both turn {a.t} of trajectory {a.traj!r}: "
                "each (trajectory_id, turn_index) must appear once"
            )
    indices = [x.t for x in turns]
    if indices != list(range(len(turns))):
        gap = next(i for i, t in enumerate(indices) if t != i)
        raise RecordError(
            f"trajectory {turns[0].traj!r} has turn indices {indices}: they must be 0, 1, …, "
            f"T−1 without gaps (turn {gap} is missing)"
        )
    head = turns[0]
    for x in turns[1:]:
        if x.group != head.group:
            raise RecordError(
                f"trajectory {head.traj!r} is in group {head.group!r} at {head.where} but in "
                f"group {x.group!r} at {x.where}: an episode belongs to one group (trajectory "
                "ids must be unique across groups)"
            )
        for name, attr in (("success", "success"), ("episode_return", "episode_return")):
            if getattr(x, attr) != getattr(head, attr):
                raise RecordError(
                    f"{x.where}: field {name!r} is {getattr(x, attr)!r} but "
                    f"{getattr(head, attr)!r} at {head.where}; it must be the same on every turn "
                    "of an episode"
                )
    for a, b in itertools.pairwise(turns):
        if a.terminated or a.truncated:
            raise RecordError(
                f"{a.where} ends the episode (terminated or truncated) but turn {b.t} follows "
                f"(record {b.row}): only the last turn may end an episode"
            )
        if a.next_state is not None and a.next_state != b.state:
            raise RecordError(
                f"{a.where}: field 'next_state_key' is {a.next_state!r} but the next turn "
                f"(record {b.row}) has state_key {b.state!r}; the chain of states is broken"
            )
    last = turns[-1]
    if not (last.terminated or last.truncated):
        raise RecordError(
            f"{last.where} is the last turn of its episode but neither terminated nor truncated: "
            "records must hold whole episodes (mark an episode that was cut off truncated)"
        )
    rewards = [x.reward for x in turns if x.reward is not None]
    if len(rewards) == len(turns):
        ret = head.episode_return
        if ret is not None and not math.isclose(sum(rewards), ret, rel_tol=1e-9, abs_tol=1e-9):
            raise RecordError(
                f"trajectory {head.traj!r}: field 'episode_return' is {ret!r} but its rewards "
                f"sum to {sum(rewards)!r}"
            )
        return rewards
    if head.episode_return is not None and not rewards:
        # The return alone: credited at the end, where outcome-reward trainers put it.
        return [0.0] * (len(turns) - 1) + [head.episode_return]
    bad = next(x for x in turns if x.reward is None)
    raise RecordError(
        f"{bad.where} has no 'reward': give every turn of an episode a reward, or give none "
        "and an 'episode_return'"
    )


def _episodes(turns: list[_Turn], sort_ids: bool) -> tuple[list[TrajectoryGroup], list[int]]:
    """Checked records as agentrl's groups, and the row of each step in batch order."""
    by_traj: dict[Hashable, list[_Turn]] = {}
    for turn in turns:
        by_traj.setdefault(turn.traj, []).append(turn)
    by_group: dict[Hashable, list[Hashable]] = {}
    rewards: dict[Hashable, list[float]] = {}
    for traj, ts in by_traj.items():
        ts.sort(key=lambda x: x.t)
        rewards[traj] = _episode(ts)
        by_group.setdefault(ts[0].group, []).append(traj)
    groups, order = [], []
    for gi, g in enumerate(_ordered(list(by_group), sort_ids)):
        tasks: dict[str, _Turn] = {}  # each task text and the first record that gives it
        for traj in by_group[g]:
            for x in by_traj[traj]:
                if x.task is not None:
                    tasks.setdefault(x.task, x)
        if len(tasks) > 1:
            (a, x), (b, y) = list(tasks.items())[:2]
            raise RecordError(
                f"group {g!r} has task {a!r} at {x.where} but {b!r} at {y.where}: a group holds "
                "rollouts of one task"
            )
        trajectories = []
        for traj in _ordered(by_group[g], sort_ids):
            ts = by_traj[traj]
            steps = [
                Step(
                    prompt_ids=[],
                    response_ids=[],
                    # The batch reads the mean token log-prob only (as the stage's gathered
                    # inputs keep it): one value stands for the response's tokens.
                    logprobs=[] if x.logprob is None else [x.logprob],
                    reward=r,
                    terminated=x.terminated,
                    truncated=x.truncated,
                    anchor=x.state,
                    action=x.action,
                    valid=x.valid,
                    response_text=x.response,
                    prompt_text=x.prompt,
                    lost=x.lost,
                    costs=x.costs,
                    rubric_reward=x.rubric,
                )
                for x, r in zip(ts, rewards[traj])
            ]
            last = ts[-1]
            trajectories.append(
                Trajectory(
                    steps=steps,
                    won=last.success,
                    final_obs=last.final_obs,
                    final_prompt=last.final_prompt,
                    task_type=last.task_type,
                    score=last.score,
                )
            )
            order.extend(x.row for x in ts)
        task = next(iter(tasks), None)
        groups.append(
            TrajectoryGroup(
                task=str(g) if task is None else task, seed=gi, trajectories=trajectories
            )
        )
    return groups, order
