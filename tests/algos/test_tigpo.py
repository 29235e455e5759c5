"""TIGPO (docs/methods.md#tigpo): golden values of the worked example by hand (a first update is
GraphGPO + GRPO; a revisit gets credit from the stored graph and the earlier group's scores), a
slow reference over several updates on random batches, the state bound, exact resume from a
saved state, separation of tasks, config errors and the estimator contract."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
import pickle
import re

import numpy as np
import pytest
import torch
from helpers import make_batch

from agentrl.algos.tigpo import TIGPOConfig, node_key, task_keys
from agentrl.configuration import ConfigError
from agentrl.credit import check_state, compute_advantages, estimator_config, list_estimators
from agentrl.credit.batch import Step, StepBatch, Trajectory, TrajectoryGroup
from agentrl.credit.contract import check_estimator, permute_groups
from agentrl.run.checkpoint import load_trainer_state

EPS = 1e-6


def tig(batch, state=None, **over):
    return compute_advantages("tigpo", batch, estimator_config("tigpo", over), state=state)


# The worked example: one task, three rollouts, every action valid except τ2's second step
# (reward −0.1). τ1: A→B→C→s⁺ (won, 10); τ2: A→D→D(invalid)→fail; τ3: A→B→s⁺ (won, 10).
FIRST = [
    [
        [("A", "ab", 0.0), ("B", "bc", 0.0), ("C", "c+", 10.0)],
        [("A", "ad", 0.0), ("D", None, -0.1), ("D", "df", 0.0)],
        [("A", "ab", 0.0), ("B", "b+", 10.0)],
    ]
]
# The same task re-run later; both rollouts fail: A→D→C→fail and A→D→D→fail (all valid).
REVISIT = [
    [
        [("A", "ad", 0.0), ("D", "dc", 0.0), ("C", "cx", 0.0)],
        [("A", "ad", 0.0), ("D", "dd", 0.0), ("D", "dx", 0.0)],
    ]
]


def test_first_update_is_graphgpo_plus_grpo_by_hand():
    out = tig(make_batch(FIRST))
    # Distances: d(s⁺) = 0, d(B) = d(C) = 1, d(A) = 2; D reaches s⁺ nowhere, nor does τ2's
    # dead end: d_max + 1 = 3. q = 10·0.1^d(s'):
    #   τ1: A→B 1, B→C 1, C→s⁺ 10;  τ2: A→D 0.01, D→D 0.01, D→end 0.01;  τ3: A→B 1, B→s⁺ 10.
    # Same-source groups: A {1, 0.01, 1}: mean 0.67, unbiased std √0.3267 = 0.571577,
    #   so 0.33/0.571577 = 0.577350 and −0.66/0.571577 = −1.154700;
    #   B {1, 10}: ±4.5/6.363961 = ±0.707107;  C and the D pair (equal q): 0.
    a_a, a_d, a_b = (
        0.33 / (math.sqrt(0.3267) + EPS),
        -0.66 / (math.sqrt(0.3267) + EPS),
        4.5 / (math.sqrt(40.5) + EPS),
    )
    # Episode term (GRPO, one vote per trajectory): returns (10, −0.1, 10), mean 6.633333,
    # std √((3.366667² ·2 + 6.733333²)/2) = 5.831238: +0.577350 for τ1, τ3 and −1.154700 for τ2.
    ret = np.array([10.0, -0.1, 10.0])
    z = (ret - ret.mean()) / (ret.std(ddof=1) + EPS)
    want = [
        a_a + z[0], -a_b + z[0], 0 + z[0],
        a_d + z[1], 0 + z[1], 0 + z[1],
        a_a + z[2], a_b + z[2],
    ]  # fmt: skip
    np.testing.assert_allclose(out.step, want, rtol=1e-12)
    np.testing.assert_allclose(
        out.step, [1.1547, -0.1298, 0.5774, -2.3094, -1.1547, -1.1547, 1.1547, 1.2845], atol=1e-4
    )
    # The store: the five valid transitions that reach a state or s⁺ (τ2's invalid self-loop
    # and its dead end are not stored), and the three scores of the group.
    (entry,) = out.state["tasks"].values()
    k = {s: node_key(s) for s in "ABCD"}
    assert entry["edges"] == {
        k["A"]: {k["B"]: 1, k["D"]: 1},
        k["B"]: {k["C"]: 1, "+": 1},
        k["C"]: {"+": 1},
    }
    ref = entry["ref"]
    assert ref["n"] == 3 and ref["update"] == 1
    assert math.isclose(ref["mean"], ret.mean(), rel_tol=1e-15)
    assert math.isclose(ref["m2"], ret.var() * 3, rel_tol=1e-12)
    assert out.metrics["credit/revisit_frac"] == 0.0 and out.metrics["credit/store_edges"] == 5


def test_revisit_gets_credit_from_the_stored_graph_and_the_earlier_scores_by_hand():
    first = tig(make_batch(FIRST))
    out = tig(make_batch(REVISIT), first.state)
    # Ḡ = stored ∪ current: C→s⁺ is known from update 1, so d(C) = 1, d(D) = 2 (D→C),
    # d(A) = 2 (A→B→s⁺), dead end d_max + 1 = 3. q:
    #   τa: A→D 0.1, D→C 1, C→end 0.01;  τb: A→D 0.1, D→D 0.1, D→end 0.01.
    # Groups: A {0.1, 0.1}: 0; C: singleton, 0; D {1, 0.1, 0.01}: mean 0.37, deviations
    # (0.63, −0.27, −0.36), unbiased var (0.3969 + 0.0729 + 0.1296)/2 = 0.2997.
    sd = math.sqrt(0.2997) + EPS
    # Cross-temporal: Z = [10, −0.1, 10 | 0, 0], mean 3.98, unbiased var 120.808/4 = 30.202;
    # each current rollout gets −3.98/5.495635 = −0.724209 (GRPO alone would give 0).
    ct = -3.98 / (math.sqrt(30.202) + EPS)
    want = [ct, 0.63 / sd + ct, ct, ct, -0.27 / sd + ct, -0.36 / sd + ct]
    np.testing.assert_allclose(out.step, want, rtol=1e-9)
    np.testing.assert_allclose(
        out.step, [-0.7242, 0.4266, -0.7242, -0.7242, -1.2174, -1.3818], atol=1e-4
    )
    assert out.metrics["credit/revisit_frac"] == 1.0
    # Without history the all-fail group gets nothing: no success anywhere (every d = 1) and
    # equal returns.
    assert np.all(tig(make_batch(REVISIT)).step == 0.0)
    # Ablations: no stored graph keeps only the cross-temporal term; no reference keeps only
    # the graph term (the group's own returns are equal).
    np.testing.assert_allclose(tig(make_batch(REVISIT), first.state, max_edges=0).step, ct)
    np.testing.assert_allclose(
        tig(make_batch(REVISIT), first.state, cross_temporal=False).step,
        np.array(want) - ct,
        atol=1e-15,
    )


def test_mean_norm_by_hand():
    first = tig(make_batch(FIRST), mode="mean_norm")
    # A {1, 0.01, 1} − 0.67; B {1, 10} − 5.5; returns − 6.633333.
    r = 19.9 / 3
    want = [0.33 + 10 - r, -4.5 + 10 - r, 10 - r, -0.66 - 0.1 - r, -0.1 - r, -0.1 - r]
    want += [0.33 + 10 - r, 4.5 + 10 - r]
    np.testing.assert_allclose(first.step, want, rtol=1e-12)
    out = tig(make_batch(REVISIT), first.state, mode="mean_norm")
    ct = -3.98
    want = [ct, 0.63 + ct, ct, ct, -0.27 + ct, -0.36 + ct]
    np.testing.assert_allclose(out.step, want, rtol=1e-12)


def test_reference_age_and_the_latest_earlier_group():
    s1 = tig(make_batch(FIRST)).state
    other = make_batch([[[("Q", "q", 1.0)], [("Q", "q", 0.0)]]])  # another start: another task
    s2 = tig(other, s1).state  # update 2 sees another task only
    fail = make_batch(REVISIT)
    # At update 3 the reference of update 1 is 2 updates old.
    assert tig(fail, s2, max_reference_age=2).metrics["credit/revisit_frac"] == 1.0
    young = tig(fail, s2, max_reference_age=1)
    assert young.metrics["credit/revisit_frac"] == 0.0
    # Too old: GRPO's episode term (0 for equal returns), the graph term still uses history.
    np.testing.assert_allclose(young.step, tig(fail, s2, cross_temporal=False).step, rtol=0, atol=0)
    # After the revisit the reference is the revisit's scores (two zeros).
    ref = next(iter(tig(fail, s1).state["tasks"].values()))["ref"]
    assert ref == {"n": 2, "mean": 0.0, "m2": 0.0, "update": 2}


def test_tasks_never_share_a_graph():
    """The same anchors in another task (another cluster) see none of the first task's
    edges; the same task text with another start state is another task too."""
    state = tig(make_batch(FIRST)).state
    moved = dataclasses.replace(make_batch(REVISIT), group_cluster=("another task",))
    assert np.all(tig(moved, state).step == 0.0)
    assert len(tig(moved, state).state["tasks"]) == 2
    restart = make_batch([[[("A2", "a", 0.0), *REVISIT[0][0][1:]], REVISIT[0][1]]])
    assert len(set(task_keys(restart)) | set(task_keys(make_batch(FIRST)))) == 2


def test_graph_credit_without_any_success_is_zero_and_invalid_edges_are_not_stored():
    batch = make_batch([[[("A", None, -0.1), ("A", "x", 0.0)], [("A", "y", 0.0)]]])
    out = tig(batch)
    # Equal q everywhere (d = 1 for all), returns (−0.1, 0): only the GRPO term.
    np.testing.assert_allclose(out.step, compute_advantages("grpo", batch).step, atol=0)
    (entry,) = out.state["tasks"].values()
    assert entry["edges"] == {}  # the invalid self-loop and two dead ends


# --- a slow reference: plain loops, its own store, Bellman-Ford distances ---


class Reference:
    """TIGPO as the module docstring states it, written independently with plain loops; the
    task and node keys (tested on their own below) are the only shared code."""

    def __init__(self, cfg: TIGPOConfig):
        self.cfg = cfg
        self.u = 0
        self.tasks: dict[str, dict] = {}  # key -> {"last", "edges": {(s, x): seen}, "scores"}

    def __call__(self, batch: StepBatch) -> np.ndarray:
        cfg = self.cfg
        self.u += 1
        keys = task_keys(batch)
        n = batch.n_steps
        src = [node_key(batch.anchor_keys[batch.step_anchor[k]]) for k in range(n)]
        dst = []
        for k in range(n):
            i = batch.step_traj[k]
            if k + 1 < n and batch.step_traj[k + 1] == i:
                dst.append(src[k + 1])
            else:
                dst.append("+" if batch.traj_won[i] else "-")
        task_of_step = [keys[batch.traj_group[batch.step_traj[k]]] for k in range(n)]
        q = [0.0] * n
        for key in set(keys):
            edges = set()
            if cfg.max_edges > 0 and key in self.tasks:
                edges |= set(self.tasks[key]["edges"])
            edges |= {(src[k], dst[k]) for k in range(n) if task_of_step[k] == key}
            d = {"+": 0}
            changed = True
            while changed:  # Bellman-Ford with unit costs
                changed = False
                for s, x in edges:
                    if x in d and d[x] + 1 < d.get(s, math.inf):
                        d[s] = d[x] + 1
                        changed = True
            far = max(d.values()) + 1
            for k in range(n):
                if task_of_step[k] == key:
                    q[k] = cfg.success_value * cfg.graph_discount ** d.get(dst[k], far)
        a_tg = []
        for k in range(n):
            g = batch.traj_group[batch.step_traj[k]]
            members = [
                q[j]
                for j in range(n)
                if batch.traj_group[batch.step_traj[j]] == g and src[j] == src[k]
            ]
            a_tg.append(self.normalise(q[k], members, single=0.0))
        # Episode term.
        ret = [sum(batch.step_reward[batch.step_traj == i]) for i in range(batch.n_trajs)]
        a_ep = [0.0] * batch.n_trajs
        for g in range(batch.n_groups):
            trajs = [i for i in range(batch.n_trajs) if batch.traj_group[i] == g]
            z = [ret[i] for i in trajs]
            old = self.tasks.get(keys[g])
            age_ok = old is not None and (
                cfg.max_reference_age == 0 or self.u - old["last"] <= cfg.max_reference_age
            )
            for i in trajs:
                if cfg.cross_temporal and age_ok:
                    a_ep[i] = self.normalise(ret[i], old["scores"] + z, single=None)
                else:
                    a_ep[i] = self.normalise(ret[i], z, single=ret[i])
        out = np.array(
            [
                cfg.step_weight * a_tg[k] + cfg.episode_weight * a_ep[batch.step_traj[k]]
                for k in range(n)
            ]
        )
        # Update the store, then evict.
        for key in set(keys):
            entry = self.tasks.get(key, {"edges": {}})
            edges = dict(entry["edges"]) if cfg.max_edges > 0 else {}
            for k in range(n):
                if task_of_step[k] == key and batch.step_valid[k] and dst[k] != "-":
                    edges[(src[k], dst[k])] = self.u
            kept = sorted(edges, key=lambda e: (-edges[e], e))[: cfg.max_edges]
            scores = [ret[i] for i in range(batch.n_trajs) if keys[batch.traj_group[i]] == key]
            self.tasks[key] = {"last": self.u, "edges": {e: edges[e] for e in kept}}
            self.tasks[key]["scores"] = scores
        order = sorted(self.tasks, key=lambda k: (-self.tasks[k]["last"], k))
        self.tasks = {k: self.tasks[k] for k in order[: cfg.max_tasks]}
        return out

    def normalise(self, x: float, members: list[float], single: float | None) -> float:
        """x against its group: (x − mean)/(std + ε) or x − mean; ``single`` for a group of
        one."""
        if len(members) < 2 and single is not None:
            return single / (1.0 + self.cfg.epsilon) if self.cfg.mode != "mean_norm" else single
        if max(members) == min(members):  # all equal: exactly 0, whatever the rounding
            return 0.0
        mean = float(np.mean(members))
        if self.cfg.mode == "mean_norm":
            return x - mean
        std = float(np.std(members, ddof=1))
        return (x - mean) / (std + self.cfg.epsilon) if std + self.cfg.epsilon > 0 else 0.0


def random_batch(
    rng: np.random.Generator, tasks: list[int], group_size: int = 4, n_states: int = 5
) -> StepBatch:
    """Groups of random walks over anchors ("s", k), shared by every task (the cluster tells
    the tasks apart): a valid move goes to a random state or tries to finish (success from the
    last two states, failure elsewhere); invalid moves (reward −0.1) stay put; the horizon
    truncates. Sizes vary, so some groups have one rollout."""
    groups = []
    for task in tasks:
        group = TrajectoryGroup(task=f"task {task}", seed=task)
        for _ in range(int(rng.integers(1, group_size + 1))):
            tr, s, horizon = Trajectory(), 0, int(rng.integers(1, 7))
            for t in range(horizon):
                valid = rng.random() > 0.2
                x = int(rng.integers(0, n_states + 1)) if valid else s
                finish = valid and x == n_states
                won = finish and s >= n_states - 2
                reward = 10.0 if won else (0.0 if valid else -0.1)
                end = finish or t == horizon - 1
                tr.steps.append(
                    Step(
                        prompt_ids=[1],
                        response_ids=[2],
                        logprobs=[-0.5],
                        reward=reward,
                        terminated=finish,
                        truncated=end and not finish,
                        anchor=("s", s),
                        action=f"go {x}" if valid else None,
                        valid=valid,
                        prompt_text=f"task {task} from s0" if t == 0 else "",
                    )
                )
                tr.won = won
                if end:
                    break
                s = x
            group.trajectories.append(tr)
        groups.append(group)
    return StepBatch.from_groups(groups)


CONFIGS = [
    {},
    {"mode": "mean_norm"},
    {"max_edges": 6, "max_tasks": 3},
    {"max_edges": 0},
    {"cross_temporal": False, "graph_discount": 0.5},
    {"max_reference_age": 2, "step_weight": 0.5, "episode_weight": 2.0},
    {"epsilon": 0.0, "success_value": 1.0, "graph_discount": 1.0},
]


@pytest.mark.parametrize("over", CONFIGS, ids=lambda o: ",".join(map(str, o.items())) or "defaults")
def test_agrees_with_a_slow_reference_over_several_updates(over):
    rng = np.random.default_rng(len(str(over)))
    cfg = estimator_config("tigpo", over)
    ref = Reference(cfg)
    state = None
    for _ in range(12):
        tasks = [int(t) for t in rng.choice(6, size=int(rng.integers(1, 5)))]  # repeats too
        batch = random_batch(rng, tasks)
        out = compute_advantages("tigpo", batch, cfg, state=state)
        np.testing.assert_allclose(out.step, ref(batch), rtol=1e-9, atol=1e-8)
        state = out.state
        # The stores hold the same tasks and the same stamped edges.
        assert set(state["tasks"]) == set(ref.tasks)
        for key, entry in state["tasks"].items():
            flat = {(s, x): seen for s, out_ in entry["edges"].items() for x, seen in out_.items()}
            assert flat == ref.tasks[key]["edges"]
            scores = ref.tasks[key]["scores"]
            assert entry["ref"]["n"] == len(scores)
            assert math.isclose(entry["ref"]["mean"], np.mean(scores), abs_tol=1e-12)


@pytest.mark.parametrize("mode", ["mean_std_norm", "mean_norm"])
def test_without_history_it_equals_graphgpo_with_one_vote_per_trajectory(mode):
    """An independent implementation of the batch-local method: TIGPO's first update (and
    every update with ``max_edges=0, cross_temporal=false``) is GraphGPO's A^G plus the
    trajectory-level episode term, when each task appears once per batch."""
    if "graphgpo" not in list_estimators():
        pytest.skip("graphgpo is not registered")
    rng = np.random.default_rng(5)
    for _ in range(20):
        batch = random_batch(rng, [int(t) for t in rng.choice(8, size=4, replace=False)])
        g = {"omega": 0.1, "episode_stats": "trajectory", "mode": mode}
        want = compute_advantages("graphgpo", batch, estimator_config("graphgpo", g)).step
        np.testing.assert_allclose(tig(batch, mode=mode).step, want, rtol=1e-12, atol=1e-12)


def test_the_state_stays_within_its_bound():
    rng = np.random.default_rng(7)
    cfg = estimator_config("tigpo", {"max_tasks": 5, "max_edges": 8})
    state, sizes = None, []
    for u in range(1, 301):
        tasks = [int(t) for t in rng.choice(40, size=3, replace=False)]
        batch = random_batch(rng, tasks, group_size=4, n_states=9)
        state = compute_advantages("tigpo", batch, cfg, state=state).state
        check_state(state)
        assert state["updates"] == u and len(state["tasks"]) <= 5
        for key in task_keys(batch):  # the tasks just seen are kept
            assert state["tasks"][key]["last"] == u
        for entry in state["tasks"].values():
            n_edges = sum(len(out) for out in entry["edges"].values())
            assert n_edges <= 8
            nodes = set(entry["edges"]) | {x for out in entry["edges"].values() for x in out}
            assert len(nodes) <= 2 * 8 + 1
        sizes.append(len(pickle.dumps(state)))
    # Bounded: the late states are no bigger than the largest early one (plus key churn).
    assert max(sizes[150:]) <= 1.25 * max(sizes[:150])


def test_eviction_is_least_recently_seen_then_by_key():
    cfg = {"max_tasks": 2, "max_edges": 2}
    a = make_batch([[[("A", "x", 0.0), ("B", "y", 0.0), ("C", "z", 10.0)]]])
    s1 = tig(a, **cfg).state
    # Three valid transitions A→B, B→C, C→s⁺ at update 1: two are kept, ties by (s, s').
    (entry,) = s1["tasks"].values()
    flat = sorted((s, x) for s, out in entry["edges"].items() for x in out)
    assert flat == sorted([(node_key("A"), node_key("B")), (node_key("B"), node_key("C")),
                           (node_key("C"), "+")])[:2]  # fmt: skip
    # A later visit stamps C→s⁺ with update 2: it now outlives the older edges.
    again = make_batch([[[("A", "x", 0.0), ("C", "z", 10.0)]]])
    s2 = tig(again, s1, **cfg).state
    (entry,) = s2["tasks"].values()
    assert entry["edges"][node_key("C")] == {"+": 2}
    assert entry["edges"][node_key("A")] == {node_key("C"): 2}
    # Tasks: a third task evicts the least recently seen one.
    b = dataclasses.replace(a, group_cluster=("b",))
    c = dataclasses.replace(a, group_cluster=("c",))
    s3 = tig(c, tig(b, s2, **cfg).state, **cfg).state
    assert set(s3["tasks"]) == set(task_keys(b)) | set(task_keys(c))


def test_resume_from_a_saved_state_is_exact(tmp_path):
    rng = np.random.default_rng(3)
    batches = [random_batch(rng, [int(t) for t in rng.choice(5, size=3)]) for _ in range(6)]
    state = None
    for batch in batches[:3]:
        state = tig(batch, state).state
    # Save it the three ways a run keeps it: a pickle, a weights-only torch checkpoint, a copy.
    pickled = pickle.loads(pickle.dumps(state))
    path = tmp_path / "trainer_state.pt"
    torch.save({"stages": {"credit": {"credit_state": state}}}, path)
    loaded = load_trainer_state(path)["stages"]["credit"]["credit_state"]
    assert pickled == state and loaded == state
    runs = {}
    for name, start in [("live", state), ("pickle", pickled), ("torch", loaded)]:
        s, steps = start, []
        for batch in batches[3:]:
            out = tig(batch, s)
            s, steps = out.state, [*steps, out.step]
        runs[name] = (steps, s)
    for name in ("pickle", "torch"):
        for a, b in zip(runs["live"][0], runs[name][0]):
            np.testing.assert_array_equal(a, b)
        assert runs[name][1] == runs["live"][1]
        assert repr(runs[name][1]) == repr(runs["live"][1])


def test_pure_the_input_state_is_not_modified_and_group_order_does_not_matter():
    rng = np.random.default_rng(11)
    state = tig(random_batch(rng, [0, 1, 2])).state
    batch = random_batch(rng, [0, 1, 2, 3, 1])
    before = copy.deepcopy(state)
    out = tig(batch, state)
    assert state == before
    moved, order = permute_groups(batch, np.array([4, 2, 0, 3, 1]))
    again = tig(moved, state)
    np.testing.assert_allclose(again.step, out.step[order], rtol=1e-12, atol=1e-12)
    assert repr(again.state) == repr(out.state)


def test_lost_episodes_leave_the_state_alone():
    batch = make_batch(FIRST)
    state = tig(batch).state
    lost = dataclasses.replace(batch, traj_lost=np.array([True, True, True]))
    out = tig(lost, state)
    assert out.state == state and not out.step.any()
    half = dataclasses.replace(batch, traj_lost=np.array([False, True, False]))
    kept = batch.select_trajs(np.array([True, False, True]))
    assert tig(half, state).state == tig(kept, state).state


def test_keys_are_fixed_strings():
    """Node and task keys hash the anchors' repr and the texts, never Python's salted
    ``hash``: the literals below hold in every process (each test run has its own hash salt),
    and a change of the key rule, which would orphan every saved store, fails here."""
    assert node_key(("s", 1)) == hashlib.sha1(b"('s', 1)").hexdigest()[:16] == "6128aef752960933"
    assert node_key("A") == "194cc4ad39716d99"
    assert task_keys(make_batch(FIRST)) == ("1aee8f45a1205e44",)


def test_a_batch_without_anchor_texts_is_refused():
    batch = dataclasses.replace(make_batch(FIRST), anchor_keys=None)
    with pytest.raises(ValueError, match="anchor_keys"):
        tig(batch)


def test_defaults_and_config_errors_name_the_field():
    cfg = estimator_config("tigpo")
    assert cfg == TIGPOConfig()
    assert (cfg.graph_discount, cfg.success_value, cfg.step_weight, cfg.episode_weight) == (
        0.1,
        10.0,
        1.0,
        1.0,
    )
    assert (cfg.mode, cfg.epsilon, cfg.cross_temporal, cfg.max_reference_age) == (
        "mean_std_norm",
        1e-6,
        True,
        0,
    )
    assert (cfg.max_tasks, cfg.max_edges) == (1024, 1024)
    bad = [
        ("graph_discount", 0.0),
        ("graph_discount", 1.5),
        ("success_value", 0.0),
        ("step_weight", -1.0),
        ("episode_weight", -0.5),
        ("mode", "z_score"),
        ("epsilon", -1e-6),
        ("max_reference_age", -1),
        ("max_tasks", 0),
        ("max_edges", -1),
        ("max_tasks", 2.5),
    ]
    for field, value in bad:
        with pytest.raises(ConfigError, match=re.escape(f"algo.{field}=")):
            estimator_config("tigpo", {field: value})
    with pytest.raises(ConfigError, match=re.escape("algo.max_edge")):
        estimator_config("tigpo", {"max_edge": 3})  # unknown key


def test_estimator_contract():
    ran = check_estimator("tigpo")
    assert {"shape and values", "purity", "state", "group order", "degenerate batches"} <= set(ran)
