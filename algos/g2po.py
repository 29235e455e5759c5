"""G2PO: Group-Graph Policy Optimization (docs/methods.md#g2po, arXiv 2606.22995).

The steps of a task group are merged into a graph whose nodes are its anchors (every visit of an
anchor is one occurrence of its node) and whose edges are the steps. With t zero-based, T_i the
length of trajectory i, w_i its success flag (``traj_won``), r⁺ = ``success_reward`` and
γ = ``gamma``:

    node value      V(n) = mean over the occurrences (i, t) of n of γ^{T_i − t}·r⁺·w_i
    sinks           V(s⁺) = r⁺, V(s⁻) = 0
    successor       V'_{i,t} = V(s_{i,t+1}) for t < T_i − 1; V(s⁺) if w_i else V(s⁻) at the end
    node term       A^N_{i,t} = F(y_{i,t}) over the occurrences of s_{i,t},
                    y_{i,t} = V'_{i,t} − p·(1 − v_{i,t})
    edge (TD) term  A^D_{i,t} = F(δ_{i,t}) over all step rows of the task group,
                    δ_{i,t} = V'_{i,t} − V(s_{i,t})
    episode term    A^E_{i,t} = F(R_{i,t}) over all step rows of the task group,
                    R_{i,t} = E_i − p·(1 − v_{i,t})
    advantage       A_{i,t} = A^E_{i,t} + w·(A^N_{i,t} + A^D_{i,t})

F(x) = (x − mean)/(std + ε) (unbiased std) for ``mode="mean_std_norm"`` and x − mean for
``"mean_norm"``. v_{i,t} is the step's validity and p = ``invalid_penalty``. The last step
carries γ¹, so a sink one step later sits at γ⁰ = 1. Edge cases, as the reference code: a node
with one occurrence gets A^N = 0 (its δ is still taken, against its own self-inclusive value);
revisits are separate occurrences with their own weights; a task group with a single step row
uses mean 0 and std 1 for A^E (so A^E = R or R/(1 + ε)); an all-equal set gives exactly 0.

E_i is the episode's environment reward. agentrl's rollout has already subtracted its invalid
penalty from the reward of each invalid step, so E_i = Σ_t r_{i,t} + p·#invalid_i adds it back;
``invalid_penalty`` must therefore equal ``rollout.invalid_penalty`` (both default to 0.1).
Every row of a trajectory then carries E_i and only an invalid row loses p, as in verl-agent's
``EpisodeRewardManager`` with ``apply_invalid_action_penalty`` that the reference builds on.

Departures from the reference code (Nala-YN/G2PO ``g2po/core_g2po.py``):

- Success is the environment's verdict ``traj_won``, not "episode reward exactly 10", and the
  node values use the binary outcome r⁺·w_i rather than E_i. In ALFWorld (reward 10 on success,
  0 otherwise) both are the same. With partial credit (WebShop) the reference mixes E_i into V
  but sends every unsuccessful last step to V(s⁻) = 0; here partial credit only enters A^E.
  This is a reconstruction of ours, not the paper's.
- γ is a config field (default 0.95, the value the reference hard-codes).
- A task group with a single step makes the reference's ``torch.std`` NaN in A^D; here A^D is 0
  there (a reconstruction).
- Steps are taken in turn order, which ``StepBatch`` guarantees (every trajectory's steps are
  contiguous and sorted by ``step_t``), and the successor is the next step's anchor; the
  reference derives both from row order. The batch has no separate next-state key, so the
  cross-check of the successor against it (a reconstruction) has nothing to compare.

Shapes: N steps, M trajectories. Vectorised: a handful of ``bincount`` passes, O(N).

Identical groups: in a group of identical successful rollouts the edge term is not 0 for
γ < 1: δ_{i,t} = γ^{T_i−t−1}·(1 − γ)·r⁺ grows along the rollout and is normalised over all step
rows of the group, so later steps get positive and earlier steps negative credit (and revisited
anchors add a node term), although nothing tells the rollouts apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.algos._common import centred_by_group, divide_or_zero, safe_std
from agentrl.configuration import check, check_choice
from agentrl.credit import Advantages, register_estimator, steps_from_end
from agentrl.credit.batch import StepBatch

NormMode = Literal["mean_norm", "mean_std_norm"]
NORM_MODES: tuple[str, ...] = ("mean_norm", "mean_std_norm")


@dataclass(frozen=True)
class G2POConfig:
    """Options of G2PO (defaults: the reference's ALFWorld script)."""

    gamma: float = 0.95
    """γ of the node values γ^{T_i − t}·r⁺·w_i (the reference hard-codes 0.95)."""
    w_step: float = 1.0
    """Weight w of the node and edge terms (the reference's ``step_advantage_w``)."""
    mode: NormMode = "mean_std_norm"
    """F of all three terms: ``mean_std_norm`` divides by std + ε, ``mean_norm`` only centres
    (the reference's WebShop script uses ``mean_norm``)."""
    epsilon: float = 1e-6
    """Added to the std in ``mean_std_norm`` mode; 0 is allowed (all-equal sets give 0)."""
    invalid_penalty: float = 0.1
    """p: subtracted from y and from R of an invalid step. Must equal
    ``rollout.invalid_penalty``, which the rollout already took off the invalid step's reward
    and which is added back to recover E_i."""
    success_reward: float = 10.0
    """r⁺: the outcome of a success inside the node values, and V(s⁺)."""

    def __post_init__(self) -> None:
        check(0.0 <= self.gamma <= 1.0, "algo.gamma", self.gamma, "in [0, 1]")
        check(np.isfinite(self.w_step) and self.w_step >= 0, "algo.w_step", self.w_step, ">= 0")
        check_choice("algo.mode", self.mode, NORM_MODES)
        check(np.isfinite(self.epsilon) and self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")
        check(
            np.isfinite(self.invalid_penalty) and self.invalid_penalty >= 0,
            "algo.invalid_penalty",
            self.invalid_penalty,
            ">= 0 (the same value as rollout.invalid_penalty)",
        )
        check(
            np.isfinite(self.success_reward) and self.success_reward > 0,
            "algo.success_reward",
            self.success_reward,
            "> 0",
        )


def normalise(
    values: np.ndarray, groups: np.ndarray, n_groups: int, mode: str, epsilon: float
) -> np.ndarray:
    """F(x) within each group: x − mean, divided by the unbiased std + ε in ``mean_std_norm``.

    Args:
        values: (L,) float; groups: (L,) int in [0, n_groups).
    Returns:
        (L,) float64; exactly 0 in all-equal groups and groups of one (where the std is 0).
    """
    centred, std, _ = centred_by_group(values, groups, n_groups)
    if mode == "mean_norm":
        return centred
    return divide_or_zero(centred, std + epsilon)


def row_episode_rewards(batch: StepBatch, invalid_penalty: float) -> np.ndarray:
    """(N,) R_{i,t} = E_i − p·(1 − v_{i,t}), the episode reward each step row carries.

    E_i = Σ_t (r_{i,t} + p·(1 − v_{i,t})) undoes the penalty the rollout subtracted from every
    invalid step, so only the row's own invalid action lowers its value (verl-agent's per-row
    convention). The penalty is added back per step before summing, so an invalid step with
    environment reward 0 contributes exactly 0, and equal episodes stay exactly equal.
    """
    invalid = (~batch.step_valid).astype(np.float64)  # (N,)
    env_reward = batch.step_reward + invalid_penalty * invalid  # (N,)
    episode = np.bincount(batch.step_traj, weights=env_reward, minlength=batch.n_trajs)  # (M,)
    return episode[batch.step_traj] - invalid_penalty * invalid


def row_episode_advantage(
    row_reward: np.ndarray, step_group: np.ndarray, n_groups: int, mode: str, epsilon: float
) -> np.ndarray:
    """A^E per step row: F(R_{i,t}) over all step rows of the task group.

    verl-agent's ``episode_norm_reward(compute_mean_std_cross_steps=True)``: every row is one
    member, so long trajectories weigh more; a group with a single row uses mean 0 and std 1.

    Args:
        row_reward: (N,) float R_{i,t}; step_group: (N,) int task group of each row.
    Returns:
        (N,) float64.
    """
    centred, std, count = centred_by_group(row_reward, step_group, n_groups)
    single = count <= 1
    centred = np.where(single, row_reward, centred)
    if mode == "mean_norm":
        return centred
    return divide_or_zero(centred, np.where(single, 1.0, std) + epsilon)


def node_values(
    batch: StepBatch, gamma: float, success_reward: float
) -> tuple[np.ndarray, np.ndarray]:
    """V of each step's node and of its successor.

    Args:
        batch: the steps; nodes are ``step_anchor`` ids (unique per task group).
        gamma: γ of the occurrence values γ^{T_i − t}·r⁺·w_i.
        success_reward: r⁺ = V(s⁺).
    Returns:
        (V, V_next): (N,) float64 V(s_{i,t}) and V'_{i,t}.
    """
    n = batch.n_steps
    anchor = np.asarray(batch.step_anchor, dtype=np.int64)
    n_nodes = int(anchor.max()) + 1 if n else 0
    after = steps_from_end(batch.step_traj)  # (N,) T_i − 1 − t
    won = batch.traj_won[batch.step_traj]  # (N,)
    occurrence = np.where(won, success_reward * gamma ** (after + 1.0), 0.0)  # (N,)
    total = np.bincount(anchor, weights=occurrence, minlength=n_nodes)
    count = np.bincount(anchor, minlength=n_nodes)
    value = total / np.maximum(count, 1)  # (n_nodes,)
    v_node = value[anchor]
    # The successor is the next row's node within the trajectory, else a sink.
    v_next = np.where(won, success_reward, 0.0)  # the last step's sink, for every row
    inner = np.flatnonzero(after > 0)
    v_next[inner] = v_node[inner + 1]
    return v_node, v_next


def g2po_components(batch: StepBatch, cfg: G2POConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three G2PO terms of every step, before weighting.

    Returns:
        (episode, node, edge): (N,) float64 each — A^E, A^N and A^D.
    """
    groups = batch.step_group
    p = cfg.invalid_penalty
    v_node, v_next = node_values(batch, cfg.gamma, cfg.success_reward)
    invalid = (~batch.step_valid).astype(np.float64)
    anchor = np.asarray(batch.step_anchor, dtype=np.int64)
    n_nodes = int(anchor.max()) + 1 if batch.n_steps else 0
    node = normalise(v_next - p * invalid, anchor, n_nodes, cfg.mode, cfg.epsilon)
    edge = normalise(v_next - v_node, groups, batch.n_groups, cfg.mode, cfg.epsilon)
    rows = row_episode_rewards(batch, p)
    episode = row_episode_advantage(rows, groups, batch.n_groups, cfg.mode, cfg.epsilon)
    return episode, node, edge


@register_estimator("g2po", config=G2POConfig)
def g2po(batch: StepBatch, graph: object, cfg: G2POConfig) -> Advantages:
    """G2PO advantage A^E + w·(A^N + A^D) per step: (N,) float64."""
    episode, node, edge = g2po_components(batch, cfg)
    return Advantages(
        step=episode + cfg.w_step * (node + edge),
        metrics={
            "episode_adv_std": safe_std(episode),
            "node_adv_std": safe_std(node),
            "edge_adv_std": safe_std(edge),
        },
    )
