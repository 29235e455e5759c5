"""GAGPO ([R] reconstruction): hand-computed values, plain-loop reference, edge cases, config."""

from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_gigpo import EPS, PROPERTY, batch_from_spec, gammas, ref_returns, specs, traj

from agentrl.algos import gagpo as gagpo_module
from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, discounted_returns, estimator_config


def gagpo(spec, **overrides) -> np.ndarray:
    cfg = estimator_config("gagpo", overrides)
    return compute_advantages("gagpo", batch_from_spec(spec), cfg).step


def gae_of(spec, gamma: float, lam: float) -> np.ndarray:
    """Â before the group normalisation."""
    b = batch_from_spec(spec)
    _, gae, _ = gagpo_module.gagpo_advantage(
        b.step_reward, b.step_traj, b.step_anchor, b.step_group, b.n_groups, gamma, lam, EPS
    )
    return gae


# ---------------------------------------------------------------------------------------------
# Slow reference from docs/methods.md#gagpo [R]: plain loops over dicts.


def ref_gagpo(spec, gamma: float, lam: float) -> list[float]:
    out = []
    for trajs in spec:
        returns = [ref_returns(tr["steps"], gamma) for tr in trajs]
        by_anchor = defaultdict(list)
        for tr, rets in zip(trajs, returns):
            for step, g in zip(tr["steps"], rets):
                by_anchor[step[0]].append(g)
        value = {a: sum(v) / len(v) for a, v in by_anchor.items()}
        group_adv = []
        for tr in trajs:
            steps = tr["steps"]
            adv, running = [0.0] * len(steps), 0.0
            for t in reversed(range(len(steps))):
                # the last step is done (terminated or truncated): no bootstrap
                nxt = value[steps[t + 1][0]] if t + 1 < len(steps) else 0.0
                delta = steps[t][1] + gamma * nxt - value[steps[t][0]]
                running = delta + gamma * lam * running
                adv[t] = running
            group_adv.extend(adv)
        if len(group_adv) == 1:
            out.append(0.0)
            continue
        mean, std = statistics.fmean(group_adv), statistics.stdev(group_adv)
        out.extend((a - mean) / (std + EPS) for a in group_adv)
    return out


# ---------------------------------------------------------------------------------------------
# Golden values (γ = λ = 0.5).

GOLDEN = [
    [
        traj(("s", 0), ("t", 1), won=True),  # G = [0.5, 1]
        traj(("s", 0), ("s", 0), ("t", 1), won=True),  # G = [0.25, 0.5, 1]
        traj(("s", 0), end="truncated"),  # G = [0]
    ],
    [traj(("u", 2), won=True)],  # a group with a single step
]
# V̂(s) = (0.5 + 0.25 + 0.5 + 0)/4 = 0.3125; V̂(t) = (1 + 1)/2 = 1; V̂(u) = 2.
# δ = r + γ·V̂(next)·(1 − done) − V̂(s):
#   τ1: 0 + 0.5·1 − 0.3125 = 0.1875;    1 + 0 − 1 = 0
#   τ2: 0 + 0.5·0.3125 − 0.3125 = −0.15625;  0 + 0.5·1 − 0.3125 = 0.1875;  1 − 1 = 0
#   τ3: 0 + 0 (truncated → bootstrap 0) − 0.3125 = −0.3125
# Â (γλ = 0.25): τ1 [0.1875, 0]; τ2 [−0.15625 + 0.25·0.1875 = −0.109375, 0.1875, 0];
#   τ3 [−0.3125]
GAE = np.array([0.1875, 0.0, -0.109375, 0.1875, 0.0, -0.3125, 0.0])
# Group 0: mean = −0.046875/6 = −0.0078125; centred [0.1953125, 0.0078125, −0.1015625,
#   0.1953125, 0.0078125, −0.3046875]; Σ centred² = 0.1795654296875; unbiased var = /5.
STD0 = np.sqrt(0.1795654296875 / 5)  # 0.1895075


def test_golden_values():
    np.testing.assert_allclose(gae_of(GOLDEN, 0.5, 0.5), GAE, rtol=1e-12)
    adv = gagpo(GOLDEN, gamma=0.5, lam=0.5)
    centred = np.array([0.1953125, 0.0078125, -0.1015625, 0.1953125, 0.0078125, -0.3046875])
    np.testing.assert_allclose(adv[:6], centred / (STD0 + EPS), rtol=1e-9)
    np.testing.assert_allclose(adv[0], 1.0306267, rtol=1e-6)  # 0.1953125/0.1895085
    assert adv[6] == 0.0  # a group with one step has nothing to compare against


