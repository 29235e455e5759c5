"""Vectorised group statistics shared by the estimators in this package (not an estimator).

Every estimator here centres some per-element value (a trajectory return, a step return, a
token NLL) on the mean of its group and optionally divides by the group's spread. Doing that
with plain ``x − mean`` leaves rounding noise in groups whose values are all equal (e.g. three
returns of 0.1 have mean 0.10000000000000002), and dividing by ``std + ε`` with ε = 1e-6 then
turns that noise into advantages of order 1e-11 instead of the exact 0 the formulas promise.
:func:`centred_by_group` therefore first subtracts one member's value from each group, so a
constant group is exactly zero before any mean is taken. Shapes: L elements in ``n_groups``
groups; all functions are pure and O(L).
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import group_mean_std
from agentrl.credit.batch import StepBatch


def centred_by_group(
    values: np.ndarray, groups: np.ndarray, n_groups: int, ddof: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values minus their group mean, the group std and the group size, per element.

    Args:
        values: (L,) float — one value per element.
        groups: (L,) int in [0, n_groups) — group of each element.
        n_groups: number of groups (groups without elements are allowed).
        ddof: 1 for the unbiased std (``torch.std``), 0 for the population std.
    Returns:
        (centred, std, count), each (L,) float64. ``centred`` is exactly 0 in groups whose
        values are all equal, in particular in groups of one; ``std`` is 0 there.
    """
    values = np.asarray(values, dtype=np.float64)
    # Any member's value works as the shift: whichever write wins for a group, a constant
    # group becomes exactly zero, and a non-constant one just has its origin moved.
    ref = np.zeros(n_groups, dtype=np.float64)
    ref[groups] = values
    shifted = values - ref[groups]
    mean, std, count = group_mean_std(shifted, groups, n_groups)
    if ddof == 0:
        # group_mean_std divides by count − 1; rescale to divide by count.
        std = std * np.sqrt(np.maximum(count - 1.0, 0.0) / np.maximum(count, 1.0))
    elif ddof != 1:
        raise ValueError(f"ddof must be 0 or 1, got {ddof}")
    return shifted - mean, std, count


def divide_or_zero(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``numerator / denominator`` elementwise, 0 where the denominator is 0 (ε = 0 configs).

    Args:
        numerator, denominator: (L,) float.
    Returns:
        (L,) float64.
    """
    out = np.zeros(np.shape(numerator), dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator != 0)
    return out


def safe_std(values: np.ndarray) -> float:
    """Population std of ``values`` as a float; 0 for an empty array (a metric helper)."""
    return float(np.std(values)) if np.size(values) else 0.0


def safe_mean(values: np.ndarray) -> float:
    """Mean of ``values`` as a float; 0 for an empty array (a metric helper)."""
    return float(np.mean(values)) if np.size(values) else 0.0


def group_mean(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """The mean of ``values`` per group: exactly the common value in groups whose values are
    all equal (a plain sum / count can be one ulp off: eight 0.1s sum to 0.7999999999999999,
    whose eighth is 0.09999999999999999), sum / count in the others, 0 in empty groups.

    Args:
        values: (L,) float; groups: (L,) int in [0, n_groups).
    Returns:
        (n_groups,) float64.
    """
    values = np.asarray(values, dtype=np.float64)
    count = np.bincount(groups, minlength=n_groups).astype(np.float64)
    mean = np.bincount(groups, weights=values, minlength=n_groups) / np.maximum(count, 1.0)
    lo, hi = np.full(n_groups, np.inf), np.full(n_groups, -np.inf)
    np.minimum.at(lo, groups, values)
    np.maximum.at(hi, groups, values)
    return np.where((count > 0) & (lo == hi), lo, mean)


def identical_groups(batch: StepBatch) -> np.ndarray:
    """(M,) bool — whether each trajectory is in a task group of two or more rollouts that are
    all the same: the same length and, at every step, the same anchor, action and reward as the
    group's first rollout. Nothing tells such rollouts apart, so a group-relative credit has
    nothing to compare."""
    m, n = batch.n_trajs, batch.n_steps
    if m == 0:
        return np.zeros(0, dtype=bool)
    length = batch.traj_len
    start = np.concatenate(([0], np.cumsum(length)[:-1]))
    first = np.full(batch.n_groups, m, dtype=np.int64)
    np.minimum.at(first, batch.traj_group, np.arange(m))
    ref = first[batch.traj_group]  # (M,) the first rollout of each trajectory's group
    same_len = length == length[ref]
    t = np.arange(n) - start[batch.step_traj]
    # The same step of the reference rollout (a valid index whenever the lengths agree).
    other = np.where(same_len[batch.step_traj], start[ref[batch.step_traj]] + t, np.arange(n))
    equal = (
        same_len[batch.step_traj]
        & (batch.step_anchor == batch.step_anchor[other])
        & (batch.step_action == batch.step_action[other])
        & (batch.step_reward == batch.step_reward[other])
    )
    traj_same = same_len & (np.bincount(batch.step_traj, weights=~equal, minlength=m) == 0)
    group_same = np.ones(batch.n_groups, dtype=bool)
    np.logical_and.at(group_same, batch.traj_group, traj_same)
    size = np.bincount(batch.traj_group, minlength=batch.n_groups)
    return (group_same & (size >= 2))[batch.traj_group]
