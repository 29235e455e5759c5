"""The supervised warm start (``python -m agentrl.sft``) and the environments' demonstrations."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ScriptedBackend, make_env, read_metrics
from transformers import AutoModelForCausalLM, AutoTokenizer

import agentrl
from agentrl.configuration import ConfigError
from agentrl.learn.value import VALUE_HEAD_FILE, load_value_head
from agentrl.model import build_tokenizer
from agentrl.rollout import Sampling, collect
from agentrl.run import compose
from agentrl.run.checkpoint import load_trainer_state
from agentrl.run.sft import SFTConfig, compose_sft, play_demonstrations, train_sft
from agentrl.run.trainer import train


def _follow(env, seed: int, options=None) -> dict:
    """Play ``env`` from reset by always taking the first demonstrated action."""
    _, info = env.reset(seed=seed, options=options)
    for _ in range(100):
        plan = env.unwrapped.demonstration()
        assert plan, f"no demonstration in a live episode (seed {seed}): {plan!r}"
        _, _, term, trunc, info = env.step(plan[0])
        assert info["action_valid"], plan[0]
        if term or trunc:
            break
    assert env.unwrapped.demonstration() == []  # nothing left once the episode is over
    return info


@pytest.mark.parametrize("name", ["sokoban", "webshop", "proof", "alfworld"])
def test_demonstrations_solve_the_task(name):
    env = make_env(name)
    for seed in range(4):
        assert _follow(env, seed)["won"], (name, seed)


@pytest.mark.parametrize("name", ["sokoban", "webshop", "proof", "alfworld"])
def test_asking_for_a_demonstration_changes_nothing(name):
    env = make_env(name)
    obs, _ = env.reset(seed=3)
    plan = env.unwrapped.demonstration()
    if plan and len(plan) > 1:
        obs, *_ = env.step(plan[0])
    anchor = env.unwrapped._anchor()
    rng_state = env.unwrapped.np_random.bit_generator.state
    first = env.unwrapped.demonstration()
    assert env.unwrapped.demonstration() == first
    assert env.unwrapped._anchor() == anchor and env.unwrapped.render() == obs
    assert env.unwrapped.np_random.bit_generator.state == rng_state


def test_demonstrations_replan_from_the_current_state():
    """Sokoban re-solves from wherever the player stands (or says None when a box is stuck);
    WebShop finds its way back from a wrong product page."""
    env = agentrl.make("sokoban")
    rng = np.random.default_rng(0)
    stuck = 0
    for seed in range(20):
        env.reset(seed=seed)
        for _ in range(3):
            env.step(str(rng.choice(["up", "down", "left", "right"])))
        plan = env.unwrapped.demonstration()
        if plan is None:
            stuck += 1
            continue
        for a in plan:
            *_, info = env.step(a)
        assert info["won"] or not plan
    assert stuck < 20
    shop = make_env("webshop")
    _, info = shop.reset(seed=1)
    plan = shop.unwrapped.demonstration()
    shop.step(plan[0])  # the search
    goal = plan[1:]
    listed = [f"click[{p.asin.lower()}]" for p in shop.unwrapped._page_products()]
    wrong = next(a for a in listed if a not in goal)
    shop.step(wrong)
    detour = shop.unwrapped.demonstration()
    assert detour[0] == "click[< prev]"
    for a in detour:
        *_, info = shop.step(a)
    assert info["won"]


def test_alfworld_demonstration_stops_when_the_episode_leaves_the_walkthrough():
    env = make_env("alfworld")
    _, info = env.reset(seed=1)
    plan = env.unwrapped.demonstration()
    env.step("inventory")  # describes only: still on the walkthrough
    assert env.unwrapped.demonstration() == plan
    other = next(a for a in info["admissible_actions"] if a.startswith("go to") and a != plan[0])
    env.step(other)
    assert env.unwrapped.demonstration() is None


def _run(*extra: str):
    return compose(["model.tokenizer_episodes=8", *extra])


def test_noise_replaces_that_share_of_the_demonstrated_actions():
    env = agentrl.make("sokoban")
    seeds = range(60)
    clean, stats = play_demonstrations(env, seeds, _run(), 0.0, 0.95, np.random.default_rng(0))
    assert stats["sft/demo_success"] == 1.0 and stats["sft/noisy_frac"] == 0.0
    assert all(t.cloned and not t.noisy for t in clean)
    noisy, stats = play_demonstrations(env, seeds, _run(), 0.5, 0.95, np.random.default_rng(0))
    cloned = [t for t in noisy if t.cloned]
    assert 0.4 < stats["sft/noisy_frac"] < 0.6
    assert stats["sft/demo_success"] < 1.0
    # Turns played at random after a box got stuck are not cloned, but carry the returns.
    assert stats["sft/off_demo_frac"] > 0 and len(cloned) < len(noisy)
    # Return-to-go (γ = 0.95): the solving push earns −0.1 + 1 + 10, the move before it
    # −0.1 + 0.95 · 10.9.
    assert [t.return_to_go for t in clean[-2:]] == pytest.approx([-0.1 + 0.95 * 10.9, 10.9])


def test_prompts_are_the_rollouts_prompts():
    """Same env, seed and actions: the SFT's prompts are the rollout's, history included."""
    run = _run("rollout.history_length=2")
    env = agentrl.make("sokoban")
    turns, _ = play_demonstrations(env, [7], run, 0.0, 0.95, np.random.default_rng(0))
    backend = ScriptedBackend([t.action for t in turns])
    tok = build_tokenizer([t.prompt for t in turns], 300)
    groups = collect([agentrl.make("sokoban")], [7], backend, tok, run.rollout, Sampling(3))
    steps = groups[0].trajectories[0].steps
    assert [s.prompt_text for s in steps] == [t.prompt for t in turns]
    assert len(turns) >= 2 and "Recent history" in turns[1].prompt


def test_an_environment_without_demonstrations_gives_no_pairs():
    env = agentrl.make("guess")
    turns, stats = play_demonstrations(
        env, range(3), compose(["env=guess"]), 0.0, 0.95, np.random.default_rng(0)
    )
    assert not any(t.cloned for t in turns) and stats["sft/off_demo_frac"] == 1.0


def _evaluate(tmp_path: Path, *extra: str) -> dict:
    """The trainer's greedy evaluation (``trainer.steps=0``) on 64 held-out levels."""
    cfg = compose(["trainer.steps=0", "trainer.eval_episodes=64", "trainer.progress=false", *extra])
    train(cfg, tmp_path)
    return read_metrics(tmp_path)[0]


