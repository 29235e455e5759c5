"""RLOO episode advantage: each trajectory's return against the mean of the others in its group.

A_i = R_i − (1/(n−1)) Σ_{j≠i} R_j = n/(n−1)·(R_i − mean_j R_j) for the n trajectories of a
group (Ahmadian et al. 2024; docs/methods.md#rloo), where R_i = Σ_t r_{i,t} is the undiscounted
return over all steps t = 0..T_i−1 of trajectory i. The advantage is broadcast to every step of the
trajectory. A group of one has no other member to compare with, so A = R_i (uncentred), as in
the spec; avoid n = 1. No departures: RLOO has no options, so it uses the default ``NoConfig``.
"""

from __future__ import annotations

import numpy as np

from agentrl.algos._common import centred_by_group
from agentrl.credit import Advantages, register_estimator
from agentrl.credit.batch import StepBatch


def rloo_traj_advantage(
    traj_return: np.ndarray, traj_group: np.ndarray, n_groups: int
) -> np.ndarray:
    """Leave-one-out advantage per trajectory.

    Args:
        traj_return: (M,) float — return R_i of each trajectory.
        traj_group: (M,) int in [0, n_groups) — group of each trajectory.
    Returns:
        (M,) float64 advantages; exactly 0 in groups of n ≥ 2 equal returns.
    """
    traj_return = np.asarray(traj_return, dtype=np.float64)
    centred, _, count = centred_by_group(traj_return, traj_group, n_groups)
    # n/(n−1)·(R − mean) is the leave-one-out form without an O(n²) sum.
    scale = count / np.maximum(count - 1.0, 1.0)
    return np.where(count > 1, scale * centred, traj_return)


@register_estimator("rloo")
def rloo(batch: StepBatch, graph: object, cfg: object) -> Advantages:
    """RLOO episode advantage broadcast to steps: (N,) float64."""
    traj_adv = rloo_traj_advantage(batch.traj_return, batch.traj_group, batch.n_groups)
    return Advantages(step=traj_adv[batch.step_traj], metrics={})
