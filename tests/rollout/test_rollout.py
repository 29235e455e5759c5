"""Prompting, projection, the registry's errors and the multi-turn rollout on a toy env."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import ScriptedBackend

import agentrl
from agentrl.configuration import ConfigError
from agentrl.credit.batch import StepBatch
from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer, load_pretrained
from agentrl.rollout import Generation, HFBackend, RolloutConfig, Sampling, collect
from agentrl.rollout.prompting import build_prompt, project_action


def test_project_action_tag_and_plain():
    assert project_action("I think <action>up</action>", "tag") == ("up", True)
    assert project_action("<action>up</action> no, <ACTION> left </ACTION>", "tag") == (
        "left",
        True,
    )
    assert project_action("up", "tag") == ("", False)
    assert project_action("<action>  </action>", "tag") == ("", False)
    assert project_action("  down \n", "plain") == ("down", True)
    assert project_action("", "plain") == ("", False)
    assert project_action("x" * 200_000, "plain") == ("", False)  # past MAX_ACTION_CHARS
    assert project_action("x" * 10_000, "plain") == ("x" * 10_000, True)  # a long proof


def test_build_prompt_shows_last_turns_and_actions():
    p = build_prompt("Do it.", [("obs A", "left"), ("obs B", "up")], "obs C", ["up"], 5, "tag")
    assert p.index("Do it.") < p.index("Step 4: observation:\nobs A\naction: left")
    assert "Step 5: observation:\nobs B\naction: up" in p
    assert "Current observation (step 6):\nobs C" in p
    assert "Admissible actions: up" in p and "<action>" in p
    p = build_prompt("Do it.", [], "obs", None, 0, "plain")
    assert "Recent history" not in p and "Admissible" not in p


def test_unknown_env_lists_names_and_closest():
    with pytest.raises(
        ConfigError, match=r"registered environments are \[.*'sokoban'.*Did you mean 'sokoban'"
    ):
        agentrl.make("sokobam")
    with pytest.raises(ConfigError, match=r"env\.max_step is not a valid key.*max_steps"):
        agentrl.make("guess", max_step=3)


def test_collect_groups_share_task_drop_finished_and_penalise_invalid():
    envs = [agentrl.make("guess", max_steps=3) for _ in range(4)]
    cfg = RolloutConfig(n_tasks=2, group_size=2, invalid_penalty=0.5, history_length=1)
    # Turn 1 (4 live): two guesses, one junk answer, one guess. Later turns: always "1".
    backend = ScriptedBackend(["1", "2", "junk", "3"] + ["1"] * 20)
    tok = build_tokenizer(["Guess a number from 1 to 3.", "Find the secret number."] * 5, 300)
    groups = collect(envs, [10, 11], backend, tok, cfg, Sampling(max_new_tokens=4))
    assert len(groups) == 2 and all(len(g.trajectories) == 2 for g in groups)
    assert [g.seed for g in groups] == [10, 11]
    # Members of a group face the same secret: same seed.
    secrets = [e.unwrapped.secret for e in envs]
    assert secrets[0] == secrets[1] and secrets[2] == secrets[3]
    junk = groups[1].trajectories[0].steps[0]
    assert not junk.valid and junk.action is None and junk.reward == pytest.approx(-0.5)
    for g in groups:
        for tr in g.trajectories:
            assert 1 <= len(tr.steps) <= 3
            last = tr.steps[-1]
            assert last.terminated or last.truncated
            assert tr.won == last.terminated
            assert all(not s.terminated and not s.truncated for s in tr.steps[:-1])
    # Finished episodes drop out: the number of prompts per call never grows.
    assert backend.calls == sorted(backend.calls, reverse=True) and backend.calls[0] == 4
    batch = StepBatch.from_groups(groups)
    assert batch.n_trajs == 4 and batch.n_steps == sum(backend.calls)


def test_collect_with_tiny_model_records_token_logprobs():
    envs = [agentrl.make("sokoban") for _ in range(4)]
    tok = build_tokenizer(["up down left right", "# _ O X P"] * 20, 300)
    torch.manual_seed(0)
    model = build_tiny_model(ModelConfig(hidden_size=32, intermediate_size=64), tok)
    cfg = RolloutConfig(n_tasks=2, group_size=2)
    groups = collect(envs, [1, 2], HFBackend(model, tok), tok, cfg, Sampling(max_new_tokens=3))
    steps = [s for g in groups for tr in g.trajectories for s in tr.steps]
    assert steps and all(1 <= len(s.response_ids) <= 3 for s in steps)
    assert all(len(s.logprobs) == len(s.response_ids) for s in steps)
    assert all(np.all(np.array(s.logprobs) <= 0) for s in steps)
    assert all(s.prompt_ids[-1] != tok.pad_token_id for s in steps)


def test_checkpoint_dir_loads_as_model_name_or_path(tmp_path):
    tok = build_tokenizer(["up down left right 12 345"] * 10, 300)
    model = build_tiny_model(ModelConfig(hidden_size=32, intermediate_size=64), tok)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, tok2 = load_pretrained(ModelConfig(name_or_path=str(tmp_path)))
    assert type(loaded).__name__ == "LlamaForCausalLM"
    # AutoTokenizer must give back the very same tokenizer (qwen2 checkpoints would not: see
    # ModelConfig.arch), or a resumed run and vLLM would tokenize differently.
    text = "<|user|>\nup 12 down 345 √ x"
    assert tok2.padding_side == "left" and len(tok2) == len(tok)
    assert tok2(text)["input_ids"] == tok(text)["input_ids"]
    for a, b in zip(model.parameters(), loaded.parameters()):
        assert torch.equal(a, b)


def test_entry_point_plugins_register_environments(monkeypatch):
    import importlib.metadata

    from agentrl import registry

    ep = importlib.metadata.EntryPoint(name="g", value="plugin_env", group="agentrl.envs")
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group: [ep] if group == "agentrl.envs" else []
    )
    monkeypatch.setattr(registry, "_LOADED_GROUPS", set())
    assert "plugin-guess" in agentrl.list_envs()
    _, info = agentrl.make("plugin-guess").reset(seed=0)
    assert info["task"] == "Find the secret number."


def test_household_prompt_lists_steps_history_and_admissible_actions():
    p = build_prompt(
        "Your task is to: put a clean apple in fridge.",
        [("You arrive at fridge 1.", "open fridge 1")],
        "You open the fridge 1.",
        ["close fridge 1", "go to sinkbasin 1"],
        3,
        "tag",
        "household",
    )
    assert "Your task is to: put a clean apple in fridge." in p
    assert "You have taken 3 step(s)" in p
    assert "[Observation 3: 'You arrive at fridge 1.', Action 3: 'open fridge 1']" in p
    assert "at step 4; you observe: You open the fridge 1." in p
    assert "['close fridge 1',\n 'go to sinkbasin 1']" in p
    assert p.endswith("write it inside <action> </action>.")
    plain = build_prompt("Your task is to: x.", [], "obs", ["look"], 0, "plain", "household")
    assert "step(s) so far" not in plain and plain.endswith("one admissible action only.")
    # auto without an environment to ask is the generic layout
    assert build_prompt("T.", [], "o", None, 0, "plain", "auto") == build_prompt(
        "T.", [], "o", None, 0, "plain"
    )


def test_alfworld_registers_the_household_prompt():
    from agentrl.registry import env_spec

    assert env_spec("alfworld").prompt_style == "household"
    assert env_spec("sokoban").prompt_style == "generic"


def test_collect_records_env_scores_and_the_trainer_logs_them_apart_from_success():
    """WebShop reports ``info['score']`` (reward × 100): kept per trajectory, logged as
    ``env/score`` next to ``env/success``."""
    from helpers import ENV_TEST_KWARGS

    from agentrl.run.evaluate import env_scores

    envs = [agentrl.make("webshop", **ENV_TEST_KWARGS["webshop"]) for _ in range(2)]
    cfg = RolloutConfig(n_tasks=1, group_size=2, history_length=0)
    # Search, open the first result, buy it: a real purchase with a graded reward.
    answers = ["search[stool]", "search[stool]"]
    tok = build_tokenizer(["search click buy now stool"] * 10, 300)

    class Shopper(ScriptedBackend):
        def generate(self, prompts, sampling):
            out = []
            for env in envs:
                adm = env.unwrapped._admissible() if hasattr(env.unwrapped, "_admissible") else []
                items = [a for a in adm if a.startswith("click[b0")]
                text = "click[buy now]" if "click[buy now]" in adm else (items or answers)[0]
                out.append(Generation(token_ids=[7], logprobs=[-1.0], text=text))
            return out[: len(prompts)]

    groups = collect(envs, [3], Shopper([]), tok, cfg, Sampling(max_new_tokens=4))
    trajs = groups[0].trajectories
    assert all(t.score is not None for t in trajs)
    assert all(t.steps[-1].action == "click[buy now]" for t in trajs)
    assert trajs[0].score == pytest.approx(100 * trajs[0].steps[-1].reward)
    metrics = env_scores(groups, "env")
    assert metrics == {"env/score": pytest.approx(np.mean([t.score for t in trajs]))}
    assert env_scores([], "env") == {}
