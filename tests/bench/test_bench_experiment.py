"""The method × seed grid shared by the learning benchmarks (no training runs): run folders
and the run store keyed by spec and code version, and the learning report's intervals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentrl.bench import experiment as ex
from agentrl.bench import learning


def _write_run(out: Path, finals: list[float]) -> None:
    """A finished run folder as ``agentrl.run`` leaves it: metrics, last checkpoint, wall time."""
    rows = [{"iteration": 0, "eval/success": 0.1}]
    for i, y in enumerate(finals, start=1):
        rows.append({"iteration": i, "env/length": 10.0, "env/success": y, "eval/success": y})
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (out / "checkpoints").mkdir(exist_ok=True)
    (out / "checkpoints" / "latest").write_text(f"iter-{len(finals):06d}")
    (out / "wall_s").write_text("60.0")


def _collect(tmp_path, store, code, trained, report_only=False):
    spec = ex.Spec("grpo", 0, ("algo=grpo",), "k" * 16)

    def train(s, out):
        trained.append(code)
        _write_run(out, [0.5 if code == "v1" else 0.6])

    summarise = lambda s, out: ex.summarise(out, 8, {"train": "env/success"})  # noqa: E731
    return ex.collect([spec], store, code, tmp_path / "runs", train, summarise, report_only)


def test_two_runs_identical_but_for_the_code_version_are_not_pooled(tmp_path):
    store = ex.RunStore(tmp_path / "store.jsonl")
    trained: list[str] = []
    (v1,) = _collect(tmp_path, store, "v1", trained)
    assert trained == ["v1"] and v1["code"] == "v1" and v1["y"] == [0.1, 0.5]
    # The same spec under another code: the folder of v1 is not reused, the stored v1 neither.
    (v2,) = _collect(tmp_path, store, "v2", trained)
    assert trained == ["v1", "v2"] and v2["y"] == [0.1, 0.6]
    assert (tmp_path / "runs" / "grpo_seed0" / "run_key").read_text() == "k" * 16 + "@v2"
    # Each version is found again, alone; the newest stored comes first.
    again = ex.RunStore(tmp_path / "store.jsonl")
    spec = ex.Spec("grpo", 0, (), "k" * 16)
    assert again.get(spec, "v1")["y"] == [0.1, 0.5] and again.get(spec, "v2")["y"] == [0.1, 0.6]
    assert again.versions([spec]) == ["v2", "v1"]
    assert _collect(tmp_path, again, "v1", trained, report_only=True)[0]["y"] == [0.1, 0.5]
    assert _collect(tmp_path, again, "v3", trained, report_only=True) == []
    assert trained == ["v1", "v2"]
    # A summary stored without a code version belongs to the pre-versioned group.
    old = {k: v for k, v in v1.items() if k != "code"}
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n")
    assert ex.RunStore(tmp_path / "x.jsonl", tmp_path / "old.jsonl").versions([spec]) == [
        ex.PRE_VERSION
    ]


def test_a_run_folder_of_another_key_is_rerun_and_one_of_this_key_reused(tmp_path):
    out = tmp_path / "runs" / "grpo_seed0"
    _write_run(out, [0.9])  # left by an older benchmark: no stamp
    (out / "stale_marker").write_text("x")
    trained: list[str] = []
    store = ex.RunStore(tmp_path / "store.jsonl")
    assert _collect(tmp_path, store, "v1", trained)[0]["y"] == [0.1, 0.5]
    assert trained == ["v1"] and not (out / "stale_marker").exists()
    # Finished under this key but not stored (the store was lost): read, not trained again.
    assert _collect(tmp_path, ex.RunStore(tmp_path / "new.jsonl"), "v1", trained)[0]["y"] == [
        0.1,
        0.5,
    ]
    assert trained == ["v1"]


def test_the_code_version_is_the_package_version_and_a_source_hash():
    import agentrl

    assert re.fullmatch(re.escape(agentrl.__version__) + r"\+[0-9a-f]{12}", ex.code_version())
    assert ex.spec_key([1, "a"], 2) == ex.spec_key([1, "a"], 2) != ex.spec_key([1, "a"], 3)


def _fake_agentrl(overrides, out):
    """``agentrl.run`` for the learning benchmark: an evaluation-only run scores by seed, a
    training run ends at 0.2 + 0.1 · seed."""
    args = dict(a.split("=", 1) for a in overrides)
    seed = int(args["trainer.seed"])
    if args["trainer.steps"] == "0":
        score = 0.05 if "model.name_or_path" not in args else 0.25 + 0.1 * seed
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.jsonl").write_text(json.dumps({"iteration": 0, "eval/success": score}))
        (out / "wall_s").write_text("1.0")
        return 1.0
    _write_run(out, [0.1 + 0.1 * seed, 0.2 + 0.1 * seed])
    return 60.0


def test_learning_report_gives_no_interval_for_one_seed(tmp_path, monkeypatch):
    monkeypatch.setattr(learning, "run_agentrl", _fake_agentrl)
    monkeypatch.setattr(learning, "committed_dir", lambda: tmp_path / "committed")
    out = tmp_path / "out"
    argv = ["--algos", "grpo,crbc", "--seeds", "1", "--iterations", "2", "--eval-every", "1"]
    learning.run(str(out), log=lambda *a: None, argv=argv)
    text = (out / "learning_sokoban.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| grpo |"))
    assert row.startswith("| grpo | 0.250 [n/a] | +0.200 | n/a | yes (0.050-0.050 vs")
    assert "mean 0.050 [n/a]." in text and "[0.250, 0.250]" not in text
    assert "- grpo seed 0: 0.100, 0.100, 0.200" in text
    assert "$" not in text  # every template placeholder filled
    assert (out / "learning_sokoban.png").stat().st_size > 0
    # Two seeds: intervals again; the stored first seed is reused, not trained again.
    calls: list[str] = []
    monkeypatch.setattr(
        learning, "run_agentrl", lambda o, d: calls.append(d.name) or _fake_agentrl(o, d)
    )
    learning.run(str(out), log=lambda *a: None, argv=[*argv[:3], "2", *argv[4:]])
    text = (out / "learning_sokoban.md").read_text()
    assert "| grpo | 0.300 [-0.335, 0.935] | +0.250 | no |" in text
    assert sorted(calls) == ["crbc_seed1", "eval512", "eval512", "grpo_seed1", "untrained_seed1"]


def test_run_agentrl_launches_the_module_with_its_output_folder(monkeypatch, tmp_path):
    import subprocess

    from agentrl.bench import _report

    seen: list[dict] = []

    def fake_run(args, **kwargs):
        seen.append({"args": args, **kwargs})
        return subprocess.CompletedProcess(args, 1 if "fail=1" in args else 0, "", "boom")

    monkeypatch.setattr(_report.subprocess, "run", fake_run)
    out = tmp_path / "two"
    launcher = ["torch.distributed.run", "--nproc_per_node=2", "-m"]
    _report.run_agentrl(["a=1"], out, launcher=launcher, env={"X": "1"}, timeout=5)
    assert seen[-1]["args"][1:] == [
        "-m", *launcher, "agentrl.run", "a=1", f"trainer.out_dir={out}",
        f"hydra.run.dir={out}/hydra",
    ]  # fmt: skip
    assert seen[-1]["env"] == {"X": "1"} and seen[-1]["timeout"] == 5
    assert float((out / "wall_s").read_text()) >= 0  # a finished run says so
    _report.run_agentrl(["b=2"], tmp_path / "sft", module="agentrl.sft", out_key="sft.out_dir")
    assert seen[-1]["args"][1:5] == ["-m", "agentrl.sft", "b=2", f"sft.out_dir={tmp_path / 'sft'}"]
    with pytest.raises(RuntimeError, match=r"agentrl\.run fail=1 failed:\nboom"):
        _report.run_agentrl(["fail=1"], tmp_path / "bad")
    assert not (tmp_path / "bad" / "wall_s").exists()
