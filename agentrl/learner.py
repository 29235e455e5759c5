"""The PPO-style learner: clipped surrogate over response tokens with AdamW.

One training sample is one environment step: the prompt the policy saw and the response it
generated, with the step's advantage broadcast to every response token. Per mini-batch the
loss is the clipped surrogate (asymmetric clip ε_low/ε_high, dual clip ``c`` for negative
advantages, as verl's ``compute_policy_loss_vanilla``) aggregated by ``token-mean`` over the
mini-batch's response tokens. Mini-batches are split into micro-batches by a token budget; each
micro-batch's loss is divided by the mini-batch's token count, so gradient accumulation gives
exactly the token-mean gradient. See ALGOS.md §8.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from agentrl.configuration import check


@dataclass(frozen=True)
class LearnerConfig:
    """Optimiser and loss settings of the policy update."""

    lr: float = 1e-3
    """AdamW learning rate (1e-3 suits the tiny model; real models use ~1e-6)."""
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    clip_low: float = 0.2
    """ε_low: ratio floor is 1 − clip_low."""
    clip_high: float = 0.2
    """ε_high: ratio ceiling is 1 + clip_high (0.28 = DAPO clip-higher)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound for negative advantages (must be > 1)."""
    loss_agg: Literal["token-mean"] = "token-mean"
    """How token losses are aggregated."""
    ppo_epochs: int = 1
    """Passes over the batch per iteration."""
    mini_batch_steps: int = 0
    """Steps per optimiser step; 0 = the whole batch in one mini-batch."""
    micro_batch_tokens: int = 8192
    """Token budget of one forward/backward pass (gradient accumulation within a mini-batch)."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables."""

    def __post_init__(self) -> None:
        check(self.lr > 0, "learner.lr", self.lr, "> 0")
        check(self.clip_low > 0, "learner.clip_low", self.clip_low, "> 0")
        check(self.clip_high > 0, "learner.clip_high", self.clip_high, "> 0")
        check(self.clip_ratio_c > 1, "learner.clip_ratio_c", self.clip_ratio_c, "> 1")
        check(self.ppo_epochs >= 1, "learner.ppo_epochs", self.ppo_epochs, ">= 1")
        check(self.mini_batch_steps >= 0, "learner.mini_batch_steps", self.mini_batch_steps, ">= 0")
        check(
            self.micro_batch_tokens >= 1,
            "learner.micro_batch_tokens",
            self.micro_batch_tokens,
            ">= 1",
        )
        check(self.max_grad_norm >= 0, "learner.max_grad_norm", self.max_grad_norm, ">= 0")


@dataclass
class Sample:
    """One training sample: an environment step's prompt and response."""

    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    advantage: float


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO loss with asymmetric and dual clipping.

    Args:
        logp, old_logp, adv: (..., T) current and behaviour log-probs and advantages.
    Returns:
        (loss, clipped): (..., T) per-token loss and a bool mask of tokens where clipping
        changed the loss.
    """
    ratio = torch.exp(torch.clamp(logp - old_logp, -20.0, 20.0))
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(l1, l2)
    dual = torch.minimum(loss, -adv * clip_ratio_c)
    loss = torch.where(adv < 0, dual, loss)
    return loss, l2 > l1


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention: torch.Tensor,
    temperature: float,
    n_last: int | None = None,
) -> torch.Tensor:
    """Log-prob of each token given its prefix, with logits divided by ``temperature``.

    Args:
        input_ids, attention: (B, L) sequences and their mask; left padding is supported
            (position ids follow the mask, as in generation).
        n_last: only score the last ``n_last`` tokens (the lm-head and softmax then run on
            ``n_last`` positions instead of L, which matters for large vocabularies).
    Returns:
        (B, L−1), or (B, n_last) with ``n_last``: entry t is the log-prob of token t+1 (of the
        scored window) given everything before it.
    """
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    keep = 0 if n_last is None else n_last + 1
    out = model(
        input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=keep
    )
    logits = out.logits[:, :-1].float()  # (B, W, V): W = L−1 or n_last
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    b, w, v = logits.shape
    targets = input_ids[:, -w:]
    nll = F.cross_entropy(logits.reshape(b * w, v), targets.reshape(-1), reduction="none")
    return -nll.view(b, w)


def _pack(samples: Sequence[Sample], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Left-pad prompt+response sequences so every response ends at the last column.

    Returns ``ids``/``attn`` (B, L) and ``mask``, ``old``, ``adv`` (B, R) aligned with the last
    R = max response length target tokens (see :func:`token_logprobs` with ``n_last=R``).
    """
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    r_max = max(len(s.response_ids) for s in samples)
    b = len(samples)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, r_max), dtype=torch.float32)
    old = torch.zeros((b, r_max), dtype=torch.float32)
    adv = torch.zeros((b, r_max), dtype=torch.float32)
    for r, s in enumerate(samples):
        seq = s.prompt_ids + s.response_ids
        n = len(s.response_ids)
        ids[r, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        attn[r, width - len(seq) :] = 1
        mask[r, r_max - n :] = 1.0
        old[r, r_max - n :] = torch.tensor(s.old_logprobs, dtype=torch.float32)
        adv[r, r_max - n :] = s.advantage
    tensors = dict(ids=ids, attn=attn, mask=mask, old=old, adv=adv)
    return {k: v.to(device) for k, v in tensors.items()}


def micro_batches(samples: Sequence[Sample], token_budget: int) -> list[list[Sample]]:
    """Split ``samples`` into consecutive chunks whose padded size stays within the budget
    (a single sample larger than the budget forms its own chunk)."""
    chunks: list[list[Sample]] = []
    cur: list[Sample] = []
    # Similar lengths together waste less padding; the order within a mini-batch is irrelevant.
    samples = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.response_ids))
    width = 0
    for s in samples:
        n = len(s.prompt_ids) + len(s.response_ids)
        if cur and max(width, n) * (len(cur) + 1) > token_budget:
            chunks.append(cur)
            cur, width = [], 0
        cur.append(s)
        width = max(width, n)
    if cur:
        chunks.append(cur)
    return chunks


