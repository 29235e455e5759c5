"""Per-iteration diagnostics of a batch and its advantages: headroom and partial-credit conflict.

Two views of whether a batch can teach the policy anything, cheap enough to compute every
iteration (numpy over trajectories, O(M)); the trainer logs them for every run:

- **Reachable headroom** (:func:`headroom_metrics`, under ``diag/``): the value-gradient
  decomposition of pass-rate RL splits the attainable improvement into the gradient signal and
  the reward still reachable from the policy's own samples. A group of G rollouts of one task
  can move the policy only towards successes it contains, so the reachable headroom is
  pass@G − mean success: the fraction of groups with at least one success minus the mean
  success. Groups with no success (nothing to imitate) and groups that always succeed (nothing
  left to gain) have none.
- **Partial-credit conflict** (:func:`partial_credit_conflict`, under ``credit/``): with dense
  pass-rate rewards a partial answer can score above its group's mean and get a positive
  advantage while a full-credit answer of the same task exists, so the update pulls towards
  both; binary rewards (full marks only) cannot do that. Computed from each trajectory's
  ``score`` (the env's ``info["score"]``: the proof env's points) and ``won``, without knowing
  the environment: a trajectory is *full credit* when it won, *partial* when
  0 < score and it did not win.

Lost episodes (:attr:`~agentrl.credit.batch.StepBatch.traj_lost`) are left out of both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentrl.credit.batch import StepBatch, TrajectoryGroup


def headroom_metrics(
    traj_won: np.ndarray, traj_group: np.ndarray, keep: np.ndarray | None = None
) -> dict[str, float]:
    """Reachable headroom of a batch of groups.

    Args:
        traj_won: (M,) bool — success of each trajectory.
        traj_group: (M,) int >= 0 — group of each trajectory.
        keep: (M,) bool — trajectories to count (default: all).
    Returns:
        ``diag/pass_at_g`` (fraction of groups with a success), ``diag/success`` (mean success
        over trajectories), ``diag/headroom`` = pass_at_g − success, ``diag/headroom_group_mean``
        = mean over groups of (any success − the group's success rate) (equal to headroom when
        the groups are equally large) and ``diag/mixed_groups`` (fraction of groups with both a
        success and a failure: the groups a group baseline learns from). Empty dict when no
        trajectory is kept.
    """
    won = np.asarray(traj_won, dtype=bool)
    group = np.asarray(traj_group, dtype=np.int64)
    if keep is not None:
        won, group = won[np.asarray(keep, dtype=bool)], group[np.asarray(keep, dtype=bool)]
    if won.size == 0:
        return {}
    size = np.bincount(group).astype(np.float64)
    present = size > 0
    wins = np.bincount(group, weights=won.astype(np.float64), minlength=size.size)
    size, wins = size[present], wins[present]  # (n_groups,)
    any_win = wins > 0
    rate = wins / size
    pass_at_g = float(any_win.mean())
    success = float(won.mean())
    return {
        "diag/pass_at_g": pass_at_g,
        "diag/success": success,
        "diag/headroom": pass_at_g - success,
        "diag/headroom_group_mean": float(np.mean(any_win - rate)),
        "diag/mixed_groups": float(np.mean(any_win & (wins < size))),
    }


def partial_credit_conflict(
    traj_score: np.ndarray,
    traj_won: np.ndarray,
    traj_group: np.ndarray,
    traj_adv: np.ndarray,
    keep: np.ndarray | None = None,
) -> dict[str, float]:
    """How often partial-credit answers are pushed up in a group that has a full-credit answer.

    Args:
        traj_score: (M,) float — the env's score of each trajectory, NaN when it has none.
        traj_won: (M,) bool — full credit.
        traj_group: (M,) int >= 0 — group of each trajectory.
        traj_adv: (M,) float — the trajectory's advantage (mean over its steps).
        keep: (M,) bool — trajectories to count (default: all).
    Returns:
        ``credit/partial_credit_conflict``: among the groups holding both a full-credit and a
        partial-credit answer, the fraction in which some partial answer has a positive
        advantage (0 when there is no such group); ``credit/partial_credit_groups``: the
        number of those groups. Empty dict when no kept trajectory has a score.
    """
    score = np.asarray(traj_score, dtype=np.float64)
    won = np.asarray(traj_won, dtype=bool)
    group = np.asarray(traj_group, dtype=np.int64)
    adv = np.asarray(traj_adv, dtype=np.float64)
    if keep is not None:
        k = np.asarray(keep, dtype=bool)
        score, won, group, adv = score[k], won[k], group[k], adv[k]
    if not np.isfinite(score).any():
        return {}
    partial = np.isfinite(score) & (score > 0) & ~won
    n = int(group.max()) + 1 if group.size else 0
    has_full = np.bincount(group, weights=won.astype(np.float64), minlength=n) > 0
    has_partial = np.bincount(group, weights=partial.astype(np.float64), minlength=n) > 0
    pushed = np.bincount(group, weights=(partial & (adv > 0)).astype(np.float64), minlength=n)
    eligible = has_full & has_partial
    count = int(eligible.sum())
    return {
        "credit/partial_credit_conflict": float((pushed[eligible] > 0).mean()) if count else 0.0,
        "credit/partial_credit_groups": float(count),
    }


def batch_diagnostics(
    batch: StepBatch, groups: Sequence[TrajectoryGroup], step_adv: np.ndarray
) -> dict[str, float]:
    """:func:`headroom_metrics` and :func:`partial_credit_conflict` of a batch.

    Args:
        batch: the batch built from ``groups`` (same trajectories, same order).
        groups: its groups (for each trajectory's ``score``).
        step_adv: (N,) the advantages of ``batch``'s steps.
    """
    keep = ~batch.traj_lost
    out = headroom_metrics(batch.traj_won, batch.traj_group, keep)
    score = np.array(
        [np.nan if t.score is None else t.score for g in groups for t in g.trajectories],
        dtype=np.float64,
    )
    if score.shape != (batch.n_trajs,) or batch.n_steps == 0:
        return out
    length = np.maximum(batch.traj_len, 1)
    traj_adv = np.bincount(batch.step_traj, weights=step_adv, minlength=batch.n_trajs) / length
    out.update(partial_credit_conflict(score, batch.traj_won, batch.traj_group, traj_adv, keep))
    return out
