"""Trajectory graphs: the rollouts of each group merged into one graph over anchor states.

Nodes are the anchor states of the batch (``StepBatch.step_anchor``: anchors never match across
groups) plus two absorbing nodes, *success* and *failure*. Edges count (state, executed action,
next state) transitions. Actions are *semantic* — the executed action string — so different
responses that execute the same action share statistics. The successor of a trajectory's last
step is *success* if the trajectory won and *failure* otherwise; time-limit truncation therefore
goes to *failure* (STYLE.md convention 1).

From the counts N(s, a, x), N(s, a) and N(s) the graph holds the group's empirical process as
sparse matrices (docs/methods.md#crbc, Eq. 5; no smoothing):

- ``mu``: (S, A) with μ(a|s) = N(s, a) / N(s) in the column of the (s, a) pair,
- ``P``:  (A, S + 2) with P(x|s, a) = N(s, a, x) / N(s, a); columns S and S + 1 are the
  success and failure nodes.

Here S is the number of states and A the number of distinct (state, action) pairs in the whole
batch. Because states of different groups never connect, every matrix is block-diagonal by
group, and states are numbered group by group. The graph is built once per batch
(:func:`build_graph`, vectorised: about a second for a million steps) and shared by every
estimator that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class TrajectoryGraph:
    """The batch's merged graph; shapes use S states, A (state, action) pairs, N steps.

    Attributes:
        n_states: S, the number of anchor states (absorbing nodes excluded).
        state_group: (S,) int64 — group of each state.
        step_state: (N,) int64 — state of each step, in [0, S).
        step_sa: (N,) int64 — (state, action) pair of each step, in [0, A).
        step_next: (N,) int64 — successor node of each step: a state, or S (success) or
            S + 1 (failure).
        sa_state: (A,) int64 — state of each pair.
        sa_action: (A,) int64 — action id of each pair (``action_names`` gives the text).
        sa_count: (A,) float64 — N(s, a).
        state_count: (S,) float64 — N(s).
        mu: (S, A) CSR — behaviour policy μ(a|s).
        P: (A, S + 2) CSR — transitions P(x|s, a).
        action_names: the executed-action strings, indexed by action id.
    """

    n_states: int
    state_group: np.ndarray
    step_state: np.ndarray
    step_sa: np.ndarray
    step_next: np.ndarray
    sa_state: np.ndarray
    sa_action: np.ndarray
    sa_count: np.ndarray
    state_count: np.ndarray
    mu: sp.csr_matrix
    P: sp.csr_matrix
    action_names: tuple[str, ...] = ()

    @property
    def success(self) -> int:
        """Node id of the absorbing success node."""
        return self.n_states

    @property
    def failure(self) -> int:
        """Node id of the absorbing failure node."""
        return self.n_states + 1

    @property
    def n_pairs(self) -> int:
        return int(self.sa_state.shape[0])

    def transition_matrix(self) -> sp.csr_matrix:
        """M: (S, S) CSR with M(s, s') = Σ_a μ(a|s) P(s'|s, a) over non-absorbing states."""
        return (self.mu @ self.P[:, : self.n_states]).tocsr()

    def absorb_probability(self) -> tuple[np.ndarray, np.ndarray]:
        """(S,) one-step probabilities Σ_a μ(a|s) P(z|s, a) of reaching success and failure."""
        p_to = self.mu @ self.P[:, self.n_states :]  # (S, 2)
        p_to = np.asarray(p_to.todense()) if sp.issparse(p_to) else p_to
        return p_to[:, 0], p_to[:, 1]

    def distinct_actions(self) -> np.ndarray:
        """(S,) int64 — number of distinct actions observed at each state."""
        return np.bincount(self.sa_state, minlength=self.n_states)

    def to_networkx(self, group: int | None = None):
        """A ``networkx.MultiDiGraph`` of the graph (or of one group).

        State nodes are ints with attributes ``group`` and ``visits``; the absorbing nodes are
        ``"success"`` and ``"failure"``. Each edge is one (action, next state) with attributes
        ``action`` (text), ``count`` = N(s, a, x) and ``p`` = P(x|s, a); it is keyed by the
        action text.
        """
        import networkx as nx

        g = nx.MultiDiGraph()
        states = np.arange(self.n_states)
        if group is not None:
            states = states[self.state_group == group]
        keep = np.zeros(self.n_states, dtype=bool)
        keep[states] = True
        for s in states:
            g.add_node(int(s), group=int(self.state_group[s]), visits=int(self.state_count[s]))
        g.add_node("success")
        g.add_node("failure")
        coo = self.P.tocoo()
        for a, x, p in zip(coo.row, coo.col, coo.data):
            s = int(self.sa_state[a])
            if not keep[s]:
                continue
            target = "success" if x == self.success else "failure" if x == self.failure else int(x)
            name = self._action_name(int(self.sa_action[a]))
            count = round(float(p * self.sa_count[a]))
            g.add_edge(s, target, key=name, action=name, count=count, p=float(p))
        return g

    def _action_name(self, action: int) -> str:
        return self.action_names[action] if action < len(self.action_names) else str(action)

    def draw(self, group: int, path: str | Path, values: np.ndarray | None = None) -> Path:
        """Draw one group's graph to a PNG, states coloured by ``values`` (e.g. V, shape (S,)).

        Needs matplotlib (the ``plot`` or ``dev`` extra).
        """
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import networkx as nx

        g = self.to_networkx(group)
        simple = nx.DiGraph(g)  # one arrow per (s, x); labels list the actions
        try:
            pos = nx.nx_agraph.graphviz_layout(simple, prog="dot")
        except (ImportError, OSError):
            pos = nx.kamada_kawai_layout(simple) if len(simple) > 2 else nx.spring_layout(simple)
        fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(simple)), max(4, 0.4 * len(simple))))
        states = [n for n in simple if isinstance(n, int)]
        colours = (
            [float(values[n]) for n in states] if values is not None else ["#9ecae1"] * len(states)
        )
        drawn = nx.draw_networkx_nodes(
            simple, pos, nodelist=states, node_color=colours, cmap="viridis", ax=ax, node_size=300
        )
        nx.draw_networkx_nodes(simple, pos, nodelist=["success"], node_color="#31a354", ax=ax)
        nx.draw_networkx_nodes(simple, pos, nodelist=["failure"], node_color="#de2d26", ax=ax)
        nx.draw_networkx_labels(simple, pos, font_size=7, ax=ax)
        nx.draw_networkx_edges(simple, pos, ax=ax, arrows=True, alpha=0.5)
        labels = {}
        for u, v, data in g.edges(data=True):
            labels.setdefault((u, v), []).append(f"{data['action']}×{data['count']}")
        nx.draw_networkx_edge_labels(
            simple, pos, {k: "\n".join(v) for k, v in labels.items()}, font_size=6, ax=ax
        )
        if values is not None:
            fig.colorbar(drawn, ax=ax, label="value")
        ax.set_title(f"group {group}: {len(states)} states")
        ax.axis("off")
        path = Path(path)
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        return path


def build_graph(batch: StepBatch) -> TrajectoryGraph:
    """Merge every group of ``batch`` into one :class:`TrajectoryGraph` (vectorised)."""
    n = batch.n_steps
    # Renumber anchors densely; anchor ids are per (group, anchor), so groups stay apart and,
    # since ids were handed out group by group, the numbering stays grouped.
    uniq, step_state = np.unique(batch.step_anchor, return_inverse=True)
    step_state = step_state.astype(np.int64).reshape(-1)
    n_states = int(uniq.shape[0])
    step_group = batch.step_group
    state_group = np.zeros(n_states, dtype=np.int64)
    state_group[step_state] = step_group

    # Successor: the next step's state within the trajectory, else success/failure.
    step_next = np.empty(n, dtype=np.int64)
    if n:
        last = np.ones(n, dtype=bool)
        last[:-1] = batch.step_traj[1:] != batch.step_traj[:-1]
        step_next[:-1] = step_state[1:]
        won = batch.traj_won[batch.step_traj]
        step_next[last] = np.where(won[last], n_states, n_states + 1)

    n_actions = int(batch.step_action.max()) + 1 if n else 1
    sa_key = step_state * n_actions + batch.step_action
    sa_uniq, step_sa = np.unique(sa_key, return_inverse=True)
    step_sa = step_sa.astype(np.int64).reshape(-1)
    n_pairs = int(sa_uniq.shape[0])
    sa_state = sa_uniq // n_actions
    sa_action = sa_uniq % n_actions
    sa_count = np.bincount(step_sa, minlength=n_pairs).astype(np.float64)
    state_count = np.bincount(step_state, minlength=n_states).astype(np.float64)

    mu = sp.csr_matrix(
        (sa_count / state_count[sa_state], (sa_state, np.arange(n_pairs))),
        shape=(n_states, n_pairs),
    )
    counts = sp.csr_matrix(
        (np.ones(n), (step_sa, step_next)), shape=(n_pairs, n_states + 2)
    )  # duplicates are summed: N(s, a, x)
    P = (sp.diags(1.0 / np.maximum(sa_count, 1.0)) @ counts).tocsr()
    return TrajectoryGraph(
        n_states=n_states,
        state_group=state_group,
        step_state=step_state,
        step_sa=step_sa,
        step_next=step_next,
        sa_state=sa_state,
        sa_action=sa_action,
        sa_count=sa_count,
        state_count=state_count,
        mu=mu,
        P=P,
        action_names=batch.action_names,
    )
