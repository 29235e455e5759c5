"""GRPO / Dr.GRPO episode advantages against values computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_batch

from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config, get_estimator

SPEC = [
    # group 0: returns 1, 0, 0, 1 (mean 0.5, unbiased std sqrt(1/3))
    [[("s", "a", 0.0), ("t", "b", 1.0)], [("s", "c", 0.0)], [("s", "a", 0.0)], [("s", "b", 1.0)]],
    # group 1: a single trajectory with return 2
    [[("u", "a", 2.0)]],
    # group 2: all-equal returns 3, 3
    [[("v", "a", 3.0)], [("v", "a", 1.0), ("w", "a", 2.0)]],
]


def test_grpo_golden_values():
    batch = make_batch(SPEC)
    adv = compute_advantages("grpo", batch).step
    a = 0.5 / (np.sqrt(1 / 3) + 1e-6)  # 0.8660239: eps is added to the std
    expected = [a, a, -a, -a, a, 2.0 / (1 + 1e-6), 0.0, 0.0, 0.0]
    np.testing.assert_allclose(adv, expected, rtol=1e-6, atol=1e-9)


def test_dr_grpo_drops_the_std():
    batch = make_batch(SPEC)
    cfg = estimator_config("grpo", {"norm_by_std": False})
    adv = compute_advantages("grpo", batch, cfg).step
    np.testing.assert_allclose(adv, [0.5, 0.5, -0.5, -0.5, 0.5, 2.0, 0.0, 0.0, 0.0])


def test_metrics_and_shapes():
    batch = make_batch(SPEC)
    out = compute_advantages("grpo", batch)
    assert out.step.shape == (batch.n_steps,)
    # anchors: s is shared by 4 steps of group 0, v by 2 steps of group 2 -> 6 of 9 steps
    assert out.metrics["credit/nonsingleton_frac"] == pytest.approx(6 / 9)
    assert out.metrics["credit/solve_time_s"] >= 0
    assert np.isfinite(out.metrics["credit/adv_std"])


def test_unknown_estimator_and_bad_option_are_explained():
    with pytest.raises(
        ConfigError, match=r"registered estimators are \[.*'grpo'.*Did you mean 'grpo'"
    ):
        get_estimator("grpp")
    with pytest.raises(ConfigError, match=r"algo\.norm_by_sd .*Did you mean 'norm_by_std'"):
        estimator_config("grpo", {"norm_by_sd": True})
    with pytest.raises(ConfigError, match=r"algo\.epsilon"):
        estimator_config("grpo", {"epsilon": -1.0})


# Group 0: all-equal returns 1, 1 (mean and std exact: 0/0 with ε = 0); group 1: returns 0.1
# three times (mean 0.10000000000000002: rounding noise over a noise std); group 2: 1, 0.
EQUAL = [
    [[("s", "a", 1.0)], [("s", "a", 0.5), ("t", "b", 0.5)]],
    [[("u", "a", 0.1)], [("u", "b", 0.1)], [("u", "c", 0.1)]],
    [[("v", "a", 1.0)], [("v", "b", 0.0)]],
]


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_epsilon_zero_gives_zero_for_all_equal_groups(norm_by_std):
    batch = make_batch(EQUAL)
    cfg = estimator_config("grpo", {"epsilon": 0.0, "norm_by_std": norm_by_std})
    adv = compute_advantages("grpo", batch, cfg).step  # raised FloatingPointError before
    np.testing.assert_array_equal(adv[:6], 0.0)
    # 1 and 0: centred ±0.5, unbiased std √0.5 → ±1/√2 (no ε)
    a = 0.5 / np.sqrt(0.5) if norm_by_std else 0.5
    np.testing.assert_allclose(adv[6:], [a, -a], rtol=1e-15)
