"""A NaN or infinite reward is rejected where the batch is built, with a message that names the
environment, the seed and the step (instead of failing deep inside an estimator)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from helpers import ScriptedBackend, make_batch

import agentrl
from agentrl.credit import compute_advantages
from agentrl.credit.batch import StepBatch
from agentrl.model import build_tokenizer
from agentrl.rollout import RolloutConfig, Sampling, collect


class BadRewardAt(gym.Wrapper):
    """Reports ``value`` as the reward of step ``at`` (0-based) of each episode."""

    def __init__(self, env, at: int, value: float):
        super().__init__(env)
        self.at, self.value, self.t = at, value, 0

    def reset(self, **kwargs):
        self.t = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        if self.t == self.at:
            reward = self.value
        self.t += 1
        return obs, reward, term, trunc, info


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_reward_names_env_seed_and_step(value):
    # Group of two on seed 7; env 1 reports the bad reward at its second step.
    envs = [agentrl.make("guess", max_steps=3) for _ in range(2)]
    envs[1] = BadRewardAt(envs[1], at=1, value=value)
    tok = build_tokenizer(["Guess a number from 1 to 3.", "Invalid guess."] * 5, 300)
    cfg = RolloutConfig(n_tasks=1, group_size=2)
    groups = collect(envs, [7], ScriptedBackend(["x"] * 6), tok, cfg, Sampling(max_new_tokens=2))
    with pytest.raises(ValueError) as exc:
        StepBatch.from_groups(groups)
    msg = str(exc.value)
    assert f"non-finite reward {value!r}" in msg
    assert "environment 'guess'" in msg
    assert "seed 7" in msg and "step 1" in msg and "trajectory 1 of group 0" in msg


def test_a_batch_with_a_non_finite_reward_cannot_be_built_by_hand():
    good = make_batch([[[("s", "a", 1.0)], [("s", "b", 0.0)]]])
    fields = {**vars(good), "step_reward": np.array([1.0, np.nan])}
    with pytest.raises(ValueError, match=r"step_reward is not finite at steps \[1\]"):
        StepBatch(**fields)
    compute_advantages("grpo", good)  # finite rewards go through
