"""Negative token filtering (``learner.token_weights=[ntf]``; docs/methods.md#ntf).

"Rethinking Groups in Critic-Free RLVR" (Wu, Ma et al., arXiv 2606.17250): with one rollout per
prompt and a batch-level baseline, the group's real job is to stop *false penalties* on
negative samples — tokens a failed response shares with correct ones. [R] (only the abstract
was available): tokens of negative-advantage responses whose *sampling* probability μ(y_t) is
high are masked out of the policy loss, either every token with μ > ``threshold``
(``mode=prob``) or the ⌈``top_q``·n⌉ most probable tokens of each response (``mode=top_q``,
ties broken by position). Positive- and zero-advantage tokens are never filtered. A token
weight: it narrows the policy-loss mask of any ``learner.loss``; the denominators of the
aggregation stay those of all response tokens, and the KL and entropy terms still cover every
token. The thresholds' defaults are this reconstruction's choice, not the paper's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from agentrl.configuration import check
from agentrl.learn.policy_loss import LossInputs, register_token_weight


@dataclass(frozen=True)
class NTFConfig:
    """Options of negative token filtering (``learner.token_weight_args={ntf_mode: ...}``)."""

    mode: Literal["prob", "top_q"] = "prob"
    """``prob``: filter μ > threshold; ``top_q``: filter each response's top-q by μ."""
    threshold: float = 0.9
    """p_τ of ``mode=prob``."""
    top_q: float = 0.2
    """Fraction q of ``mode=top_q``."""

    def __post_init__(self) -> None:
        check(
            0 <= self.threshold < 1,
            "learner.token_weight_args.ntf_threshold",
            self.threshold,
            "in [0, 1)",
        )
        check(0 < self.top_q <= 1, "learner.token_weight_args.ntf_top_q", self.top_q, "in (0, 1]")


def negative_token_filter(
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    mode: Literal["prob", "top_q"],
    threshold: float,
    top_q: float,
) -> torch.Tensor:
    """Bool (S, R) mask of the tokens to filter.

    ``prob``: A_t < 0 ∧ μ_t > p_τ. ``top_q``: A_t < 0 ∧ rank_t < ⌈q·n⌉, rank_t the position of
    token t when the row's n tokens are sorted by μ descending (stable).

    Args:
        old_logp: (S, R) sampling log-probs log μ.
        adv: (S, R) advantages.
        mask: (S, R) float tokens that may be filtered (the current policy-loss mask).
    """
    valid = mask > 0
    neg = (adv < 0) & valid
    if mode == "prob":
        return neg & (old_logp > math.log(threshold) if threshold > 0 else valid)
    key = torch.where(valid, old_logp, torch.full_like(old_logp, -math.inf))
    order = torch.argsort(key, dim=-1, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order))
    k = torch.ceil(top_q * mask.sum(-1, keepdim=True))
    return neg & (rank < k)


@register_token_weight("ntf", config=NTFConfig, metrics=("ntf_frac",))
def ntf(inp: LossInputs, cfg: NTFConfig) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Drop the filtered tokens from the policy-loss mask; ``ntf_frac``: their fraction."""
    drop = negative_token_filter(
        inp.old_logp, inp.adv, inp.mask, cfg.mode, cfg.threshold, cfg.top_q
    )
    return inp.adv, inp.mask * (~drop).to(inp.mask.dtype), {"ntf_frac": inp.agg.frac(drop)}
