"""One task group's trajectory graph as inline SVG, plus the data the page's script needs.

The graph is agentrl's own (:func:`~agentrl.credit.build_graph` over the iteration's records):
nodes are the group's anchor states, edges the executed actions, one edge per
(state, action, next state) with its count. Drawn:

- **nodes** sized by visits (area ∝ visits) and coloured by the state's Monte Carlo value, the
  mean undiscounted return-to-go of the steps taken from it; the absorbing ``success`` and
  ``failure`` nodes (those some episode reached) on the right;
- **edges** coloured and labelled by the mean advantage of the steps along them, for the
  estimator the page's selector shows (the page recolours and relabels them; the SVG as built
  shows the run's own estimator);
- **layers** by step depth: a state sits in the column of the earliest turn it was visited at
  (networkx's ``multipartite_layout``), states within a column ordered by the mean position
  of their predecessors (fewer crossings), so time runs left to right; edges back to an earlier
  column (loops) and self-loops (an action that left the state unchanged) curve above.

**Cap.** At most ``max_nodes`` states are drawn: the most visited ones (ties: the shallower,
then the first visited). The edges from or to a hidden state are hidden with it, and the
figure's caption says how many states, edges and steps were hidden.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from agentrl.credit import StepBatch, TrajectoryGraph, discounted_returns

NODE_MIN_R, NODE_MAX_R = 5.0, 18.0
COL_W, ROW_H, PAD = 190.0, 56.0, 40.0


@dataclass
class GroupView:
    """One group's drawing and the data behind it (for the page's JSON)."""

    svg: str
    data: dict[str, Any]
    n_nodes: int
    n_edges: int
    hidden_states: int = 0
    hidden_edges: int = 0
    caption: str = ""
    notes: list[str] = field(default_factory=list)


def _fmt(x: float) -> str:
    return f"{x:+.2f}"


def _value_colour(v: float, lo: float, hi: float) -> str:
    """A light-to-dark blue ramp (values as the caption's scale says)."""
    t = 0.5 if hi <= lo else (v - lo) / (hi - lo)
    a, b = (0xDE, 0xEB, 0xF7), (0x08, 0x30, 0x6B)
    r, g, bl = (round(a[i] + (b[i] - a[i]) * t) for i in range(3))
    return f"#{r:02x}{g:02x}{bl:02x}"


def adv_colour(a: float, scale: float) -> str:
    """Diverging: red for negative, grey at 0, green for positive advantages (the page's
    script computes the same ramp)."""
    t = 0.0 if scale <= 0 else max(-1.0, min(1.0, a / scale))
    grey, neg, pos = (0xBB, 0xBB, 0xBB), (0xD7, 0x30, 0x27), (0x1A, 0x98, 0x50)
    end = pos if t > 0 else neg
    r, g, b = (round(grey[i] + (end[i] - grey[i]) * abs(t)) for i in range(3))
    return f"#{r:02x}{g:02x}{b:02x}"


def state_label(anchor: Any, limit: int = 60) -> str:
    text = repr(anchor)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def group_view(
    group: int,
    batch: StepBatch,
    graph: TrajectoryGraph,
    kept_steps: np.ndarray,
    advantages: dict[str, np.ndarray],
    method: str,
    max_nodes: int,
    uid: str,
) -> GroupView:
    """Draw group ``group`` of ``graph`` (built from ``batch.without_lost()``).

    Args:
        kept_steps: (N_kept,) index into ``batch`` of each step of the graph.
        advantages: estimator → (N,) advantages over ``batch``'s steps.
        method: the estimator the SVG is drawn with (the page switches it).
        uid: an id prefix unique in the page.
    """
    S = graph.n_states
    states = np.flatnonzero(graph.state_group == group)
    steps = np.flatnonzero(graph.state_group[graph.step_state] == group)  # kept-step indices
    # Depth: the earliest turn a state was visited at.
    t = batch.step_t[kept_steps[steps]]
    depth: dict[int, int] = {}
    for s, d in zip(graph.step_state[steps].tolist(), t.tolist()):
        depth[s] = min(depth.get(s, d), d)
    first_seen = {s: i for i, s in reversed(list(enumerate(graph.step_state[steps].tolist())))}
    ranked = sorted(states.tolist(), key=lambda s: (-graph.state_count[s], depth[s], first_seen[s]))
    shown = set(ranked[:max_nodes]) if max_nodes > 0 else set(ranked)
    # The state's value: mean return-to-go of the steps taken from it.
    kept_batch_traj = batch.step_traj[kept_steps]
    rtg = discounted_returns(batch.step_reward[kept_steps], kept_batch_traj, 1.0)
    value_sum = np.bincount(graph.step_state, weights=rtg, minlength=S)
    value = value_sum / np.maximum(graph.state_count, 1.0)

    # Edges: one per (state, action, next node), with the steps along it.
    edge_steps: dict[tuple[int, int], list[int]] = defaultdict(list)
    for k in steps.tolist():
        edge_steps[(int(graph.step_sa[k]), int(graph.step_next[k]))].append(k)
    n_hidden_edges = n_hidden_steps = 0
    edges = []
    for (sa, nxt), ks in sorted(edge_steps.items()):
        src = int(graph.sa_state[sa])
        dst_state = nxt < S
        if src not in shown or (dst_state and nxt not in shown):
            n_hidden_edges += 1
            n_hidden_steps += len(ks)
            continue
        dst = nxt if dst_state else ("success" if nxt == graph.success else "failure")
        idx = kept_steps[np.asarray(ks)]
        edges.append(
            {
                "src": src,
                "dst": dst,
                "action": graph.action_names[int(graph.sa_action[sa])],
                "count": len(ks),
                "steps": idx.tolist(),
                "adv": {m: round(float(a[idx].mean()), 4) for m, a in advantages.items()},
            }
        )

    # Layout: networkx's layered (multipartite) layout, layer = depth.
    g = nx.DiGraph()
    shown_sorted = sorted(shown, key=lambda s: (depth[s], first_seen[s]))
    last_layer = max((depth[s] for s in shown), default=0) + 1
    absorbing = sorted({e["dst"] for e in edges if isinstance(e["dst"], str)})
    # Within a column, order states by the mean row of their predecessors (barycentre), one
    # sweep left to right: cheap and removes most crossings of these tree-like graphs.
    row: dict[Any, float] = {}
    preds: dict[Any, list[Any]] = defaultdict(list)
    for e in edges:
        if e["src"] != e["dst"]:
            preds[e["dst"]].append(e["src"])
    layers: dict[int, list[Any]] = defaultdict(list)
    for s in shown_sorted:
        layers[depth[s]].append(s)
    layers[last_layer] = list(absorbing)
    for d in sorted(layers):
        members = layers[d]
        members.sort(
            key=lambda n: (
                np.mean([row[p] for p in preds[n] if p in row])
                if any(p in row for p in preds[n])
                else 1e9,
                str(n),
            )
        )
        for i, n in enumerate(members):
            row[n] = i
            g.add_node(n, layer=d)
    pos = nx.multipartite_layout(g, subset_key="layer", align="vertical", scale=1.0) if g else {}
    # multipartite_layout centres each column; map its coordinates to pixels, columns COL_W
    # apart and rows ROW_H apart.
    n_cols = len(layers)
    tallest = max((len(m) for m in layers.values()), default=1)
    xs = sorted({float(p[0]) for p in pos.values()})
    col_of = {x: i for i, x in enumerate(xs)}
    ys = [float(p[1]) for p in pos.values()]
    y_lo, y_hi = (min(ys), max(ys)) if ys else (0.0, 0.0)
    # Room above the first row for the self-loops stacked on a node (and their labels).
    loops: dict[Any, int] = defaultdict(int)
    for e in edges:
        if e["src"] == e["dst"]:
            loops[e["src"]] += 1
    top = 16 * max(loops.values(), default=0) + (12 if loops else 0)
    height = top + PAD * 2 + max(tallest - 1, 0) * ROW_H + 30
    width = PAD * 2 + max(n_cols - 1, 0) * COL_W + 60
    px: dict[Any, tuple[float, float]] = {}
    for n, (x, y) in pos.items():
        cx = PAD + 30 + col_of[float(x)] * COL_W
        span = (y_hi - y_lo) or 1.0
        cy = top + PAD + 15 + (float(y) - y_lo) / span * max(tallest - 1, 0) * ROW_H
        if y_hi == y_lo:
            cy = top + (height - top) / 2
        px[n] = (cx, cy)

    visits = {s: float(graph.state_count[s]) for s in shown}
    # The anchor of each drawn state, from the first step taken in it.
    anchor_text: dict[int, str] = {}
    for k in steps.tolist():
        s_ = int(graph.step_state[k])
        if s_ in shown and s_ not in anchor_text:
            aid = batch.step_anchor[kept_steps[k]]
            anchor_text[s_] = state_label(batch.anchor_keys[aid]) if batch.anchor_keys else str(s_)
    vmax = max(visits.values(), default=1.0)
    vals = [float(value[s]) for s in shown]
    v_lo, v_hi = (min(vals), max(vals)) if vals else (0.0, 0.0)

    def radius(n: Any) -> float:
        if isinstance(n, str):
            return 10.0
        return NODE_MIN_R + (NODE_MAX_R - NODE_MIN_R) * math.sqrt(visits[n] / vmax)

    scale = max((abs(e["adv"].get(method, 0.0)) for e in edges), default=0.0)
    parts = []
    # Edges first (under the nodes); parallel edges between one pair fan out.
    fan: dict[tuple[Any, Any], int] = defaultdict(int)
    for i, e in enumerate(edges):
        a, b = e["src"], e["dst"]
        k = fan[(a, b)]
        fan[(a, b)] += 1
        (x1, y1), (x2, y2) = px[a], px[b]
        if a == b:
            r = radius(a)
            lift = 18 + 16 * k
            d = (
                f"M{x1 - r * 0.6:.1f},{y1 - r * 0.8:.1f} C{x1 - 20 - 6 * k:.1f},{y1 - r - lift:.1f}"
                f" {x1 + 20 + 6 * k:.1f},{y1 - r - lift:.1f} {x1 + r * 0.6:.1f},{y1 - r * 0.8:.1f}"
            )
            lx, ly = x1, y1 - r - lift * 0.8
        else:
            back = x2 <= x1
            # Edges that skip columns arc over the states between (their labels too).
            skip = max(0.0, round(abs(x2 - x1) / COL_W) - 1)
            fan_k = 0 if k == 0 else 16 * ((k + 1) // 2) * (-1) ** k
            bend = (35 + 18 * k) if back else fan_k - 22 * skip
            mx, my = (x1 + x2) / 2, (y1 + y2) / 2
            dx, dy = x2 - x1, y2 - y1
            length = math.hypot(dx, dy) or 1.0
            nx_, ny_ = -dy / length, dx / length  # unit normal
            if back and ny_ > 0:
                nx_, ny_ = -nx_, -ny_  # loops back curve above
            cx, cy = mx + nx_ * bend * 2, my + ny_ * bend * 2
            d = f"M{x1:.1f},{y1:.1f} Q{cx:.1f},{cy:.1f} {x2:.1f},{y2:.1f}"
            lx, ly = mx + nx_ * bend, my + ny_ * bend
        adv = e["adv"].get(method, 0.0)
        colour = adv_colour(adv, scale)
        w = 1.2 + 3.0 * math.sqrt(e["count"] / max(x["count"] for x in edges))
        title = html.escape(f"{e['action']} ×{e['count']}")
        parts.append(
            f'<g class="edge" id="{uid}-e{i}" data-edge="{i}">'
            f'<path class="edge-line" d="{d}" stroke="{colour}" stroke-width="{w:.1f}" '
            f'fill="none" marker-end="url(#{uid}-arrow)"><title>{title}</title></path>'
            f'<path class="edge-hit" d="{d}" stroke="transparent" stroke-width="10" fill="none"/>'
            f'<text class="edge-label" x="{lx:.1f}" y="{ly - 3:.1f}">{_fmt(adv)}</text></g>'
        )
    for n in [*shown_sorted, *absorbing]:
        x, y = px[n]
        r = radius(n)
        if isinstance(n, str):
            fill = "#1a9850" if n == "success" else "#d73027"
            title = n
            label = "✓" if n == "success" else "✗"
            attrs = f'data-node="{n}"'
        else:
            fill = _value_colour(float(value[n]), v_lo, v_hi)
            title = (
                f"state {anchor_text[n]}\nvisits {int(visits[n])}, value {value[n]:+.3f}, "
                f"depth {depth[n]}"
            )
            label = str(int(visits[n]))
            attrs = f'data-node="{n}" data-visits="{int(visits[n])}"'
        parts.append(
            f'<g class="node" {attrs}><circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" '
            f'fill="{fill}" stroke="#333" stroke-width="0.8"><title>{html.escape(title)}</title>'
            f'</circle><text class="node-label" x="{x:.1f}" y="{y + 3:.1f}">{label}</text></g>'
        )
    defs = (
        f'<defs><marker id="{uid}-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerUnits="userSpaceOnUse" markerWidth="8" markerHeight="8" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>'
    )
    svg = (
        f'<svg class="traj-graph" id="{uid}" data-group="{group}" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'xmlns="http://www.w3.org/2000/svg">{defs}{"".join(parts)}</svg>'
    )
    hidden_states = len(states) - len(shown)
    caption = (
        f"{len(shown)} of {len(states)} states drawn"
        + (
            f" (the {len(shown)} most visited; {hidden_states} states, {n_hidden_edges} edges "
            f"and {n_hidden_steps} steps hidden)"
            if hidden_states
            else ""
        )
        + f"; {len(edges)} edges. Value scale {v_lo:+.2f} (light) to {v_hi:+.2f} (dark)."
    )
    data = {
        "uid": uid,
        "edges": [
            {
                "src": e["src"],
                "dst": e["dst"],
                "action": e["action"],
                "count": e["count"],
                "adv": e["adv"],
                "steps": e["steps"],
            }
            for e in edges
        ],
    }
    return GroupView(
        svg=svg,
        data=data,
        n_nodes=len(shown) + len(absorbing),
        n_edges=len(edges),
        hidden_states=hidden_states,
        hidden_edges=n_hidden_edges,
        caption=caption,
    )
