"""MT-GRPO: turn rewards normalised against the group at the same turn index, summed over turns.

docs/methods.md#mtgrpo (MT-GRPO: Zeng, Wei, Brown, Frunza, Nevmyvaka, Hong, "Reinforcing
Multi-Turn Reasoning in LLM Agents via Turn-Level Credit Assignment", arXiv 2505.11821, 2025;
the bias: verl-project/verl issue #7244). For turn t = 0..T_i−1 of rollout i of a task group,
u_{i,t} is the turn reward and R_i the trajectory-level outcome:

- a batch with a rubric (process) reward (``StepBatch.step_rubric``, the environment's
  ``info["rubric_reward"]``) carries the outcome separately: u = ρ (the rubric reward of each
  turn), R_i = Σ_t r_{i,t} (the environment's own return);
- without one, u = r (the step reward) and the outcome is folded into the last turn's reward:
  there is no separate outcome term (R ≡ 0).

``baseline="per_index"`` (default: the paper's construction, in the T-turn form verl #7244 states;
as we read the paper's two-turn case, with a turn reward at turn 1 only, it is A_1 = A^T + A^O
and A_2 = A^O)::

    z_{i,k}   = (u_{i,k} − b_k)/σ_k,   b_k, σ_k over the rollouts j of the group with T_j > k
    A_{i,t}   = Σ_{k=t}^{T_i−1} γ^{k−t} z_{i,k} + (R_i − mean_j R_j)/σ_R

**Biased when the policy chooses when to stop.** The baseline part Σ_{k=t}^{T_i−1} γ^{k−t} b_k/σ_k
has T_i − t terms, and T_i is chosen by the actions being scored, so the baseline depends on
the action and E[∇log π(a_t|s_t)·baseline] ≠ 0: a continue/stop decision is charged the group's
mean turn reward of every extra turn (verl #7244's "hidden bonus of −E[R_intermediate]" per
turn). Positive turn rewards (format, tool-call bonuses) teach stopping early, per-turn costs
teach running long. On the two-turn stop/continue MDP of :mod:`agentrl.credit.properties`
(turn reward c, outcome K + Δ·[T = 2] − c·T, group size G, mean only) the expected gradient is
(G−1)/G·p(1−p)·(Δ − c) instead of the true p(1−p)Δ: it has the wrong sign for c > Δ.

The fixes subtract a baseline that depends only on (group, turn index), once:

- ``baseline="return_to_go"`` (F1; **use this in practice, with** ``leave_one_out=true``):
  A_{i,t} = (G_{i,t} − b̄_t)/σ̄_t with G_{i,t} = Σ_{k≥t} γ^{k−t} u_{i,k} + R_i and b̄_t, σ̄_t over
  the rollouts alive at index t. Its baseline depends on no action, so it passes the
  termination test with or without σ̄ (which rescales, as GRPO's std does); with
  ``leave_one_out`` and without σ̄ its expected gradient is exactly the true one (a
  self-inclusive mean shrinks it by (G−1)/G). Without a rubric reward it is GR2PO
  (docs/methods.md#gr2po) with γ = 1.
- ``baseline="zero_padded"`` (F2): the per-index sum with finished rollouts counted as
  u = 0 at every later index up to the group's longest rollout, so that every rollout
  subtracts the same Σ_{k=t}^{T_max−1} γ^{k−t} b_k/σ_k. Unbiased with ``norm_by_std=false``;
  with σ_k the turn rewards are weighted by 1/σ_k per index, which changes the objective.

Options: ``leave_one_out`` replaces every self-inclusive mean (b_k, b̄_t, mean R) by the mean
over the other members (the centred value times n/(n−1)); ``norm_by_std`` divides by the
unbiased std + ε of the same set (GRPO's normalisation; σ is self-inclusive also with
``leave_one_out``). A set with one member (a turn index reached by one rollout, a group of one)
gives 0; an all-equal set gives exactly 0, also with ε = 0. Defaults: per_index, no
leave-one-out, std normalisation, γ = 1 (turns summed undiscounted, as the issue states the
construction), ε = 1e-6. Shapes:
N steps, M trajectories; ``zero_padded`` works on Σ_g G_g·T_max(g) padded rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.algos._common import centred_by_group, divide_or_zero
from agentrl.configuration import check
from agentrl.credit import Advantages, discounted_returns, register_estimator
from agentrl.credit.batch import StepBatch

Baseline = Literal["per_index", "return_to_go", "zero_padded"]


@dataclass(frozen=True)
class MTGRPOConfig:
    """Options of MT-GRPO (see the module; ``baseline=return_to_go`` is the unbiased fix)."""

    baseline: Baseline = "per_index"
    """``per_index`` (the paper's, biased when the policy chooses when to stop),
    ``return_to_go`` (F1, recommended) or ``zero_padded`` (F2)."""
    leave_one_out: bool = False
    """Centre on the mean of the other members of each set (recommended with F1)."""
    norm_by_std: bool = True
    """Divide by the std of each set (GRPO); false centres only."""
    gamma: float = 1.0
    """Discount of the sum over turns (and of F1's return-to-go)."""
    epsilon: float = 1e-6
    """Added to the std; 0 is allowed (all-equal sets give exactly 0)."""

    def __post_init__(self) -> None:
        check(0 <= self.gamma <= 1, "algo.gamma", self.gamma, "in [0, 1]")
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")


def normalised(values: np.ndarray, key: np.ndarray, cfg: MTGRPOConfig) -> np.ndarray:
    """Each value against the others with the same key: centred (leave-one-out if asked),
    divided by std + ε if asked; 0 in sets of one.

    Args:
        values: (L,) float; key: (L,) int set of each value (any non-negative ids).
    Returns:
        (L,) float64.
    """
    if values.shape[0] == 0:
        return np.zeros(0)
    _, dense = np.unique(key, return_inverse=True)
    dense = dense.reshape(-1)
    centred, std, count = centred_by_group(values, dense, int(dense.max()) + 1)
    if cfg.leave_one_out:
        centred = centred * count / np.maximum(count - 1.0, 1.0)
    adv = divide_or_zero(centred, std + cfg.epsilon) if cfg.norm_by_std else centred
    return np.where(count > 1, adv, 0.0)


def mtgrpo_advantage(
    turn_reward: np.ndarray,
    outcome: np.ndarray | None,
    step_traj: np.ndarray,
    traj_group: np.ndarray,
    cfg: MTGRPOConfig,
) -> np.ndarray:
    """MT-GRPO advantage per step (see the module).

    Args:
        turn_reward: (N,) float u_{i,t}; steps of a trajectory contiguous, in turn order.
        outcome: (M,) float R_i, or None when the outcome is folded into ``turn_reward``.
        step_traj: (N,) int trajectory of each step; traj_group: (M,) int group of each.
    Returns:
        (N,) float64.
    """
    n, m = turn_reward.shape[0], traj_group.shape[0]
    if n == 0:
        return np.zeros(0)
    length = np.bincount(step_traj, minlength=m)
    start = np.concatenate(([0], np.cumsum(length)[:-1]))
    t = np.arange(n) - start[step_traj]  # (N,) turn index, 0-based
    width = int(length.max()) + 1
    step_group = traj_group[step_traj]
    outcome_term = 0.0
    if outcome is not None and cfg.baseline != "return_to_go":
        outcome_term = normalised(np.asarray(outcome, dtype=np.float64), traj_group, cfg)[step_traj]
    if cfg.baseline == "return_to_go":
        ret = discounted_returns(turn_reward, step_traj, cfg.gamma)
        if outcome is not None:
            ret = ret + np.asarray(outcome, dtype=np.float64)[step_traj]
        return normalised(ret, step_group * width + t, cfg)
    if cfg.baseline == "per_index":
        z = normalised(np.asarray(turn_reward, dtype=np.float64), step_group * width + t, cfg)
        return discounted_returns(z, step_traj, cfg.gamma) + outcome_term
    # zero_padded: every rollout of a group gets rows up to the group's longest, u = 0 after
    # its end; the advantage is read back on the real rows (same order as the batch's steps).
    longest = np.zeros(int(traj_group.max()) + 1, dtype=np.int64)
    np.maximum.at(longest, traj_group, length)
    rows = longest[traj_group]  # (M,) padded length of each trajectory
    pad_traj = np.repeat(np.arange(m), rows)
    pad_t = np.arange(pad_traj.shape[0]) - np.repeat(np.cumsum(rows) - rows, rows)
    real = pad_t < length[pad_traj]
    u = np.zeros(pad_traj.shape[0])
    u[real] = turn_reward
    z = normalised(u, traj_group[pad_traj] * width + pad_t, cfg)
    return discounted_returns(z, pad_traj, cfg.gamma)[real] + outcome_term


@register_estimator("mtgrpo", config=MTGRPOConfig)
def mtgrpo(batch: StepBatch, graph: object, cfg: MTGRPOConfig) -> Advantages:
    """MT-GRPO advantage per step: (N,) float64 (see the module)."""
    separate = batch.step_rubric is not None
    turn_reward = batch.step_rubric if separate else batch.step_reward
    outcome = batch.traj_return if separate else None
    adv = mtgrpo_advantage(turn_reward, outcome, batch.step_traj, batch.traj_group, cfg)
    return Advantages(step=adv, metrics={"outcome_separate": float(separate)})
