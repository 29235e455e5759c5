"""GAGPO: GAE over a grouped, non-parametric value proxy, normalised within the task group.

This is an [R] reconstruction (docs/methods.md#gagpo; no paper text or official code was available),
not a quote of the paper. For the steps t = 0..T_i−1 of trajectory i in task group g, let
G_{i,t} = Σ_{k=t}^{T_i−1} γ^{k−t} r_{i,k} be the discounted return-to-go. The value proxy of an
anchor state is V̂(s) = mean{G_{j,u} : s_{j,u} = s} over every step of the group at that anchor
(``StepBatch.step_anchor`` ids never match across groups; revisits within a trajectory each
count). TD residuals δ_{i,t} = r_{i,t} + γ·V̂(s_{i,t+1})·(1 − done_{i,t}) − V̂(s_{i,t}) feed the
GAE recursion Â_{i,t} = δ_{i,t} + γλ·Â_{i,t+1} (Â after the last step = 0), and the output is
A = (Â − mean_g Â)/(std_g Â + ε) over all steps of the group (unbiased std; a group with one
step, or with all-equal Â, gives 0). ``done`` is true at each trajectory's last step whether it
was terminated OR truncated: a truncated trajectory bootstraps V̂ = 0, consistent with CRBC
treating time-limit truncation as failure (STYLE.md convention 1) and with G itself, which has
no tail after truncation. With λ = 1 the recursion telescopes to Â = G − V̂(s) (MC minus the
proxy). The method expects the learner's action-level, length-normalised (GSPO-style)
importance ratio shared by all tokens of a step (``learner.ratio_level=step``, a learner option
added separately); :data:`EXPECTS_STEP_RATIO` records that. Shapes: N steps, M trajectories.

Identical groups: when all rollouts of a group are the same action sequence with the same
rewards and an anchor is revisited within the rollout, V̂ of that anchor averages returns-to-go
of different visits, so the TD residuals and the advantages are not 0 although nothing tells the
rollouts apart. ``zero_identical_groups=true`` gives such groups 0 (off by default, following
GiGPO's reference code, which behaves the same way).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos._common import (
    centred_by_group,
    divide_or_zero,
    group_mean,
    identical_groups,
    safe_mean,
    safe_std,
)
from agentrl.configuration import check
from agentrl.credit import Advantages, discounted_returns, register_estimator, steps_from_end
from agentrl.credit.batch import StepBatch

EXPECTS_STEP_RATIO = True
"""GAGPO is meant to run with the action-level importance ratio (``learner.ratio_level=step``)."""


@dataclass(frozen=True)
class GAGPOConfig:
    """Options of GAGPO (suggested defaults, docs/methods.md#gagpo; the paper's are unknown)."""

    gamma: float = 0.95
    """Discount γ of the returns-to-go behind V̂ and of the TD residuals."""
    lam: float = 0.95
    """GAE λ; λ = 1 gives MC minus proxy (which the paper's ablation says degrades)."""
    epsilon: float = 1e-6
    """Added to the group std of Â to avoid 0/0."""
    zero_identical_groups: bool = False
    """Give the step term 0 in a task group whose rollouts are all identical (same anchors,
    actions and rewards step by step); off by default, as in the reference code."""

    def __post_init__(self) -> None:
        check(0.0 <= self.gamma <= 1.0, "algo.gamma", self.gamma, "in [0, 1]")
        check(0.0 <= self.lam <= 1.0, "algo.lam", self.lam, "in [0, 1]")
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")


def grouped_value_proxy(
    step_return: np.ndarray, step_anchor: np.ndarray, n_anchors: int
) -> np.ndarray:
    """V̂(s_{i,t}) per step: the mean return-to-go over all steps at the same anchor.

    Args:
        step_return: (N,) float — G_{i,t}.
        step_anchor: (N,) int in [0, n_anchors) — anchor of each step.
    Returns:
        (N,) float64.
    """
    # Exact for all-equal sets: identical rollouts then get δ = 0 exactly, not rounding noise
    # that the group normalisation would blow up to ~1e-10.
    return group_mean(step_return, step_anchor, n_anchors)[step_anchor]


def td_residuals(
    step_reward: np.ndarray, step_value: np.ndarray, step_traj: np.ndarray, gamma: float
) -> np.ndarray:
    """δ_{i,t} = r_{i,t} + γ·V̂(s_{i,t+1})·(1 − done_{i,t}) − V̂(s_{i,t}), done at each last step.

    Args:
        step_reward: (N,) float — r_{i,t}.
        step_value: (N,) float — V̂(s_{i,t}).
        step_traj: (N,) int — trajectory of each step; steps contiguous, in turn order.
    Returns:
        (N,) float64.
    """
    step_value = np.asarray(step_value, dtype=np.float64)
    next_value = np.zeros_like(step_value)
    # The successor of a non-final step is the next row; a final step (terminated or
    # truncated) bootstraps 0.
    inner = np.flatnonzero(steps_from_end(step_traj) > 0)
    next_value[inner] = step_value[inner + 1]
    return np.asarray(step_reward, dtype=np.float64) + gamma * next_value - step_value


def gagpo_advantage(
    step_reward: np.ndarray,
    step_traj: np.ndarray,
    step_anchor: np.ndarray,
    step_group: np.ndarray,
    n_groups: int,
    gamma: float,
    lam: float,
    epsilon: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GAGPO advantage per step.

    Args:
        step_reward: (N,) float — reward of each step.
        step_traj: (N,) int — trajectory of each step; steps contiguous, in turn order.
        step_anchor: (N,) int — anchor id of each step (unique per task group).
        step_group: (N,) int in [0, n_groups) — task group of each step.
    Returns:
        (advantage, gae, delta), each (N,) float64: the group-normalised advantage, Â before
        normalisation and the TD residuals.
    """
    step_anchor = np.asarray(step_anchor, dtype=np.int64)
    if step_anchor.size == 0:
        empty = np.zeros(0, dtype=np.float64)
        return empty, empty, empty
    returns = discounted_returns(step_reward, step_traj, gamma)
    value = grouped_value_proxy(returns, step_anchor, int(step_anchor.max()) + 1)
    delta = td_residuals(step_reward, value, step_traj, gamma)
    # The GAE recursion Â_t = δ_t + γλ·Â_{t+1} is a discounted return of δ with factor γλ.
    gae = discounted_returns(delta, step_traj, gamma * lam)
    centred, std, count = centred_by_group(gae, step_group, n_groups)
    adv = divide_or_zero(centred, np.where(count <= 1, 1.0, std) + epsilon)
    return adv, gae, delta


@register_estimator(
    "gagpo",
    config=GAGPOConfig,
    # The action-level (GSPO-style) ratio with GSPO's small clip range.
    learner_hints={"ratio_level": "step", "clip_low": 3e-4, "clip_high": 4e-4},
)
def gagpo(batch: StepBatch, graph: object, cfg: GAGPOConfig) -> Advantages:
    """GAGPO group-normalised GAE over the grouped value proxy: (N,) float64."""
    adv, gae, delta = gagpo_advantage(
        batch.step_reward,
        batch.step_traj,
        batch.step_anchor,
        batch.step_group,
        batch.n_groups,
        cfg.gamma,
        cfg.lam,
        cfg.epsilon,
    )
    if cfg.zero_identical_groups:
        adv = np.where(identical_groups(batch)[batch.step_traj], 0.0, adv)
    return Advantages(
        step=adv, metrics={"td_abs_mean": safe_mean(np.abs(delta)), "gae_std": safe_std(gae)}
    )
