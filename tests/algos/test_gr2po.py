"""GR2PO (docs/methods.md#gr2po): golden values at each time index, GRPO on one-step episodes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_batch

from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config


def gr2po(batch, **over):
    return compute_advantages("gr2po", batch, estimator_config("gr2po", over)).step


def test_equals_grpo_on_one_step_episodes():
    batch = make_batch(
        [
            [[("s", "a", 1.0)], [("s", "b", 0.0)], [("s", "c", 0.5)]],
            [[("t", "a", 0.2)], [("t", "a", 0.2)]],  # all equal: 0
            [[("u", "a", -1.0)], [("u", "b", 2.0)]],
        ]
    )
    np.testing.assert_array_equal(gr2po(batch), compute_advantages("grpo", batch).step)
    dr_grpo = estimator_config("grpo", {"norm_by_std": False})
    np.testing.assert_array_equal(
        gr2po(batch, norm_by_std=False), compute_advantages("grpo", batch, dr_grpo).step
    )


def test_golden_return_to_go_per_time_index():
    # γ = 0.5. Group 0: rollout 0 rewards (0, 1), rollout 1 rewards (0, 0, 1).
    # G: rollout 0 (0.5, 1); rollout 1 (0.25, 0.5, 1). t = 0: {0.5, 0.25}, t = 1: {1, 0.5}
    # → ±(d/2)/(d/√2 + ε) with d the difference; t = 2 has one rollout → 0.
    # Group 1 is separate: its t = 0 pairs only with its own rollouts.
    batch = make_batch(
        [
            [
                [("s", "a", 0.0), ("t", "b", 1.0)],
                [("s", "a", 0.0), ("u", "c", 0.0), ("v", "d", 1.0)],
            ],
            [[("s", "a", 3.0)], [("s", "a", 1.0)]],
        ]
    )
    eps = 1e-6

    def z(d):
        return (d / 2) / (d / math.sqrt(2) + eps)

    expected = [z(0.25), z(0.5), -z(0.25), -z(0.5), 0.0, z(2.0), -z(2.0)]
    np.testing.assert_allclose(gr2po(batch, gamma=0.5), expected, rtol=1e-12)
    # γ = 1 with these rewards: every return-to-go equals the episode return.
    out = gr2po(batch, gamma=1.0)
    np.testing.assert_allclose(out[:5], [0, 0, 0, 0, 0], atol=0)


def test_empty_batch_and_config():
    batch = make_batch([])
    assert gr2po(batch).shape == (0,)
    with pytest.raises(ConfigError, match=r"algo\.gamma"):
        estimator_config("gr2po", {"gamma": 1.5})
