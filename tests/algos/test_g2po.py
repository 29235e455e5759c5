"""G2PO: the worked example by hand, a plain-loop reference on random batches, edge cases, config.

The spec → StepBatch builder, the random-batch strategy and the per-row episode reference
defined here are shared with tests/algos/test_graphgpo.py.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos.g2po import g2po_components, node_values, row_episode_rewards
from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config
from agentrl.credit.batch import Step, StepBatch, Trajectory, TrajectoryGroup
from agentrl.credit.contract import check_estimator

EPS = 1e-6

# ---------------------------------------------------------------------------------------------
# Specs: spec[g] is a list of trajectories {"steps": [(anchor, env_reward, valid, cost), ...],
# "end": "terminated" | "truncated", "won": bool}. env_reward is the environment's reward; the
# builder subtracts the rollout's invalid penalty on invalid steps, as agentrl's rollout does.


def traj(*steps: tuple, end: str = "terminated", won: bool = False) -> dict:
    """A trajectory spec from (anchor, env_reward[, valid[, cost]]) tuples (valid, cost 1)."""
    full = []
    for s in steps:
        valid = s[2] if len(s) > 2 else True
        cost = s[3] if len(s) > 3 else 1.0
        full.append((s[0], float(s[1]), bool(valid), float(cost)))
    return {"steps": full, "end": end, "won": won}


def batch_from_spec(spec: list[list[dict]], rollout_penalty: float = 0.1) -> StepBatch:
    """The StepBatch of a spec through the rollout types; costs go to the column ``len``."""
    groups = []
    for g, trajs in enumerate(spec):
        group = TrajectoryGroup(task=f"task {g}", seed=g)
        for tr in trajs:
            out = Trajectory(won=tr["won"])
            n = len(tr["steps"])
            for t, (anchor, env_reward, valid, cost) in enumerate(tr["steps"]):
                last = t == n - 1
                out.steps.append(
                    Step(
                        prompt_ids=[1],
                        response_ids=[2],
                        logprobs=[-0.5],
                        reward=env_reward - (0.0 if valid else rollout_penalty),
                        terminated=last and tr["end"] == "terminated",
                        truncated=last and tr["end"] == "truncated",
                        anchor=anchor,
                        action=f"go {anchor}" if valid else None,
                        valid=valid,
                        costs={"len": cost},
                    )
                )
            group.trajectories.append(out)
        groups.append(group)
    return StepBatch.from_groups(groups)


# Few anchors so that nodes collide and revisits (self-loops included) are common.
ANCHORS = ("a", "b", "c", "d", "e")
ENV_REWARDS = (0.0, 0.0, 0.0, 1.0, 10.0, -0.5, 0.25)
COSTS = (0.0, 0.5, 1.0, 1.0, 2.0)  # dyadic: equal path lengths stay exactly equal

step_st = st.tuples(
    st.sampled_from(ANCHORS),
    st.sampled_from(ENV_REWARDS),
    st.sampled_from((True, True, True, False)),
    st.sampled_from(COSTS),
)
traj_st = st.fixed_dictionaries(
    {
        "steps": st.lists(step_st, min_size=1, max_size=6),
        "end": st.sampled_from(("terminated", "truncated")),
        "won": st.booleans(),
    }
)
specs = st.lists(st.lists(traj_st, min_size=1, max_size=5), min_size=1, max_size=4)
modes = st.sampled_from(("mean_norm", "mean_std_norm"))
PROPERTY = settings(max_examples=60, deadline=None, derandomize=True)


# ---------------------------------------------------------------------------------------------
# Slow reference: plain loops over dictionaries, written from the equations of the paper's code
# (module docstring of agentrl.algos.g2po) without the vectorised helpers.


def ref_norm(x: float, members: list[float], mode: str, singleton: float) -> float:
    """(x − mean)/(std + ε) or x − mean over ``members``; ``singleton`` for one member; 0 when
    all members are equal."""
    if len(members) == 1:
        return singleton
    if all(m == members[0] for m in members):
        return 0.0
    mean = statistics.fmean(members)
    if mode == "mean_norm":
        return x - mean
    return (x - mean) / (statistics.stdev(members) + EPS)


def ref_rows(trajs: list[dict], p: float) -> list[dict]:
    """The step rows of one task group with their trajectory facts and R_{i,t}."""
    rows = []
    for i, tr in enumerate(trajs):
        T = len(tr["steps"])
        E = sum(s[1] for s in tr["steps"])  # the environment's episode reward
        for t, (anchor, _, valid, cost) in enumerate(tr["steps"]):
            rows.append(
                {
                    "i": i,
                    "t": t,
                    "T": T,
                    "anchor": anchor,
                    "valid": valid,
                    "cost": cost,
                    "won": tr["won"],
                    "R": E - (0.0 if valid else p),
                }
            )
    return rows


def ref_row_episode(rows: list[dict], mode: str) -> list[float]:
    """A^E per row: every row is a member; a single row uses mean 0 and std 1."""
    members = [r["R"] for r in rows]
    single = [r["R"] if mode == "mean_norm" else r["R"] / (1 + EPS) for r in rows]
    return [ref_norm(r["R"], members, mode, s) for r, s in zip(rows, single)]


def ref_g2po_parts(spec, gamma: float, mode: str, p: float, success_reward: float = 10.0):
    """Per step, in batch order: (A^E, A^N, A^D)."""
    out = []
    for trajs in spec:
        rows = ref_rows(trajs, p)
        occurrences = defaultdict(list)
        for r in rows:
            won = success_reward if r["won"] else 0.0
            occurrences[r["anchor"]].append(gamma ** (r["T"] - r["t"]) * won)
        V = {a: statistics.fmean(v) for a, v in occurrences.items()}
        for k, r in enumerate(rows):
            if r["t"] < r["T"] - 1:
                r["next"] = V[rows[k + 1]["anchor"]]
            else:
                r["next"] = success_reward if r["won"] else 0.0
            r["y"] = r["next"] - (0.0 if r["valid"] else p)
            r["delta"] = r["next"] - V[r["anchor"]]
        by_node = defaultdict(list)
        for r in rows:
            by_node[r["anchor"]].append(r["y"])
        deltas = [r["delta"] for r in rows]
        episode = ref_row_episode(rows, mode)
        for r, e in zip(rows, episode):
            node = ref_norm(r["y"], by_node[r["anchor"]], mode, 0.0)
            out.append((e, node, ref_norm(r["delta"], deltas, mode, 0.0)))
    return out


def g2po(spec, rollout_penalty: float = 0.1, **overrides) -> np.ndarray:
    cfg = estimator_config("g2po", overrides)
    return compute_advantages("g2po", batch_from_spec(spec, rollout_penalty), cfg).step


def parts(spec, **overrides) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return g2po_components(batch_from_spec(spec), estimator_config("g2po", overrides))


# ---------------------------------------------------------------------------------------------
# The worked example: one task group, every action valid except τ2's second step.
#   τ1 (won, E = 10): A→B, B→C, C→s⁺;  τ2 (failed, E = 0): A→D, D→D (invalid), D→F;
#   τ3 (won, E = 10): A→B, B→s⁺.

WORKED = [
    [
        traj(("A", 0), ("B", 0), ("C", 10), won=True),
        traj(("A", 0), ("D", 0, False), ("D", 0)),
        traj(("A", 0), ("B", 10), won=True),
    ]
]
# Node values, γ = 0.95, r⁺ = 10 (occurrence value γ^{T−t}·10·w):
#   V(A) = (0.95³·10 + 0 + 0.95²·10)/3 = (8.57375 + 9.025)/3 = 5.86625
#   V(B) = (0.95²·10 + 0.95·10)/2 = (9.025 + 9.5)/2 = 9.2625;  V(C) = 9.5;  V(D) = 0.
# Successors V': τ1 9.2625, 9.5, 10 | τ2 0, 0, 0 (s⁻) | τ3 9.2625, 10.
# y = V' − 0.1·invalid: only τ2 t1 changes, to −0.1.
#   node A: y = 9.2625, 0, 9.2625 → mean 6.175, centred 3.0875, −6.175, 3.0875,
#           std = sqrt((2·3.0875² + 6.175²)/2) = 5.34766 → 0.57735, −1.15470, 0.57735
#   node B: y = 9.5, 10 → ∓0.25, std 0.353553 → ∓0.70711;  node D: −0.1, 0 → ∓0.70711
#   node C: a single occurrence → 0
# δ = V' − V(s): 3.39625, 0.2375, 0.5 | −5.86625, 0, 0 | 3.39625, 0.7375; mean 0.30015625
# R rows: 10, 10, 10 | 0, −0.1, 0 | 10, 10; mean 49.9/8 = 6.2375.
WORKED_TABLE = {  # four-decimal values worked out independently of this implementation
    "episode": [0.7246, 0.7246, 0.7246, -1.2012, -1.2204, -1.2012, 0.7246, 0.7246],
    "node": [0.5774, -0.7071, 0.0, -1.1547, -0.7071, 0.7071, 0.5774, 0.7071],
    "edge": [1.0792, -0.0218, 0.0697, -2.1494, -0.1046, -0.1046, 1.0792, 0.1524],
    "total": [2.3811, -0.0044, 0.7942, -4.5053, -2.0322, -0.5987, 2.3811, 1.5841],
}


def test_worked_example_node_values():
    v_node, v_next = node_values(batch_from_spec(WORKED), 0.95, 10.0)
    v = {"A": 5.86625, "B": 9.2625, "C": 9.5, "D": 0.0}
    np.testing.assert_allclose(v_node, [v[a] for a in "ABCADDAB"], rtol=1e-12)
    np.testing.assert_allclose(v_next, [9.2625, 9.5, 10, 0, 0, 0, 9.2625, 10], rtol=1e-12)


def test_worked_example_mean_std_norm():
    episode, node, edge = parts(WORKED)
    np.testing.assert_allclose(episode, WORKED_TABLE["episode"], atol=5e-5)
    np.testing.assert_allclose(node, WORKED_TABLE["node"], atol=5e-5)
    np.testing.assert_allclose(edge, WORKED_TABLE["edge"], atol=5e-5)
    np.testing.assert_allclose(g2po(WORKED), WORKED_TABLE["total"], atol=1e-4)
    # Exact forms of a few entries: node A (3.0875 over its unbiased std) and τ2's invalid row.
    std_a = np.sqrt((2 * 3.0875**2 + 6.175**2) / 2)
    assert node[0] == pytest.approx(3.0875 / (std_a + EPS), rel=1e-12)
    rows = np.array([10, 10, 10, 0, -0.1, 0, 10, 10])
    assert episode[4] == pytest.approx((-0.1 - rows.mean()) / (rows.std(ddof=1) + EPS), rel=1e-12)


def test_worked_example_mean_norm_by_hand():
    adv = g2po(WORKED, mode="mean_norm")
    # A^E = R − 6.2375; A^N = y − node mean; A^D = δ − 0.30015625 (centred δ: 3.09609375,
    # −0.06265625, 0.19984375 | −6.16640625, −0.30015625, −0.30015625 | 3.09609375, 0.43734375):
    #   τ1 t0: 3.7625 + 3.0875 + 3.09609375 = 9.94609375
    #   τ1 t1: 3.7625 − 0.25 − 0.06265625 = 3.44984375
    #   τ1 t2: 3.7625 + 0 + 0.19984375 = 3.96234375
    #   τ2 t0: −6.2375 − 6.175 − 6.16640625 = −18.57890625
    #   τ2 t1: −6.3375 − 0.05 − 0.30015625 = −6.68765625
    #   τ2 t2: −6.2375 + 0.05 − 0.30015625 = −6.48765625
    #   τ3 t1: 3.7625 + 0.25 + 0.43734375 = 4.44984375
    expected = [
        9.94609375,
        3.44984375,
        3.96234375,
        -18.57890625,
        -6.68765625,
        -6.48765625,
        9.94609375,
        4.44984375,
    ]
    np.testing.assert_allclose(adv, expected, rtol=1e-12)


def test_w_step_weights_the_node_and_edge_terms():
    episode, node, edge = parts(WORKED)
    np.testing.assert_allclose(g2po(WORKED, w_step=0.5), episode + 0.5 * (node + edge), rtol=1e-12)
    np.testing.assert_array_equal(g2po(WORKED, w_step=0.0), episode)


def test_metrics():
    out = compute_advantages("g2po", batch_from_spec(WORKED))
    for key in ("episode_adv_std", "node_adv_std", "edge_adv_std"):
        assert out.metrics[f"credit/{key}"] > 0


# ---------------------------------------------------------------------------------------------
# Reference equals vectorised.


@PROPERTY
@given(
    spec=specs,
    gamma=st.sampled_from((0.0, 0.5, 0.95, 1.0)),
    mode=modes,
    w_step=st.sampled_from((0.0, 0.5, 1.0)),
    p=st.sampled_from((0.1, 0.25)),
)
def test_matches_reference(spec, gamma, mode, w_step, p):
    adv = g2po(spec, rollout_penalty=p, gamma=gamma, mode=mode, w_step=w_step, invalid_penalty=p)
    expected = [e + w_step * (n + d) for e, n, d in ref_g2po_parts(spec, gamma, mode, p)]
    np.testing.assert_allclose(adv, expected, rtol=1e-7, atol=1e-7)


@PROPERTY
@given(spec=specs, mode=modes, success_reward=st.sampled_from((1.0, 10.0)))
def test_parts_match_reference(spec, mode, success_reward):
    batch = batch_from_spec(spec)
    cfg = estimator_config("g2po", {"mode": mode, "success_reward": success_reward})
    got = np.stack(g2po_components(batch, cfg), axis=1)
    expected = np.array(ref_g2po_parts(spec, 0.95, mode, 0.1, success_reward)).reshape(-1, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Edge cases.


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_single_row_group(mode):
    # One step in the whole task group: A^E uses mean 0, std 1; the node is a singleton and the
    # edge term has nothing to compare with (the reference's torch.std would be NaN): both 0.
    spec = [[traj(("s", 10), won=True)]]
    episode, node, edge = parts(spec, mode=mode)
    assert node.tolist() == [0.0] and edge.tolist() == [0.0]
    assert episode[0] == pytest.approx(10.0 if mode == "mean_norm" else 10 / (1 + EPS), rel=1e-12)


def test_single_trajectory_group_rows_centre_to_zero():
    # One trajectory of several valid steps: its rows are equal, so A^E = 0 (per-row statistics,
    # unlike GiGPO's per-trajectory singleton rule).
    episode, _, _ = parts([[traj(("a", 0), ("b", 10), won=True)]])
    np.testing.assert_array_equal(episode, 0.0)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_all_failed_group_is_exactly_zero(mode):
    spec = [
        [traj(("a", 0), ("b", 0)), traj(("a", 0), ("c", 0), end="truncated"), traj(("a", 0))],
        [traj(("x", 0.1), ("y", 0.1)), traj(("x", 0.1), ("y", 0.1))],  # all equal, no success
    ]
    np.testing.assert_array_equal(g2po(spec, mode=mode), 0.0)


def test_truncation_is_failure_and_success_is_the_verdict():
    # A truncated failure and a terminated failure give the same credit.
    ok = traj(("a", 0), ("b", 10), won=True)
    cut = [[ok, traj(("a", 0), ("c", 0), end="truncated")]]
    done = [[ok, traj(("a", 0), ("c", 0), end="terminated")]]
    np.testing.assert_array_equal(g2po(cut), g2po(done))
    # Success is traj_won, not the reward: a reward of 10 without the verdict points to s⁻
    # and contributes nothing to the node values.
    _, v_next = node_values(batch_from_spec([[traj(("a", 0), ("b", 10), won=False)]]), 0.95, 10)
    assert v_next.tolist() == [0.0, 0.0]


def test_partial_credit_enters_only_the_episode_term():
    # The failed trajectory earns 5 (WebShop-like partial credit) instead of 0: V and the
    # successor sink use the binary outcome, so A^N and A^D do not change; A^E does.
    base = [[traj(("a", 0), ("b", 10), won=True), traj(("a", 0), ("c", 0))]]
    partial = [[traj(("a", 0), ("b", 10), won=True), traj(("a", 0), ("c", 5))]]
    e0, n0, d0 = parts(base, mode="mean_norm")
    e1, n1, d1 = parts(partial, mode="mean_norm")
    np.testing.assert_array_equal(n0, n1)
    np.testing.assert_array_equal(d0, d1)
    assert e1[2] > e0[2]


def test_invalid_penalty_lowers_only_its_own_row():
    # The rollout took 0.1 off the invalid step; E_i adds it back, so τ1's valid rows carry
    # E = 10 and only the invalid row carries 9.9.
    spec = [[traj(("a", 0), ("b", 0, False), ("c", 10), won=True), traj(("a", 0), ("d", 10))]]
    rows = row_episode_rewards(batch_from_spec(spec), 0.1)
    np.testing.assert_allclose(rows, [10, 9.9, 10, 10, 10], rtol=1e-15)
    # An invalid step with environment reward 0 adds exactly 0 to E_i.
    rows = row_episode_rewards(batch_from_spec([[traj(("a", 0, False), ("a", 0, False))]]), 0.1)
    assert rows.tolist() == [-0.1, -0.1]


def test_self_loop_has_zero_td_before_centring():
    # τ1 loops on a (invalid) before succeeding; τ2 succeeds at once.
    spec = [[traj(("a", 0, False), ("a", 10), won=True), traj(("a", 10), won=True)]]
    _, v_next = node_values(batch_from_spec(spec), 0.95, 10.0)
    _, node, edge = parts(spec, mode="mean_norm")
    # V(a) = (0.95²·10 + 0.95·10 + 0.95·10)/3 = 9.34166…; δ = 0 (loop), 10 − V(a) twice.
    v_a = (9.025 + 9.5 + 9.5) / 3
    assert v_next[0] == pytest.approx(v_a, rel=1e-15)
    deltas = np.array([0.0, 10 - v_a, 10 - v_a])
    np.testing.assert_allclose(edge, deltas - deltas.mean(), rtol=1e-12)
    # In the node, the looping (invalid) action competes with the successful ones through y.
    assert node[0] < 0 < node[1] and node[1] == node[2]


def test_groups_never_share_nodes():
    # The same anchors in two task groups: each group's credit is what it gets alone.
    g0 = [traj(("a", 0), ("b", 10), won=True), traj(("a", 0), ("c", 0))]
    g1 = [traj(("a", 0), ("c", 0)), traj(("b", 0), ("a", 0), ("c", 10), won=True)]
    both = g2po([g0, g1])
    np.testing.assert_allclose(both, np.concatenate([g2po([g0]), g2po([g1])]), rtol=1e-12)


def test_contract():
    assert "group order" in check_estimator("g2po")
    check_estimator("g2po", estimator_config("g2po", {"mode": "mean_norm", "epsilon": 0.0}))


# ---------------------------------------------------------------------------------------------
# Config errors name algo.<field>.


def test_defaults_are_the_reference_alfworld_settings():
    cfg = estimator_config("g2po")
    assert (cfg.gamma, cfg.w_step, cfg.mode, cfg.epsilon) == (0.95, 1.0, "mean_std_norm", 1e-6)
    assert (cfg.invalid_penalty, cfg.success_reward) == (0.1, 10.0)


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"gamma": 1.5}, "gamma"),
        ({"w_step": -1.0}, "w_step"),
        ({"mode": "mean"}, "mode"),
        ({"epsilon": -1e-6}, "epsilon"),
        ({"invalid_penalty": -0.1}, "invalid_penalty"),
        ({"success_reward": 0.0}, "success_reward"),
        ({"step_advantage_w": 1.0}, "step_advantage_w"),
    ],
)
def test_config_errors_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"algo\.{field}"):
        estimator_config("g2po", overrides)
