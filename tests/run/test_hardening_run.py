"""Run-level hardening (issue 12): safe resume, finite configs and steps, one iteration-0 row,
an exclusive run directory, config edges, and the CPU thread choice."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from helpers import read_metrics

from agentrl.configuration import ConfigError, from_mapping
from agentrl.credit import get_estimator
from agentrl.learn.learner import Learner, LearnerConfig, NonFiniteLossError
from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer, load_pretrained
from agentrl.model.forward import Sample
from agentrl.run import compose
from agentrl.run.checkpoint import RunDirInUse, exclusive_run_dir, load_trainer_state
from agentrl.run.setup import choose_num_threads, startup_warnings
from agentrl.run.trainer import train

SMALL = [
    "rollout.n_tasks=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=3",
    "env.max_steps=3",
    "model.tokenizer_episodes=2",
    "trainer.eval_episodes=2",
    "trainer.progress=false",
]


# -- 4: resume never unpickles code ---------------------------------------------------------


class _Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_resume_refuses_a_state_file_that_would_run_code(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"iteration": 1, "x": _Evil(str(marker))}, tmp_path / "trainer_state.pt")
    with pytest.raises(RuntimeError, match="refusing to load"):
        load_trainer_state(tmp_path / "trainer_state.pt")
    assert not marker.exists()


def test_a_real_trainer_state_loads_with_weights_only(tmp_path):
    rng = np.random.default_rng(3)
    rng.integers(10)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    state = {
        "iteration": 7,
        "world_size": 1,
        "stages": {
            "sampler": {},
            "credit": {"credit_state": {"updates": 3}},
            "update": {"optimizer": opt.state_dict(), "nonfinite_streak": 0},
        },
        "rng": {"torch": torch.get_rng_state(), "cuda": None, "numpy": rng.bit_generator.state},
        "schedule": {"decode_tokens_total": 12.0},
    }
    torch.save(state, tmp_path / "s.pt")
    back = load_trainer_state(tmp_path / "s.pt")
    assert back["iteration"] == 7 and back["rng"]["numpy"] == rng.bit_generator.state
    assert back["stages"]["credit"]["credit_state"] == {"updates": 3}


def test_a_checkpoint_of_0_2_0_loads_into_the_stage_layout(tmp_path):
    """agentrl 0.2.0 kept the state's parts at the top level; resuming such a run still works."""
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    task = np.random.default_rng(5).bit_generator.state
    old = {
        "iteration": 4,
        "world_size": 1,
        "learner": {"optimizer": opt.state_dict(), "scheduler": {}, "nonfinite_streak": 0},
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": None,
        "numpy_rng": np.random.default_rng(1).bit_generator.state,
        "task_rng": task,
        "decode_tokens_total": 99.0,
        "credit_state": {"updates": 4},
        "driver": {"buffer": []},
    }
    torch.save(old, tmp_path / "old.pt")
    new = load_trainer_state(tmp_path / "old.pt")
    assert new["iteration"] == 4 and new["rng"]["task"] == task
    assert new["stages"]["update"]["nonfinite_streak"] == 0
    assert new["stages"]["credit"] == {"credit_state": {"updates": 4}}
    assert new["stages"]["sampler"] == {"driver": {"buffer": []}}
    assert new["schedule"] == {"decode_tokens_total": 99.0}


# -- 5: finite numbers, skipped non-finite steps ---------------------------------------------


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_numbers_are_rejected_in_configs(bad):
    with pytest.raises(ConfigError, match=r"learner\.lr=.* must be a finite number"):
        from_mapping(LearnerConfig, {"lr": bad}, "learner")
    with pytest.raises(ConfigError, match="finite"):
        LearnerConfig(lr=bad)


def test_lr_inf_on_the_command_line_fails_at_start_up():
    with pytest.raises(ConfigError, match=r"learner\.lr"):
        compose(["learner.lr=inf"])


def _tiny_learner(**cfg):
    tok = build_tokenizer(["up down left right"] * 20, 300)
    torch.manual_seed(0)
    model = build_tiny_model(ModelConfig(vocab_size=300), tok)
    return model, Learner(model, LearnerConfig(**cfg), tok.pad_token_id)


def _samples(adv: float) -> list[Sample]:
    return [Sample([5, 6, 7], [8, 9], [-1.0, -1.0], adv, group=0) for _ in range(2)]


