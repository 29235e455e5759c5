"""REINFORCE++ and REINFORCE++-baseline: returns whitened over the whole batch, no critic.

``reinforce_pp``: the per-step discounted return-to-go G_{i,t} = Σ_{k=t}^{T_i−1} γ^{k−t} r_{i,k}
(reset at the end of each trajectory; t = 0..T_i−1) is whitened over all N steps of the batch,
A = (G − mean G)/(std G + ε) with the unbiased std (Hu 2025; docs/methods.md#reinforce_pp; verl
``masked_whiten``). ``reinforce_pp_baseline``: each trajectory's undiscounted return R_i first has
its group's mean subtracted (a group of one keeps R_i, as verl does), is broadcast to the steps
of the trajectory, and is then whitened over all steps. Departures from the original: (1) the
original adds a token-level −β·KL_t penalty to the reward; that is not applied here, because the
KL term belongs to the learner (a loss term against the reference policy) and token-level
rewards are out of scope for a step-level estimator; (2) the unit is the environment step, not
the token, so whitening weighs every step once rather than every response token; (3) verl
scales by rsqrt(var + 1e-8), this module divides by std + ε — the two differ only when the
batch std is below about 1e-4, and a constant batch gives exactly 0 here.

``reinforce_pp`` is biased when the policy chooses when to stop: the batch mean of the
returns-to-go, its baseline, counts every step, so a rollout that continues adds its later
returns-to-go to the baseline of its own first step (the stop/continue test of
:mod:`agentrl.credit.properties` with per-turn rewards; ``reinforce_pp_baseline``, whose baseline
is per trajectory, is not). Having no group baseline, it also gives identical rollouts nonzero
advantages whenever their returns-to-go differ from turn to turn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos._common import centred_by_group, divide_or_zero, safe_mean, safe_std
from agentrl.configuration import check
from agentrl.credit import Advantages, discounted_returns, register_estimator
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class ReinforcePPConfig:
    """Options of REINFORCE++."""

    gamma: float = 1.0
    """Discount γ of the per-step return-to-go (1 = undiscounted, as in REINFORCE++)."""
    epsilon: float = 1e-6
    """Added to the batch std to avoid 0/0 when every return is equal."""

    def __post_init__(self) -> None:
        check(0.0 <= self.gamma <= 1.0, "algo.gamma", self.gamma, "in [0, 1]")
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")


@dataclass(frozen=True)
class ReinforcePPBaselineConfig:
    """Options of REINFORCE++-baseline."""

    epsilon: float = 1e-6
    """Added to the batch std to avoid 0/0 when every centred return is equal."""

    def __post_init__(self) -> None:
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")


def batch_whiten(values: np.ndarray, epsilon: float) -> np.ndarray:
    """Global whitening (v − mean v)/(std v + ε) over all elements, unbiased std.

    Args:
        values: (L,) float.
    Returns:
        (L,) float64; exactly 0 when all values are equal or L ≤ 1.
    """
    values = np.asarray(values, dtype=np.float64)
    centred, std, _ = centred_by_group(values, np.zeros(values.shape[0], dtype=np.int64), 1)
    return divide_or_zero(centred, std + epsilon)


def reinforce_pp_baseline_advantage(
    traj_return: np.ndarray,
    traj_group: np.ndarray,
    n_groups: int,
    step_traj: np.ndarray,
    epsilon: float,
) -> np.ndarray:
    """REINFORCE++-baseline advantage per step.

    Args:
        traj_return: (M,) float — undiscounted return R_i of each trajectory.
        traj_group: (M,) int in [0, n_groups) — group of each trajectory.
        step_traj: (N,) int — trajectory of each step.
    Returns:
        (N,) float64: R_i − mean_group R (R_i for a group of one), broadcast to steps, then
        whitened over the N steps.
    """
    traj_return = np.asarray(traj_return, dtype=np.float64)
    centred, _, count = centred_by_group(traj_return, traj_group, n_groups)
    centred = np.where(count > 1, centred, traj_return)
    return batch_whiten(centred[step_traj], epsilon)


@register_estimator("reinforce_pp", config=ReinforcePPConfig, group_based=False)
def reinforce_pp(batch: StepBatch, graph: object, cfg: ReinforcePPConfig) -> Advantages:
    """REINFORCE++ (without the KL reward): (N,) float64 whitened returns-to-go."""
    returns = discounted_returns(batch.step_reward, batch.step_traj, cfg.gamma)
    adv = batch_whiten(returns, cfg.epsilon)
    return Advantages(
        step=adv, metrics={"return_mean": safe_mean(returns), "return_std": safe_std(returns)}
    )


# Groups of one fall back to the raw return, so one rollout per task is a valid setting.
@register_estimator("reinforce_pp_baseline", config=ReinforcePPBaselineConfig, group_based=False)
def reinforce_pp_baseline(
    batch: StepBatch, graph: object, cfg: ReinforcePPBaselineConfig
) -> Advantages:
    """REINFORCE++-baseline: (N,) float64 group-centred returns, batch-whitened over steps."""
    adv = reinforce_pp_baseline_advantage(
        batch.traj_return, batch.traj_group, batch.n_groups, batch.step_traj, cfg.epsilon
    )
    return Advantages(step=adv, metrics={})
