"""Constrained GRPO (docs/methods.md#constrained_grpo) and the per-step costs it consumes: λ = 0
is GRPO, golden values, dual ascent on a scripted cost stream, costs from environments through
the rollout into the batch, the config (Hydra override of ``algo.thresholds``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_env, make_groups

from agentrl.algos.constrained_grpo import DEFAULT_THRESHOLDS
from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config
from agentrl.credit.batch import StepBatch
from agentrl.rollout.loop import step_costs

EPS = 1e-6


def costed_batch(spec) -> StepBatch:
    """``spec[g][i] = [(reward, {cost: value}), ...]``: groups of trajectories with costs."""
    groups = make_groups([[[("s", "a", r) for r, _ in traj] for traj in g] for g in spec])
    for group, g in zip(groups, spec):
        for tr, traj in zip(group.trajectories, g):
            for step, (_, costs) in zip(tr.steps, traj):
                step.costs = costs
    return StepBatch.from_groups(groups)


def cgrpo(batch, state=None, **over):
    cfg = estimator_config("constrained_grpo", over)
    return compute_advantages("constrained_grpo", batch, cfg, state=state)


BATCH_SPEC = [
    [  # returns 1, 0, 0; invalid episode costs 2, 0, 1
        [(0.0, {"invalid": 1.0, "steps": 1.0}), (1.0, {"invalid": 1.0, "steps": 1.0})],
        [(0.0, {"invalid": 0.0, "steps": 1.0})],
        [(0.0, {"invalid": 1.0, "steps": 1.0})],
    ],
    [  # returns 0.5, 0.25; no invalid actions
        [(0.5, {"invalid": 0.0, "steps": 1.0})],
        [(0.25, {"invalid": 0.0, "steps": 1.0})],
    ],
]


def test_costs_reach_the_batch():
    batch = costed_batch(BATCH_SPEC)
    assert batch.cost_names == ("invalid", "steps")
    np.testing.assert_array_equal(batch.traj_cost, [[2, 2], [0, 1], [1, 1], [0, 1], [0, 1]])
    # A name only some steps report costs 0 elsewhere; no costs at all give (N, 0).
    spec = [[[(1.0, {"over_budget": 1.0})], [(0.0, None)]]]
    assert costed_batch(spec).step_cost.tolist() == [[1.0], [0.0]]
    assert costed_batch([[[(1.0, None)]]]).step_cost.shape == (1, 0)
    # Selecting trajectories (e.g. without lost episodes) keeps their costs and clusters.
    sub = batch.select_trajs(np.array([False, True, True, True, False]))
    np.testing.assert_array_equal(sub.traj_cost, [[0, 1], [1, 1], [0, 1]])
    assert sub.group_cluster == batch.group_cluster


def test_zero_multipliers_equal_grpo():
    batch = costed_batch(BATCH_SPEC)
    out = cgrpo(batch, thresholds={"invalid": 0.1, "steps": 0.5})
    np.testing.assert_array_equal(out.step, compute_advantages("grpo", batch).step)
    state = {"updates": 3, "lambda": {"invalid": 0.0, "steps": 0.0}}
    out = cgrpo(batch, state, thresholds={"invalid": 0.1, "steps": 0.5})
    np.testing.assert_array_equal(out.step, compute_advantages("grpo", batch).step)


def test_golden_scalarised_z_scores_and_dual_step():
    batch = costed_batch(BATCH_SPEC)
    state = {"updates": 1, "lambda": {"invalid": 0.5}}
    out = cgrpo(batch, state)  # default thresholds {invalid: 0.1}
    # Group 0: Z_R of (1, 0, 0): mean 1/3, std √(1/3); Z_C of (2, 0, 1): mean 1, std 1.
    sr = math.sqrt(1 / 3) + EPS
    z_r = [(2 / 3) / sr, (-1 / 3) / sr, (-1 / 3) / sr]
    z_c = [1 / (1 + EPS), -1 / (1 + EPS), 0.0]
    a0 = [r - 0.5 * c for r, c in zip(z_r, z_c)]
    # Group 1: Z_R of (0.5, 0.25): ±1/√2; its costs are all 0 → Z_C = 0.
    s1 = 0.25 / math.sqrt(2) + EPS
    a1 = [0.125 / s1, -0.125 / s1]
    expected = [a0[0], a0[0], a0[1], a0[2], *a1]
    np.testing.assert_allclose(out.step, expected, rtol=1e-12)
    # Dual ascent: mean episode invalid cost (2 + 0 + 1 + 0 + 0)/5 = 0.6 > 0.1.
    assert out.state == {"updates": 2, "lambda": {"invalid": pytest.approx(0.5 + 0.05 * 0.5)}}
    m = out.metrics
    assert m["credit/lambda_invalid"] == pytest.approx(0.525)
    assert m["credit/cost_invalid"] == pytest.approx(0.6)
    assert m["credit/violation_invalid"] == pytest.approx(0.5)
    assert state == {"updates": 1, "lambda": {"invalid": 0.5}}, "input state modified"


def test_duals_move_toward_their_thresholds_on_a_scripted_cost_stream():
    def batch_with(invalid: float, steps: float) -> StepBatch:
        step = {"invalid": invalid, "steps": steps}
        return costed_batch([[[(1.0, step)], [(0.0, step)]]])

    over = {"thresholds": {"invalid": 0.5, "steps": 3.0}, "dual_lr": 0.1, "lambda_max": 0.7}
    state, trace = None, []
    # 20 batches over the invalid threshold (cost 1 > 0.5) and under the steps one (1 < 3).
    for _ in range(20):
        state = cgrpo(batch_with(1.0, 1.0), state, **over).state
        trace.append(dict(state["lambda"]))
    assert [t["invalid"] for t in trace[:3]] == pytest.approx([0.05, 0.1, 0.15])
    assert trace[-1]["invalid"] == 0.7  # clipped at lambda_max
    assert all(t["steps"] == 0.0 for t in trace)  # never below 0
    # Then the constraint holds (cost 0 < 0.5): λ decays back to 0 and stays there.
    for _ in range(20):
        state = cgrpo(batch_with(0.0, 1.0), state, **over).state
    assert state["lambda"] == {"invalid": 0.0, "steps": 0.0} and state["updates"] == 40
    # A violated constraint with λ > 0 lowers the advantage of the costlier rollout.
    costly = costed_batch([[[(1.0, {"invalid": 1.0})], [(1.0, {"invalid": 0.0})]]])
    adv = cgrpo(costly, {"lambda": {"invalid": 0.3}}, **over).step
    assert adv[0] < 0 < adv[1]


def test_an_unreported_cost_counts_as_zero():
    batch = costed_batch([[[(1.0, None)], [(0.0, None)]]])
    out = cgrpo(batch, {"lambda": {"invalid": 1.0}}, thresholds={"invalid": 0.0})
    np.testing.assert_array_equal(out.step, compute_advantages("grpo", batch).step)
    assert out.metrics["credit/cost_invalid"] == 0.0
    assert out.state["lambda"]["invalid"] == 1.0  # 0 − 0 = 0: no move


def test_config_and_hydra_override():
    from agentrl.run import compose

    assert estimator_config("constrained_grpo").limits == DEFAULT_THRESHOLDS
    cfg = compose(["algo=constrained_grpo", "algo.thresholds={steps: 20, invalid: 1}"]).algo
    assert cfg.thresholds == {"invalid": 1.0, "steps": 20.0}  # replaced, not merged
    assert compose(["algo=constrained_grpo", "algo.thresholds={}"]).algo.limits == {}
    with pytest.raises(ConfigError, match=r"algo\.thresholds\.invalid=-1"):
        estimator_config("constrained_grpo", {"thresholds": {"invalid": -1}})
    with pytest.raises(ConfigError, match=r"algo\.thresholds"):
        estimator_config("constrained_grpo", {"thresholds": "invalid"})
    with pytest.raises(ConfigError, match=r"algo\.lambda_init"):
        estimator_config("constrained_grpo", {"lambda_init": 20.0})


# ---------------------------------------------------------------------------- env costs


def test_step_costs_drops_bad_entries_without_failing(caplog):
    assert step_costs({}) is None
    assert step_costs({"costs": {"invalid": 1, "steps": np.float32(1.0)}}) == {
        "invalid": 1.0,
        "steps": 1.0,
    }
    bad = {"a": -1.0, "b": float("nan"), "c": "x", 3: 1.0, "d": True, "ok": 0.5}
    assert step_costs({"costs": bad}) == {"ok": 0.5}
    assert step_costs({"costs": [1.0]}) is None
    assert "dropped" in caplog.text and "ignored" in caplog.text


@pytest.mark.parametrize("name", ["sokoban", "alfworld"])
def test_sokoban_and_alfworld_report_invalid_and_steps(name):
    env = make_env(name)
    _, info = env.reset(seed=0)
    *_, info = env.step("")
    assert info["costs"] == {"invalid": 1.0, "steps": 1.0}
    *_, info = env.step(info["admissible_actions"][0])
    assert info["costs"] == {"invalid": 0.0, "steps": 1.0}


def test_webshop_reports_over_budget_at_an_expensive_purchase():
    env = make_env("webshop")
    u = env.unwrapped
    for seed in range(40):
        _, info = env.reset(seed=seed)
        _, _, _, _, info = env.step(f"search[{u.goal.instruction}]")
        assert info["costs"] == {"invalid": 0.0, "steps": 1.0, "over_budget": 0.0}
        limit = u.goal.price_upper
        over = [
            a
            for a in info["admissible_actions"]
            if a[6:-1].upper() in u.store.asin_index
            and u.store.prices[u.store.asin_index[a[6:-1].upper()]] > limit
        ]
        if over:
            break
    else:  # the generated catalogue is deterministic: this would mean the data changed
        raise AssertionError("no product above the price limit on the first results pages")
    env.step(over[0])
    _, _, term, _, info = env.step("click[buy now]")
    assert term and info["r_price"] == 0.0
    assert info["costs"] == {"invalid": 0.0, "steps": 1.0, "over_budget": 1.0}
