"""TRCA: GiGPO-style context-group step advantages over returns that include a rubric reward.

Transition-wise Rubric Credit Assignment (Zhang, Chen, Zhou, Lv, Chang, Cui, Wu, Zhou,
arXiv 2608.16156; docs/methods.md#trca). Only a detailed third-party digest of the paper could
be read (no public code), so the advantage below follows the digest's equations, with the
normalisation a reconstruction [R] where the digest is silent.

The rubric reward ρ_{i,t} is computed OUTSIDE the estimator, by the environment: deterministic
rubric operators bound to each task read the transition (s_t, a_t, s_{t+1}) and fire evidence
(+), execution (+) and invalidity (−) items. The paper blends a per-step "foundational" score
r^F with a "breakthrough" score r^B that pays each positive item only the first time it fires:
ρ = (1 − λ)·r^F + λ·r^B with λ = 0.8. An environment reports ρ of each step as
``info["rubric_reward"]`` (one finite float, see :mod:`agentrl.env_api`); it reaches the
estimator as ``StepBatch.step_rubric``, kept apart from the step reward r_{i,t}. The estimator
then computes

    R_{i,t} = Σ_{k=t}^{T_i−1} γ^{k−t} (r_{i,k} + ρ_{i,k})               (completion-aware return)
    A^S_{i,t} = (R_{i,t} − mean_{C(i,t)} R) / (std_{C(i,t)} R + ε)          [R: GiGPO's z-score]
    A^E_i = (O_i − mean_g O) / (std_g O + ε),  O_i = Σ_t r_{i,t}            [R: GRPO on the outcome]
    A_{i,t} = A^E_i + A^S_{i,t}

C(i,t) is the context group: every step of the task group whose context key equals that of
step (i,t). The paper's keys are structured environment context (ALFWorld: task predicates,
object states, inventory, locations, interaction stage; WebShop: page type, product, selected
options, navigation stage), not embeddings or raw text; in agentrl the context key IS the
environment's anchor (``info["anchor"]``), so an environment opts into the paper's grouping by
reporting that context as its anchor. std is the unbiased one (n − 1); a context group of one
member, or with equal returns, gives A^S = 0 exactly. A^E is the episode z-score of the
environment's own return, without the rubric (a task group of one trajectory uses mean 0 and
std 1, as GRPO). With rubric rewards, steps of a task group where nobody succeeded still get
non-zero A^S when their context returns differ, which is the paper's point.

**Fallback.** None of the bundled environments (Sokoban, WebShop, ALFWorld) reports a rubric
reward; their anchors are the player and box positions (Sokoban), the page state (WebShop) and
the last feedback with location, inventory and admissible commands (ALFWorld). On a batch
without ``step_rubric`` ρ = 0 and TRCA is exactly GiGPO with its defaults
(``mode=mean_std_norm``, ω = 1, one episode value per trajectory): the reading the method's
agentrl mapping gives when the rubric is folded into the environment's reward. The metric
``credit/rubric_reported`` (1 or 0) shows which case a run is in.

Defaults: γ = 0.95, ε = 1e-6 (the paper's γ). Departures: the paper clips PPO on the
executable action tokens only, while agentrl's learner trains every response token of the step;
the rubric blend λ and the rubric itself belong to the environment, not to this config.
Shapes: N steps, M trajectories.

Identical groups: identical rollouts that revisit an anchor get a nonzero step term, because the
context group pools visits whose discounted returns-to-go differ (as GiGPO's), although nothing
tells the rollouts apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos._common import safe_mean, safe_std
from agentrl.algos.gigpo import episode_advantage, step_advantage
from agentrl.configuration import check
from agentrl.credit import Advantages, discounted_returns, register_estimator
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class TRCAConfig:
    """Options of TRCA (the rubric itself is the environment's: ``info["rubric_reward"]``)."""

    gamma: float = 0.95
    """Discount γ of the completion-aware return R_{i,t} (the paper's 0.95)."""
    epsilon: float = 1e-6
    """Added to the std of the context groups and of the episode z-score."""

    def __post_init__(self) -> None:
        check(0.0 <= self.gamma <= 1.0, "algo.gamma", self.gamma, "in [0, 1]")
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")


def trca_advantage(
    step_reward: np.ndarray,
    step_rubric: np.ndarray | None,
    step_traj: np.ndarray,
    step_anchor: np.ndarray,
    traj_group: np.ndarray,
    n_groups: int,
    gamma: float,
    epsilon: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TRCA advantage per step.

    Args:
        step_reward: (N,) float — the environment's reward r_{i,t} (with invalid penalties).
        step_rubric: (N,) float rubric reward ρ_{i,t}, or None for none (ρ = 0).
        step_traj: (N,) int in [0, M) — trajectory of each step; steps contiguous, in turn
            order.
        step_anchor: (N,) int — context key (anchor id) of each step, unique per task group.
        traj_group: (M,) int in [0, n_groups) — task group of each trajectory.
    Returns:
        (advantage, episode, step): (N,) float64 A, (M,) float64 A^E per trajectory and (N,)
        float64 A^S.
    """
    step_reward = np.asarray(step_reward, dtype=np.float64)
    step_traj = np.asarray(step_traj, dtype=np.int64)
    m = traj_group.shape[0]
    # The outcome leaves the rubric out: A^E judges the episode by the environment alone.
    outcome = np.bincount(step_traj, weights=step_reward, minlength=m)
    episode = episode_advantage(outcome, traj_group, n_groups, "mean_std_norm", epsilon)
    shaped = step_reward if step_rubric is None else step_reward + step_rubric
    returns = discounted_returns(shaped, step_traj, gamma)
    step_anchor = np.asarray(step_anchor, dtype=np.int64)
    n_anchor = int(step_anchor.max()) + 1 if step_anchor.size else 0
    step = step_advantage(returns, step_anchor, n_anchor, "mean_std_norm", epsilon)
    return episode[step_traj] + step, episode, step


@register_estimator("trca", config=TRCAConfig)
def trca(batch: StepBatch, graph: object, cfg: TRCAConfig) -> Advantages:
    """TRCA advantage A^E + A^S over returns with the rubric reward: (N,) float64."""
    adv, episode, step = trca_advantage(
        batch.step_reward,
        batch.step_rubric,
        batch.step_traj,
        batch.step_anchor,
        batch.traj_group,
        batch.n_groups,
        cfg.gamma,
        cfg.epsilon,
    )
    rubric = batch.step_rubric
    return Advantages(
        step=adv,
        metrics={
            "rubric_reported": float(rubric is not None),
            "rubric_mean": safe_mean(rubric) if rubric is not None else 0.0,
            "step_adv_std": safe_std(step),
            "episode_adv_std": safe_std(episode),
        },
    )
