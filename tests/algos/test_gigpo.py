"""GiGPO: hand-computed values, a plain-loop reference on random batches, edge cases, config.

The random-batch strategy and the spec → StepBatch builder defined here are shared with the
tests of the other step-level estimators (GAGPO, GACA, RLOO, REINFORCE++).
"""

from __future__ import annotations

import difflib
import statistics
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos.gigpo import cluster_anchors
from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config
from agentrl.credit.batch import Step, StepBatch, Trajectory, TrajectoryGroup

EPS = 1e-6

# ---------------------------------------------------------------------------------------------
# Specs: spec[g] is a list of trajectories {"steps": [(anchor, reward, nll | None), ...],
# "end": "terminated" | "truncated", "won": bool}; nll None means unknown (empty log-probs).


def traj(*steps: tuple, end: str = "terminated", won: bool = False) -> dict:
    """A trajectory spec from (anchor, reward) or (anchor, reward, nll) tuples."""
    return {
        "steps": [(s[0], float(s[1]), s[2] if len(s) > 2 else 0.5) for s in steps],
        "end": end,
        "won": won,
    }


def batch_from_spec(spec: list[list[dict]]) -> StepBatch:
    """The StepBatch of a spec, through the real rollout types and ``StepBatch.from_groups``."""
    groups = []
    for g, trajs in enumerate(spec):
        group = TrajectoryGroup(task=f"task {g}", seed=g)
        for tr in trajs:
            out = Trajectory(won=tr["won"])
            n = len(tr["steps"])
            for t, (anchor, reward, nll) in enumerate(tr["steps"]):
                last = t == n - 1
                out.steps.append(
                    Step(
                        prompt_ids=[1],
                        response_ids=[2],
                        logprobs=[] if nll is None else [-nll],
                        reward=reward,
                        terminated=last and tr["end"] == "terminated",
                        truncated=last and tr["end"] == "truncated",
                        anchor=anchor,
                        action="go",
                        valid=True,
                    )
                )
            group.trajectories.append(out)
        groups.append(group)
    return StepBatch.from_groups(groups)


# Few anchors so that anchor groups collide; similar texts for the clustering mode
# ("ab" matches both "ab12" and "ab34" at 0.6 while they do not match each other).
ANCHORS = ("kitchen 1", "kitchen 2", "hall", "hallway", "ab12", "ab34", "ab")
# Dyadic rewards keep the returns exact for dyadic γ, so equal returns really are equal.
REWARDS = (0.0, 0.0, 1.0, -0.5, 10.0, 0.25, -0.125)
NLLS = st.one_of(st.none(), st.sampled_from((0.25, 1.0, 2.5)), st.floats(0.0, 5.0))

step_st = st.tuples(st.sampled_from(ANCHORS), st.sampled_from(REWARDS), NLLS)
traj_st = st.fixed_dictionaries(
    {
        "steps": st.lists(step_st, min_size=1, max_size=6),
        "end": st.sampled_from(("terminated", "truncated")),
        "won": st.booleans(),
    }
)
specs = st.lists(st.lists(traj_st, min_size=1, max_size=5), min_size=1, max_size=4)
gammas = st.sampled_from((0.0, 0.5, 0.95, 1.0))
PROPERTY = settings(max_examples=60, deadline=None, derandomize=True)


# ---------------------------------------------------------------------------------------------
# Slow reference: plain loops over dicts, written from docs/methods.md#gigpo without the
# vectorised code.


def ref_returns(steps: list[tuple], gamma: float) -> list[float]:
    """Discounted return-to-go of each step, by a backward loop."""
    out, running = [0.0] * len(steps), 0.0
    for t in reversed(range(len(steps))):
        running = steps[t][1] + gamma * running
        out[t] = running
    return out


def ref_normalise(x: float, members: list[float], mode: str, singleton_mean: float | None):
    """(x − mean)/F_norm over ``members``; a singleton uses mean ``singleton_mean`` (None: x)."""
    if len(members) == 1:
        mean, std = (x if singleton_mean is None else singleton_mean), 1.0
    else:
        mean, std = statistics.fmean(members), statistics.stdev(members)
    return x - mean if mode == "mean_norm" else (x - mean) / (std + EPS)


