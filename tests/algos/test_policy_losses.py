"""Policy losses and token weights: registry, golden values, gradients, limits, masks, configs.

Golden values are written from the equations of docs/methods.md#policy-losses on 2 or 3 tokens;
gradients are compared with the analytic gradient of the written formula (d log softmax(θ)_y /
dθ = e_y − p); the PPO default through the registry equals the former hard-wired code bit for
bit. That every loss trains the tiny model end to end is a case of tests/run/test_e2e_matrix.py.
"""

from __future__ import annotations

import copy
import math
import re

import numpy as np
import pytest
import torch

from agentrl.algos.losses.bpo import bpo_token_loss
from agentrl.algos.losses.cispo import cispo_token_loss
from agentrl.algos.losses.klpo import (
    alternative_logp,
    klpo_binary_token_loss,
    klpo_token_loss,
    sample_alternatives,
)
from agentrl.algos.losses.ntf import negative_token_filter
from agentrl.algos.losses.taco import taco_weights
from agentrl.algos.losses.vimpo import implied_reward_and_kl, vimpo_value_loss, whiten
from agentrl.configuration import ConfigError, from_mapping
from agentrl.learn.learner import Learner, LearnerConfig, mini_batches
from agentrl.learn.losses import (
    aggregate_loss,
    clipped_surrogate,
    entropy_from_logits,
    kl_penalty,
    policy_ratio,
)
from agentrl.learn.policy_loss import (
    Aggregator,
    LossInputs,
    get_policy_loss,
    get_token_weight,
    list_policy_losses,
    list_token_weights,
    policy_loss_config,
    register_policy_loss,
    token_weight_config,
)
from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer
from agentrl.model.forward import Sample, forward_chunk, logprobs_from_logits, micro_batches

LN = math.log


def _inputs(logits, targets, old, adv, mask, mode="token-mean", **kw) -> LossInputs:
    """LossInputs of a micro-batch that is its whole mini-batch (local counts)."""
    logp = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return LossInputs(
        logp=logp,
        old_logp=old,
        adv=adv,
        mask=mask,
        agg=Aggregator.local(mask, mode),
        targets=targets,
        logits=logits,
        entropy=entropy_from_logits(logits.detach()),
        learner=LearnerConfig(),
        **kw,
    )


