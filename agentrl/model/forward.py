"""Teacher-forced forward passes of the policy: the primitives rollout and learning share.

A :class:`Sample` is one environment step as a training sample (its prompt, its response, the
sampling log-probs and the advantage). These functions pack samples into batches (left padding,
or one shared prompt per group under a block attention mask), run the model over them in
micro-batches of a token budget, and read off the logits or log-probs of every response token
over the vocabulary the policy samples from (:mod:`agentrl.model.vocab`). The learner trains
through them; the vLLM backend re-scores through them; scorers for credit estimators score
through them. With an FSDP model every forward is a collective, so functions that loop over
micro-batches keep the ranks in lockstep through a :class:`Reducer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from agentrl.model.vocab import mask_banned


class Reducer(Protocol):
    """The collectives the learner needs (``agentrl.run.distributed.Dist`` provides them)."""

    world: int

    def sum(self, values: Sequence[float]) -> list[float]: ...

    def max(self, values: Sequence[float]) -> list[float]: ...


class Alone:
    """World size 1: reductions are the identity, nothing is communicated."""

    world = 1

    def sum(self, values: Sequence[float]) -> list[float]:
        return [float(v) for v in values]

    max = sum


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


def pack(samples: Sequence[Sample], pad_id: int, device) -> dict[str, torch.Tensor]:
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
    tensors.update(extra_tensors(samples, r_max))
    return {k: v.to(device) for k, v in tensors.items()}


def extra_tensors(samples: Sequence[Sample], r_max: int) -> dict[str, torch.Tensor]:
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


def per_sample_tensors(samples: Sequence[Sample], r_max: int) -> dict[str, torch.Tensor]:
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
    out.update(extra_tensors(samples, r_max))
    return out


def pack_shared(samples: Sequence[Sample], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Pack the samples that share a prompt into one row: the prompt once, then each response.

    A row is ``prompt, response_1, ..., response_n`` (left-padded to the longest row); a 4-D
    boolean mask lets each response attend to the prompt and to its own earlier tokens only, and
    each response's position ids continue from the end of the prompt. Every response token is
    then predicted exactly as in its own unpacked sequence, but the prompt is processed once
    per group instead of once per sample.

    Returns ``ids``/``pos`` (B, W), ``attn4`` (B, 1, W, W), ``n_last`` (the scored window),
    ``row``/``col`` (S, R) indices of the logits predicting each sample's response tokens
    within the window, and the per-sample tensors of :func:`per_sample_tensors`.
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
    t.update(per_sample_tensors(samples, r_max))
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
    prompt, prompts are processed once per group (:func:`pack_shared`); the result is the same
    up to floating-point rounding.
    """
    if share_prompts and len({tuple(s.prompt_ids) for s in chunk}) < len(chunk):
        t = pack_shared(chunk, pad_id, device)
        out = model(
            input_ids=t["ids"],
            attention_mask=t["attn4"],
            position_ids=t["pos"],
            logits_to_keep=t["n_last"],
        )
        return mask_banned(out.logits[t["row"], t["col"]].float(), banned), t
    t = pack(chunk, pad_id, device)
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
                dummy_forward(model, pad_id, device)
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
                dummy_forward(model, pad_id, device)
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


def dummy_forward(model, pad_id: int, device: torch.device) -> None:
    """A forward without gradients that changes nothing: keeps a rank with fewer micro-batches in
    step with the others' collectives (an FSDP model all-gathers its weights in every forward)."""
    with torch.no_grad():
        model(input_ids=torch.full((1, 1), pad_id, dtype=torch.long, device=device))
