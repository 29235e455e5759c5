"""BPO, Bellman Policy Optimization (``learner.loss=bpo``; docs/methods.md#bpo, TRL ``bpo``).

From policy mirror descent and Bellman telescoping, Σ_t A^μ(s_t, y_t) = R − V^μ(x), so a
sequence-level advantage Â = R − V̂(x) (V̂: the group mean; ``algo=grpo algo.norm_by_std=false``)
needs no intermediate values. Each token's log-likelihood is weighted by the smoothed
*complementary-probability* ratio ω_t = (1 + ε_s − μ(y_t)) / (1 + ε_s − π(y_t)) — μ the sampler's
probability, π the current one, detached — capped at C, and masked where it signals the update has
gone far enough: dropped if (ω < 1 − ε_low and Â < 0) or (ω > 1 + ε_high and Â > 0).
L = −Â·mask·min(ω, C)·log π, seq-mean-token-mean, no KL and no entropy term. With π = μ every
ω = 1 and L is the plain policy gradient −Â·log π.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agentrl.configuration import check
from agentrl.learn.losses import LossAgg
from agentrl.learn.policy_loss import LossInputs, register_policy_loss


@dataclass(frozen=True)
class BPOConfig:
    """Options of BPO (``learner.loss_args``); defaults from the paper."""

    eps_s: float = 0.1
    """Smoothing ε_s of the complementary-probability ratio."""
    cap: float = 3.0
    """C: the weight is min(ω, C)."""
    eps_low: float = 0.2
    """Negative-advantage tokens with ω < 1 − ε_low are dropped."""
    eps_high: float = 0.28
    """Positive-advantage tokens with ω > 1 + ε_high are dropped."""
    loss_agg: LossAgg | None = "seq-mean-token-mean"
    """Aggregation (None: ``learner.loss_agg``)."""

    def __post_init__(self) -> None:
        check(self.eps_s > 0, "learner.loss_args.eps_s", self.eps_s, "> 0")
        check(self.cap > 0, "learner.loss_args.cap", self.cap, "> 0")
        check(0 < self.eps_low < 1, "learner.loss_args.eps_low", self.eps_low, "in (0, 1)")
        check(self.eps_high > 0, "learner.loss_args.eps_high", self.eps_high, "> 0")


def bpo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    eps_s: float,
    cap: float,
    eps_low: float,
    eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token BPO loss.

    ω_t = sg((1 + ε_s − μ_t)/(1 + ε_s − π_t)), μ_t = exp(old_logp), π_t = exp(logp);
    keep_t = not[(ω_t < 1 − ε_low ∧ A_t < 0) ∨ (ω_t > 1 + ε_high ∧ A_t > 0)];
    L_t = −A_t·keep_t·min(ω_t, C)·log π_t.

    Args:
        logp: (S, R) log π_θ of the sampled tokens (with gradient).
        old_logp: (S, R) sampler log-probs.
        adv: (S, R) advantages.
    Returns:
        (loss, dropped, omega): (S, R) token losses, the bool mask of dropped tokens, and ω.
    """
    with torch.no_grad():
        omega = (1.0 + eps_s - old_logp.exp()) / (1.0 + eps_s - logp.exp())
        dropped = ((omega < 1.0 - eps_low) & (adv < 0)) | ((omega > 1.0 + eps_high) & (adv > 0))
        weight = torch.clamp(omega, max=cap) * (~dropped).to(omega.dtype)
    return -adv * weight * logp, dropped, omega


@register_policy_loss("bpo", config=BPOConfig, metrics=("clipfrac", "bpo_omega"))
def bpo(inp: LossInputs, cfg: BPOConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    """BPO over a micro-batch: the loss, ``clipfrac`` (dropped tokens), ``bpo_omega`` (mean ω)."""
    tok, dropped, omega = bpo_token_loss(
        inp.logp, inp.old_logp, inp.adv, cfg.eps_s, cfg.cap, cfg.eps_low, cfg.eps_high
    )
    metrics = {"clipfrac": inp.agg.frac(dropped), "bpo_omega": inp.agg.mean(omega)}
    return inp.agg(tok, cfg.loss_agg), metrics
