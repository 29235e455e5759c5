"""GACA ([R] reconstruction): hand-computed values, plain-loop reference, edge cases, config."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_gigpo import EPS, PROPERTY, batch_from_spec, gammas, ref_gigpo_parts, specs, traj

from agentrl.algos.gaca import nll_zscore
from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config


def gaca(spec, **overrides) -> np.ndarray:
    cfg = estimator_config("gaca", overrides)
    return compute_advantages("gaca", batch_from_spec(spec), cfg).step


# ---------------------------------------------------------------------------------------------
# Slow reference from docs/methods.md#gaca [R], on top of the GiGPO reference.


def ref_z(spec) -> list[float]:
    """Within-trajectory z of the step NLL, population std; unknown NLL → z = 0."""
    out = []
    for trajs in spec:
        for tr in trajs:
            known = [s[2] for s in tr["steps"] if s[2] is not None]
            mean = statistics.fmean(known) if known else 0.0
            std = statistics.pstdev(known) if known else 0.0
            for s in tr["steps"]:
                if s[2] is None or len(known) == 1:
                    out.append(0.0)
                else:
                    out.append((s[2] - mean) / (std + EPS))
    return out


def ref_gaca(spec, gamma, mode, omega0, kappa, omega_max, similarity=0.0) -> list[float]:
    parts = ref_gigpo_parts(spec, gamma, mode, similarity)
    out = []
    for (episode, step), z in zip(parts, ref_z(spec)):
        omega = min(max(omega0 * (1 + kappa * z), 0.0), omega_max)
        out.append(episode + omega * step)
    return out


# ---------------------------------------------------------------------------------------------
# Golden values (γ = 0.5, mean_norm: A^E and A^S as in test_gigpo's GOLDEN).

GOLDEN = [
    [
        traj(("s", 0, 0.5), ("t", 1, None), won=True),  # one known NLL → z = [0, 0]
        traj(("s", 0, 1.0), ("s", 0, 3.0), ("t", 1, 2.0), won=True),
        traj(("s", 0, 0.7), end="truncated"),  # one step → z = 0
    ],
    [traj(("u", 2, 1.0), won=True)],
]
# A^E per step: [1/3, 1/3, 1/3, 1/3, 1/3, −2/3, 2]; A^S: [0.1875, 0, −0.0625, 0.1875, 0,
#   −0.3125, 0] (see test_gigpo).
# τ2: u = [1, 3, 2], mean 2, population std √(2/3) = 0.8164966 →
#   z = [−1/(0.8164966 + ε), +1/(0.8164966 + ε), 0] = [−1.2247434, 1.2247434, 0].
Z_TAU2 = 1 / (np.sqrt(2 / 3) + EPS)


def test_golden_values():
    adv = gaca(GOLDEN, gamma=0.5, mode="mean_norm")
    # ω (κ = 0.3) for τ2: [1 − 0.3·1.2247434, 1 + 0.3·1.2247434, 1] = [0.6325770, 1.3674230, 1]
    w0, w1 = 1 - 0.3 * Z_TAU2, 1 + 0.3 * Z_TAU2
    expected = [
        1 / 3 + 0.1875,  # τ1: z = 0 → ω = ω₀ = 1
        1 / 3,
        1 / 3 - 0.0625 * w0,  # 0.2937973: the low-NLL step leans on the episode signal
        1 / 3 + 0.1875 * w1,  # 0.5897251: the high-NLL step leans on the step signal
        1 / 3,
        -2 / 3 - 0.3125,
        2.0,
    ]
    np.testing.assert_allclose(adv, expected, rtol=1e-12)
    np.testing.assert_allclose(adv[2:4], [0.2937973, 0.5897251], rtol=1e-6)


def test_weights_are_clipped():
    # κ = 2: ω = 1 ∓ 2·1.2247434 = −1.449 → 0 and 3.449 → ω_max = 1.5
    adv = gaca(GOLDEN, gamma=0.5, mode="mean_norm", kappa=2.0, omega_max=1.5)
    np.testing.assert_allclose(adv[2:4], [1 / 3 + 0.0, 1 / 3 + 1.5 * 0.1875], rtol=1e-12)
    out = compute_advantages(
        "gaca", batch_from_spec(GOLDEN), estimator_config("gaca", {"kappa": 2.0})
    )
    # ω over the 7 steps: [1, 1, 0, 2, 1, 1, 1] → mean 1, population std √(2/7)
    assert out.metrics["credit/omega_mean"] == pytest.approx(1.0)
    assert out.metrics["credit/omega_std"] == pytest.approx(math.sqrt(2 / 7))


def test_zscore_uses_the_population_std():
    b = batch_from_spec([[traj(("a", 0, 1.0), ("b", 1, 3.0))]])
    # mean 2, population std 1 (the unbiased std would be √2)
    np.testing.assert_allclose(
        nll_zscore(b.step_nll, b.step_traj, 1, EPS), [-1 / (1 + EPS), 1 / (1 + EPS)]
    )


# ---------------------------------------------------------------------------------------------
# Reference equals vectorised; κ = 0 is GiGPO.


@PROPERTY
@given(
    spec=specs,
    gamma=gammas,
    mode=st.sampled_from(("mean_norm", "mean_std_norm")),
    kappa=st.sampled_from((0.0, 0.3, 1.0)),
    omega_max=st.sampled_from((1.2, 2.0)),
)
def test_matches_reference(spec, gamma, mode, kappa, omega_max):
    adv = gaca(spec, gamma=gamma, mode=mode, kappa=kappa, omega_max=omega_max)
    expected = ref_gaca(spec, gamma, mode, 1.0, kappa, omega_max)
    np.testing.assert_allclose(adv, expected, rtol=1e-7, atol=1e-7)


@PROPERTY
@given(spec=specs, omega0=st.sampled_from((0.0, 0.5, 1.0)), similarity=st.sampled_from((0, 0.85)))
def test_kappa_zero_is_gigpo(spec, omega0, similarity):
    ours = gaca(spec, kappa=0.0, omega0=omega0, similarity=similarity)
    cfg = estimator_config("gigpo", {"omega": omega0, "similarity": similarity})
    theirs = compute_advantages("gigpo", batch_from_spec(spec), cfg).step
    np.testing.assert_array_equal(ours, theirs)


# ---------------------------------------------------------------------------------------------
# Edge cases.


def test_edge_cases_are_finite():
    spec = [
        [traj(("a", 0.1, None), ("b", 0.1, None)), traj(("a", 0.1, 1.0), ("b", 0.1, 1.0))],
        [traj(("a", 0), ("b", 0), end="truncated"), traj(("a", 0))],  # all failures
        [traj(("x", 1.0, None))],  # singleton group, one step, unknown NLL
        [traj(("c", 0, 0.1), ("c", 0, 4.0), ("c", 1, 0.2)), traj(("c", 0))],  # cycles
    ]
    b = batch_from_spec(spec)
    assert np.isnan(b.step_nll[0])
    out = compute_advantages("gaca", b)
    assert np.all(np.isfinite(out.step))
    assert np.all(out.step[:7] == 0.0)  # all-equal and all-failure groups
    z = nll_zscore(b.step_nll, b.step_traj, b.n_trajs, EPS)
    # unknown NLLs, constant NLLs and one-step trajectories → z = 0
    assert np.all(z[:8] == 0.0) and z[-1] == 0.0
    assert np.all(np.isfinite(list(out.metrics.values())))


# ---------------------------------------------------------------------------------------------
# Config errors name algo.<field>.


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"omega0": -1.0}, "omega0"),
        ({"kappa": -0.1}, "kappa"),
        ({"omega_max": -1.0}, "omega_max"),
        ({"mode": "std"}, "mode"),
        ({"gamma": 2.0}, "gamma"),
        ({"similarity": -0.5}, "similarity"),
        ({"omega": 1.0}, "omega"),
    ],
)
def test_config_errors_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"algo\.{field}"):
        estimator_config("gaca", overrides)