def _logits_for(probs: list[float], vocab: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """(1, T, V) logits whose token 0 has probability p_t at position t (the rest share the
    remainder), and targets 0."""
    rows = []
    for p in probs:
        rest = (1.0 - p) / (vocab - 1)
        rows.append([LN(p)] + [LN(rest)] * (vocab - 1))
    logits = torch.tensor([rows], dtype=torch.float64, requires_grad=True)
    return logits, torch.zeros((1, len(probs)), dtype=torch.long)


def _onehot_minus_p(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """d log softmax(θ)_y / dθ = e_y − p, (S, R, V)."""
    p = torch.softmax(logits.detach(), -1)
    return torch.nn.functional.one_hot(targets, logits.shape[-1]).to(p.dtype) - p


# ----------------------------------------------------------------------------- registry, config


def test_bundled_losses_and_token_weights_are_registered():
    assert {"ppo", "cispo", "klpo", "bpo", "vimpo"} <= set(list_policy_losses())
    assert {"taco", "ntf"} <= set(list_token_weights())


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match=r"registered losses are \[.*'cispo'.*Did you mean"):
        get_policy_loss("cispoo")
    with pytest.raises(ConfigError, match=r"transforms are \['ntf', 'taco'\]"):
        get_token_weight("tac")
    with pytest.raises(ConfigError, match=r"learner.loss='nope' is not a registered"):
        LearnerConfig(loss="nope")
    with pytest.raises(ConfigError, match=r"learner.loss_args.bta is not a valid key.*'beta'"):
        from_mapping(LearnerConfig, {"loss": "klpo", "loss_args": {"bta": 1}}, "learner")
    with pytest.raises(ConfigError, match=r"learner.loss_args.m=0 is invalid"):
        LearnerConfig(loss="klpo", loss_args={"m": 0})
    with pytest.raises(ConfigError, match=r"token_weight_args.taco_alph .*'taco_alpha'"):
        LearnerConfig(token_weights=("taco",), token_weight_args={"taco_alph": 0.1})
    with pytest.raises(ConfigError, match=r"token_weight_args.ntf_mode does not name"):
        LearnerConfig(token_weights=("taco",), token_weight_args={"ntf_mode": "prob"})
    with pytest.raises(ConfigError, match=r"ntf_threshold=1.5 is invalid"):
        LearnerConfig(token_weights=("ntf",), token_weight_args={"ntf_threshold": 1.5})
    with pytest.raises(ConfigError, match="twice"):
        LearnerConfig(token_weights=("taco", "taco"))


def test_registering_a_name_twice_raises():
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss("ppo")(lambda inp, cfg: (inp.logp.sum(), {}))


def test_loss_configs_hold_the_paper_defaults():
    assert policy_loss_config("klpo").__dict__ == {
        "beta": 0.1,
        "m": 16,
        "variant": "mc",
        "loss_agg": "seq-mean-token-sum",
    }
    bpo = policy_loss_config("bpo")
    assert (bpo.eps_s, bpo.cap, bpo.eps_low, bpo.eps_high) == (0.1, 3.0, 0.2, 0.28)
    assert bpo.loss_agg == "seq-mean-token-mean"
    vimpo = policy_loss_config("vimpo", {"c_a": 0.0})
    assert (vimpo.beta, vimpo.c_a) == (5e-4, 0.0)
    assert policy_loss_config("vimpo").c_a == 5e-3
    cispo = policy_loss_config("cispo")
    assert (cispo.clip_min, cispo.clip_max, cispo.loss_agg) == (0.0, 5.0, "token-mean")
    taco = token_weight_config("taco")
    assert (taco.alpha, taco.lam) == (0.01, 0.9)


def test_run_config_accepts_loss_options_from_the_command_line():
    from agentrl.run import compose

    cfg = compose(
        [
            "learner.loss=klpo",
            "learner.loss_args={beta: 0.2, m: 4}",
            "learner.token_weights=[taco,ntf]",
            "learner.token_weight_args={taco_alpha: 0.02, ntf_mode: top_q}",
            "learner.batching=reward_balanced",
        ]
    )
    lc = cfg.learner
    assert (lc.loss, lc.loss_args, lc.token_weights) == (
        "klpo",
        {"beta": 0.2, "m": 4},
        ("taco", "ntf"),
    )
    assert (lc.token_weight_args, lc.batching) == (
        {"taco_alpha": 0.02, "ntf_mode": "top_q"},
        "reward_balanced",
    )
    assert cfg.to_dict()["learner"]["loss_args"] == {"beta": 0.2, "m": 4}
    with pytest.raises(ConfigError, match="is not a registered policy loss"):
        compose(["learner.loss=klpoo"])


@pytest.mark.parametrize(
    ("override", "replacement"),
    [
        ("learner.query_preserved=true", "learner.batching=query_preserved"),
        ("rollout.eval_temperature=0.5", "trainer.eval_temperature"),
        ("trainer.tokenizer_episodes=4", "model.tokenizer_episodes"),
        ("model.name=tiny", "model=<preset>"),
        ("learner.loss=vimpo|learner.loss_args={actor_clip_low:0.1}", "learner.clip_low"),
    ],
)
def test_removed_settings_name_their_replacement(override, replacement):
    from agentrl.run import compose

    with pytest.raises(ConfigError, match=re.escape(replacement)):
        compose(override.split("|"))


def test_batching_modes():
    assert LearnerConfig().batching == "random"
    with pytest.raises(ConfigError, match=r"learner\.batching='balanced' is not valid"):
        LearnerConfig(batching="balanced")


# ----------------------------------------------------------------------------- CISPO


def test_cispo_golden_and_gradient():
    # π = (0.6, 0.1, 0.5), μ = (0.5, 0.4, 0.05): r = (1.2, 0.25, 10) → weights (1.2, 0.25, 5).
    logits, targets = _logits_for([0.6, 0.1, 0.5])
    old = torch.tensor([[LN(0.5), LN(0.4), LN(0.05)]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0, 2.0]], dtype=torch.float64)
    inp = _inputs(logits, targets, old, adv, torch.ones(1, 3, dtype=torch.float64))
    tok, clipped = cispo_token_loss(inp.logp, old, adv, 0.0, 5.0)
    expected = [-1.2 * 1.0 * LN(0.6), -0.25 * -1.0 * LN(0.1), -5.0 * 2.0 * LN(0.5)]
    torch.testing.assert_close(tok.detach()[0], torch.tensor(expected, dtype=torch.float64))
    assert clipped.tolist() == [[False, False, True]]
    loss, metrics = get_policy_loss("cispo").fn(inp, policy_loss_config("cispo"))
    assert loss.item() == pytest.approx(sum(expected) / 3)  # token-mean
    assert metrics["clipfrac"] == pytest.approx(1 / 3)
    (grad,) = torch.autograd.grad(loss, logits)
    w = torch.tensor([1.2, 0.25, 5.0], dtype=torch.float64)
    analytic = -(w * adv[0]).view(1, 3, 1) * _onehot_minus_p(logits, targets) / 3
    torch.testing.assert_close(grad, analytic)


