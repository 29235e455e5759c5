"""TIGPO: graph credit from a transition graph kept per task across updates, plus a score
reference from the task's earlier group.

docs/methods.md#tigpo (Gan, *Temporal Instance-Graph Policy Optimization*, arXiv 2609.03383;
abstract and a third-party digest only, no public code). GraphGPO (arXiv 2605.26684) rebuilds a
per-task graph every update and throws it away; TIGPO keeps one graph H_x per task instance x
across updates, so transitions found by earlier policies shape today's distances, and compares
a re-run of a task with that task's earlier group. History only changes the credit: old tokens
and log-probs never reach the loss. Shapes: N steps, M trajectories, ``n_groups`` task groups.

**Computes**, at update u (the u-th call), for each task group g of task x:

1. Task identity κ(x) (:func:`task_keys`): the task goal plus its initial configuration, i.e.
   the group's cluster key (``batch.group_cluster``), its initial anchor(s) and the user message
   of its first turn (task text + initial observation), hashed. The G rollouts of a task share
   it, in every batch and every process; different tasks with equal anchors never share a graph.
2. Nodes are anchors, hashed (:func:`node_key`, so anchor keys need a process-stable ``repr``:
   str, int, tuples of those); s⁺ is the success sink. Each step (i, t) is an edge occurrence
   s_{i,t} → s'_{i,t}, with s' the next step's anchor, s⁺ after the last step of a won
   trajectory, and a dead end after the last step of a failed or truncated one (agentrl does
   not record the anchor of the state after the last step; a dead end has no way out, which is
   where GraphGPO puts a final state that lies on no success path). Edge cost 1.
3. Ḡ_x = H_x ∪ G_x, G_x the transitions of the current groups of x. Distance to the goal by
   reverse breadth-first search from s⁺: d̄(s⁺) = 0, d̄(s) = min over out-edges of 1 + d̄(s');
   nodes that cannot reach s⁺ get d_max + 1, d_max the largest finite distance in Ḡ_x (so with
   no success anywhere every node is at 1 and the graph term is 0, as in GraphGPO).
4. Graph return of each *current* occurrence: q_{i,t} = C·γ_g^{d̄(s'_{i,t})}, C = 10.
5. Â^TG: q standardised within the same-source group of current occurrences (the steps of the
   task group leaving the same anchor): (q − mean)/(std + ε), unbiased std; one occurrence or
   zero variance ⇒ 0. [R] Historical edges shape d̄ but are not group members.
6. Episode term on the episode score Z_i = R_i (the trajectory's return, invalid-action
   penalties included). A task whose earlier group is in the store (a *revisit*) gets the
   cross-temporal advantage Â^CT_j = (Z_{R,j} − mean Z)/(std Z + ε) over Z = [Z_E; Z_R], Z_E
   the stored scores of the earlier group (fixed data, unbiased std over all |E| + |R|) [R: the
   exact normalisation]; a first visit (an *exploration* group), or a revisit whose earlier
   group is missing or older than ``max_reference_age`` updates, gets GRPO's Â^ep
   (:func:`agentrl.algos.grpo.grpo_traj_advantage`).
7. Â_{i,t} = λ_step·Â^TG_{i,t} + λ_ep·(Â^CT or Â^ep)_i.
8. After the advantages, the store is updated: the valid-action transitions of the current
   groups are merged into H_x [R: only valid actions; one edge per (s, s'), costs are all 1],
   each stamped with u; the task's reference becomes the current groups' scores (its n, mean and
   sum of squared deviations, which is all step 6 needs); then the bound below is enforced.
   ``mode=mean_norm`` drops every division by std + ε (centring only).

With no history (the first call, or a task not in the store) the result is GraphGPO's
graph advantage plus GRPO's one-vote-per-trajectory episode advantage.

**State** (plain data, :func:`agentrl.credit.check_state`; kept by the trainer and saved with
checkpoints, so a resumed run continues exactly)::

    {"updates": u,
     "tasks": {κ: {"last": int,                      # update that last saw the task
                   "edges": {s: {s': int}},          # H_x: edge → update that last saw it
                   "ref": {"n": int, "mean": float, "m2": float, "update": int}}}}

Keys are 16 hex digits of a SHA-1 (``"+"`` is s⁺). **Bound**: at most ``max_tasks`` tasks,
each with at most ``max_edges`` edges (so at most 2·``max_edges`` + 1 nodes) and one reference
of four numbers. **Eviction** (deterministic, after the merge): a task's edges beyond
``max_edges`` go least recently seen first (ties: the lexicographically larger (s, s') goes
first); tasks beyond ``max_tasks`` go least recently seen first (ties: the larger key goes
first), graph and reference together. The input state is never modified (untouched task
entries are shared, not copied, with the new state).

**Departures.** (1) The paper never deletes from H_x; a bound is needed for a long run, so we
evict by recency (an evicted edge can only lengthen distances). (2) We cap edges rather than nodes:
that bounds the nodes too and fixes the state's size. (3) Revisit *scheduling* (B_E
exploration + B_R revisit groups, revisit delay Δ = 10) is a sampler's job and is not part of
this estimator: any group whose task was seen at an earlier update is treated as a revisit of
the latest such group. (4) The failed final state is a dead end (see step 2). (5) The score is
the trajectory's return (one vote per trajectory), not verl-agent's per-row episode reward.
(6) Several groups of one task in the same batch share G_x and their scores together become the
task's reference; same-source groups and the GRPO term stay per group.

**Defaults** (``TIGPOConfig``): γ_g = 0.10 (the paper's ALFWorld value; 0.20 for WebShop),
C = 10, λ_step = λ_ep = 1, ``mean_std_norm``, ε = 1e-6, cross-temporal reference on and of any
age, 1024 tasks × 1024 edges.

Termination: like GraphGPO it prefers shorter paths to success by design (the graph return
falls with the distance to s⁺ whatever the rewards on the way; see
:mod:`agentrl.credit.properties`). Identical groups: identical successful rollouts that revisit
an anchor get nonzero graph terms, because their visits of it leave towards successors at
different distances to s⁺.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from agentrl.algos._common import safe_std
from agentrl.algos.gigpo import NORM_MODES, NormMode, step_advantage
from agentrl.algos.grpo import GRPOConfig, grpo_traj_advantage
from agentrl.configuration import check, check_choice
from agentrl.credit import Advantages, register_estimator
from agentrl.credit.batch import StepBatch

SUCCESS = "+"
"""Node key of the success sink s⁺."""
DEAD_END = "-"
"""Successor of the last step of a failed or truncated trajectory (never stored; internally it
is no node at all, since it reaches nothing)."""


@dataclass(frozen=True)
class TIGPOConfig:
    """Options of TIGPO (see the module docstring)."""

    graph_discount: float = 0.1
    """γ_g of q = C·γ_g^d̄ (the paper: 0.10 ALFWorld, 0.20 WebShop)."""
    success_value: float = 10.0
    """C, the graph return of an edge into s⁺."""
    step_weight: float = 1.0
    """λ_step: weight of the temporal graph advantage Â^TG."""
    episode_weight: float = 1.0
    """λ_ep: weight of the episode advantage (Â^CT for revisits, Â^ep otherwise)."""
    mode: NormMode = "mean_std_norm"
    """``mean_std_norm`` divides every term by its std + ε, ``mean_norm`` only centres."""
    epsilon: float = 1e-6
    """Added to each std."""
    cross_temporal: bool = True
    """Score revisits against the task's earlier group (Â^CT); false gives GRPO's Â^ep to
    every group (the paper's ablation without the cross-temporal reference)."""
    max_reference_age: int = 0
    """Oldest earlier group (in updates) a revisit is compared with; 0 = any age."""
    max_tasks: int = 1024
    """Most tasks kept in the state (least recently seen evicted first)."""
    max_edges: int = 1024
    """Most edges kept per task (least recently seen evicted first); 0 keeps no graph, i.e.
    GraphGPO's batch-local graph (the paper's ablation without the persistent graph)."""

    def __post_init__(self) -> None:
        check(0 < self.graph_discount <= 1, "algo.graph_discount", self.graph_discount,
              "in (0, 1]")  # fmt: skip
        check(self.success_value > 0, "algo.success_value", self.success_value, "> 0")
        check(self.step_weight >= 0, "algo.step_weight", self.step_weight, ">= 0")
        check(self.episode_weight >= 0, "algo.episode_weight", self.episode_weight, ">= 0")
        check_choice("algo.mode", self.mode, NORM_MODES)
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")
        check(_is_int(self.max_reference_age) and self.max_reference_age >= 0,
              "algo.max_reference_age", self.max_reference_age, "an integer >= 0")  # fmt: skip
        check(_is_int(self.max_tasks) and self.max_tasks >= 1, "algo.max_tasks",
              self.max_tasks, "an integer >= 1")  # fmt: skip
        check(_is_int(self.max_edges) and self.max_edges >= 0, "algo.max_edges",
              self.max_edges, "an integer >= 0")  # fmt: skip


def _is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]


