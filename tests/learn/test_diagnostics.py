"""Value-gradient diagnostics: reachable headroom per group and the gradient cosine of halves."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agentrl.credit.diagnostics import headroom_metrics
from agentrl.learn.learner import (
    Learner,
    LearnerConfig,
    gradient_agreement,
    gradient_halves,
    half_gradient_stats,
)
from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer
from agentrl.model.forward import Sample


def test_headroom_by_hand():
    # group sizes 4, 4, 4, 2: one success of four, none, all, one of two.
    won = np.array([1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0], dtype=bool)
    group = np.repeat([0, 1, 2, 3], [4, 4, 4, 2])
    out = headroom_metrics(won, group)
    assert out["diag/pass_at_g"] == 0.75
    assert out["diag/success"] == pytest.approx(6 / 14)
    assert out["diag/headroom"] == pytest.approx(0.75 - 6 / 14)
    assert out["diag/headroom_group_mean"] == pytest.approx((0.75 + 0 + 0 + 0.5) / 4)
    assert out["diag/mixed_groups"] == 0.5
    # Dropping the lone failure of group 3 leaves it always successful: no headroom there.
    keep = np.ones(14, dtype=bool)
    keep[13] = False
    assert headroom_metrics(won, group, keep)["diag/headroom_group_mean"] == pytest.approx(0.75 / 4)
    assert headroom_metrics(won[:0], group[:0]) == {}


def test_gradient_agreement_by_hand():
    assert gradient_agreement(4.0, 4.0, 4.0) == {"diag/grad_cos": 1.0}  # identical: no SNR
    assert gradient_agreement(0.0, 1.0, 1.0) == {"diag/grad_cos": 0.0, "diag/grad_snr": 0.0}
    # g1 = (2, 0), g2 = (1, 0): cos 1, |g1 − g2|² = 1, SNR = 4·2/1.
    assert gradient_agreement(2.0, 4.0, 1.0) == {"diag/grad_cos": 1.0, "diag/grad_snr": 8.0}
    assert gradient_agreement(0.0, 0.0, 1.0) == {}
    assert gradient_agreement(math.nan, 1.0, 1.0) == {}
    t = torch.tensor([3.0, -4.0])
    # total = 3·first: g2 = 2·first; no gradient yet counts as zero; no gradient is skipped.
    stats = half_gradient_stats([t, None, t], [3 * t, t, None])
    assert stats == [2 * 25.0, 25.0, 4 * 25.0 + 25.0]


def test_halves_alternate_micro_batches_and_split_a_lone_one():
    a, b, c = ([Sample([1], [k], [0.0], 0.0)] for k in range(3))
    assert gradient_halves([a, b, c]) == [[a, c], [b]]
    lone = [a[0], b[0], c[0]]
    assert gradient_halves([lone]) == [[[a[0], c[0]]], [[b[0]]]]
    # Samples sharing a prompt stay together (it is processed once), runs alternate.
    p = [Sample([k // 2], [k], [0.0], 0.0) for k in range(5)]  # prompts 0, 0, 1, 1, 2
    assert gradient_halves([p]) == [[[p[0], p[1], p[4]]], [[p[2], p[3]]]]
    assert gradient_halves([a]) == [[a], []]
    assert gradient_halves([]) == [[], []]


CORPUS = ["push the box up", "move left then right", "down down up"] * 20


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CORPUS, vocab_size=300)


def _learner(tok, **cfg):
    torch.manual_seed(0)
    model = build_tiny_model(ModelConfig(hidden_size=32, intermediate_size=64), tok)
    return model, Learner(model, LearnerConfig(**{"max_grad_norm": 0.0, **cfg}), tok.pad_token_id)


def _samples(learner, advantages, prompt=(5, 6, 7), response=(8, 9)):
    samples = [Sample(list(prompt), list(response), [0.0] * len(response), a) for a in advantages]
    for s, lp in zip(samples, learner.score(samples)):
        s.old_logprobs = lp  # ratio 1: the surrogate's gradient is −A·∇log π
    return samples


@pytest.mark.parametrize(("advantages", "cos"), [([1.0, 1.0], 1.0), ([1.0, -1.0], -1.0)])
def test_identical_halves_have_cosine_one_and_opposite_ones_minus_one(tok, advantages, cos):
    _, learner = _learner(tok)
    out = learner.update(_samples(learner, advantages), np.random.default_rng(0))
    assert out["diag/grad_cos"] == pytest.approx(cos, abs=1e-6)
    assert ("diag/grad_snr" in out) == (cos < 0)  # identical halves: zero noise, no SNR


def test_halves_leave_the_update_unchanged_and_are_averaged_over_mini_batches(tok):
    rng = np.random.default_rng(3)
    specs = [
        (rng.integers(5, 250, size=int(rng.integers(2, 6))).tolist(), float(rng.normal()))
        for _ in range(9)
    ]
    results = {}
    for on in (False, True):
        for budget in (30, 10_000):  # several micro-batches, and one that is split in two
            model, learner = _learner(tok, grad_cosine=on, micro_batch_tokens=budget)
            samples = [
                Sample([5, 6, 7, k % 4 + 10], resp, [-3.0] * len(resp), a)
                for k, (resp, a) in enumerate(specs)
            ]
            out = learner.update(samples, np.random.default_rng(0))
            results[on, budget] = [p.grad.clone() for p in model.parameters()]  # the step's
            assert ("diag/grad_cos" in out) == on
            if on:
                assert -1.0 <= out["diag/grad_cos"] <= 1.0
    for budget in (30, 10_000):  # the same gradient, up to the order of float additions
        for p, q in zip(results[False, budget], results[True, budget]):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-8)
    # Three mini-batches of three samples: the mean of three cosines.
    _, learner = _learner(tok, mini_batch_steps=3)
    out = learner.update(_samples(learner, [1.0] * 9), np.random.default_rng(0))
    assert out["loss/updates"] == 3.0 and out["diag/grad_cos"] == pytest.approx(1.0, abs=1e-5)
