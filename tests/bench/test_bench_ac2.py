"""The AC2 benchmark's report arithmetic: the critic-error floor and the readiness trace."""

from __future__ import annotations

import json
import math

import pytest

from agentrl.bench import ac2
from agentrl.bench.ac2 import (
    critic_error_floor,
    first_iteration,
    readiness_trace,
    summarise,
    summary,
)


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
    runs = {"grpo": grpo, "ac2": rows, "ac2_given_ref": rows}
    by = {m: [{**summarise(r), "method": m, "seed": s} for s in (0, 1)] for m, r in runs.items()}
    text = "\n".join(summary(by))
    assert "ac2: some problem became ready in 2/2 seeds" in text
    assert "per seed: 2, 2" in text and "per seed: 3, 3" in text
    assert "- ac2 − grpo, final validation score, paired by seed: -0.200 [n/a]" not in text
    assert "- ac2 − grpo, final validation score, paired by seed: -0.200 [-0.200, -0.200]" in text


def test_summary_keeps_what_the_report_reads_of_each_row():
    rows = _rows()
    rows[1]["perf/decode_tokens_total"] = 100.0
    rows[2]["other/metric"] = 1.0
    r = summarise(rows)
    assert r["x"] == [0.0, 100.0, 100.0] and r["y"] == [0.1, 0.2, 0.2]
    assert "other/metric" not in r["rows"][2] and r["rows"][2]["ac2/ready_frac"] == 0.5


def _fake_agentrl(overrides, out):
    """``agentrl.run`` for the AC2 benchmark: GRPO's score climbs with the seed, AC2's stays."""
    args = dict(a.split("=", 1) for a in overrides)
    seed, steps = int(args["trainer.seed"]), int(args["trainer.steps"])
    rows = []
    for i in range(steps + 1):
        row = {"iteration": i, "perf/decode_tokens_total": 100.0 * i, "env/return": 0.5}
        if args["algo"] == "ac2":
            row |= {"ac2/ready_frac": 0.1 * i, "ac2/ready_problems": i, "ac2/critic_error": 0.3}
        if i % int(args["trainer.eval_every"]) == 0:
            row["eval/return"] = 0.4 + (0.01 * i * (seed + 1) if args["algo"] == "grpo" else 0)
        rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (out / "wall_s").write_text("30.0")


def test_ac2_report_from_fake_runs_and_from_the_store(tmp_path, monkeypatch):
    monkeypatch.setattr(ac2, "warm_start", lambda work, steps: None)  # no checkpoint here
    monkeypatch.setattr(ac2, "run_agentrl", _fake_agentrl)
    monkeypatch.setattr(ac2, "committed_dir", lambda: tmp_path / "committed")
    out = tmp_path / "out"
    argv = ["--seeds", "1", "--iterations", "4", "--eval-every", "2"]
    ac2.run(str(out), log=lambda *a: None, argv=argv)
    text = (out / "ac2.md").read_text()
    assert "| grpo | 0.440 [n/a] | 0.440 [n/a] | 400 [n/a] | 1/1 | 400 |" in text
    assert "| ac2 | 0.400 [n/a] | 0.400 [n/a] | not reached | 0/1 | 400 |" in text
    assert "warm start is not here" in text and "| 2 | 0.150 | 2.0 | 0.300 |" in text
    assert "- grpo seed 0: 0.400, 0.420, 0.440" in text and (out / "ac2.png").exists()
    assert "$" not in text  # every template placeholder filled
    assert len((out / ac2.STORE).read_text().splitlines()) == 3
    # A second seed: the first seed's runs come from the store, reported beside the new ones.
    monkeypatch.setattr(
        ac2, "run_agentrl", lambda o, d: _fake_agentrl(o, d) if "seed1" in d.name else 1 / 0
    )
    ac2.run(str(out), log=lambda *a: None, argv=["--seeds", "2", *argv[2:]])
    text = (out / "ac2.md").read_text()
    assert "| grpo | 0.460 [0.206, 0.714] |" in text and "Wall time 3.0 min for the 6 runs" in text
