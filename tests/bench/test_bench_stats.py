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
    holm,
    interval_cell,
    pairs_table,
    t_interval,
    t_p,
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
    seed_effect = np.array([0.1, 0.5, 0.2, 0.9, 0.3, 0.6])
    # A is better by 0.05 on every one of 6 seeds (sign test p = 2 * 0.5^6 < 0.05).
    a, b = seed_effect + 0.05, seed_effect
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
    pairs = all_pairs({"x": [1, 2, 3], "y": [1, 2, 3], "z": [0, 1, 2.5]})
    assert [(p.a, p.b) for p in pairs] == [("x", "y"), ("x", "z"), ("y", "z")]
    assert pairs[0].verdict == "not resolved" and pairs[1].verdict == "better"
    rows = pairs_table(pairs, "success")
    assert len(rows) == 2 + 3 and "| x | z | 3 | +0.833 |" in rows[3]
    with pytest.raises(ValueError, match="same seeds"):
        compare_pair("a", "b", [1, 2], [1, 2, 3])


def test_one_seed_resolves_nothing():
    # One value has no spread to estimate: no interval, so no verdict, however large the gap.
    m, lo, hi = t_interval([0.4])
    assert m == 0.4 and lo == -math.inf and hi == math.inf
    assert bootstrap_interval([0.4]) == (0.4, -math.inf, math.inf)  # not [0.4, 0.4]
    pair = compare_pair("a", "b", [0.9], [0.1])
    assert pair.verdict == "not resolved"
    # Reports say so instead of printing a zero-width or infinite interval.
    assert interval_cell([0.4]) == "0.400 [n/a]" and interval_cell([1.0, 2.0, 3.0], ".1f") == (
        f"2.0 [{2 - 4.302653 / np.sqrt(3):.1f}, {2 + 4.302653 / np.sqrt(3):.1f}]"
    )
    assert pairs_table([pair], "x")[2] == "| a | b | 1 | +0.800 | [n/a] | [n/a] | not resolved |"


def test_paired_t_p_value_by_hand():
    # d = [1, 2, 3]: t = 2 / (1 / sqrt 3) = 2 sqrt 3 on 2 degrees of freedom, whose two-sided
    # p has the closed form 1 - t / sqrt(2 + t^2) = 1 - sqrt(12 / 14).
    assert t_p([1.0, 2.0, 3.0]) == pytest.approx(1 - np.sqrt(12 / 14), rel=1e-9)
    assert t_p([0.0, 0.0, 0.0]) == 1.0 and t_p([0.5]) == 1.0
    assert compare_pair("a", "b", [2.0, 3.0, 4.0], [1.0, 1.0, 1.0]).p == pytest.approx(
        1 - np.sqrt(12 / 14)
    )


def test_differences_without_spread_get_the_exact_sign_test():
    # A 3-seed pilot whose differences were all 0.1 reported p = 0 and a resolved pair: with no
    # spread the t statistic is undefined, and n agreeing signs have two-sided p = 2 * 0.5^n.
    assert t_p([0.1, 0.1, 0.1]) == 0.25 and t_p([-0.2, -0.2]) == 0.5
    assert t_p([0.3 - 0.2] * 6) == pytest.approx(2 * 0.5**6)  # rounding is not spread
    three = compare_pair("a", "b", [0.3, 0.4, 0.5], [0.2, 0.3, 0.4])
    assert three.p == 0.25 and three.verdict == "not resolved"
    six = compare_pair("a", "b", [1.0] * 6, [0.5] * 6)
    assert six.p == pytest.approx(0.03125) and six.verdict == "better"
    assert compare_pair("a", "b", [0.0] * 6, [0.5] * 6).verdict == "worse"


def test_holm_adjusts_by_hand_and_keeps_order():
    from dataclasses import replace

    base = compare_pair("a", "b", [1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    pairs = [replace(base, a=str(i), p=p) for i, p in enumerate([0.01, 0.04, 0.03])]
    # Sorted 0.01, 0.03, 0.04 -> 3 x 0.01, 2 x 0.03, max(0.06, 1 x 0.04).
    adjusted = holm(pairs)
    assert [p.a for p in adjusted] == ["0", "1", "2"]
    assert [p.p_holm for p in adjusted] == pytest.approx([0.03, 0.06, 0.06])
    assert holm([replace(base, p=0.9), replace(base, p=0.8)])[0].p_holm == 1.0


def test_family_wise_verdict_drops_a_call_that_holm_does_not_support():
    """One real difference among 28 pairs survives; a pair called at p = 0.03 alone does not."""
    from dataclasses import replace

    strong = replace(compare_pair("a", "b", [1.0, 1.1, 1.2, 1.0, 1.1], [0.0] * 5))
    weak = replace(strong, a="c", p=0.03)
    nulls = [replace(strong, a=f"n{i}", verdict="not resolved", p=0.5) for i in range(26)]
    rows = pairs_table([strong, weak, *nulls], "x", family=True)
    assert rows[0].endswith("| paired-t p | Holm p | verdict, family-wise |")
    assert rows[2].endswith("| better |") and "| better | " in rows[2]
    weak_row = rows[3]
    assert "| better | 0.030 | 0.810 | not resolved |" in weak_row
    # Without family the table is the one the other benchmarks print.
    assert pairs_table([strong], "x")[0].endswith("| verdict (A vs B) |")
