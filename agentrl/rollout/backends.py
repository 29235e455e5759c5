"""Generation backends: ``generate(prompts, sampling) -> list[Generation]``.

A backend turns token-id prompts into responses with token ids, text and per-token sampling
log-probs. ``hf`` (transformers ``generate``, CPU or GPU) is always available; ``vllm`` lives in
:mod:`agentrl.rollout.vllm_backend`. Sampling log-probs are ``log_softmax(logits /
temperature)`` over the vocabulary the policy samples from (the pad token, which is never
generated, masked: :mod:`agentrl.model.vocab`) — the same quantity the learner recomputes —
without the top-k/top-p truncation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from agentrl.model import banned_token_ids, mask_banned


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of one generate call."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_strings: tuple[str, ...] = ()


@dataclass
class Generation:
    """One generated response."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    policy_version: int | None = None
    """The weights that generated it (updates they had seen), where the engine tracks that
    (the asynchronous producer's engine); None: the caller's current weights."""


class Backend(Protocol):
    """What a rollout backend provides.

    A backend may also take ``seeds=`` (one int per prompt) in ``generate``: each response is
    then sampled from its own random stream, whatever else is in the call (continuous rollout
    relies on it, :func:`accepts_seeds`)."""

    def generate(self, prompts: Sequence[list[int]], sampling: Sampling) -> list[Generation]: ...

    def sync(self, model) -> None:
        """Make the next generations use ``model``'s current weights."""

    def sleep(self) -> None:
        """Free generation memory for the learner update (vLLM sleep mode); the next ``sync`` or
        ``generate`` takes it back."""


class HFBackend:
    """Generation with transformers ``generate`` (KV cache, left padding), CPU or GPU."""

    def __init__(self, model, tokenizer, max_batch_size: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size

    def sync(self, model) -> None:
        """Nothing to do: generation runs on the training model itself."""

    def sleep(self) -> None:
        """Nothing to free: generation shares the training model's memory."""

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[list[int]],
        sampling: Sampling,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Responses to ``prompts``. ``seeds`` (one per prompt): prompt ``i`` is sampled with
        a generator seeded with ``seeds[i]`` alone (Gumbel-max: the argmax of the warped
        logits plus Gumbel noise, an exact draw from the same distribution as HF's sampling),
        so a response does not depend on the other prompts of the call, their order or the
        batch split. None: HF's sampling from torch's global generator."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        out: list[Generation] = []
        for i in range(0, len(prompts), self.max_batch_size):
            part = None if seeds is None else seeds[i : i + self.max_batch_size]
            out.extend(self._generate(prompts[i : i + self.max_batch_size], sampling, part))
        return out

    def _generate(
        self, prompts: Sequence[list[int]], sampling: Sampling, seeds: Sequence[int] | None
    ) -> list[Generation]:
        from transformers import GenerationConfig

        tok = self.tokenizer
        device = next(self.model.parameters()).device
        pad, eos = tok.pad_token_id, tok.eos_token_id
        banned = banned_token_ids(tok)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)  # (B, T) left-padded
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, p in enumerate(prompts):
            input_ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention[r, width - len(p) :] = 1
        greedy = sampling.temperature == 0
        # Per-prompt streams: HF's own warpers, then the noise, then greedy decoding picks.
        seeded = seeds is not None and not greedy
        processors = seeded_sampling(sampling, seeds, device) if seeded else None
        hf_sample = not greedy and not seeded
        gen_cfg = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=hf_sample,
            temperature=sampling.temperature if hf_sample else None,
            # Explicit values: transformers fills None with its defaults (top_k=50).
            top_p=sampling.top_p if hf_sample else None,
            top_k=sampling.top_k if hf_sample else None,
            pad_token_id=pad,
            eos_token_id=eos,
            # A sampled pad would be indistinguishable from padding after the end.
            suppress_tokens=list(banned) or None,
            stop_strings=list(sampling.stop_strings) or None,
            output_logits=True,
            return_dict_in_generate=True,
        )
        was_training = self.model.training
        self.model.eval()
        res = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            generation_config=gen_cfg,
            logits_processor=processors,
            tokenizer=tok if sampling.stop_strings else None,
        )
        if was_training:
            self.model.train()
        seqs = res.sequences[:, width:].cpu()  # (B, L)
        # (B, L, V) raw logits, then the distribution sampled from: the learner's (no pad).
        logits = mask_banned(torch.stack(res.logits, dim=1).float(), banned)
        temp = 1.0 if greedy else sampling.temperature
        logp = torch.log_softmax(logits / temp, dim=-1)
        token_logp = logp.gather(-1, seqs.to(logp.device).unsqueeze(-1)).squeeze(-1).cpu()  # (B, L)
        gens = []
        for r in range(len(prompts)):
            row = seqs[r].tolist()
            n = _response_length(row, pad, eos)
            ids = row[:n]
            gens.append(
                Generation(
                    token_ids=ids,
                    logprobs=token_logp[r, :n].tolist(),
                    text=tok.decode(ids, skip_special_tokens=True),
                )
            )
        return gens


def accepts_seeds(backend) -> bool:
    """Whether ``backend.generate`` takes per-prompt ``seeds=`` (see :class:`Backend`)."""
    import inspect

    try:
        return "seeds" in inspect.signature(backend.generate).parameters
    except (TypeError, ValueError):  # not introspectable: assume the plain contract
        return False


class GumbelNoise:
    """A logits processor adding Gumbel noise from one generator per row: the argmax of
    ``scores + noise`` is a draw from ``softmax(scores)`` (the Gumbel-max trick), and row ``r``
    draws only from its own generator, so its tokens depend on its seed and its own scores."""

    def __init__(self, seeds: Sequence[int], device):
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        vocab = scores.shape[-1]
        u = torch.stack(  # (B, V) uniforms in [0, 1), one row per generator
            [torch.rand(vocab, generator=g, device=scores.device) for g in self.generators]
        )
        # u = 0 gives -inf (never chosen); u < 1 keeps -log(u) > 0, so the noise is finite.
        return scores.float() - torch.log(-torch.log(u))


def seeded_sampling(sampling: Sampling, seeds: Sequence[int], device):
    """The logits processors of HF's sampling (temperature, then top-k, then top-p, as
    ``generate`` orders them) followed by :class:`GumbelNoise`: with greedy decoding, a draw
    per row from that row's generator."""
    from transformers import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    out = LogitsProcessorList()
    if sampling.temperature != 1.0:
        out.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k:
        out.append(TopKLogitsWarper(sampling.top_k))
    if sampling.top_p < 1.0:
        out.append(TopPLogitsWarper(sampling.top_p))
    out.append(GumbelNoise(seeds, device))
    return out


def _response_length(row: list[int], pad: int, eos: int) -> int:
    """Length of a generated row: through the first EOS, else up to the trailing padding."""
    if eos in row:
        return row.index(eos) + 1
    n = len(row)
    while n > 0 and row[n - 1] == pad:
        n -= 1
    return n
