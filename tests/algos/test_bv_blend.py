"""BV-Blend (a reconstruction, docs/methods.md#bv_blend): zero history is GRPO's z-score,
golden values with history (an all-equal group gets a non-zero advantage), the EMA update,
purity of the state, pruning and config checks."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
from helpers import make_batch

from agentrl.algos.bv_blend import BVBlendConfig
from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config
from agentrl.credit.batch import StepBatch

EPS = 1e-6


def one_step_batch(groups: list[list[float]], clusters: list[str] | None = None) -> StepBatch:
    """One-step episodes: ``groups[g]`` are the returns of group g's rollouts."""
    batch = make_batch([[[("s", "a", r)] for r in g] for g in groups])
    if clusters is not None:
        batch = dataclasses.replace(batch, group_cluster=tuple(clusters))
    return batch


def bv(batch, state=None, **over):
    cfg = estimator_config("bv_blend", over)
    return compute_advantages("bv_blend", batch, cfg, state=state)


def test_zero_history_equals_grpo_z_score():
    batch = make_batch(
        [
            [[("s", "a", 0.0), ("t", "b", 1.0)], [("s", "c", 0.0)], [("t", "b", 0.5)]],
            [[("s", "a", 0.25), ("s", "a", 0.0)], [("u", "x", 1.0)]],
            [[("s", "a", 1.0)], [("s", "a", 1.0)]],  # all equal: 0 without history
        ]
    )
    out = bv(batch)
    np.testing.assert_array_equal(out.step, compute_advantages("grpo", batch).step)
    assert out.metrics["credit/lambda_mean"] == 0.0 and out.metrics["credit/history_frac"] == 0
    # The three task texts differ, so three clusters (hash of the task text).
    assert out.metrics["credit/clusters"] == 3 and len(out.state["clusters"]) == 3


def test_all_equal_group_gets_nonzero_advantage_once_history_exists():
    # History of cluster "c": one batch of 8 returns, four 1s and four 0s.
    state = {"updates": 1, "clusters": {"c": {"m1": 0.5, "m2": 0.5, "v": 1 / 8, "last": 1}}}
    before = copy.deepcopy(state)
    batch = one_step_batch([[1.0, 1.0, 1.0, 1.0]], ["c"])
    out = bv(batch, state)
    # By hand: σ²_c = (0.5 − 0.25)/(1 − 1/8) = 2/7 (the unbiased variance of the 8 returns);
    # κ = 1: σ̃²_loc = (3·0 + 2/7)/4 = 1/14, σ̃²_c = (8·2/7 + 0)/9 = 16/63;
    # SEM_loc² = (1/14)/4 = 1/56, SEM_hist² = (16/63)/8 = 2/63 → λ = 63/175 = 0.36.
    lam = 0.36
    b = lam * 0.5 + (1 - lam) * 1.0  # 0.82
    s2 = lam * 2 / 7 + (1 - lam) * 0.0 + lam * (1 - lam) * (0.5 - 1.0) ** 2
    expected = (1.0 - b) / (math.sqrt(s2) + EPS)
    np.testing.assert_allclose(out.step, [expected] * 4, rtol=1e-12)
    assert expected == pytest.approx(0.449357, abs=1e-6)
    assert out.metrics["credit/lambda_mean"] == pytest.approx(lam, rel=1e-12)
    # EMA update (η = 0.1) with the batch: mean 1, mean square 1, 4 returns.
    c = out.state["clusters"]["c"]
    assert c["m1"] == pytest.approx(0.55) and c["m2"] == pytest.approx(0.55)
    assert c["v"] == pytest.approx(0.81 / 8 + 0.01 / 4) and c["last"] == 2
    assert out.state["updates"] == 2
    assert state == before, "the input state must not be modified"
    # The base reconstruction (κ = 0, docs/methods.md#bv_blend) keeps the all-equal group at 0.
    np.testing.assert_array_equal(bv(batch, state, var_prior=0.0).step, np.zeros(4))


def test_golden_blend_of_a_mixed_group_without_mixture_variance():
    state = {"updates": 3, "clusters": {"c": {"m1": 0.25, "m2": 0.25, "v": 0.1, "last": 3}}}
    batch = one_step_batch([[1.0, 0.0]], ["c"])
    out = bv(batch, state, var_prior=0.0, mixture_var=False)
    # σ²_c = (0.25 − 0.0625)/0.9 = 0.208333…, σ²_loc = 0.5, G = 2, κ = 0:
    var_c = 0.1875 / 0.9
    sem_loc, sem_hist = 0.5 / 2, var_c * 0.1
    lam = sem_loc / (sem_loc + sem_hist)
    b = lam * 0.25 + (1 - lam) * 0.5
    s = math.sqrt(lam * var_c + (1 - lam) * 0.5)
    np.testing.assert_allclose(out.step, [(1 - b) / (s + EPS), (0 - b) / (s + EPS)], rtol=1e-12)


