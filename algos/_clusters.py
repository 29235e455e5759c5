"""Per-cluster statistics kept across iterations, shared by BV-Blend and BASIS (not an estimator).

Both estimators pool rewards by the *cluster* of a task (:func:`agentrl.credit.cluster_key`:
the environment's ``task_type``, else a hash of the task text; ``batch.group_cluster``) and keep
an exponential moving average per cluster in their estimator state. The state is plain data
(:func:`agentrl.credit.check_state`): ``{"updates": int, "clusters": {key: {...floats...,
"last": int}}}``, where ``last`` is the update that last touched the cluster. To keep the state
bounded when task texts never repeat, only the ``max_clusters`` most recently updated clusters
are kept (ties broken by key, so pruning is deterministic). Shapes: M trajectories, C clusters
in the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agentrl.algos._common import group_mean
from agentrl.credit.batch import StepBatch


def traj_clusters(batch: StepBatch) -> tuple[np.ndarray, tuple[str, ...]]:
    """((M,) int64 cluster index of each trajectory in [0, C), the C keys in first-seen order)."""
    group_cluster, keys = batch.group_clusters()
    return group_cluster[batch.traj_group], keys


def cluster_sums(
    values: np.ndarray, traj_cluster: np.ndarray, n_clusters: int
) -> tuple[np.ndarray, np.ndarray]:
    """(count (C,), mean (C,)) of ``values`` (M,) per cluster; the mean is 0 for empty ones.

    A cluster whose values are all equal gets exactly that value as its mean (a sum of eight
    0.1s divided by 8 is 0.09999999999999999, which would give identical rollouts advantages
    of order 1e-17, or 1e-10 once divided by a std + ε); other means are sum / count.
    """
    count = np.bincount(traj_cluster, minlength=n_clusters).astype(np.float64)
    return count, group_mean(values, traj_cluster, n_clusters)


def read_clusters(
    state: Mapping[str, Any] | None, keys: tuple[str, ...], fields: tuple[str, ...]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The stored statistics of the batch's clusters.

    Returns:
        (has (C,) bool — the cluster has history, {field: (C,) float64, 0 where no history}).
    """
    stored = (state or {}).get("clusters", {})
    has = np.array([k in stored for k in keys], dtype=bool)
    out = {f: np.array([float(stored[k][f]) if k in stored else 0.0 for k in keys]) for f in fields}
    return has, out


def write_clusters(
    state: Mapping[str, Any] | None,
    keys: tuple[str, ...],
    values: Mapping[str, np.ndarray],
    max_clusters: int,
) -> dict[str, Any]:
    """A new state: the old clusters with those in ``keys`` replaced by ``values`` (C,) each.

    The input state is not modified. ``updates`` grows by one and is the ``last`` of every
    written cluster; then only the ``max_clusters`` most recently updated clusters are kept.
    """
    updates = int((state or {}).get("updates", 0)) + 1
    clusters = {k: dict(v) for k, v in (state or {}).get("clusters", {}).items()}
    for c, key in enumerate(keys):
        clusters[key] = {f: float(v[c]) for f, v in values.items()} | {"last": updates}
    if len(clusters) > max_clusters:
        order = sorted(clusters, key=lambda k: (-int(clusters[k]["last"]), k))
        clusters = {k: clusters[k] for k in sorted(order[:max_clusters])}
    return {"updates": updates, "clusters": clusters}
