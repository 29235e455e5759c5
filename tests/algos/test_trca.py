"""TRCA: hand-computed values, a plain-loop reference, the GiGPO fallback, the rubric's path
from ``info["rubric_reward"]`` to ``StepBatch.step_rubric``, config errors."""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from dataclasses import replace

import numpy as np
import pytest
from helpers import make_env
from hypothesis import given
from hypothesis import strategies as st
from test_gigpo import ANCHORS, EPS, PROPERTY, REWARDS, batch_from_spec, gammas, specs

from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config
from agentrl.credit.batch import Step, StepBatch, Trajectory, TrajectoryGroup
from agentrl.credit.contract import permute_groups
from agentrl.rollout.loop import record_step

# ---------------------------------------------------------------------------------------------
# Specs: spec[g] is a list of trajectories {"steps": [(anchor, reward, rubric | None), ...],
# "end": "terminated" | "truncated", "won": bool}.


def rtraj(*steps: tuple, end: str = "terminated", won: bool = False) -> dict:
    return {"steps": [(a, float(r), rho) for a, r, rho in steps], "end": end, "won": won}


def batch_with_rubric(spec) -> StepBatch:
    """The StepBatch of a spec through the real rollout types (``Step.rubric_reward``)."""
    groups = []
    for g, trajs in enumerate(spec):
        group = TrajectoryGroup(task=f"task {g}", seed=g)
        for tr in trajs:
            out = Trajectory(won=tr["won"])
            n = len(tr["steps"])
            for t, (anchor, reward, rubric) in enumerate(tr["steps"]):
                last = t == n - 1
                out.steps.append(
                    Step(
                        prompt_ids=[1],
                        response_ids=[2],
                        logprobs=[-0.5],
                        reward=reward,
                        terminated=last and tr["end"] == "terminated",
                        truncated=last and tr["end"] == "truncated",
                        anchor=anchor,
                        action="go",
                        valid=True,
                        rubric_reward=rubric,
                    )
                )
            group.trajectories.append(out)
        groups.append(group)
    return StepBatch.from_groups(groups)


def trca(spec, **overrides) -> np.ndarray:
    cfg = estimator_config("trca", overrides)
    return compute_advantages("trca", batch_with_rubric(spec), cfg).step


# ---------------------------------------------------------------------------------------------
# Slow reference: plain loops over dicts, from the module docstring's equations.


def ref_trca(spec, gamma: float) -> list[float]:
    out = []
    for trajs in spec:
        outcomes = [sum(s[1] for s in tr["steps"]) for tr in trajs]  # rubric left out
        if len(outcomes) == 1:  # a group of one: mean 0, std 1
            episode = [outcomes[0] / (1 + EPS)]
        else:
            mean, std = statistics.fmean(outcomes), statistics.stdev(outcomes)
            episode = [(o - mean) / (std + EPS) for o in outcomes]
        visits = []  # (trajectory, anchor, completion-aware return)
        for i, tr in enumerate(trajs):
            running, rets = 0.0, []
            for _, r, rho in reversed(tr["steps"]):
                running = r + (rho or 0.0) + gamma * running
                rets.append(running)
            visits.extend((i, s[0], g) for s, g in zip(tr["steps"], reversed(rets)))
        by_context = defaultdict(list)
        for _, anchor, g in visits:
            by_context[anchor].append(g)
        for i, anchor, g in visits:
            members = by_context[anchor]
            if len(members) < 2 or len(set(members)) == 1:
                step = 0.0
            else:
                step = (g - statistics.fmean(members)) / (statistics.stdev(members) + EPS)
            out.append(episode[i] + step)
    return out


# ---------------------------------------------------------------------------------------------
# Golden values (γ = 0.5).

GOLDEN = [
    [
        # Both fail (outcome 0), but the rubric tells them apart.
        # shaped r + ρ = (0.5, 0.25): R = (0.5 + 0.5·0.25, 0.25) = (0.625, 0.25)
        rtraj(("s", 0, 0.5), ("t", 0, 0.25)),
        # shaped (−0.5, 0): R = (−0.5, 0); the second step reports no rubric (ρ = 0)
        rtraj(("s", 0, -0.5), ("u", 0, None)),
    ],
    [
        # outcome 1; shaped (0, 1): R = (0.5, 1)
        rtraj(("s", 0, 0.0), ("v", 1, 0.0), won=True),
        # outcome 0 (its rubric 0.25 is not part of the outcome); R = (0.25)
        rtraj(("s", 0, 0.25), end="truncated"),
    ],
]
# Group 0: A^E = 0 (equal outcomes). Context s: {0.625, −0.5}, mean 0.0625, centred ±0.5625,
#   unbiased std 0.5625·√2 = 0.795495 → A^S = ±0.5625/(0.795495 + ε) ≈ ±0.707106.
#   t, u alone: A^S = 0.
# Group 1: outcomes (1, 0): centred ±0.5, unbiased std √0.5 = 0.707107 → A^E ≈ ±0.707106.
#   Context s (its own, never group 0's): {0.5, 0.25}, centred ±0.125, std 0.176777 → ±0.707106.
#   v alone: 0.