# ----------------------------------------------------------------------------- BPO


def test_bpo_golden_mask_and_cap():
    # ε_s = 0.1: ω = (1.1 − μ)/(1.1 − π).
    # t0: π=0.6, μ=0.5, A=+1 → ω=1.2 ≤ 1.28: kept, weight 1.2.
    # t1: π=0.1, μ=0.4, A=−1 → ω=0.7 < 0.8: dropped.
    # t2: π=0.8, μ=0.05, A=−1 → ω=3.5 ≥ 0.8: kept, weight min(3.5, C=3) = 3.
    logits, targets = _logits_for([0.6, 0.1, 0.8])
    old = torch.tensor([[LN(0.5), LN(0.4), LN(0.05)]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    inp = _inputs(logits, targets, old, adv, mask, mode="seq-mean-token-mean")
    tok, dropped, omega = bpo_token_loss(inp.logp, old, adv, 0.1, 3.0, 0.2, 0.28)
    torch.testing.assert_close(omega[0], torch.tensor([1.2, 0.7, 3.5], dtype=torch.float64))
    assert dropped.tolist() == [[False, True, False]]
    expected = [-1.0 * 1.2 * LN(0.6), 0.0, 1.0 * 3.0 * LN(0.8)]
    torch.testing.assert_close(tok.detach()[0], torch.tensor(expected, dtype=torch.float64))
    loss, metrics = get_policy_loss("bpo").fn(inp, policy_loss_config("bpo"))
    assert loss.item() == pytest.approx(sum(expected) / 3)  # one sequence: its token mean
    assert metrics["clipfrac"] == pytest.approx(1 / 3)
    (grad,) = torch.autograd.grad(loss, logits)
    coef = torch.tensor([-1.0 * 1.2, 0.0, 1.0 * 3.0], dtype=torch.float64)
    torch.testing.assert_close(grad, coef.view(1, 3, 1) * _onehot_minus_p(logits, targets) / 3)


def test_bpo_at_the_sampler_is_the_plain_policy_gradient():
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 7, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 7, (3, 4))
    adv = torch.tensor([1.5, -0.5, 2.0], dtype=torch.float64).view(3, 1).expand(3, 4)
    mask = torch.ones(3, 4, dtype=torch.float64)
    mask[1, :2] = 0.0
    logp = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    inp = _inputs(logits, targets, logp.detach(), adv, mask, mode="seq-mean-token-mean")
    loss, metrics = get_policy_loss("bpo").fn(inp, policy_loss_config("bpo"))
    assert metrics["clipfrac"] == 0.0 and metrics["bpo_omega"] == pytest.approx(1.0)
    plain = aggregate_loss(-adv * logp, mask, "seq-mean-token-mean")  # −Â·log π
    g_bpo = torch.autograd.grad(loss, logits)[0]
    g_pg = torch.autograd.grad(plain, logits)[0]
    torch.testing.assert_close(g_bpo, g_pg)


# ----------------------------------------------------------------------------- KLPO


def test_klpo_golden_and_gradient():
    # Two tokens, β = 0.1, M = 2 alternatives each (ids 1, 2 at t0; 2, 2 at t1).
    logits, targets = _logits_for([0.5, 0.2], vocab=3)  # others: 0.25, 0.25 / 0.4, 0.4
    old = torch.tensor([[LN(0.4), LN(0.25)]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    alt = torch.tensor([[[1, 2], [2, 2]]])
    inp = _inputs(logits, targets, old, adv, torch.ones(1, 2, dtype=torch.float64))
    inp.extra["klpo_alt"] = alt
    alt_lp = alternative_logp(logits, alt, 1.0)
    torch.testing.assert_close(
        alt_lp.detach()[0], torch.tensor([[LN(0.25)] * 2, [LN(0.4)] * 2], dtype=torch.float64)
    )
    # h = A − β(log p − log q); L_t = −h·(log p(y) − mean_j log p(v_j)).
    h0, h1 = 1.0 - 0.1 * (LN(0.5) - LN(0.4)), 1.0 - 0.1 * (LN(0.2) - LN(0.25))
    expected = [-h0 * (LN(0.5) - LN(0.25)), -h1 * (LN(0.2) - LN(0.4))]
    tok, _ = klpo_token_loss(inp.logp, old, adv, alt_lp, 0.1)
    torch.testing.assert_close(tok.detach()[0], torch.tensor(expected, dtype=torch.float64))
    loss, _ = get_policy_loss("klpo").fn(inp, policy_loss_config("klpo"))
    assert loss.item() == pytest.approx(sum(expected))  # summed over tokens, one response
    (grad,) = torch.autograd.grad(loss, logits)
    # −h·(∇log p(y) − mean_j ∇log p(v_j)), h detached.
    e_y = _onehot_minus_p(logits, targets)[0]
    p = torch.softmax(logits.detach(), -1)[0]  # (2, 3)
    e_alt = (torch.nn.functional.one_hot(alt[0], 3).double() - p.unsqueeze(1)).mean(1)
    analytic = -torch.tensor([h0, h1], dtype=torch.float64).view(2, 1) * (e_y - e_alt)
    torch.testing.assert_close(grad[0], analytic)


def test_klpo_binary_variant_golden():
    logits, _ = _logits_for([0.5, 0.2])
    old = torch.tensor([[LN(0.4), LN(0.25)]], dtype=torch.float64)
    adv = torch.tensor([[2.0, -1.0]], dtype=torch.float64)
    tok, _ = klpo_binary_token_loss(torch.log_softmax(logits, -1)[..., 0], old, adv, beta=0.1)
    h0, h1 = 2.0 - 0.1 * (LN(0.5) - LN(0.4)), -1.0 - 0.1 * (LN(0.2) - LN(0.25))
    w0, w1 = (1 - 0.4) / (1 - 0.5), (1 - 0.25) / (1 - 0.2)
    expected = torch.tensor([-h0 * w0 * LN(0.5), -h1 * w1 * LN(0.2)], dtype=torch.float64)
    torch.testing.assert_close(tok.detach()[0], expected)


def test_klpo_mc_kl_is_unbiased_for_m_1():
    """E_v~q[∇ log p(v)] = q − p, so the expected gradient of one token's loss is
    −h·(e_y − q). The mean of many M = 1 estimates and one large-M estimate both match it."""
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    theta = torch.tensor([[[0.3, -0.2, 0.5, 0.1]]], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([[2]])
    old = torch.log(q[2]).view(1, 1)
    adv = torch.tensor([[1.0]], dtype=torch.float64)
    logp = torch.log_softmax(theta, -1)[..., 2]
    h = float(adv - 0.1 * (logp.detach() - old))
    exact = -h * (torch.nn.functional.one_hot(y, 4)[0, 0].double() - q)
    gen = torch.Generator().manual_seed(0)
    k = 4000

    def grad(alt):
        lp = torch.log_softmax(theta, -1)
        tok, _ = klpo_token_loss(lp[..., 2], old, adv, alternative_logp(theta, alt, 1.0), 0.1)
        return torch.autograd.grad(tok.sum(), theta)[0][0, 0]

    singles = torch.stack(
        [grad(sample_alternatives(torch.log(q).view(1, 1, 4), 1, gen)) for _ in range(k)]
    )
    se = singles.std(0) / math.sqrt(k)
    assert torch.all((singles.mean(0) - exact).abs() < 4 * se + 1e-12)
    big = grad(sample_alternatives(torch.log(q).view(1, 1, 4), k, gen))
    assert torch.all((big - exact).abs() < 4 * se + 1e-12)


def test_klpo_alternatives_follow_the_sampler_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    draws = sample_alternatives(
        torch.log(probs).view(1, 1, 4).expand(2, 3, 4), 2000, torch.Generator().manual_seed(1)
    )
    assert draws.shape == (2, 3, 2000) and draws.dtype == torch.long
    freq = torch.bincount(draws.reshape(-1), minlength=4).double() / draws.numel()
    torch.testing.assert_close(freq, probs.double(), atol=0.01, rtol=0)


# ----------------------------------------------------------------------------- VIMPO


def test_vimpo_golden_and_gradient():
    beta = 0.5
    logits = torch.tensor(
        [[[1.0, 0.0, -1.0], [0.2, 0.4, 0.0]]], dtype=torch.float64, requires_grad=True
    )
    ref = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]], dtype=torch.float64)
    targets = torch.tensor([[0, 1]])
    p = torch.softmax(logits.detach(), -1)[0].tolist()
    r = torch.softmax(ref, -1)[0].tolist()
    rho = [beta * LN(p[0][0] / r[0][0]), beta * LN(p[1][1] / r[1][1])]
    kappa = [beta * sum(pi * LN(pi / ri) for pi, ri in zip(p[t], r[t])) for t in (0, 1)]
    target = 0.3
    u = rho[0] + rho[1] - kappa[0] - kappa[1] - target
    adv = torch.full((1, 2), target, dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.float64)
    inp = _inputs(logits, targets, torch.zeros(1, 2, dtype=torch.float64), adv, mask)
    inp.ref_logits = ref
    loss, metrics = get_policy_loss("vimpo").fn(
        inp, policy_loss_config("vimpo", {"beta": beta, "c_a": 0.0})
    )
    assert loss.item() == pytest.approx(0.5 * u * u)
    assert metrics["vimpo_kl"] == pytest.approx((kappa[0] + kappa[1]) / beta / 2)
    (grad,) = torch.autograd.grad(loss, logits)
    # dL/dθ_t = u·β·(e_y − p)_t: κ is held fixed (sg).
    torch.testing.assert_close(grad, u * beta * _onehot_minus_p(logits, targets))


def test_vimpo_value_loss_is_zero_at_the_gibbs_optimum():
    """π ∝ π_ref·exp(A/β) at a state: ρ(a) − κ = A(a) − E_π A, so responses whose target is
    their centred advantage have zero value loss (and zero gradient)."""
    beta = 0.3
    ref = torch.tensor([0.5, -0.2, 0.1, 0.0], dtype=torch.float64)
    a = torch.tensor([1.0, 0.0, 0.5, -0.4], dtype=torch.float64)
    theta = (ref + a / beta).view(1, 1, 4).expand(4, 1, 4).clone().requires_grad_(True)
    pi = torch.softmax(ref + a / beta, -1)
    targets = torch.arange(4).view(4, 1)
    rho, kappa = implied_reward_and_kl(theta, ref.view(1, 1, 4).expand(4, 1, 4), targets, beta)
    per_seq = vimpo_value_loss(
        rho, kappa, a - (pi * a).sum(), torch.ones(4, 1, dtype=torch.float64)
    )
    torch.testing.assert_close(per_seq, torch.zeros(4, dtype=torch.float64), atol=1e-14, rtol=0)
    (grad,) = torch.autograd.grad(per_seq.sum(), theta)
    assert float(grad.abs().max()) < 1e-14
    # away from the optimum the loss is positive
    rho2, kappa2 = implied_reward_and_kl(
        theta * 0.5, ref.view(1, 1, 4).expand(4, 1, 4), targets, beta
    )
    assert vimpo_value_loss(rho2, kappa2, a - (pi * a).sum(), torch.ones(4, 1)).sum().item() > 1e-3


def test_vimpo_actor_advantage_is_whitened_over_every_token():
    class One:
        def sum(self, values):
            return list(values)

    out, mean, std = whiten([np.array([1.0, 2.0]), np.array([3.0])], One())
    assert (mean, std) == pytest.approx((2.0, 1.0))  # unbiased variance, as masked_whiten
    np.testing.assert_allclose(np.concatenate(out), [-1.0, 0.0, 1.0], atol=1e-7)


# ----------------------------------------------------------------------------- token weights


def test_taco_golden():
    # α = 0.01, λ = 0.9: r = −log p − H + log α.
    # t0: p = 0.001, H = 1: r = ln 1000 − 1 + ln 0.01 = ln 10 − 1 > 0, e^−r = e/10, so
    #     w = 1 − 0.9·(1 − e/10) = 0.3446454.
    # t1: p = 0.5, H = 1: r < 0 → w = 1.  t2: same tail token as t0 but A < 0 → unchanged.
    logp = torch.tensor([[LN(0.001), LN(0.5), LN(0.001)]])
    ent = torch.ones(1, 3)
    adv = torch.tensor([[2.0, 2.0, -1.0]])
    r = -LN(0.001) - 1.0 + LN(0.01)
    w0 = 1.0 - 0.9 * (1.0 - math.exp(-r))
    w = taco_weights(logp, ent, adv, 0.01, 0.9)
    torch.testing.assert_close(w, torch.tensor([[w0, 1.0, 1.0]]))
    assert w0 == pytest.approx(1.0 - 0.9 * (1.0 - math.e / 10)) == pytest.approx(0.3446454)
    inp = LossInputs(
        logp=logp,
        old_logp=logp,
        adv=adv,
        mask=torch.ones(1, 3),
        agg=Aggregator.local(torch.ones(1, 3)),
        entropy=ent,
    )
    new_adv, new_mask, metrics = get_token_weight("taco").fn(inp, token_weight_config("taco"))
    torch.testing.assert_close(new_adv, torch.tensor([[2.0 * w0, 2.0, -1.0]]))
    assert torch.equal(new_mask, inp.mask) and metrics["taco_frac"] == pytest.approx(1 / 3)


def test_negative_token_filter_thresholds():
    old = torch.log(torch.tensor([[0.95, 0.5, 0.99], [0.95, 0.5, 0.99], [0.3, 0.6, 0.1]]))
    adv = torch.tensor([[-1.0] * 3, [1.0] * 3, [-1.0] * 3])
    mask = torch.ones(3, 3)
    mask[2, 0] = 0.0  # padding is never filtered, whatever its probability
    prob = negative_token_filter(old, adv, mask, "prob", 0.9, 0.2)
    assert prob.tolist() == [[True, False, True], [False] * 3, [False] * 3]
    # top-q, q = 0.5 of n = 3 (2 in row 2) tokens: the ⌈1.5⌉ = 2 (⌈1⌉ = 1) most probable.
    top = negative_token_filter(old, adv, mask, "top_q", 0.9, 0.5)
    assert top.tolist() == [[True, False, True], [False] * 3, [False, True, False]]
    inp = LossInputs(logp=old, old_logp=old, adv=adv, mask=mask, agg=Aggregator.local(mask))
    _, new_mask, metrics = get_token_weight("ntf").fn(inp, token_weight_config("ntf"))
    assert new_mask.tolist() == [[0.0, 1.0, 0.0], [1.0] * 3, [0.0, 1.0, 1.0]]
    assert metrics["ntf_frac"] == pytest.approx(2 / 8)


# ----------------------------------------------------------------------------- masks


def _masked_case(name: str):
    torch.manual_seed(3)
    s, r, v = 3, 4, 6
    logits = torch.randn(s, r, v, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, v, (s, r))
    mask = torch.ones(s, r, dtype=torch.float64)
    mask[0, :2] = 0.0
    mask[1] = 0.0  # a fully masked row
    old = (
        torch.log_softmax(torch.randn(s, r, v, dtype=torch.float64), -1)
        .gather(-1, targets.unsqueeze(-1))
        .squeeze(-1)
    )
    adv = torch.tensor([1.0, 5.0, -0.7], dtype=torch.float64).view(s, 1).expand(s, r).clone()
    extra = {
        "klpo_alt": torch.randint(0, v, (s, r, 4)),
        "vimpo_adv": torch.randn(s, r, dtype=torch.float64),
    }
    ref = torch.randn(s, r, v, dtype=torch.float64)
    return logits, targets, old, adv, mask, extra, ref


@pytest.mark.parametrize("name", ["ppo", "cispo", "klpo", "bpo", "vimpo"])
def test_fully_masked_rows_contribute_nothing(name):
    logits, targets, old, adv, mask, extra, ref = _masked_case(name)
    spec, cfg = get_policy_loss(name), policy_loss_config(name)
    inp = _inputs(logits, targets, old, adv, mask, extra=extra, ref_logits=ref)
    loss, _ = spec.fn(inp, cfg)
    (grad,) = torch.autograd.grad(loss, logits)
    assert torch.all(grad[1] == 0) and torch.all(grad[0, :2] == 0)
    assert float(grad.abs().sum()) > 0
    # the same loss without the masked row
    keep = torch.tensor([0, 2])
    sub = logits.detach()[keep].clone().requires_grad_(True)
    inp2 = _inputs(
        sub,
        targets[keep],
        old[keep],
        adv[keep],
        mask[keep],
        extra={k: x[keep] for k, x in extra.items()},
        ref_logits=ref[keep],
    )
    loss2, _ = spec.fn(inp2, cfg)
    assert loss.item() == pytest.approx(loss2.item(), rel=1e-12)


# ----------------------------------------------------------------------------- learner


CORPUS = ["push the box up", "move left then right", "down down up", "<action>up</action>"] * 20


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CORPUS, vocab_size=300)


