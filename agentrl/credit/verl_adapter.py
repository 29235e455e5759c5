"""verl's advantage step, answered by agentrl's step-level estimators.

verl (``volcengine/verl``) picks its advantage estimator by name, ``algorithm.adv_estimator``,
from a registry in ``verl.trainer.ppo.core_algos`` (``register_adv_est`` /
``get_adv_estimator_fn``). This module registers every agentrl estimator that per-turn records
can feed (no learned critic, no rollout driver, no rescoring model) there as
``agentrl_<method>``: ``agentrl_crbc``, ``agentrl_gigpo``, ``agentrl_graphgpo``, … Rows of the
batch are environment turns (one row per turn, as verl-agent's trainer and verl's multi-output
agent loops lay them out); each turn's advantage comes from :func:`agentrl.credit.assign` on the
batch's per-turn fields and is broadcast over that row's response tokens (``advantages`` =
``returns`` = the turn's advantage × ``response_mask``, as verl's GRPO and verl-agent's GiGPO
fill them).

**Why a registry entry is not enough, and the hook.** ``compute_advantage``
(``verl/trainer/ppo/ray_trainer.py``) hands a registered estimator only ``token_level_rewards``,
``response_mask``, ``config``, ``index`` (the ``uid`` column) and ``reward_baselines``; the
non-tensor batch, where the turns' trajectory ids, states and actions live, reaches GDPO alone.
The hook makes the per-turn fields of the very batch being credited visible to the registered
estimator for the length of one advantage step (a context variable, checked against the
``index`` the estimator receives), then runs verl's own advantage step unchanged. It comes in
two forms:

- :func:`compute_advantage`, a drop-in for ``verl.trainer.ppo.ray_trainer.compute_advantage``
  with the same signature, for trainers that call that function on a ``DataProto`` whose
  ``non_tensor_batch`` carries the per-turn fields: verl's legacy ``RayPPOTrainer``
  (``trainer.use_v1=False``), the ``experimental`` one-step-off-policy and fully-async trainers,
  or a fork such as verl-agent's trainer; import this one in its place. Other estimator names go
  to verl's function untouched.
- The v1 trainer (``trainer.use_v1=True``, the default in verl 0.9) picks its trainer class by
  name from a registry (``verl.trainer.ppo.v1.register_trainer``, ``trainer.v1.trainer_mode``).
  :func:`register_trainers` adds ``agentrl_sync``, ``agentrl_colocate_async`` and
  ``agentrl_separate_async``: verl's three trainers with a ``_compute_advantage`` that first
  reads each row's ``extra_fields`` (what the agent loop put in ``AgentLoopOutput.extra_fields``)
  from TransferQueue, then runs the parent's advantage step. A TransferQueue key
  ``{uid}_{session}_{index}`` gives the group (``uid``), the trajectory (``{uid}_{session}``)
  and the turn index (``index``, when the agent loop emits one output per turn) unless
  ``extra_fields`` names them.

An ``agentrl_<method>`` estimator called by verl's plain ``compute_advantage``, outside the hook,
raises :class:`RuntimeError` naming the hook: crediting from the tensors alone would silently
turn a step-level method into an outcome-level one.

**Versions**, read from each release's source (the tests run against 0.9.1):
``register_adv_est``, ``get_adv_estimator_fn`` and ``compute_advantage`` have the signatures used
here from verl 0.5.0 to 0.9.1, so the registry entries and the drop-in cover 0.5–0.9.1; the v1
trainer, its trainer registry and its ``_compute_advantage(batch, metrics)`` exist in 0.9.0 and
0.9.1 (with verl's ``TransferQueue`` extra installed).

**Registering.** Importing this module registers the estimators (and, when verl's v1 trainer
imports, the trainers). verl imports it in every process when told to: agentrl declares it in
the ``verl.plugins`` entry-point group, which ``import verl`` loads (verl ≥ 0.9;
``VERL_USE_EXTERNAL_PLUGINS=none`` turns that off, and verl logs a plugin that fails to import
at debug level only), and ``VERL_USE_EXTERNAL_MODULES=agentrl.credit.verl_adapter`` does the
same from verl 0.6. Either makes ``import verl`` also import verl's trainer modules (the v1
trainers are subclassed at import), a few seconds more per process.

**Per-turn fields.** The non-tensor columns are the fields of :mod:`agentrl.credit.records`
under the same names, except the group, read from ``uid`` (verl's GRPO group), and the
trajectory, read from ``traj_uid`` (verl-agent's name); ``columns=`` renames any of them
(``{"state_key": "anchor_obs", "valid": "is_action_valid"}`` for verl-agent's names). The
turn's reward comes from the ``reward`` or ``episode_return`` column (``reward_source="fields"``,
the default) or from the row's token rewards summed over its response: ``"token_return"`` takes
that sum as the episode's return (verl 0.9.1's v1 agent loop copies the final output's score to
every output of a session), ``"token_turn"`` as the turn's own reward. With ``"fields"``,
verl's in-reward KL penalty (``algorithm.use_kl_in_reward``) does not enter agentrl's
advantages; use the actor's KL loss instead.

**Options in a verl config.** The estimator's options and the settings above go under
``algorithm.agentrl`` (added with Hydra's ``+``)::

    algorithm.adv_estimator=agentrl_graphgpo trainer.v1.trainer_mode=agentrl_sync
    +algorithm.agentrl.options.omega=0.5 +algorithm.agentrl.reward_source=token_return

A stateful estimator (``bv_blend``, ``basis``, ``constrained_grpo``, ``tigpo``) keeps its state
in the process across advantage steps; it is not part of verl's checkpoints.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import json
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage as verl_compute_advantage

from agentrl.configuration import ConfigError
from agentrl.credit.estimators import Scorer, get_estimator
from agentrl.credit.records import (
    OPTIONAL_FIELDS,
    REQUIRED_FIELDS,
    Assigned,
    RecordError,
    assign,
    records_config,
    standalone_methods,
)

PREFIX = "agentrl_"
"""verl estimator names are ``agentrl_<method>``."""
DEFAULT_COLUMNS: Mapping[str, str] = {"group_id": "uid", "trajectory_id": "traj_uid"}
"""Record fields whose column is not named after the field (verl's and verl-agent's names)."""
RECORD_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS
RewardSource = Literal["fields", "token_return", "token_turn"]
_REWARD_SOURCES = ("fields", "token_return", "token_turn")
_CONFIG_KEYS = ("options", "columns", "reward_source", "allow_mixed_versions")


@dataclass(frozen=True)
class VerlCreditSettings:
    """How one verl batch becomes per-turn records and credit."""

    method: str = "graphgpo"
    """A registered agentrl estimator (:func:`agentrl.credit.list_estimators`)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The estimator's options (its config fields, as ``algo.<key>`` in an agentrl run)."""
    columns: Mapping[str, str] = field(default_factory=dict)
    """Record field -> non-tensor column, over :data:`DEFAULT_COLUMNS` and the field names."""
    reward_source: RewardSource = "fields"
    """Where a turn's reward comes from (see the module docstring)."""
    allow_mixed_versions: bool = False
    """Accept a batch whose turns name different ``policy_version`` values."""

    def __post_init__(self) -> None:
        if not isinstance(self.options, Mapping):
            raise ConfigError(f"options={self.options!r} must be a mapping of estimator options")
        if not isinstance(self.columns, Mapping):
            raise ConfigError(f"columns={self.columns!r} must map record fields to column names")
        for name, col in self.columns.items():
            if name not in RECORD_FIELDS:
                raise ConfigError(
                    f"columns names the record field {name!r}; record fields are "
                    f"{list(RECORD_FIELDS)}"
                )
            if not isinstance(col, str):
                raise ConfigError(f"columns[{name!r}]={col!r} must be a column name (str)")
        if self.reward_source not in _REWARD_SOURCES:
            raise ConfigError(
                f"reward_source={self.reward_source!r}; valid choices are {list(_REWARD_SOURCES)}"
            )
        if not isinstance(self.allow_mixed_versions, bool):
            raise ConfigError(f"allow_mixed_versions={self.allow_mixed_versions!r} must be a bool")

    def column(self, name: str) -> str:
        """The non-tensor column that holds record field ``name``."""
        return self.columns.get(name, DEFAULT_COLUMNS.get(name, name))

    @classmethod
    def from_algorithm_config(cls, method: str, config: Any) -> VerlCreditSettings:
        """Settings from verl's ``algorithm`` config: its ``agentrl`` entry, if any."""
        raw = _plain(config.get("agentrl") if config is not None else None) or {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"algorithm.agentrl={raw!r} must be a mapping")
        unknown = [k for k in raw if k not in _CONFIG_KEYS]
        if unknown:
            raise ConfigError(
                f"algorithm.agentrl.{unknown[0]} is not a valid key; valid keys are "
                f"{list(_CONFIG_KEYS)} (estimator options go under algorithm.agentrl.options)"
            )
        return cls(method=method, **{k: raw[k] for k in _CONFIG_KEYS if k in raw})