def ref_clusters(texts: list[str], threshold: float) -> dict[str, int]:
    """Greedy clustering: each text joins the first cluster whose first member matches."""
    reps: list[str] = []
    cluster: dict[str, int] = {}
    for text in texts:
        if text in cluster:
            continue
        for c, rep in enumerate(reps):
            if difflib.SequenceMatcher(None, text, rep).ratio() >= threshold:
                cluster[text] = c
                break
        else:
            cluster[text] = len(reps)
            reps.append(text)
    return cluster


def ref_gigpo_parts(
    spec, gamma: float, mode: str, similarity: float = 0.0, episode_stats: str = "trajectory"
):
    """Per step, in batch order: (A^E of its trajectory, A^S). ``episode_stats="step"``: the
    episode statistics take R_i once per step of trajectory i (verl-agent's step-rows)."""
    out = []
    for trajs in spec:
        totals = [sum(s[1] for s in tr["steps"]) for tr in trajs]
        if episode_stats == "step":
            members = [r for r, tr in zip(totals, trajs) for _ in tr["steps"]]
        else:
            members = totals
        episode = [ref_normalise(r, members, mode, 0.0) for r in totals]
        visits = []  # (anchor, return-to-go) of every step of the group, in batch order
        for tr in trajs:
            visits.extend((s[0], g) for s, g in zip(tr["steps"], ref_returns(tr["steps"], gamma)))
        if similarity > 0:
            cluster = ref_clusters([a for a, _ in visits], similarity)
        else:
            cluster = {a: a for a, _ in visits}
        by_anchor = defaultdict(list)
        for anchor, g in visits:
            by_anchor[cluster[anchor]].append(g)
        k = 0
        for i, tr in enumerate(trajs):
            for _ in tr["steps"]:
                anchor, g = visits[k]
                out.append((episode[i], ref_normalise(g, by_anchor[cluster[anchor]], mode, None)))
                k += 1
    return out


def ref_gigpo(
    spec,
    gamma: float,
    mode: str,
    omega: float,
    similarity: float = 0.0,
    episode_stats: str = "trajectory",
):
    parts = ref_gigpo_parts(spec, gamma, mode, similarity, episode_stats)
    return [e + omega * s for e, s in parts]


def gigpo(spec, **overrides) -> np.ndarray:
    cfg = estimator_config("gigpo", overrides)
    return compute_advantages("gigpo", batch_from_spec(spec), cfg).step


# ---------------------------------------------------------------------------------------------
# Golden values (γ = 0.5 keeps the arithmetic short).

GOLDEN = [
    [
        # R = 1; G = [0 + 0.5·1, 1] = [0.5, 1]
        traj(("s", 0), ("t", 1), won=True),
        # R = 1; revisits s: G = [0.25, 0.5, 1]
        traj(("s", 0), ("s", 0), ("t", 1), won=True),
        # R = 0, one step, truncated: G = [0]
        traj(("s", 0), end="truncated"),
    ],
    # a group of one trajectory: R = 2, G = [2]
    [traj(("u", 2), won=True)],
]
# Episode, group 0: R = 1, 1, 0; mean 2/3; centred 1/3, 1/3, −2/3;
#   unbiased var = (1/9 + 1/9 + 4/9)/2 = 1/3.
# Anchor s: G = 0.5 (τ1), 0.25, 0.5 (τ2), 0 (τ3); mean 1.25/4 = 0.3125;
#   centred 0.1875, −0.0625, 0.1875, −0.3125; unbiased var = 0.171875/3.
# Anchor t: G = 1, 1 → zero variance → A^S = 0. Anchor u: singleton → A^S = 0.
AE_CENTRED = np.array([1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, -2 / 3, 2.0])  # per step
AS_CENTRED = np.array([0.1875, 0.0, -0.0625, 0.1875, 0.0, -0.3125, 0.0])
AE_STD = np.array([np.sqrt(1 / 3)] * 6 + [1.0])  # group of one: std 1
S_STD = np.sqrt(0.171875 / 3)  # 0.2393568
AS_STD = np.array([S_STD, 1, S_STD, S_STD, 1, S_STD, 1])  # A^S centred is 0 where std is 1


