"""Registry of policy losses and token-weight transforms; the default PPO surrogate.

A **policy loss** is a pure function ``fn(inp: LossInputs, cfg) -> (loss, metrics)`` over the
per-token tensors of one micro-batch (:class:`LossInputs`: current and sampler log-probs,
advantages, mask, logits, reference log-probs or logits when the loss asks for them); ``cfg`` is
the loss's own frozen config dataclass, built from ``learner.loss_args``. Register with::

    @register_policy_loss("cispo", config=CISPOConfig)
    def cispo(inp, cfg): ...

and select with ``learner.loss=cispo learner.loss_args={eps_high: 0.28}``. ``ppo`` (the clipped
surrogate of docs/methods.md#ppo, configured by the ``learner.clip_*``/``ratio_level`` fields) is
registered here and is the default; so is ``decoupled_ppo`` (AReaL's decoupled PPO, the loss for
asynchronous training with ``rollout.max_staleness``: clipped against the proximal policy,
reweighted from the stale behaviour policy). The other losses live in ``agentrl.algos`` and are
found the way estimators are: the first lookup of an unknown name imports the plugin group
``agentrl.algos`` (the bundled methods, then the entry points of that group), so a third-party
package registers a loss by naming its module in ``[project.entry-points."agentrl.algos"]``.

A **token-weight transform** ``fn(inp, cfg) -> (adv, mask, metrics)`` rewrites the per-token
advantage and the policy-loss mask before the loss sees them, so it composes with any loss:
``learner.token_weights=[taco, ntf]`` applies them in that order, with options in
``learner.token_weight_args={taco_alpha: 0.02}`` (``<transform>_<field>``, flat so that the
config stays two levels deep). Register with :func:`register_token_weight`.

Losses are summed over micro-batches, so everything a loss returns must be normalised by the
*mini-batch's* (global, all-rank) counts: aggregate token losses with ``inp.agg`` (an
:class:`Aggregator` holding those counts) and report metrics as ``inp.agg.frac(x)`` or
``inp.agg.mean(x)``; the learner adds the metrics of its micro-batches (and ranks) and logs each
as ``loss/<name>`` (``clipfrac`` is ``loss/clipfrac``). The names a loss or transform reports
are declared when it is registered, so every rank logs the same keys. Registering a name twice
raises; an unknown name lists the valid ones.

A loss that needs more than the sampled tokens registers ``needs_ref="logp"`` (reference
log-probs of the sampled tokens, scored once per update), ``needs_ref="logits"`` (the frozen
reference's logits at every response position, one no-grad forward per micro-batch), or a
``prepare(ctx, samples, cfg)`` hook that runs once per update before the first optimiser step,
with the pre-update policy, and stores per-token arrays in ``sample.extra`` (KLPO's sampled
alternatives, VIMPO's actor advantage); they reach the loss as ``inp.extra[key]``, (S, R, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch

from agentrl.configuration import ConfigError, closest, from_mapping
from agentrl.learn.losses import LossAgg, aggregate_loss, clipped_surrogate, policy_ratio
from agentrl.registry import same_definition, where

__all__ = [
    "Aggregator",
    "DecoupledPPOConfig",
    "LossInputs",
    "LossSpec",
    "NoLossConfig",
    "PrepareContext",
    "TokenWeightSpec",
    "get_policy_loss",
    "get_token_weight",
    "list_policy_losses",
    "list_token_weights",
    "policy_loss_config",
    "register_policy_loss",
    "register_token_weight",
    "split_token_weight_args",
    "token_weight_config",
]


@dataclass(frozen=True)
class Aggregator:
    """Reduces (S, R) token tensors of a micro-batch with the mini-batch's global counts.

    ``n_tokens``/``n_seqs`` count the response tokens/sequences of the whole mini-batch over
    every rank, so the micro-batch results add up to the mini-batch value (and N ranks update as
    one). ``mask`` is the policy-loss mask (response tokens, minus any a token-weight transform
    filtered out); the denominators stay those of the response tokens.
    """

    mode: LossAgg
    n_tokens: float
    n_seqs: float
    scale: float
    mask: torch.Tensor
    """(S, R) float policy-loss mask."""

    @classmethod
    def local(cls, mask: torch.Tensor, mode: LossAgg = "token-mean", scale: float = 1.0):
        """Counts from ``mask`` itself: the micro-batch is the whole mini-batch (tests)."""
        n_seqs = float((mask.sum(-1) > 0).sum())
        return cls(mode, float(mask.sum()), n_seqs, scale, mask)

    def __call__(
        self, loss: torch.Tensor, mode: LossAgg | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """:func:`~agentrl.learn.losses.aggregate_loss` of a (S, R) token loss: a scalar."""
        return aggregate_loss(
            loss,
            self.mask if mask is None else mask,
            mode or self.mode,
            n_tokens=self.n_tokens,
            n_seqs=self.n_seqs,
            scale=self.scale,
        )

    def seqs(self, per_seq: torch.Tensor) -> torch.Tensor:
        """Σ over sequences with a token in ``mask`` of ``per_seq`` (S,), / ``n_seqs``."""
        valid = (self.mask.sum(-1) > 0).to(per_seq.dtype)
        return (per_seq * valid).sum() / max(self.n_seqs, 1.0)

    def frac(self, x: torch.Tensor) -> float:
        """Σ_masked x / n_tokens as a float (a fraction when x is a bool mask): a metric."""
        return float((x.float() * self.mask).sum()) / max(self.n_tokens, 1.0)

    mean = frac


@dataclass
class LossInputs:
    """The per-token tensors of one micro-batch: S samples (one environment step each), R
    response positions (right-aligned; ``response_mask`` marks the real tokens), V vocabulary.
    """

    logp: torch.Tensor
    """(S, R) log π_θ of the sampled tokens at temperature ``temperature`` (with gradient)."""
    old_logp: torch.Tensor
    """(S, R) behaviour log-probs μ: the sampler's, or recomputed before the update."""
    adv: torch.Tensor
    """(S, R) advantage of each token (the step's advantage, after token-weight transforms)."""
    mask: torch.Tensor
    """(S, R) float policy-loss mask (response tokens minus filtered ones)."""
    agg: Aggregator
    """Aggregation with the mini-batch's global counts over ``mask``."""
    response_mask: torch.Tensor | None = None
    """(S, R) float: every response token (``mask`` before any filtering); None = ``mask``."""
    targets: torch.Tensor | None = None
    """(S, R) long sampled token ids."""
    logits: torch.Tensor | None = None
    """(S, R, V) raw policy logits (with gradient); divide by ``temperature`` for π_θ."""
    temperature: float = 1.0
    entropy: torch.Tensor | None = None
    """(S, R) entropy of π_θ at each position (detached)."""
    ref_logp: torch.Tensor | None = None
    """(S, R) reference log-probs of the sampled tokens (``needs_ref="logp"``)."""
    ref_logits: torch.Tensor | None = None
    """(S, R, V) raw reference logits (``needs_ref="logits"``), no gradient."""
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    """Per-token arrays stored by the loss's ``prepare`` hook, as (S, R, ...) tensors."""
    learner: Any = None
    """The :class:`~agentrl.learn.learner.LearnerConfig` (clip settings for PPO-style terms)."""

    def __post_init__(self) -> None:
        if self.response_mask is None:
            self.response_mask = self.mask

    def scaled(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits / temperature`` (the distribution the sampler drew from)."""
        return logits if self.temperature in (0.0, 1.0) else logits / self.temperature


PolicyLossFn = Callable[[LossInputs, Any], tuple[torch.Tensor, dict[str, Any]]]
TokenWeightFn = Callable[[LossInputs, Any], tuple[torch.Tensor, torch.Tensor, dict[str, Any]]]


class PrepareContext(Protocol):
    """What a loss's ``prepare`` hook may use (the learner implements it).

    ``map_tokens(samples, fn, reference=False)`` runs the pre-update policy (and, with
    ``reference``, the frozen reference) without gradients over ``samples`` in micro-batches and
    calls ``fn(logits, t, ref_logits)`` with temperature-scaled (S, R, V) logits and the aligned
    tensors ``t`` of :func:`~agentrl.learn.learner.forward_chunk`; ``fn`` returns an (S, R, ...)
    tensor and ``map_tokens`` returns each sample's rows for its own tokens as numpy arrays
    (n, ...). ``dist`` sums floats over the ranks (identity with one process); ``generator`` is
    a torch generator seeded from the update's random stream; ``learner`` the learner config.
    """

    learner: Any
    generator: torch.Generator

    @property
    def dist(self) -> Any: ...

    def map_tokens(
        self, samples: Sequence[Any], fn: Callable[..., torch.Tensor], reference: bool = False
    ) -> list[np.ndarray]: ...


@dataclass(frozen=True)
class NoLossConfig:
    """Config of a loss or transform without options of its own."""


@dataclass(frozen=True)
class LossSpec:
    """A registered policy loss: its function, config dataclass and what it needs."""

    name: str
    fn: PolicyLossFn
    config_cls: type
    metrics: tuple[str, ...] = ()
    """Metric names the loss reports (logged as ``loss/<name>``)."""
    needs_ref: Literal["logp", "logits"] | None = None
    prepare: Callable[..., dict[str, float]] | None = None
    """``prepare(ctx, samples, cfg) -> metrics``: once per update, before any step."""


@dataclass(frozen=True)
class TokenWeightSpec:
    """A registered token-weight transform."""

    name: str
    fn: TokenWeightFn
    config_cls: type
    metrics: tuple[str, ...] = ()


_LOSSES: dict[str, LossSpec] = {}
_TOKEN_WEIGHTS: dict[str, TokenWeightSpec] = {}


def register_policy_loss(
    name: str,
    config: type = NoLossConfig,
    metrics: Sequence[str] = (),
    needs_ref: Literal["logp", "logits"] | None = None,
    prepare: Callable[..., dict[str, float]] | None = None,
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator registering a policy loss under ``name`` with its config dataclass.

    Registering the same definition again (its module imported twice) is harmless.

    Raises:
        ValueError: if ``name`` is already registered to another function or options.
    """

    def deco(fn: PolicyLossFn) -> PolicyLossFn:
        spec = LossSpec(name, fn, config, tuple(metrics), needs_ref, prepare)
        if name in _LOSSES and not same_definition(_LOSSES[name], spec):
            raise ValueError(
                f"policy loss {name!r} is already registered ({where(_LOSSES[name].fn)})"
            )
        _LOSSES[name] = spec
        return fn

    return deco


def register_token_weight(
    name: str, config: type = NoLossConfig, metrics: Sequence[str] = ()
) -> Callable[[TokenWeightFn], TokenWeightFn]:
    """Decorator registering a token-weight transform under ``name``.

    Registering the same definition again (its module imported twice) is harmless.

    Raises:
        ValueError: if ``name`` is already registered to another function or options.
    """

    def deco(fn: TokenWeightFn) -> TokenWeightFn:
        spec = TokenWeightSpec(name, fn, config, tuple(metrics))
        if name in _TOKEN_WEIGHTS and not same_definition(_TOKEN_WEIGHTS[name], spec):
            raise ValueError(
                f"token-weight transform {name!r} is already registered "
                f"({where(_TOKEN_WEIGHTS[name].fn)})"
            )
        _TOKEN_WEIGHTS[name] = spec
        return fn

    return deco


def _load_plugins() -> None:
    from agentrl.registry import load_plugins

    load_plugins("agentrl.algos")


def list_policy_losses() -> list[str]:
    """Names of every registered policy loss, sorted."""
    _load_plugins()
    return sorted(_LOSSES)


def list_token_weights() -> list[str]:
    """Names of every registered token-weight transform, sorted."""
    _load_plugins()
    return sorted(_TOKEN_WEIGHTS)


def get_policy_loss(name: str) -> LossSpec:
    """The loss registered as ``name``; unknown names list the valid ones."""
    if name not in _LOSSES:  # the core's ``ppo`` needs no plugin import
        _load_plugins()
    if name not in _LOSSES:
        raise ConfigError(
            f"learner.loss={name!r} is not a registered policy loss; registered losses are "
            f"{sorted(_LOSSES)}." + closest(name, _LOSSES)
        )
    return _LOSSES[name]


def get_token_weight(name: str) -> TokenWeightSpec:
    """The token-weight transform registered as ``name``; unknown names list the valid ones."""
    if name not in _TOKEN_WEIGHTS:
        _load_plugins()
    if name not in _TOKEN_WEIGHTS:
        raise ConfigError(
            f"learner.token_weights: {name!r} is not a registered token-weight transform; "
            f"registered transforms are {sorted(_TOKEN_WEIGHTS)}." + closest(name, _TOKEN_WEIGHTS)
        )
    return _TOKEN_WEIGHTS[name]


def policy_loss_config(name: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """Build the config dataclass of loss ``name`` (errors name ``learner.loss_args.<key>``)."""
    return from_mapping(get_policy_loss(name).config_cls, overrides, path="learner.loss_args")


def token_weight_config(name: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """Build the config of transform ``name`` from its fields (``overrides``: ``{field:
    value}``); errors name the flat key ``learner.token_weight_args.<name>_<field>``."""
    try:
        return from_mapping(get_token_weight(name).config_cls, overrides)
    except ConfigError as exc:
        if str(exc).startswith("learner."):  # the config's own checks name the flat key
            raise
        raise ConfigError(f"learner.token_weight_args.{name}_{exc}") from exc


def split_token_weight_args(
    names: Sequence[str], args: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Split the flat ``{<transform>_<field>: value}`` options by transform.

    Each key belongs to the longest listed transform name it starts with (followed by ``_``);
    a key that matches none of ``names`` is an error that lists the valid keys.
    """
    out: dict[str, dict[str, Any]] = {n: {} for n in names}
    valid = sorted(
        f"{n}_{f}"
        for n in names
        for f in getattr(get_token_weight(n).config_cls, "__dataclass_fields__", {})
    )
    for key, value in args.items():
        owners = [n for n in names if str(key).startswith(f"{n}_")]
        if not owners:
            raise ConfigError(
                f"learner.token_weight_args.{key} does not name a field of a transform in "
                f"learner.token_weights={list(names)}; valid keys are {valid}."
                + closest(str(key), valid)
            )
        owner = max(owners, key=len)
        if str(key) not in valid:
            raise ConfigError(
                f"learner.token_weight_args.{key} is not a valid key; valid keys are {valid}."
                + closest(str(key), valid)
            )
        out[owner][str(key)[len(owner) + 1 :]] = value
    return out


# ---------------------------------------------------------------------------------------------
# The default loss: PPO's clipped surrogate (docs/methods.md#ppo), set by the learner's fields.


def ppo_loss(inp: LossInputs, cfg: NoLossConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    """PPO clipped surrogate, aggregated by ``learner.loss_agg``.

    L_t = max(−A_t·r_t, −A_t·clip(r_t, 1 − ε_low, 1 + ε_high)), and min(L_t, −A_t·c) for
    A_t < 0 (dual clip); r_t = π_θ/μ per token, or the step-level ratio (``ratio_level=step``,
    over ``response_mask``). Options: ``learner.clip_low``, ``clip_high``, ``clip_ratio_c``,
    ``ratio_level`` (kept on the learner for compatibility, so ``loss_args`` is empty).

    Inputs (S, R): ``logp``, ``old_logp``, ``adv``, ``mask``. Returns the scalar loss and
    ``clipfrac`` (fraction of tokens whose loss the clip changed).
    """
    lc = inp.learner
    ratio = policy_ratio(inp.logp, inp.old_logp, inp.response_mask, lc.ratio_level)
    tok, clipped = clipped_surrogate(ratio, inp.adv, lc.clip_low, lc.clip_high, lc.clip_ratio_c)
    return inp.agg(tok), {"clipfrac": inp.agg.frac(clipped)}


register_policy_loss("ppo", metrics=("clipfrac",))(ppo_loss)


# ---------------------------------------------------------------------------------------------
# Decoupled PPO (AReaL, Fu et al. 2025): the off-policy loss for asynchronous training.

PROX_KEY = "prox_logp"
"""``sample.extra`` key of the proximal policy's log-probs (written by :func:`prepare_prox`)."""


@dataclass(frozen=True)
class DecoupledPPOConfig:
    """Options of ``learner.loss=decoupled_ppo`` (``learner.loss_args``)."""

    imp_weight_cap: float | None = None
    """Tokens whose behaviour→proximal weight π_prox/μ exceeds this are left out of the loss
    (AReaL's ``behav_imp_weight_cap``); None keeps every token."""

    def __post_init__(self) -> None:
        cap = self.imp_weight_cap
        if cap is not None and not (isinstance(cap, int | float) and cap > 1):
            raise ConfigError(
                f"learner.loss_args.imp_weight_cap={cap!r} is invalid; expected a number > 1 "
                "(the largest π_prox/μ weight kept) or null (keep every token)"
            )


def prepare_prox(ctx: PrepareContext, samples: Sequence[Any], cfg: DecoupledPPOConfig):
    """The proximal policy: log-probs of every sampled token under the learner's weights at the
    start of the update (before its first optimiser step), into ``sample.extra["prox_logp"]``."""

    def token_logp(logits: torch.Tensor, t: dict, ref: Any) -> torch.Tensor:
        # logits arrive scaled by the temperature: the sampler's distribution.
        return torch.log_softmax(logits.float(), dim=-1).gather(-1, t["targets"].unsqueeze(-1))[
            ..., 0
        ]

    for s, lp in zip(samples, ctx.map_tokens(samples, token_logp)):
        s.extra[PROX_KEY] = lp.astype(np.float32)
    return {}


def decoupled_ppo(inp: LossInputs, cfg: DecoupledPPOConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    """Decoupled PPO: clip against the proximal policy, reweight from the behaviour policy.

    Three policies per token: μ, the behaviour policy that sampled it (``inp.old_logp``: the
    sampler's log-probs, possibly several versions old under ``rollout.max_staleness``);
    π_prox, the proximal policy (the learner's weights when the update started, recomputed by
    :func:`prepare_prox`); π_θ, the policy being optimised. With r = π_θ/π_prox (token- or
    step-level, ``learner.ratio_level``) and w = sg(π_prox/μ),

        L_t = w · max(−A_t·r_t, −A_t·clip(r_t, 1 − ε_low, 1 + ε_high))   (dual clip for A_t < 0)

    so the trust region is centred on a recent policy while the importance weight corrects for
    the stale sampler. When μ = π_prox (synchronous, on-policy data) w = 1 and this is ``ppo``
    with the recomputed log-probs as the old policy. Tokens with w above
    ``imp_weight_cap`` are dropped from the loss (not from its denominators).

    Inputs (S, R): ``logp``, ``old_logp`` (behaviour), ``extra["prox_logp"]``, ``adv``, ``mask``.
    Metrics: ``clipfrac`` (against π_prox), ``behav_weight`` (mean w), ``behav_capped`` (share of
    tokens over the cap), ``behav_kl`` (mean log μ/π_prox: how stale the batch is).
    """
    if PROX_KEY not in inp.extra:
        raise ValueError("decoupled_ppo needs the proximal log-probs of its prepare hook")
    lc = inp.learner
    prox = inp.extra[PROX_KEY].to(inp.logp.dtype)  # (S, R)
    ratio = policy_ratio(inp.logp, prox, inp.response_mask, lc.ratio_level)
    tok, clipped = clipped_surrogate(ratio, inp.adv, lc.clip_low, lc.clip_high, lc.clip_ratio_c)
    weight = torch.exp(torch.clamp(prox - inp.old_logp, -20.0, 20.0)).detach()  # (S, R)
    capped = torch.zeros_like(weight, dtype=torch.bool)
    if cfg.imp_weight_cap is not None:
        capped = weight > cfg.imp_weight_cap
        weight = torch.where(capped, torch.zeros_like(weight), weight)
    metrics = {
        "clipfrac": inp.agg.frac(clipped),
        "behav_weight": inp.agg.mean(weight),
        "behav_capped": inp.agg.frac(capped),
        "behav_kl": inp.agg.mean((inp.old_logp - prox).detach()),
    }
    return inp.agg(weight * tok), metrics


register_policy_loss(
    "decoupled_ppo",
    config=DecoupledPPOConfig,
    metrics=("clipfrac", "behav_weight", "behav_capped", "behav_kl"),
    prepare=prepare_prox,
)(decoupled_ppo)
