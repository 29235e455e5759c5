"""The command line: configs that compose or fail with agentrl's message, the run summary, an
evaluation-only run. Two training iterations per environment and method: test_e2e_matrix.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_agentrl

from agentrl.configuration import ConfigError
from agentrl.run import compose, main
from agentrl.run.run_log import print_summary, run_summary

RUN = [sys.executable, "-m", "agentrl.run"]


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RUN, *args, f"hydra.run.dir={tmp_path}/hydra"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


@pytest.mark.slow
def test_broken_config_fails_at_startup_with_exit_code(tmp_path):
    proc = _run(["+trainer.stepz=2", f"trainer.out_dir={tmp_path}/run"], tmp_path)
    assert proc.returncode == 2
    assert "trainer.stepz is not a valid key" in proc.stderr + proc.stdout
    assert "Did you mean 'steps'?" in proc.stderr + proc.stdout
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_default_config_composes():
    cfg = compose()
    assert (cfg.env_name, cfg.algo_name) == ("sokoban", "grpo")
    assert cfg.model.name_or_path is None
    # the tiny preset tunes rollout/learner for the tiny model; the command line still wins
    rc = cfg.rollout
    assert (rc.max_new_tokens, rc.history_length, cfg.trainer.eval_temperature) == (1, 0, 1.0)
    assert cfg.learner.lr == 5e-3
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
        (["env=sokobn"], ConfigError, "env=sokobn is not a valid option; choose one of ["),
        (["algo=grpp"], ConfigError, "Did you mean 'grpo'?"),
        (["algo.norm_by_std=maybe"], ConfigError, "algo.norm_by_std='maybe' must be true or false"),
        (["trainer.stepz=2"], ConfigError, "trainer.stepz is not a valid key"),
        (["rollout.action_format=xml"], ConfigError, "choose one of ['tag', 'plain']"),
    ],
)
def test_broken_config_names_the_key(args, error, message):
    with pytest.raises(error) as exc:
        compose(args)
    assert message in str(exc.value)


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("algo=crbx", "algo=crbx is not a valid option; choose one of ['ac2', "),
        ("algo=crbx", "Did you mean 'crbc'?"),
        ("env=sokobn", "Did you mean 'sokoban'?"),
        ("trainer.stepz=3", "trainer.stepz is not a valid key; valid keys are ['device', "),
        ("trainer.stepz=3", "Did you mean 'steps'?"),
        ("env.dim_rom=[7,7]", "Did you mean 'dim_room'?"),
        ("foo=1", "foo is not a valid key; valid keys are ['algo', 'env', 'learner', "),
    ],
)
def test_cli_names_the_closest_key_or_option(arg, message, monkeypatch, capsys):
    """A misspelt key without ``+`` or group option gets agentrl's message (the valid choices
    and the closest one) and exit code 2, not Hydra's bare error."""
    monkeypatch.setattr(sys, "argv", ["agentrl.run", arg])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_summary_is_printed_by_the_main_rank_only(tmp_path, capsys):
    rows = [
        {"iteration": 0, "eval/success": 0.125},
        {"iteration": 1, "env/success": 0.25},
        {"iteration": 2, "env/success": 0.5, "eval/success": 0.375},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ckpt = tmp_path / "checkpoints" / "iter-000002"
    print_summary(tmp_path, ckpt, is_main=False)
    assert capsys.readouterr().out == ""
    print_summary(tmp_path, ckpt, is_main=True)
    assert capsys.readouterr().out == run_summary(rows, tmp_path, ckpt) + "\n"
    text = run_summary(rows, tmp_path, ckpt)
    assert "train success   0.500  (iteration 2)" in text
    assert "eval success    0.375  (iteration 2; untrained, iteration 0: 0.125)" in text
    assert f"last checkpoint {ckpt}" in text and f"tensorboard --logdir {tmp_path}/tb" in text
    assert f"report          python -m agentrl.report {tmp_path}" in text
    # An evaluation-only run (trainer.steps=0): its one evaluation, no checkpoint.
    text = run_summary(rows[:1], tmp_path, None)
    assert "eval success    0.125  (iteration 0)" in text and "train success" not in text
    assert "last checkpoint none saved" in text


@pytest.mark.slow
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
