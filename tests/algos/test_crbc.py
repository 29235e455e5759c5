"""CRBC: golden values, the closure against a dense solve, the finite-depth family, a slow
per-step reference of the whole estimator, edge cases (cycles, β = 1, singular systems) and
config errors."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import make_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos.crbc import (
    closure_values,
    finite_depth_values,
    step_credit,
)
from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config
from agentrl.credit.batch import INVALID_ACTION
from agentrl.credit.graph import TrajectoryGraph, build_graph

# One group (β = 0.5): τ1 = s -a-> t -c-> won, τ2 = s -a-> t -d-> lost, τ3 = s -b-> u -e-> won.
GOLDEN = [
    [
        [("s", "a", 0.0), ("t", "c", 1.0)],
        [("s", "a", 0.0), ("t", "d", 0.0)],
        [("s", "b", 0.0), ("u", "e", 1.0)],
    ]
]
# One trajectory with a self-loop: s -a-> s -a-> s -b-> won.
SELF_LOOP = [[[("s", "a", 0.0), ("s", "a", 0.0), ("s", "b", 1.0)]]]


def pair_values(batch, graph, V, Q):
    """{(group, anchor): V} and {(group, anchor, action): Q} read off the steps."""
    vs, qs = {}, {}
    group = batch.step_group
    for n in range(batch.n_steps):
        key = (int(group[n]), batch.anchor_keys[batch.step_anchor[n]])
        vs[key] = V[graph.step_state[n]]
        qs[(*key, batch.action_names[batch.step_action[n]])] = Q[graph.step_sa[n]]
    return vs, qs


# ---------------------------------------------------------------------------- golden values


def test_closure_golden_values_gating_and_sigma_min():
    batch = make_batch(GOLDEN)
    graph = build_graph(batch)
    V, Q = closure_values(graph, 0.5)
    vs, qs = pair_values(batch, graph, V, Q)
    # u: one action e -> won: Q(u,e) = β·1 = 0.5 = V(u).
    # t: c -> won, d -> lost, μ = 1/2 each: Q(t,c) = 0.5, Q(t,d) = 0, V(t) = 0.25.
    # s: μ(a) = 2/3, μ(b) = 1/3; Q(s,a) = β V(t) = 0.125, Q(s,b) = β V(u) = 0.25,
    #    V(s) = 2/3·0.125 + 1/3·0.25 = 1/6.
    assert vs[(0, "u")] == pytest.approx(0.5)
    assert vs[(0, "t")] == pytest.approx(0.25)
    assert vs[(0, "s")] == pytest.approx(1 / 6)
    assert qs[(0, "u", "e")] == pytest.approx(0.5)
    assert qs[(0, "t", "c")] == pytest.approx(0.5)
    assert qs[(0, "t", "d")] == pytest.approx(0.0)
    assert qs[(0, "s", "a")] == pytest.approx(0.125)
    assert qs[(0, "s", "b")] == pytest.approx(0.25)

    credit = step_credit(graph, V, Q, sigma_min=0.1)[graph.step_sa]
    # t: A = ±0.25, σ = 0.25 > σ_min -> ±1.
    # s: A(s,a) = 0.125 − 1/6 = −1/24, A(s,b) = 0.25 − 1/6 = 1/12,
    #    σ² = 2/3·(1/24)² + 1/3·(1/12)² = 1/288 -> σ ≈ 0.0589 < σ_min = 0.1, so divide by 0.1.
    # u: one distinct action -> gated to 0.
    sa, sb = -1 / 24 / 0.1, 1 / 12 / 0.1  # −0.41667, 0.83333
    np.testing.assert_allclose(credit, [sa, 1.0, sa, -1.0, sb, 0.0], atol=1e-12)
    # With σ_min below σ(s) the scale is σ itself: −1/24 / sqrt(1/288) = −√2/2.
    credit = step_credit(graph, V, Q, sigma_min=0.01)[graph.step_sa]
    np.testing.assert_allclose(credit[[0, 4]], [-np.sqrt(0.5), np.sqrt(2.0)], atol=1e-12)


def test_full_estimator_golden_values_and_metrics():
    batch = make_batch(GOLDEN)
    out = compute_advantages("crbc", batch, estimator_config("crbc", {"beta": 0.5}))
    # A^G (GRPO): returns 1, 0, 1 -> mean 2/3, unbiased std sqrt(1/3);
    # A^G = (1/3, −2/3, 1/3) / (sqrt(1/3) + 1e-6).
    ag = np.array([1 / 3, -2 / 3, 1 / 3]) / (np.sqrt(1 / 3) + 1e-6)
    sa, sb = -1 / 24 / 0.1, 1 / 12 / 0.1
    expected = [
        ag[0] + 5 * sa,
        ag[0] + 5 * 1.0,
        ag[1] + 5 * sa,
        ag[1] + 5 * -1.0,
        ag[2] + 5 * sb,
        ag[2] + 0.0,
    ]
    np.testing.assert_allclose(out.step, expected, atol=1e-9)
    m = out.metrics
    assert m["credit/n_states"] == 3
    assert m["credit/gated_state_frac"] == pytest.approx(1 / 3)  # u
    # mean |A^S| over steps = (5/12 + 1 + 5/12 + 1 + 5/6 + 0) / 6
    assert m["credit/step_credit_abs_mean"] == pytest.approx((5 / 12 * 2 + 2 + 5 / 6) / 6)
    assert m["credit/linear_solve_s"] >= 0
    # RLOO base: R_i − mean of the others = (1 − 1/2, 0 − 1, 1 − 1/2); w_S = 0 isolates it.
    cfg = estimator_config("crbc", {"base": "rloo", "w_step": 0.0})
    np.testing.assert_allclose(
        compute_advantages("crbc", batch, cfg).step, [0.5, 0.5, -1, -1, 0.5, 0.5]
    )


def test_self_loop_golden_closure_and_depths():
    batch = make_batch(SELF_LOOP)
    graph = build_graph(batch)  # one state s; pairs (s,a), (s,b) in that order
    beta = 0.5
    # Closure: μ(a) = 2/3 with P(s|s,a) = 1, μ(b) = 1/3 with P(z⁺|s,b) = 1:
    # V = β(2/3 V + 1/3) -> V = 0.25; Q(s,a) = βV = 0.125 < V (negative credit), Q(s,b) = 0.5.
    V, Q = closure_values(graph, beta)
    np.testing.assert_allclose(V, [0.25])
    np.testing.assert_allclose(Q, [0.125, 0.5])
    # σ² = 2/3·0.125² + 1/3·0.25² = 1/32; credit = (−0.125, 0.25)/sqrt(1/32) = (−1/√2, √2).
    np.testing.assert_allclose(step_credit(graph, V, Q, 0.1), [-np.sqrt(0.5), np.sqrt(2.0)])
    # K = 0: G_{1,t} = β^{3−t+1} for t = 1, 2, 3 -> 0.125, 0.25, 0.5 (the last step gets β·R).
    # V⁽⁰⁾ = 0.875/3 = 7/24, Q⁽⁰⁾(s,a) = (0.125 + 0.25)/2 = 3/16, Q⁽⁰⁾(s,b) = 0.5.
    V0, Q0 = finite_depth_values(graph, batch, beta, 0)
    np.testing.assert_allclose(V0, [7 / 24])
    np.testing.assert_allclose(Q0, [3 / 16, 0.5])
    # K = 1: Q⁽¹⁾(s,a) = β V⁽⁰⁾ = 7/48, Q⁽¹⁾(s,b) = β; V⁽¹⁾ = 2/3·7/48 + 1/3·0.5 = 19/72.
    V1, Q1 = finite_depth_values(graph, batch, beta, 1)
    np.testing.assert_allclose(V1, [19 / 72])
    np.testing.assert_allclose(Q1, [7 / 48, 0.5])


def test_beta_one_cycle_with_exit_is_solved_exactly():
    # s -x-> s -x-> won; s -y-> lost twice. μ(x) = μ(y) = 1/2, P(s|s,x) = P(z⁺|s,x) = 1/2.
    # β = 1: V = 1/2 (V/2 + 1/2) -> V = 1/3; Q(s,x) = 2/3, Q(s,y) = 0.
    batch = make_batch([[[("s", "x", 0.0), ("s", "x", 1.0)], [("s", "y", 0.0)], [("s", "y", 0.0)]]])
    V, Q = closure_values(build_graph(batch), 1.0)
    np.testing.assert_allclose(V, [1 / 3])
    np.testing.assert_allclose(Q, [2 / 3, 0.0])


# ----------------------------------------------------- random batches and independent references

ACTIONS = ("a", "b", "c", None)  # None = an invalid response, its own shared action


@st.composite
def batch_specs(draw):
    """spec[g][i] = [(anchor, action, reward), ...]; won iff the last reward is positive."""
    spec = []
    for _ in range(draw(st.integers(1, 3))):
        group = []
        for _ in range(draw(st.integers(1, 4))):
            steps = draw(
                st.lists(
                    st.tuples(
                        st.integers(0, 3), st.sampled_from(ACTIONS), st.sampled_from((0, -0.1))
                    ),
                    min_size=1,
                    max_size=6,
                )
            )
            won = draw(st.booleans())
            steps[-1] = (steps[-1][0], steps[-1][1], 10.0 if won else steps[-1][2])
            group.append(steps)
        spec.append(group)
    return spec


def action_name(action):
    return INVALID_ACTION if action is None else action


def slow_values(spec, beta, depth):
    """V[(g, s)], Q[(g, s, a)], μ[(g, s, a)] of each group's empirical process, plain Python.

    depth < 0: the closure from a dense ``np.linalg.solve``; depth ≥ 0: visit-local averages
    followed by ``depth`` backups written as loops.
    """
    V, Q, MU = {}, {}, {}
    for g, trajs in enumerate(spec):
        n_sax, n_sa, n_s = defaultdict(float), defaultdict(float), defaultdict(float)
        g_s, g_sa = defaultdict(list), defaultdict(list)
        for steps in trajs:
            won = steps[-1][2] > 0
            T = len(steps)
            for t, (s, a, _) in enumerate(steps, start=1):  # 1-based t as in Eq. 6
                a = action_name(a)
                x = steps[t][0] if t < T else ("+" if won else "-")
                n_sax[(s, a, x)] += 1
                n_sa[(s, a)] += 1
                n_s[s] += 1
                ret = beta ** (T - t + 1) * won
                g_s[s].append(ret)
                g_sa[(s, a)].append(ret)
        mu = {(s, a): c / n_s[s] for (s, a), c in n_sa.items()}
        P = {(s, a, x): c / n_sa[(s, a)] for (s, a, x), c in n_sax.items()}

        def backup(v, P=P, n_sa=n_sa):
            q = dict.fromkeys(n_sa, 0.0)
            for (s, a, x), p in P.items():
                q[(s, a)] += beta * p * (1.0 if x == "+" else 0.0 if x == "-" else v[x])
            return q

        states = sorted(n_s)
        if depth < 0:
            idx = {s: k for k, s in enumerate(states)}
            lhs, rhs = np.eye(len(states)), np.zeros(len(states))
            for (s, a, x), p in P.items():
                if x == "+":
                    rhs[idx[s]] += beta * mu[(s, a)] * p
                elif x != "-":
                    lhs[idx[s], idx[x]] -= beta * mu[(s, a)] * p
            sol = np.linalg.solve(lhs, rhs)
            v = {s: sol[idx[s]] for s in states}
            q = backup(v)
        else:
            v = {s: np.mean(g_s[s]) for s in states}
            q = {sa: np.mean(g_sa[sa]) for sa in n_sa}
            for _ in range(depth):
                q = backup(v)
                v = dict.fromkeys(states, 0.0)
                for (s, a), m in mu.items():
                    v[s] += m * q[(s, a)]
        V.update({(g, s): val for s, val in v.items()})
        Q.update({(g, *sa): val for sa, val in q.items()})
        MU.update({(g, *sa): m for sa, m in mu.items()})
    return V, Q, MU


def slow_crbc(spec, cfg):
    """The whole estimator, step by step, from :func:`slow_values` (Eqs. 13-14)."""
    V, Q, MU = slow_values(spec, cfg.beta, cfg.depth)
    credit = {}
    for g, s, a in Q:
        pairs = [k for k in Q if k[:2] == (g, s)]
        sigma = np.sqrt(sum(MU[k] * (Q[k] - V[(g, s)]) ** 2 for k in pairs))
        adv = (Q[(g, s, a)] - V[(g, s)]) / max(sigma, cfg.sigma_min)
        credit[(g, s, a)] = adv if len(pairs) >= 2 else 0.0
    out = []
    for g, trajs in enumerate(spec):
        rets = [sum(r for _, _, r in steps) for steps in trajs]
        n = len(rets)
        for i, steps in enumerate(trajs):
            if n == 1:
                base = (
                    rets[i] / (1 + cfg.epsilon)
                    if cfg.base == "grpo" and cfg.norm_by_std
                    else rets[i]
                )
            elif cfg.base == "rloo":
                base = rets[i] - (sum(rets) - rets[i]) / (n - 1)
            else:
                mean = sum(rets) / n
                std = np.sqrt(sum((r - mean) ** 2 for r in rets) / (n - 1))
                base = (rets[i] - mean) / (std + cfg.epsilon if cfg.norm_by_std else 1.0)
            for s, a, _ in steps:
                out.append(cfg.w_group * base + cfg.w_step * credit[(g, s, action_name(a))])
    return np.array(out)


FAST = settings(max_examples=50, deadline=None, derandomize=True)


@FAST
@given(spec=batch_specs(), beta=st.sampled_from((0.5, 0.9, 0.98, 1.0)))
def test_closure_equals_dense_solve_of_the_empirical_process(spec, beta):
    batch = make_batch(spec)
    graph = build_graph(batch)
    V, Q = closure_values(graph, beta)
    vs, qs = pair_values(batch, graph, V, Q)
    V_ref, Q_ref, _ = slow_values(spec, beta, -1)
    assert vs.keys() == V_ref.keys()
    for key, val in V_ref.items():
        assert vs[key] == pytest.approx(val, abs=1e-10)
    for (g, s, a), val in Q_ref.items():
        assert qs[(g, s, a)] == pytest.approx(val, abs=1e-10)
    # The closure is a fixed point and is centred: V = Σ_a μ(a|s) Q(s, a).
    np.testing.assert_allclose(graph.mu @ Q, V, atol=1e-12)


@FAST
@given(spec=batch_specs(), beta=st.sampled_from((0.5, 0.9, 0.98, 1.0)))
def test_depth_zero_is_visit_local_averaging(spec, beta):
    batch = make_batch(spec)
    graph = build_graph(batch)
    V0, Q0 = finite_depth_values(graph, batch, beta, 0)
    vs, qs = pair_values(batch, graph, V0, Q0)
    V_ref, Q_ref, _ = slow_values(spec, beta, 0)
    for key, val in V_ref.items():
        assert vs[key] == pytest.approx(val, abs=1e-12)
    for key, val in Q_ref.items():
        assert qs[key] == pytest.approx(val, abs=1e-12)


@FAST
@given(spec=batch_specs(), beta=st.sampled_from((0.3, 0.5, 0.9, 0.98)))
def test_finite_depth_converges_within_the_paper_bound(spec, beta):
    batch = make_batch(spec)
    graph = build_graph(batch)
    V_inf, Q_inf = closure_values(graph, beta)
    A_inf = Q_inf - V_inf[graph.sa_state]
    V0, _ = finite_depth_values(graph, batch, beta, 0)
    V1, _ = finite_depth_values(graph, batch, beta, 1)  # T V⁽⁰⁾
    gap = np.abs(V1 - V0).max()
    for k in range(1, 31):
        Vk, Qk = finite_depth_values(graph, batch, beta, k)
        err = np.abs(A_inf - (Qk - Vk[graph.sa_state])).max()
        assert err <= 2 * beta**k / (1 - beta) * gap + 1e-12
        np.testing.assert_allclose(graph.mu @ Qk, Vk, atol=1e-12)  # centred at every depth


@FAST
@given(
    spec=batch_specs(),
    beta=st.sampled_from((0.5, 0.9, 0.98, 1.0)),
    depth=st.sampled_from((-1, 0, 1, 3)),
    base=st.sampled_from(("grpo", "rloo")),
    norm_by_std=st.booleans(),
    sigma_min=st.sampled_from((0.01, 0.1, 1.0)),
)
def test_vectorised_estimator_equals_slow_reference(
    spec, beta, depth, base, norm_by_std, sigma_min
):
    cfg = estimator_config(
        "crbc",
        {
            "beta": beta,
            "depth": depth,
            "base": base,
            "norm_by_std": norm_by_std,
            "sigma_min": sigma_min,
            "w_group": 1.5,
        },
    )
    out = compute_advantages("crbc", make_batch(spec), cfg)
    np.testing.assert_allclose(out.step, slow_crbc(spec, cfg), rtol=1e-9, atol=1e-8)


# ---------------------------------------------------------------------------- edge cases

EDGE_SPECS = {
    "singleton group": [[[("s", "a", 0.0), ("t", "b", 10.0)]]],
    "all equal rewards": [[[("s", "a", 10.0)], [("s", "b", 10.0)], [("s", "a", 10.0)]]],
    "all failures": [[[("s", "a", 0.0), ("t", "b", 0.0)], [("s", "b", 0.0)], [("t", "a", 0.0)]]],
    "revisits": [
        [
            [("s", "a", 0.0), ("t", "b", 0.0), ("s", "a", 0.0), ("t", "c", 10.0)],
            [("t", "b", 0.0), ("s", "d", 0.0), ("s", "a", 0.0)],
        ]
    ],
    "one-step episodes": [[[("s", "a", 10.0)], [("s", "b", 0.0)], [("s", "a", 0.0)]]],
}


@pytest.mark.parametrize("name", sorted(EDGE_SPECS))
@pytest.mark.parametrize("beta", [0.98, 1.0])
@pytest.mark.parametrize("depth", [-1, 0, 2])
def test_edge_cases_are_finite(name, beta, depth):
    batch = make_batch(EDGE_SPECS[name])
    cfg = estimator_config("crbc", {"beta": beta, "depth": depth})
    out = compute_advantages("crbc", batch, cfg)  # raises on non-finite advantages
    assert all(np.isfinite(v) for v in out.metrics.values())
    np.testing.assert_allclose(out.step, slow_crbc(EDGE_SPECS[name], cfg), atol=1e-9)


def test_edge_case_values():
    # Singleton group: every state has one action -> A^S = 0; A^G is the uncentred return.
    out = compute_advantages("crbc", make_batch(EDGE_SPECS["singleton group"]))
    np.testing.assert_allclose(out.step, 10 / (1 + 1e-6))
    assert out.metrics["credit/gated_state_frac"] == 1.0
    # All failures: V ≡ 0 and Q ≡ 0, so the credit and the advantage vanish.
    batch = make_batch(EDGE_SPECS["all failures"])
    graph = build_graph(batch)
    V, Q = closure_values(graph, 1.0)
    assert not V.any() and not Q.any()
    np.testing.assert_array_equal(compute_advantages("crbc", batch).step, 0.0)
    # One-step episodes: Q(s,a) = β P(z⁺|s,a) = 0.98/2, Q(s,b) = 0, V(s) = 2/3·0.49.
    batch = make_batch(EDGE_SPECS["one-step episodes"])
    V, Q = closure_values(build_graph(batch), 0.98)
    np.testing.assert_allclose(V, [0.98 / 3])
    np.testing.assert_allclose(Q, [0.49, 0.0])
    # Empty batch.
    assert compute_advantages("crbc", make_batch([])).step.shape == (0,)


def hand_graph(n_states, counts):
    """A TrajectoryGraph from ``counts[(s, a)] = {x: N(s, a, x)}`` (x a state, "+" or "-")."""
    pairs = sorted(counts)
    sa_count = np.array([sum(counts[p].values()) for p in pairs], dtype=np.float64)
    sa_state = np.array([s for s, _ in pairs])
    state_count = np.bincount(sa_state, weights=sa_count, minlength=n_states)
    mu = sp.csr_matrix(
        (sa_count / state_count[sa_state], (sa_state, np.arange(len(pairs)))),
        shape=(n_states, len(pairs)),
    )
    node = {"+": n_states, "-": n_states + 1}
    rows, cols, vals = [], [], []
    for k, p in enumerate(pairs):
        for x, c in counts[p].items():
            rows.append(k)
            cols.append(node.get(x, x))
            vals.append(c / sa_count[k])
    P = sp.csr_matrix((vals, (rows, cols)), shape=(len(pairs), n_states + 2))
    empty = np.zeros(0, dtype=np.int64)
    return TrajectoryGraph(
        n_states=n_states,
        state_group=np.zeros(n_states, dtype=np.int64),
        step_state=empty,
        step_sa=empty,
        step_next=empty,
        sa_state=sa_state,
        sa_action=np.array([a for _, a in pairs]),
        sa_count=sa_count,
        state_count=state_count,
        mu=mu,
        P=P,
    )


def test_epsilon_zero_gives_zero_for_all_equal_groups():
    # Group 0: two identical failures (all-equal returns: 0/0 in the GRPO base with ε = 0);
    # group 1: a success and a failure from one state with two actions.
    spec = [
        [[("s", "a", 0.0), ("t", "b", 0.0)], [("s", "a", 0.0), ("t", "b", 0.0)]],
        [[("u", "a", 1.0)], [("u", "b", 0.0)]],
    ]
    batch = make_batch(spec)
    cfg = estimator_config("crbc", {"epsilon": 0.0})
    adv = compute_advantages("crbc", batch, cfg).step  # raised FloatingPointError before
    np.testing.assert_array_equal(adv[:4], 0.0)
    # Group 1: A^G = ±0.5/√0.5 = ±1/√2 (no ε); Q(u,a) = β = 0.98, Q(u,b) = 0, V(u) = 0.49,
    # σ(u) = 0.49 > σ_min → A^S = ±1; A = A^G + 5·A^S.
    np.testing.assert_allclose(adv[4:], [np.sqrt(0.5) + 5.0, -np.sqrt(0.5) - 5.0], rtol=1e-12)


def test_closed_cycle_is_guarded_at_beta_one():
    # From data I − M is never singular: every visited state lies on a trajectory that ends at
    # a boundary, so every state is transient. A closed cycle therefore needs a hand-built
    # process: states 0 <-> 1 with no exit, and state 2 that exits to z⁺ or z⁻.
    graph = hand_graph(3, {(0, 0): {1: 1}, (1, 0): {0: 1}, (2, 0): {"+": 1}, (2, 1): {"-": 1}})
    naive = np.eye(3) - graph.transition_matrix().toarray()
    assert np.linalg.matrix_rank(naive) == 2  # singular at β = 1
    V, Q = closure_values(graph, 1.0)
    # The cycle never reaches success: V = 0 there (its value for every β); V(2) = 1/2.
    np.testing.assert_allclose(V, [0.0, 0.0, 0.5])
    np.testing.assert_allclose(Q, [0.0, 0.0, 1.0, 0.0])
    V, Q = closure_values(graph, 0.9)
    np.testing.assert_allclose(V, [0.0, 0.0, 0.45])
    # A cycle whose states do exit is kept and solved exactly at β = 1: 0 -> 1 -> {0, z⁺}.
    # V(1) = (V(0) + 1)/2 and V(0) = V(1) -> V = 1 (success is certain without discount).
    graph = hand_graph(2, {(0, 0): {1: 2}, (1, 0): {0: 1, "+": 1}})
    V, Q = closure_values(graph, 1.0)
    np.testing.assert_allclose(V, [1.0, 1.0])


def test_self_loop_action_gets_negative_credit():
    # Q(s, loop) = β V(s) < V(s) whenever V(s) > 0 and β < 1 (the paper's edge case).
    batch = make_batch([[[("s", "loop", 0.0), ("s", "go", 10.0)], [("s", "go", 10.0)]]])
    graph = build_graph(batch)
    V, Q = closure_values(graph, 0.98)
    loop = list(batch.action_names).index("loop")
    k = int(np.flatnonzero(graph.sa_action == loop)[0])
    assert Q[k] == pytest.approx(0.98 * V[0]) and Q[k] < V[0]
    assert step_credit(graph, V, Q, 0.1)[k] < 0


def test_step_credit_checks_shapes():
    graph = build_graph(make_batch(GOLDEN))
    with pytest.raises(ValueError, match="must be"):
        step_credit(graph, np.zeros(2), np.zeros(graph.n_pairs), 0.1)


# ---------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("beta", 0.0),
        ("beta", 1.5),
        ("depth", -2),
        ("sigma_min", 0.0),
        ("w_step", -1.0),
        ("w_group", -1.0),
        ("base", "ppo"),
        ("epsilon", -1.0),
    ],
)
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=rf"algo\.{field}"):
        estimator_config("crbc", {field: value})


def test_default_config_matches_the_paper():
    cfg = estimator_config("crbc")
    assert (cfg.beta, cfg.depth, cfg.w_group, cfg.w_step, cfg.sigma_min) == (
        0.98,
        -1,
        1.0,
        5.0,
        0.1,
    )