def test_non_finite_loss_skips_the_step_and_stops_after_k_in_a_row():
    model, learner = _tiny_learner(max_nonfinite_skips=2)
    before = [p.detach().clone() for p in model.parameters()]
    rng = np.random.default_rng(0)
    out = learner.update(_samples(math.nan), rng)
    assert out["loss/skipped_steps"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # A finite update resets the streak (and changes the weights) ...
    out = learner.update(_samples(1.0), rng)
    assert out["loss/skipped_steps"] == 0.0 and learner.nonfinite_streak == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # ... so it takes two non-finite steps in a row to stop the run.
    learner.update(_samples(math.inf), rng)
    with pytest.raises(NonFiniteLossError, match="2 optimiser steps in a row"):
        learner.update(_samples(math.nan), rng)
    assert all(torch.isfinite(p).all() for p in model.parameters())


# -- 6, 7: one iteration-0 row; one process per run directory -------------------------------


@pytest.mark.slow
def test_resume_without_a_checkpoint_leaves_one_iteration_zero_row(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"iteration": 0, "eval/success": 0.5}) + "\n"
    )
    cfg = compose([*SMALL, "trainer.steps=1", "trainer.resume=true", "trainer.eval_every=1"])
    train(cfg, tmp_path)
    rows = read_metrics(tmp_path)
    assert [r["iteration"] for r in rows] == [0, 1]


@pytest.mark.slow
def test_a_second_run_in_the_same_directory_gets_a_clear_error(tmp_path):
    cfg = compose([*SMALL, "trainer.steps=1", "trainer.eval_every=0"])
    with exclusive_run_dir(tmp_path), pytest.raises(RunDirInUse, match=f"pid {os.getpid()}"):
        train(cfg, tmp_path)
    assert not (tmp_path / "metrics.jsonl").exists()
    with exclusive_run_dir(tmp_path):  # released on exit
        pass


def test_the_lock_dies_with_a_killed_process(tmp_path):
    code = (
        "import sys, time; from pathlib import Path; "
        "from agentrl.run.checkpoint import exclusive_run_dir\n"
        "with exclusive_run_dir(Path(sys.argv[1])):\n"
        "    print('locked', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"locked"
    with pytest.raises(RunDirInUse, match=f"pid {proc.pid}"), exclusive_run_dir(tmp_path):
        pass
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.time() + 10
    while True:
        try:
            with exclusive_run_dir(tmp_path):
                break
        except RunDirInUse:
            assert time.time() < deadline
            time.sleep(0.1)


# -- 10: config edges ------------------------------------------------------------------------


def test_group_size_one_warns_for_group_estimators_only():
    cfg = compose(["rollout.group_size=1"])
    assert any("group_size=1" in m for m in startup_warnings(cfg, get_estimator("grpo")))
    assert any("group_size=1" in m for m in startup_warnings(cfg, get_estimator("gigpo")))
    assert not startup_warnings(cfg, get_estimator("reinforce_pp"))
    assert not startup_warnings(compose([]), get_estimator("grpo"))


def test_a_missing_model_path_fails_with_agentrls_message(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.name_or_path=.*is not a directory"):
        compose([f"model.name_or_path={tmp_path}/no/such/checkpoint"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"has no config\.json"):
        compose([f"model.name_or_path={tmp_path}/empty"])


def test_an_unloadable_hub_id_fails_with_agentrls_message(monkeypatch):
    import transformers

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to the hub (offline)")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", offline)
    with pytest.raises(ConfigError, match=r"model\.name_or_path='no-org/no-model' could not"):
        load_pretrained(ModelConfig(name_or_path="no-org/no-model"))


# -- 17: threads -----------------------------------------------------------------------------


def test_thread_choice():
    assert choose_num_threads(3, 2, 0.0, None) == (3, "trainer.num_threads")
    assert choose_num_threads(0, 8, 0.0, "1") == (1, "OMP_NUM_THREADS")
    assert choose_num_threads(0, 2, 0.1, None)[0] == 2  # idle: every core
    assert choose_num_threads(0, 8, 3.2, None)[0] == 5  # three cores are busy
    assert choose_num_threads(0, 2, 7.0, "")[0] == 1  # overloaded: never below 1
