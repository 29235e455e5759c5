"""RLOO, REINFORCE++ and REINFORCE++-baseline: hand-computed values, loop references, edges."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import given
from test_gigpo import EPS, PROPERTY, batch_from_spec, gammas, ref_returns, specs, traj

from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config


def run(name: str, spec, **overrides) -> np.ndarray:
    cfg = estimator_config(name, overrides)
    return compute_advantages(name, batch_from_spec(spec), cfg).step


# ---------------------------------------------------------------------------------------------
# Slow references: plain loops.


def ref_rloo(spec) -> list[float]:
    out = []
    for trajs in spec:
        totals = [sum(s[1] for s in tr["steps"]) for tr in trajs]
        for i, tr in enumerate(trajs):
            others = totals[:i] + totals[i + 1 :]
            adv = totals[i] - sum(others) / len(others) if others else totals[i]
            out.extend([adv] * len(tr["steps"]))
    return out


def ref_whiten(values: list[float]) -> list[float]:
    if len(values) < 2:
        return [0.0] * len(values)
    mean, std = statistics.fmean(values), statistics.stdev(values)
    return [(v - mean) / (std + EPS) for v in values]


def ref_reinforce_pp(spec, gamma: float) -> list[float]:
    return ref_whiten(
        [g for trajs in spec for tr in trajs for g in ref_returns(tr["steps"], gamma)]
    )


def ref_reinforce_pp_baseline(spec) -> list[float]:
    per_step = []
    for trajs in spec:
        totals = [sum(s[1] for s in tr["steps"]) for tr in trajs]
        mean = statistics.fmean(totals) if len(totals) > 1 else 0.0
        for tr, total in zip(trajs, totals):
            per_step.extend([total - mean] * len(tr["steps"]))
    return ref_whiten(per_step)


# ---------------------------------------------------------------------------------------------
# Golden values.

SPEC = [
    # returns 1, 0, 0, 1: n = 4, mean 0.5
    [traj(("s", 0), ("t", 1)), traj(("s", 0)), traj(("s", 0)), traj(("s", 1))],
    [traj(("u", 2))],  # a group of one, return 2
    [traj(("v", 3)), traj(("v", 1), ("w", 2))],  # all-equal returns 3, 3
]


def test_rloo_golden_values():
    # R = 1: 1 − mean(0, 0, 1) = 2/3 (= 4/3·0.5); R = 0: 0 − mean(1, 0, 1) = −2/3;
    # singleton: A = R = 2; equal returns: 3 − 3 = 0.
    expected = [2 / 3, 2 / 3, -2 / 3, -2 / 3, 2 / 3, 2.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(run("rloo", SPEC), expected, rtol=1e-12, atol=1e-15)


SMALL = [[traj(("s", 0), ("t", 1)), traj(("s", 0))]]


def test_reinforce_pp_golden_values():
    # γ = 1 (default): G = [1, 1, 0]; mean 2/3; centred [1/3, 1/3, −2/3];
    #   unbiased var = (1/9 + 1/9 + 4/9)/2 = 1/3 → A = centred/(0.5773503 + ε)
    s = np.sqrt(1 / 3) + EPS
    np.testing.assert_allclose(
        run("reinforce_pp", SMALL), [1 / 3 / s, 1 / 3 / s, -2 / 3 / s], rtol=1e-12
    )
    # γ = 0.5: G = [0.5, 1, 0]; mean 0.5; centred [0, 0.5, −0.5]; var = 0.5/2 → std 0.5
    np.testing.assert_allclose(
        run("reinforce_pp", SMALL, gamma=0.5), [0.0, 0.5 / 0.500001, -0.5 / 0.500001], rtol=1e-12
    )


def test_reinforce_pp_baseline_golden_values():
    # R = 1, 0 − group mean 0.5 → [0.5, 0.5 (2 steps), −0.5]; the lone group keeps R = 2.
    # Steps [0.5, 0.5, −0.5, 2]: mean 0.625; centred [−0.125, −0.125, −1.125, 1.375];
    #   Σ centred² = 0.015625·2 + 1.265625 + 1.890625 = 3.1875; unbiased var = 1.0625.
    spec = [*SMALL, [traj(("u", 2))]]
    s = np.sqrt(1.0625) + EPS  # 1.0307786
    expected = np.array([-0.125, -0.125, -1.125, 1.375]) / s
    np.testing.assert_allclose(run("reinforce_pp_baseline", spec), expected, rtol=1e-12)
    np.testing.assert_allclose(expected[3], 1.3339442, rtol=1e-6)


def test_reinforce_pp_metrics():
    out = compute_advantages("reinforce_pp", batch_from_spec(SMALL))
    assert out.metrics["credit/return_mean"] == pytest.approx(2 / 3)
    assert out.metrics["credit/return_std"] == pytest.approx(np.std([1, 1, 0]))


# ---------------------------------------------------------------------------------------------
# References equal vectorised.


@PROPERTY
@given(spec=specs)
def test_rloo_matches_reference(spec):
    np.testing.assert_allclose(run("rloo", spec), ref_rloo(spec), rtol=1e-9, atol=1e-9)


@PROPERTY
@given(spec=specs, gamma=gammas)
def test_reinforce_pp_matches_reference(spec, gamma):
    adv = run("reinforce_pp", spec, gamma=gamma)
    np.testing.assert_allclose(adv, ref_reinforce_pp(spec, gamma), rtol=1e-7, atol=1e-7)


@PROPERTY
@given(spec=specs)
def test_reinforce_pp_baseline_matches_reference(spec):
    adv = run("reinforce_pp_baseline", spec)
    np.testing.assert_allclose(adv, ref_reinforce_pp_baseline(spec), rtol=1e-7, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Edge cases.

EDGE = [
    [traj(("a", 0.1), ("b", 0.1)), traj(("a", 0.1), ("b", 0.1))],  # all-equal rewards
    [traj(("a", 0), ("b", 0), end="truncated"), traj(("a", 0))],  # all failures
]


@pytest.mark.parametrize("name", ["rloo", "reinforce_pp", "reinforce_pp_baseline"])
def test_edge_cases(name):
    # all-equal and all-failure groups: exactly zero for the group-relative estimators
    adv = run(name, EDGE)
    if name != "reinforce_pp":  # its whitening mixes the two groups' different returns
        assert np.all(adv == 0.0)
    assert np.all(np.isfinite(adv))
    # a single one-step episode in the whole batch: finite (whitening a lone value gives 0)
    lone = run(name, [[traj(("x", 1.0))]])
    assert np.all(np.isfinite(lone))
    assert lone[0] == (1.0 if name == "rloo" else 0.0)
    # a batch where every step has reward 0
    assert np.all(run(name, [[traj(("a", 0), ("a", 0))], [traj(("b", 0))]]) == 0.0)
    # cycles and one-step episodes mixed
    mixed = [[traj(("c", 0), ("c", 0), ("c", 1)), traj(("c", 0))], [traj(("d", 1))]]
    assert np.all(np.isfinite(run(name, mixed)))


# ---------------------------------------------------------------------------------------------
# Config errors name algo.<field>.


@pytest.mark.parametrize(
    "name, overrides, field",
    [
        ("reinforce_pp", {"gamma": 1.5}, "gamma"),
        ("reinforce_pp", {"epsilon": -1.0}, "epsilon"),
        ("reinforce_pp_baseline", {"epsilon": -1.0}, "epsilon"),
        ("reinforce_pp_baseline", {"gamma": 0.9}, "gamma"),
        ("rloo", {"epsilon": 1e-6}, "epsilon"),
    ],
)
def test_config_errors_name_the_field(name, overrides, field):
    with pytest.raises(ConfigError, match=rf"algo\.{field}"):
        estimator_config(name, overrides)
