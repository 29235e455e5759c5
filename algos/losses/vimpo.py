"""VIMPO (``learner.loss=vimpo``): the policy as its own value function (docs/methods.md#vimpo).

Repo ``backprop07/VIMPO`` (arXiv 2606.20008). With a frozen reference π_ref, the KL-regularised
optimum makes ρ_t = β·log(π_θ/π_ref)(y_t) an implied per-token reward and κ_t = β·KL(π_θ‖π_ref)(s_t)
(exact, over the whole vocabulary) its expectation under π_θ, so Σ_t (ρ_t − κ_t) is the policy's
implied advantage of the response. The value loss regresses it on the observed one:

    L_V = ½ [Σ_t (ρ_t − sg κ_t) − (R − mean_group R)]²

per response, averaged over responses; the target is the sample's advantage (use
``algo=grpo algo.norm_by_std=false``, 8 responses per prompt in the paper). L_V = 0 exactly at the
Gibbs optimum π ∝ π_ref·exp(A/β). Here a response is one environment step, so in a multi-turn
episode each step regresses its own step advantage.

The optional actor branch adds c_A·L_A, a PPO clipped surrogate whose advantage is the detached
*policy-implied TD advantage*. [R] No formula was available (docs/methods.md#vimpo); we take the
implied values V̂(s_t) = Σ_{k<t} (ρ_k − κ_k) (the value loss fits their total to the
advantage), so the TD advantage is V̂(s_{t+1}) − V̂(s_t) = ρ_t − κ_t. As a PPO advantage it is
computed once per update with the pre-update policy (the ``prepare`` hook: one no-grad pass of
the policy and the reference over the batch) and whitened over all response tokens of the batch
(every rank's, as the paper's "whitened actor advantage"), so micro- and mini-batching and
torchrun do not change it. c_A = 0 turns the branch (and that pass) off.

Needs the reference's logits at every response position for the exact κ_t: one extra no-grad
forward of the reference per micro-batch (``needs_ref="logits"``; with LoRA the base model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentrl.configuration import check
from agentrl.learn.losses import LossAgg, clipped_surrogate
from agentrl.learn.policy_loss import LossInputs, register_policy_loss

ADV_KEY = "vimpo_adv"


@dataclass(frozen=True)
class VIMPOConfig:
    """Options of VIMPO (``learner.loss_args``); defaults from the paper."""

    beta: float = 5e-4
    """β of the implied reward ρ = β·log(π/π_ref)."""
    c_a: float = 5e-3
    """Weight c_A of the PPO actor branch (0: value loss only)."""
    loss_agg: LossAgg | None = None
    """Aggregation of the actor branch (None: ``learner.loss_agg``); the value loss is always
    a mean over responses."""

    def __post_init__(self) -> None:
        check(
            math.isfinite(self.beta) and self.beta > 0, "learner.loss_args.beta", self.beta, "> 0"
        )
        check(self.c_a >= 0, "learner.loss_args.c_a", self.c_a, ">= 0")


def implied_reward_and_kl(
    logits: torch.Tensor, ref_logits: torch.Tensor, targets: torch.Tensor, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """ρ_t and the exact κ_t from temperature-scaled logits.

    ρ_t = β·(log π(y_t) − log π_ref(y_t)); κ_t = β·Σ_v π(v)·(log π(v) − log π_ref(v)).

    Args:
        logits, ref_logits: (S, R, V) policy and reference logits (already / temperature); the
            gradient flows into ρ through ``logits``, never into κ.
        targets: (S, R) long sampled tokens.
    Returns:
        (rho, kappa): (S, R) each; kappa detached.
    """
    idx = targets.unsqueeze(-1)

    def token_logp(x: torch.Tensor) -> torch.Tensor:
        return x.gather(-1, idx).squeeze(-1) - torch.logsumexp(x, dim=-1)

    # The same formula for both, so that ρ (and κ) are exactly 0 while π_θ = π_ref (at the
    # first update): whitening would otherwise blow rounding noise up to unit scale.
    rho = beta * (token_logp(logits) - token_logp(ref_logits))
    with torch.no_grad():
        lp_all = torch.log_softmax(logits.detach(), dim=-1)
        ref_all = torch.log_softmax(ref_logits, dim=-1)
        kappa = beta * (lp_all.exp() * (lp_all - ref_all)).sum(-1)
    return rho, kappa


def vimpo_value_loss(
    rho: torch.Tensor, kappa: torch.Tensor, target: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Per-response value loss ½[Σ_t mask_t·(ρ_t − sg κ_t) − target]².

    Args:
        rho: (S, R) implied rewards (with gradient).
        kappa: (S, R) exact per-state KL terms (detached here).
        target: (S,) the response's observed advantage R − mean_group R.
        mask: (S, R) float tokens of the response.
    Returns:
        (S,) losses (a fully masked row gives ½·target², callers weight it out).
    """
    u = ((rho - kappa.detach()) * mask).sum(-1) - target
    return 0.5 * u.square()


