"""GraphGPO: the worked example by hand, distances and costs, a plain-loop reference (Bellman-Ford
relaxation instead of the estimator's Dijkstra) on random batches, edge cases, config."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_g2po import (
    EPS,
    PROPERTY,
    WORKED,
    WORKED_TABLE,
    batch_from_spec,
    modes,
    ref_norm,
    ref_row_episode,
    ref_rows,
    specs,
    traj,
)

from agentrl.algos.graphgpo import distance_to_success, edge_costs, graph_returns
from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config
from agentrl.credit.contract import check_estimator
from agentrl.credit.graph import build_graph

# ---------------------------------------------------------------------------------------------
# Slow reference: per task group, edges as (source, target, cost) tuples, distances by repeated
# relaxation (Bellman-Ford), every failed trajectory ending in its own dead end (as the
# reference code's distinct final observations would).

SUCCESS = "s+"


def ref_distances(edges: list[tuple]) -> dict:
    """d(x) to SUCCESS for every node of ``edges``; unreachable nodes get d_max + 1."""
    nodes = {SUCCESS} | {e[0] for e in edges} | {e[1] for e in edges}
    d = {SUCCESS: 0.0}
    for _ in range(len(nodes)):
        for source, target, cost in edges:
            if target in d and cost + d[target] < d.get(source, math.inf):
                d[source] = cost + d[target]
    unreachable = max(d.values()) + 1.0
    return {x: d.get(x, unreachable) for x in nodes}


def ref_graphgpo(
    spec,
    mode: str,
    omega: float = 0.1,
    convention: str = "reference",
    use_cost: bool = False,
    episode_stats: str = "step",
    beta_graph: float = 1.0,
    beta_episode: float = 1.0,
    p: float = 0.1,
    success_reward: float = 10.0,
) -> list[float]:
    out = []
    for trajs in spec:
        rows = ref_rows(trajs, p)
        for k, r in enumerate(rows):
            if r["t"] < r["T"] - 1:
                r["next"] = rows[k + 1]["anchor"]
            else:
                r["next"] = SUCCESS if r["won"] else ("dead end", r["i"])
            r["c"] = r["cost"] if use_cost else 1.0
        d = ref_distances([(r["anchor"], r["next"], r["c"]) for r in rows])
        shift = 1.0 if convention == "reference" else 0.0
        for r in rows:
            r["RG"] = success_reward * omega ** (d[r["next"]] + r["c"] - shift)
        by_source = defaultdict(list)
        for r in rows:
            by_source[r["anchor"]].append(r["RG"])
        if episode_stats == "step":
            episode = ref_row_episode(rows, mode)
        else:  # one vote per trajectory on its return (rewards after the rollout's penalty)
            totals = [sum(s[1] - (0.0 if s[2] else p) for s in tr["steps"]) for tr in trajs]
            single = [x if mode == "mean_norm" else x / (1 + EPS) for x in totals]
            votes = [ref_norm(x, totals, mode, s) for x, s in zip(totals, single)]
            episode = [votes[r["i"]] for r in rows]
        for r, e in zip(rows, episode):
            a_g = ref_norm(r["RG"], by_source[r["anchor"]], mode, 0.0)
            out.append(beta_graph * a_g + beta_episode * e)
    return out


def graphgpo(spec, **overrides) -> np.ndarray:
    cfg = estimator_config("graphgpo", overrides)
    return compute_advantages("graphgpo", batch_from_spec(spec), cfg).step


def returns_and_distances(spec, name: str = "", omega: float = 0.1, convention="reference"):
    batch = batch_from_spec(spec)
    cost = edge_costs(batch, name)
    return graph_returns(build_graph(batch), batch, cost, omega, 10.0, convention)


# ---------------------------------------------------------------------------------------------
# The worked example (see test_g2po.py): d(s⁺) = 0, d(B) = d(C) = 1, d(A) = 2; D and F cannot
# reach s⁺: d = d_max + 1 = 3. R^G = 10·0.1^{d(s')}: A→B 1, B→C 1, C→s⁺ 10 | A→D, D→D, D→F
# 0.01 | A→B 1, B→s⁺ 10.
#   source A: R = 1, 0.01, 1 → mean 0.67, centred 0.33, −0.66, 0.33, std = sqrt(0.3267)
#   source B: R = 1, 10 → ∓0.70711;  source D: 0.01, 0.01 → 0 (the invalid self-loop ties with
#   the other failing action);  source C: one occurrence → 0.
WORKED_GRAPH = [0.5773, -0.7071, 0.0, -1.1547, 0.0, 0.0, 0.5773, 0.7071]


def test_worked_example_distances_and_returns():
    returns, d_next = returns_and_distances(WORKED)
    np.testing.assert_array_equal(d_next, [1, 1, 0, 3, 3, 3, 1, 0])
    np.testing.assert_allclose(returns, [1, 1, 10, 0.01, 0.01, 0.01, 1, 10], rtol=1e-12)


def test_worked_example_advantage():
    adv = graphgpo(WORKED, beta_episode=0.0)
    np.testing.assert_allclose(adv, WORKED_GRAPH, atol=5e-5)
    assert adv[0] == pytest.approx(0.33 / (np.sqrt(0.3267) + EPS), rel=1e-9)
    # Adding the per-row episode term (the same A^E as G2PO's).
    total = graphgpo(WORKED)
    np.testing.assert_allclose(total - adv, WORKED_TABLE["episode"], atol=5e-5)
    # One vote per trajectory (Relax): returns 10, −0.1, 10 → 0.57735 for τ1, τ3, −1.1547 for τ2.
    votes = graphgpo(WORKED, episode_stats="trajectory") - adv
    np.testing.assert_allclose(votes, [0.5774] * 3 + [-1.1547] * 3 + [0.5774] * 2, atol=5e-5)


def test_metrics():
    out = compute_advantages("graphgpo", batch_from_spec(WORKED))
    assert out.metrics["credit/mean_next_distance"] == pytest.approx(12 / 8)
    assert out.metrics["credit/success_group_frac"] == 1.0
    assert out.metrics["credit/graph_adv_std"] > 0 and out.metrics["credit/shortest_path_s"] >= 0


def test_conventions_differ_by_the_factor_omega():
    ref = graphgpo(WORKED, beta_episode=0.0, mode="mean_norm")
    paper = graphgpo(WORKED, beta_episode=0.0, mode="mean_norm", convention="paper")
    np.testing.assert_allclose(paper, 0.1 * ref, rtol=1e-12)
    # Under mean_std_norm the factor cancels (up to ε).
    std_ref = graphgpo(WORKED, beta_episode=0.0)
    std_paper = graphgpo(WORKED, beta_episode=0.0, convention="paper")
    np.testing.assert_allclose(std_paper, std_ref, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# Distances, unreachable nodes and edge costs.


def test_unreachable_level_is_per_task_group():
    # Group 0 is the worked example (d_max = 2 → unreachable 3). Group 1: p→s⁺ wins, p→q fails:
    # d(p) = 1 = d_max, so q and the dead end after the failure sit at 2.
    spec = [WORKED[0], [traj(("p", 10), won=True), traj(("p", 0), ("q", 0))]]
    returns, d_next = returns_and_distances(spec)
    np.testing.assert_array_equal(d_next, [1, 1, 0, 3, 3, 3, 1, 0, 0, 2, 2])
    np.testing.assert_allclose(returns[-3:], [10, 0.1, 0.1], rtol=1e-12)


def test_distance_to_success_uses_the_cheapest_parallel_edge():
    # τ1: a –(2)→ b –(1)→ s⁺ (won); τ2: a –(0.5)→ b –(3)→ dead end.
    # d(b) = 1, d(a) = min(2, 0.5) + 1 = 1.5 = d_max, so the dead end sits at 2.5.
    spec = [
        [
            traj(("a", 0, True, 2.0), ("b", 10), won=True),
            traj(("a", 0, True, 0.5), ("b", 0, True, 3.0)),
        ]
    ]
    batch = batch_from_spec(spec)
    graph = build_graph(batch)
    dist, d_max = distance_to_success(graph, edge_costs(batch, "len"), batch.n_groups)
    assert dist[graph.success] == 0 and np.isinf(dist[graph.failure])
    np.testing.assert_array_equal(dist[graph.step_state], [1.5, 1.0, 1.5, 1.0])
    assert d_max.tolist() == [1.5]
    returns, d_next = returns_and_distances(spec, "len")
    np.testing.assert_array_equal(d_next, [1, 0, 1, 2.5])
    # Exponent d(s') + c − 1: 1 + 2 − 1 = 2, 0, 1 + 0.5 − 1 = 0.5, 2.5 + 3 − 1 = 4.5.
    np.testing.assert_allclose(returns, 10 * 0.1 ** np.array([2, 0, 0.5, 4.5]), rtol=1e-12)
    # Without edge_cost every edge costs 1.
    _, d_unit = returns_and_distances(spec)
    np.testing.assert_array_equal(d_unit, [1, 0, 1, 3])


def test_zero_cost_edge_is_free():
    spec = [[traj(("a", 0, True, 0.0), ("b", 10), won=True)]]
    batch = batch_from_spec(spec)
    graph = build_graph(batch)
    dist, _ = distance_to_success(graph, edge_costs(batch, "len"), batch.n_groups)
    np.testing.assert_array_equal(dist[graph.step_state], [1.0, 1.0])


def test_unknown_edge_cost_names_the_field():
    cfg = estimator_config("graphgpo", {"edge_cost": "fuel"})
    with pytest.raises(ValueError, match=r"algo\.edge_cost='fuel'.*\['len'\]"):
        compute_advantages("graphgpo", batch_from_spec(WORKED), cfg)


# ---------------------------------------------------------------------------------------------
# Edge cases.


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_group_without_success_keeps_only_the_episode_term(mode):
    # Every node sits at d = 1, so every R^G is 10·ω: A^G = 0 exactly.
    spec = [[traj(("a", 0), ("b", 0, False)), traj(("a", 0), ("c", 0), end="truncated")]]
    np.testing.assert_array_equal(graphgpo(spec, mode=mode, beta_episode=0.0), 0.0)
    _, d_next = returns_and_distances(spec)
    np.testing.assert_array_equal(d_next, 1.0)
    # The invalid row still loses its penalty in A^E.
    adv = graphgpo(spec, mode="mean_norm")
    np.testing.assert_allclose(adv, [0.025, -0.075, 0.025, 0.025], rtol=1e-12)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_all_failed_and_single_step_groups(mode):
    spec = [
        [traj(("a", 0), ("b", 0)), traj(("a", 0)), traj(("c", 0), end="truncated")],
        [traj(("x", 10), won=True)],  # a single row: A^G = 0, A^E = R (or R/(1 + ε))
    ]
    adv = graphgpo(spec, mode=mode)
    np.testing.assert_array_equal(adv[:4], 0.0)
    assert adv[4] == pytest.approx(10.0 if mode == "mean_norm" else 10 / (1 + EPS), rel=1e-12)


def test_looping_edge_scores_below_progress():
    # From a: τ1 loops a→a then reaches s⁺; τ2 reaches s⁺ at once. The loop has d(s') = 1,
    # the progress edges 0: R^G = 1 against 10.
    spec = [[traj(("a", 0), ("a", 10), won=True), traj(("a", 10), won=True)]]
    returns, _ = returns_and_distances(spec)
    np.testing.assert_allclose(returns, [1, 10, 10], rtol=1e-12)
    adv = graphgpo(spec, beta_episode=0.0)
    assert adv[0] < 0 < adv[1] and adv[1] == adv[2]


def test_failed_trajectory_entering_a_success_path_gets_credit():
    # τ2 fails later, but its first step enters b, which lies on τ1's success path.
    spec = [
        [
            traj(("a", 0), ("b", 10), won=True),
            traj(("a", 0), ("b", 0), ("c", 0)),
            traj(("a", 0), ("d", 0)),
        ]
    ]
    adv = graphgpo(spec, beta_episode=0.0)
    assert adv[0] == adv[2] > 0 > adv[5]


def test_truncated_last_step_is_at_the_unreachable_level():
    # The batch holds no anchor after the last step, so a truncated failure's last edge points
    # to a dead end, exactly like a terminated failure's.
    ok = traj(("a", 0), ("b", 10), won=True)
    cut = [[ok, traj(("a", 0), ("b", 0), end="truncated")]]
    done = [[ok, traj(("a", 0), ("b", 0), end="terminated")]]
    np.testing.assert_array_equal(graphgpo(cut), graphgpo(done))
    _, d_next = returns_and_distances(cut)
    np.testing.assert_array_equal(d_next, [1, 0, 1, 3])  # d(a) = 2 = d_max


def test_groups_never_share_nodes():
    g0 = [traj(("a", 0), ("b", 10), won=True), traj(("a", 0), ("c", 0))]
    g1 = [traj(("a", 0), ("c", 0)), traj(("b", 0), ("a", 0), ("c", 10), won=True)]
    both = graphgpo([g0, g1])
    np.testing.assert_allclose(both, np.concatenate([graphgpo([g0]), graphgpo([g1])]), rtol=1e-12)


def test_contract():
    assert "group order" in check_estimator("graphgpo")
    cfg = estimator_config(
        "graphgpo", {"mode": "mean_norm", "epsilon": 0.0, "edge_cost": "invalid"}
    )
    check_estimator("graphgpo", cfg)  # the synthetic batches report the cost "invalid" (all 0)


# ---------------------------------------------------------------------------------------------
# Reference equals vectorised.


@PROPERTY
@given(
    spec=specs,
    mode=modes,
    omega=st.sampled_from((0.1, 0.5, 0.8)),
    convention=st.sampled_from(("reference", "paper")),
    use_cost=st.booleans(),
)
def test_matches_reference(spec, mode, omega, convention, use_cost):
    adv = graphgpo(
        spec, mode=mode, omega=omega, convention=convention, edge_cost="len" if use_cost else ""
    )
    expected = ref_graphgpo(spec, mode, omega, convention, use_cost)
    np.testing.assert_allclose(adv, expected, rtol=1e-7, atol=1e-7)


@PROPERTY
@given(
    spec=specs,
    mode=modes,
    episode_stats=st.sampled_from(("step", "trajectory")),
    betas=st.sampled_from(((1.0, 1.0), (0.5, 2.0), (0.0, 1.0), (1.0, 0.0))),
)
def test_episode_options_match_reference(spec, mode, episode_stats, betas):
    adv = graphgpo(
        spec, mode=mode, episode_stats=episode_stats, beta_graph=betas[0], beta_episode=betas[1]
    )
    expected = ref_graphgpo(
        spec, mode, episode_stats=episode_stats, beta_graph=betas[0], beta_episode=betas[1]
    )
    np.testing.assert_allclose(adv, expected, rtol=1e-7, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Config.


def test_defaults_are_the_papers_alfworld_settings():
    cfg = estimator_config("graphgpo")
    assert (cfg.omega, cfg.beta_graph, cfg.beta_episode, cfg.mode) == (0.1, 1, 1, "mean_std_norm")
    assert (cfg.success_reward, cfg.convention, cfg.episode_stats) == (10.0, "reference", "step")
    assert (cfg.invalid_penalty, cfg.edge_cost, cfg.epsilon) == (0.1, "", 1e-6)


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"omega": 0.0}, "omega"),
        ({"omega": 1.0}, "omega"),
        ({"beta_graph": -1.0}, "beta_graph"),
        ({"beta_episode": float("nan")}, "beta_episode"),
        ({"mode": "mean"}, "mode"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"success_reward": -10.0}, "success_reward"),
        ({"convention": "code"}, "convention"),
        ({"episode_stats": "rows"}, "episode_stats"),
        ({"invalid_penalty": -0.1}, "invalid_penalty"),
        ({"gamma": 0.95}, "gamma"),
    ],
)
def test_config_errors_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"algo\.{field}"):
        estimator_config("graphgpo", overrides)