class Learner:
    """Owns the optimiser and runs the PPO update on batches of :class:`Sample`."""

    def __init__(self, model, cfg: LearnerConfig, pad_id: int, temperature: float = 1.0):
        self.model = model
        self.cfg = cfg
        self.pad_id = pad_id
        self.temperature = temperature if temperature > 0 else 1.0
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )

    def update(self, samples: Sequence[Sample], rng: np.random.Generator) -> dict[str, float]:
        """Run ``ppo_epochs`` passes of clipped-surrogate updates; return ``loss/``/``perf/``
        metrics averaged over optimiser steps."""
        samples = [s for s in samples if s.response_ids]
        if not samples:
            return {}
        cfg = self.cfg
        device = next(self.model.parameters()).device
        self.model.train()
        size = cfg.mini_batch_steps or len(samples)
        sums: dict[str, float] = {}
        n_updates = 0
        n_tokens = 0
        t0 = time.perf_counter()
        for _ in range(cfg.ppo_epochs):
            order = rng.permutation(len(samples))
            for start in range(0, len(samples), size):
                mini = [samples[i] for i in order[start : start + size]]
                stats = self._step(mini, device)
                n_tokens += int(stats.pop("tokens"))
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_updates += 1
        elapsed = time.perf_counter() - t0
        out = {k: v / n_updates for k, v in sums.items()}
        out["perf/learn_tokens_per_s"] = n_tokens / max(elapsed, 1e-9)
        out["loss/updates"] = float(n_updates)
        return out

    def _step(self, mini: Sequence[Sample], device) -> dict[str, float]:
        cfg = self.cfg
        total_tokens = sum(len(s.response_ids) for s in mini)
        self.optimizer.zero_grad(set_to_none=True)
        pg_sum = clip_sum = kl_sum = 0.0
        for chunk in micro_batches(mini, cfg.micro_batch_tokens):
            t = _pack(chunk, self.pad_id, device)
            logp = token_logprobs(
                self.model, t["ids"], t["attn"], self.temperature, n_last=t["mask"].shape[1]
            )
            loss_tok, clipped = clipped_surrogate(
                logp, t["old"], t["adv"], cfg.clip_low, cfg.clip_high, cfg.clip_ratio_c
            )
            mask = t["mask"]
            # token-mean over the whole mini-batch: divide by its token count, not the chunk's.
            loss = (loss_tok * mask).sum() / total_tokens
            loss.backward()
            with torch.no_grad():
                pg_sum += float((loss_tok * mask).sum())
                clip_sum += float((clipped.float() * mask).sum())
                kl_sum += float(((t["old"] - logp) * mask).sum())
        if cfg.max_grad_norm > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        else:
            grad_norm = torch.sqrt(
                sum((p.grad**2).sum() for p in self.model.parameters() if p.grad is not None)
            )
        self.optimizer.step()
        gn = float(grad_norm)
        return {
            "loss/pg": pg_sum / total_tokens,
            "loss/clipfrac": clip_sum / total_tokens,
            "loss/approx_kl": kl_sum / total_tokens,
            "loss/grad_norm": gn if math.isfinite(gn) else float("nan"),
            "tokens": float(total_tokens),
        }
