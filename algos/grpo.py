"""GRPO episode advantage: each trajectory's return against its group's returns.

A_i = (R_i − mean_j R_j) / (std_j R_j + ε) for the G trajectories of a group (unbiased std, as
``torch.std``), broadcast to every step of trajectory i. ``norm_by_std=False`` drops the
division (Dr.GRPO). A group with one trajectory uses mean 0 and std 1, as verl does, so its
advantage is the uncentred return; avoid G = 1. See ALGOS.md §1 (Eq. 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.configuration import check
from agentrl.credit import Advantages, group_mean_std, register_estimator
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class GRPOConfig:
    """Options of the GRPO episode advantage."""

    norm_by_std: bool = True
    """Divide by the group's std (GRPO); false gives Dr.GRPO."""
    epsilon: float = 1e-6
    """Added to the std to avoid 0/0 in all-equal groups."""

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
        (M,) float64 advantages.
    """
    mean, std, count = group_mean_std(traj_return, traj_group, n_groups)
    singleton = count <= 1
    mean = np.where(singleton, 0.0, mean)
    centred = traj_return - mean
    if not cfg.norm_by_std:
        return centred
    std = np.where(singleton, 1.0, std)
    return centred / (std + cfg.epsilon)


@register_estimator("grpo", config=GRPOConfig)
def grpo(batch: StepBatch, graph: object, cfg: GRPOConfig) -> Advantages:
    """GRPO (or Dr.GRPO) episode advantage broadcast to steps: (N,) float64."""
    traj_adv = grpo_traj_advantage(batch.traj_return, batch.traj_group, batch.n_groups, cfg)
    return Advantages(step=traj_adv[batch.step_traj], metrics={})
