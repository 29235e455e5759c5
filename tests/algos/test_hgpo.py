"""HGPO: the paper fixture and hand-computed values, a plain-loop reference, edge cases, config."""

from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np
import pytest
from helpers import make_batch
from hypothesis import given
from hypothesis import strategies as st
from test_gigpo import (
    EPS,
    PROPERTY,
    REWARDS,
    batch_from_spec,
    gammas,
    ref_gigpo_parts,
    ref_returns,
    specs,
    traj,
)

from agentrl.algos.gigpo import step_advantage
from agentrl.algos.hgpo import context_windows, hgpo_advantage
from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, discounted_returns, estimator_config


def hgpo(spec, **overrides) -> np.ndarray:
    cfg = estimator_config("hgpo", overrides)
    return compute_advantages("hgpo", batch_from_spec(spec), cfg).step


# ---------------------------------------------------------------------------------------------
# Slow reference: plain loops over dicts and tuples of anchors, from the equations of the
# module docstring (docs/methods.md#hgpo), without the vectorised code.


def ref_hgpo(
    spec,
    gamma: float,
    history_length: int,
    alpha: float,
    mode: str,
    base_group: bool = False,
    episode_stats: str = "step",
) -> list[float]:
    base = [e for e, _ in ref_gigpo_parts(spec, gamma, mode, episode_stats=episode_stats)]
    out, n = [], 0
    for trajs in spec:
        returns = [ref_returns(tr["steps"], gamma) for tr in trajs]
        # (k, window of anchors) -> [(trajectory, turn)], over the whole task group
        clusters = defaultdict(list)
        for i, tr in enumerate(trajs):
            anchors = [s[0] for s in tr["steps"]]
            for t in range(len(anchors)):
                for k in range(1, min(history_length + 1, t + 1) + 1):
                    clusters[(k, tuple(anchors[t - k + 1 : t + 1]))].append((i, t))
        items = defaultdict(list)  # (trajectory, turn) -> [(k, a_k)]
        for (k, _), members in clusters.items():
            if len(members) < 2:
                continue
            values = [returns[i][t] for i, t in members]
            mean, pstd = statistics.fmean(values), statistics.pstdev(values)
            for (i, t), g in zip(members, values):
                a = g - mean if mode == "mean_norm" else (g - mean) / (pstd + EPS)
                items[(i, t)].append((k, a))
        for i, tr in enumerate(trajs):
            for t in range(len(tr["steps"])):
                step_items = list(items[(i, t)])
                if base_group:
                    step_items.append((0, base[n]))
                kept = [(k, a) for k, a in step_items if a != 0.0]
                total = sum((k + 1) ** alpha for k, _ in kept)
                out.append(sum((k + 1) ** alpha * a for k, a in kept) / (total + EPS))
                n += 1
    return out


# ---------------------------------------------------------------------------------------------
# A worked example (one task group, K = 1, ε = 1e-6, mean_std_norm): τ1 A→B→C→success,
# τ2 A→D→D(invalid)→F failure, τ3 A→B→success; reward 10 on success. It takes the returns of
# the authors' code, which subtracts the 0.1 penalty from the invalid row's own return only:
# τ1 (9.025, 9.5, 10), τ2 (0, −0.1, 0), τ3 (9.5, 10).
FIXTURE_RETURNS = np.array([9.025, 9.5, 10.0, 0.0, -0.1, 0.0, 9.5, 10.0])
FIXTURE_ANCHORS = np.array([0, 1, 2, 0, 3, 3, 0, 1])  # A B C | A D D | A B
FIXTURE_TRAJ = np.array([0, 0, 0, 1, 1, 1, 2, 2])
# The expected advantages to four decimals (derived by hand below).
FIXTURE_HGPO = [0.6521, -1.0, 0.0, -1.4128, -1.0, 1.0, 0.7607, 1.0]


