"""BV-Blend: a prompt baseline blended from the group and the history of its task cluster.

**This is a reconstruction** (docs/methods.md#bv_blend; Chang, Wu, Chang, arXiv
2606.28707): the abstract says that per *semantic cluster* of prompts EMA reward moments are
kept, a confidence weight is derived from a standard-error-of-the-mean (SEM) proxy, and the
historical and prompt-local baselines and variances are blended, which fixes the zero advantage
of all-equal groups. The formulas below are a reconstruction (docs/methods.md#bv_blend) plus two
additions of ours (marked *ours*); every default is our choice.

Clusters are ``batch.group_cluster`` (:func:`agentrl.credit.cluster_key`: the environment's
``task_type`` where it reports one, else a hash of the task text). For trajectory i of group g
in cluster c, with the G rollouts' returns R of the group (M trajectories in the batch):

1. Local moments: μ_loc = mean_g R, σ²_loc = unbiased variance of the group.
2. History of c (the estimator state, from earlier iterations): μ_c = m1_c and
   σ²_c = max(m2_c − m1_c², 0)/(1 − v_c) from EMA first and second moments of the cluster's
   returns, where v_c = Σ_s w_s² over the EMA's normalised per-return weights is the variance
   factor of the EMA mean (SEM_hist² = σ²_c·v_c; n_c^eff = 1/v_c; dividing by 1 − v_c is
   Bessel's correction for weighted samples).
3. *Ours*: each variance that enters the SEMs is shrunk towards the other with κ = ``var_prior``
   pseudo-observations, σ̃²_loc = ((G−1)·σ²_loc + κ·σ²_c)/(G−1+κ) and
   σ̃²_c = (n_c^eff·σ²_c + κ·σ²_loc)/(n_c^eff + κ). As written (κ = 0) an all-equal group has
   SEM_loc = 0, so λ = 0 and its advantage stays 0, contradicting the abstract's claim.
4. SEM_loc² = σ̃²_loc/G, SEM_hist² = σ̃²_c·v_c, λ = SEM_loc²/(SEM_loc² + SEM_hist²) (when both
   are 0, the equal-variance value (1/G)/(1/G + v_c)); λ = 0 for a cluster without history.
5. b = λ·μ_c + (1−λ)·μ_loc; s² = λ·σ²_c + (1−λ)·σ²_loc, plus (*ours*, ``mixture_var``)
   λ(1−λ)(μ_c − μ_loc)², which makes s² the variance of the λ-mixture of the two reward
   distributions, so that s = 0 only where R = b and the advantage stays bounded. Without it
   (*ours*) s is floored at λ·|μ_c − μ_loc|, the size of the history's own shift of the
   baseline: as written, a group whose returns are all equal after a history of equal returns
   has s = 0 and a non-zero numerator λ(μ_loc − μ_c), so A = λ/ε (500,000 after four failures
   then four successes); with the floor the shift alone is at most one unit, as with the
   mixture variance (which gives √(λ/(1−λ)) there).
6. A_i = (R_i − b)/(s + ε), broadcast to the steps of trajectory i (zero-safe division).
7. EMA update, after the advantages, per cluster c in the batch with k_c kept trajectories of
   mean return r̄_c and mean squared return q̄_c: m1 ← (1−η)·m1 + η·r̄_c,
   m2 ← (1−η)·m2 + η·q̄_c, v ← (1−η)²·v + η²/k_c; a new cluster starts at m1 = r̄_c,
   m2 = q̄_c, v = 1/k_c.

With no history (the first iteration, or a new cluster) λ = 0 and A is GRPO's z-score
(unbiased std, the same ε); groups of one get 0 there (GRPO keeps R_i for them). Once a cluster
has history, an all-equal group gets a non-zero advantage whenever its return differs from the
cluster's. State (plain data, kept by the trainer and checkpointed):
``{"updates": int, "clusters": {key: {"m1", "m2", "v": float, "last": int}}}``, at most
``max_clusters`` clusters (the most recently updated). Defaults (ours): η = 0.1, κ = 1,
ε = 1e-6.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl.algos._clusters import cluster_sums, read_clusters, traj_clusters, write_clusters
from agentrl.algos._common import centred_by_group, divide_or_zero
from agentrl.configuration import check
from agentrl.credit import Advantages, register_estimator
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class BVBlendConfig:
    """Options of BV-Blend (a reconstruction; every default is our choice, see the module)."""

    eta: float = 0.1
    """η: EMA rate of the per-cluster reward moments."""
    var_prior: float = 1.0
    """κ: pseudo-observations shrinking each SEM's variance towards the other's (0 = as in the
    base reconstruction, docs/methods.md#bv_blend, which leaves all-equal groups at 0)."""
    mixture_var: bool = True
    """Add λ(1−λ)(μ_c − μ_loc)² to the blended variance (the mixture's variance); false floors
    the blended std at λ·|μ_c − μ_loc| instead (see the module, step 5)."""
    epsilon: float = 1e-6
    """Added to the blended std (GRPO's ε); 0 is allowed (the division is zero-safe)."""
    max_clusters: int = 4096
    """Most clusters kept in the state (the most recently updated ones)."""

    def __post_init__(self) -> None:
        check(0 < self.eta <= 1, "algo.eta", self.eta, "in (0, 1]")
        check(self.var_prior >= 0, "algo.var_prior", self.var_prior, ">= 0")
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")
        check(self.max_clusters >= 1, "algo.max_clusters", self.max_clusters, ">= 1")


def _ratio(num: np.ndarray, den: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """num/den elementwise, ``fallback`` where den is 0."""
    out = np.array(fallback, dtype=np.float64)
    np.divide(num, den, out=out, where=den > 0)
    return out


def blend_weights(
    var_loc: np.ndarray,
    count: np.ndarray,
    var_hist: np.ndarray,
    v_hist: np.ndarray,
    has: np.ndarray,
    var_prior: float,
) -> np.ndarray:
    """λ of steps 3-4 of the module docstring, elementwise.

    Args:
        var_loc: σ²_loc; count: G; var_hist: σ²_c; v_hist: v_c (> 0 where ``has``); has:
            whether the cluster has history. All (L,).
    Returns:
        (L,) float64 λ in [0, 1]; 0 where ``has`` is false.
    """
    k = var_prior
    n_eff = _ratio(np.ones_like(v_hist), v_hist, np.zeros_like(v_hist))
    var_loc_s = _ratio((count - 1.0) * var_loc + k * var_hist, count - 1.0 + k, var_loc)
    var_hist_s = _ratio(n_eff * var_hist + k * var_loc, n_eff + k, var_hist)
    sem_loc = var_loc_s / np.maximum(count, 1.0)
    sem_hist = var_hist_s * v_hist
    inv_g = 1.0 / np.maximum(count, 1.0)
    equal_var = _ratio(inv_g, inv_g + v_hist, np.zeros_like(v_hist))
    lam = _ratio(sem_loc, sem_loc + sem_hist, equal_var)
    return np.where(has, lam, 0.0)


def cluster_variance(m1: np.ndarray, m2: np.ndarray, v: np.ndarray) -> np.ndarray:
    """σ²_c = max(m2 − m1², 0)/(1 − v), 0 where v ≥ 1 (one return seen).

    v = Σ_s w_s² over the normalised EMA weights of the returns seen, so dividing by 1 − v is
    Bessel's correction for weighted samples: after one batch (v = 1/k) σ²_c is the batch's
    unbiased variance, like σ²_loc. All (C,).
    """
    pop = np.maximum(m2 - m1**2, 0.0)
    out = np.zeros_like(pop)
    np.divide(pop, 1.0 - v, out=out, where=v < 1.0)
    return out


def _ema(old: np.ndarray, new: np.ndarray, eta: float) -> np.ndarray:
    """(1 − η)·old + η·new, exactly ``old`` where ``new`` equals it (the formula can move an
    unchanged moment by one ulp, which an identical group then sees as a gap to its history
    and turns into an advantage of order 1e-10). All (C,)."""
    return np.where(new == old, old, (1 - eta) * old + eta * new)


@register_estimator("bv_blend", config=BVBlendConfig, stateful=True)
def bv_blend(
    batch: StepBatch, graph: object, cfg: BVBlendConfig, *, state: dict[str, Any] | None
) -> Advantages:
    """BV-Blend advantage per step: (N,) float64, and the updated cluster moments (see the
    module)."""
    ret = batch.traj_return  # (M,)
    traj_cluster, keys = traj_clusters(batch)
    has_c, hist = read_clusters(state, keys, ("m1", "m2", "v"))
    # Step 1: local moments per trajectory (centred exactly, as GRPO does).
    centred, std, count = centred_by_group(ret, batch.traj_group, batch.n_groups)
    mean_loc = ret - centred
    var_loc = std**2
    # Step 2: the history of each trajectory's cluster.
    has = has_c[traj_cluster]
    mu_c = hist["m1"][traj_cluster]
    var_c = cluster_variance(hist["m1"], hist["m2"], hist["v"])[traj_cluster]
    v_c = hist["v"][traj_cluster]
    # Steps 3-6.
    lam = blend_weights(var_loc, count, var_c, v_c, has, cfg.var_prior)
    gap = np.where(has, mu_c - mean_loc, 0.0)
    var = lam * var_c + (1.0 - lam) * var_loc
    if cfg.mixture_var:
        var = var + lam * (1.0 - lam) * gap**2
    else:  # a floor: the history's shift of the baseline alone never exceeds one unit
        var = np.maximum(var, (lam * gap) ** 2)
    s = np.where(lam > 0, np.sqrt(var), std)  # λ = 0: exactly GRPO's std
    traj_adv = divide_or_zero(centred - lam * gap, s + cfg.epsilon)
    # Step 7: EMA update of the batch's clusters.
    n_c, r_c = cluster_sums(ret, traj_cluster, len(keys))
    _, q_c = cluster_sums(ret**2, traj_cluster, len(keys))
    eta, seen = cfg.eta, n_c > 0  # a group without trajectories updates nothing
    k = np.maximum(n_c, 1.0)
    new = {
        "m1": np.where(has_c, _ema(hist["m1"], r_c, eta), r_c)[seen],
        "m2": np.where(has_c, _ema(hist["m2"], q_c, eta), q_c)[seen],
        "v": np.where(has_c, (1 - eta) ** 2 * hist["v"] + eta**2 / k, 1.0 / k)[seen],
    }
    seen_keys = tuple(key for key, ok in zip(keys, seen) if ok)
    new_state = write_clusters(state, seen_keys, new, cfg.max_clusters)
    # Per-group diagnostics (one entry per group: its first trajectory).
    first = np.zeros(batch.n_groups, dtype=np.int64)
    first[batch.traj_group[::-1]] = np.arange(batch.n_trajs)[::-1]
    metrics = {
        "lambda_mean": float(lam[first].mean()) if batch.n_groups else 0.0,
        "history_frac": float(has[first].mean()) if batch.n_groups else 0.0,
        "clusters": float(len(new_state["clusters"])),
    }
    return Advantages(step=traj_adv[batch.step_traj], metrics=metrics, state=new_state)