def _model(tok, seed=0):
    torch.manual_seed(seed)
    return build_tiny_model(ModelConfig(hidden_size=32, intermediate_size=64), tok)


def _samples(tok, n=6, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        prompt = tok.encode(CORPUS[i % 4])
        # distinct (prompt, response length) pairs: the learner's length sort has no ties, so
        # its micro-batch order is the one the reference computation below uses
        resp = [(7 * i + j) % 250 + 5 for j in range(2 + i % 3)]
        old = (-rng.uniform(4.0, 7.0, len(resp))).tolist()
        out.append(Sample(prompt, resp, old, float(rng.normal()), group=i // 2))
    return out


def _old_loss(learner, chunk, device, agg, n_tokens):
    """The learner's loss as it was before the registry (kept here verbatim)."""
    cfg = learner.cfg
    logits, t = forward_chunk(learner.model, chunk, learner.pad_id, device, cfg.share_prompts)
    mask = t["mask"]
    logp = logprobs_from_logits(logits, t["targets"], learner.temperature)
    ratio = policy_ratio(logp, t["old"], mask, cfg.ratio_level)
    pg_tok, _ = clipped_surrogate(ratio, t["adv"], cfg.clip_low, cfg.clip_high, cfg.clip_ratio_c)
    loss = aggregate_loss(pg_tok, mask, **agg)
    if cfg.entropy_coef > 0:
        ent_tok = entropy_from_logits(logits / learner.temperature)
        loss = loss - cfg.entropy_coef * aggregate_loss(ent_tok, mask, **agg)
    if cfg.kl_coef > 0:
        loss = loss + cfg.kl_coef * aggregate_loss(
            kl_penalty(logp, t["ref"], cfg.kl_type), mask, **agg
        )
    return loss


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"clip_high": 0.28, "ratio_level": "step", "loss_agg": "seq-mean-token-mean"},
        {"kl_coef": 0.1, "entropy_coef": 0.01, "loss_agg": "seq-mean-token-sum-norm"},
    ],
)
def test_ppo_through_the_registry_equals_the_former_loss_bit_for_bit(tok, opts):
    cfg = LearnerConfig(max_grad_norm=0, grad_cosine=False, **opts)
    samples = _samples(tok)
    model = _model(tok)
    learner = Learner(model, cfg, tok.pad_token_id, temperature=0.9, max_response_tokens=4)
    learner.optimizer.param_groups[0]["lr"] = 0.0
    learner.update(copy.deepcopy(samples), np.random.default_rng(0))
    new = [p.grad.clone() for p in model.parameters()]
    ref_model = _model(tok)
    old = Learner(ref_model, cfg, tok.pad_token_id, temperature=0.9, max_response_tokens=4)
    if cfg.kl_coef > 0:
        for r, s in zip(old.score(samples, reference=True), samples):
            s.ref_logprobs = r
    n_tok, n_seq = sum(len(s.response_ids) for s in samples), len(samples)
    agg = dict(mode=cfg.loss_agg, n_tokens=n_tok, n_seqs=n_seq, scale=old.loss_scale)
    old.model.train()
    ref_model.zero_grad()
    device = next(ref_model.parameters()).device
    for chunk in micro_batches(samples, cfg.micro_batch_tokens):
        _old_loss(old, chunk, device, agg, n_tok).backward()
    for a, b in zip(new, (p.grad for p in ref_model.parameters())):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["cispo", "klpo", "bpo", "vimpo"])