def test_lambda_one_is_return_minus_proxy():
    # λ = 1 telescopes: Â = G − V̂(s) = τ1 [0.5 − 0.3125, 1 − 1], τ2 [0.25 − 0.3125,
    # 0.5 − 0.3125, 0], τ3 [0 − 0.3125], u [2 − 2]
    expected = [0.1875, 0.0, -0.0625, 0.1875, 0.0, -0.3125, 0.0]
    np.testing.assert_allclose(gae_of(GOLDEN, 0.5, 1.0), expected, atol=1e-12)


def test_lambda_zero_is_one_step_td():
    # λ = 0: Â = δ (see the δ table above)
    expected = [0.1875, 0.0, -0.15625, 0.1875, 0.0, -0.3125, 0.0]
    np.testing.assert_allclose(gae_of(GOLDEN, 0.5, 0.0), expected, atol=1e-12)


def test_truncation_bootstraps_zero_like_termination():
    spec = [[traj(("a", 0), ("b", 1)), traj(("a", 0), ("b", 0), end="truncated")]]
    flipped = [[traj(("a", 0), ("b", 1)), traj(("a", 0), ("b", 0), end="terminated")]]
    np.testing.assert_array_equal(gagpo(spec), gagpo(flipped))


def test_module_declares_step_ratio_and_metrics():
    assert gagpo_module.EXPECTS_STEP_RATIO is True
    out = compute_advantages("gagpo", batch_from_spec(GOLDEN))
    assert {"credit/td_abs_mean", "credit/gae_std"} <= set(out.metrics)


# ---------------------------------------------------------------------------------------------
# Reference equals vectorised.


@PROPERTY
@given(spec=specs, gamma=gammas, lam=st.sampled_from((0.0, 0.5, 0.95, 1.0)))
def test_matches_reference(spec, gamma, lam):
    adv = gagpo(spec, gamma=gamma, lam=lam)
    np.testing.assert_allclose(adv, ref_gagpo(spec, gamma, lam), rtol=1e-7, atol=1e-7)


@PROPERTY
@given(spec=specs, gamma=gammas)
def test_lambda_one_telescopes_on_random_batches(spec, gamma):
    b = batch_from_spec(spec)
    g = discounted_returns(b.step_reward, b.step_traj, gamma)
    v = gagpo_module.grouped_value_proxy(g, b.step_anchor, int(b.step_anchor.max()) + 1)
    np.testing.assert_allclose(gae_of(spec, gamma, 1.0), g - v, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# Edge cases.


def test_edge_cases_are_finite_and_zero_where_expected():
    spec = [
        [traj(("a", 0.1), ("b", 0.1)), traj(("a", 0.1), ("b", 0.1))],  # all-equal rewards
        [traj(("a", 0), ("b", 0), end="truncated"), traj(("a", 0))],  # all failures
        [traj(("x", 1.0))],  # singleton group, one step
        [traj(("c", 0), ("c", 0), ("c", 1)), traj(("c", 0))],  # cycles on one anchor
        [traj(("d", 1)), traj(("d", 0)), traj(("e", 0))],  # one-step episodes
    ]
    adv = gagpo(spec)
    assert np.all(np.isfinite(adv))
    assert np.all(adv[:8] == 0.0)
    # cycles: V̂(c) = mean(0.9025, 0.95, 1, 0) = 0.713125; later visits of c are nearer the
    # reward, so the step advantage increases along the trajectory
    assert np.all(np.diff(adv[8:11]) > 0)
    # one-step episodes: Â = r − V̂: d → 1 − 0.5, 0 − 0.5; e → 0 − 0 = 0
    a, b, c = adv[12:15]
    assert a > 0 > b and c == pytest.approx(0.0, abs=1e-12) and a == pytest.approx(-b)


# ---------------------------------------------------------------------------------------------
# Config errors name algo.<field>.


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"gamma": -0.1}, "gamma"),
        ({"lam": 1.5}, "lam"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"lambda": 0.9}, "lambda"),
    ],
)
def test_config_errors_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"algo\.{field}"):
        estimator_config("gagpo", overrides)
