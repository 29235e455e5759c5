"""Whether a mini-batch's gradient is signal or noise: two halves of it compared.

The learner runs a mini-batch's micro-batches in two halves (:func:`gradient_halves`) and keeps
the gradient after the first; the accumulated total is what it would have been anyway. The two
halves' gradients g₁ = first, g₂ = total − first then give ``diag/grad_cos`` (their cosine)
and ``diag/grad_snr`` = 4⟨g₁, g₂⟩ / |g₁ − g₂|², an estimate of |E g|² / E|g − E g|² for the
mini-batch gradient (:func:`gradient_agreement`), with no second backward pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from agentrl.model.forward import Sample


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
