"""The PPO-style learner: policy-loss updates over the response tokens of a batch.

One training sample is one environment step: the prompt the policy saw and the response it
generated, with the step's advantage broadcast to every response token. Per mini-batch the loss
is the registered policy loss ``learner.loss`` (:mod:`agentrl.learn.policy_loss`; by default
``ppo``, the clipped surrogate: asymmetric clip ε_low/ε_high, dual clip ``c`` for negative
advantages, token- or step-level ratio, aggregated by ``learner.loss_agg``), after the
``learner.token_weights`` transforms, plus ``kl_coef``·KL to a frozen reference and minus
``entropy_coef``·entropy (pieces in :mod:`agentrl.learn.losses`; docs/methods.md#policy-losses).
Mini-batches (``learner.batching``: random, query-preserved or reward-balanced) are split into
micro-batches by a token budget; each micro-batch's loss is normalised by the *mini-batch's*
token/sequence counts, so gradient accumulation gives exactly the mini-batch gradient. Old log-probs
come from the sampler or are recomputed by the trainer (``learner.old_logprobs``); the mismatch
between the two is logged when recomputing. With ``learner.grad_cosine`` the micro-batches of a
mini-batch run in two halves and the gradients of the halves are compared (``diag/grad_cos``,
``diag/grad_snr``; :func:`gradient_halves`), from the gradients computed anyway.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, get_args

import numpy as np
import torch
import torch.nn.functional as F

from agentrl.configuration import ConfigError, check, check_choice
from agentrl.learn import parallel
from agentrl.learn.losses import (
    KLType,
    LossAgg,
    RatioLevel,
    aggregate_loss,
    clipped_surrogate,
    entropy_from_logits,
    kl_penalty,
)
from agentrl.learn.policy_loss import (
    Aggregator,
    LossInputs,
    get_policy_loss,
    get_token_weight,
    policy_loss_config,
    split_token_weight_args,
    token_weight_config,
)
from agentrl.model import mask_banned

log = logging.getLogger("agentrl")

Batching = Literal["random", "query_preserved", "reward_balanced"]

__all__ = ["Learner", "LearnerConfig", "Sample", "clipped_surrogate", "token_logprobs"]


@dataclass(frozen=True)
class LearnerConfig:
    """Optimiser and loss settings of the policy update."""

    lr: float = 1e-3
    """AdamW learning rate (1e-3 suits the tiny model; real models use ~1e-6)."""
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    """Decay after warm-up, over ``trainer.steps`` iterations (one scheduler step each)."""
    warmup_iters: int = 0
    """Iterations of linear warm-up from 0 to ``lr``."""
    min_lr_ratio: float = 0.0
    """Floor of the cosine/linear decay as a fraction of ``lr``."""
    clip_low: float = 0.2
    """ε_low: ratio floor is 1 − clip_low."""
    clip_high: float = 0.2
    """ε_high: ratio ceiling is 1 + clip_high (0.28 = DAPO clip-higher)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound for negative advantages (must be > 1)."""
    ratio_level: RatioLevel = "token"
    """``token``: PPO's per-token ratio; ``step``: one length-normalised ratio per response
    (GSPO-style; GAGPO's action-level ratio — use small clips, e.g. 3e-4/4e-4)."""
    loss_agg: LossAgg = "token-mean"
    """How token losses are aggregated (see :func:`agentrl.learn.losses.aggregate_loss`)."""
    loss_scale: int = 0
    """Divisor of ``seq-mean-token-sum-norm``; 0 = ``rollout.max_new_tokens``."""
    kl_coef: float = 0.0
    """Weight of KL(π‖π_ref) in the loss; 0 = no reference model at all."""
    kl_type: KLType = "k3"
    """KL estimator: k1, k2, k3 (low-variance, clamped as verl) or abs."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (verl-agent uses 0.001)."""
    ppo_epochs: int = 1
    """Passes over the batch per iteration."""
    mini_batch_steps: int = 0
    """Steps per optimiser step; 0 = the whole batch in one mini-batch."""
    batching: Batching = "random"
    """How a batch is split into mini-batches (:func:`mini_batches`; docs/methods.md#batching):
    ``random``; ``query_preserved`` keeps all steps of a group in the same mini-batch;
    ``reward_balanced`` gives every mini-batch the batch's share of positive- and
    negative-advantage steps. Irrelevant with one mini-batch (``mini_batch_steps=0``)."""
    query_preserved: bool = False
    """Alias of ``batching=query_preserved`` (the older spelling; still accepted)."""
    loss: str = "ppo"
    """Policy loss, by registered name (:mod:`agentrl.learn.policy_loss`): ``ppo`` (the
    clipped surrogate configured by the fields above), ``cispo``, ``klpo``, ``bpo``,
    ``vimpo``, or a third-party one."""
    loss_args: dict[str, Any] | None = None
    """Options of the loss, checked against its config dataclass, e.g.
    ``learner.loss_args={beta: 0.1, m: 16}`` (None: the paper's defaults). None rather than
    an empty mapping in the schema, so that Hydra accepts the whole mapping as an override."""
    token_weights: tuple[str, ...] = ()
    """Token-weight transforms applied in order before the loss, e.g. ``[taco, ntf]``."""
    token_weight_args: dict[str, Any] | None = None
    """Their options as ``<transform>_<field>``, e.g. ``{taco_alpha: 0.02, ntf_threshold:
    0.9}`` (flat, so the config stays two levels deep)."""
    micro_batch_tokens: int = 8192
    """Token budget of one forward/backward pass (gradient accumulation within a mini-batch)."""
    share_prompts: bool = True
    """Process a prompt shared by several samples of a micro-batch once (responses packed
    after it under a block attention mask); same result, less compute."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables."""
    old_logprobs: Literal["sampler", "recompute"] = "sampler"
    """Behaviour log-probs: as recorded by the sampler, or recomputed by the trainer before
    the update (then ``loss/old_logp_mismatch`` logs the difference)."""
    strategy: Literal["auto", "none", "ddp", "fsdp"] = "auto"
    """How the ranks of a torchrun job share the model (:mod:`agentrl.learn.parallel`):
    ``auto`` = none with one process, FSDP2 on GPUs, DDP on CPUs."""
    max_nonfinite_skips: int = 3
    """An optimiser step whose loss or gradient norm is not finite is skipped (and counted in
    ``loss/skipped_steps``); this many skips in a row stop the run with an error."""
    grad_cosine: bool = True
    """Log ``diag/grad_cos`` and ``diag/grad_snr``, the agreement of the gradients of two halves
    of each mini-batch (see :func:`gradient_halves`, :func:`half_gradient_stats`). No second
    backward: the gradient after the first half is kept (one copy of the gradient in memory)
    and compared with the rest; under torchrun the first half is reduced over the ranks too
    (one more gradient reduction per optimiser step), so the figures are global."""

    def __post_init__(self) -> None:
        check(math.isfinite(self.lr) and self.lr > 0, "learner.lr", self.lr, "finite and > 0")
        check(self.weight_decay >= 0, "learner.weight_decay", self.weight_decay, ">= 0")
        check(self.warmup_iters >= 0, "learner.warmup_iters", self.warmup_iters, ">= 0")
        check(0 <= self.min_lr_ratio <= 1, "learner.min_lr_ratio", self.min_lr_ratio, "in [0, 1]")
        check(self.clip_low > 0, "learner.clip_low", self.clip_low, "> 0")
        check(self.clip_low < 1, "learner.clip_low", self.clip_low, "< 1")
        check(self.clip_high > 0, "learner.clip_high", self.clip_high, "> 0")
        check(self.clip_ratio_c > 1, "learner.clip_ratio_c", self.clip_ratio_c, "> 1")
        check(self.loss_scale >= 0, "learner.loss_scale", self.loss_scale, ">= 0")
        check(self.kl_coef >= 0, "learner.kl_coef", self.kl_coef, ">= 0")
        check(self.entropy_coef >= 0, "learner.entropy_coef", self.entropy_coef, ">= 0")
        check(self.ppo_epochs >= 1, "learner.ppo_epochs", self.ppo_epochs, ">= 1")
        check(self.mini_batch_steps >= 0, "learner.mini_batch_steps", self.mini_batch_steps, ">= 0")
        check(
            self.micro_batch_tokens >= 1,
            "learner.micro_batch_tokens",
            self.micro_batch_tokens,
            ">= 1",
        )
        check(self.max_grad_norm >= 0, "learner.max_grad_norm", self.max_grad_norm, ">= 0")
        check(
            self.max_nonfinite_skips >= 1,
            "learner.max_nonfinite_skips",
            self.max_nonfinite_skips,
            ">= 1",
        )
        if self.query_preserved:
            if self.batching == "reward_balanced":
                raise ConfigError(
                    "learner.query_preserved=true (the alias of batching=query_preserved) "
                    "contradicts learner.batching=reward_balanced; set only learner.batching"
                )
            object.__setattr__(self, "batching", "query_preserved")
        check_choice("learner.batching", self.batching, get_args(Batching))
        # Names and options of the loss and token weights are checked here, at start-up.
        for key in ("loss_args", "token_weight_args"):
            value = getattr(self, key)
            check(value is None or isinstance(value, Mapping), f"learner.{key}", value, "a mapping")
        policy_loss_config(self.loss, self.loss_args)
        if len(set(self.token_weights)) < len(self.token_weights):
            raise ConfigError(
                f"learner.token_weights={list(self.token_weights)} lists a transform twice"
            )
        split = split_token_weight_args(self.token_weights, self.token_weight_args or {})
        for name in self.token_weights:
            token_weight_config(name, split[name])


@dataclass
class Sample:
    """One training sample: an environment step's prompt and response."""

    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    group: int = 0
    """Task group of the step (for query-preserved mini-batching)."""
    ref_logprobs: list[float] | None = field(default=None, repr=False)
    """Reference-model log-probs, filled by the learner when ``kl_coef > 0``."""
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    """Per-token arrays (first axis: the response tokens) stored by the policy loss's
    ``prepare`` hook; they reach the loss as (S, R, ...) tensors in ``LossInputs.extra``."""


def response_logits(
    model,
    input_ids: torch.Tensor,
    attention: torch.Tensor,
    n_last: int | None = None,
    banned: Sequence[int] = (),
) -> torch.Tensor:
    """Logits predicting each of the last ``n_last`` tokens (all tokens after the first if None).

    Args:
        input_ids, attention: (B, L) sequences and their mask; left padding is supported
            (position ids follow the mask, as in generation).
        banned: token ids generation never emits (:func:`agentrl.model.banned_token_ids`);
            their logits are masked so that the softmax is the sampler's distribution.
    Returns:
        (B, W, V) float32 with W = ``n_last`` or L − 1: entry t predicts token L − W + t. Only W
        positions go through the lm-head, which matters for large vocabularies.
    """
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    keep = 0 if n_last is None else n_last + 1
    out = model(
        input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=keep
    )
    return mask_banned(out.logits[:, :-1].float(), banned)


def logprobs_from_logits(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float
) -> torch.Tensor:
    """log softmax(logits / temperature)[target]: (B, W, V), (B, W) → (B, W)."""
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    b, w, v = logits.shape
    nll = F.cross_entropy(logits.reshape(b * w, v), targets.reshape(-1), reduction="none")
    return -nll.view(b, w)


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention: torch.Tensor,
    temperature: float,
    n_last: int | None = None,
    banned: Sequence[int] = (),
) -> torch.Tensor:
    """Log-prob of each token given its prefix, with logits divided by ``temperature``.

    Args:
        input_ids, attention: (B, L) sequences and their mask (left padding supported).
        n_last: only score the last ``n_last`` tokens.
        banned: token ids generation never emits (masked, see :func:`response_logits`).
    Returns:
        (B, L−1), or (B, n_last) with ``n_last``: entry t is the log-prob of token t+1 (of the
        scored window) given everything before it.
    """
    logits = response_logits(model, input_ids, attention, n_last, banned)
    return logprobs_from_logits(logits, input_ids[:, -logits.shape[1] :], temperature)


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
    tensors = dict(ids=ids, attn=attn, mask=mask, old=old, adv=adv, targets=ids[:, -r_max:])
    if all(s.ref_logprobs is not None for s in samples):
        ref = torch.zeros((b, r_max), dtype=torch.float32)
        for r, s in enumerate(samples):
            ref[r, r_max - len(s.response_ids) :] = torch.tensor(s.ref_logprobs)
        tensors["ref"] = ref
    tensors.update(_extra_tensors(samples, r_max))
    return {k: v.to(device) for k, v in tensors.items()}


