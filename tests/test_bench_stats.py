"""The statistics of the learning benchmark, on values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentrl.bench.stats import (
    all_pairs,
    auc,
    bootstrap_interval,
    compare_pair,
    pairs_table,
    t_interval,
    verdict,
)


def test_auc_is_the_mean_height_of_the_curve():
    # trapezoids: (0+1)/2*1 + (1+1)/2*2 = 0.5 + 2 = 2.5 over a range of 3
    assert auc([0, 1, 3], [0, 1, 1]) == pytest.approx(2.5 / 3)
    assert auc([10, 20], [0.3, 0.3]) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        auc([0, 0, 1], [1, 1, 1])


def test_t_interval_by_hand():
    # x = 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.302653, half = 4.302653 / sqrt(3)
    m, lo, hi = t_interval([1.0, 2.0, 3.0])
    assert m == 2.0 and hi - m == pytest.approx(4.302653 / np.sqrt(3), rel=1e-6)
    assert lo == pytest.approx(4 - hi)


def test_bootstrap_of_a_constant_is_that_constant():
    assert bootstrap_interval([0.2] * 5) == pytest.approx((0.2, 0.2, 0.2))


def test_bootstrap_interval_contains_the_mean_and_narrows_with_more_seeds():
    rng = np.random.default_rng(0)
    x5, x50 = rng.normal(size=5), rng.normal(size=50)
    m, lo, hi = bootstrap_interval(x5)
    assert lo < m < hi
    _, lo50, hi50 = bootstrap_interval(x50)
    assert hi50 - lo50 < hi - lo


def test_verdicts():
    assert verdict(0.01, 0.2) == "better"
    assert verdict(-0.3, -0.01) == "worse"
    assert verdict(-0.1, 0.1) == "not resolved"


def test_pairing_removes_the_shared_seed_effect():
    seed_effect = np.array([0.1, 0.5, 0.2, 0.9, 0.3])
    a, b = seed_effect + 0.05, seed_effect  # A is better by 0.05 on every seed
    p = compare_pair("a", "b", a, b)
    assert p.verdict == "better" and p.mean_diff == pytest.approx(0.05)
    # Unpaired, the same numbers could not be told apart.
    assert t_interval(a)[1] < t_interval(b)[2]
    assert compare_pair("b", "a", b, a).verdict == "worse"


def test_verdict_needs_both_intervals():
    # One bad seed of five: the percentile bootstrap excludes 0, the paired t-interval does not.
    d = np.array([0.1, 0.1, 0.1, 0.1, -0.05])
    p = compare_pair("a", "b", d, np.zeros(5))
    assert p.boot[0] > 0 and p.t[0] < 0
    assert p.verdict == "not resolved"
    assert compare_pair("a", "b", d + 0.1, np.zeros(5)).verdict == "better"


def test_all_pairs_and_table():
    pairs = all_pairs({"x": [1, 2, 3], "y": [1, 2, 3], "z": [0, 1, 2]})
    assert [(p.a, p.b) for p in pairs] == [("x", "y"), ("x", "z"), ("y", "z")]
    assert pairs[0].verdict == "not resolved" and pairs[1].verdict == "better"
    rows = pairs_table(pairs, "success")
    assert len(rows) == 2 + 3 and "| x | z | 3 | +1.000 |" in rows[3]
    with pytest.raises(ValueError, match="same seeds"):
        compare_pair("a", "b", [1, 2], [1, 2, 3])


def test_one_seed_resolves_nothing():
    # One value has no spread to estimate: no interval, so no verdict, however large the gap.
    m, lo, hi = t_interval([0.4])
    assert m == 0.4 and lo == -math.inf and hi == math.inf
    assert compare_pair("a", "b", [0.9], [0.1]).verdict == "not resolved"