def node_key(anchor: Hashable) -> str:
    """The persistent key of an anchor: 16 hex digits of the SHA-1 of its ``repr``."""
    return _digest(repr(anchor))


# --- keys: every distinct anchor and task signature is hashed once per batch ---


@dataclass(frozen=True)
class _Keys:
    """The persistent keys of a batch, as indices into sorted lists of strings (so comparing
    indices compares the strings, which fixes every order the state depends on)."""

    names: list[str]
    """Sorted distinct node keys of the anchors that steps visit."""
    anchor_node: np.ndarray
    """(len(anchor_keys),) int64: index in ``names`` of each anchor id; −1 where no step
    visits it."""
    tasks: list[str]
    """Sorted distinct task keys κ."""
    group_task: np.ndarray
    """(n_groups,) int64: index in ``tasks`` of each group's κ."""


def _batch_keys(batch: StepBatch) -> _Keys:
    """Node and task keys of a batch (see :func:`node_key`, :func:`task_keys`)."""
    if batch.anchor_keys is None:
        raise ValueError(
            "tigpo keeps a graph of anchors across iterations, but this StepBatch has no "
            "anchor_keys (anchor ids are only valid within one batch): build it with "
            "StepBatch.from_groups"
        )
    keys = batch.anchor_keys
    visited = np.flatnonzero(np.bincount(batch.step_anchor, minlength=len(keys)))
    vals: list[Any] = [keys[a] for a in visited.tolist()]
    # Anchor ids are interned per group, so a batch holds each anchor many times; hashing
    # each distinct one once is most of the saving. A key hashes its repr: equal str have
    # equal reprs, so str are deduplicated by value, anything else by its repr (wrapped in a
    # 1-tuple, which equals no str), since e.g. 1 == True == 1.0 have different reprs.
    if set(map(type, vals)) - {str}:
        vals = [k if type(k) is str else (repr(k),) for k in vals]
    distinct = {k: i for i, k in enumerate(dict.fromkeys(vals))}
    hashed = [_digest(repr(k) if type(k) is str else k[0]) for k in distinct]
    names = sorted(set(hashed))
    where = {h: i for i, h in enumerate(names)}
    to_name = np.array([where[h] for h in hashed], dtype=np.int64)
    anchor_node = np.full(len(keys), -1, dtype=np.int64)
    anchor_node[visited] = to_name[
        np.fromiter(map(distinct.__getitem__, vals), np.int64, len(vals))
    ]

    # κ of each group from its signature (cluster, start nodes, first prompts) as one row of
    # ints; groups with equal rows share κ, so only distinct rows are hashed.
    n_groups = batch.n_groups
    if n_groups == 0:
        return _Keys(names, anchor_node, [], np.zeros(0, dtype=np.int64))
    clusters = batch.group_cluster or ("",) * n_groups
    first = np.flatnonzero(batch.step_t == 0)  # (≤ M,) first step of each trajectory
    first_group = batch.step_group[first]
    by_repr: dict[str, int] = {}  # the digest sees repr(cluster): key clusters by it
    cluster = np.array([by_repr.setdefault(repr(c), len(by_repr)) for c in clusters])
    starts = _sets_by_group(
        first_group, anchor_node[batch.step_anchor[first]], len(names), n_groups
    )
    prompt_list: list[str] = []
    prompts = np.zeros((n_groups, 0), dtype=np.int64)
    if batch.texts is not None:
        texts = [batch.texts.prompts[n] for n in first.tolist()]
        prompt_list = sorted(set(texts))
        rank = {p: i for i, p in enumerate(prompt_list)}
        ids = np.fromiter(map(rank.__getitem__, texts), np.int64, len(texts))
        prompts = _sets_by_group(first_group, ids, len(prompt_list), n_groups)
    rows = np.concatenate([cluster.reshape(-1, 1), starts, prompts], axis=1)
    _, first_row, row_of = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    digests = []
    for g in first_row.tolist():  # the key of one distinct signature
        start_keys = [names[i] for i in starts[g].tolist() if i >= 0]
        prompt_keys = [prompt_list[i] for i in prompts[g].tolist() if i >= 0]
        digests.append(_digest(repr((clusters[g], start_keys, prompt_keys))))
    tasks = sorted(set(digests))
    where = {k: i for i, k in enumerate(tasks)}
    group_task = np.array([where[k] for k in digests], dtype=np.int64)[row_of.reshape(-1)]
    return _Keys(names, anchor_node, tasks, group_task)


