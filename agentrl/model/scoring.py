"""Teacher-forced scoring of responses under the policy model (the :class:`~agentrl.credit.Scorer`).

``PolicyScorer.score(contexts, responses)`` returns, per pair, the mean token log-prob

    ℓ = (1/|y|) Σ_k log softmax(logits_k / temperature)[y_k]

over the vocabulary the policy samples from (the pad token masked, :mod:`agentrl.model.vocab`)
of the response tokens y given the chat-formatted context (a user turn, formatted and truncated
to its last ``max_prompt_tokens`` tokens exactly as the rollout prompts are, via
:func:`~agentrl.model.prompt.encode_prompt`). Shapes: n pairs in, (n,) float64 out. Pairs are
scored under ``torch.no_grad()`` in left-padded micro-batches of at most ``token_budget`` padded
tokens, with :func:`~agentrl.model.forward.score_samples` (the learner's own scoring), so a
score does not depend on which other pairs share its micro-batch.

Departures: the response is re-tokenized from its text (``add_special_tokens=False``, and text
that spells a special token such as ``<|pad|>`` stays plain text), so it can differ from the
sampled token ids (e.g. no trailing EOS); estimators compare scores of the same
response under two contexts (RELACE), for which only consistency matters. An empty response
scores 0.0. A context that tokenizes to nothing (no chat template, empty text) is given the
tokenizer's BOS/EOS token as the only prefix, since the first response token needs one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentrl.model.forward import Sample, score_samples
from agentrl.model.prompt import encode_prompt
from agentrl.model.vocab import banned_token_ids


class PolicyScorer:
    """Scores responses with ``model`` (the current policy, i.e. π_old before the update).

    Args:
        model: a causal LM (transformers ``PreTrainedModel``).
        tokenizer: its tokenizer (chat template applied when it has one).
        temperature: logits are divided by it, as at sampling time (use the rollout temperature).
        max_prompt_tokens: contexts keep their last this many tokens, as rollout prompts do.
        token_budget: largest padded size (rows × width) of one forward pass.
    """

    def __init__(
        self,
        model,
        tokenizer,
        temperature: float = 1.0,
        max_prompt_tokens: int = 2048,
        token_budget: int = 8192,
    ):
        if temperature <= 0:
            raise ValueError(f"temperature={temperature!r} must be > 0 for scoring")
        if max_prompt_tokens < 1 or token_budget < 1:
            raise ValueError("max_prompt_tokens and token_budget must be >= 1")
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = float(temperature)
        self.max_prompt_tokens = max_prompt_tokens
        self.token_budget = token_budget
        self.banned = banned_token_ids(tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)

    def _encode(self, context: str, response: str) -> tuple[list[int], list[int]]:
        tok = self.tokenizer
        # Model output that spells "<|pad|>" is text, not the (never sampled) pad token.
        resp = tok(response, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        prompt = encode_prompt(tok, context, self.max_prompt_tokens)
        if not prompt:
            start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
            prompt = [start if start is not None else self.pad_id]
        return prompt, resp

    def score(self, contexts: Sequence[str], responses: Sequence[str]) -> np.ndarray:
        """Mean token log-prob of each response given its context: (n,) float64."""
        if len(contexts) != len(responses):
            raise ValueError(f"{len(contexts)} contexts but {len(responses)} responses")
        out = np.zeros(len(contexts), dtype=np.float64)
        rows, samples = [], []
        for i, (c, r) in enumerate(zip(contexts, responses)):
            prompt, resp = self._encode(c, r)
            if resp:  # an empty response scores 0.0
                rows.append(i)
                samples.append(Sample(prompt, resp, [0.0] * len(resp), 0.0))
        if samples:
            logps = score_samples(
                self.model,
                samples,
                self.pad_id,
                self.temperature,
                self.token_budget,
                banned=self.banned,
            )
            out[rows] = [float(np.mean(lp)) for lp in logps]
        return out