@pytest.mark.slow
def test_sft_on_sokoban_beats_the_untrained_model_and_loads(tmp_path):
    """A few hundred steps of cloning solver plans: the greedy policy answers with moves and
    solves held-out levels the untrained one does not (it answers with noise), and the
    checkpoint loads with transformers and as ``model.name_or_path``."""
    out = tmp_path / "sft"
    run = _run()
    cfg = SFTConfig(steps=200, episodes=64, batch_size=16, lr=3e-3, log_every=50, out_dir=str(out))
    metrics = train_sft(run, cfg, out)
    rows = read_metrics(out)
    assert rows[0]["sft/demo_success"] == 1.0 and rows[-1]["step"] == 200
    assert rows[-1]["sft/loss"] < 0.5 * rows[1]["sft/loss"]
    assert metrics["sft/token_acc"] > 0.55  # EOS and the move's format at least
    AutoModelForCausalLM.from_pretrained(out)
    AutoTokenizer.from_pretrained(out)
    untrained = _evaluate(tmp_path / "untrained")
    cloned = _evaluate(tmp_path / "cloned", f"model.name_or_path={out}")
    # The untrained model answers with noise (every move invalid, nothing solved); the cloned
    # one answers with moves and solves some levels (this tiny model learns the answer format
    # and a move, not yet the board: see README, "Supervised warm start").
    assert untrained["eval/invalid_rate"] > 0.9 and cloned["eval/invalid_rate"] < 0.1
    assert cloned["eval/success"] >= untrained["eval/success"] + 0.08, (untrained, cloned)


@pytest.mark.slow
def test_value_head_from_sft_is_the_pretrained_critic(tmp_path):
    """``sft.value_coef`` fits and saves a value head; ``algo=gae algo.critic_init=pretrained``
    starts its critic from exactly that head."""
    out = tmp_path / "sft"
    cfg = SFTConfig(steps=4, episodes=8, batch_size=8, value_coef=0.5, out_dir=str(out))
    metrics = train_sft(_run(), cfg, out)
    assert metrics["sft/value_loss"] > 0
    state, meta = load_value_head(out)
    assert meta["gamma"] == 0.95 and state["weight"].abs().sum() > 0
    gae = compose(
        [
            "algo=gae",
            "algo.critic_init=pretrained",
            f"model.name_or_path={out}",
            "trainer.steps=1",
            "rollout.n_tasks=1",
            "rollout.group_size=2",
            "env.max_steps=3",
            "trainer.eval_every=0",
            "trainer.progress=false",
            "trainer.save_initial=true",
        ]
    )
    train(gae, tmp_path / "rl")
    first = load_value_head(tmp_path / "rl" / "checkpoints" / "iter-000000")[0]
    assert torch.equal(first["weight"], state["weight"])
    saved = load_trainer_state(tmp_path / "rl" / "checkpoints" / "iter-000001" / "trainer_state.pt")
    assert not torch.equal(
        saved["stages"]["credit"]["critic"]["head"]["weight"].cpu(), state["weight"]
    )  # trained
    assert (tmp_path / "rl" / "checkpoints" / "iter-000001" / VALUE_HEAD_FILE).exists()


@pytest.mark.slow
def test_config_and_command_line(tmp_path):
    run, cfg = compose_sft(["env=sokoban", "sft.steps=7", "sft.noise=0.25", "model.hidden_size=32"])
    assert (cfg.steps, cfg.noise, run.model.hidden_size, run.env_name) == (7, 0.25, 32, "sokoban")
    with pytest.raises(ConfigError, match=r"sft\.noise"):
        SFTConfig(noise=1.5)
    proc = subprocess.run(
        [sys.executable, "-m", "agentrl.sft", "sft.stepz=3"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "stepz" in proc.stderr + proc.stdout