def whiten(values: list[np.ndarray], dist: Any) -> tuple[list[np.ndarray], float, float]:
    """(x − mean)/sqrt(var + 1e-8) over every token of every rank (unbiased var, as verl's
    ``masked_whiten``): the arrays, the mean and the std."""
    flat = np.concatenate([np.asarray(v, dtype=np.float64).reshape(-1) for v in values] or [[]])
    n, s1, s2 = dist.sum([float(flat.size), float(flat.sum()), float((flat**2).sum())])
    mean = s1 / max(n, 1.0)
    var = max(s2 / max(n, 1.0) - mean**2, 0.0) * (n / (n - 1.0) if n > 1 else 1.0)
    inv = 1.0 / math.sqrt(var + 1e-8)
    return [((np.asarray(v) - mean) * inv).astype(np.float32) for v in values], mean, math.sqrt(var)


def prepare_vimpo(ctx: Any, samples: list, cfg: VIMPOConfig) -> dict[str, float]:
    """The actor branch's advantage: whitened sg(ρ_t − κ_t) of the pre-update policy, stored
    in ``sample.extra["vimpo_adv"]`` ((n,) float32). Nothing to do with c_A = 0."""
    if cfg.c_a == 0:
        return {}

    def implied(logits, t, ref):
        rho, kappa = implied_reward_and_kl(logits, ref, t["targets"], cfg.beta)
        return rho - kappa

    raw = ctx.map_tokens(samples, implied, reference=True)
    adv, mean, std = whiten(raw, ctx.dist)
    for s, a in zip(samples, adv):
        s.extra[ADV_KEY] = a
    return {"vimpo_implied_adv_mean": mean, "vimpo_implied_adv_std": std}


@register_policy_loss(
    "vimpo",
    config=VIMPOConfig,
    metrics=("clipfrac", "vimpo_value", "vimpo_actor", "vimpo_kl"),
    needs_ref="logits",
    prepare=prepare_vimpo,
)
def vimpo(inp: LossInputs, cfg: VIMPOConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    """VIMPO over a micro-batch: L_V + c_A·L_A and the value/actor parts, the mean per-token
    KL(π‖π_ref) (``vimpo_kl``) and the actor's ``clipfrac``."""
    if inp.ref_logits is None or inp.logits is None or inp.targets is None:
        raise ValueError("vimpo needs the policy and reference logits and the targets")
    rho, kappa = implied_reward_and_kl(
        inp.scaled(inp.logits), inp.scaled(inp.ref_logits), inp.targets, cfg.beta
    )
    mask = inp.mask
    target = (inp.adv * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    value = inp.agg.seqs(vimpo_value_loss(rho, kappa, target, mask))
    metrics: dict[str, Any] = {
        "vimpo_value": float(value.detach()),
        "vimpo_kl": inp.agg.mean(kappa / cfg.beta),
        "clipfrac": 0.0,
        "vimpo_actor": 0.0,
    }
    loss = value
    if cfg.c_a > 0:
        if ADV_KEY not in inp.extra:
            raise ValueError("vimpo's actor branch needs the advantage of its prepare hook")
        ratio = torch.exp(torch.clamp(inp.logp - inp.old_logp, -20.0, 20.0))
        # The learner's one PPO clip (learner.clip_low/clip_high/clip_ratio_c), as for ppo.
        lc = inp.learner
        tok, clipped = clipped_surrogate(
            ratio, inp.extra[ADV_KEY], lc.clip_low, lc.clip_high, lc.clip_ratio_c
        )
        actor = inp.agg(tok, cfg.loss_agg)
        loss = loss + cfg.c_a * actor
        metrics.update(clipfrac=inp.agg.frac(clipped), vimpo_actor=float(actor.detach()))
    return loss, metrics