def test_every_loss_updates_the_tiny_model(tok, name):
    model = _model(tok)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = LearnerConfig(lr=1e-2, loss=name, token_weights=("taco", "ntf"), mini_batch_steps=3)
    learner = Learner(model, cfg, tok.pad_token_id, max_response_tokens=4)
    out = learner.update(_samples(tok), np.random.default_rng(0))
    assert all(math.isfinite(v) for v in out.values())
    assert {"loss/taco_frac", "loss/ntf_frac"} <= set(out)
    assert set(f"loss/{m}" for m in get_policy_loss(name).metrics) <= set(out)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_klpo_alternatives_are_drawn_once_per_update_from_the_pre_update_policy(tok):
    model = _model(tok)
    cfg = LearnerConfig(loss="klpo", loss_args={"m": 3}, ppo_epochs=2)
    learner = Learner(model, cfg, tok.pad_token_id, max_response_tokens=4)
    samples = _samples(tok)
    learner.update(samples, np.random.default_rng(0))
    for s in samples:
        alt = s.extra["klpo_alt"]
        assert alt.shape == (len(s.response_ids), 3) and alt.dtype == np.int64
        assert alt.min() >= 0 and alt.max() < model.config.vocab_size
    again = _samples(tok)
    Learner(_model(tok), cfg, tok.pad_token_id, max_response_tokens=4).update(
        again, np.random.default_rng(0)
    )
    assert all(
        np.array_equal(a.extra["klpo_alt"], b.extra["klpo_alt"]) for a, b in zip(samples, again)
    )