def test_golden_mean_norm():
    adv = gigpo(GOLDEN, gamma=0.5, mode="mean_norm")
    # 1/3 + 0.1875 = 0.5208333; 1/3 + 0; 1/3 − 0.0625; 1/3 + 0.1875; 1/3; −2/3 − 0.3125; 2 + 0
    expected = [0.5208333333, 1 / 3, 0.2708333333, 0.5208333333, 1 / 3, -0.9791666667, 2.0]
    np.testing.assert_allclose(adv, expected, rtol=1e-9)
    np.testing.assert_allclose(adv, AE_CENTRED + AS_CENTRED, rtol=1e-12)
    # The earlier visit to s in τ2 (further from success) gets less credit than the later one.
    assert adv[2] < adv[3]


def test_golden_mean_std_norm_and_omega():
    adv = gigpo(GOLDEN, gamma=0.5, omega=0.5)  # default mode: mean_std_norm
    expected = AE_CENTRED / (AE_STD + EPS) + 0.5 * AS_CENTRED / (AS_STD + EPS)
    # e.g. step 0: (1/3)/(0.5773503 + 1e-6) + 0.5·0.1875/(0.2393568 + 1e-6) = 0.9691635
    np.testing.assert_allclose(adv[0], 0.9690224, rtol=1e-6)
    np.testing.assert_allclose(adv, expected, rtol=1e-12)
    # the lone trajectory of group 1: A^E = 2/(1 + ε)
    assert adv[6] == pytest.approx(2 / (1 + EPS), rel=1e-12)


# episode_stats="step" (verl-agent's shipped code): group 0 has one row per step, carrying its
# trajectory's return: R = 1, 1 | 1, 1, 1 | 0; mean 5/6; centred 1/6 (τ1, τ2), −5/6 (τ3);
#   unbiased var = (5·(1/36) + 25/36)/5 = 1/6. Group 1 has a single row: mean 0, std 1.
AE_STEP_CENTRED = np.array([1 / 6] * 5 + [-5 / 6, 2.0])
AE_STEP_STD = np.array([np.sqrt(1 / 6)] * 6 + [1.0])


def test_golden_step_episode_stats_mean_norm():
    adv = gigpo(GOLDEN, gamma=0.5, mode="mean_norm", episode_stats="step")
    # 1/6 + 0.1875; 1/6 + 0; 1/6 − 0.0625; 1/6 + 0.1875; 1/6; −5/6 − 0.3125; 2
    expected = [0.3541666667, 1 / 6, 0.1041666667, 0.3541666667, 1 / 6, -1.1458333333, 2.0]
    np.testing.assert_allclose(adv, expected, rtol=1e-9)
    np.testing.assert_allclose(adv, AE_STEP_CENTRED + AS_CENTRED, rtol=1e-12)


def test_golden_step_episode_stats_mean_std_norm():
    adv = gigpo(GOLDEN, gamma=0.5, omega=0.5, episode_stats="step")
    expected = AE_STEP_CENTRED / (AE_STEP_STD + EPS) + 0.5 * AS_CENTRED / (AS_STD + EPS)
    # step 0: (1/6)/(0.4082483 + 1e-6) + 0.5·0.1875/(0.2393568 + 1e-6) = 0.4082473 + 0.3916731
    np.testing.assert_allclose(adv[0], 0.7999204, rtol=1e-6)
    # τ3: (−5/6)/(0.4082483 + 1e-6) − 0.5·0.3125/(0.2393568 + 1e-6) = −2.0412365 − 0.6527885
    np.testing.assert_allclose(adv[5], -2.6940249, rtol=1e-6)
    np.testing.assert_allclose(adv, expected, rtol=1e-12)


