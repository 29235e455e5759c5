"""Teacher-forced scoring of responses under the policy model (the :class:`~agentrl.credit.Scorer`).

``PolicyScorer.score(contexts, responses)`` returns, per pair, the mean token log-prob

    ℓ = (1/|y|) Σ_k log softmax(logits_k / temperature)[y_k]

of the response tokens y given the chat-formatted context (a user turn, formatted and truncated
to its last ``max_prompt_tokens`` tokens exactly as the rollout prompts are, via
:func:`~agentrl.rollout.encode_prompt`). Shapes: n pairs in, (n,) float64 out. Pairs are scored
under ``torch.no_grad()`` in left-padded micro-batches of at most ``token_budget`` padded tokens,
using the learner's :func:`~agentrl.learner.token_logprobs`, so a score does not depend on which
other pairs share its micro-batch.

Departures: the response is re-tokenized from its text (``add_special_tokens=False``), so it can
differ from the sampled token ids (e.g. no trailing EOS); estimators compare scores of the same
response under two contexts (RELACE), for which only consistency matters. An empty response
scores 0.0. A context that tokenizes to nothing (no chat template, empty text) is given the
tokenizer's BOS/EOS token as the only prefix, since the first response token needs one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from agentrl.learner import token_logprobs
from agentrl.rollout import encode_prompt


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
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)

    def _encode(self, context: str, response: str) -> tuple[list[int], list[int]]:
        tok = self.tokenizer
        resp = tok(response, add_special_tokens=False)["input_ids"]
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
        items = []  # (row, prompt_ids, response_ids) of the non-empty responses
        for i, (c, r) in enumerate(zip(contexts, responses)):
            prompt, resp = self._encode(c, r)
            if resp:
                items.append((i, prompt, resp))
        if not items:
            return out
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()  # no dropout: a score is a deterministic function of its pair
        try:
            with torch.no_grad():
                for chunk in self._chunks(items):
                    out[[i for i, _, _ in chunk]] = self._score_chunk(chunk, device)
        finally:
            self.model.train(was_training)
        return out

    def _chunks(self, items: list) -> list[list]:
        """Consecutive runs of length-sorted items whose padded size fits the budget (an item
        larger than the budget goes alone)."""
        items = sorted(items, key=lambda x: len(x[1]) + len(x[2]))
        chunks: list[list] = []
        cur: list = []
        width = 0
        for it in items:
            n = len(it[1]) + len(it[2])
            if cur and max(width, n) * (len(cur) + 1) > self.token_budget:
                chunks.append(cur)
                cur, width = [], 0
            cur.append(it)
            width = max(width, n)
        if cur:
            chunks.append(cur)
        return chunks

    def _score_chunk(self, chunk: list, device) -> np.ndarray:
        """Left-pad so every response ends at the last column, score the last R tokens."""
        width = max(len(p) + len(r) for _, p, r in chunk)
        r_max = max(len(r) for _, _, r in chunk)
        b = len(chunk)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long)  # (B, L)
        attn = torch.zeros((b, width), dtype=torch.long)  # (B, L)
        mask = torch.zeros((b, r_max), dtype=torch.float32)  # (B, R)
        for row, (_, p, r) in enumerate(chunk):
            seq = p + r
            ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            attn[row, width - len(seq) :] = 1
            mask[row, r_max - len(r) :] = 1.0
        logp = token_logprobs(
            self.model, ids.to(device), attn.to(device), self.temperature, n_last=r_max
        )  # (B, R)
        mask = mask.to(logp.device)
        mean = (logp * mask).sum(-1) / mask.sum(-1)  # (B,)
        return mean.double().cpu().numpy()
