"""GraphGPO: step credit from the graph distance to success (docs/methods.md#graphgpo,
arXiv 2605.26684).

The steps of a task group form a directed graph over its anchors (``TrajectoryGraph``): each step
is one edge occurrence s_{i,t} → s'_{i,t}, where s' is the next step's anchor, the success sink
s⁺ after the last step of a won trajectory, and a dead end after the last step of any other one.
With edge cost c (1 per step, or a named step cost), ω = ``omega`` and r⁺ = ``success_reward``:

    distance       d(s⁺) = 0, d(s) = min over the edges s → s' of c + d(s'); topology keeps
                   the cheapest of parallel edges; a node that cannot reach s⁺ gets
                   d_max + 1, d_max = the largest finite distance in its task group
    graph return   R^G_{i,t} = r⁺·ω^{d(s'_{i,t}) + c_{i,t} − 1}   (``convention="reference"``)
                   R^G_{i,t} = r⁺·ω^{d(s'_{i,t}) + c_{i,t}}       (``convention="paper"``, Eq. 4)
    graph term     A^G_{i,t} = F(R^G_{i,t}) over the occurrences leaving the same anchor
    episode term   A^E: GiGPO's episode advantage, one member per step row by default
    advantage      A_{i,t} = β^G·A^G_{i,t} + β^E·A^E_{i,t}

F(x) = (x − mean)/(std + ε) (unbiased std) for ``mode="mean_std_norm"`` and x − mean for
``"mean_norm"``; a source anchor left only once, or with all-equal returns, gives A^G = 0. The
two conventions differ by the constant factor ω, so they agree exactly under ``mean_std_norm``
and ``mean_norm`` is rescaled by ω. A task group without a success has every d = d_max + 1 = 1,
hence equal returns and A^G = 0: only A^E remains, as in the reference code.

Episode term (``episode_stats``). ``"step"`` (the reference's ``compute_mean_std_cross_steps``):
every step row is a member carrying R_{i,t} = E_i − p·(1 − v_{i,t}), with E_i the episode's
environment reward (the rollout's invalid penalties added back, see :mod:`agentrl.algos.g2po`)
and p = ``invalid_penalty``, which must equal ``rollout.invalid_penalty``; a task group with a
single row uses mean 0 and std 1. ``"trajectory"`` (the default of Relax's re-implementation):
one member per trajectory carrying its return Σ_t r_{i,t} = E_i − p·#invalid_i, as GiGPO's
``episode_stats="trajectory"``.

Distances come from one call of ``scipy.sparse.csgraph.dijkstra`` for the whole batch, run from
a single s⁺ over the reversed edges: anchors never match across task groups, so no path crosses
from one group into another and the shared sink gives every group its own distances.

Departures from the reference code (verl-agent ``recipe/GraphGPO``; Relax
``examples/graphgpo/graph_credit.py``):

- agentrl's step batch does not record the anchor reached after a trajectory's last step, so
  the last step of a failed or truncated trajectory points to a dead end (d = d_max + 1). The
  reference keeps the real final observation, which gets a finite distance when it lies on a
  success path elsewhere in the group (a truncated trajectory stopped on such a path); here such
  a step is at the unreachable level.
- Success is the environment's verdict ``traj_won``; the reference writes ``success`` as the
  last observation of a successful episode.
- Edge costs other than 1 (``edge_cost``): the reference convention's exponent d(s') + c − 1
  is our generalisation of its unit-cost code (Relax refuses non-unit costs under it); costs may
  be 0 (``StepBatch`` costs are non-negative), which makes an edge free.
- Not offered: the reference's ``normalize_distance`` flag (exponent d(s') − d(s) + 1), a
  constant factor within each same-source group, so identical under ``mean_std_norm``; and the
  optional merging of similar states (off in the reference).
- Invalid actions lower A^E only; whether the reference's trainer also lowers R^G is not known.

Shapes: N steps, M trajectories, S anchor states.

Termination: it prefers shorter paths to success by design. The graph return falls with the
distance to s⁺ whatever the rewards on the way, so where stopping and continuing earn the same
return (the stop/continue test of :mod:`agentrl.credit.properties`) it favours the shorter
episode. Identical groups: identical successful rollouts that revisit an anchor get nonzero
graph terms, because their visits of it leave towards successors at different distances to s⁺.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from agentrl.algos._common import safe_mean, safe_std
from agentrl.algos.g2po import NORM_MODES, normalise, row_episode_advantage, row_episode_rewards
from agentrl.algos.gigpo import episode_advantage
from agentrl.configuration import check, check_choice
from agentrl.credit import Advantages, register_estimator
from agentrl.credit.batch import StepBatch
from agentrl.credit.graph import TrajectoryGraph

Convention = Literal["reference", "paper"]
CONVENTIONS: tuple[str, ...] = ("reference", "paper")
EpisodeStats = Literal["step", "trajectory"]
EPISODE_STATS: tuple[str, ...] = ("step", "trajectory")


@dataclass(frozen=True)
class GraphGPOConfig:
    """Options of GraphGPO (defaults: the paper's ALFWorld setting)."""

    omega: float = 0.1
    """ω in (0, 1), the discount per unit of distance (0.1 ALFWorld, 0.2 WebShop, 0.8 Sokoban)."""
    beta_graph: float = 1.0
    """Weight β^G of the graph term A^G."""
    beta_episode: float = 1.0
    """Weight β^E of the episode term A^E."""
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm"
    """F of both terms: ``mean_std_norm`` divides by std + ε, ``mean_norm`` only centres."""
    epsilon: float = 1e-6
    """Added to the std in ``mean_std_norm`` mode; 0 is allowed (all-equal sets give 0)."""
    success_reward: float = 10.0
    """r⁺, the scale of the graph returns."""
    convention: Convention = "reference"
    """Exponent of ω: d(s') + c − 1 (``reference``: the public code) or d(s') + c
    (``paper``: Eq. 4)."""
    episode_stats: EpisodeStats = "step"
    """Members of the episode mean/std: one per ``step`` row (the reference) or one per
    ``trajectory`` (Relax's default)."""
    invalid_penalty: float = 0.1
    """p of the per-row episode reward (``episode_stats="step"``); must equal
    ``rollout.invalid_penalty``."""
    edge_cost: str = ""
    """"" for cost 1 per step, else the name of a step cost (``StepBatch.cost_names``) used as
    the edge cost c."""

    def __post_init__(self) -> None:
        check(0.0 < self.omega < 1.0, "algo.omega", self.omega, "in (0, 1)")
        for name in ("beta_graph", "beta_episode"):
            value = getattr(self, name)
            check(np.isfinite(value) and value >= 0, f"algo.{name}", value, ">= 0")
        check_choice("algo.mode", self.mode, NORM_MODES)
        check(np.isfinite(self.epsilon) and self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")
        check(
            np.isfinite(self.success_reward) and self.success_reward > 0,
            "algo.success_reward",
            self.success_reward,
            "> 0",
        )
        check_choice("algo.convention", self.convention, CONVENTIONS)
        check_choice("algo.episode_stats", self.episode_stats, EPISODE_STATS)
        check(
            np.isfinite(self.invalid_penalty) and self.invalid_penalty >= 0,
            "algo.invalid_penalty",
            self.invalid_penalty,
            ">= 0 (the same value as rollout.invalid_penalty)",
        )
        check(isinstance(self.edge_cost, str), "algo.edge_cost", self.edge_cost, "a cost name")


def edge_costs(batch: StepBatch, name: str) -> np.ndarray:
    """(N,) float64 cost c of each step's edge: 1, or the step cost ``name``.

    Raises:
        ValueError: ``name`` is not one of ``batch.cost_names``.
    """
    if not name:
        return np.ones(batch.n_steps)
    if name not in batch.cost_names:
        raise ValueError(
            f"algo.edge_cost={name!r} is not a cost of this batch; its costs are "
            f"{list(batch.cost_names)} (set algo.edge_cost='' for cost 1 per step)"
        )
    assert batch.step_cost is not None  # set by StepBatch.__post_init__
    return np.asarray(batch.step_cost[:, batch.cost_names.index(name)], dtype=np.float64)


def distance_to_success(
    graph: TrajectoryGraph, cost: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """Shortest distance from every node to success, and each task group's d_max.

    Args:
        graph: the batch's graph; nodes 0..S−1 are anchors, S is success, S + 1 the dead end
            (``graph.failure``) after unsuccessful last steps.
        cost: (N,) float, non-negative cost of each step's edge.
        n_groups: number of task groups (``graph.state_group`` is in [0, n_groups)).
    Returns:
        (dist, d_max): (S + 2,) float64 distance of each node (inf where success cannot be
        reached) and (n_groups,) float64 largest finite distance per group (0 when no anchor
        of the group reaches success).
    """
    n_nodes = graph.n_states + 2
    # Keep the cheapest of parallel edges: csr_matrix would add duplicate entries up.
    key = graph.step_state * n_nodes + graph.step_next  # (N,)
    pairs, inverse = np.unique(key, return_inverse=True)
    cheapest = np.full(pairs.shape[0], np.inf)
    np.minimum.at(cheapest, inverse.reshape(-1), cost)
    source, target = pairs // n_nodes, pairs % n_nodes
    # Reversed edges (successor → state), so one search from success reaches every state that
    # can get there. Explicit zero costs stay stored entries, i.e. free edges.
    reverse = sp.csr_matrix((cheapest, (target, source)), shape=(n_nodes, n_nodes))
    dist = csgraph.dijkstra(reverse, directed=True, indices=graph.success)
    d_states = dist[: graph.n_states]
    finite = np.isfinite(d_states)
    d_max = np.zeros(n_groups)
    np.maximum.at(d_max, graph.state_group[finite], d_states[finite])
    return dist, d_max


def graph_returns(
    graph: TrajectoryGraph,
    batch: StepBatch,
    cost: np.ndarray,
    omega: float,
    success_reward: float,
    convention: str,
) -> tuple[np.ndarray, np.ndarray]:
    """R^G of every step and the distance of its successor.

    Returns:
        (R^G, d_next): (N,) float64 each; an unreachable successor has d = d_max + 1 of the
        step's task group.
    """
    dist, d_max = distance_to_success(graph, cost, batch.n_groups)
    d_next = dist[graph.step_next]  # (N,)
    d_next = np.where(np.isfinite(d_next), d_next, d_max[batch.step_group] + 1.0)
    exponent = d_next + cost - (1.0 if convention == "reference" else 0.0)
    return success_reward * omega**exponent, d_next


def graphgpo_components(
    batch: StepBatch, graph: TrajectoryGraph, cfg: GraphGPOConfig
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """The two GraphGPO terms of every step, before weighting, and diagnostics.

    Returns:
        (episode, graph_term, metrics): (N,) float64 A^E and A^G, and scalar metrics.
    """
    cost = edge_costs(batch, cfg.edge_cost)
    t0 = time.perf_counter()
    returns, d_next = graph_returns(
        graph, batch, cost, cfg.omega, cfg.success_reward, cfg.convention
    )
    elapsed = time.perf_counter() - t0
    graph_term = normalise(returns, graph.step_state, graph.n_states, cfg.mode, cfg.epsilon)
    if cfg.episode_stats == "step":
        rows = row_episode_rewards(batch, cfg.invalid_penalty)
        episode = row_episode_advantage(
            rows, batch.step_group, batch.n_groups, cfg.mode, cfg.epsilon
        )
    else:
        per_traj = episode_advantage(
            batch.traj_return, batch.traj_group, batch.n_groups, cfg.mode, cfg.epsilon
        )
        episode = per_traj[batch.step_traj]
    won_groups = np.zeros(batch.n_groups, dtype=bool)
    won_groups[batch.traj_group[batch.traj_won]] = True
    metrics = {
        "shortest_path_s": elapsed,
        "graph_adv_std": safe_std(graph_term),
        "episode_adv_std": safe_std(episode),
        "mean_next_distance": safe_mean(d_next),
        "success_group_frac": float(won_groups.mean()) if batch.n_groups else 0.0,
    }
    return episode, graph_term, metrics


@register_estimator("graphgpo", config=GraphGPOConfig, needs_graph=True)
def graphgpo(batch: StepBatch, graph: TrajectoryGraph, cfg: GraphGPOConfig) -> Advantages:
    """GraphGPO advantage β^G·A^G + β^E·A^E per step: (N,) float64."""
    episode, graph_term, metrics = graphgpo_components(batch, graph, cfg)
    return Advantages(
        step=cfg.beta_graph * graph_term + cfg.beta_episode * episode, metrics=metrics
    )