def test_episode_stats_step_weighs_long_trajectories_more():
    # One 1-step success (R = 1) and one 3-step failure (R = 0), no shared anchors (A^S = 0).
    spec = [[traj(("a", 1)), traj(("b", 0), ("c", 0), ("d", 0))]]
    # Per trajectory: mean 1/2 → ±1/2. Per step-row: rows 1, 0, 0, 0, mean 1/4 → 3/4, −1/4.
    np.testing.assert_allclose(gigpo(spec, mode="mean_norm"), [0.5, -0.5, -0.5, -0.5])
    step = gigpo(spec, mode="mean_norm", episode_stats="step")
    np.testing.assert_allclose(step, [0.75, -0.25, -0.25, -0.25])
    # A lone multi-step trajectory: a singleton per trajectory (A^E = R), but its equal rows
    # centre to 0 per step-row (verl-agent's singleton is a group with a single row).
    lone = [[traj(("a", 0), ("b", 2))]]
    np.testing.assert_allclose(gigpo(lone, mode="mean_norm"), [2.0, 2.0])
    np.testing.assert_array_equal(gigpo(lone, mode="mean_norm", episode_stats="step"), 0.0)


def test_default_gamma_is_095():
    # R = 10 at the last of three steps: G = [0.95²·10, 0.95·10, 10] = [9.025, 9.5, 10];
    # a second trajectory visits the same anchors one step later in each case.
    spec = [[traj(("a", 0), ("b", 0), ("c", 10)), traj(("b", 0), ("c", 0))]]
    adv = gigpo(spec, mode="mean_norm")
    # Episode: R = 10, 0 → ±5. b: G = 9.5, 0 → ±4.75; c: G = 10, 0 → ±5; a: singleton 0.
    np.testing.assert_allclose(adv, [5.0, 9.75, 10.0, -9.75, -10.0])


def test_metrics():
    out = compute_advantages("gigpo", batch_from_spec(GOLDEN))
    assert {"credit/step_adv_std", "credit/episode_adv_std"} <= set(out.metrics)
    assert out.metrics["credit/episode_adv_std"] > 0


# ---------------------------------------------------------------------------------------------
# Reference equals vectorised.


@PROPERTY
@given(
    spec=specs,
    gamma=gammas,
    mode=st.sampled_from(("mean_norm", "mean_std_norm")),
    omega=st.sampled_from((0.0, 0.5, 1.0)),
)
def test_matches_reference(spec, gamma, mode, omega):
    adv = gigpo(spec, gamma=gamma, mode=mode, omega=omega)
    np.testing.assert_allclose(adv, ref_gigpo(spec, gamma, mode, omega), rtol=1e-7, atol=1e-7)


@PROPERTY
@given(spec=specs, gamma=gammas, mode=st.sampled_from(("mean_norm", "mean_std_norm")))
def test_step_episode_stats_match_reference(spec, gamma, mode):
    adv = gigpo(spec, gamma=gamma, mode=mode, episode_stats="step")
    expected = ref_gigpo(spec, gamma, mode, 1.0, episode_stats="step")
    np.testing.assert_allclose(adv, expected, rtol=1e-7, atol=1e-7)


