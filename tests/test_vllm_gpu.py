"""vLLM rollouts agree with HF generate and follow weight updates (GPU machines only)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from agentrl.learn.learner import Learner, LearnerConfig, Sample
from agentrl.learn.model import ModelConfig, build_tiny_model, build_tokenizer, save_model
from agentrl.rollout import HFBackend, Sampling, encode_prompt

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed"),
]


def test_vllm_matches_hf_and_tracks_updates(tmp_path):
    from agentrl.rollout.vllm_backend import VLLMBackend

    tok = build_tokenizer(["push the box up down left right", "# _ O X P"] * 50, 400)
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=64, num_heads=4, num_kv_heads=2)
    model = build_tiny_model(cfg, tok).cuda()
    save_model(model, tok, tmp_path, cfg)
    hf = HFBackend(model, tok)
    vl = VLLMBackend(
        str(tmp_path), tok, dtype="float32", gpu_memory_utilization=0.2, max_model_len=512
    )
    prompts = [encode_prompt(tok, t, 256) for t in ("push the box", "move # _ O X P left")]
    greedy = Sampling(max_new_tokens=6, temperature=0.0)

    def agree():
        a, b = hf.generate(prompts, greedy), vl.generate(prompts, greedy)
        for x, y in zip(a, b):
            assert x.token_ids == y.token_ids
            np.testing.assert_allclose(x.logprobs, y.logprobs, atol=2e-3)

    agree()
    learner = Learner(model, LearnerConfig(lr=5e-2), tok.pad_token_id)
    gen = hf.generate(prompts, greedy)
    samples = [Sample(p, g.token_ids, g.logprobs, -1.0) for p, g in zip(prompts, gen)]
    learner.update(samples, np.random.default_rng(0))
    vl.sync(model)
    agree()
    # Sampled log-probs follow the temperature convention of the learner.
    warm = Sampling(max_new_tokens=4, temperature=0.7)
    for p, g in zip(prompts, vl.generate(prompts, warm)):
        ids = torch.tensor([p + g.token_ids], device="cuda")
        from agentrl.learn.learner import token_logprobs

        lp = token_logprobs(model, ids, torch.ones_like(ids), 0.7, n_last=len(g.token_ids))
        np.testing.assert_allclose(lp[0].detach().cpu().numpy(), g.logprobs, atol=2e-3)