def test_third_party_loss_is_usable_by_name(tok, request):
    from dataclasses import dataclass

    from agentrl.configuration import check
    from agentrl.learn import policy_loss

    # Registered for this test only: every loss left registered needs a docs/methods.md section
    # (tests/test_methods_doc.py).
    request.addfinalizer(lambda: policy_loss._LOSSES.pop("test_signed_pg", None))

    @dataclass(frozen=True)
    class SignedConfig:
        scale: float = 1.0

        def __post_init__(self):
            check(self.scale > 0, "learner.loss_args.scale", self.scale, "> 0")

    calls = []

    @register_policy_loss("test_signed_pg", config=SignedConfig, metrics=("signed_calls",))
    def signed(inp, cfg):
        calls.append(cfg.scale)
        return inp.agg(-cfg.scale * inp.adv * inp.logp), {"signed_calls": 1.0}

    from agentrl.run import compose

    run = compose(["learner.loss=test_signed_pg", "learner.loss_args={scale: 2.0}"])
    learner = Learner(_model(tok), run.learner, tok.pad_token_id, max_response_tokens=4)
    out = learner.update(_samples(tok), np.random.default_rng(0))
    assert calls and set(calls) == {2.0} and out["loss/signed_calls"] >= 1.0
    with pytest.raises(ConfigError, match=r"learner.loss_args.scale=-1.0 is invalid"):
        compose(["learner.loss=test_signed_pg", "learner.loss_args={scale: -1.0}"])