def _extra_tensors(samples: Sequence[Sample], r_max: int) -> dict[str, torch.Tensor]:
    """``extra:<key>`` (S, R, ...) right-aligned, for the keys every sample has (else none)."""
    keys = set(samples[0].extra)
    for s in samples[1:]:
        keys &= set(s.extra)
    out = {}
    for key in sorted(keys):
        arrays = [np.asarray(s.extra[key]) for s in samples]
        kind = torch.long if arrays[0].dtype.kind in "iub" else torch.float32
        x = torch.zeros((len(samples), r_max, *arrays[0].shape[1:]), dtype=kind)
        for r, a in enumerate(arrays):
            if len(a):
                x[r, r_max - len(a) :] = torch.as_tensor(a, dtype=kind)
        out[f"extra:{key}"] = x
    return out


def _per_sample_tensors(samples: Sequence[Sample], r_max: int) -> dict[str, torch.Tensor]:
    """``mask``, ``old``, ``adv`` (and ``ref``, ``targets``) as (S, R), right-aligned."""
    b = len(samples)
    out = {k: torch.zeros((b, r_max), dtype=torch.float32) for k in ("mask", "old", "adv")}
    out["targets"] = torch.zeros((b, r_max), dtype=torch.long)
    with_ref = all(s.ref_logprobs is not None for s in samples)
    if with_ref:
        out["ref"] = torch.zeros((b, r_max), dtype=torch.float32)
    for r, s in enumerate(samples):
        n = len(s.response_ids)
        out["mask"][r, r_max - n :] = 1.0
        out["old"][r, r_max - n :] = torch.tensor(s.old_logprobs, dtype=torch.float32)
        out["adv"][r, r_max - n :] = s.advantage
        out["targets"][r, r_max - n :] = torch.tensor(s.response_ids, dtype=torch.long)
        if with_ref:
            out["ref"][r, r_max - n :] = torch.tensor(s.ref_logprobs, dtype=torch.float32)
    out.update(_extra_tensors(samples, r_max))
    return out