def _plain(value: Any) -> Any:
    """An OmegaConf container (verl's configs) as plain Python data; anything else as is."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # verl depends on omegaconf; keep the adapter importable without it
        return value
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


# ------------------------------------------------------------------------------ batch -> records


def turn_columns(
    non_tensor: Mapping[str, Any],
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    settings: VerlCreditSettings,
) -> dict[str, list]:
    """A verl batch's turns as the columns :func:`agentrl.credit.assign` reads.

    Args:
        non_tensor: column name -> (B,) values (``DataProto.non_tensor_batch``).
        token_level_rewards: (B, L) float — verl's per-token rewards.
        response_mask: (B, L) 0/1 — the response tokens of each row.
        settings: column names and the reward source.
    Returns:
        record field -> B values, one per row (a turn).
    Raises:
        RecordError: a required column is missing or a column's length is not B.
    """
    if token_level_rewards.dim() != 2 or token_level_rewards.shape != response_mask.shape:
        raise RecordError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must both be (B, L)"
        )
    n = token_level_rewards.shape[0]
    cols: dict[str, list] = {}
    for name in RECORD_FIELDS:
        col = settings.column(name)
        if col not in non_tensor:
            continue
        values = non_tensor[col]
        values = values.tolist() if isinstance(values, np.ndarray) else list(values)
        if len(values) != n:
            raise RecordError(
                f"non-tensor column {col!r} (record field {name!r}) has {len(values)} values "
                f"but the batch has {n} rows"
            )
        cols[name] = values
    if settings.reward_source != "fields":
        # float64 sums of the response's token rewards, one per row
        sums = (token_level_rewards.double() * response_mask.double()).sum(-1).tolist()
        cols.pop("reward", None)
        cols.pop("episode_return", None)
        cols["episode_return" if settings.reward_source == "token_return" else "reward"] = sums
    wanted = [f"{settings.column(f)!r} ({f})" for f in REQUIRED_FIELDS if f not in cols]
    if "reward" not in cols and "episode_return" not in cols:
        wanted.append(
            f"{settings.column('reward')!r} or {settings.column('episode_return')!r} (or a "
            "reward_source that reads the token rewards)"
        )
    if wanted:
        raise RecordError(
            f"the batch lacks the non-tensor columns {', '.join(wanted)}; it has "
            f"{sorted(non_tensor)}. Each row is one environment turn: give it agentrl's "
            "per-turn fields (see agentrl.credit.records), renaming columns with "
            "columns={field: column}"
        )
    return cols


# ------------------------------------------------------------------------------ the estimator


class VerlCredit:
    """agentrl credit for verl batches, keeping a stateful estimator's state between calls.

    Built once per run (the method and options are checked at construction, not at the first
    batch); :attr:`state` carries a stateful estimator's state from batch to batch and
    :attr:`metrics` holds the last batch's ``credit/`` and ``diag/`` metrics.
    """

    def __init__(self, settings: VerlCreditSettings, scorer: Scorer | None = None):
        records_config(settings.method, settings.options, scorer)  # fail at start-up
        self.settings, self.scorer = settings, scorer
        self.stateful = get_estimator(settings.method).stateful
        self.state: Any = None
        self.metrics: dict[str, float] = {}

    def turn_advantages(
        self,
        non_tensor: Mapping[str, Any],
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> Assigned:
        """Per-turn advantages of one batch: (B,) float64, in row order (updates the state)."""
        cols = turn_columns(non_tensor, token_level_rewards, response_mask, self.settings)
        out = assign(
            cols,
            self.settings.method,
            state=self.state,
            scorer=self.scorer,
            allow_mixed_versions=self.settings.allow_mixed_versions,
            **dict(self.settings.options),
        )
        if self.stateful:
            self.state = out.state
        self.metrics = dict(out.metrics)
        return out

    def token_advantages(
        self,
        non_tensor: Mapping[str, Any],
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages, returns), both (B, L) in ``token_level_rewards``' dtype and device: each
        turn's advantage on its response tokens, 0 elsewhere."""
        adv = self.turn_advantages(non_tensor, token_level_rewards, response_mask).advantages
        per_row = torch.as_tensor(adv, dtype=token_level_rewards.dtype)
        per_row = per_row.to(token_level_rewards.device)
        tokens = per_row.unsqueeze(-1) * response_mask.to(token_level_rewards.dtype)  # (B, L)
        return tokens, tokens.clone()

    def __call__(self, data: DataProto) -> DataProto:
        """Fill ``data.batch['advantages']`` and ``['returns']``; metrics go to
        ``data.meta_info['agentrl_metrics']``."""
        batch = data.batch
        for key in ("token_level_rewards", "response_mask"):
            if batch is None or key not in batch.keys():  # noqa: SIM118 (TensorDict has no `in`)
                raise RecordError(
                    f"the DataProto has no batch[{key!r}]; verl's trainer sets it before the "
                    "advantage step"
                )
        adv, ret = self.token_advantages(
            data.non_tensor_batch, batch["token_level_rewards"], batch["response_mask"]
        )
        batch["advantages"], batch["returns"] = adv, ret
        data.meta_info["agentrl_metrics"] = dict(self.metrics)
        return data


