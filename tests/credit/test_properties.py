"""Exact properties of every estimator (agentrl.credit.properties): the termination-bias test of
verl-project/verl issue #7244 with its reference values, MT-GRPO and its fixes, and identical
groups."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import agentrl.algos  # noqa: F401 - registers the bundled estimators
from agentrl.credit import (
    Step,
    StepBatch,
    Trajectory,
    TrajectoryGroup,
    compute_advantages,
    estimator_config,
    get_estimator,
    list_estimators,
)
from agentrl.credit.properties import (
    C_VALUES,
    P_VALUES,
    TOL,
    identical_group_magnitude,
    passes,
    skip_reason,
    takes_separate_outcome,
    termination_gradient,
    termination_grid,
    undiscounted,
)
from agentrl.credit.synthetic import random_mdp, sample_groups

BIASED = {
    "mtgrpo": "biased when the policy chooses when to stop",
    "reinforce_pp": "biased when the policy chooses when to stop",
    "graphgpo": "prefers shorter paths to success by design",
    "tigpo": "prefers shorter paths to success by design",
}
"""Estimators whose advantage is not unbiased in variant A (discount off), with the reason their
docstring gives."""


def doc(name: str) -> str:
    """The module and function docstrings of an estimator, lower case, whitespace collapsed."""
    fn = get_estimator(name).fn
    text = f"{sys.modules[fn.__module__].__doc__ or ''} {fn.__doc__ or ''}"
    return " ".join(text.lower().split())


def mt(**overrides):
    return estimator_config("mtgrpo", {"norm_by_std": False, **overrides})


# --- the reference values of the setting (mean only, the outcome separate) ---


@pytest.mark.parametrize(("c", "expected"), [(-1.0, 0.21875), (0.0, 0.0), (1.0, -0.21875)])
def test_per_index_is_biased_in_variant_a(c, expected):
    got = termination_gradient("mtgrpo", mt(), "A", c, 0.5, outcome="separate")
    assert got == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("baseline", ["return_to_go", "zero_padded"])
@pytest.mark.parametrize("leave_one_out", [False, True])
@pytest.mark.parametrize("outcome", ["separate", "folded"])
def test_the_fixes_are_unbiased_in_variant_a(baseline, leave_one_out, outcome):
    cfg = mt(baseline=baseline, leave_one_out=leave_one_out)
    a = termination_grid("mtgrpo", cfg, "A", outcome)
    assert max(map(abs, a)) < TOL
    assert passes(a, termination_grid("mtgrpo", cfg, "B", outcome))


def test_variant_b_reference_values():
    def b(cfg):
        return termination_gradient("mtgrpo", cfg, "B", 1.0, 0.5, outcome="separate")

    assert b(mt()) == pytest.approx(-0.109375, abs=1e-12)  # the wrong sign
    assert b(mt(baseline="return_to_go")) == pytest.approx(0.109375, abs=1e-12)
    assert b(mt(baseline="zero_padded")) == pytest.approx(0.109375, abs=1e-12)
    # Leave-one-out: exactly the true gradient p(1−p)Δ.
    assert b(mt(baseline="return_to_go", leave_one_out=True)) == pytest.approx(0.125, abs=1e-12)


@pytest.mark.parametrize("c", C_VALUES)
@pytest.mark.parametrize("p", P_VALUES)
def test_per_index_matches_the_closed_form(c, p):
    g, delta = 8, 0.5
    for variant, true_gap in (("A", 0.0), ("B", delta)):
        got = termination_gradient("mtgrpo", mt(), variant, c, p, G=g, outcome="separate")
        assert got == pytest.approx((g - 1) / g * p * (1 - p) * (true_gap - c), abs=1e-12)


def test_only_rubric_readers_take_a_separate_outcome():
    assert takes_separate_outcome("mtgrpo")
    assert not takes_separate_outcome("grpo")
    # An estimator that ignores the rubric gets the folded batch: the same numbers.
    for c in C_VALUES:
        folded = termination_gradient("gigpo", None, "B", c, 0.5, outcome="folded")
        assert termination_gradient("gigpo", None, "B", c, 0.5, outcome="separate") == folded


# --- every estimator ---


# Estimators that cannot run on a bare batch (a rollout driver, a learned critic) are left out of
# the property tests below; which ones, and why, is itself tested.
MEASURABLE = [n for n in list_estimators() if skip_reason(n) is None]


def test_only_driver_and_critic_estimators_are_left_out():
    left_out = {n: skip_reason(n) for n in list_estimators() if skip_reason(n) is not None}
    assert set(left_out) == {"ac2", "psppo", "gae"}
    assert all("driver" in why or "critic" in why for why in left_out.values()), left_out


@pytest.mark.parametrize("name", MEASURABLE)
def test_every_estimator_is_unbiased_in_variant_a_or_says_why(name):
    cfg = estimator_config(name, undiscounted(name))
    worst = max(map(abs, termination_grid(name, cfg, "A")))
    if name in BIASED:
        assert worst > TOL, f"{name} passes now: remove it from BIASED"
        assert BIASED[name] in doc(name), f"{name}'s docstring must say: {BIASED[name]}"
    else:
        assert worst < TOL, f"{name}: |E[ĝ]| = {worst} in variant A"


def test_a_discount_is_not_a_termination_bias():
    # gigpo fails variant A with γ = 0.95 (the later turn counts less), passes with γ = 1.
    assert max(map(abs, termination_grid("gigpo", None, "A"))) > 0.1
    assert undiscounted("gigpo") == {"gamma": 1.0}
    assert undiscounted("grpo") == {} and undiscounted("mtgrpo") == {}


# --- identical groups ---


@pytest.mark.parametrize("name", ["grpo", "rloo", "crbc", "basis", "bv_blend", "mtgrpo"])
def test_identical_groups_get_exactly_zero(name):
    assert identical_group_magnitude(name) == 0.0


@pytest.mark.parametrize("name", MEASURABLE)
def test_nonzero_identical_group_credit_is_documented(name):
    if identical_group_magnitude(name) != 0.0:
        assert re.search(r"identical (successful )?rollouts|identical groups", doc(name)), name


@pytest.mark.parametrize("name", ["gigpo", "gagpo", "gaca"])
def test_zero_identical_groups_option(name):
    assert identical_group_magnitude(name) > 0.1  # the reference behaviour, the default
    cfg = estimator_config(name, {"zero_identical_groups": True})
    assert identical_group_magnitude(name, cfg) == 0.0
    # Groups whose rollouts differ are untouched.
    rng = np.random.default_rng(0)
    batch, _ = sample_groups(random_mdp(rng), rng, n_groups=4, group_size=4)
    plain = compute_advantages(name, batch).step
    assert np.array_equal(compute_advantages(name, batch, cfg).step, plain)


def one_step_at(reward: float) -> Step:
    return Step([], [], [], reward, True, False, "s", "a", True)


def identical_batch(reward: float, distinct_anchors: bool, g: int = 8, t: int = 4) -> StepBatch:
    def step(k):
        anchor = f"s{k if distinct_anchors else k % 2}"
        return Step([], [], [], reward, k == t - 1, False, anchor, "go", True)

    trajs = [Trajectory(steps=[step(k) for k in range(t)]) for _ in range(g)]
    return StepBatch.from_groups([TrajectoryGroup("same", 0, trajs)])


@pytest.mark.parametrize("name", ["basis", "bv_blend", "gagpo"])
@pytest.mark.parametrize("reward", [0.1, -0.1, 0.7])
def test_no_rounding_noise_in_identical_groups(name, reward):
    # Eight 0.1s average to 0.09999999999999999; these used to give 1e-17 .. 1e-10.
    batch = identical_batch(reward, distinct_anchors=True)
    state = None
    for _ in range(3):
        out = compute_advantages(name, batch, state=state)
        assert np.all(out.step == 0.0)
        state = out.state


# --- MT-GRPO against its relatives ---


def test_mtgrpo_without_rubric_relates_to_grpo_and_gr2po():
    rng = np.random.default_rng(1)
    batch, _ = sample_groups(random_mdp(rng), rng, n_groups=5, group_size=4)
    assert batch.step_rubric is None
    f1 = compute_advantages(
        "mtgrpo", batch, estimator_config("mtgrpo", {"baseline": "return_to_go"})
    )
    gr2po = compute_advantages("gr2po", batch, estimator_config("gr2po", {"gamma": 1.0}))
    np.testing.assert_allclose(f1.step, gr2po.step, atol=1e-12)
    # One-step episodes: every baseline is GRPO's z-score (groups of two or more).
    rewards = [[1.0, 0.0, 0.5], [0.2, 0.2], [3.0]]
    groups = [
        TrajectoryGroup(f"task {g}", g, [Trajectory([one_step_at(r)]) for r in rs])
        for g, rs in enumerate(rewards)
    ]
    one_step = StepBatch.from_groups(groups)
    ref = compute_advantages("grpo", one_step).step
    for baseline in ("per_index", "return_to_go", "zero_padded"):
        got = compute_advantages(
            "mtgrpo", one_step, estimator_config("mtgrpo", {"baseline": baseline})
        )
        np.testing.assert_allclose(got.step[:5], ref[:5], atol=1e-12)
        assert got.step[5] == 0.0  # a group of one: nothing to compare (GRPO keeps R)


def test_mtgrpo_leave_one_out_scales_the_centred_value():
    batch = sample_groups(random_mdp(np.random.default_rng(2)), np.random.default_rng(3), 3, 5)[0]
    plain = compute_advantages("mtgrpo", batch, mt(baseline="return_to_go")).step
    loo = compute_advantages("mtgrpo", batch, mt(baseline="return_to_go", leave_one_out=True)).step
    key = batch.step_group * 1000 + batch.step_t
    _, inverse, count = np.unique(key, return_inverse=True, return_counts=True)
    n = count[inverse.reshape(-1)].astype(float)
    np.testing.assert_allclose(
        loo, np.where(n > 1, plain * n / np.maximum(n - 1, 1), 0), atol=1e-12
    )


# --- the benchmark report ---


def test_report_sections_and_check_without_them(tmp_path):
    from agentrl.bench.credit import property_figures, property_sections

    names = ["grpo", "mtgrpo"]
    text = property_sections(names, log=lambda _: None)
    assert "## Termination bias" in text and "## Identical groups" in text
    assert "| grpo | 0 |" in text and "| mtgrpo | 0.434 |" in text
    figures = property_figures(text, Path("credit.md"), names)
    assert figures and all(f.verdict() == "pass" for f in figures)
    # A committed report from before these sections: skipped, never failed.
    old = property_figures("# Credit\n\n## Setup\n\ntext\n", Path("credit.md"), names)
    assert [f.verdict() for f in old] == ["skip", "skip"]
    # A row that turned from pass (committed) to fail (measured) is a regression.
    flipped = text.replace("| 0/9 | fail |", "| 0/9 | pass |")
    verdicts = {f.name: f.verdict() for f in property_figures(flipped, Path("x"), names)}
    assert verdicts["credit: termination bias of mtgrpo"] == "fail"