def test_worked_example():
    adv, items = hgpo_advantage(
        FIXTURE_RETURNS, FIXTURE_ANCHORS, FIXTURE_TRAJ, 1, 1.0, "mean_std_norm", EPS
    )
    np.testing.assert_allclose(adv, FIXTURE_HGPO, atol=5e-5)
    # By hand. Level 1, A: {9.025, 0, 9.5}, mean 6.175, centred (2.85, −6.175, 3.325),
    # population var 57.30875/3. Only level 1 exists at t = 0: A = (2·a_1)/(2 + ε).
    pstd_a = np.sqrt(57.30875 / 3)  # 4.3707
    for row, centred in ((0, 2.85), (3, -6.175), (6, 3.325)):
        assert adv[row] == pytest.approx(2 * centred / (pstd_a + EPS) / (2 + EPS), rel=1e-12)
    # B rows: level 1 {9.5, 10} and level 2 window (A, B) {9.5, 10}: both ±0.25/(0.25 + ε),
    # weights 2 and 3, so A = ±(5·0.25/(0.25 + ε))/(5 + ε).
    b = 5 * 0.25 / (0.25 + EPS) / (5 + EPS)
    assert adv[1] == pytest.approx(-b, rel=1e-12) and adv[7] == pytest.approx(b, rel=1e-12)
    # C is unique: no item at all. D rows: level 1 {−0.1, 0} → ∓1; their windows (A, D) and
    # (D, D) differ, so level 2 is a pair of singletons (dropped).
    assert adv[2] == 0.0 and items[2] == 0
    d = 2 * 0.05 / (0.05 + EPS) / (2 + EPS)
    assert adv[4] == pytest.approx(-d, rel=1e-12) and adv[5] == pytest.approx(d, rel=1e-12)
    assert items.tolist() == [1, 2, 0, 1, 1, 1, 1, 2]


def test_fixture_through_the_estimator():
    # agentrl folds the invalid penalty into the step reward, so it is discounted into the
    # earlier return of τ2: (0.95·(−0.1), −0.1, 0) = (−0.095, −0.1, 0). Only the A rows move.
    batch = make_batch(
        [
            [
                [("A", "go b", 0), ("B", "go c", 0), ("C", "finish", 10)],
                [("A", "go d", 0), ("D", None, -0.1), ("D", "go f", 0)],
                [("A", "go b", 0), ("B", "finish", 10)],
            ]
        ]
    )
    cfg = estimator_config("hgpo", {"history_length": 1})
    adv = compute_advantages("hgpo", batch, cfg).step
    # A: {9.025, −0.095, 9.5}, mean 18.43/3 = 6.14333…; population var = Σ centred²/3.
    values = np.array([9.025, -0.095, 9.5])
    centred = values - values.mean()  # (2.88167, −6.23833, 3.35667)
    pstd = np.sqrt(np.mean(centred**2))  # 4.41543
    expected_a = 2 * centred / (pstd + EPS) / (2 + EPS)  # (0.65263, −1.41284, 0.76021)
    np.testing.assert_allclose(adv[[0, 3, 6]], expected_a, rtol=1e-12)
    np.testing.assert_allclose(adv[[0, 3, 6]], [0.65263, -1.41284, 0.76021], atol=1e-5)
    np.testing.assert_allclose(adv[[1, 2, 4, 5, 7]], [-1.0, 0.0, -1.0, 1.0, 1.0], atol=5e-5)


# ---------------------------------------------------------------------------------------------
# Hand-computed values where the deeper levels disagree with level 1 (γ = 0.5, K = 2).

GOLDEN = [
    [
        traj(("x", 0), ("a", 0), ("b", 1), won=True),  # G = (0.25, 0.5, 1)
        traj(("y", 0), ("a", 0), ("b", 0)),  # G = (0, 0, 0)
        traj(("x", 0), ("a", 1), won=True),  # G = (0.5, 1)
    ]
]
# Level 1: x {0.25, 0.5}; a {0.5, 0, 1} (mean 0.5); b {1, 0}; y alone.
# Level 2: (x, a) {0.5 (τ1), 1 (τ3)}; (y, a) alone; (a, b) {1 (τ1), 0 (τ2)}.
# Level 3: (x, a, b) and (y, a, b) alone. Weights (k+1)^α: 2, 3, 4.
# mean_norm items (k, a_k), zeros dropped:
#   τ1t0: (1, −0.125)            → −0.125·2/(2+ε)
#   τ1t1: (1, 0) dropped, (2, −0.25) → −0.25·3/(3+ε)
#   τ1t2: (1, 0.5), (2, 0.5)     → (2·0.5 + 3·0.5)/(5+ε) = 2.5/(5+ε)
#   τ2t0: none                   → 0
#   τ2t1: (1, −0.5)              → −0.5·2/(2+ε)
#   τ2t2: (1, −0.5), (2, −0.5)   → −2.5/(5+ε)
#   τ3t0: (1, 0.125)             → 0.125·2/(2+ε)
#   τ3t1: (1, 0.5), (2, 0.25)    → (1 + 0.75)/(5+ε) = 1.75/(5+ε)
GOLDEN_MEAN_NORM = [
    -0.25 / (2 + EPS),
    -0.75 / (3 + EPS),
    2.5 / (5 + EPS),
    0.0,
    -1.0 / (2 + EPS),
    -2.5 / (5 + EPS),
    0.25 / (2 + EPS),
    1.75 / (5 + EPS),
]