def compute_agentrl_advantage(
    data: DataProto,
    method: str,
    *,
    columns: Mapping[str, str] | None = None,
    reward_source: RewardSource = "fields",
    state: Any = None,
    allow_mixed_versions: bool = False,
    scorer: Scorer | None = None,
    **options: Any,
) -> DataProto:
    """agentrl's ``method`` on a verl ``DataProto`` whose rows are turns.

    Args:
        data: B rows; ``batch`` holds ``token_level_rewards`` and ``response_mask`` (B, L);
            ``non_tensor_batch`` the per-turn fields (see the module docstring).
        method: a registered agentrl estimator, e.g. ``"crbc"``, ``"gigpo"``, ``"graphgpo"``.
        columns: record field -> column renames.
        reward_source: ``"fields"``, ``"token_return"`` or ``"token_turn"``.
        state: a stateful estimator's state from the previous batch
            (``data.meta_info['agentrl_state']`` of that call).
        allow_mixed_versions: accept turns of different ``policy_version``.
        scorer: for estimators that rescore responses (rows then need ``prompt``/``response``).
        **options: the estimator's options.
    Returns:
        ``data`` with ``batch['advantages']`` and ``batch['returns']`` (B, L) set and
        ``meta_info['agentrl_metrics']`` (and ``['agentrl_state']`` for stateful estimators).
    Raises:
        RecordError: a missing column or a turn that breaks the records contract.
        ConfigError / ValueError: unknown method or option, or one records cannot feed.
    """
    settings = VerlCreditSettings(
        method, dict(options), dict(columns or {}), reward_source, allow_mixed_versions
    )
    credit = VerlCredit(settings, scorer)
    credit.state = state
    data = credit(data)
    if credit.stateful:
        data.meta_info["agentrl_state"] = credit.state
    return data