# ----------------------------------------------------------------------------- batching


def test_reward_balanced_mini_batches_share_out_each_sign():
    advs = [1.0] * 9 + [-1.0] * 3 + [0.0] * 4  # sorted by sign: random cuts would not mix
    samples = [Sample([1], [2], [0.0], a, group=i) for i, a in enumerate(advs)]
    minis = mini_batches(samples, 4, np.random.default_rng(0), batching="reward_balanced")
    assert sorted(map(id, (s for m in minis for s in m))) == sorted(map(id, samples))
    assert len(minis) == 4 and {len(m) for m in minis} == {4}
    pos = [sum(s.advantage > 0 for s in m) for m in minis]
    neg = [sum(s.advantage < 0 for s in m) for m in minis]
    assert max(pos) - min(pos) <= 1 and max(neg) - min(neg) <= 1 and sum(neg) == 3
    assert all(p >= 2 for p in pos)
    # uneven size: sizes differ by at most one
    minis = mini_batches(samples[:15], 4, np.random.default_rng(1), batching="reward_balanced")
    assert sorted(len(m) for m in minis) == [3, 4, 4, 4]


def test_learner_builds_reward_balanced_mini_batches(tok):
    cfg = LearnerConfig(batching="reward_balanced", mini_batch_steps=3)
    learner = Learner(_model(tok), cfg, tok.pad_token_id, max_response_tokens=4)
    samples = [Sample([1], [2], [0.0], a) for a in (1.0, 1.0, 1.0, -1.0, -1.0, -1.0)]
    minis = learner._mini_batches(samples, np.random.default_rng(0))
    assert [sorted(s.advantage for s in m) for m in minis] == [[-1.0, 1.0, 1.0], [-1.0, -1.0, 1.0]]