def test_golden_mean_norm():
    adv = hgpo(GOLDEN, gamma=0.5, mode="mean_norm")
    np.testing.assert_allclose(adv, GOLDEN_MEAN_NORM, rtol=1e-12, atol=1e-15)
    # τ1t1 sits at the mean of its level-1 group: that level is ignored, not averaged in as 0.
    assert adv[1] == pytest.approx(-0.25, rel=1e-6)


def test_golden_mean_std_norm():
    adv = hgpo(GOLDEN, gamma=0.5)  # default mode: mean_std_norm, population std
    # x: pstd 0.125; a: pstd √(1/6) = 0.408248; b, (a, b): pstd 0.5; (x, a): pstd 0.25.
    one = lambda c, s: c / (s + EPS)  # noqa: E731
    sa = np.sqrt(1 / 6)
    expected = [
        2 * one(-0.125, 0.125) / (2 + EPS),
        3 * one(-0.25, 0.25) / (3 + EPS),
        (2 * one(0.5, 0.5) + 3 * one(0.5, 0.5)) / (5 + EPS),
        0.0,
        2 * one(-0.5, sa) / (2 + EPS),
        (2 * one(-0.5, 0.5) + 3 * one(-0.5, 0.5)) / (5 + EPS),
        2 * one(0.125, 0.125) / (2 + EPS),
        (2 * one(0.5, sa) + 3 * one(0.25, 0.25)) / (5 + EPS),
    ]
    np.testing.assert_allclose(adv, expected, rtol=1e-12, atol=1e-15)
    # τ3t1: (2·1.224745 + 3·1)/5 = 1.089898
    assert adv[7] == pytest.approx(1.089898, rel=1e-5)


@pytest.mark.parametrize(("alpha", "expected"), [(0.0, 0.75 / 2), (2.0, 4.25 / 13)])
def test_alpha_weights(alpha, expected):
    # τ3t1 (mean_norm): items (1, 0.5), (2, 0.25); weights 2^α and 3^α:
    # α = 0: (0.5 + 0.25)/2 = 0.375; α = 2: (4·0.5 + 9·0.25)/13 = 4.25/13 = 0.326923
    adv = hgpo(GOLDEN, gamma=0.5, mode="mean_norm", alpha=alpha)
    total = 2.0 if alpha == 0 else 13.0
    assert adv[7] == pytest.approx(expected * total / (total + EPS), rel=1e-12)


def test_history_length_limits_the_levels():
    # K = 1: the level-3 windows are not formed, and they were all singletons anyway.
    np.testing.assert_array_equal(
        hgpo(GOLDEN, gamma=0.5, mode="mean_norm", history_length=1),
        hgpo(GOLDEN, gamma=0.5, mode="mean_norm", history_length=2),
    )
    # K = 0: level 1 only; τ1t1 is exactly at its group's mean, so it keeps no item.
    adv = hgpo(GOLDEN, gamma=0.5, mode="mean_norm", history_length=0)
    w = 2 / (2 + EPS)
    np.testing.assert_allclose(
        adv, np.array([-0.125, 0, 0.5, 0, -0.5, -0.5, 0.125, 0.5]) * w, rtol=1e-12
    )


