"""CRBC: Cross-Rollout Bellman Closure step credit (docs/methods.md#crbc, arXiv 2609.35082).

The G rollouts of a group are merged into one empirical process over anchor states (built once
per batch by :func:`agentrl.credit.graph.build_graph`; Eq. 5, no smoothing):
P(x|s, a) = N(s, a, x) / N(s, a) and μ(a|s) = N(s, a) / N(s). The outcome is binary,
R_i = ``traj_won`` (time-limit truncation is failure), and enters only through the absorbing
boundary values V(z⁺) = 1, V(z⁻) = 0. With the backups (Eq. 7)

    (B V)(s, a) = β Σ_x P(x|s, a) V(x),        (T V)(s) = Σ_a μ(a|s) (B V)(s, a),

the closure (Eqs. 8-9) is the fixed point V = T V, i.e. the linear system

    (I − β M) V = b,   M(s, s') = Σ_a μ(a|s) P(s'|s, a),   b(s) = β Σ_a μ(a|s) P(z⁺|s, a),

solved ONCE for the whole batch by a sparse LU factorisation (the matrix is block-diagonal by
group, so one factorisation never mixes groups); then Q = B V. V(s) is the β-discounted success
probability of the group's own behaviour from s. The finite-depth family (Eq. 10) starts from
the visit-local averages (Eq. 6), with 1-based turns t = 1..T_i,

    G_{i,t} = β^{T_i − t + 1} R_i   (the last step gets β R_i, matching Q = β V(z⁺) there),
    Q⁽⁰⁾(s, a) = mean of G over the occurrences of (s, a),   V⁽⁰⁾(s) = mean of G over visits,

and applies K backups: V⁽ᴷ⁾ = Tᴷ V⁽⁰⁾, Q⁽ᴷ⁾ = B V⁽ᴷ⁻¹⁾ (K sparse mat-vecs; K = 0 is GiGPO-like
visit-local averaging, K → ∞ the closure, with ‖A⁽∞⁾ − A⁽ᴷ⁾‖_∞ ≤ 2βᴷ/(1−β)‖T V⁽⁰⁾ − V⁽⁰⁾‖_∞).
Step credit (Eq. 13) per (state, action) pair, shared by every occurrence of the pair:

    A^S(s, a) = 1{|A(s)| ≥ 2} (Q(s, a) − V(s)) / max(σ(s), σ_min),
    σ(s)² = Σ_a μ(a|s) (Q(s, a) − V(s))²,

and the final advantage (Eq. 14) is A_{i,t} = w_G A^G_i + w_S A^S(s_{i,t}, a_{i,t}), with A^G the
GRPO z-score (or RLOO) of the trajectory's return. Shapes: N steps, M trajectories, S states,
A (state, action) pairs.

Departures and choices:

- A^G is computed from ``traj_return`` (the environment's reward, e.g. 10 for success, with
  invalid-action penalties), as the base optimiser would; only the closure uses the binary R.
- β = 1 and states that cannot reach success. States from which z⁺ is unreachable in the
  empirical graph have V = 0 exactly, for every β ≤ 1; their rows of the system are replaced by
  V(s) = 0 before factorising. On the remaining states, every state reaches z⁺ along edges of
  positive probability that stay among such states, so their part of M has spectral radius < 1
  and I − βM is non-singular even at β = 1: the solve is exact, without a leak or least squares.
  (For a graph built from data I − M is never singular anyway, since every visited state lies
  on a trajectory that ends at a boundary; the guard matters for hand-built graphs with a
  closed cycle, where the naive system is singular.)
- The factorisation uses SuperLU's natural ordering: states are numbered by first visit within
  each group, so transitions mostly point forward and the matrix is close to triangular. On two
  1M-step stress tests (288k states; random anchors, and a grid walk with wall self-loops)
  NATURAL was the fastest of SuperLU's orderings: 0.48 / 0.37 s against 0.86 / 0.65 s for
  COLAMD and 1.0 / 0.7 s for MMD_AT_PLUS_A, despite more fill (3.4M vs 2.3-2.5M nonzeros in
  L + U on the random test). SuperLU's supernode options are at their smallest
  (``relax=1, panel_size=1``): the factors of these very sparse systems have almost no dense
  panels to gain from, and on batches of 0.5-1M steps from random MDPs (55k-183k states) the
  factorisation took 1.0-2.4× less time than with the defaults (0.019 against 0.047 s at 100k
  states), the values agreeing to 2e-15. Large relaxations are avoided: ``relax=30``
  segfaulted intermittently here (scipy 1.17).

Metrics (logged under ``credit/``): ``linear_solve_s`` (time to get V and Q: the factorisation
and solve, or the K mat-vecs), ``n_states``, ``gated_state_frac`` (states with fewer than two
distinct actions) and ``step_credit_abs_mean`` (mean |A^S| over steps, before w_S).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse import csgraph

from agentrl.algos.grpo import GRPOConfig, grpo_traj_advantage
from agentrl.algos.rloo import rloo_traj_advantage
from agentrl.configuration import check, check_choice
from agentrl.credit import Advantages, register_estimator, steps_from_end
from agentrl.credit.batch import StepBatch
from agentrl.credit.graph import TrajectoryGraph


@dataclass(frozen=True)
class CRBCConfig:
    """Options of CRBC (defaults from the paper, docs/methods.md#crbc)."""

    beta: float = 0.98
    """Discount β in (0, 1]; V(s) is the β-discounted success probability."""
    depth: int = -1
    """Closure depth K: −1 solves the exact closure (K = ∞); K ≥ 0 applies K backups."""
    w_group: float = 1.0
    """Weight w_G of the trajectory-level base advantage A^G."""
    w_step: float = 5.0
    """Weight w_S of the step credit A^S."""
    sigma_min: float = 0.1
    """Floor on the per-state credit scale σ(s)."""
    base: Literal["grpo", "rloo"] = "grpo"
    """Base advantage A^G: GRPO z-score of the return, or RLOO (leave-one-out mean)."""
    norm_by_std: bool = True
    """For the GRPO base: divide by the group's std (false gives Dr.GRPO)."""
    epsilon: float = 1e-6
    """For the GRPO base: added to the group's std; 0 is allowed (all-equal groups give 0)."""

    def __post_init__(self) -> None:
        check(0.0 < self.beta <= 1.0, "algo.beta", self.beta, "in (0, 1]")
        check(
            isinstance(self.depth, int) and self.depth >= -1,
            "algo.depth",
            self.depth,
            "an integer >= -1 (-1 = exact closure)",
        )
        check(np.isfinite(self.w_group) and self.w_group >= 0, "algo.w_group", self.w_group, ">= 0")
        check(np.isfinite(self.w_step) and self.w_step >= 0, "algo.w_step", self.w_step, ">= 0")
        check(
            np.isfinite(self.sigma_min) and self.sigma_min > 0,
            "algo.sigma_min",
            self.sigma_min,
            "> 0 (it keeps states whose actions all have equal value from dividing by 0)",
        )
        check_choice("algo.base", self.base, ("grpo", "rloo"))
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")


def _boundary_extended(values: np.ndarray) -> np.ndarray:
    """(S + 2,) the state values followed by V(z⁺) = 1 and V(z⁻) = 0."""
    return np.concatenate((values, (1.0, 0.0)))


def backup_q(graph: TrajectoryGraph, V: np.ndarray, beta: float) -> np.ndarray:
    """(A,) (B V)(s, a) = β Σ_x P(x|s, a) V(x), with the boundary values (Eq. 7)."""
    return beta * (graph.P @ _boundary_extended(V))


def _reaches_success(graph: TrajectoryGraph, M: sp.csr_matrix, p_success: np.ndarray) -> np.ndarray:
    """(S,) bool — states from which z⁺ is reachable along edges of positive probability."""
    S = graph.n_states
    coo = M.tocoo()
    keep = coo.data > 0
    into_success = np.flatnonzero(p_success > 0)
    # Reversed edges (successor -> state), node S standing for z⁺; a breadth-first search from
    # z⁺ over them finds every state with a path to success.
    rows = np.concatenate((coo.col[keep], np.full(into_success.shape[0], S)))
    cols = np.concatenate((coo.row[keep], into_success))
    reverse = sp.csr_matrix((np.ones(rows.shape[0]), (rows, cols)), shape=(S + 1, S + 1))
    found = csgraph.breadth_first_order(reverse, S, directed=True, return_predecessors=False)
    live = np.zeros(S + 1, dtype=bool)
    live[found] = True
    return live[:S]


def closure_values(graph: TrajectoryGraph, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """The exact closure (Eqs. 8-9): one sparse direct solve of (I − βM) V = b, then Q = B V.

    States that cannot reach success get V = 0 exactly (their rows are set to V(s) = 0), which
    keeps the system non-singular at β = 1 (module docstring).

    Args:
        graph: the batch's graph (μ, P over S states and A pairs).
        beta: discount in (0, 1].
    Returns:
        (V, Q): V (S,) float64 state values, Q (A,) float64 pair values.
    """
    S = graph.n_states
    if S == 0:
        return np.zeros(0), np.zeros(graph.n_pairs)
    M = graph.transition_matrix()  # (S, S) CSR
    p_success, _ = graph.absorb_probability()  # (S,)
    live = _reaches_success(graph, M, p_success)  # (S,)
    # Zero the rows of states that cannot reach success: their equation becomes V(s) = 0 (the
    # true value) and b(s) is 0 there already.
    M.data *= np.repeat(live, np.diff(M.indptr))
    system = (sp.identity(S, format="csr") - beta * M).tocsc()
    rhs = beta * np.where(live, p_success, 0.0)
    V = spla.splu(system, permc_spec="NATURAL", relax=1, panel_size=1).solve(rhs)  # (S,)
    return V, backup_q(graph, V, beta)


def visit_returns(batch: StepBatch, beta: float) -> np.ndarray:
    """(N,) G_{i,t} = β^{T_i − t + 1} R_i with 1-based t and R_i = ``traj_won`` (Eq. 6)."""
    after = steps_from_end(batch.step_traj)  # T_i − t, 0 at the last step
    won = batch.traj_won[batch.step_traj].astype(np.float64)
    return beta ** (after + 1.0) * won


def finite_depth_values(
    graph: TrajectoryGraph, batch: StepBatch, beta: float, depth: int
) -> tuple[np.ndarray, np.ndarray]:
    """Depth-K values (Eq. 10): V⁽ᴷ⁾ = Tᴷ V⁽⁰⁾ and Q⁽ᴷ⁾ = B V⁽ᴷ⁻¹⁾ (Q⁽⁰⁾ for K = 0).

    Args:
        graph: the graph of ``batch``.
        batch: the steps (for the visit-local returns G_{i,t}).
        beta: discount in (0, 1].
        depth: K ≥ 0, the number of backups.
    Returns:
        (V, Q): V (S,) float64, Q (A,) float64; V = Σ_a μ(a|s) Q(s, a) at every depth.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth} (use closure_values for K = ∞)")
    ret = visit_returns(batch, beta)  # (N,)
    S, A = graph.n_states, graph.n_pairs
    V = np.bincount(graph.step_state, weights=ret, minlength=S) / np.maximum(graph.state_count, 1)
    Q = np.bincount(graph.step_sa, weights=ret, minlength=A) / np.maximum(graph.sa_count, 1)
    for _ in range(depth):
        Q = backup_q(graph, V, beta)  # (A,) Q⁽ᵏ⁾ = B V⁽ᵏ⁻¹⁾
        V = graph.mu @ Q  # (S,) V⁽ᵏ⁾ = T V⁽ᵏ⁻¹⁾
    return V, Q


def step_credit(
    graph: TrajectoryGraph, V: np.ndarray, Q: np.ndarray, sigma_min: float
) -> np.ndarray:
    """Normalised, gated credit per (state, action) pair (Eq. 13).

    Args:
        graph: the graph the values belong to.
        V: (S,) state values.
        Q: (A,) pair values.
        sigma_min: floor on σ(s), > 0.
    Returns:
        (A,) float64 credit; 0 at states with fewer than two distinct observed actions.
    """
    if V.shape != (graph.n_states,) or Q.shape != (graph.n_pairs,):
        raise ValueError(
            f"V {V.shape} and Q {Q.shape} must be ({graph.n_states},) and ({graph.n_pairs},)"
        )
    adv = Q - V[graph.sa_state]  # (A,)
    sigma = np.sqrt(graph.mu @ (adv * adv))  # (S,)
    scale = np.maximum(sigma, sigma_min)[graph.sa_state]  # (A,)
    gate = (graph.distinct_actions() >= 2)[graph.sa_state]  # (A,)
    return np.where(gate, adv / scale, 0.0)


@register_estimator("crbc", config=CRBCConfig, needs_graph=True)
def crbc(batch: StepBatch, graph: TrajectoryGraph, cfg: CRBCConfig) -> Advantages:
    """CRBC advantage w_G A^G_i + w_S A^S(s_{i,t}, a_{i,t}) per step: (N,) float64."""
    t0 = time.perf_counter()
    if cfg.depth < 0:
        V, Q = closure_values(graph, cfg.beta)
    else:
        V, Q = finite_depth_values(graph, batch, cfg.beta, cfg.depth)
    solve_s = time.perf_counter() - t0
    step_s = step_credit(graph, V, Q, cfg.sigma_min)[graph.step_sa]  # (N,)
    if cfg.base == "grpo":
        base_cfg = GRPOConfig(norm_by_std=cfg.norm_by_std, epsilon=cfg.epsilon)
        traj_g = grpo_traj_advantage(batch.traj_return, batch.traj_group, batch.n_groups, base_cfg)
    else:
        traj_g = rloo_traj_advantage(batch.traj_return, batch.traj_group, batch.n_groups)
    step = cfg.w_group * traj_g[batch.step_traj] + cfg.w_step * step_s
    gated = graph.distinct_actions() < 2
    metrics = {
        "linear_solve_s": solve_s,
        "n_states": float(graph.n_states),
        "gated_state_frac": float(gated.mean()) if graph.n_states else 0.0,
        "step_credit_abs_mean": float(np.abs(step_s).mean()) if batch.n_steps else 0.0,
    }
    return Advantages(step=step, metrics=metrics)