def _pack_shared(samples: Sequence[Sample], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Pack the samples that share a prompt into one row: the prompt once, then each response.

    A row is ``prompt, response_1, ..., response_n`` (left-padded to the longest row); a 4-D
    boolean mask lets each response attend to the prompt and to its own earlier tokens only, and
    each response's position ids continue from the end of the prompt. Every response token is
    then predicted exactly as in its own unpacked sequence, but the prompt is processed once
    per group instead of once per sample.

    Returns ``ids``/``pos`` (B, W), ``attn4`` (B, 1, W, W), ``n_last`` (the scored window),
    ``row``/``col`` (S, R) indices of the logits predicting each sample's response tokens
    within the window, and the per-sample tensors of :func:`_per_sample_tensors`.
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(tuple(s.prompt_ids), []).append(i)
    rows = list(groups.items())
    lengths = [len(p) + sum(len(samples[i].response_ids) for i in idx) for p, idx in rows]
    width = max(lengths)
    n_last = max(n - len(p) + 1 for n, (p, _) in zip(lengths, rows))
    b, r_max = len(rows), max(len(s.response_ids) for s in samples)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    pos = torch.zeros((b, width), dtype=torch.long)
    allowed = torch.zeros((b, width, width), dtype=torch.bool)
    row = torch.zeros((len(samples), r_max), dtype=torch.long)
    col = torch.zeros((len(samples), r_max), dtype=torch.long)
    first = width - n_last  # column of the first scored logit
    for r, ((prompt, idx), n) in enumerate(zip(rows, lengths)):
        o = width - n  # left padding
        lp = len(prompt)
        allowed[r, torch.arange(o), torch.arange(o)] = True  # pads see themselves: no NaN rows
        ids[r, o : o + lp] = torch.tensor(prompt, dtype=torch.long)
        pos[r, o : o + lp] = torch.arange(lp)
        allowed[r, o : o + lp, o : o + lp] = torch.ones(lp, lp, dtype=torch.bool).tril()
        start = o + lp
        for i in idx:
            resp = samples[i].response_ids
            k = len(resp)
            ids[r, start : start + k] = torch.tensor(resp, dtype=torch.long)
            pos[r, start : start + k] = torch.arange(lp, lp + k)
            allowed[r, start : start + k, o : o + lp] = True
            allowed[r, start : start + k, start : start + k] = torch.ones(
                k, k, dtype=torch.bool
            ).tril()
            # token 0 is predicted at the prompt's last column, token j at the column of j - 1
            cols = torch.cat([torch.tensor([o + lp - 1]), torch.arange(start, start + k - 1)])
            row[i, r_max - k :] = r
            col[i, r_max - k :] = cols - first
            start += k
    t = dict(ids=ids, pos=pos, attn4=allowed.unsqueeze(1), row=row, col=col)
    t.update(_per_sample_tensors(samples, r_max))
    out = {k: v.to(device) for k, v in t.items()}
    out["n_last"] = n_last
    return out


def forward_chunk(
    model,
    chunk: Sequence[Sample],
    pad_id: int,
    device,
    share_prompts: bool,
    banned: Sequence[int] = (),
) -> tuple[torch.Tensor, dict]:
    """Logits predicting every response token of ``chunk``, and the aligned tensors.

    Returns ``(logits, t)``: logits (S, R, V), untempered, with the ``banned`` tokens masked
    (:func:`agentrl.model.mask_banned`), and ``t`` with ``targets``, ``mask``, ``old``, ``adv``
    (and ``ref``), each (S, R). With ``share_prompts`` and at least two samples with the same
    prompt, prompts are processed once per group (:func:`_pack_shared`); the result is the same
    up to floating-point rounding.
    """
    if share_prompts and len({tuple(s.prompt_ids) for s in chunk}) < len(chunk):
        t = _pack_shared(chunk, pad_id, device)
        out = model(
            input_ids=t["ids"],
            attention_mask=t["attn4"],
            position_ids=t["pos"],
            logits_to_keep=t["n_last"],
        )
        return mask_banned(out.logits[t["row"], t["col"]].float(), banned), t
    t = _pack(chunk, pad_id, device)
    return response_logits(model, t["ids"], t["attn"], t["mask"].shape[1], banned), t


def micro_batches(samples: Sequence[Sample], token_budget: int) -> list[list[Sample]]:
    """Split ``samples`` into consecutive chunks whose padded size stays within the budget
    (a single sample larger than the budget forms its own chunk)."""
    # Similar lengths together waste less padding, identical prompts together can share one
    # forward pass; the order within a mini-batch is irrelevant.
    samples = sorted(samples, key=lambda s: (len(s.prompt_ids), s.prompt_ids, len(s.response_ids)))
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    return [[samples[i] for i in c] for c in budget_chunks(lengths, token_budget)]


def budget_chunks(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Consecutive indices of ``lengths`` grouped into chunks of at most ``token_budget`` padded
    tokens (rows × longest); an item longer than the budget forms its own chunk."""
    chunks: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for i, n in enumerate(lengths):
        if cur and max(width, n) * (len(cur) + 1) > token_budget:
            chunks.append(cur)
            cur, width = [], 0
        cur.append(i)
        width = max(width, n)
    if cur:
        chunks.append(cur)
    return chunks


@torch.no_grad()
def score_samples(
    model,
    samples: Sequence[Sample],
    pad_id: int,
    temperature: float,
    token_budget: int,
    share_prompts: bool = True,
    reducer: Reducer | None = None,
    banned: Sequence[int] = (),
) -> list[list[float]]:
    """Teacher-forced log-prob of every response token of ``samples``, in their order.

    ``banned``: token ids generation never emits; pass :func:`agentrl.model.banned_token_ids`
    of the tokenizer so that the log-probs are those of the distribution sampled from.

    Runs in eval mode (restored afterwards) in length-sorted micro-batches of at most
    ``token_budget`` padded tokens. ``reducer`` (for an FSDP model, whose forwards are
    collectives): every rank runs as many forwards as the rank with the most micro-batches.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: dict[int, list[float]] = {}
    index = {id(s): i for i, s in enumerate(samples)}
    chunks = micro_batches(samples, token_budget) if samples else []
    try:
        if reducer is not None and reducer.world > 1:
            for _ in range(int(reducer.max([len(chunks)])[0]) - len(chunks)):
                parallel.dummy_forward(model, pad_id, device)
        for chunk in chunks:
            logits, t = forward_chunk(model, chunk, pad_id, device, share_prompts, banned)
            lp = logprobs_from_logits(logits, t["targets"], temperature)
            for r, s in enumerate(chunk):
                out[index[id(s)]] = lp[r, lp.shape[1] - len(s.response_ids) :].cpu().tolist()
    finally:
        model.train(was_training)
    return [out[i] for i in range(len(samples))]


@torch.no_grad()
def map_samples(
    model,
    samples: Sequence[Sample],
    pad_id: int,
    temperature: float,
    token_budget: int,
    share_prompts: bool,
    fn: Callable[..., torch.Tensor],
    ref_logits: Callable[[Sequence[Sample]], torch.Tensor] | None = None,
    reducer: Reducer | None = None,
    banned: Sequence[int] = (),
) -> list[np.ndarray]:
    """Apply ``fn`` to the temperature-scaled logits of every response token of ``samples``.

    Like :func:`score_samples` (eval mode, length-sorted micro-batches, lockstep forwards
    under FSDP), but ``fn(logits, t, ref)`` gets the (S, R, V) logits / temperature, the
    aligned tensors ``t`` of :func:`forward_chunk` and, with ``ref_logits`` (a function of the
    micro-batch returning raw (S, R, V) reference logits), the scaled reference logits (else
    None); it returns an (S, R, ...) tensor. Returns each sample's rows for its own response
    tokens, (n, ...) numpy arrays, in the order of ``samples``.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: dict[int, np.ndarray] = {}
    index = {id(s): i for i, s in enumerate(samples)}
    chunks = micro_batches(samples, token_budget) if samples else []
    scale = 1.0 if temperature in (0.0, 1.0) else temperature
    try:
        if reducer is not None and reducer.world > 1:
            for _ in range(int(reducer.max([len(chunks)])[0]) - len(chunks)):
                parallel.dummy_forward(model, pad_id, device)
                if ref_logits is not None:
                    ref_logits(None)  # the reference's forward is a collective too
        for chunk in chunks:
            logits, t = forward_chunk(model, chunk, pad_id, device, share_prompts, banned)
            ref = None if ref_logits is None else ref_logits(chunk) / scale
            values = fn(logits / scale, t, ref)
            for r, s in enumerate(chunk):
                n = len(s.response_ids)
                out[index[id(s)]] = values[r, values.shape[1] - n :].cpu().numpy()
    finally:
        model.train(was_training)
    return [out[i] for i in range(len(samples))]


def gradient_halves(chunks: list[list[Sample]]) -> list[list[list[Sample]]]:
    """Two halves of a mini-batch's micro-batches, for the gradient cosine.

    Micro-batches alternate between the halves (they come sorted by length, so each half gets
    short and long ones). A mini-batch that fits one micro-batch has that micro-batch split in
    two (one forward/backward more, on about half the samples each): by alternate runs of
    samples with the same prompt, so a shared prompt is still processed once, or by alternate
    samples when they all share one prompt. One sample, or none: a single half.
    """
    if len(chunks) != 1 or len(chunks[0]) < 2:
        return [chunks[0::2], chunks[1::2]]
    runs: list[list[Sample]] = []  # micro_batches sorts by prompt: equal prompts are adjacent
    for s in chunks[0]:
        if runs and runs[-1][0].prompt_ids == s.prompt_ids:
            runs[-1].append(s)
        else:
            runs.append([s])
    if len(runs) == 1:
        return [[chunks[0][0::2]], [chunks[0][1::2]]]
    return [[[s for r in runs[0::2] for s in r]], [[s for r in runs[1::2] for s in r]]]


def half_gradient_stats(
    first: Sequence[torch.Tensor | None], total: Sequence[torch.Tensor | None]
) -> list[float]:
    """[<g1, g2>, |g1|², |g2|²] (float64) for g2 = total − first, summed over the tensors.

    Args:
        first: the gradient after the first half of the micro-batches, per parameter (local
            shards under FSDP); None for a parameter without a gradient yet (zero).
        total: the whole mini-batch's gradient, aligned with ``first``; None: no gradient.
    """
    acc = None
    for a, g in zip(first, total):
        if g is None:
            continue
        b = g.float().reshape(-1)
        a = torch.zeros_like(b) if a is None else a.float().reshape(-1)
        b = b - a
        part = torch.stack([torch.dot(a, b), torch.dot(a, a), torch.dot(b, b)]).double()
        acc = part if acc is None else acc + part
    return [0.0, 0.0, 0.0] if acc is None else acc.cpu().tolist()


def gradient_agreement(dot: float, sq1: float, sq2: float) -> dict[str, float]:
    """``diag/grad_cos`` = <g1, g2>/(|g1||g2|) and ``diag/grad_snr`` = 4<g1, g2>/|g1 − g2|².

    For halves g_h = ½(μ + ε_h) of one mini-batch gradient g = g1 + g2 with independent noise,
    E<g1, g2> = |μ|²/4 and E|g1 − g2|² = E|g − μ|², so grad_snr estimates the signal-to-noise
    ratio |μ|²/E|g − μ|² of the mini-batch gradient (halves of about equal size; it is negative
    when the halves disagree). Empty when a half has no gradient; no SNR for identical halves.
    """
    if not (math.isfinite(dot) and math.isfinite(sq1) and math.isfinite(sq2)):
        return {}  # a non-finite gradient (the step is skipped): nothing to compare
    if sq1 <= 0 or sq2 <= 0:
        return {}
    out = {"diag/grad_cos": dot / math.sqrt(sq1 * sq2)}
    diff = sq1 + sq2 - 2.0 * dot
    if diff > 0:
        out["diag/grad_snr"] = 4.0 * dot / diff
    return out


def mini_batches(
    samples: Sequence[Sample],
    size: int,
    rng: np.random.Generator,
    query_preserved: bool = False,
    batching: Batching | None = None,
) -> list[list[Sample]]:
    """Shuffle ``samples`` into mini-batches of about ``size`` steps (docs/methods.md#batching).

    ``batching`` (default: ``query_preserved`` if that flag is set, else ``random``):

    - ``random``: a random permutation cut into consecutive mini-batches of ``size``.
    - ``query_preserved``: whole groups are shuffled and packed, so every step of a group
      lands in the same mini-batch (a mini-batch may then exceed ``size`` by one group).
    - ``reward_balanced``: k = ⌈N/size⌉ mini-batches; the positive-, negative- and
      zero-advantage steps are each shuffled and dealt round-robin over the mini-batches
      (continuing where the previous sign stopped), so every mini-batch holds the batch's share
      of each sign (±1) and sizes differ by at most one. The paper balances positive and
      negative *rollouts*; a sample here is one environment step, balanced by the sign of its
      advantage (for episode-level estimators, the rollout's sign).
    """
    mode = batching or ("query_preserved" if query_preserved else "random")
    if mode == "reward_balanced":
        k = max(1, math.ceil(len(samples) / size))
        out: list[list[Sample]] = [[] for _ in range(k)]
        dealt = 0
        for sign in (1, -1, 0):
            part = [s for s in samples if np.sign(s.advantage) == sign]
            for i in rng.permutation(len(part)):
                out[dealt % k].append(part[i])
                dealt += 1
        return [m for m in out if m]
    if mode == "random":
        order = rng.permutation(len(samples))
        return [[samples[i] for i in order[k : k + size]] for k in range(0, len(samples), size)]
    groups: dict[int, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    keys = list(groups)
    out = [[]]
    for k in rng.permutation(len(keys)):
        if out[-1] and len(out[-1]) + len(groups[keys[k]]) > size:
            out.append([])
        out[-1].extend(groups[keys[k]])
    return out


def lr_lambda(cfg: LearnerConfig, total_iters: int):
    """The multiplier of ``lr`` at iteration i: linear warm-up, then constant/cosine/linear."""

    def fn(i: int) -> float:
        if cfg.warmup_iters and i < cfg.warmup_iters:
            return (i + 1) / cfg.warmup_iters
        if cfg.lr_schedule == "constant":
            return 1.0
        span = max(total_iters - cfg.warmup_iters, 1)
        frac = min(max(i - cfg.warmup_iters, 0) / span, 1.0)
        if cfg.lr_schedule == "cosine":
            decay = 0.5 * (1.0 + math.cos(math.pi * frac))
        else:
            decay = 1.0 - frac
        return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * decay

    return fn


class Reducer(Protocol):
    """The collectives the learner needs (``agentrl.run.distributed.Dist`` provides them)."""

    world: int

    def sum(self, values: Sequence[float]) -> list[float]: ...

    def max(self, values: Sequence[float]) -> list[float]: ...


class _Alone:
    """World size 1: reductions are the identity, nothing is communicated."""

    world = 1

    def sum(self, values: Sequence[float]) -> list[float]:
        return [float(v) for v in values]

    max = sum


class NonFiniteLossError(RuntimeError):
    """Too many optimiser steps in a row had a non-finite loss or gradient norm."""


class Learner:
    """Owns the optimiser, the LR schedule and the reference model; runs the PPO update."""

    def __init__(
        self,
        model,
        cfg: LearnerConfig,
        pad_id: int,
        temperature: float = 1.0,
        total_iters: int = 1,
        max_response_tokens: int = 1,
        dist: Reducer | None = None,
        banned_ids: Sequence[int] = (),
    ):
        """``model`` is the plain transformers (or peft) module; with ``dist`` of world size
        > 1 the learner wraps it for ``cfg.strategy`` (DDP or FSDP2) and :attr:`model` is the
        wrapped module, :attr:`module` the transformers one (for saving and generation).
        ``banned_ids``: the token ids the sampler never emits
        (:func:`agentrl.model.banned_token_ids`); the learner normalises over the same
        vocabulary as the sampler, so their probability is 0 and their logits get no gradient."""
        self.cfg = cfg
        self.pad_id = pad_id
        self.banned = tuple(banned_ids)
        self.dist: Reducer = dist or _Alone()
        self.temperature = temperature if temperature > 0 else 1.0
        self.loss_scale = float(cfg.loss_scale or max_response_tokens)
        # The policy loss and token-weight transforms, resolved once (names were checked when
        # the config was built).
        self.loss_spec = get_policy_loss(cfg.loss)
        self.loss_cfg = policy_loss_config(cfg.loss, cfg.loss_args)
        self.loss_agg: LossAgg = getattr(self.loss_cfg, "loss_agg", None) or cfg.loss_agg
        split = split_token_weight_args(cfg.token_weights, cfg.token_weight_args or {})
        self.token_weights = [
            (get_token_weight(n), token_weight_config(n, split[n])) for n in cfg.token_weights
        ]
        self.metric_names = list(
            dict.fromkeys(
                [m for m in self.loss_spec.metrics if m != "clipfrac"]
                + [m for spec, _ in self.token_weights for m in spec.metrics]
            )
        )
        self.ref_model = None
        if (cfg.kl_coef > 0 or self.loss_spec.needs_ref) and not _is_peft(model):
            # A frozen copy of the initial policy; with LoRA the base model (adapters disabled)
            # is the reference, so no copy is needed.
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        device = next(model.parameters()).device
        self.strategy = parallel.resolve_strategy(
            cfg.strategy, self.dist.world, device.type == "cuda"
        )
        self.model = parallel.wrap(model, self.strategy, device)
        self.module = parallel.unwrap(self.model)
        if self.ref_model is not None and self.strategy == "fsdp":
            self.ref_model = parallel.wrap(self.ref_model, "fsdp", device)  # sharded too
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(cfg, total_iters)
        )
        self.nonfinite_streak = 0
        """Optimiser steps skipped in a row for a non-finite loss or gradient norm."""

    def state_dict(self) -> dict:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "nonfinite_streak": self.nonfinite_streak,
        }

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.nonfinite_streak = int(state.get("nonfinite_streak", 0))

    def score(self, samples: Sequence[Sample], reference: bool = False) -> list[list[float]]:
        """Teacher-forced log-probs of each sample's response under the policy (or reference).

        Under FSDP every rank must call this together (each with its own samples)."""
        model = self.ref_model if reference and self.ref_model is not None else self.module
        ctx = model.disable_adapter() if reference and _is_peft(model) else nullcontext()
        with ctx:
            out = score_samples(
                model,
                samples,
                self.pad_id,
                self.temperature,
                self.cfg.micro_batch_tokens,
                self.cfg.share_prompts,
                reducer=self.dist if parallel.needs_lockstep(model) else None,
                banned=self.banned,
            )
        parallel.reshard(model)
        return out

    def update(self, samples: Sequence[Sample], rng: np.random.Generator) -> dict[str, float]:
        """Run ``ppo_epochs`` passes of clipped-surrogate updates and one scheduler step.

        Returns ``loss/`` and ``perf/`` metrics averaged over optimiser steps.
        """
        samples = [s for s in samples if s.response_ids]
        # Every rank takes part while any rank has samples (the collectives must match).
        if not self.dist.sum([len(samples)])[0]:
            self.scheduler.step()
            return {}
        cfg = self.cfg
        device = next(self.module.parameters()).device
        out: dict[str, float] = {"loss/lr": self.optimizer.param_groups[0]["lr"]}
        t0 = time.perf_counter()
        if cfg.old_logprobs == "recompute":
            fresh = self.score(samples)
            diffs = np.concatenate(
                [np.abs(np.subtract(f, s.old_logprobs)) for f, s in zip(fresh, samples)]
            )
            out["loss/old_logp_mismatch_mean"] = float(diffs.mean())
            out["loss/old_logp_mismatch_max"] = float(diffs.max())
            for f, s in zip(fresh, samples):
                s.old_logprobs = f
        if cfg.kl_coef > 0 or self.loss_spec.needs_ref == "logp":
            for ref, s in zip(self.score(samples, reference=True), samples):
                s.ref_logprobs = ref
        if self.loss_spec.prepare is not None:
            seed = int(rng.integers(2**62))
            ctx = _PrepareContext(self, samples, seed)
            prep = self.loss_spec.prepare(ctx, samples, self.loss_cfg) or {}
            out.update({f"loss/{k}": float(v) for k, v in prep.items()})
        self.model.train()
        sums: dict[str, float] = {}
        diag: dict[str, list[float]] = {}
        n_updates = n_tokens = 0
        for _ in range(cfg.ppo_epochs):
            for mini in self._mini_batches(samples, rng):
                stats = self._step(mini, device)
                n_tokens += int(stats.pop("tokens"))
                for k in [k for k in stats if k.startswith("diag/")]:  # not every step has them
                    diag.setdefault(k, []).append(stats.pop(k))
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_updates += 1
        self.scheduler.step()
        elapsed = time.perf_counter() - t0
        out.update({k: v / n_updates for k, v in sums.items()})
        out["loss/skipped_steps"] = sums["loss/skipped_steps"]  # a count, not a mean
        out["perf/learn_tokens_per_s"] = n_tokens / max(elapsed, 1e-9)
        out["loss/updates"] = float(n_updates)
        out.update({k: float(np.mean(v)) for k, v in diag.items()})
        return out

    def _mini_batches(
        self, samples: Sequence[Sample], rng: np.random.Generator
    ) -> list[list[Sample]]:
        """This rank's mini-batches; every rank gets the same number (some may be empty).

        With one process: :func:`mini_batches` of ``mini_batch_steps`` (all samples if 0).
        With W ranks each rank splits its own shard into mini-batches of ``⌈size / W⌉``, so an
        optimiser step sees about ``mini_batch_steps`` samples over all ranks.
        """
        cfg = self.cfg
        if self.dist.world == 1:
            return mini_batches(
                samples, cfg.mini_batch_steps or len(samples), rng, batching=cfg.batching
            )
        if not cfg.mini_batch_steps:
            minis = [list(samples)]
        else:
            size = max(1, math.ceil(cfg.mini_batch_steps / self.dist.world))
            minis = mini_batches(samples, size, rng, batching=cfg.batching) if samples else []
        n = int(self.dist.max([len(minis)])[0])
        return minis + [[] for _ in range(n - len(minis))]

    def _step(self, mini: Sequence[Sample], device) -> dict[str, float]:
        cfg = self.cfg
        world = self.dist.world
        # Loss denominators over the whole mini-batch of every rank: N ranks update as one.
        n_tokens, n_seqs = self.dist.sum([sum(len(s.response_ids) for s in mini), len(mini)])
        agg = dict(mode=self.loss_agg, n_tokens=n_tokens, n_seqs=n_seqs, scale=self.loss_scale)
        self.optimizer.zero_grad(set_to_none=True)
        sums = dict(pg=0.0, clip=0.0, approx_kl=0.0, kl=0.0, entropy=0.0, loss=0.0)
        # The loss's own metrics, declared at registration: the same keys on every rank.
        sums.update({f"m:{k}": 0.0 for k in self.metric_names})
        chunks = micro_batches(mini, cfg.micro_batch_tokens) if mini else []
        # With grad_cosine the micro-batches run in two halves and the gradient after the
        # first is kept; the accumulated sum, and so the update, is the same.
        parts = gradient_halves(chunks) if cfg.grad_cosine else [chunks]
        counts = [len(p) for p in parts]
        if world > 1:
            counts = [int(c) for c in self.dist.max(counts)]
        params = [p for p in self.model.parameters() if p.requires_grad]
        first: list[torch.Tensor | None] | None = None
        for h, (part, n_part) in enumerate(zip(parts, counts)):
            for k in range(len(part), n_part):  # keep in step with ranks that have more
                with parallel.gradient_sync(self.model, k == n_part - 1):
                    parallel.dummy_backward(self.model, self.pad_id, device)
                if self.loss_spec.needs_ref == "logits":
                    self._ref_logits(None, device)  # an FSDP reference forward is a collective
            for k, chunk in enumerate(part):
                # Gradients are reduced in the last backward of each part: once per mini-batch
                # (twice with grad_cosine on several ranks, so the first half is global too).
                last = k == len(part) - 1 and len(part) == n_part
                with parallel.gradient_sync(self.model, last or world == 1):
                    self._backward(chunk, device, agg, sums, n_tokens)
            if h == 0 and len(parts) == 2 and counts[0] and counts[1]:
                first = [None if p.grad is None else _local(p.grad).clone() for p in params]
        if world > 1:
            keys = list(sums)
            sums = dict(zip(keys, self.dist.sum([sums[k] for k in keys])))
        diag: dict[str, float] = {}
        if first is not None:  # before clipping: the raw gradients of the halves
            total = [None if p.grad is None else _local(p.grad) for p in params]
            stats = half_gradient_stats(first, total)
            if world > 1 and any(hasattr(p.grad, "to_local") for p in params):
                stats = self.dist.sum(stats)  # FSDP: each rank holds a shard (DDP: replicas)
            diag = gradient_agreement(*stats)
        if cfg.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        else:
            grads = [p.grad.norm() ** 2 for p in params if p.grad is not None]
            grad_norm = float(torch.sqrt(sum(grads))) if grads else 0.0
        return {**self._apply(sums, grad_norm, n_tokens), **diag}

    def _backward(self, chunk, device, agg: dict, sums: dict, n_tokens: float) -> None:
        """Loss of one micro-batch, its backward, and its share of the metrics in ``sums``.

        The policy loss is ``learner.loss`` (after the ``token_weights`` transforms), plus
        ``kl_coef``·KL to the reference and minus ``entropy_coef``·entropy over the response
        tokens. The loss is multiplied by the world size because DDP and FSDP average gradients
        over the ranks while the denominators in ``agg`` are already global."""
        cfg = self.cfg
        logits, t = forward_chunk(
            self.model, chunk, self.pad_id, device, cfg.share_prompts, self.banned
        )
        mask = t["mask"]
        logp = logprobs_from_logits(logits, t["targets"], self.temperature)
        if cfg.entropy_coef > 0:
            ent_tok = entropy_from_logits(logits / self.temperature)
        else:
            with torch.no_grad():
                ent_tok = entropy_from_logits(logits / self.temperature)
        ref_logits = (
            self._ref_logits(chunk, device) if self.loss_spec.needs_ref == "logits" else None
        )
        inp = LossInputs(
            logp=logp,
            old_logp=t["old"],
            adv=t["adv"],
            mask=mask,
            agg=Aggregator(mask=mask, **agg),
            response_mask=mask,
            targets=t["targets"],
            logits=logits,
            temperature=self.temperature,
            entropy=ent_tok.detach(),
            ref_logp=t.get("ref"),
            ref_logits=ref_logits,
            extra={k[6:]: v for k, v in t.items() if k.startswith("extra:")},
            learner=cfg,
        )
        metrics: dict[str, Any] = {}
        for spec, tw_cfg in self.token_weights:
            adv, loss_mask, tw_metrics = spec.fn(inp, tw_cfg)
            inp = replace(inp, adv=adv, mask=loss_mask, agg=replace(inp.agg, mask=loss_mask))
            metrics.update(tw_metrics)
        pg, loss_metrics = self.loss_spec.fn(inp, self.loss_cfg)
        metrics.update(loss_metrics)
        loss = pg
        if cfg.entropy_coef > 0:
            loss = loss - cfg.entropy_coef * aggregate_loss(ent_tok, mask, **agg)
        if cfg.kl_coef > 0:
            kl = aggregate_loss(kl_penalty(logp, t["ref"], cfg.kl_type), mask, **agg)
            loss = loss + cfg.kl_coef * kl
            sums["kl"] += float(kl.detach())
        (loss * self.dist.world if self.dist.world > 1 else loss).backward()
        with torch.no_grad():
            sums["loss"] += float(loss)
            sums["pg"] += float(pg)
            sums["clip"] += float(metrics.pop("clipfrac", 0.0))
            sums["approx_kl"] += float(((t["old"] - logp) * mask).sum()) / n_tokens
            sums["entropy"] += float((ent_tok * mask).sum()) / n_tokens
            for k, v in metrics.items():
                if f"m:{k}" not in sums:
                    raise KeyError(
                        f"policy loss {cfg.loss!r} or a token weight reported the metric {k!r} "
                        "that it did not declare (register it with metrics=(...))"
                    )
                sums[f"m:{k}"] += float(v)

    def _ref_logits(self, chunk, device) -> torch.Tensor | None:
        """Raw (S, R, V) logits of the frozen reference on ``chunk``, without gradients (the
        base model with LoRA adapters disabled). ``chunk=None``: only keep an FSDP reference's
        collectives in step with the other ranks; returns None."""
        model = self.ref_model if self.ref_model is not None else self.module
        if chunk is None:
            if parallel.needs_lockstep(model):
                parallel.dummy_forward(model, self.pad_id, device)
            return None
        peft = self.ref_model is None
        was_training = model.training
        ctx = model.disable_adapter() if peft else nullcontext()
        try:
            if peft:
                model.eval()  # no dropout in the reference
            with torch.no_grad(), ctx:
                logits, _ = forward_chunk(
                    model, chunk, self.pad_id, device, self.cfg.share_prompts, self.banned
                )
        finally:
            model.train(was_training)
        return logits

    def _apply(self, sums: dict, grad_norm: float, n_tokens: float) -> dict[str, float]:
        """Step the optimiser unless the loss or gradient norm is not finite; the metrics.

        ``sums`` and ``grad_norm`` are global (equal on every rank), so every rank decides
        alike."""
        cfg = self.cfg
        skipped = not (math.isfinite(sums["loss"]) and math.isfinite(grad_norm))
        if skipped:
            # Stepping would write NaN/inf into the weights (and the optimiser's moments):
            # drop this mini-batch's gradient instead, and stop if it keeps happening.
            self.optimizer.zero_grad(set_to_none=True)
            self.nonfinite_streak += 1
            log.warning(
                "skipped an optimiser step: loss %s, gradient norm %s (%d in a row)",
                sums["loss"],
                grad_norm,
                self.nonfinite_streak,
            )
            if self.nonfinite_streak >= cfg.max_nonfinite_skips:
                raise NonFiniteLossError(
                    f"{self.nonfinite_streak} optimiser steps in a row had a non-finite loss or "
                    f"gradient norm (last: loss {sums['loss']}, grad norm {grad_norm}); stopping. "
                    "Lower learner.lr, check the rewards and advantages, or resume from the last "
                    "checkpoint (the weights were never updated with a non-finite step)."
                )
        else:
            self.nonfinite_streak = 0
            self.optimizer.step()
        return {
            "loss/skipped_steps": float(skipped),
            "loss/total": sums["loss"],
            "loss/pg": sums["pg"],
            "loss/kl": sums["kl"],
            "loss/entropy": sums["entropy"],
            "loss/clipfrac": sums["clip"],
            "loss/approx_kl": sums["approx_kl"],
            "loss/grad_norm": grad_norm if math.isfinite(grad_norm) else float("nan"),
            **{f"loss/{k}": sums[f"m:{k}"] for k in self.metric_names},
            "tokens": n_tokens,
        }


class _PrepareContext:
    """The learner's side of a loss's ``prepare`` hook (:class:`~agentrl.learn.policy_loss.
    PrepareContext`): no-grad passes of the pre-update policy (and reference) over the batch."""

    def __init__(self, learner: Learner, samples: Sequence[Sample], seed: int):
        self._learner = learner
        self.learner = learner.cfg
        device = next(learner.module.parameters()).device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    @property
    def dist(self) -> Reducer:
        return self._learner.dist

    def map_tokens(
        self, samples: Sequence[Sample], fn: Callable[..., torch.Tensor], reference: bool = False
    ) -> list[np.ndarray]:
        lr = self._learner
        device = next(lr.module.parameters()).device
        lockstep = parallel.needs_lockstep(lr.module)
        out = map_samples(
            lr.module,
            samples,
            lr.pad_id,
            lr.temperature,
            lr.cfg.micro_batch_tokens,
            lr.cfg.share_prompts,
            fn,
            ref_logits=(lambda c: lr._ref_logits(c, device)) if reference else None,
            reducer=lr.dist if lockstep else None,
            banned=lr.banned,
        )
        parallel.reshard(lr.module)
        return out


def _local(grad: torch.Tensor) -> torch.Tensor:
    """This rank's part of a gradient: the local shard of an FSDP DTensor, else the tensor."""
    return grad.to_local() if hasattr(grad, "to_local") else grad


def _is_peft(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")
