"""GACA: GiGPO whose step-advantage weight grows with the step's sampling NLL.

This is an [R] reconstruction from the abstract alone (docs/methods.md#gaca), not a quote of
the paper. For step t = 0..T_i−1 of trajectory i, u_{i,t} is the mean token negative
log-likelihood of its response recorded at sampling time (``StepBatch.step_nll``, from the
rollout's log-probs: no extra model pass). It is normalised within the trajectory,
z_{i,t} = (u_{i,t} − mean_t u_{i,·})/(std_t u_{i,·} + ε), with the POPULATION std (ddof 0):
then z has mean 0 and mean square 1 in every non-constant trajectory, so κ reads directly as
the relative spread of ω before clipping, independent of trajectory length. The step weight
is ω_{i,t} = clip(ω₀·(1 + κ·z_{i,t}), 0, ω_max) and the advantage is
A_{i,t} = A^E(τ_i) + ω_{i,t}·A^S(i,t), with A^E and A^S exactly GiGPO's
(:mod:`agentrl.algos.gigpo`, same γ, mode, ε and similarity options). Edge cases: a non-finite
u (unknown NLL, e.g. an empty response) is treated as the trajectory mean (z = 0) and left out
of that trajectory's mean and std; one-step and constant-NLL trajectories give z = 0, hence
ω = ω₀; where A^S = 0 (singleton anchors) the modulation is inert. Shapes: N steps,
M trajectories.

Identical groups: as GiGPO's, the step term is not 0 in a group of identical rollouts that
revisit an anchor (earlier visits have smaller discounted returns-to-go);
``zero_identical_groups=true`` sets it to 0 there (off by default, as in GiGPO's reference code).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos._common import centred_by_group, divide_or_zero, safe_mean, safe_std
from agentrl.algos.gigpo import NormMode, check_gigpo_fields, gigpo_components
from agentrl.configuration import check
from agentrl.credit import Advantages, register_estimator
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class GACAConfig:
    """Options of GACA (the first four as in GiGPO)."""

    gamma: float = 0.95
    """Discount γ of the step return-to-go behind A^S."""
    mode: NormMode = "mean_std_norm"
    """F_norm of A^E and A^S: ``mean_std_norm`` divides by std + ε, ``mean_norm`` by 1."""
    epsilon: float = 1e-6
    """Added to the stds (A^E, A^S and the within-trajectory NLL std)."""
    similarity: float = 0.0
    """0 groups exactly equal anchors; in (0, 1] clusters anchor texts with ratio ≥ this."""
    omega0: float = 1.0
    """Base weight ω₀ of A^S at an average-NLL step (GiGPO's ω)."""
    kappa: float = 0.3
    """Modulation strength κ: ω = ω₀(1 + κz) before clipping; 0 gives GiGPO."""
    omega_max: float = 2.0
    """Upper clip of the step weight ω (the lower clip is 0)."""
    zero_identical_groups: bool = False
    """Give the step term 0 in a task group whose rollouts are all identical (same anchors,
    actions and rewards step by step); off by default, as in the reference code."""

    def __post_init__(self) -> None:
        check_gigpo_fields(self.gamma, self.mode, self.epsilon, self.similarity)
        check(self.omega0 >= 0, "algo.omega0", self.omega0, ">= 0")
        check(self.kappa >= 0, "algo.kappa", self.kappa, ">= 0")
        check(self.omega_max >= 0, "algo.omega_max", self.omega_max, ">= 0")


def nll_zscore(
    step_nll: np.ndarray, step_traj: np.ndarray, n_trajs: int, epsilon: float
) -> np.ndarray:
    """z_{i,t}: the step NLL normalised within its trajectory (population std).

    Args:
        step_nll: (N,) float — mean token NLL per step; NaN/inf means unknown.
        step_traj: (N,) int in [0, n_trajs) — trajectory of each step.
    Returns:
        (N,) float64; 0 for unknown NLLs, one-step and constant-NLL trajectories.
    """
    step_nll = np.asarray(step_nll, dtype=np.float64)
    z = np.zeros(step_nll.shape[0], dtype=np.float64)
    known = np.flatnonzero(np.isfinite(step_nll))
    centred, std, _ = centred_by_group(step_nll[known], step_traj[known], n_trajs, ddof=0)
    z[known] = divide_or_zero(centred, std + epsilon)
    return z


def step_weight(z: np.ndarray, omega0: float, kappa: float, omega_max: float) -> np.ndarray:
    """ω = clip(ω₀·(1 + κ·z), 0, ω_max): (N,) float64 from (N,) z."""
    return np.clip(omega0 * (1.0 + kappa * np.asarray(z, dtype=np.float64)), 0.0, omega_max)


@register_estimator("gaca", config=GACAConfig)
def gaca(batch: StepBatch, graph: object, cfg: GACAConfig) -> Advantages:
    """GACA advantage A^E + ω(z)·A^S: (N,) float64."""
    episode, step = gigpo_components(
        batch,
        cfg.gamma,
        cfg.mode,
        cfg.epsilon,
        cfg.similarity,
        zero_identical=cfg.zero_identical_groups,
    )
    z = nll_zscore(batch.step_nll, batch.step_traj, batch.n_trajs, cfg.epsilon)
    omega = step_weight(z, cfg.omega0, cfg.kappa, cfg.omega_max)
    return Advantages(
        step=episode[batch.step_traj] + omega * step,
        metrics={
            "omega_mean": safe_mean(omega),
            "omega_std": safe_std(omega),
            "step_adv_std": safe_std(step),
            "episode_adv_std": safe_std(episode),
        },
    )