@PROPERTY
@given(
    spec=specs,
    similarity=st.sampled_from((0.6, 0.7, 0.85, 1.0)),
    mode=st.sampled_from(("mean_norm", "mean_std_norm")),
)
def test_similarity_matches_reference(spec, similarity, mode):
    adv = gigpo(spec, gamma=0.95, mode=mode, similarity=similarity)
    expected = ref_gigpo(spec, 0.95, mode, 1.0, similarity)
    np.testing.assert_allclose(adv, expected, rtol=1e-7, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Edge cases.


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_edge_cases_are_finite_and_zero_where_expected(mode):
    spec = [
        [traj(("a", 0.1), ("b", 0.1)), traj(("a", 0.1), ("b", 0.1))],  # all-equal rewards
        [traj(("a", 0), ("b", 0), end="truncated"), traj(("a", 0))],  # all failures
        [traj(("x", 1.0))],  # singleton group, one step
        [traj(("c", 0), ("c", 0), ("c", 0), ("c", 1)), traj(("c", 0))],  # cycles on one anchor
    ]
    adv = gigpo(spec, mode=mode)
    assert np.all(np.isfinite(adv))
    # all-equal and all-failure groups get exactly 0 (no ε-amplified rounding noise)
    assert np.all(adv[:7] == 0.0)
    # cycles: later visits are nearer the success, so their advantage increases along τ
    assert np.all(np.diff(adv[8:12]) > 0)


def test_one_step_episodes_reduce_to_grpo():
    # One step per episode at a shared start anchor: A^S equals A^E (same returns, same group).
    spec = [[traj(("s", r)) for r in (1, 0, 0, 1)]]
    adv = gigpo(spec, omega=1.0)
    grpo = compute_advantages("grpo", batch_from_spec(spec)).step
    np.testing.assert_allclose(adv, 2 * grpo, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Similarity clustering.


def test_cluster_anchors_is_greedy_against_representatives():
    keys = ["kitchen 1", "kitchen 2", "hall", "hallway", "kitchen 1"]
    # ratio(kitchen 1, kitchen 2) = 16/18 = 0.889; ratio(hall, hallway) = 8/11 = 0.727
    assert cluster_anchors(keys, 0.85).tolist() == [0, 0, 1, 2, 0]
    assert cluster_anchors(keys, 0.7).tolist() == [0, 0, 1, 1, 0]
    assert cluster_anchors(keys, 1.0).tolist() == [0, 1, 2, 3, 0]
    # aaab joins aaaa (0.75); aabb matches aaab (0.75) but only the representative aaaa (0.5)
    # is compared, so it starts a new cluster.
    assert cluster_anchors(["aaaa", "aaab", "aabb"], 0.75).tolist() == [0, 0, 1]
    # ab matches both representatives (4/6 = 0.667 each) and joins the first one.
    assert cluster_anchors(["ab12", "ab34", "ab"], 0.6).tolist() == [0, 1, 0]


def test_similarity_merges_near_identical_anchors():
    spec = [[traj(("kitchen 1", 0), ("t", 1)), traj(("kitchen 2", 0))]]
    merged = [[traj(("kitchen", 0), ("t", 1)), traj(("kitchen", 0))]]
    np.testing.assert_allclose(gigpo(spec, similarity=0.85), gigpo(merged), rtol=1e-12)
    # without clustering the two kitchens are singletons: A^S = 0, only A^E remains
    plain = gigpo(spec)
    assert plain[0] == pytest.approx(plain[1])


def test_similarity_never_merges_across_groups():
    spec = [[traj(("kitchen 1", 1))], [traj(("kitchen 1", 0))]]
    adv = gigpo(spec, similarity=0.5, mode="mean_norm")
    np.testing.assert_allclose(adv, [1.0, 0.0])  # singleton groups: A^E = R, A^S = 0


def test_similarity_needs_anchor_keys():
    b = batch_from_spec(GOLDEN)
    bare = StepBatch(**{f: getattr(b, f) for f in b.__dataclass_fields__ if f != "anchor_keys"})
    cfg = estimator_config("gigpo", {"similarity": 0.9})
    with pytest.raises(ValueError, match=r"anchor_keys.*algo\.similarity=0"):
        compute_advantages("gigpo", bare, cfg)
    compute_advantages("gigpo", bare)  # exact anchors need no keys


# ---------------------------------------------------------------------------------------------
# Config errors name algo.<field>.


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"mode": "mean"}, "mode"),
        ({"gamma": 1.5}, "gamma"),
        ({"omega": -1.0}, "omega"),
        ({"epsilon": -1e-6}, "epsilon"),
        ({"similarity": 1.5}, "similarity"),
        ({"episode_stats": "rows"}, "episode_stats"),
        ({"step_advantage_w": 1.0}, "step_advantage_w"),
    ],
)
def test_config_errors_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"algo\.{field}"):
        estimator_config("gigpo", overrides)
