"""A credit estimator as a plugin: each episode's success against the rest of its group."""

from dataclasses import dataclass

import numpy as np

from agentrl.credit import Advantages, register_estimator


@dataclass(frozen=True)
class WinLOOConfig:
    scale: float = 1.0
    """Multiplies every advantage."""


@register_estimator("win_loo", config=WinLOOConfig)
def win_loo(batch, graph, cfg):
    """A_i = scale · (w_i − mean_{j≠i} w_j), w the win flags of one task group, on every step.

    batch: StepBatch with (N,) step arrays and (M,) trajectory arrays. Returns (N,) advantages.
    A group of one episode has no baseline and gets 0.
    """
    won = batch.traj_won.astype(float)  # (M,)
    size = np.bincount(batch.traj_group, minlength=batch.n_groups)  # (n_groups,)
    total = np.bincount(batch.traj_group, weights=won, minlength=batch.n_groups)
    others = np.maximum(size[batch.traj_group] - 1, 1)  # (M,)
    baseline = (total[batch.traj_group] - won) / others
    traj_adv = np.where(size[batch.traj_group] > 1, won - baseline, 0.0)
    return Advantages(step=cfg.scale * traj_adv[batch.step_traj])
