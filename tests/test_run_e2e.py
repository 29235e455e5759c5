"""End to end: ``python -m agentrl.run ... trainer.steps=2`` on the tiny model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import run_agentrl
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.configuration import ConfigError
from agentrl.run import compose

RUN = [sys.executable, "-m", "agentrl.run"]


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RUN, *args, f"hydra.run.dir={tmp_path}/hydra"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


def test_two_iterations_train_every_parameter_and_save_hf_checkpoint(tmp_path):
    out = tmp_path / "run"
    proc = _run(
        [
            "trainer.steps=2",
            "rollout.n_tasks=2",
            "rollout.group_size=4",
            "rollout.max_new_tokens=3",  # some valid moves, so advantages are nonzero
            "trainer.progress=false",
            "trainer.save_initial=true",
            f"trainer.out_dir={out}",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "iter 2/2" in proc.stderr + proc.stdout
    ckpt = out / "checkpoints" / "iter-000002"
    assert (ckpt / "config.json").exists() and (ckpt / "model.safetensors").exists()
    assert (out / "checkpoints" / "latest").read_text() == "iter-000002"
    assert (out / "run_config.yaml").exists()
    assert list((out / "tb").glob("events.out.tfevents.*")), "no TensorBoard log"
    trained = AutoModelForCausalLM.from_pretrained(ckpt)
    initial = AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "iter-000000")
    AutoTokenizer.from_pretrained(ckpt)  # the tokenizer round-trips too
    before = dict(initial.named_parameters())
    unchanged = [
        n for n, p in trained.named_parameters() if p.requires_grad and torch.equal(p, before[n])
    ]
    assert not unchanged, f"parameters that did not change: {unchanged}"


def test_broken_config_fails_at_startup_with_exit_code(tmp_path):
    proc = _run(["+trainer.stepz=2", f"trainer.out_dir={tmp_path}/run"], tmp_path)
    assert proc.returncode == 2
    assert "trainer.stepz is not a valid key" in proc.stderr + proc.stdout
    assert "Did you mean 'steps'?" in proc.stderr + proc.stdout
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_default_config_composes():
    cfg = compose()
    assert (cfg.env_name, cfg.algo_name, cfg.model.name) == ("sokoban", "grpo", "tiny")
    assert cfg.model.name_or_path is None
    # the tiny preset tunes rollout/learner for the tiny model; the command line still wins
    assert (cfg.rollout.max_new_tokens, cfg.rollout.history_length, cfg.learner.lr) == (3, 0, 5e-3)
    assert compose(["rollout.max_new_tokens=7"]).rollout.max_new_tokens == 7
    real = compose(["model=qwen2.5-1.5b-instruct"])
    assert real.model.name_or_path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert (real.rollout.action_format, real.learner.lr, real.learner.kl_coef) == (
        "tag",
        1e-6,
        0.01,
    )
    cfg = compose(["env.dim_room=[7,7]", "env.num_boxes=2", "algo.norm_by_std=false"])
    assert cfg.env_kwargs["dim_room"] == [7, 7] and cfg.algo.norm_by_std is False


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (["+trainer.stepz=2"], ConfigError, "trainer.stepz is not a valid key"),
        (["trainer.steps=-1"], ConfigError, "trainer.steps=-1 is invalid"),
        (["trainer.steps=0", "trainer.eval_every=0"], ConfigError, "evaluation-only run"),
        (["+env.num_boxs=2"], ConfigError, "Did you mean 'num_boxes'"),
        (["env=sokobn"], Exception, "Could not find 'env/sokobn'"),
        (["algo=grpp"], Exception, "Could not find 'algo/grpp'"),
        (["algo.norm_by_std=maybe"], ConfigError, "algo.norm_by_std='maybe' must be true or false"),
        (["trainer.stepz=2"], Exception, "Could not override 'trainer.stepz'"),
        (["rollout.action_format=xml"], ConfigError, "choose one of ['tag', 'plain']"),
    ],
)
def test_broken_config_names_the_key(args, error, message):
    with pytest.raises(error) as exc:
        compose(args)
    assert message in str(exc.value)


def test_steps_zero_evaluates_a_checkpoint_only(tmp_path):
    """``trainer.steps=0`` with ``model.name_or_path=<checkpoint>``: one evaluation, no save."""
    out = tmp_path / "first"
    common = ["rollout.n_tasks=2", "rollout.group_size=2", "trainer.progress=false"]
    hydra = tmp_path / "hydra"
    final_eval = run_agentrl(
        ["trainer.steps=1", "trainer.eval_episodes=4", *common], out, hydra_dir=hydra, cwd=tmp_path
    )[-1]
    ckpt = out / "checkpoints" / "iter-000001"
    again = tmp_path / "again"
    rows = run_agentrl(
        ["trainer.steps=0", "trainer.eval_episodes=4", f"model.name_or_path={ckpt}", *common],
        again,
        hydra_dir=hydra,
        cwd=tmp_path,
    )
    assert [r["iteration"] for r in rows] == [0]
    # Same policy, same held-out seeds: the same evaluation as the end of the first run.
    assert rows[0]["eval/success"] == final_eval["eval/success"]
    assert rows[0]["eval/length"] == final_eval["eval/length"]
    assert not (again / "checkpoints").exists()