def test_base_group_adds_the_episode_item():
    # Episode return per row (episode_stats="step"): τ1 1 ×3, τ2 0 ×3, τ3 1 ×2; mean 5/8,
    # mean_norm A^E = 3/8 (τ1, τ3), −5/8 (τ2); weight 1.
    adv = hgpo(GOLDEN, gamma=0.5, mode="mean_norm", base_group=True)
    # τ2t0 had no item: now A^E alone. τ1t1: (1·0.375 + 3·(−0.25))/(4 + ε).
    assert adv[3] == pytest.approx(-0.625 / (1 + EPS), rel=1e-12)
    assert adv[1] == pytest.approx(-0.375 / (4 + EPS), rel=1e-12)
    # τ1t0: (1·0.375 + 2·(−0.125))/(3 + ε)
    assert adv[0] == pytest.approx(0.125 / (3 + EPS), rel=1e-12)
    # One value per trajectory instead: R = 1, 0, 1, mean 2/3 → τ2's A^E = −2/3.
    traj_stats = hgpo(
        GOLDEN, gamma=0.5, mode="mean_norm", base_group=True, episode_stats="trajectory"
    )
    assert traj_stats[3] == pytest.approx(-2 / 3 / (1 + EPS), rel=1e-12)


def test_metrics():
    out = compute_advantages(
        "hgpo", batch_from_spec(GOLDEN), estimator_config("hgpo", {"gamma": 0.5})
    )
    # items per step: 1, 1, 2, 0, 1, 2, 1, 2 (see GOLDEN)
    assert out.metrics["credit/items_mean"] == pytest.approx(10 / 8)
    assert out.metrics["credit/no_item_frac"] == pytest.approx(1 / 8)


# ---------------------------------------------------------------------------------------------
# Reference equals vectorised.

FEW_ANCHORS = st.sampled_from(("a", "b", "c"))  # few anchors: deep windows collide often
few_step_st = st.tuples(FEW_ANCHORS, st.sampled_from(REWARDS), st.just(0.5))  # (anchor, r, nll)
few_traj_st = st.fixed_dictionaries(
    {
        "steps": st.lists(few_step_st, min_size=1, max_size=7),
        "end": st.sampled_from(("terminated", "truncated")),
        "won": st.booleans(),
    }
)
few_specs = st.lists(st.lists(few_traj_st, min_size=1, max_size=5), min_size=1, max_size=3)


@PROPERTY
@given(
    spec=st.one_of(specs, few_specs),
    gamma=gammas,
    history_length=st.sampled_from((0, 1, 2, 4)),
    alpha=st.sampled_from((0.0, 1.0, 2.0)),
    mode=st.sampled_from(("mean_norm", "mean_std_norm")),
)
def test_matches_reference(spec, gamma, history_length, alpha, mode):
    adv = hgpo(spec, gamma=gamma, history_length=history_length, alpha=alpha, mode=mode)
    expected = ref_hgpo(spec, gamma, history_length, alpha, mode)
    np.testing.assert_allclose(adv, expected, rtol=1e-7, atol=1e-7)


@PROPERTY
@given(
    spec=few_specs,
    gamma=gammas,
    mode=st.sampled_from(("mean_norm", "mean_std_norm")),
    episode_stats=st.sampled_from(("step", "trajectory")),
)
def test_base_group_matches_reference(spec, gamma, mode, episode_stats):
    adv = hgpo(spec, gamma=gamma, mode=mode, base_group=True, episode_stats=episode_stats)
    expected = ref_hgpo(spec, gamma, 2, 1.0, mode, True, episode_stats)
    np.testing.assert_allclose(adv, expected, rtol=1e-7, atol=1e-7)


@PROPERTY
@given(spec=few_specs, depth=st.integers(1, 5))
def test_context_windows_match_tuples(spec, depth):
    b = batch_from_spec(spec)
    anchors = [s[0] for g in spec for tr in g for s in tr["steps"]]
    groups = [g for g, trs in enumerate(spec) for tr in trs for _ in tr["steps"]]
    turns = [t for trs in spec for tr in trs for t in range(len(tr["steps"]))]
    for k, (rows, ids) in enumerate(context_windows(b.step_anchor, b.step_traj, depth), 1):
        assert rows.tolist() == [n for n, t in enumerate(turns) if t >= k - 1]
        keys = [(groups[n], tuple(anchors[n - k + 1 : n + 1])) for n in rows.tolist()]
        # Same id exactly when same task group and same window.
        for p in range(len(rows)):
            for q in range(len(rows)):
                assert (ids[p] == ids[q]) == (keys[p] == keys[q])


