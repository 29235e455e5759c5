"""BASIS: a baseline shared across the prompts of a batch, for one rollout per prompt.

**This is a reconstruction** (docs/methods.md#basis; Gong, Xu, Ye, Quinzan, Livieri,
Shi, arXiv 2605.27293): the abstract says that with one rollout per prompt the value V(x) is
estimated by *sharing information across the prompts of the batch*, with offline estimation plus
online calibration; one reconstruction is shrinkage or regression of R on prompt features or on a
prior difficulty estimate, A = R − V̂(x). The equations and defaults below are our design.

Task features without a model: the task's *cluster* (``batch.group_cluster``,
:func:`agentrl.credit.cluster_key`: the environment's ``task_type``, else a hash of the task
text), used as a categorical feature, and a prior difficulty estimate per cluster, the EMA of
its mean return over earlier iterations (the estimator state; the "offline" estimate). For the
M trajectories of the batch (unit: one rollout; with G > 1 the rollouts of a prompt are simply
more samples of its cluster), cluster c with n_c rollouts of mean return r̄_c, batch mean r̄:

1. Within-cluster variance σ²_w = Σ_i (R_i − r̄_{c(i)})²/(M − C), C clusters in the batch (the
   unbiased variance of all returns when every cluster has one rollout, 0 for M = 1).
2. Prior p_c with online calibration: for a cluster with history h_c,
   p_c = h_c + δ with δ = mean_{i: c(i) has history}(R_i − h_{c(i)}), the drift of this batch
   from the history (the policy has changed since), so history contributes the clusters'
   *relative* difficulty and the batch its level; without history p_c = r̄.
3. Between-cluster variance of the cluster means about their priors, by moments:
   τ² = max(0, mean_c (r̄_c − p_c)² − mean_c σ²_w/n_c).
4. Empirical-Bayes shrinkage: V̂_c = p_c + B_c·(r̄_c − p_c), B_c = n_c·τ²/(n_c·τ² + σ²_w)
   (0 when τ² = 0).
5. A_i = R_i − V̂_{c(i)}, broadcast to the steps of trajectory i; optionally (``whiten``)
   whitened over the batch like REINFORCE++.
6. EMA update after the advantages: h_c ← (1−η)·h_c + η·r̄_c, a new cluster starts at r̄_c.

With one rollout per prompt and identical features (one cluster) the result is batch-mean
baselining, A = R − r̄ (with or without history: δ moves the prior onto r̄). The baseline
includes R_i itself (no leave-one-out), as batch-mean baselines do. State (plain data):
``{"updates": int, "clusters": {key: {"mean": float, "last": int}}}``, at most ``max_clusters``
clusters. Defaults (ours): η = 0.1, no whitening. Designed for ``rollout.group_size=1``
(``group_based=False``: no warning there); text features beyond the cluster are not used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl.algos._clusters import cluster_sums, read_clusters, traj_clusters, write_clusters
from agentrl.algos._common import divide_or_zero
from agentrl.configuration import check
from agentrl.credit import Advantages, register_estimator
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class BASISConfig:
    """Options of BASIS (a reconstruction; every default is our choice, see the module)."""

    eta: float = 0.1
    """η: EMA rate of the per-cluster mean return (the prior difficulty estimate)."""
    whiten: bool = False
    """Whiten the advantages over the batch ((A − mean)/(std + ε)), as REINFORCE++ does."""
    epsilon: float = 1e-6
    """Added to the std when whitening."""
    max_clusters: int = 4096
    """Most clusters kept in the state (the most recently updated ones)."""

    def __post_init__(self) -> None:
        check(0 < self.eta <= 1, "algo.eta", self.eta, "in (0, 1]")
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")
        check(self.max_clusters >= 1, "algo.max_clusters", self.max_clusters, ">= 1")


def shared_baseline(
    ret: np.ndarray,
    traj_cluster: np.ndarray,
    n_clusters: int,
    has: np.ndarray,
    hist_mean: np.ndarray,
) -> tuple[np.ndarray, dict[str, float]]:
    """V̂ of steps 1-4 of the module docstring.

    Args:
        ret: (M,) returns; traj_cluster: (M,) cluster in [0, C); has, hist_mean: (C,) whether
            each cluster has history and its EMA mean return.
    Returns:
        ((C,) float64 V̂ per cluster, diagnostics ``tau2``, ``sigma2_w``, ``shrink_mean``,
        ``calibration``).
    """
    m = ret.shape[0]
    n_c, r_c = cluster_sums(ret, traj_cluster, n_clusters)
    present = n_c > 0
    # All-equal returns: exactly that value (the plain mean can be one ulp off).
    r_bar = (float(ret[0]) if np.all(ret == ret[0]) else float(ret.mean())) if m else 0.0
    c_seen = int(present.sum())
    ssw = float(np.sum((ret - r_c[traj_cluster]) ** 2))
    # When every cluster has one rollout, all variation counts as noise.
    var_w = ssw / (m - c_seen) if m > c_seen else (float(ret.var(ddof=1)) if m > 1 else 0.0)
    hist_i = has[traj_cluster]
    delta = float(np.mean(ret[hist_i] - hist_mean[traj_cluster][hist_i])) if hist_i.any() else 0.0
    prior = np.where(has, hist_mean + delta, r_bar)  # (C,)
    resid = (r_c - prior)[present]
    noise = var_w / n_c[present]
    tau2 = max(0.0, float(np.mean(resid**2) - np.mean(noise))) if c_seen else 0.0
    shrink = divide_or_zero(n_c * tau2, n_c * tau2 + var_w)  # (C,), 0 when τ² = 0
    value = prior + shrink * (r_c - prior)
    diag = {
        "tau2": tau2,
        "sigma2_w": var_w,
        "shrink_mean": float(shrink[present].mean()) if c_seen else 0.0,
        "calibration": delta,
    }
    return value, diag


@register_estimator("basis", config=BASISConfig, stateful=True, group_based=False)
def basis(
    batch: StepBatch, graph: object, cfg: BASISConfig, *, state: dict[str, Any] | None
) -> Advantages:
    """BASIS advantage per step: (N,) float64, and the updated cluster means (see the module)."""
    ret = batch.traj_return  # (M,)
    traj_cluster, keys = traj_clusters(batch)
    has, hist = read_clusters(state, keys, ("mean",))
    value, diag = shared_baseline(ret, traj_cluster, len(keys), has, hist["mean"])
    adv = ret - value[traj_cluster]
    if cfg.whiten and adv.size:
        adv = divide_or_zero(adv - adv.mean(), np.full_like(adv, adv.std() + cfg.epsilon))
    n_c, r_c = cluster_sums(ret, traj_cluster, len(keys))
    seen = n_c > 0
    new_mean = np.where(has, (1 - cfg.eta) * hist["mean"] + cfg.eta * r_c, r_c)
    seen_keys = tuple(k for k, ok in zip(keys, seen) if ok)
    new_state = write_clusters(state, seen_keys, {"mean": new_mean[seen]}, cfg.max_clusters)
    metrics = {
        **diag,
        "history_frac": float(has[traj_cluster].mean()) if ret.size else 0.0,
        "clusters": float(len(new_state["clusters"])),
    }
    return Advantages(step=adv[batch.step_traj], metrics=metrics, state=new_state)