# ------------------------------------------------------------------------------ the hook

_TURNS: contextvars.ContextVar[tuple[list, Mapping[str, Any]] | None] = contextvars.ContextVar(
    "agentrl_verl_turns", default=None
)
_CREDITS: dict[tuple[str, str], VerlCredit] = {}
"""One :class:`VerlCredit` per (estimator name, settings) in this process, so that a stateful
estimator's state lasts from one advantage step to the next."""
last_metrics: dict[str, float] = {}
"""The metrics of the last registry call in this process (the registry cannot return them)."""


def is_agentrl_estimator(name: Any) -> bool:
    """Whether verl estimator ``name`` (a str or verl's enum) is one of ours."""
    name = getattr(name, "value", name)
    return isinstance(name, str) and name.startswith(PREFIX)


@contextlib.contextmanager
def per_turn_fields(uids: Sequence[Any], non_tensor: Mapping[str, Any]) -> Iterator[None]:
    """Within this block, a registered ``agentrl_<method>`` reads the per-turn columns
    ``non_tensor`` of the batch whose ``uid`` column is ``uids`` (B values, in row order)."""
    token = _TURNS.set((list(uids), non_tensor))
    try:
        yield
    finally:
        _TURNS.reset(token)


def _credit_for(method: str, config: Any) -> VerlCredit:
    settings = VerlCreditSettings.from_algorithm_config(method, config)
    key = (method, json.dumps(_plain_settings(settings), sort_keys=True, default=repr))
    credit = _CREDITS.get(key)
    if credit is None:
        credit = _CREDITS[key] = VerlCredit(settings)
    return credit


def _plain_settings(settings: VerlCreditSettings) -> dict[str, Any]:
    return {
        "options": dict(settings.options),
        "columns": dict(settings.columns),
        "reward_source": settings.reward_source,
        "allow_mixed_versions": settings.allow_mixed_versions,
    }