@PROPERTY
@given(spec=specs, gamma=gammas)
def test_history_zero_is_gigpo_step_term_in_mean_norm(spec, gamma):
    # K = 0, mean_norm: one level, the anchor group; its item is GiGPO's centred A^S, and the
    # aggregate is 2·A^S/(2 + ε) (zero items stay 0 either way).
    b = batch_from_spec(spec)
    g = discounted_returns(b.step_reward, b.step_traj, gamma)
    a_s = step_advantage(g, b.step_anchor, int(b.step_anchor.max()) + 1, "mean_norm", EPS)
    adv = hgpo(spec, gamma=gamma, history_length=0, mode="mean_norm")
    np.testing.assert_allclose(adv, 2 * a_s / (2 + EPS), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Edge cases.


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_edge_cases_are_finite_and_zero_where_expected(mode):
    spec = [
        [traj(("a", 0.1), ("b", 0.1)), traj(("a", 0.1), ("b", 0.1))],  # all-equal rewards
        [traj(("a", 0), ("b", 0), end="truncated"), traj(("a", 0))],  # all failures
        [traj(("x", 1.0), won=True)],  # singleton group, one step: no episode fallback
        [traj(("p", 10), won=True), traj(("q", 0))],  # unique anchors, success and failure
        [traj(("c", 0), ("c", 0), ("c", 1)), traj(("c", 0))],  # a loop on one anchor
    ]
    adv = hgpo(spec, mode=mode)
    assert np.all(np.isfinite(adv))
    # all-equal, all-failure, singleton and unique-anchor steps get exactly 0
    assert np.all(adv[:10] == 0.0)
    # The loop: returns (0.9025, 0.95, 1 | 0). Level 1 (c) holds all four visits (mean
    # 0.713125); level 2 (c, c) only the second and third, which compete with each other: the
    # second visit is above the level-1 mean but below the third at level 2, so it ends lowest
    # of the three. mean_norm: first 2·0.189375/2 = 0.189375, second (2·0.236875 − 3·0.025)/5
    # = 0.07975, third (2·0.286875 + 3·0.025)/5 = 0.12975 (all up to the factor from ε).
    first, second, third, other = adv[10:14]
    assert second < min(first, third) and other < 0
    if mode == "mean_norm":
        np.testing.assert_allclose([first, second, third], [0.189375, 0.07975, 0.12975], rtol=1e-5)
    # ε = 0 is allowed: the zero-safe divisions keep everything finite
    assert np.all(np.isfinite(hgpo(spec, mode=mode, epsilon=0.0)))


def test_windows_match_across_turn_indices_and_never_across_groups():
    # (a, b) is at turn 2 in τ1 and turn 1 in τ2: one level-2 group. γ = 1.
    spec = [[traj(("p", 0), ("a", 0), ("b", 1)), traj(("a", 0), ("b", 0))]]
    adv = hgpo(spec, gamma=1.0, mode="mean_norm", history_length=1)
    # b: level 1 {1, 0} → ±0.5; level 2 (a, b) {1, 0} → ±0.5: (2 + 3)·0.5/(5 + ε)
    assert adv[2] == pytest.approx(2.5 / (5 + EPS), rel=1e-12)
    assert adv[4] == pytest.approx(-2.5 / (5 + EPS), rel=1e-12)
    # The same trajectories as two task groups share nothing: every group is a singleton.
    split = [[spec[0][0]], [spec[0][1]]]
    assert np.all(hgpo(split, gamma=1.0, history_length=1) == 0.0)


def test_defaults():
    cfg = estimator_config("hgpo")
    assert (cfg.gamma, cfg.history_length, cfg.alpha, cfg.mode, cfg.epsilon) == (
        0.95,
        2,
        1.0,
        "mean_std_norm",
        1e-6,
    )
    assert cfg.base_group is False and cfg.episode_stats == "step"
    # The rollout's memory window has the same default, as the docstring asks.
    from agentrl.rollout.loop import RolloutConfig

    assert RolloutConfig().history_length == cfg.history_length


# ---------------------------------------------------------------------------------------------
# Config errors name algo.<field>.


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"gamma": 1.5}, "gamma"),
        ({"history_length": -1}, "history_length"),
        ({"history_length": 1.5}, "history_length"),
        ({"alpha": float("nan")}, "alpha"),
        ({"mode": "mean"}, "mode"),
        ({"epsilon": -1e-6}, "epsilon"),
        ({"episode_stats": "rows"}, "episode_stats"),
        ({"length_weight_alpha": 1.0}, "length_weight_alpha"),
    ],
)
def test_config_errors_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"algo\.{field}"):
        estimator_config("hgpo", overrides)