def test_golden_values():
    adv = trca(GOLDEN, gamma=0.5)
    s0 = 0.5625 / (0.5625 * np.sqrt(2) + EPS)
    e1 = 0.5 / (np.sqrt(0.5) + EPS)
    s1 = 0.125 / (0.125 * np.sqrt(2) + EPS)
    expected = [s0, 0.0, -s0, 0.0, e1 + s1, e1, -e1 - s1]
    np.testing.assert_allclose(adv, expected, rtol=1e-12)
    np.testing.assert_allclose(
        adv, [0.70711, 0, -0.70711, 0, 1.41421, 0.70711, -1.41421], atol=1e-5
    )


def test_failed_group_gets_step_credit_only_from_the_rubric():
    # Without the rubric group 0 is all zeros: no success, equal returns.
    plain = [[(a, r, None) for a, r, _ in tr["steps"]] for tr in GOLDEN[0]]
    spec = [[rtraj(*steps) for steps in plain]]
    np.testing.assert_array_equal(trca(spec, gamma=0.5), 0.0)
    assert trca(GOLDEN, gamma=0.5)[0] > 0.7


def test_rubric_is_left_out_of_the_episode_term():
    # Changing only τ4's rubric moves A^S of the s-context but not A^E.
    moved = [GOLDEN[0], [GOLDEN[1][0], rtraj(("s", 0, 0.0), end="truncated")]]
    a, b = trca(GOLDEN, gamma=0.5), trca(moved, gamma=0.5)
    e1 = 0.5 / (np.sqrt(0.5) + EPS)
    # s: {0.5, 0} → ±0.25/(0.353553 + ε); A^E unchanged; v alone
    s1 = 0.25 / (0.25 * np.sqrt(2) + EPS)
    np.testing.assert_allclose(b[4:], [e1 + s1, e1, -e1 - s1], rtol=1e-12)
    np.testing.assert_array_equal(a[:4], b[:4])


def test_metrics():
    out = compute_advantages("trca", batch_with_rubric(GOLDEN), estimator_config("trca"))
    assert out.metrics["credit/rubric_reported"] == 1.0
    # ρ per step: 0.5, 0.25, −0.5, 0 (none), 0, 0, 0.25 → mean 0.5/7
    assert out.metrics["credit/rubric_mean"] == pytest.approx(0.5 / 7)
    assert out.metrics["credit/step_adv_std"] > 0 and out.metrics["credit/episode_adv_std"] > 0
    bare = compute_advantages(
        "trca", batch_from_spec([[{"steps": [("a", 1, 0.5)], "end": "terminated", "won": True}]])
    )
    assert bare.metrics["credit/rubric_reported"] == 0.0
    assert bare.metrics["credit/rubric_mean"] == 0.0


# ---------------------------------------------------------------------------------------------
# Reference equals vectorised; the fallback is GiGPO.

RUBRICS = st.one_of(st.none(), st.sampled_from((0.0, 0.25, -0.25, 1.0, -0.125)))
rubric_step_st = st.tuples(st.sampled_from(ANCHORS[:4]), st.sampled_from(REWARDS), RUBRICS)
rubric_traj_st = st.fixed_dictionaries(
    {
        "steps": st.lists(rubric_step_st, min_size=1, max_size=6),
        "end": st.sampled_from(("terminated", "truncated")),
        "won": st.booleans(),
    }
)
rubric_specs = st.lists(st.lists(rubric_traj_st, min_size=1, max_size=5), min_size=1, max_size=4)


@PROPERTY
@given(spec=rubric_specs, gamma=gammas)
def test_matches_reference(spec, gamma):
    np.testing.assert_allclose(trca(spec, gamma=gamma), ref_trca(spec, gamma), rtol=1e-7, atol=1e-7)


@PROPERTY
@given(spec=specs, gamma=gammas)
def test_without_rubric_is_gigpo(spec, gamma):
    b = batch_from_spec(spec)
    assert b.step_rubric is None  # no step reported one
    ours = compute_advantages("trca", b, estimator_config("trca", {"gamma": gamma})).step
    gigpo = compute_advantages("gigpo", b, estimator_config("gigpo", {"gamma": gamma})).step
    np.testing.assert_array_equal(ours, gigpo)
    # A rubric of zeros is the same as none.
    zeros = replace(b, step_rubric=np.zeros(b.n_steps))
    np.testing.assert_array_equal(
        compute_advantages("trca", zeros, estimator_config("trca", {"gamma": gamma})).step, ours
    )