def _registry_estimator(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The function registered in verl as ``name`` (= ``agentrl_<method>``)."""
    method = name[len(PREFIX) :]

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        config: Any = None,
        index: Any = None,
        **_: Any,  # reward_baselines and whatever later verl versions pass
    ) -> tuple[torch.Tensor, torch.Tensor]:
        pending = _TURNS.get()
        if pending is None:
            raise RuntimeError(
                f"algorithm.adv_estimator={name} needs each turn's trajectory, state and action, "
                "which verl's compute_advantage does not pass to a registered estimator. Run "
                "verl's v1 trainer with trainer.v1.trainer_mode=agentrl_sync (or "
                "agentrl_colocate_async / agentrl_separate_async), or call "
                "agentrl.credit.verl_adapter.compute_advantage where your trainer calls verl's "
                "compute_advantage (see agentrl.credit.verl_adapter)."
            )
        uids, non_tensor = pending
        n = token_level_rewards.shape[0]
        if index is None or len(index) != n or len(uids) != n or list(index) != uids:
            raise RecordError(
                f"{name}: the batch being credited ({n} rows) is not the one whose per-turn "
                f"fields were supplied ({len(uids)} rows, uid column "
                f"{'absent' if index is None else 'different'})"
            )
        credit = _credit_for(method, config)
        adv, ret = credit.token_advantages(non_tensor, token_level_rewards, response_mask)
        last_metrics.clear()
        last_metrics.update(credit.metrics)
        return adv, ret

    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantage"
    estimator.__doc__ = f"agentrl's {method!r} estimator, registered in verl as {name!r}."
    return estimator


def registrable_methods() -> list[str]:
    """agentrl estimators that per-turn fields alone can feed (the ones registered in verl)."""
    return standalone_methods()


_REGISTERED: dict[str, Callable[..., Any]] = {}


def register() -> list[str]:
    """Register ``agentrl_<method>`` in verl's estimator registry for every method of
    :func:`registrable_methods`; idempotent. Returns the verl names."""
    names = []
    for method in registrable_methods():
        name = PREFIX + method
        fn = _REGISTERED.setdefault(name, _registry_estimator(name))
        core_algos.register_adv_est(name)(fn)  # raises if another function holds the name
        names.append(name)
    return names


def compute_advantage(
    data: DataProto,
    adv_estimator: Any,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> DataProto:
    """Drop-in for ``verl.trainer.ppo.ray_trainer.compute_advantage`` (same signature): an
    ``agentrl_<method>`` estimator reads ``data.non_tensor_batch``'s per-turn fields; every other
    estimator is verl's, untouched. Metrics land in ``data.meta_info['agentrl_metrics']``."""
    if not is_agentrl_estimator(adv_estimator):
        return verl_compute_advantage(
            data, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config
        )
    if "uid" not in data.non_tensor_batch:
        raise RecordError(
            f"{adv_estimator}: the batch has no non-tensor 'uid' column (verl's group id)"
        )
    with per_turn_fields(data.non_tensor_batch["uid"], data.non_tensor_batch):
        data = verl_compute_advantage(
            data, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo, config
        )
    data.meta_info["agentrl_metrics"] = dict(last_metrics)
    return data


# ------------------------------------------------------------------------------ v1 trainers


def v1_turn_columns(keys: Sequence[str], extra_fields: Sequence[Any]) -> dict[str, list]:
    """The per-turn columns of a v1 batch: each row's agent-loop ``extra_fields`` (a dict),
    with ``uid``, ``traj_uid`` and ``turn_index`` from its TransferQueue key
    ``{uid}_{session}_{index}`` where ``extra_fields`` does not give them.

    Args:
        keys: B TransferQueue keys, in row order.
        extra_fields: B dicts (None counts as empty).
    Returns:
        column name -> B values; a column any row names is filled with None where others do not.
    """
    if len(keys) != len(extra_fields):
        raise RecordError(f"{len(keys)} keys but {len(extra_fields)} extra_fields rows")
    rows = []
    for key, extra in zip(keys, extra_fields):
        extra = _plain(extra) if extra is not None else {}
        if not isinstance(extra, Mapping):
            raise RecordError(f"row {key!r}: extra_fields must be a dict, got {extra!r}")
        parts = str(key).rsplit("_", 2)
        if len(parts) != 3 or not parts[2].isdigit():
            raise RecordError(f"TransferQueue key {key!r} is not {{uid}}_{{session}}_{{index}}")
        uid, session, index = parts
        rows.append(
            {"uid": uid, "traj_uid": f"{uid}_{session}", "turn_index": int(index)} | dict(extra)
        )
    names = list(dict.fromkeys(name for row in rows for name in row))
    return {name: [row.get(name) for row in rows] for name in names}


def _values(column: Any) -> list:
    """A TensorDict's non-tensor column as a list (a ``NonTensorStack`` or the plain list
    tensordict hands out for one)."""
    return list(column.tolist()) if hasattr(column, "tolist") else list(column)


class AgentrlAdvantageStep:
    """Mixin for verl's v1 trainers: the per-turn fields of the batch reach ``agentrl_<method>``.

    ``_compute_advantage(batch, metrics)`` (verl ≥ 0.9) fetches each row's ``uid`` and
    ``extra_fields`` from TransferQueue, then runs the parent's advantage step (in-reward KL,
    rollout correction, the estimator, writing advantages back) within
    :func:`per_turn_fields`. The estimator's metrics join the step's under ``agentrl/``.

    verl's trainer also reads ``trainer.v1.trainer_mode`` to pick its replay buffer and its
    mode's settings (``trainer.v1.<mode>``), so the constructor sets it back to the parent's
    mode (``agentrl_sync`` -> ``sync``) before the parent reads it: apart from the advantage
    step, the run is verl's ``sync`` (``colocate_async``, ``separate_async``) run.
    """

    def __init__(self, config: Any, *args: Any, **kwargs: Any):
        mode = config.trainer.v1.trainer_mode
        if mode in TRAINER_NAMES:
            config.trainer.v1.trainer_mode = TRAINER_NAMES[mode]
        super().__init__(config, *args, **kwargs)

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        if not is_agentrl_estimator(self.config.algorithm.adv_estimator):
            return super()._compute_advantage(batch, metrics)
        import transfer_queue as tq  # the v1 trainer's store; present wherever it runs

        got = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "extra_fields"]
        )
        uids = _values(got["uid"])
        columns = v1_turn_columns(batch.keys, _values(got["extra_fields"]))
        with per_turn_fields(uids, columns):
            out = super()._compute_advantage(batch, metrics)
        metrics.update({f"agentrl/{k}": v for k, v in last_metrics.items()})
        return out