# ------------------------------------------------------------------------- run configuration


def test_learning_benchmark_objectives_compose_on_the_estimators_budget():
    from agentrl.bench.learning import BUDGET, OBJECTIVES, _method_args
    from agentrl.run import compose

    assert {"cispo", "klpo", "bpo", "vimpo"} <= set(OBJECTIVES)
    for name in OBJECTIVES:
        cfg = compose([*BUDGET, "trainer.steps=1", *_method_args(name)])
        assert cfg.rollout.n_tasks * cfg.rollout.group_size == 64, name  # the same episodes
    assert compose([*BUDGET, *_method_args("klpo")]).learner.loss == "klpo"


def test_a_loss_with_its_own_aggregation_says_so_at_start_up():
    from agentrl.credit import get_estimator
    from agentrl.run import compose
    from agentrl.run.setup import startup_warnings

    grpo = get_estimator("grpo")
    said = startup_warnings(compose(["learner.loss=klpo"]), grpo)
    assert any("own loss_agg='seq-mean-token-sum'" in m for m in said), said
    assert not any("loss_agg" in m for m in startup_warnings(compose([]), grpo))
    same = compose(["learner.loss=klpo", "learner.loss_agg=seq-mean-token-sum"])
    assert not any("loss_agg" in m for m in startup_warnings(same, grpo))