def _sets_by_group(group: np.ndarray, ids: np.ndarray, n_ids: int, n_groups: int) -> np.ndarray:
    """(n_groups, W) int64: the distinct ``ids`` of each group in increasing order, padded
    with −1 (W the most any group has)."""
    key = _sorted_unique(group * max(n_ids, 1) + ids)
    g, i = np.divmod(key, max(n_ids, 1))
    count = np.bincount(g, minlength=n_groups)
    out = np.full((n_groups, int(count.max(initial=0))), -1, dtype=np.int64)
    out[g, np.arange(key.size) - (np.cumsum(count) - count)[g]] = i
    return out


def task_keys(batch: StepBatch) -> tuple[str, ...]:
    """κ of each task group: (n_groups,) keys, equal for groups of the same task instance.

    The hash of the group's cluster key, the sorted distinct initial anchors of its
    trajectories and the sorted distinct user messages of their first turns (when the batch
    has texts). It depends on nothing but the group's own contents, so it is the same in every
    batch, process and position of the group.
    """
    keys = _batch_keys(batch)
    return tuple(keys.tasks[t] for t in keys.group_task.tolist())


# --- array helpers ---


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """The distinct values of an int array, increasing (a sort and a mask: numpy's own
    ``np.unique`` hashes large int arrays, which is much slower here)."""
    a = np.sort(a)
    keep = np.ones(a.size, dtype=bool)
    keep[1:] = a[1:] != a[:-1]
    return a[keep]


