"""LoRA (peft) and gradient checkpointing through the learner and checkpoints."""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from agentrl.learn.learner import Learner, LearnerConfig
from agentrl.model import (
    LoRAConfig,
    ModelConfig,
    build_tiny_model,
    build_tokenizer,
    encode_prompt,
    prepare_for_training,
    save_model,
)
from agentrl.model.forward import Sample, token_logprobs


def _setup(cfg: ModelConfig):
    tok = build_tokenizer(["push the box up down left right"] * 20, 300)
    torch.manual_seed(0)
    base = build_tiny_model(cfg, tok)
    return tok, prepare_for_training(base, cfg)


def _samples(model, tok):
    prompt = encode_prompt(tok, "push the box", 100)
    out = []
    with torch.no_grad():
        for text, adv in ((" up", 1.0), (" down", -1.0)):
            ids = tok(text)["input_ids"]
            t = torch.tensor([prompt + ids])
            lp = token_logprobs(model, t, torch.ones_like(t), 1.0)[0, len(prompt) - 1 :]
            out.append(Sample(prompt, ids, lp.tolist(), adv))
    return out


def test_lora_trains_only_adapters_and_saves_a_merged_hf_model(tmp_path):
    cfg = ModelConfig(hidden_size=32, intermediate_size=64, lora=LoRAConfig(r=4, alpha=8))
    tok, model = _setup(cfg)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    # kl_coef > 0: the reference is the base model with adapters disabled (no copy).
    learner = Learner(model, LearnerConfig(lr=5e-2, kl_coef=0.1), tok.pad_token_id)
    assert learner.ref_model is None
    for _ in range(3):
        stats = learner.update(_samples(model, tok), np.random.default_rng(0))
    assert stats["loss/kl"] > 0
    for n, p in model.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), f"{n} is frozen but changed"
    save_model(model, tok, tmp_path, cfg)
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path)
    x = torch.tensor([encode_prompt(tok, "push the box up", 100)])
    with torch.no_grad():
        torch.testing.assert_close(merged(x).logits, model(x).logits, rtol=1e-4, atol=1e-5)
    # the training model keeps separate adapters after the merged save
    assert any("lora_" in n for n, _ in model.named_parameters())


def test_gradient_checkpointing_gives_the_same_gradients():
    grads = []
    for ckpt in (False, True):
        cfg = ModelConfig(hidden_size=32, intermediate_size=64, gradient_checkpointing=ckpt)
        tok, model = _setup(cfg)
        on = getattr(model, "is_activation_checkpointing", None)
        on = model.is_gradient_checkpointing if on is None else on
        assert on == ckpt
        learner = Learner(model, LearnerConfig(max_grad_norm=0), tok.pad_token_id)
        learner.optimizer.param_groups[0]["lr"] = 0.0  # compare gradients, keep parameters
        learner.update(_samples(model, tok), np.random.default_rng(0))
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
