"""Two ranks (torchrun, gloo, CPU) update exactly as one process on the same global batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from dist_cases import CASES, make_model, make_samples
from helpers import read_metrics, run_agentrl

from agentrl.learn.learner import Learner, LearnerConfig

HERE = Path(__file__).resolve().parent


def torchrun(script: Path, *args: str, n: int = 2, timeout: int = 300) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={n}",
        "--standalone",
        str(script),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.fixture(scope="module")
def two_rank_updates(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    torchrun(HERE / "dist" / "learner_update.py", str(out))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_update_as_one(two_rank_updates, case):
    model, pad = make_model(case)
    learner = Learner(model, LearnerConfig(**CASES[case]), pad, max_response_tokens=6)
    one = learner.update(make_samples(), np.random.default_rng(0))
    two = torch.load(two_rank_updates / f"{case}.pt", weights_only=True)
    # The gradient is the sharp test (a wrong loss denominator scales it; Adam's normalised
    # step would hide that). Parameters after the step agree to a small fraction of lr: Adam
    # divides by |g| + eps, which turns float rounding of near-zero gradients into up to
    # ~0.2% of an lr-sized step.
    for name, p in model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(two["grads"][name], p.grad, rtol=1e-4, atol=1e-7, msg=name)
    init, _ = make_model(case)
    moved = 0
    for name, p in model.state_dict().items():
        torch.testing.assert_close(two["params"][name], p, rtol=0, atol=1e-4, msg=name)
        moved += int(not torch.equal(p, init.state_dict()[name]))
    assert moved > 0  # the update did something
    for key in ("loss/pg", "loss/total", "loss/kl", "loss/entropy", "loss/grad_norm"):
        assert two["metrics"][key] == pytest.approx(one[key], rel=1e-5, abs=1e-7), key
    # The gradient cosine of the two halves is global: every rank reports the same figure
    # (its halves are the two ranks' first and second halves of micro-batches together).
    cosines = [m["diag/grad_cos"] for m in two["ranks"]]
    assert -1.0 <= cosines[0] <= 1.0 and cosines == pytest.approx([cosines[0]] * 2, rel=1e-6)


def test_credit_on_two_ranks_equals_credit_of_the_whole_batch(tmp_path):
    from dist_cases import synthetic_groups

    from agentrl.credit import (
        StepBatch,
        build_graph,
        compute_advantages,
        estimator_config,
        get_estimator,
        list_estimators,
    )
    from agentrl.credit.synthetic import SyntheticScorer

    torchrun(HERE / "dist" / "credit.py", str(tmp_path))
    two = torch.load(tmp_path / "credit.pt", weights_only=True)
    groups, mdp = synthetic_groups()
    batch = StepBatch.from_groups(groups)
    expected = [
        n for n in list_estimators() if not (get_estimator(n).driver or get_estimator(n).critic)
    ]
    assert sorted(two) == sorted(expected) and "relace" in two and "crbc" in two
    states = torch.load(tmp_path / "credit_states.pt", weights_only=True)
    assert sorted(states) == sorted(n for n in expected if get_estimator(n).stateful)
    for name in expected:
        spec = get_estimator(name)
        graph = build_graph(batch) if spec.needs_graph else None
        scorer = SyntheticScorer(mdp, noise=0.1) if spec.needs_scorer else None
        cfg = estimator_config(name)
        state = None
        if spec.stateful:  # the worker's second iteration, from its first one's state
            state = compute_advantages(name, batch, cfg, graph=graph, scorer=scorer).state
        one = compute_advantages(name, batch, cfg, graph=graph, scorer=scorer, state=state)
        assert np.any(one.step != 0), name
        np.testing.assert_array_equal(two[name].numpy(), one.step, err_msg=name)
        if spec.stateful:  # the same state on every rank, that of one process
            assert states[name] == [one.state, one.state], name


RUN_ARGS = [
    "trainer.steps=3",
    "trainer.save_every=1",
    "trainer.eval_every=0",
    "trainer.progress=false",
    "rollout.n_tasks=3",  # uneven shards: 2 + 1 tasks
    "rollout.group_size=3",
    "rollout.max_new_tokens=3",
    "env.max_steps=4",
    "trainer.tokenizer_episodes=4",
]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def _run_cmd(out: Path, *extra: str) -> list[str]:
    return [
        *TORCHRUN,
        "-m",
        "agentrl.run",
        *RUN_ARGS,
        f"trainer.out_dir={out}",
        f"hydra.run.dir={out}/hydra",
        *extra,
    ]


def _rows(out: Path) -> dict[int, dict]:
    rows = read_metrics(out)
    timing = ("perf/", "credit/solve_time_s")  # wall times differ between runs
    return {r["iteration"]: {k: v for k, v in r.items() if not k.startswith(timing)} for r in rows}


def test_torchrun_two_ranks_end_to_end_then_kill_and_resume(tmp_path):
    """``torchrun --nproc_per_node=2 -m agentrl.run``: metrics written once, an HF checkpoint
    with per-rank state and a sharded optimizer; a run whose process group is killed with
    SIGKILL resumes and ends exactly where the uninterrupted run ends."""
    import signal
    import time

    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full, killed = tmp_path / "full", tmp_path / "killed"
    run_agentrl(RUN_ARGS, full, timeout=300, env=env, launcher=TORCHRUN)
    assert sorted(_rows(full)) == [1, 2, 3]  # one row per iteration: only rank 0 writes
    ckpt = full / "checkpoints" / "iter-000003"
    assert {"trainer_state_rank0.pt", "trainer_state_rank1.pt", "optimizer"} <= {
        p.name for p in ckpt.iterdir()
    }
    AutoModelForCausalLM.from_pretrained(ckpt)  # loads as any HF checkpoint

    victim = subprocess.Popen(
        _run_cmd(killed),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    latest = killed / "checkpoints" / "latest"
    deadline = time.time() + 240
    while not (latest.exists() and latest.read_text().strip() == "iter-000001"):
        assert victim.poll() is None and time.time() < deadline, "no first checkpoint"
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=60)
    assert sorted(_rows(killed))[-1] < 3
    run_agentrl([*RUN_ARGS, "trainer.resume=true"], killed, timeout=300, env=env, launcher=TORCHRUN)
    a, b = _rows(full), _rows(killed)
    assert sorted(b) == [1, 2, 3]
    for it in (2, 3):
        assert b[it] == a[it], it
    wa = load_file(full / "checkpoints" / "iter-000003" / "model.safetensors")
    wb = load_file(killed / "checkpoints" / "iter-000003" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resume_with_another_world_size_is_refused(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    run_agentrl([*RUN_ARGS, "trainer.steps=1"], out, timeout=300, env=env, launcher=TORCHRUN)
    one = [sys.executable, "-m", "agentrl.run", *RUN_ARGS, "trainer.steps=2"]
    one += [f"trainer.out_dir={out}", f"hydra.run.dir={out}/hydra", "trainer.resume=true"]
    proc = subprocess.run(one, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2
    assert "written by 2 rank(s) and this run has 1" in proc.stdout + proc.stderr
