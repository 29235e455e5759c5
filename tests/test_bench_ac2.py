"""The AC2 benchmark's report arithmetic: the critic-error floor and the readiness trace."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentrl.bench.ac2 import critic_error_floor, first_iteration, readiness_trace, summary


def test_critic_error_floor_by_hand():
    # p = 0.5, g = 4: k = 0..4 with weights 1, 4, 6, 4, 1 (/16); grid(k / 4) = 0, 0.2, 0.5,
    # 0.8, 1 (0.25 and 0.75 round half to even), so E|0.5 - grid| = (0.5 + 4·0.3 + 4·0.3 +
    # 0.5) / 16.
    assert critic_error_floor(0.5, 4) == pytest.approx(3.4 / 16)
    assert critic_error_floor(0.0, 4) == 0.0 and critic_error_floor(1.0, 4) == 0.0
    # More continuations per target: a lower floor.
    assert critic_error_floor(0.5, 16) < critic_error_floor(0.5, 8) < critic_error_floor(0.5, 4)


def _rows():
    rows = [{"iteration": 0, "eval/return": 0.1}]
    for it, (frac, n, err) in enumerate(
        [(0.0, 0, 0.5), (0.5, 1, 0.3), (0.25, 2, 0.1), (0.75, 4, 0.15)], start=1
    ):
        row = {"iteration": it, "ac2/ready_frac": frac, "ac2/ready_problems": n}
        row["ac2/critic_error"] = err
        if it % 2 == 0:
            row["eval/return"] = 0.2
        rows.append(row)
    return rows


def test_readiness_trace_windows_the_ready_fraction_up_to_each_evaluation():
    trace = readiness_trace(_rows(), eval_every=2)
    assert [t[0] for t in trace] == [2, 4]  # iteration 0 has no readiness yet
    assert trace[0][1:] == pytest.approx((0.25, 1.0, 0.3))  # mean of iterations 1-2
    assert trace[1][1:] == pytest.approx((0.5, 4.0, 0.15))  # mean of iterations 3-4


def test_readiness_trace_without_ac2_metrics_is_nan():
    rows = [{"iteration": 0, "eval/return": 0.1}, {"iteration": 1, "eval/return": 0.2}]
    ((it, frac, ready, err),) = readiness_trace(rows, eval_every=1)
    assert it == 1 and all(math.isnan(x) for x in (frac, ready, err))


def test_first_iteration_and_summary_report_when_readiness_fired():
    rows = _rows()
    assert first_iteration(rows, "ac2/ready_problems", lambda v: v > 0) == 2
    assert first_iteration(rows, "ac2/critic_error", lambda v: v < 0.2) == 3
    assert first_iteration(rows, "ac2/critic_error", lambda v: v < 0.01) is None
    grpo = [{"iteration": k, "env/return": 0.5, "eval/return": 0.4} for k in range(3)]
    runs = {"grpo": [grpo, grpo], "ac2": [rows, rows], "ac2_given_ref": [rows, rows]}
    scores = {m: np.array([r["eval/return"] for r in rs[0] if "eval/return" in r]) for m, rs in
              runs.items()}  # fmt: skip
    curves = {m: [(np.arange(3.0), ys)] * 2 for m, ys in scores.items()}
    text = "\n".join(summary(runs, curves, [0, 1]))
    assert "ac2: some problem became ready in 2/2 seeds" in text
    assert "per seed: 2, 2" in text and "per seed: 3, 3" in text
