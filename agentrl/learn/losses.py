"""Policy-loss pieces as pure tensor functions (docs/methods.md#ppo, after verl's ``core_algos``).

Shapes: B sequences (one per environment step: the response of that step), T response tokens,
``mask`` (B, T) marks real tokens. Every loss returns ``(loss, metrics)``.

- :func:`policy_ratio`: per-token ratio, or the step-level (GSPO-style, length-normalised)
  ratio shared by all tokens of a response, with the gradient of each token's log-prob.
- :func:`clipped_surrogate`: asymmetric clip (clip-higher) and dual clip for A < 0.
- :func:`aggregate_loss`: ``token-mean``, ``seq-mean-token-sum``, ``seq-mean-token-mean``,
  ``seq-mean-token-sum-norm``; fully masked rows contribute nothing and are not counted.
- :func:`kl_penalty`: k1 / k2 / k3 (``low_var_kl``, clamped as verl does) / abs.
- :func:`entropy_from_logits`: per-token entropy of the (temperature-scaled) distribution.
"""

from __future__ import annotations

from typing import Literal

import torch

LossAgg = Literal[
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]
KLType = Literal["k1", "k2", "k3", "abs"]
RatioLevel = Literal["token", "step"]


def policy_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, level: RatioLevel
) -> torch.Tensor:
    """Importance ratio π/π_old per token, (B, T).

    ``token``: exp(logp − old) per token (log-ratio clamped to ±20 as verl does).
    ``step``: s_i = exp(mean_t (logp − old)) over the response's tokens, applied per token as
    sg(s_i)·π/sg(π) — the value is the sequence ratio, the gradient flows through each token
    (GSPO; used by GAGPO's action-level ratio, one ratio per environment step).
    """
    log_ratio = torch.clamp(logp - old_logp, -20.0, 20.0)
    if level == "token":
        return torch.exp(log_ratio)
    n = mask.sum(-1).clamp(min=1.0)
    seq = (log_ratio * mask).sum(-1) / n  # (B,)
    seq = torch.clamp(seq, max=10.0)  # as verl's GSPO: avoid overflow of the shared ratio
    return torch.exp(seq.detach().unsqueeze(-1) + logp - logp.detach())


def clipped_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO loss with asymmetric and dual clipping.

    L = max(−A·r, −A·clip(r, 1 − ε_low, 1 + ε_high)); for A < 0 additionally
    L = min(L, −A·c) (dual clip).

    Args:
        ratio, adv: (..., T) importance ratios and advantages.
    Returns:
        (loss, clipped): (..., T) per-token loss and a bool mask of tokens where the clip
        changed the loss.
    """
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(l1, l2)
    dual = torch.minimum(loss, -adv * clip_ratio_c)
    loss = torch.where(adv < 0, dual, loss)
    return loss, l2 > l1


def aggregate_loss(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAgg,
    n_tokens: float | None = None,
    n_seqs: float | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Aggregate a (B, T) token loss to a scalar.

    - ``token-mean``: Σ masked loss / number of tokens.
    - ``seq-mean-token-sum``: per sequence Σ over tokens, then mean over sequences.
    - ``seq-mean-token-mean``: per sequence mean over tokens, then mean over sequences.
    - ``seq-mean-token-sum-norm``: per sequence Σ over tokens / ``scale`` (Dr.GRPO: the
      maximum response length), then mean over sequences.

    Sequences with no unmasked token are left out of every count. With gradient accumulation
    pass the mini-batch totals ``n_tokens`` / ``n_seqs`` so that the micro-batch losses add up
    to the mini-batch loss; by default the counts of this ``mask`` are used.
    """
    mask = mask.to(loss.dtype)
    tok_per_seq = mask.sum(-1)  # (B,)
    seq_sum = (loss * mask).sum(-1)  # (B,)
    if mode == "token-mean":
        denom = float(tok_per_seq.sum()) if n_tokens is None else n_tokens
        return seq_sum.sum() / max(denom, 1.0)
    valid = (tok_per_seq > 0).to(loss.dtype)
    denom = float(valid.sum()) if n_seqs is None else n_seqs
    if mode == "seq-mean-token-sum":
        per_seq = seq_sum
    elif mode == "seq-mean-token-mean":
        per_seq = seq_sum / tok_per_seq.clamp(min=1.0)
    elif mode == "seq-mean-token-sum-norm":
        if scale is None or scale <= 0:
            raise ValueError("seq-mean-token-sum-norm needs a positive scale (max response length)")
        per_seq = seq_sum / scale
    else:
        raise ValueError(f"unknown loss aggregation {mode!r}")
    return (per_seq * valid).sum() / max(denom, 1.0)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: KLType) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference, (..., T).

    k1 = logp − ref; abs = |logp − ref|; k2 = ½(logp − ref)²;
    k3 (low-variance) = exp(ref − logp) − (ref − logp) − 1 with the inner difference clamped to
    ±20 and the result to [−10, 10] (verl's clamps).
    """
    diff = logp - ref_logp
    if kind == "k1":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "k2":
        return 0.5 * diff.square()
    if kind == "k3":
        inner = torch.clamp(ref_logp - logp, -20.0, 20.0)
        return torch.clamp(torch.exp(inner) - inner - 1.0, -10.0, 10.0)
    raise ValueError(f"unknown KL type {kind!r}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) along the last axis: (..., V) → (...)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)
