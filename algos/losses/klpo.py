"""KLPO (``learner.loss=klpo``): KL-regularised policy optimisation anchored at the sampler.

docs/methods.md#klpo (Yifan Zhang, arXiv 2610.08963, repo ``yifanzhang-pro/KLPO``). The local
objective E_π[A] − β·KL(π‖π_sam) has the Gibbs optimum β·log(π⁺/π_sam) = A − c*, which KLPO
fits by least squares, token by token. The default, token regression with a Monte-Carlo KL term:

    h_t = R_t − β·ℓ_t,   ℓ_t = log p(y_t) − log q(y_t)
    L   = −mean_responses Σ_t sg(h_t)·(log p(y_t) − (1/M) Σ_j log p(v_{t,j})),  v_{t,j} ~ q

with p the current policy, q the sampler, R_t the token's advantage (the return; KLPO uses no
group and no whitening: ``algo=grpo algo.norm_by_std=false rollout.group_size=1``) and M
alternatives v drawn i.i.d. with replacement at every visited prefix; any M ≥ 1 is unbiased.
Tokens are summed, not averaged (``seq-mean-token-sum``); no ratio clip, no critic, no reference.
The binary-KL variant (``variant=binary``) drops the alternatives and weights log p(y_t) by
sg((1 − q(y_t))/(1 − p(y_t))).

The sampler's distribution at a prefix is needed in full to draw the v's, but the rollout only
records the log-prob of the sampled token. The sampler is the policy before the update (the
trainer samples with the current weights), so the ``prepare`` hook runs the pre-update model once
over the batch before the first optimiser step (as ``learner.old_logprobs=recompute`` does) and
draws the M alternatives per response position from softmax(logits / temperature); they are
fixed for the whole update. log q(y_t) is the sampler's recorded log-prob (``old_logp``). With
vLLM the trainer's copy of the weights differs from the engine's by rounding only. The authors
note that GPU-scale results are not validated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from agentrl.configuration import check
from agentrl.learn.losses import LossAgg
from agentrl.learn.policy_loss import LossInputs, register_policy_loss

ALT_KEY = "klpo_alt"


@dataclass(frozen=True)
class KLPOConfig:
    """Options of KLPO (``learner.loss_args``); defaults from the paper."""

    beta: float = 0.1
    """β, the weight of KL(π‖π_sam)."""
    m: int = 16
    """M, alternatives sampled from the sampler at every visited prefix (MC-KL)."""
    variant: Literal["mc", "binary"] = "mc"
    """``mc``: token regression with MC-KL; ``binary``: the binary-KL weight, no sampling."""
    loss_agg: LossAgg | None = "seq-mean-token-sum"
    """Aggregation: sum over tokens, mean over responses (None: ``learner.loss_agg``)."""

    def __post_init__(self) -> None:
        check(
            math.isfinite(self.beta) and self.beta >= 0, "learner.loss_args.beta", self.beta, ">= 0"
        )
        check(self.m >= 1, "learner.loss_args.m", self.m, ">= 1")


def klpo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    alt_logp: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token KLPO loss (token regression + MC-KL).

    L_t = −sg(h_t)·(log p(y_t) − mean_j log p(v_{t,j})), h_t = A_t − β·(log p(y_t) − log q(y_t)).

    Args:
        logp: (S, R) log p of the sampled tokens (with gradient).
        old_logp: (S, R) log q of the sampled tokens (the sampler's).
        adv: (S, R) the return/advantage R_t.
        alt_logp: (S, R, M) log p of the M alternatives v ~ q at each position (with gradient).
    Returns:
        (loss, h): (S, R) token losses and the detached regression weight h.
    """
    h = (adv - beta * (logp - old_logp)).detach()
    return -h * (logp - alt_logp.mean(-1)), h


def klpo_binary_token_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token binary-KL KLPO loss: L_t = −sg(h_t)·sg((1 − q_t)/(1 − p_t))·log p(y_t).

    (1 − p_t) is floored at 1e-6 so a token the policy is sure of keeps a finite weight.
    Shapes as :func:`klpo_token_loss` (no alternatives).
    """
    h = (adv - beta * (logp - old_logp)).detach()
    with torch.no_grad():
        w = (1.0 - old_logp.exp()) / (1.0 - logp.exp()).clamp(min=1e-6)
    return -h * w * logp, h


def alternative_logp(logits: torch.Tensor, alt: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / T) at the alternatives: (S, R, V), (S, R, M) → (S, R, M).

    Uses logsumexp and a gather, so no (S, R, V) log-softmax is kept for the backward.
    """
    scaled = logits if temperature in (0.0, 1.0) else logits / temperature
    return scaled.gather(-1, alt) - torch.logsumexp(scaled, dim=-1, keepdim=True)


def sample_alternatives(
    logits: torch.Tensor, m: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """M i.i.d. draws (with replacement) from softmax(logits) at every position.

    Args:
        logits: (S, R, V) temperature-scaled logits of the sampler.
    Returns:
        (S, R, M) long token ids.
    """
    s, r, v = logits.shape
    probs = torch.softmax(logits.float(), dim=-1).reshape(s * r, v)
    draws = torch.multinomial(probs, m, replacement=True, generator=generator)
    return draws.view(s, r, m)


def prepare_klpo(ctx: Any, samples: list, cfg: KLPOConfig) -> dict[str, float]:
    """Draw the M alternatives per response position from the pre-update policy, once per
    update, into ``sample.extra["klpo_alt"]`` ((n, M) int64)."""
    if cfg.variant != "mc":
        return {}
    draws = ctx.map_tokens(
        samples, lambda logits, t, ref: sample_alternatives(logits, cfg.m, ctx.generator)
    )
    for s, d in zip(samples, draws):
        s.extra[ALT_KEY] = d.astype(np.int64)
    return {}


@register_policy_loss(
    "klpo", config=KLPOConfig, metrics=("klpo_log_ratio", "klpo_h"), prepare=prepare_klpo
)
def klpo(inp: LossInputs, cfg: KLPOConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    """KLPO over a micro-batch: the loss, the mean log p/q (``klpo_log_ratio``) and the mean
    regression weight h (``klpo_h``)."""
    if cfg.variant == "mc":
        if ALT_KEY not in inp.extra:
            raise ValueError("klpo needs the sampled alternatives of its prepare hook")
        alt_logp = alternative_logp(inp.logits, inp.extra[ALT_KEY], inp.temperature)
        tok, h = klpo_token_loss(inp.logp, inp.old_logp, inp.adv, alt_logp, cfg.beta)
    else:
        tok, h = klpo_binary_token_loss(inp.logp, inp.old_logp, inp.adv, cfg.beta)
    metrics = {
        "klpo_log_ratio": inp.agg.mean((inp.logp - inp.old_logp).detach()),
        "klpo_h": inp.agg.mean(h),
    }
    return inp.agg(tok, cfg.loss_agg), metrics