def _isin_sorted(a: np.ndarray, sorted_b: np.ndarray) -> np.ndarray:
    """(len(a),) bool: whether each value of ``a`` is in the increasing array ``sorted_b``."""
    if sorted_b.size == 0:
        return np.zeros(a.shape, dtype=bool)
    i = np.minimum(np.searchsorted(sorted_b, a), sorted_b.size - 1)
    return sorted_b[i] == a


def _rows(owner: np.ndarray, n_owners: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The members of each owner as rows of equal length, to vectorise per-owner statistics.

    Args:
        owner: (L,) int, the owner of each element in [0, n_owners), or −1 for none.
    Yields:
        (owners, members) per distinct number K of members: (R,) owners and (R, K) element
        indices, each row increasing. numpy sums each row of a C-ordered (R, K) array exactly as
        it sums that row alone, so row statistics equal the per-owner ones bit for bit.
    """
    inside = np.flatnonzero(owner >= 0)
    count = np.bincount(owner[inside], minlength=n_owners)
    order = inside[np.argsort(owner[inside], kind="stable")]
    start = np.cumsum(count) - count
    for k in sorted(set(count[count > 0].tolist())):
        who = np.flatnonzero(count == k)
        yield who, order[start[who, None] + np.arange(k)]


def _score_stats(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, sum of squared deviations) of each row of scores ``z`` (R, K), order-independent;
    a constant row has exactly its value as mean and 0 as spread."""
    z = np.sort(z, axis=1)
    dev = z - z[:, :1]
    mean_dev = dev.mean(axis=1)
    return z[:, 0] + mean_dev, np.sum((dev - mean_dev[:, None]) ** 2, axis=1)


def _cross_temporal(
    z: np.ndarray,
    n_e: np.ndarray,
    mean_e: np.ndarray,
    m2_e: np.ndarray,
    mode: str,
    epsilon: float,
) -> np.ndarray:
    """Â^CT of step 6 for R groups of K current scores each, each against its pooled [Z_E; Z_R].

    Args:
        z: (R, K) scores Z_R of the current groups.
        n_e, mean_e, m2_e: (R,) the stored n (≥ 1), mean and m2 of each earlier group's Z_E.
        mode: ``mean_norm`` or ``mean_std_norm``.
    Returns:
        (R, K) float64; a row is exactly 0 when every score, old and new, is equal.
    """
    y = z - mean_e[:, None]  # deviations of Z_E from mean_e sum to 0
    n = n_e + z.shape[1]
    mean_y = y.sum(axis=1) / n
    centred = y - mean_y[:, None]
    if mode == "mean_norm":
        return centred
    # Python's float ** 2 (a libm pow), as the scalar formula m2_e + n_e·mean_y² + Σ centred²
    # was written, rather than numpy's x·x, which may round differently.
    square = np.array([m**2 for m in mean_y.tolist()], dtype=np.float64)
    m2 = m2_e + n_e * square + np.sum(centred**2, axis=1)
    den = (np.sqrt(m2 / (n - 1)) + epsilon)[:, None]
    out = np.zeros_like(centred)
    np.divide(centred, den, out=out, where=den > 0)
    return out


def tigpo_advantage(
    batch: StepBatch, cfg: TIGPOConfig, state: Mapping[str, Any] | None
) -> tuple[np.ndarray, dict[str, Any], dict[str, float]]:
    """TIGPO advantages of a batch, the new state and diagnostics (a pure function).

    Vectorised over steps: nodes are ints in the order of their keys, a graph node is a
    (task, node) pair, and one sparse breadth-first search over all tasks' graphs at once
    (disjoint, since no edge joins two tasks) gives every distance; Python loops only run over
    distinct keys, stored edges and the state's dicts.

    Args:
        batch: the step batch (with ``anchor_keys``), N steps, M trajectories.
        cfg: the options.
        state: the previous state (None the first time); not modified.
    Returns:
        ((N,) float64 advantages, the new state, metrics).
    """
    prev = dict(state or {})
    u = int(prev.get("updates", 0)) + 1
    old_tasks: Mapping[str, Any] = prev.get("tasks", {})
    keys = _batch_keys(batch)
    tasks, n_tasks = keys.tasks, len(keys.tasks)
    step_task = keys.group_task[batch.step_group]  # (N,)
    traj_task = keys.group_task[batch.traj_group]  # (M,)

    # H_x of the batch's tasks, flat: (task, s, s', update that last saw the edge).
    h_task: list[int] = []
    h_src: list[str] = []
    h_dst: list[str] = []
    h_seen: list[Any] = []
    if cfg.max_edges > 0:
        for t, k in enumerate(tasks):
            for s, out in (old_tasks.get(k) or {}).get("edges", {}).items():
                h_task += [t] * len(out)
                h_src += [s] * len(out)
                h_dst += out
                h_seen += out.values()
    # Node ids in the order of the keys (s⁺ included), so sorting ids sorts keys.
    universe = sorted({*keys.names, *h_src, *h_dst, SUCCESS})
    n_nodes = len(universe)
    node_id = {k: i for i, k in enumerate(universe)}
    name_node = np.array([node_id[k] for k in keys.names], dtype=np.int64)
    ht = np.array(h_task, dtype=np.int64)
    h_src_key = ht * n_nodes + np.fromiter(map(node_id.__getitem__, h_src), np.int64, ht.size)
    h_dst_key = ht * n_nodes + np.fromiter(map(node_id.__getitem__, h_dst), np.int64, ht.size)

    # Sources as locations, (task, anchor id) pairs. StepBatch interns anchor ids per group, so
    # an anchor id is one task's node and the per-step lookups are gathers by anchor id; a batch
    # that shares an anchor id between tasks gets locations of its own.
    step_anchor = batch.step_anchor
    anchor_task = np.full(keys.anchor_node.size, -1, dtype=np.int64)
    anchor_task[step_anchor] = step_task
    if np.array_equal(anchor_task[step_anchor], step_task):
        step_loc, loc_task, loc_anchor = step_anchor, anchor_task, np.arange(anchor_task.size)
    else:
        pairs, step_loc = np.unique(step_anchor * n_tasks + step_task, return_inverse=True)
        step_loc, loc_task, loc_anchor = step_loc.reshape(-1), pairs % n_tasks, pairs // n_tasks
    used = loc_task >= 0
    loc_key = loc_task[used] * n_nodes + name_node[keys.anchor_node[loc_anchor[used]]]

    # Graph nodes: the distinct (task, node) pairs, numbered in the order task·n_nodes + node
    # (a task's nodes are contiguous, by key).
    succ_key = np.arange(n_tasks, dtype=np.int64) * n_nodes + node_id[SUCCESS]
    tn = _sorted_unique(np.concatenate([loc_key, h_src_key, h_dst_key, succ_key]))
    n_tn = tn.size
    loc_tn = np.zeros(loc_task.size, dtype=np.int64)
    loc_tn[used] = np.searchsorted(tn, loc_key)
    succ_tn = np.searchsorted(tn, succ_key)

    # Step 2: the occurrence s → s' of each step; the dead end (−1) is no node.
    n = batch.n_steps
    src = loc_tn[step_loc]
    last = np.ones(n, dtype=bool)
    last[:-1] = batch.step_traj[1:] != batch.step_traj[:-1]
    won = last & batch.traj_won[batch.step_traj]
    dst = np.empty(n, dtype=np.int64)
    dst[:-1] = src[1:]  # the next step is in the same trajectory, so of the same task
    dst[last] = -1
    dst[won] = succ_tn[step_task[won]]
    live = dst >= 0
    # One sort gives the distinct edges of G_x and, in the low bit, whether one of their
    # occurrences was a valid action (only those are stored).
    occ = _sorted_unique(
        (src[live] * n_tn + dst[live]) * 2 + (~batch.step_valid[live]).astype(np.int64)
    )
    cur_edges = _sorted_unique(occ >> 1)
    valid_edges = occ[(occ & 1) == 0] >> 1  # increasing, distinct

    # Steps 3-5: distances on H_x ∪ G_x by one breadth-first search from every task's s⁺
    # (unweighted Dijkstra, nearest source: each node only reaches its own task's s⁺),
    # graph returns, same-source standardisation.
    h_src_tn = np.searchsorted(tn, h_src_key)
    h_dst_tn = np.searchsorted(tn, h_dst_key)
    into = np.concatenate([cur_edges % n_tn, h_dst_tn])  # reversed edges s' → s
    out_of = np.concatenate([cur_edges // n_tn, h_src_tn])
    dist = np.zeros(n_tn)
    far = np.zeros(n_tasks)
    if n_tasks:
        reverse = sp.csr_matrix((np.ones(into.size), (into, out_of)), shape=(n_tn, n_tn))
        dist = dijkstra(reverse, directed=True, indices=succ_tn, unweighted=True, min_only=True)
        # d_max + 1 per task; each task's nodes start at its first key (it has s⁺ at least).
        first_tn = np.searchsorted(tn, np.arange(n_tasks, dtype=np.int64) * n_nodes)
        far = np.maximum.reduceat(np.where(np.isfinite(dist), dist, 0.0), first_tn) + 1.0
    d_next = np.full(n, np.inf)
    d_next[live] = dist[dst[live]]
    hit = np.isfinite(d_next)
    reached = int(hit.sum())
    d_next = np.where(hit, d_next, far[step_task])  # integers, exact in float64
    q = cfg.success_value * cfg.graph_discount**d_next
    n_anchor = int(batch.step_anchor.max()) + 1 if batch.n_steps else 0
    a_tg = step_advantage(q, batch.step_anchor, n_anchor, cfg.mode, cfg.epsilon)

    # Step 6: episode term, cross-temporal for revisits.
    z = batch.traj_return  # (M,)
    zcfg = GRPOConfig(norm_by_std=cfg.mode == "mean_std_norm", epsilon=cfg.epsilon)
    a_ep = grpo_traj_advantage(z, batch.traj_group, batch.n_groups, zcfg)
    revisits = 0
    if cfg.cross_temporal:
        has_ref = np.zeros(n_tasks, dtype=bool)
        n_e = np.zeros(n_tasks, dtype=np.int64)
        mean_e, m2_e = np.zeros(n_tasks), np.zeros(n_tasks)
        for t, k in enumerate(tasks):
            ref = old_tasks.get(k, {}).get("ref")
            if not ref or int(ref["n"]) < 1:
                continue
            if cfg.max_reference_age and u - int(ref["update"]) > cfg.max_reference_age:
                continue
            has_ref[t] = True
            n_e[t], mean_e[t], m2_e[t] = int(ref["n"]), float(ref["mean"]), float(ref["m2"])
        owner = np.where(has_ref[traj_task], batch.traj_group, -1)
        for groups, members in _rows(owner, batch.n_groups):
            t = keys.group_task[groups]
            a_ep[members] = _cross_temporal(
                z[members], n_e[t], mean_e[t], m2_e[t], cfg.mode, cfg.epsilon
            )
            revisits += groups.size
    step_adv = cfg.step_weight * a_tg + cfg.episode_weight * a_ep[batch.step_traj]

    # Step 8: merge into the store, then enforce the bound.
    edges_of: list[dict[str, dict[str, int]]] = [{} for _ in tasks]
    if cfg.max_edges > 0:
        h_key = h_src_tn * n_tn + h_dst_tn
        fresh_stamp = _isin_sorted(h_key, valid_edges)  # re-seen: stamped u below
        key = np.concatenate([h_key[~fresh_stamp], valid_edges])
        seen = np.concatenate(
            [np.array(h_seen, dtype=np.int64)[~fresh_stamp], np.full(valid_edges.size, u)]
        )
        edge_task = tn[key // n_tn] // n_nodes
        count = np.bincount(edge_task, minlength=n_tasks)
        if count.max(initial=0) > cfg.max_edges:
            # Per task, the max_edges most recently seen; ties by (s, s'), i.e. by key, since
            # node ids are in key order.
            order = np.lexsort((key, -seen, edge_task))
            rank = np.empty(order.size, dtype=np.int64)
            rank[order] = np.arange(order.size) - (np.cumsum(count) - count)[edge_task[order]]
            keep = rank < cfg.max_edges
            key, seen = key[keep], seen[keep]
        order = np.argsort(key)  # by task, s, s' (keys are distinct)
        key, seen = key[order], seen[order]
        s_tn, x_tn = np.divmod(key, n_tn)
        names = np.array(universe, dtype=object)
        s_name = names[tn[s_tn] % n_nodes].tolist()
        x_name = names[tn[x_tn] % n_nodes].tolist()
        s_task = (tn[s_tn] // n_nodes).tolist()
        stamp = seen.tolist()
        cut = (np.flatnonzero(s_tn[1:] != s_tn[:-1]) + 1).tolist()
        bounds = [0, *cut, key.size] if key.size else []
        for lo, hi in itertools.pairwise(bounds):  # one source node (of one task) at a time
            edges_of[s_task[lo]][s_name[lo]] = dict(zip(x_name[lo:hi], stamp[lo:hi]))
    refs: dict[int, dict[str, Any]] = {}
    for who, members in _rows(traj_task, n_tasks):
        means, m2s = _score_stats(z[members])
        for t, mean, m2 in zip(who.tolist(), means.tolist(), m2s.tolist()):
            refs[t] = {"n": members.shape[1], "mean": mean, "m2": m2, "update": u}
    new_tasks: dict[str, Any] = dict(old_tasks)
    for t, k in enumerate(tasks):
        fresh: dict[str, Any] = {"last": u, "edges": edges_of[t]}
        if t in refs:
            fresh["ref"] = refs[t]
        new_tasks[k] = fresh
    if len(new_tasks) > cfg.max_tasks:
        order = sorted(new_tasks, key=lambda k: (-int(new_tasks[k]["last"]), k))
        new_tasks = {k: new_tasks[k] for k in order[: cfg.max_tasks]}
    new_state = {"updates": u, "tasks": {k: new_tasks[k] for k in sorted(new_tasks)}}
    n_edges = sum(len(out) for e in new_tasks.values() for out in e.get("edges", {}).values())
    metrics = {
        "store_tasks": float(len(new_tasks)),
        "store_edges": float(n_edges),
        "revisit_frac": revisits / batch.n_groups if batch.n_groups else 0.0,
        "reach_frac": reached / batch.n_steps if batch.n_steps else 0.0,
        "graph_adv_std": safe_std(a_tg),
        "episode_adv_std": safe_std(a_ep),
    }
    return step_adv, new_state, metrics


@register_estimator("tigpo", config=TIGPOConfig, stateful=True)
def tigpo(
    batch: StepBatch, graph: object, cfg: TIGPOConfig, *, state: dict[str, Any] | None
) -> Advantages:
    """TIGPO advantage λ_step·Â^TG + λ_ep·(Â^CT or Â^ep) per step: (N,) float64, and the
    updated graph store (see the module)."""
    step, new_state, metrics = tigpo_advantage(batch, cfg, state)
    return Advantages(step=step, metrics=metrics, state=new_state)
