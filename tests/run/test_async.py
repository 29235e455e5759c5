"""Asynchronous training (``rollout.max_staleness``) end to end on the tiny Sokoban job.

- k = 0 is today's synchronous path: the plain sampler, no producer thread; and the producer
  itself, run at k = 0 (the synchronous schedule), gives the same parameters and metrics bit
  for bit, so its weight hand-off, task seeds and versions add nothing of their own;
- k = 1 trains (every parameter moves, metrics are written, every step within one version,
  nothing dropped) with the decoupled PPO loss, with and without partial rollouts;
- a run killed with SIGKILL and resumed trains every batch exactly once (slow).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import read_metrics

from agentrl.rollout.producer import AsyncSampler
from agentrl.rollout.sampler import Sampler
from agentrl.run import compose
from agentrl.run.distributed import Dist
from agentrl.run.trainer import Trainer

SMALL = [
    "rollout.n_tasks=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=3",
    "env.max_steps=3",
    "model.tokenizer_episodes=2",
    "trainer.eval_every=0",
    "trainer.progress=false",
    "trainer.save_every=0",
]


def _trainer(tmp: Path, *extra: str) -> Trainer:
    cfg = compose([*SMALL, "trainer.steps=3", *extra])
    tmp.mkdir(parents=True, exist_ok=True)
    return Trainer(cfg, tmp, Dist(), torch.device("cpu"))


def _comparable(rows: list[dict]) -> list[dict]:
    # Timings differ between runs; the producer adds its own rollout/ keys.
    return [
        {
            k: v
            for k, v in r.items()
            if not k.startswith(("perf/", "rollout/")) and k != "credit/solve_time_s"
        }
        for r in rows
    ]


@pytest.mark.slow
def test_k0_is_the_synchronous_path_and_the_producer_at_k0_matches_it_bit_for_bit(tmp_path):
    plain = _trainer(tmp_path / "plain", "rollout.max_staleness=0")
    assert type(plain.sampler) is Sampler  # no producer thread at all
    plain.run()
    via = _trainer(tmp_path / "producer", "rollout.max_staleness=0")
    via.sampler = AsyncSampler(via.sampler, via.policy, via.task_rng, 0, 3)
    via.run()
    assert _comparable(read_metrics(tmp_path / "plain")) == _comparable(
        read_metrics(tmp_path / "producer")
    )
    for (name, a), (_, b) in zip(
        plain.policy.state_dict().items(), via.policy.state_dict().items()
    ):
        assert torch.equal(a, b), name
    rows = read_metrics(tmp_path / "producer")
    assert all(r["rollout/staleness_0"] == 1.0 for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("partial", [False, True])
def test_k1_trains_within_the_bound_with_decoupled_ppo(tmp_path, partial):
    trainer = _trainer(
        tmp_path,
        "rollout.max_staleness=1",
        "learner.loss=decoupled_ppo",
        f"rollout.partial={str(partial).lower()}",
    )
    assert trainer.sampler.partial is partial
    assert isinstance(trainer.sampler, AsyncSampler)
    before = {k: v.clone() for k, v in trainer.policy.named_parameters()}
    trainer.run()
    assert not trainer.sampler._thread.is_alive()  # closed at the end of the run
    moved = [k for k, v in trainer.policy.named_parameters() if not torch.equal(v, before[k])]
    assert moved == list(before)  # every trainable parameter changed
    rows = read_metrics(tmp_path)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["rollout/groups_dropped"] == 0
        assert r["rollout/staleness_max"] <= 1
        assert r["rollout/staleness_0"] + r["rollout/staleness_1"] == pytest.approx(1.0)
        assert r["iteration"] - 1 - r["rollout/policy_version"] <= 1
        assert "loss/behav_weight" in r and "loss/behav_kl" in r
        assert ("rollout/mixed_version_episodes" in r) is partial
    assert rows[0]["rollout/staleness_0"] == 1.0  # the first batch: the initial weights


@pytest.mark.slow
def test_sigkill_then_resume_trains_every_batch_exactly_once(tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "agentrl.run",
        *SMALL[:-1],
        "trainer.steps=4",
        "trainer.save_every=1",
        "rollout.max_staleness=1",
        "learner.loss=decoupled_ppo",
        f"trainer.out_dir={out}",
        f"hydra.run.dir={out}/hydra",
    ]
    victim = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = out / "checkpoints" / "latest"
    deadline = time.time() + 300
    while time.time() < deadline and victim.poll() is None:
        if latest.exists() and latest.read_text() == "iter-000002":
            os.kill(victim.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    victim.wait(timeout=60)
    assert victim.returncode == -signal.SIGKILL, "the run was not killed mid-way"
    proc = subprocess.run(
        [*cmd, "trainer.resume=true"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_metrics(out)
    # Iterations 1-2 from before the kill, 3-4 after: each batch trained once (the producer
    # checks that the batch of iteration i was played on iteration i's task seeds).
    assert [r["iteration"] for r in rows if r["iteration"] > 2] == [3, 4]
    assert sorted({r["iteration"] for r in rows}) == [1, 2, 3, 4]
    first = next(r for r in rows if r["iteration"] == 3 and "rollout/in_flight_replayed" in r)
    assert 1 <= first["rollout/in_flight_replayed"] <= 2  # batch 3 (and maybe 4) played again
    assert first["rollout/policy_version"] == 2  # with the restored weights
    assert all(r["rollout/groups_dropped"] == 0 for r in rows)
    assert (out / "checkpoints" / "iter-000004").exists()


def test_stale_samples_with_the_plain_ppo_loss_are_warned_about(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="agentrl"):
        trainer = _trainer(tmp_path / "ppo", "rollout.max_staleness=1")
        trainer.sampler.close()
    assert any("learner.loss=decoupled_ppo is the loss" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="agentrl"):
        trainer = _trainer(
            tmp_path / "dec", "rollout.max_staleness=1", "learner.loss=decoupled_ppo"
        )
        trainer.sampler.close()
    assert not any("decoupled_ppo is the loss" in r.message for r in caplog.records)
