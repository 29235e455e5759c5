"""Smoke test of the credit benchmark: every registered estimator appears in the report."""

from __future__ import annotations

import re

from agentrl.bench.__main__ import COMMANDS
from agentrl.bench.credit import benchmarked
from agentrl.credit import get_estimator, list_estimators


def test_credit_benchmark_quick(tmp_path):
    from agentrl.bench.credit import run

    quality, timing = run(out_dir=tmp_path, quick=True, log=lambda _: None)
    md = (tmp_path / "credit.md").read_text()
    assert (tmp_path / "credit.png").stat().st_size > 0
    assert "$" not in md  # every template placeholder filled
    assert COMMANDS["credit"] == "agentrl.bench.credit:run"
    pearson = md.split("## Pearson r with the true advantage", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| (\w+)", pearson, flags=re.MULTILINE)) - {"estimator"}
    names, left_out = benchmarked()
    assert listed == set(names) == set(list_estimators()) - set(left_out)
    assert all(get_estimator(n).critic for n in left_out)  # only critic-based ones
    assert not quality.errors and not timing.errors, (quality.errors, timing.errors)
    for name in names:  # every estimator was timed at every size
        assert all(t is not None and t >= 0 for t in timing.est_s[name])
    assert quality.per_step["ac2"]  # its credit differs between the steps of an episode


def test_credit_metrics_hand_computed():
    import numpy as np

    from agentrl.bench.credit import credit_metrics

    truth = np.array([-1.0, 0.0, 1.0, 2.0])
    m = credit_metrics(2.0 * truth, truth)  # right shape, wrong scale
    assert m["pearson"] == 1.0 and m["spearman"] == 1.0
    assert m["mse"] == np.mean(truth**2) and m["mse_scaled"] == 0.0
    m = credit_metrics(np.zeros(4), truth)  # constant output: no correlation, scale 0
    assert np.isnan(m["pearson"]) and m["rel_mse_scaled"] == 1.0
    # Ties share the mean rank: ranks (2.5, 2.5, 1, 4) against (1, 2, 3, 4).
    m = credit_metrics(np.array([1.0, 1.0, 0.0, 3.0]), truth)
    assert abs(m["spearman"] - 1.5 / np.sqrt(4.5 * 5.0)) < 1e-12


def test_ac2_gets_one_continuation_per_step():
    """AC2 has its own rollout driver: the benchmark hands it each step as a continuation of
    its state (group = anchor), valued by the return that followed it."""
    import numpy as np
    from helpers import make_batch

    from agentrl.bench.credit import _run_one, continuation_batch, driver_batches

    batch = make_batch(
        [
            [[("s", "a", 0.0), ("t", "b", 1.0)], [("s", "c", 0.0)], [("t", "b", 0.5)]],
            [[("s", "a", 0.25), ("s", "a", 0.0)]],  # same key, another task: another group
        ]
    )
    view = continuation_batch(batch)
    np.testing.assert_allclose(view.step_reward, [1.0, 1.0, 0.0, 0.5, 0.25, 0.0])
    assert view.traj_group.tolist() == batch.step_anchor.tolist()
    assert view.n_trajs == view.n_steps == batch.n_steps
    assert len(set(batch.step_anchor[[0, 2]])) == 1 and batch.step_anchor[0] != batch.step_anchor[4]
    views = driver_batches(["ac2", "grpo"], batch)
    assert set(views) == {"ac2"}
    adv = _run_one("ac2", batch, None, None, views)
    # groups: s of task 0 {1, 0} → mean 0.5; t of task 0 {1, 0.5} → 0.75; s of task 1 {0.25, 0}
    np.testing.assert_allclose(adv, [0.5, 0.25, -0.5, -0.25, 0.125, -0.125])


def test_a_driver_estimator_without_a_synthetic_batch_is_an_error(monkeypatch):
    import pytest
    from helpers import make_batch

    from agentrl.bench import credit

    monkeypatch.setattr(credit, "DRIVER_BATCHES", {})
    batch = make_batch([[[("s", "a", 1.0)], [("s", "a", 0.0)]]])
    views = credit.driver_batches(["ac2"], batch)
    with pytest.raises(ValueError, match="ac2 rolls out with its own driver"):
        credit._run_one("ac2", batch, None, None, views)


def test_a_timing_is_the_fastest_of_its_calls_in_a_row(monkeypatch):
    from agentrl.bench import credit

    ticks = iter([0.0, 5.0, 5.0, 7.0, 7.0, 10.0])  # calls of 5, 2 and 3 s
    monkeypatch.setattr(credit, "CLOCK", lambda: next(ticks))
    monkeypatch.setattr(credit, "CALLS", 3)
    calls = []
    assert credit._fastest(lambda: calls.append(1)) == 2.0 and len(calls) == 3
    # A call slower than SLOW_S is not repeated.
    ticks = iter([0.0, credit.SLOW_S + 1.0])
    calls.clear()
    assert credit._fastest(lambda: calls.append(1)) == credit.SLOW_S + 1.0 and len(calls) == 1
