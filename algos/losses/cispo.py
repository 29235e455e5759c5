"""CISPO (``learner.loss=cispo``): clipped, detached IS weight times advantage times log π.

MiniMax-M1 (arXiv 2506.13585) clips the importance-sampling *weight* instead of the update:
L = −Σ_t sg(clip(r_t, w_min, w_max))·A_t·log π_θ(y_t), r_t = π_θ(y_t)/μ(y_t), so every token
keeps a gradient (PPO's clip zeroes the gradient of tokens outside the trust region). MiniMax-M1
imposes no lower bound (ε_low^IS large: ``clip_min=0``) and tunes only the upper one. The bounds
are given as weights, not ε, because the implementations differ in convention: TRL's and
ScaleRL's ε_max = 5 caps the weight at 5 (``clip_max=5``, the default here); Trinity-RFT's
``clip_range_high=0.28`` is ``clip_max=1.28``. Token-mean aggregation over the mini-batch, as in
the paper (normalised by the total number of response tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.configuration import check
from agentrl.learn.losses import LossAgg
from agentrl.learn.policy_loss import LossInputs, register_policy_loss


@dataclass(frozen=True)
class CISPOConfig:
    """Options of CISPO (``learner.loss_args``)."""

    clip_min: float = 0.0
    """Lower bound of the IS weight (0: none, as MiniMax-M1)."""
    clip_max: float = 5.0
    """Upper bound of the IS weight (TRL/ScaleRL ε_max = 5; Trinity-RFT 1.28)."""
    loss_agg: LossAgg | None = "token-mean"
    """Aggregation (None: ``learner.loss_agg``)."""

    def __post_init__(self) -> None:
        check(self.clip_min >= 0, "learner.loss_args.clip_min", self.clip_min, ">= 0")
        check(
            math.isfinite(self.clip_max) and self.clip_max > max(self.clip_min, 0.0),
            "learner.loss_args.clip_max",
            self.clip_max,
            "finite and > clip_min",
        )


def cispo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    clip_min: float,
    clip_max: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token CISPO loss.

    L_t = −sg(clip(r_t, clip_min, clip_max))·A_t·log π_θ(y_t), r_t = exp(logp − old_logp)
    (log-ratio clamped to ±20 as verl does).

    Args:
        logp: (S, R) log π_θ of the sampled tokens (with gradient).
        old_logp: (S, R) sampler log-probs μ.
        adv: (S, R) advantages.
    Returns:
        (loss, clipped): (S, R) token losses and a bool mask of tokens whose weight was clipped.
    """
    ratio = torch.exp(torch.clamp(logp.detach() - old_logp, -20.0, 20.0))
    weight = torch.clamp(ratio, clip_min, clip_max)
    return -weight * adv * logp, (ratio < clip_min) | (ratio > clip_max)


@register_policy_loss("cispo", config=CISPOConfig, metrics=("clipfrac",))
def cispo(inp: LossInputs, cfg: CISPOConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    """CISPO over a micro-batch: the aggregated loss and ``clipfrac``."""
    tok, clipped = cispo_token_loss(inp.logp, inp.old_logp, inp.adv, cfg.clip_min, cfg.clip_max)
    return inp.agg(tok, cfg.loss_agg), {"clipfrac": inp.agg.frac(clipped)}
