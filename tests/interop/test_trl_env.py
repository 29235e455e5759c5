"""The TRL recipe: an agentrl environment as ``GRPOTrainer``'s ``environment_factory``.

The tool environment is checked against the environment it wraps, the tool chat template
against TRL's own checks (it renders tool calls, it is prefix-preserving, its calls parse), and
TRL's trainer runs two steps on the tiny model on CPU with Sokoban: the model calls the ``act``
tool, the environment is stepped and every parameter moves.

Skipped with the reason when TRL does not import, unless ``AGENTRL_REQUIRE_TRL=1`` (set by CI),
which turns that skip into a failure.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import agentrl
from agentrl.configuration import ConfigError
from agentrl.interop.trl_env import (
    AgentrlToolEnv,
    environment_factory,
    seed_dataset,
    use_tool_template,
)
from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer

REQUIRE = os.environ.get("AGENTRL_REQUIRE_TRL") == "1"
INSTALL = "pip install -e '.[trl]' (README, TRL)"
if importlib.util.find_spec("trl") is None and not REQUIRE:
    pytest.skip(f"trl is not installed: {INSTALL}", allow_module_level=True)

MOVES = ["up", "down", "left", "right"]
SFT_STEPS = 60  # ~3/4 of the sampled answers are then parsable calls


def _call(command: str) -> dict:
    return {"type": "function", "function": {"name": "act", "arguments": {"command": command}}}


def _tokenizer(corpus: list[str]):
    return use_tool_template(build_tokenizer(corpus))


# -- the tool environment ----------------------------------------------------------------------


def test_public_methods_are_trls_reset_get_reward_and_one_tool():
    """TRL offers every public method except reset/get_reward to the model as a tool."""
    methods = {n for n, _ in inspect.getmembers(AgentrlToolEnv, inspect.isfunction)}
    assert {n for n in methods if not n.startswith("_")} == {"act", "get_reward", "reset"}


def test_act_steps_the_env_as_the_direct_env_does():
    tool, direct = AgentrlToolEnv("sokoban"), agentrl.make("sokoban")
    rng = np.random.default_rng(0)
    for seed in range(5):
        text = tool.reset(seed=seed, prompt=[{"role": "user", "content": ""}])
        obs, info = direct.reset(seed=seed)
        assert info["task"] in text and obs in text and "Admissible actions: up, down" in text
        total = 0.0
        for _ in range(20):
            move = str(rng.choice([*MOVES, "jump"]))
            result = tool.act(move)
            obs, reward, terminated, truncated, info = direct.step(move)
            total += reward
            assert result.startswith(obs) and f"Reward: {reward:g}." in result
            assert ("not a valid action" in result) == (not info["action_valid"])
            assert tool.get_reward() == pytest.approx(total)
            if terminated or truncated:
                break
        assert tool.done and ("episode is over" in result or "solved" in result)
        steps = tool.total_steps
        assert "no more actions" in tool.act("up") and tool.total_steps == steps


def test_reset_without_a_seed_draws_a_new_task_and_clears_the_return():
    tool = AgentrlToolEnv("sokoban")
    tool.reset(seed=1)
    tool.act("up")
    assert tool.steps == 1 and tool.get_reward() != 0
    tool.reset()
    assert (tool.steps, tool.get_reward(), tool.done) == (0, 0.0, False)


def test_factory_checks_options_once_and_builds_fresh_envs():
    with pytest.raises(ConfigError, match=r"env\.num_boxs is not a valid key"):
        environment_factory("sokoban", num_boxs=2)
    factory = environment_factory("sokoban", dim_room=[7, 7], max_steps=3)
    a, b = factory(), factory()
    assert a is not b and a.env is not b.env
    assert len(a.reset(seed=0).splitlines()) > len(AgentrlToolEnv().reset(seed=0).splitlines())


def test_seed_dataset_rows_hold_a_conversational_prompt_and_a_seed():
    data = seed_dataset(3, start=10, prompt="Solve it.")
    assert data["seed"] == [10, 11, 12]
    assert data[0]["prompt"] == [{"role": "user", "content": "Solve it.\n"}]
    with pytest.raises(ValueError, match="n=0 is invalid"):
        seed_dataset(0)


# -- the tool chat template ---------------------------------------------------------------------


def test_tool_template_passes_trls_checks_and_its_calls_parse():
    from transformers.utils.chat_parsing.response_parser import parse_response
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    tok = _tokenizer(["<tool_call> act command up down left right"] * 4)
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    tool = AgentrlToolEnv()
    messages = [{"role": "user", "content": tool.reset(seed=0)}]
    prefix = tok.apply_chat_template(
        messages, tools=[tool.act], tokenize=False, add_generation_prompt=True
    )
    assert "\nact(command): Take one action" in prefix and prefix.endswith("<|assistant|>\n")
    call = '<tool_call>{"name": "act", "arguments": {"command": "left"}}</tool_call><|end|>'
    assert parse_response(call, tok.response_template, prefix=prefix) == {
        "role": "assistant",
        "tool_calls": [_call("left")],
    }
    text = parse_response("no tool<|end|>", tok.response_template, prefix=prefix)
    assert text == {"role": "assistant", "content": "no tool"}
    # A rendered call parses back to itself: what the model learns to write is what TRL reads.
    turn = tok.apply_chat_template(
        [*messages, {"role": "assistant", "content": "", "tool_calls": [_call("up")]}],
        tools=[tool.act],
        tokenize=False,
    )
    parsed = parse_response(turn[len(prefix) :], tok.response_template, prefix=prefix)
    assert parsed["tool_calls"] == [_call("up")]


# -- TRL's trainer, two steps ----------------------------------------------------------------


def _turns(tok) -> list[tuple[str, str]]:
    """(prompt, answer) pairs of first turns of Sokoban games as TRL renders them (tool list,
    task, board): mostly an ``act`` call, sometimes a final word."""
    rng = np.random.default_rng(0)
    tool = AgentrlToolEnv("sokoban")
    pairs = []
    for seed in range(24):
        messages = [{"role": "user", "content": tool.reset(seed=seed)}]
        prompt = tok.apply_chat_template(
            messages, tools=[tool.act], tokenize=False, add_generation_prompt=True
        )
        call = {"role": "assistant", "content": "", "tool_calls": [_call(str(rng.choice(MOVES)))]}
        answer = call if rng.random() < 0.8 else {"role": "assistant", "content": "done"}
        full = tok.apply_chat_template([*messages, answer], tools=[tool.act], tokenize=False)
        pairs.append((prompt, full[len(prompt) :].rstrip("\n")))
    return pairs


def _warm_tiny_model(path: Path):
    """The tiny model (agentrl's config, a tokenizer trained here) after a few supervised steps
    on the answers of :func:`_turns`, saved to ``path`` for TRL to load by name: the format a
    real instruct model already knows. Without them a random model never writes a parsable
    call, and no rollout would reach the environment. The loss is on the answers only."""
    pairs = _turns(_tokenizer(["<tool_call>"]))
    answers = [a for _, a in pairs]
    tok = _tokenizer([p + a for p, a in pairs] + answers * 10)
    tok.add_tokens(["<tool_call>", "</tool_call>"])  # one token each, as in real tool models
    rows = []
    for prompt, answer in pairs:
        context = tok(prompt, add_special_tokens=False)["input_ids"]
        target = tok(answer, add_special_tokens=False)["input_ids"]
        rows.append((context + target, [-100] * len(context) + target))
    width = max(len(ids) for ids, _ in rows)
    pad = tok.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(i)) + i for i, _ in rows])
    labels = torch.tensor([[-100] * (width - len(y)) + y for _, y in rows])
    torch.manual_seed(0)
    model = build_tiny_model(ModelConfig(), tok)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for step in range(SFT_STEPS):
        batch = torch.randperm(len(rows), generator=torch.Generator().manual_seed(step))[:8]
        ids = input_ids[batch]
        loss = model(input_ids=ids, attention_mask=ids != pad, labels=labels[batch]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return tok, loss.item()


@pytest.mark.slow
def test_grpo_trainer_trains_two_steps_on_sokoban_through_the_act_tool(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tok, sft_loss = _warm_tiny_model(tmp_path / "model")
    assert sft_loss < 1.5, sft_loss
    made: list[AgentrlToolEnv] = []
    factory = environment_factory("sokoban", max_steps=10)

    def recording_factory() -> AgentrlToolEnv:
        made.append(factory())
        return made[-1]

    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=160,
        max_tool_calling_iterations=3,
        learning_rate=1e-3,
        temperature=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=str(tmp_path / "model"),
        args=args,
        train_dataset=seed_dataset(8),
        processing_class=tok,
        environment_factory=recording_factory,
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    assert sum(env.total_steps for env in made) > 0, "no rollout called the act tool"
    rewards = [row for row in trainer.state.log_history if "reward" in row]
    assert len(rewards) == 2
    assert any(row.get("tools/call_frequency", 0) > 0 for row in trainer.state.log_history)
    after = dict(trainer.model.named_parameters())
    unchanged = [n for n, p in before.items() if torch.equal(p, after[n].detach())]
    assert not unchanged, f"parameters that did not change: {unchanged}"
    # The saved model is the one TRL started from (it trained a copy of it in memory).
    start = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    assert all(torch.equal(p, before[n]) for n, p in start.named_parameters())
