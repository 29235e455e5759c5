"""TACO, Tail-Aware Credit Calibration (``learner.token_weights=[taco]``; docs/methods.md#taco).

Repo ``xiuyilou/TACO`` (arXiv 2607.07976). A positive advantage on a token from the policy's
tail — far more surprising than the position's entropy — is likely luck rather than skill, so it
is damped: with r_tail = −log p(y_t) − H_t + log α (current-policy log-prob and entropy at the
position, detached), the weight is w = 1 if r_tail ≤ 0, else 1 − λ·(1 − exp(−r_tail)) ∈ (1 − λ, 1).
Only tokens with A > 0 are reweighted (A ← w·A); negative advantages are unchanged. A token
weight: composes with any ``learner.loss``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.configuration import check
from agentrl.learn.policy_loss import LossInputs, register_token_weight


@dataclass(frozen=True)
class TACOConfig:
    """Options of TACO (``learner.token_weight_args={taco_alpha: ..., taco_lam: ...}``)."""

    alpha: float = 0.01
    """α: tokens with surprise −log p − H above −log α are damped."""
    lam: float = 0.9
    """λ: the strongest damping is a factor 1 − λ."""

    def __post_init__(self) -> None:
        check(0 < self.alpha <= 1, "learner.token_weight_args.taco_alpha", self.alpha, "in (0, 1]")
        check(0 <= self.lam <= 1, "learner.token_weight_args.taco_lam", self.lam, "in [0, 1]")


def taco_weights(
    logp: torch.Tensor, entropy: torch.Tensor, adv: torch.Tensor, alpha: float, lam: float
) -> torch.Tensor:
    """TACO's per-token advantage multiplier.

    r_t = −log p(y_t) − H_t + log α; w_t = 1 if r_t ≤ 0 else 1 − λ·(1 − exp(−r_t)); tokens with
    A_t ≤ 0 get w_t = 1.

    Args:
        logp: (S, R) current log-probs of the sampled tokens.
        entropy: (S, R) current entropy at each position.
        adv: (S, R) advantages.
    Returns:
        (S, R) detached weights in (1 − λ, 1].
    """
    with torch.no_grad():
        r_tail = -logp - entropy + math.log(alpha)
        w = torch.where(r_tail > 0, 1.0 - lam * (1.0 - torch.exp(-r_tail.clamp(min=0.0))), 1.0)
        return torch.where(adv > 0, w, torch.ones_like(w))


@register_token_weight("taco", config=TACOConfig, metrics=("taco_frac", "taco_weight"))
def taco(inp: LossInputs, cfg: TACOConfig) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """A ← w·A on positive-advantage tokens; metrics: the fraction of tokens damped
    (``taco_frac``) and the mean weight (``taco_weight``)."""
    if inp.entropy is None:
        raise ValueError("taco needs the per-token entropy")
    w = taco_weights(inp.logp, inp.entropy, inp.adv, cfg.alpha, cfg.lam)
    metrics = {"taco_frac": inp.agg.frac(w < 1.0), "taco_weight": inp.agg.mean(w)}
    return inp.adv * w, inp.mask, metrics
