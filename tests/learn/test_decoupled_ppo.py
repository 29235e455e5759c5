"""``learner.loss=decoupled_ppo`` (AReaL's decoupled PPO): hand values, and ``ppo`` exactly when
the behaviour policy is the proximal one."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agentrl.configuration import ConfigError
from agentrl.learn.learner import Learner, LearnerConfig
from agentrl.learn.policy_loss import (
    PROX_KEY,
    Aggregator,
    DecoupledPPOConfig,
    LossInputs,
    get_policy_loss,
    policy_loss_config,
)
from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer, encode_prompt
from agentrl.model.forward import Sample, token_logprobs

LN = math.log


def _inputs(logp, old, prox, adv, mask=None, learner=None):
    logp = torch.tensor([logp], requires_grad=True)
    mask = torch.ones_like(logp) if mask is None else torch.tensor([mask])
    inp = LossInputs(
        logp=logp,
        old_logp=torch.tensor([old]),
        adv=torch.tensor([adv]),
        mask=mask,
        agg=Aggregator.local(mask),
        extra={PROX_KEY: torch.tensor([prox])},
        learner=learner or LearnerConfig(),
    )
    return inp, logp


def test_hand_computed_example():
    # Three tokens; μ (behaviour), π_prox, π_θ as probabilities of the sampled token.
    inp, logp = _inputs(
        logp=[LN(0.6), LN(0.25), LN(0.2)],
        old=[LN(0.4), LN(0.5), LN(0.2)],
        prox=[LN(0.5), LN(0.25), LN(0.3)],
        adv=[1.0, -2.0, -0.5],
    )
    loss, m = get_policy_loss("decoupled_ppo").fn(inp, DecoupledPPOConfig())
    # Token 1: w = .5/.4 = 1.25, r = .6/.5 = 1.2 (at the clip edge): −1·1.2·1.25 = −1.5.
    # Token 2: w = .25/.5 = 0.5, r = 1: 2·1·0.5 = 1.0.
    # Token 3: w = .3/.2 = 1.5, r = .2/.3 = 2/3 < 0.8 with A < 0: clipped, 0.5·0.8·1.5 = 0.6.
    assert float(loss.detach()) == pytest.approx((-1.5 + 1.0 + 0.6) / 3, abs=1e-6)
    assert m["clipfrac"] == pytest.approx(1 / 3)
    assert m["behav_weight"] == pytest.approx((1.25 + 0.5 + 1.5) / 3, abs=1e-6)
    assert m["behav_capped"] == 0.0
    kl = (LN(0.4 / 0.5) + LN(0.5 / 0.25) + LN(0.2 / 0.3)) / 3
    assert m["behav_kl"] == pytest.approx(kl, abs=1e-6)
    loss.backward()
    # d/d log π_θ of −A·w·r/3 = −A·w·r/3 on unclipped tokens, 0 on the clipped one.
    torch.testing.assert_close(
        logp.grad, torch.tensor([[-1.0 * 1.25 * 1.2 / 3, 2.0 * 0.5 * 1.0 / 3, 0.0]])
    )


def test_weight_cap_drops_tokens_but_not_denominators():
    inp, _ = _inputs(
        logp=[LN(0.6), LN(0.25), LN(0.2)],
        old=[LN(0.4), LN(0.5), LN(0.2)],
        prox=[LN(0.5), LN(0.25), LN(0.3)],
        adv=[1.0, -2.0, -0.5],
    )
    loss, m = get_policy_loss("decoupled_ppo").fn(inp, DecoupledPPOConfig(imp_weight_cap=1.4))
    assert float(loss.detach()) == pytest.approx((-1.5 + 1.0) / 3, abs=1e-6)
    assert m["behav_capped"] == pytest.approx(1 / 3)


def test_fully_masked_rows_contribute_nothing():
    inp, _ = _inputs(
        logp=[LN(0.6), LN(0.25)],
        old=[LN(0.4), LN(0.5)],
        prox=[LN(0.5), LN(0.25)],
        adv=[1.0, -2.0],
        mask=[1.0, 0.0],
    )
    loss, _ = get_policy_loss("decoupled_ppo").fn(inp, DecoupledPPOConfig())
    assert float(loss.detach()) == pytest.approx(-1.5, abs=1e-6)


@pytest.mark.parametrize("level", ["token", "step"])
def test_equals_ppo_when_behaviour_is_proximal(level):
    g = torch.Generator().manual_seed(0)
    s, r = 4, 6
    logp0 = -torch.rand(s, r, generator=g) * 3
    prox = logp0 + 0.3 * torch.randn(s, r, generator=g)
    adv = torch.randn(s, r, generator=g)
    mask = (torch.rand(s, r, generator=g) > 0.2).float()
    mask[1] = 0.0  # a fully masked row
    lc = LearnerConfig(clip_high=0.28, ratio_level=level)
    out = {}
    for name in ("ppo", "decoupled_ppo"):
        logp = logp0.clone().requires_grad_(True)
        inp = LossInputs(
            logp=logp,
            old_logp=prox.clone(),  # μ = π_prox
            adv=adv,
            mask=mask,
            agg=Aggregator.local(mask),
            extra={PROX_KEY: prox.clone()},
            learner=lc,
        )
        spec = get_policy_loss(name)
        loss, metrics = spec.fn(inp, policy_loss_config(name))
        loss.backward()
        out[name] = (loss.detach(), logp.grad, metrics["clipfrac"])
    assert torch.equal(out["ppo"][0], out["decoupled_ppo"][0])
    assert torch.equal(out["ppo"][1], out["decoupled_ppo"][1])
    assert out["ppo"][2] == out["decoupled_ppo"][2]


def test_config_is_checked():
    with pytest.raises(ConfigError, match=r"learner\.loss_args\.imp_weight_cap"):
        LearnerConfig(loss="decoupled_ppo", loss_args={"imp_weight_cap": 0.5})
    with pytest.raises(ConfigError, match="valid keys"):
        LearnerConfig(loss="decoupled_ppo", loss_args={"cap": 2})


def test_learner_on_policy_update_matches_ppo():
    """On-policy samples (μ = the learner's own log-probs): the prepare hook's proximal
    log-probs equal μ, so one update moves the weights as ``ppo`` does."""
    tok = build_tokenizer(["push the box up", "move left then right", "down up"] * 10, 300)
    prompt = encode_prompt(tok, "push the box", 100)
    responses = [tok(" up")["input_ids"], tok(" down left")["input_ids"]]
    params = {}
    for name in ("ppo", "decoupled_ppo"):
        torch.manual_seed(0)
        model = build_tiny_model(ModelConfig(hidden_size=32, intermediate_size=64), tok)
        samples = []
        with torch.no_grad():
            for ids, a in zip(responses, [1.0, -1.0]):
                t = torch.tensor([prompt + ids])
                lp = token_logprobs(model, t, torch.ones_like(t), 1.0)[0, len(prompt) - 1 :]
                samples.append(Sample(prompt, ids, lp.tolist(), a))
        learner = Learner(model, LearnerConfig(lr=1e-2, loss=name), tok.pad_token_id)
        stats = learner.update(samples, np.random.default_rng(0))
        if name == "decoupled_ppo":
            assert all(PROX_KEY in s.extra for s in samples)
            assert stats["loss/behav_weight"] == pytest.approx(1.0, abs=1e-5)
        params[name] = [p.detach().clone() for p in model.parameters()]
    for a, b in zip(params["ppo"], params["decoupled_ppo"]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
