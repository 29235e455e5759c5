"""BASIS (a reconstruction, docs/methods.md#basis): one cluster reduces to batch-mean baselining,
golden shrinkage across clusters, online calibration of the history, the state, config."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
from helpers import make_batch

from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config, get_estimator
from agentrl.credit.batch import StepBatch


def single_rollouts(returns: list[float], clusters: list[str] | None = None) -> StepBatch:
    """One rollout per prompt (G = 1), one step each; ``clusters[g]`` is prompt g's cluster."""
    batch = make_batch([[[("s", "a", r)]] for r in returns])
    if clusters is not None:
        batch = dataclasses.replace(batch, group_cluster=tuple(clusters))
    return batch


def basis(batch, state=None, **over):
    return compute_advantages("basis", batch, estimator_config("basis", over), state=state)


def test_identical_features_reduce_to_batch_mean_baselining():
    returns = [1.0, 0.0, 0.0, 1.0, 1.0, 0.25]
    batch = single_rollouts(returns, ["same"] * 6)
    out = basis(batch)
    np.testing.assert_allclose(out.step, np.array(returns) - np.mean(returns), atol=1e-15)
    # With history the calibration moves the prior onto the batch mean: the same baseline.
    again = basis(batch, out.state)
    np.testing.assert_allclose(again.step, np.array(returns) - np.mean(returns), atol=1e-15)
    assert not get_estimator("basis").group_based  # made for rollout.group_size=1


def test_golden_shrinkage_across_clusters():
    # Cluster A: 1, 1, 1; cluster B: 0, 0, 1. By hand: r̄ = 2/3, r̄_A = 1, r̄_B = 1/3,
    # σ²_w = (0 + 2/3)/(6 − 2) = 1/6; priors = r̄; residuals ±1/3 → τ² = 1/9 − (1/6)/3 = 1/18;
    # B_c = 3·(1/18)/(3/18 + 1/6) = 1/2 → V̂_A = 5/6, V̂_B = 1/2.
    batch = single_rollouts([1, 1, 1, 0, 0, 1], ["A", "A", "A", "B", "B", "B"])
    out = basis(batch)
    np.testing.assert_allclose(out.step, [1 / 6] * 3 + [-1 / 2, -1 / 2, 1 / 2], rtol=1e-12)
    m = out.metrics
    assert m["credit/tau2"] == pytest.approx(1 / 18)
    assert m["credit/sigma2_w"] == pytest.approx(1 / 6)
    assert m["credit/shrink_mean"] == pytest.approx(0.5) and m["credit/history_frac"] == 0.0
    assert out.state["clusters"]["A"]["mean"] == 1.0
    assert out.state["clusters"]["B"]["mean"] == pytest.approx(1 / 3)


def test_golden_online_calibration_of_the_history():
    state = {
        "updates": 4,
        "clusters": {"A": {"mean": 0.9, "last": 4}, "B": {"mean": 0.1, "last": 4}},
    }
    before = copy.deepcopy(state)
    batch = single_rollouts([1, 1, 1, 0, 0, 1], ["A", "A", "A", "B", "B", "B"])
    out = basis(batch, state)
    # δ = mean(R − h) = (3·0.1 − 0.1 − 0.1 + 0.9)/6 = 1/6; priors 0.9 + 1/6 = 16/15 and
    # 0.1 + 1/6 = 4/15; residuals ∓1/15 → τ² = max(0, 1/225 − 1/18) = 0 → V̂ = the priors.
    np.testing.assert_allclose(
        out.step, [-1 / 15] * 3 + [-4 / 15, -4 / 15, 11 / 15], rtol=1e-12, atol=1e-15
    )
    assert out.metrics["credit/calibration"] == pytest.approx(1 / 6)
    assert out.metrics["credit/history_frac"] == 1.0 and out.metrics["credit/tau2"] == 0.0
    # EMA (η = 0.1) of the cluster means.
    assert out.state["clusters"]["A"] == {"mean": pytest.approx(0.91), "last": 5}
    assert out.state["clusters"]["B"]["mean"] == pytest.approx(0.09 + 0.1 / 3)
    assert state == before, "the input state must not be modified"


def test_whitening_and_every_cluster_a_singleton():
    batch = single_rollouts([1.0, 0.0, 0.5], ["a", "b", "c"])
    out = basis(batch)
    # One rollout per cluster: σ²_w is the variance of all returns (0.25), τ² = 0 → r̄.
    np.testing.assert_allclose(out.step, [0.5, -0.5, 0.0], atol=1e-15)
    white = basis(batch, whiten=True).step
    np.testing.assert_allclose(white, np.array([0.5, -0.5, 0.0]) / (np.std([0.5, -0.5, 0]) + 1e-6))


def test_groups_of_several_rollouts_are_samples_of_their_cluster():
    batch = make_batch([[[("s", "a", 1.0)], [("s", "a", 0.0)]], [[("s", "a", 1.0)]]])
    batch = dataclasses.replace(batch, group_cluster=("x", "x"))
    np.testing.assert_allclose(basis(batch).step, np.array([1, 0, 1]) - 2 / 3, atol=1e-15)


@pytest.mark.parametrize(("key", "value"), [("eta", 0.0), ("epsilon", -1.0), ("max_clusters", 0)])
def test_config_validation(key, value):
    with pytest.raises(ConfigError, match=rf"algo\.{key}"):
        estimator_config("basis", {key: value})
