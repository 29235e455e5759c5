"""Relax's custom-advantage hook, answered by agentrl's estimators.

Relax (``redai-infra/Relax``) lets a run replace its advantage computation with a Python
function named by ``--agentic-custom-advantage-path module.func``. Relax calls it once per
rollout group (the n sessions of one prompt) after all of them finished, and never during
evaluation, with one argument, ``metadata_by_slot``: a list with one dict per session (slot),
mapping each export the agent wrote (one JSONL record in ``RELAX_OUTPUT_JSON``) to that record's
free-form ``metadata``. Tokens, log-probs, rewards and masks are not passed. The function returns
a list aligned with the slots, each a dict with the same export names and one advantage per
export (here always a scalar, which Relax gives every assistant turn of that export), or None to
drop the group. The hook replaces Relax's reward post-processing, group normalisation included;
agentrl's estimators normalise on their own, and ``--normalize-advantages`` still applies after.

The layout read here is the per-turn one of Relax's GraphGPO example: every environment turn is
an export of its own, named ``turn_000``, ``turn_001``, … (``turn_{turn_index:03d}``), whose
metadata holds

- ``row_id``: hashable, unique within the group;
- ``rollout_group_id``, ``policy_version``: the same on every turn of the call (one policy
  version unless ``allow_mixed_versions``);
- ``task_id``: one per group (agentrl's group id, and the task key estimators that learn
  across groups pool by, unless a ``task`` text is given);
- ``trajectory_id``: one per slot, unique across slots;
- ``turn_index`` (int ≥ 0, contiguous from 0), ``state_key``, ``next_state_key`` (hashable; the
  next state of turn t must be the state of turn t + 1), ``action`` (str);
- ``is_action_valid``, ``success``, ``terminal``, ``truncated`` (bool; ``success`` the same on
  all turns of a slot; only the last turn ends the episode);
- ``episode_return`` (float, the same on all turns of a slot);
- ``cost`` (optional float > 0, default 1): the edge cost of the turn; it becomes the step cost
  named ``cost``, which GraphGPO uses with ``edge_cost="cost"``.

Relax's records carry no per-turn reward: each turn's reward is rebuilt as the GraphGPO example
defines the return, ``success_reward`` on the last turn of a successful episode and
``−invalid_penalty`` on every invalid turn (10·success − 0.1·#invalid with the defaults), and the
declared ``episode_return`` must match it. Metadata with a per-turn ``reward`` (for every turn of
a slot) uses it instead. Metadata may also carry any optional field of
:func:`agentrl.credit.assign` (``prompt``, ``response``, ``logprob``, ``rubric_reward``, ``task``,
``task_type``, ``score``, ``lost``, ``costs``, …); they are passed on as they are.

Usage: in a module of your own, build the hook with the method and its options::

    from agentrl.credit.relax import make_relax_advantage

    advantage = make_relax_advantage("crbc", group_size=8, w_step=5.0)

and run Relax with ``--agentic-custom-advantage-path my_module.advantage``. The ready-made
:func:`relax_advantage` reads the method from the environment variable ``AGENTRL_CREDIT_ALGO``
(default ``graphgpo``) and its options from ``AGENTRL_CREDIT_CONFIG`` (a JSON object).
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.configuration import ConfigError
from agentrl.credit.estimators import Scorer, get_estimator
from agentrl.credit.records import (
    OPTIONAL_FIELDS,
    RecordError,
    assign,
    options_from_environment,
    records_config,
)

RELAX_REQUIRED = (
    "row_id",
    "rollout_group_id",
    "policy_version",
    "task_id",
    "trajectory_id",
    "turn_index",
    "state_key",
    "next_state_key",
    "action",
    "is_action_valid",
    "success",
    "terminal",
    "truncated",
    "episode_return",
)
"""Metadata fields every turn export must have."""
# Relax's metadata names the other fields itself (mapped below); these pass through as given.
_MAPPED = ("episode_return", "next_state_key", "policy_version")
PASSED_ON = tuple(f for f in OPTIONAL_FIELDS if f not in _MAPPED)
"""Optional record fields (see :mod:`agentrl.credit.records`) taken from the metadata as given."""
_TURN_NAME = re.compile(r"turn_(\d{3,})")
ALGO_ENV, CONFIG_ENV = "AGENTRL_CREDIT_ALGO", "AGENTRL_CREDIT_CONFIG"
"""Environment variables that configure :func:`relax_advantage`."""


@dataclass(frozen=True)
class RelaxSettings:
    """How the hook turns one Relax group into credit."""

    method: str = "graphgpo"
    """A registered estimator (:func:`agentrl.credit.list_estimators`)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The estimator's options (its config fields, as ``algo.<key>`` in an agentrl run)."""
    group_size: int | None = None
    """The number of slots every call must have (Relax's example expects 8); None: any."""
    success_reward: float = 10.0
    """Reward of the last turn of a successful episode when rewards are rebuilt."""
    invalid_penalty: float = 0.1
    """Reward of an invalid turn when rewards are rebuilt (subtracted)."""
    allow_mixed_versions: bool = False
    """Accept a group whose turns name different ``policy_version`` values."""

    def __post_init__(self) -> None:
        if self.group_size is not None and (
            isinstance(self.group_size, bool)
            or not isinstance(self.group_size, int)
            or self.group_size < 1
        ):
            raise ConfigError(f"group_size={self.group_size!r} must be an integer >= 1 or None")
        for name in ("success_reward", "invalid_penalty"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ConfigError(f"{name}={v!r} must be a finite number")


def relax_records(
    metadata_by_slot: Sequence[Mapping[str, Mapping[str, Any]]], settings: RelaxSettings
) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """One Relax group as records for :func:`agentrl.credit.assign`.

    Args:
        metadata_by_slot: S slots, each mapping its turn exports (``turn_000``, …) to their
            metadata (the fields in the module docstring).
        settings: the group size to expect and how to rebuild rewards.
    Returns:
        (records, where): N records, slot by slot and in turn order within a slot, and the
        (slot, export name) of each.
    Raises:
        RecordError: the group breaks the layout; the message names the slot and the export.
    """
    if isinstance(metadata_by_slot, (str, bytes)) or not isinstance(metadata_by_slot, Sequence):
        raise RecordError(
            f"metadata_by_slot must be a list of per-slot dicts, got {type(metadata_by_slot)}"
        )
    size = settings.group_size
    if size is not None and len(metadata_by_slot) != size:
        raise RecordError(f"the group has {len(metadata_by_slot)} slots, expected {size}")
    records: list[dict[str, Any]] = []
    where: list[tuple[int, str]] = []
    first: dict[str, tuple[Any, str]] = {}  # field -> (value, where) for once-per-call fields
    rows: dict[Hashable, str] = {}
    trajs: dict[Hashable, int] = {}
    with_cost = any(
        isinstance(m, Mapping) and m.get("cost") is not None
        for slot in metadata_by_slot
        if isinstance(slot, Mapping)
        for m in slot.values()
    )
    for s, slot in enumerate(metadata_by_slot):
        if not isinstance(slot, Mapping) or not slot:
            raise RecordError(f"slot {s} must be a non-empty dict of turn exports, got {slot!r}")
        turns = []
        for name, meta in slot.items():
            at = f"slot {s} export {name!r}"
            if not isinstance(meta, Mapping):
                raise RecordError(f"{at}: its metadata must be a dict, got {type(meta).__name__}")
            missing = [f for f in RELAX_REQUIRED if f not in meta]
            if missing:
                raise RecordError(f"{at} lacks the metadata fields {missing}")
            t = meta["turn_index"]
            match = _TURN_NAME.fullmatch(name) if isinstance(name, str) else None
            if isinstance(t, bool) or not isinstance(t, int) or match is None:
                raise RecordError(
                    f"{at}: turn exports are named turn_{{turn_index:03d}} with an integer "
                    f"turn_index, got turn_index {t!r}"
                )
            if int(match.group(1)) != t or name != f"turn_{t:03d}":
                raise RecordError(f"{at} has turn_index {t}: it must be named 'turn_{t:03d}'")
            turns.append((t, name, meta, at))
        turns.sort(key=lambda x: x[0])
        traj = turns[0][2]["trajectory_id"]
        for _, name, meta, at in turns:
            _check_types(meta, at)
            if meta["trajectory_id"] != traj:
                raise RecordError(
                    f"{at} has trajectory_id {meta['trajectory_id']!r} but the slot's first turn "
                    f"has {traj!r}: a slot is one trajectory"
                )
            if meta["row_id"] in rows:
                raise RecordError(
                    f"{at} repeats row_id {meta['row_id']!r} of {rows[meta['row_id']]}"
                )
            rows[meta["row_id"]] = at
            for key in ("rollout_group_id", "task_id") + (
                () if settings.allow_mixed_versions else ("policy_version",)
            ):
                value, at0 = first.setdefault(key, (meta[key], at))
                if meta[key] != value:
                    raise RecordError(
                        f"{at} has {key} {meta[key]!r} but {at0} has {value!r}: one call holds "
                        "one rollout group of one task and one policy version"
                    )
            records.append(_record(meta, at, turns, with_cost, settings))
            where.append((s, name))
        if traj in trajs:
            raise RecordError(f"trajectory_id {traj!r} is in slots {trajs[traj]} and {s}")
        trajs[traj] = s
    return records, where


def _check_types(meta: Mapping[str, Any], at: str) -> None:
    """The identity fields are hashable and the flags bool (the rebuilt reward reads them)."""
    for key in ("row_id", "rollout_group_id", "policy_version", "task_id", "trajectory_id"):
        try:
            hash(meta[key])
        except TypeError:
            raise RecordError(f"{at}: {key} {meta[key]!r} must be hashable") from None
    for key in ("is_action_valid", "success", "terminal", "truncated"):
        if not isinstance(meta[key], bool):
            raise RecordError(f"{at}: {key} must be true or false, got {meta[key]!r}")


def _record(
    meta: Mapping[str, Any],
    at: str,
    turns: list[tuple[int, str, Mapping[str, Any], str]],
    with_cost: bool,
    settings: RelaxSettings,
) -> dict[str, Any]:
    """The :func:`~agentrl.credit.assign` record of one turn export (a field rename, the rebuilt
    reward and the edge cost)."""
    rec = {k: meta[k] for k in PASSED_ON if k in meta}
    rec.update(
        group_id=meta["task_id"],
        trajectory_id=meta["trajectory_id"],
        turn_index=meta["turn_index"],
        state_key=meta["state_key"],
        next_state_key=meta["next_state_key"],
        action=meta["action"],
        valid=meta["is_action_valid"],
        terminated=meta["terminal"],
        truncated=meta["truncated"],
        success=meta["success"],
        episode_return=meta["episode_return"],
        policy_version=meta["policy_version"],
    )
    if not isinstance(meta["action"], str):
        raise RecordError(f"{at}: action must be a string, got {meta['action']!r}")
    if with_cost:
        cost = meta.get("cost", 1.0)
        cost = 1.0 if cost is None else cost
        ok = isinstance(cost, numbers.Real) and not isinstance(cost, bool)
        if not (ok and math.isfinite(cost) and cost > 0):
            raise RecordError(f"{at}: cost must be a finite number > 0, got {cost!r}")
        rec["costs"] = {**(meta.get("costs") or {}), "cost": float(cost)}
    if not all("reward" in m for _, _, m, _ in turns):
        rec["reward"] = _rebuilt_reward(meta, at, turns, settings)
    return rec


def _rebuilt_reward(
    meta: Mapping[str, Any],
    at: str,
    turns: list[tuple[int, str, Mapping[str, Any], str]],
    settings: RelaxSettings,
) -> float:
    """The turn's reward under the GraphGPO example's return, checked against the declared
    ``episode_return`` (once per slot, at its last turn)."""
    last = meta is turns[-1][2]
    reward = 0.0 if meta["is_action_valid"] else -settings.invalid_penalty
    if last and meta["success"]:
        reward += settings.success_reward
    if last:
        n_invalid = sum(not m["is_action_valid"] for _, _, m, _ in turns)
        built = settings.success_reward * meta["success"] - (settings.invalid_penalty * n_invalid)
        declared = meta["episode_return"]
        ok = isinstance(declared, numbers.Real) and not isinstance(declared, bool)
        if not ok or not math.isclose(float(declared), built, rel_tol=1e-9, abs_tol=1e-9):
            raise RecordError(
                f"{at}: episode_return {declared!r} is not {settings.success_reward}·success − "
                f"{settings.invalid_penalty}·#invalid = {built!r}; set success_reward and "
                "invalid_penalty to the agent's reward, or give every turn a 'reward'"
            )
    return reward


class RelaxAdvantage:
    """The hook: ``hook(metadata_by_slot) -> list[dict[str, float]]`` (Relax's signature).

    Built by :func:`make_relax_advantage`, which checks the method and its options at start-up
    rather than at the first group. A stateful estimator's state lives in :attr:`state` and
    carries over from one group to the next within this process (Relax calls the hook once per
    group); :attr:`metrics` holds the last group's metrics. It never answers None (Relax's
    "drop this group"): a group that breaks the layout raises :class:`RecordError` instead, so
    that malformed exports surface rather than silently shrinking the batch.
    """

    def __init__(self, settings: RelaxSettings, scorer: Scorer | None = None):
        records_config(settings.method, settings.options, scorer)  # fail at start-up
        self.settings, self.scorer = settings, scorer
        self.state: Any = None
        self.metrics: dict[str, float] = {}

    def __call__(
        self, metadata_by_slot: Sequence[Mapping[str, Mapping[str, Any]]]
    ) -> list[dict[str, float]]:
        """One advantage per turn export of one Relax group: S dicts, aligned with the slots."""
        records, where = relax_records(metadata_by_slot, self.settings)
        try:
            out = assign(
                records,
                self.settings.method,
                state=self.state,
                scorer=self.scorer,
                allow_mixed_versions=self.settings.allow_mixed_versions,
                sort_ids=False,  # keep the slots' order: the numbers follow Relax's layout
                **dict(self.settings.options),
            )
        except RecordError as exc:
            raise RecordError(_located(str(exc), where)) from exc
        if get_estimator(self.settings.method).stateful:
            self.state = out.state
        self.metrics = out.metrics
        result: list[dict[str, float]] = [{} for _ in metadata_by_slot]
        for (s, name), a in zip(where, out.advantages.tolist()):
            result[s][name] = float(a)
        return result


def _located(message: str, where: list[tuple[int, str]]) -> str:
    """``message`` with its record numbers translated to Relax's slots and exports."""
    hits = re.findall(r"\brecords? (\d+)(?: and (\d+))?", message)
    rows = sorted({int(n) for pair in hits for n in pair if n})
    found = [
        f"record {r} is slot {where[r][0]} export {where[r][1]!r}" for r in rows if r < len(where)
    ]
    return f"{message} ({'; '.join(found)})" if found else message


def make_relax_advantage(
    method: str = "graphgpo",
    *,
    group_size: int | None = None,
    success_reward: float = 10.0,
    invalid_penalty: float = 0.1,
    allow_mixed_versions: bool = False,
    scorer: Scorer | None = None,
    **options: Any,
) -> RelaxAdvantage:
    """A Relax custom-advantage hook computing estimator ``method`` with ``options``.

    Args:
        method: a registered estimator that needs no learned critic and no rollout driver.
        group_size: the number of slots to expect per call (None: any).
        success_reward, invalid_penalty: the reward rebuilt for turns without a ``reward``
            (see the module docstring).
        allow_mixed_versions: accept turns of different policy versions in one group.
        scorer: for estimators that rescore responses (the exports then need ``prompt`` and
            ``response``).
        **options: the estimator's options.
    Raises:
        ConfigError / ValueError: unknown method or option, or a method records cannot feed.
    """
    settings = RelaxSettings(
        method, dict(options), group_size, success_reward, invalid_penalty, allow_mixed_versions
    )
    return RelaxAdvantage(settings, scorer)


_DEFAULT: RelaxAdvantage | None = None


def relax_advantage(
    metadata_by_slot: Sequence[Mapping[str, Mapping[str, Any]]],
) -> list[dict[str, float]]:
    """The ready-made hook (``--agentic-custom-advantage-path
    agentrl.credit.relax.relax_advantage``), configured by the environment.

    ``AGENTRL_CREDIT_ALGO`` names the method (default ``graphgpo``) and ``AGENTRL_CREDIT_CONFIG``
    holds its options as a JSON object (default ``{}``). They are read at the first call; the
    hook built then (and a stateful estimator's state) serves every later call of the process.
    """
    global _DEFAULT
    if _DEFAULT is None:
        options = options_from_environment(CONFIG_ENV)
        _DEFAULT = make_relax_advantage(os.environ.get(ALGO_ENV) or "graphgpo", **options)
    return _DEFAULT(metadata_by_slot)
