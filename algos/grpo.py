"""GRPO episode advantage: each trajectory's return against its group's returns.

A_i = (R_i − mean_j R_j) / (std_j R_j + ε) for the G trajectories of a group (unbiased std, as
``torch.std``), broadcast to every step of trajectory i. ``norm_by_std=False`` drops the
division (Dr.GRPO). A group with one trajectory uses mean 0 and std 1, as verl does, so its
advantage is the uncentred return; avoid G = 1. A group whose returns are all equal gets exactly
0, also with ε = 0 (the division is zero-safe). See docs/methods.md#grpo (GiGPO's Eq. 3).

ε defaults to 1e-6, as in verl and verl-agent; TRL's ``GRPOTrainer`` divides by std + 1e-4.
The advantages then differ by the factor (std + 1e-6)/(std + 1e-4): under 0.03% for 0/1
rewards in a group of 8 (std ≥ 0.35), but large in groups whose returns differ by little (std
near 1e-4 or below), which TRL damps more. TRL parity is one override: ``algo.epsilon=1e-4``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos._common import centred_by_group, divide_or_zero
from agentrl.configuration import check
from agentrl.credit import Advantages, register_estimator
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class GRPOConfig:
    """Options of the GRPO episode advantage."""

    norm_by_std: bool = True
    """Divide by the group's std (GRPO); false gives Dr.GRPO."""
    epsilon: float = 1e-6
    """Added to the std (verl's 1e-6; TRL uses 1e-4, see the module docstring). 0 is allowed:
    all-equal groups still get exactly 0."""

    def __post_init__(self) -> None:
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")


def grpo_traj_advantage(
    traj_return: np.ndarray, traj_group: np.ndarray, n_groups: int, cfg: GRPOConfig
) -> np.ndarray:
    """GRPO advantage per trajectory.

    Args:
        traj_return: (M,) float — return R_i of each trajectory.
        traj_group: (M,) int — group of each trajectory.
    Returns:
        (M,) float64 advantages; exactly 0 in groups of two or more equal returns.
    """
    traj_return = np.asarray(traj_return, dtype=np.float64)
    # centred_by_group makes an all-equal group exactly 0 (no rounding noise to amplify).
    centred, std, count = centred_by_group(traj_return, traj_group, n_groups)
    singleton = count <= 1
    centred = np.where(singleton, traj_return, centred)  # mean 0 for a group of one
    if not cfg.norm_by_std:
        return centred
    std = np.where(singleton, 1.0, std)
    # Zero-safe: with ε = 0 an all-equal group is 0/0, which is 0 here, not NaN.
    return divide_or_zero(centred, std + cfg.epsilon)


@register_estimator("grpo", config=GRPOConfig)
def grpo(batch: StepBatch, graph: object, cfg: GRPOConfig) -> Advantages:
    """GRPO (or Dr.GRPO) episode advantage broadcast to steps: (N,) float64."""
    traj_adv = grpo_traj_advantage(batch.traj_return, batch.traj_group, batch.n_groups, cfg)
    return Advantages(step=traj_adv[batch.step_traj], metrics={})
