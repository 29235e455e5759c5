"""A run killed with SIGKILL resumes from its last checkpoint and continues exactly."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import read_metrics, run_agentrl
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

ARGS = [
    "trainer.steps=4",
    "trainer.save_every=1",
    "trainer.eval_every=0",
    "trainer.progress=false",
    "rollout.n_tasks=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=3",  # short answers: some moves are valid, so returns differ
    "env.max_steps=5",
    "model.tokenizer_episodes=4",
    "trainer.rollouts_every=1",  # rollout records every iteration: resume must keep them exact
]


def _cmd(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentrl.run",
        *ARGS,
        f"trainer.out_dir={out}",
        f"hydra.run.dir={out}/hydra",
        *extra,
    ]


def _metrics(out: Path) -> dict[int, dict]:
    rows = read_metrics(out)
    # Timings differ between runs; everything else must match exactly.
    return {
        r["iteration"]: {
            k: v for k, v in r.items() if not k.startswith("perf/") and k != "credit/solve_time_s"
        }
        for r in rows
    }


def _records(out: Path) -> dict[str, bytes]:
    """The run's rollout record files, decompressed (gzip headers carry a write time)."""
    return {p.name: gzip.decompress(p.read_bytes()) for p in (out / "rollouts").glob("*.gz")}


def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    run_agentrl(ARGS, full, cwd=tmp_path)

    victim = subprocess.Popen(
        _cmd(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path
    )
    latest = killed / "checkpoints" / "latest"
    deadline = time.time() + 300
    while time.time() < deadline and victim.poll() is None:
        if latest.exists() and latest.read_text() == "iter-000002":
            os.kill(victim.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    victim.wait(timeout=60)
    assert victim.returncode == -signal.SIGKILL, "the run was not killed mid-way"
    assert not (killed / "checkpoints" / "iter-000004").exists()

    proc = subprocess.run(
        _cmd(killed, "trainer.resume=true"),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resumed from" in proc.stdout + proc.stderr
    a, b = _metrics(full), _metrics(killed)
    assert sorted(b) == [1, 2, 3, 4]
    for it in (3, 4):
        assert a[it] == b[it], f"iteration {it} differs after resume"
    # Every iteration's records exactly once, equal to the uninterrupted run's: none lost to the
    # kill, none duplicated by the replay, none half-written.
    ra, rb = _records(full), _records(killed)
    assert sorted(ra) == [f"iter-{i:06d}.jsonl.gz" for i in range(1, 5)]
    assert sorted(rb) == sorted(ra)
    assert all(ra[k] == rb[k] for k in ra), "rollout records differ after resume"
    assert not [p for p in (killed / "rollouts").iterdir() if not p.name.endswith(".gz")]
    wa = load_file(full / "checkpoints" / "iter-000004" / "model.safetensors")
    wb = load_file(killed / "checkpoints" / "iter-000004" / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # and training did change the weights since the first checkpoint
    w1 = load_file(full / "checkpoints" / "iter-000001" / "model.safetensors")
    assert any(not torch.equal(w1[k], wa[k]) for k in wa)