def test_all_equal_group_after_equal_history_is_bounded_without_mixture_variance():
    """History: one batch of four failures; now a group of four successes. Both variances are
    0, so as written s = 0 and A = λ/ε (500,000); the floor s >= λ·|μ_c − μ_loc| keeps it at
    one unit, as the mixture variance does."""
    state = {"updates": 1, "clusters": {"c": {"m1": 0.0, "m2": 0.0, "v": 1 / 4, "last": 1}}}
    batch = one_step_batch([[1.0, 1.0, 1.0, 1.0]], ["c"])
    # κ = 1 shrinks nothing (both variances 0): SEM_loc² = SEM_hist² = 0, so λ is the
    # equal-variance value (1/4)/(1/4 + 1/4) = 1/2; b = 1/2, numerator 1/2.
    lam, gap = 0.5, -1.0
    floored = bv(batch, state, mixture_var=False)
    np.testing.assert_allclose(floored.step, [0.5 / (lam * abs(gap) + EPS)] * 4, rtol=1e-12)
    assert floored.metrics["credit/lambda_mean"] == pytest.approx(lam)
    mixture = bv(batch, state)  # s = √(λ(1−λ))·|gap| = 1/2: A = √(λ/(1−λ)) = 1
    np.testing.assert_allclose(mixture.step, [0.5 / (0.5 + EPS)] * 4, rtol=1e-12)
    assert np.abs(floored.step).max() < 1.0 + 1e-9


def test_history_is_per_cluster_and_first_batch_starts_the_ema():
    batch = one_step_batch([[1.0, 0.0, 0.0], [1.0, 1.0]], ["a", "b"])
    out = bv(batch)
    a, b = out.state["clusters"]["a"], out.state["clusters"]["b"]
    assert (a["m1"], a["m2"], a["v"]) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert (b["m1"], b["m2"], b["v"]) == (1.0, 1.0, 0.5)
    # Next batch: cluster "b" all-equal at 0 against a history of 1s → negative advantage;
    # a new cluster "c" has no history → GRPO (0 for its all-equal group).
    nxt = bv(one_step_batch([[0.0, 0.0], [1.0, 1.0]], ["b", "c"]), out.state)
    assert np.all(nxt.step[:2] < 0) and np.all(np.isfinite(nxt.step))
    np.testing.assert_array_equal(nxt.step[2:], [0.0, 0.0])
    assert set(nxt.state["clusters"]) == {"a", "b", "c"}
    assert nxt.state["clusters"]["a"] == a  # untouched: not in the batch


def test_default_clusters_are_task_type_then_task_text():
    from helpers import make_groups

    groups = make_groups([[[("s", "a", 1.0)], [("s", "a", 0.0)]]] * 3)
    groups[0].trajectories[1].task_type = "pick"  # one member reporting a type suffices
    groups[2].task = groups[1].task  # same instruction → same cluster
    batch = StepBatch.from_groups(groups)
    assert batch.group_cluster[0] == "type:pick"
    assert batch.group_cluster[1] == batch.group_cluster[2] != batch.group_cluster[0]
    assert batch.group_cluster[1].startswith("task:")
    assert bv(batch).metrics["credit/clusters"] == 2


def test_pruning_keeps_the_most_recent_clusters():
    state = None
    for key in ("a", "b", "c"):
        state = bv(one_step_batch([[1.0, 0.0]], [key]), state, max_clusters=2).state
    assert set(state["clusters"]) == {"b", "c"} and state["updates"] == 3


def test_edge_cases_stay_finite():
    state = {"updates": 1, "clusters": {"c": {"m1": 0.0, "m2": 0.0, "v": 0.05, "last": 1}}}
    # History all 0 (σ²_c = 0), group all 1 (σ²_loc = 0): the equal-variance λ, finite.
    out = bv(one_step_batch([[1.0, 1.0, 1.0]], ["c"]), state)
    assert np.all(np.isfinite(out.step)) and np.all(out.step > 0)
    # History all 0, group varies, ε = 0: λ < 1 (κ shrinks σ²_c = 0 up), s > 0, finite.
    out = bv(one_step_batch([[1.0, 0.0]], ["c"]), state, epsilon=0.0)
    assert np.all(np.isfinite(out.step)) and out.step[0] > 0 > out.step[1]
    assert 0 < out.metrics["credit/lambda_mean"] < 1
    # One rollout, no history: 0; with history: compared with the cluster.
    assert bv(one_step_batch([[1.0]], ["d"])).step.tolist() == [0.0]
    assert bv(one_step_batch([[1.0]], ["c"]), state).step[0] > 0


@pytest.mark.parametrize(
    ("key", "value"), [("eta", 0.0), ("eta", 1.5), ("var_prior", -1.0), ("max_clusters", 0)]
)
def test_config_validation(key, value):
    with pytest.raises(ConfigError, match=rf"algo\.{key}"):
        estimator_config("bv_blend", {key: value})
    assert BVBlendConfig().eta == 0.1
