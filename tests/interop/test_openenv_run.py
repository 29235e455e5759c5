"""Both command lines together: ``python -m agentrl.serve env=sokoban`` in one process and two
training iterations of ``python -m agentrl.run env=openenv env.base_url=...`` against it on
the tiny model; the run's sessions are closed when it ends."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from helpers import run_agentrl

pytest.importorskip("openenv.core", reason="the openenv extra is not installed")

import httpx


def with_entry_point(tmp_path: Path) -> dict[str, str]:
    """The environment variables of a process in which ``env=openenv`` is registered. An
    install of agentrl advertises ``agentrl.interop.openenv`` under the ``agentrl.envs`` entry
    points; an editable install older than that entry gets a stand-in distribution that
    advertises it, on PYTHONPATH."""
    env = dict(os.environ)
    if any(ep.value == "agentrl.interop.openenv" for ep in entry_points(group="agentrl.envs")):
        return env
    dist = tmp_path / "site" / "agentrl_openenv_entry-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: agentrl-openenv-entry\nVersion: 0\n"
    )
    (dist / "entry_points.txt").write_text("[agentrl.envs]\nopenenv = agentrl.interop.openenv\n")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(dist.parent), env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture
def served_sokoban():
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl.serve", "env=sokoban", "--port=0", "--max-sessions=8"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line, "python -m agentrl.serve did not start"
        started = json.loads(line)
        assert started["serving"] == "agentrl/Sokoban-v0" and started["max_sessions"] == 8
        yield started["url"]
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
def test_two_iterations_of_env_openenv_against_a_served_sokoban(served_sokoban, tmp_path):
    url = served_sokoban
    args = [
        "env=openenv",
        f"env.base_url={url}",
        "env.max_steps=4",
        "trainer.steps=2",
        "rollout.n_tasks=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=3",
        "model.tokenizer_episodes=4",
        "trainer.eval_every=0",
        "trainer.progress=false",
    ]
    rows = run_agentrl(args, tmp_path / "run", env=with_entry_point(tmp_path), timeout=900)
    assert [r["iteration"] for r in rows] == [1, 2]
    for row in rows:
        assert math.isfinite(row["loss/pg"])
        assert 0.0 <= row["env/success"] <= 1.0
    assert (tmp_path / "run" / "checkpoints" / "iter-000002").is_dir()
    # Every session the run opened is closed again.
    deadline = time.monotonic() + 20
    while httpx.get(f"{url}/capacity").json()["active_sessions"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert httpx.get(f"{url}/capacity").json() == {"active_sessions": 0, "max_sessions": 8}
