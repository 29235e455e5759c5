"""The trajectory graph: counts, μ and P by hand, truncation to failure, networkx, PNG."""

from __future__ import annotations

import numpy as np
from helpers import make_batch, make_groups

from agentrl.credit.batch import StepBatch
from agentrl.credit.graph import build_graph

# One group: s -a-> t -b-> success; s -c-> fail; s -a-> fail; s -b-> success.
SPEC = [
    [[("s", "a", 0.0), ("t", "b", 1.0)], [("s", "c", 0.0)], [("s", "a", 0.0)], [("s", "b", 1.0)]]
]


def test_counts_policy_and_transitions_by_hand():
    g = build_graph(make_batch(SPEC))
    assert g.n_states == 2 and g.success == 2 and g.failure == 3
    s, t = 0, 1
    names = g.action_names
    pair = {(int(st), names[int(a)]): k for k, (st, a) in enumerate(zip(g.sa_state, g.sa_action))}
    # N(s) = 4: a twice, b once, c once -> mu = 1/2, 1/4, 1/4; N(t) = 1.
    mu = g.mu.toarray()
    assert mu[s, pair[(s, "a")]] == 0.5 and mu[s, pair[(s, "b")]] == 0.25
    assert mu[s, pair[(s, "c")]] == 0.25 and mu[t, pair[(t, "b")]] == 1.0
    np.testing.assert_allclose(mu.sum(1), 1.0)
    P = g.P.toarray()
    np.testing.assert_allclose(P[pair[(s, "a")]], [0, 0.5, 0, 0.5])  # half to t, half to failure
    np.testing.assert_allclose(P[pair[(s, "b")]], [0, 0, 1, 0])
    np.testing.assert_allclose(P[pair[(s, "c")]], [0, 0, 0, 1])
    np.testing.assert_allclose(P.sum(1), 1.0)
    # M(s, t) = mu(a|s) P(t|s,a) = 1/4; one-step absorption from s: success mu(b) = 1/4,
    # failure mu(a) P(fail|s,a) + mu(c) = 1/4 + 1/4.
    np.testing.assert_allclose(g.transition_matrix().toarray(), [[0, 0.25], [0, 0]])
    p_succ, p_fail = g.absorb_probability()
    np.testing.assert_allclose(p_succ, [0.25, 1.0])
    np.testing.assert_allclose(p_fail, [0.5, 0.0])
    np.testing.assert_array_equal(g.distinct_actions(), [3, 1])


def test_truncation_goes_to_failure_and_groups_stay_apart():
    groups = make_groups([[[("x", "go", 0.0), ("x", "go", 0.0)]], [[("x", "go", 1.0)]]])
    last = groups[0].trajectories[0].steps[-1]
    last.terminated, last.truncated = False, True  # time limit, not a win
    groups[0].trajectories[0].won = False
    g = build_graph(StepBatch.from_groups(groups))
    assert g.n_states == 2, "the same anchor text in two groups must be two states"
    np.testing.assert_array_equal(g.state_group, [0, 1])
    # group 0: x -> x (self loop), then truncated -> failure; group 1: x -> success
    np.testing.assert_array_equal(g.step_next, [0, g.failure, g.success])


def test_semantic_actions_share_statistics():
    # Two different responses that executed the same action are one (state, action) pair.
    groups = make_groups([[[("s", "up", 1.0)], [("s", "up", 0.0)], [("s", None, 0.0)]]])
    groups[0].trajectories[0].steps[0].response_text = "I go <action>up</action>"
    groups[0].trajectories[1].steps[0].response_text = "UP!"
    g = build_graph(StepBatch.from_groups(groups))
    assert g.n_pairs == 2  # "up" and the shared invalid action
    assert g.sa_count.tolist() == [2.0, 1.0]


def test_networkx_and_png(tmp_path):
    g = build_graph(make_batch(SPEC + SPEC))
    nxg = g.to_networkx(group=1)
    states = [n for n in nxg if isinstance(n, int)]
    assert len(states) == 2 and all(nxg.nodes[n]["group"] == 1 for n in states)
    edges = {(u, v, d["action"]): d["count"] for u, v, d in nxg.edges(data=True)}
    s = min(states)
    assert edges[(s, "failure", "a")] == 1 and edges[(s, s + 1, "a")] == 1
    assert edges[(s, "success", "b")] == 1 and edges[(s, "failure", "c")] == 1
    assert len(g.to_networkx().nodes) == 4 + 2
    path = g.draw(0, tmp_path / "g.png", values=np.array([0.3, 1.0, 0.3, 1.0]))
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
