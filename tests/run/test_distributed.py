"""Two ranks (torchrun, gloo, CPU) update exactly as one process on the same global batch."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from dist_cases import CASES, make_model, make_samples
from helpers import read_metrics, run_agentrl

from agentrl.learn.learner import Learner, LearnerConfig

# Every test starts torchrun (a learner update, a credit computation or whole runs).
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parents[1]  # tests/


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
    "model.tokenizer_episodes=4",
]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


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


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> Path:
    """An uninterrupted ``torchrun --nproc_per_node=2 -m agentrl.run`` of RUN_ARGS: the
    reference that resumed and otherwise varied runs must reproduce."""
    full = tmp_path_factory.mktemp("dist_run") / "full"
    run_agentrl(RUN_ARGS, full, timeout=300, env=ENV, launcher=TORCHRUN)
    return full


def _same_as_full(full: Path, other: Path, iterations) -> None:
    """``other`` logged the metrics of ``full`` at ``iterations`` and ends with its weights."""
    from safetensors.torch import load_file

    a, b = _rows(full), _rows(other)
    assert sorted(b) == [1, 2, 3]
    for it in iterations:
        assert b[it] == a[it], it
    wa = load_file(full / "checkpoints" / "iter-000003" / "model.safetensors")
    wb = load_file(other / "checkpoints" / "iter-000003" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # ended meanwhile
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _resumed_at(output: str) -> int:
    found = re.search(r"resumed from \S+ \(iteration (\d+)\)", output)
    assert found, output[-3000:]
    return int(found.group(1))


def test_torchrun_two_ranks_end_to_end(full_run):
    """``torchrun --nproc_per_node=2 -m agentrl.run``: metrics written once, an HF checkpoint
    with per-rank state and a sharded optimizer."""
    from transformers import AutoModelForCausalLM

    assert sorted(_rows(full_run)) == [1, 2, 3]  # one row per iteration: only rank 0 writes
    ckpt = full_run / "checkpoints" / "iter-000003"
    assert {"trainer_state_rank0.pt", "trainer_state_rank1.pt", "optimizer"} <= {
        p.name for p in ckpt.iterdir()
    }
    AutoModelForCausalLM.from_pretrained(ckpt)  # loads as any HF checkpoint


def test_torchrun_kill_every_rank_then_resume(full_run, tmp_path):
    """A job whose ranks are all killed with SIGKILL after its first checkpoint resumes from
    that earlier iteration and ends exactly where the uninterrupted run ends."""
    killed = tmp_path / "killed"
    victim = subprocess.Popen(
        _run_cmd(killed),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
        start_new_session=True,
    )
    latest = killed / "checkpoints" / "latest"
    deadline = time.time() + 240
    while not (latest.exists() and latest.read_text().strip() == "iter-000001"):
        assert victim.poll() is None and time.time() < deadline, "no first checkpoint"
        time.sleep(0.05)
    # torchrun starts each rank in a session of its own: killing the launcher's process group
    # leaves the ranks running, so each is killed by its pid.
    ranks = _children(victim.pid)
    assert len(ranks) == 2, ranks
    for pid in ranks:
        os.kill(pid, signal.SIGKILL)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=60)
    assert sorted(_rows(killed))[-1] < 3
    proc = subprocess.run(
        _run_cmd(killed, "trainer.resume=true"),
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert _resumed_at(proc.stdout + proc.stderr) < 3  # training was left to do
    _same_as_full(full_run, killed, (2, 3))


def test_save_initial_changes_nothing_and_resumes_without_optimizer_state(full_run, tmp_path):
    """``trainer.save_initial=true`` saves no optimizer state before the first step (torch
    would take a step with lr 0 to create it, which shifts Adam's step count): the run trains
    as the one without it, and resuming from that initial checkpoint starts a fresh optimizer
    and trains the same run again."""
    out = tmp_path / "initial"
    run_agentrl(
        [*RUN_ARGS, "trainer.save_initial=true"], out, timeout=300, env=ENV, launcher=TORCHRUN
    )
    _same_as_full(full_run, out, (1, 2, 3))
    first = out / "checkpoints" / "iter-000000"
    assert (first / "trainer_state_rank1.pt").exists() and not (first / "optimizer").exists()
    (out / "checkpoints" / "latest").write_text("iter-000000")
    proc = subprocess.run(
        _run_cmd(out, "trainer.resume=true"), capture_output=True, text=True, timeout=300, env=ENV
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert _resumed_at(proc.stdout + proc.stderr) == 0
    _same_as_full(full_run, out, (1, 2, 3))


def test_readme_command_without_out_dir_keeps_one_run_folder(full_run, tmp_path):
    """The README's command, no ``trainer.out_dir``: rank 0 chooses the (Hydra) run folder and
    every rank writes there; the other ranks leave no folder or file of their own."""
    cmd = [*TORCHRUN, "-m", "agentrl.run", *RUN_ARGS, "trainer.steps=2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]
    folders = [p for p in (tmp_path / "runs").glob("*/*") if p.is_dir()]
    assert len(folders) == 1, folders
    run = folders[0]
    ckpt = run / "checkpoints" / "iter-000002"
    names = {p.name for p in ckpt.iterdir()} | {p.name for p in (ckpt / "optimizer").iterdir()}
    assert {"trainer_state_rank0.pt", "trainer_state_rank1.pt"} <= names
    assert {"__0_0.distcp", "__1_0.distcp"} <= names
    assert (run / ".hydra").is_dir() and sorted(_rows(run)) == [1, 2]
    # Rank 1's Hydra wrote no log file there either (even when both started the same second).
    (log,) = run.glob("*.log")
    assert "rank 0 of 2" in log.read_text() and "rank 1 of 2" not in log.read_text()
    # It resumes (both ranks' optimizer shards are there) and ends as the 3-iteration run.
    resume = [*TORCHRUN, "-m", "agentrl.run", *RUN_ARGS, "trainer.resume=true"]
    resume += [f"trainer.out_dir={run}", f"hydra.run.dir={tmp_path}/hydra"]
    proc = subprocess.run(resume, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert _resumed_at(proc.stdout + proc.stderr) == 2
    _same_as_full(full_run, run, (1, 2, 3))


def test_resume_with_another_world_size_is_refused(tmp_path):
    out = tmp_path / "run"
    run_agentrl([*RUN_ARGS, "trainer.steps=1"], out, timeout=300, env=ENV, launcher=TORCHRUN)
    saved_config = (out / "run_config.yaml").read_bytes()
    one = [sys.executable, "-m", "agentrl.run", *RUN_ARGS, "trainer.steps=2"]
    one += [f"trainer.out_dir={out}", f"hydra.run.dir={out}/hydra", "trainer.resume=true"]
    proc = subprocess.run(one, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 2
    assert "written by 2 rank(s) and this run has 1" in proc.stdout + proc.stderr
    # Refused before anything was written: the run's config is the one it ran with.
    assert (out / "run_config.yaml").read_bytes() == saved_config


def test_more_ranks_than_tasks_or_eval_episodes_is_refused_at_start_up(tmp_path):
    cmd = [*TORCHRUN[:-1], "--nproc_per_node=3", "-m", "agentrl.run", *RUN_ARGS]
    cmd += ["rollout.n_tasks=2", "trainer.eval_every=1", "trainer.eval_episodes=2"]
    cmd += ["trainer.dist_timeout_s=120"]  # a rank that did hang would not outlive the test long
    cmd += [f"trainer.out_dir={tmp_path}/run", f"hydra.run.dir={tmp_path}/hydra"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "rollout.n_tasks=2 < 3 ranks" in output, output[-4000:]
    assert "trainer.eval_episodes=2 < 3 ranks" in output
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_an_exception_on_one_rank_ends_the_job_at_once(tmp_path):
    """Rank 1 raises in its second iteration while rank 0 waits in that iteration's
    collectives: the job ends within seconds (not after trainer.dist_timeout_s), non-zero,
    with rank 1's error in the output before any other rank's."""
    mark = tmp_path / "failed_at"
    env = {**ENV, "AGENTRL_TEST_FAIL_RANK": "1", "AGENTRL_TEST_FAIL_MARK": str(mark)}
    cmd = [*TORCHRUN, str(HERE / "dist" / "fail_on_rank.py"), *RUN_ARGS]
    cmd += ["trainer.dist_timeout_s=150", f"trainer.out_dir={tmp_path}/run"]
    cmd += [f"hydra.run.dir={tmp_path}/hydra"]
    proc = subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=400, env=env
    )
    ended = time.time()
    output = proc.stdout
    assert proc.returncode != 0
    assert "RuntimeError: injected failure on rank 1" in output, output[-4000:]
    took = ended - float(mark.read_text())
    assert took < 90, f"the job ended {took:.0f} s after the failure"
    first = output.index("rank 1 of 2 failed (RuntimeError: injected failure on rank 1)")
    assert "rank 0 of 2 failed" not in output[:first]


@pytest.mark.slow
def test_torchrun_two_ranks_asynchronous_with_partial_rollouts(tmp_path):
    """``rollout.max_staleness=1 rollout.partial=true`` under torchrun: each rank's producer
    plays its share ahead; the staleness metrics are reduced over the ranks, every step is
    within the bound and nothing is dropped."""
    out = tmp_path / "async"
    extra = ["rollout.max_staleness=1", "rollout.partial=true", "learner.loss=decoupled_ppo"]
    run_agentrl([*RUN_ARGS, *extra], out, timeout=300, env=ENV, launcher=TORCHRUN)
    rows = _rows(out)
    assert sorted(rows) == [1, 2, 3]
    for r in rows.values():
        assert r["rollout/groups_dropped"] == 0
        assert r["rollout/staleness_max"] <= 1
        assert r["rollout/staleness_0"] + r["rollout/staleness_1"] == pytest.approx(1.0)
        assert 0.0 <= r["rollout/mixed_version_episodes"] <= 1.0
    assert rows[1]["rollout/staleness_0"] == 1.0  # the first batch: the initial weights
    ckpt = out / "checkpoints" / "iter-000003"
    assert {"trainer_state_rank0.pt", "trainer_state_rank1.pt"} <= {p.name for p in ckpt.iterdir()}
