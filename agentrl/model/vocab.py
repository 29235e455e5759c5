"""The vocabulary the policy samples from, shared by generation and every scorer.

Generation never emits the pad token (when it differs from EOS): a sampled pad would be
indistinguishable from the padding after a response. The policy whose log-probs the sampler
reports and the learner optimises is therefore the softmax over the vocabulary *without* the
banned tokens. Scoring with the full vocabulary instead gives the learner a token it can move
probability to but that is never sampled; with GRPO on Sokoban (failed episodes are longer, so
the step-weighted mean advantage is negative) the learner used it as a sink for the negative
signal: after 20 iterations of the default job the pad token held 73% of the probability at
every position, the sampled moves shared the rest, and greedy held-out play depended on the
order of that untrained remainder. Masking the banned logits everywhere (sampling log-probs,
learner, reference, entropy, scorers) makes sampler and learner normalise over one vocabulary;
the banned logits get no gradient.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

BANNED_LOGIT = -1.0e9
"""Logit given to banned tokens: exp underflows to exactly 0 in float32, yet it stays finite
after division by any sampling temperature (so p·log p is 0, not NaN, in the entropy)."""


def banned_token_ids(tokenizer) -> tuple[int, ...]:
    """Token ids generation never emits: the pad token when it is not also EOS."""
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    return (int(pad),) if pad is not None and pad != eos else ()


def mask_banned(logits: torch.Tensor, banned: Sequence[int]) -> torch.Tensor:
    """``logits`` (..., V) with the ``banned`` entries set to :data:`BANNED_LOGIT`.

    Out of place and differentiable: the other logits keep their gradient, the banned ones get
    none. A no-op (the same tensor) when nothing is banned.
    """
    if not banned:
        return logits
    idx = torch.as_tensor(list(banned), dtype=torch.long, device=logits.device)
    return logits.index_fill(-1, idx, BANNED_LOGIT)