TRAINER_NAMES = {
    "agentrl_sync": "sync",
    "agentrl_colocate_async": "colocate_async",
    "agentrl_separate_async": "separate_async",
}
"""``trainer.v1.trainer_mode`` names this module registers -> the verl mode they extend."""
_TRAINERS: dict[str, type] = {}


def register_trainers() -> dict[str, type]:
    """Register the v1 trainers of :data:`TRAINER_NAMES` (needs verl ≥ 0.9 with its
    ``TransferQueue`` extra); idempotent. Returns name -> class."""
    from verl.trainer.ppo import v1

    for name, mode in TRAINER_NAMES.items():
        if name not in _TRAINERS:
            base = v1.get_trainer_cls(mode)
            cls = type(
                f"Agentrl{base.__name__}",
                (AgentrlAdvantageStep, base),
                {
                    "__doc__": f"verl's {base.__name__} with agentrl's per-turn credit hook.",
                    "__module__": __name__,
                },
            )
            globals()[cls.__name__] = cls  # importable by name, so that it pickles
            _TRAINERS[name] = cls
        v1.register_trainer(name)(_TRAINERS[name])
    return dict(_TRAINERS)


def _register_on_import() -> None:
    register()
    if importlib.util.find_spec("verl.trainer.ppo.v1") is None:
        return  # verl < 0.9: no v1 trainer, the DataProto hook only
    try:
        register_trainers()
    except ImportError as exc:  # the v1 trainer without verl's TransferQueue extra
        warnings.warn(
            f"agentrl: verl's v1 trainers are not importable ({exc}); agentrl_* estimators work "
            "through agentrl.credit.verl_adapter.compute_advantage only",
            stacklevel=2,
        )


_register_on_import()

__all__ = [
    "DEFAULT_COLUMNS",
    "PREFIX",
    "TRAINER_NAMES",
    "AgentrlAdvantageStep",
    "VerlCredit",
    "VerlCreditSettings",
    "compute_advantage",
    "compute_agentrl_advantage",
    "is_agentrl_estimator",
    "per_turn_fields",
    "register",
    "register_trainers",
    "registrable_methods",
    "turn_columns",
    "v1_turn_columns",
]