@PROPERTY
@given(spec=rubric_specs, seed=st.integers(0, 2**16))
def test_group_order_permutes_the_rubric_with_the_steps(spec, seed):
    b = batch_with_rubric(spec)
    perm = np.random.default_rng(seed).permutation(b.n_groups)
    moved, order = permute_groups(b, perm)
    if b.step_rubric is not None:
        np.testing.assert_array_equal(moved.step_rubric, b.step_rubric[order])
    a = compute_advantages("trca", b).step
    np.testing.assert_allclose(
        compute_advantages("trca", moved).step, a[order], rtol=1e-12, atol=1e-12
    )


# ---------------------------------------------------------------------------------------------
# Edge cases.


def test_edge_cases_are_finite_and_zero_where_expected():
    spec = [
        [rtraj(("a", 0.1, 0.1), ("b", 0.1, 0.0)), rtraj(("a", 0.1, 0.1), ("b", 0.1, 0.0))],
        [rtraj(("x", 1.0, 0.5), won=True)],  # group of one: A^E = R/(1 + ε), A^S = 0
        [rtraj(("c", 0, 0.25), ("c", 0, 0.25), ("c", 1, 0.0), won=True), rtraj(("c", 0, None))],
    ]
    adv = trca(spec)
    assert np.all(np.isfinite(adv))
    assert np.all(adv[:4] == 0.0)  # equal outcomes and equal context returns: exactly 0
    assert adv[4] == pytest.approx(1 / (1 + EPS), rel=1e-12)  # the rubric never enters A^E
    assert np.all(np.diff(adv[5:8]) != 0)  # the loop's visits compete in their context
    assert np.all(np.isfinite(trca(spec, epsilon=0.0)))


def test_lost_episodes_take_their_rubric_with_them():
    b = batch_with_rubric(GOLDEN)
    lost = replace(b, traj_lost=np.array([False, False, False, True]))
    kept = lost.without_lost()
    np.testing.assert_array_equal(kept.step_rubric, b.step_rubric[:6])
    adv = compute_advantages("trca", lost).step
    assert adv[6] == 0.0
    np.testing.assert_allclose(adv[:6], compute_advantages("trca", kept).step, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# From info["rubric_reward"] to StepBatch.step_rubric.


def recorded(info: dict) -> Step:
    return record_step(
        ("next", 0.0, False, False, {"action_valid": True, "executed_action": "go", **info}),
        anchor="s",
        observation="obs",
        parsed=True,
        invalid_penalty=0.1,
    )


def test_record_step_reads_the_rubric(caplog):
    assert recorded({"rubric_reward": -0.25}).rubric_reward == -0.25
    assert recorded({"rubric_reward": 2}).rubric_reward == 2.0
    assert recorded({}).rubric_reward is None
    # The rubric never changes the step's own reward.
    assert recorded({"rubric_reward": 1.0}).reward == 0.0
    with caplog.at_level(logging.WARNING, logger="agentrl"):
        for bad in (float("nan"), float("inf"), "high", True, [1.0]):
            assert recorded({"rubric_reward": bad}).rubric_reward is None
    assert caplog.text.count("rubric_reward") == 5


def test_from_groups_fills_missing_rubrics_with_zero():
    b = batch_with_rubric(GOLDEN)
    np.testing.assert_array_equal(b.step_rubric, [0.5, 0.25, -0.5, 0.0, 0.0, 0.0, 0.25])
    none = batch_with_rubric([[rtraj(("a", 1, None))]])
    assert none.step_rubric is None
    sub = b.select_trajs(np.array([False, True, False, True]))
    np.testing.assert_array_equal(sub.step_rubric, [-0.5, 0.0, 0.25])


def test_step_batch_checks_the_rubric():
    b = batch_with_rubric(GOLDEN)
    with pytest.raises(ValueError, match="step_rubric"):
        replace(b, step_rubric=np.zeros(3))
    with pytest.raises(ValueError, match="step_rubric"):
        replace(b, step_rubric=np.full(b.n_steps, np.nan))


def test_bundled_sokoban_reports_no_rubric():
    # The documented fallback: the bundled environments report no rubric reward.
    env = make_env("sokoban")
    env.reset(seed=0)
    *_, info = env.step("up")
    assert "rubric_reward" not in info


# ---------------------------------------------------------------------------------------------
# Config errors name algo.<field>.


def test_defaults():
    cfg = estimator_config("trca")
    assert (cfg.gamma, cfg.epsilon) == (0.95, 1e-6)


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"gamma": 1.5}, "gamma"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"lam": 0.8}, "lam"),
        ({"omega": 1.0}, "omega"),
    ],
)
def test_config_errors_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"algo\.{field}"):
        estimator_config("trca", overrides)
