"""The AC2 driver with the tiny model on a one-turn test environment."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest
import torch

from agentrl import register_env
from agentrl.algos.ac2.core import AC2Config, Attempt
from agentrl.algos.ac2.driver import AC2Driver
from agentrl.env_api import TextEnv, Transition
from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer
from agentrl.rollout import HFBackend
from agentrl.run import compose


class SevensEnv(TextEnv):
    """One turn: the score is the share of '7' among the answer's characters (graded 0-7)."""

    max_steps = 1

    def _reset(self, options):
        self.k = int(self.np_random.integers(3))
        self.done_ = False
        return f"Problem {self.k}: write sevens."

    def _step(self, action):
        # Legible text only (what the contract suite demands of an open-text env): printable
        # ASCII, at most 2,000 characters, something besides markup.
        text = re.sub(r"<[^>]*>", "", action).strip()
        legible = text.isascii() and text.isprintable() and any(c.isalnum() for c in text)
        if not legible or len(text) > 2000:
            return Transition("Write something.", 0.0, False, False, None)
        points = round(7 * text.count("7") / len(text))
        self.done_ = True
        executed = " ".join(text.lower().split())  # the answer, as the proof env reports it
        return Transition("graded", points / 7, True, True, executed, {"points": points})

    def _anchor(self):
        return (self.k, self.done_)

    def _won(self):
        return False

    def _task(self):
        return "Write sevens."

    def _extra_info(self):
        return {"reference_solution": "7777"}


register_env("sevens", "agentrl-test/Sevens-v0", entry_point=SevensEnv)


@pytest.fixture(scope="module")
def setup():
    tok = build_tokenizer(["Problem 0: write sevens. 7777 0.3 Q value: 1.0"] * 20, 300)
    torch.manual_seed(0)
    model = build_tiny_model(ModelConfig(hidden_size=32, intermediate_size=64), tok)
    return tok, model


def _driver(setup, **algo):
    tok, model = setup
    cfg = compose(["env=sevens", "algo=ac2", "rollout.max_new_tokens=12"])
    cfg = replace(
        cfg,
        algo=replace(
            AC2Config(
                chunk_tokens=4,
                budget_tokens=12,
                n_refill=3,
                n_batch=3,
                group_size=2,
                critic_min_valid=1,
            ),
            **algo,
        ),
    )
    return AC2Driver(cfg, model, tok, HFBackend(model, tok))


def test_collect_builds_prefix_groups_and_masks_the_prefix(setup):
    drv = _driver(setup)
    rng = np.random.default_rng(0)
    got = drv.collect(rng)
    groups, metrics = got.groups, got.metrics
    assert len(groups) == 3 and all(len(g.trajectories) == 2 for g in groups)
    assert len(drv.buffer) == 3 and metrics["ac2/ready_frac"] == 0.0
    for g in groups:
        problem_ids = drv.problem(g.seed)[1]
        for tr in g.trajectories:
            (step,) = tr.steps
            _, cut = step.anchor
            assert cut % 4 == 0
            # The prompt is the problem plus the prefix: the learner trains new tokens only.
            assert step.prompt_ids[: len(problem_ids)] == problem_ids
            assert len(step.prompt_ids) == len(problem_ids) + cut
            # Unready problems are continued to the end of the budget and graded.
            assert cut + len(step.response_ids) <= 12
            assert step.valid and 0.0 <= step.reward <= 1.0
    # Refill (3 x 12) + continuations + critic questions: all decoded tokens are counted.
    assert got.decoded_tokens >= sum(
        len(t.steps[0].response_ids) for g in groups for t in g.trajectories
    )


@pytest.mark.parametrize("audit_frac", [0.0, 0.5, 1.0])
def test_ready_problems_get_chunks_valued_by_the_critic_and_some_are_audited(setup, audit_frac):
    drv = _driver(setup, audit_frac=audit_frac, n_refill=1, n_batch=6)
    for seed in range(5):  # a buffer of long attempts of problems marked ready (one-way)
        drv.buffer.push(Attempt(seed, [5] * 12, 0.0))
        drv.readiness.ready.add(seed)
        drv.bank[seed] = "7777"
    asked = []

    def fake_critic(items):  # a critic that always answers 0.5 (None for a with-ref query)
        asked.extend(items)
        return [0.5] * len(items)

    drv.critic_values = fake_critic
    got = drv.collect(np.random.default_rng(1))
    groups, metrics = got.groups, got.metrics
    ready = [g for g in groups if g.seed in range(5)]
    assert metrics["ac2/audited"] == math.ceil(audit_frac * len(ready))
    chunked = full = 0
    for g in ready:
        rows = [t.steps[0] for t in g.trajectories]
        cut = rows[0].anchor[1]
        if all(len(s.response_ids) <= 4 for s in rows) and any(
            len(s.response_ids) == 4 and cut + 4 < 12 for s in rows
        ):
            chunked += 1
            for s in rows:  # an unfinished chunk is valued by the critic
                if len(s.response_ids) == 4 and cut + 4 < 12:
                    assert s.reward == 0.5 and s.valid
        else:
            full += 1
    assert full >= metrics["ac2/audited"] - (1 if audit_frac == 0.5 else 0)
    if audit_frac == 0.0:
        assert chunked == len([g for g in ready if g.trajectories[0].steps[0].anchor[1] < 8])
    if audit_frac == 1.0:
        assert chunked == 0
    assert all(with_ref for _, _, with_ref in asked[: 2 * chunked])


def test_critic_learns_its_targets_and_the_ladder_tracks_the_update(setup):
    drv = _driver(setup, critic_lr=3e-3, critic_pairs=4)
    drv.pairs.extend([("Problem 0 Q value: ", 0.7), ("Problem 1 Q value: ", 0.2)] * 2)
    rng = np.random.default_rng(0)
    first = float(drv.critic_loss(list(drv.pairs)).detach())
    drv._snapshot = drv._flat_params()
    for _ in range(30):
        out = drv.after_update(rng)
    last = float(drv.critic_loss(list(drv.pairs)).detach())
    assert last < 0.5 * first
    assert out["ac2/critic_lr"] <= 3e-3
    state = drv.state_dict()
    other = _driver(setup)
    other.load_state_dict(state)
    assert list(other.pairs) == list(drv.pairs) and other.ladder.lr == drv.ladder.lr


def test_value_head_option_learns_the_grid_targets(setup):
    drv = _driver(setup, critic="head", critic_lr=1e-2, critic_pairs=4)
    pairs = [("Problem 0 Q value: ", 0.7), ("Problem 1 Q value: ", 0.2)]
    drv.pairs.extend(pairs * 2)
    rng = np.random.default_rng(0)
    first = float(drv.critic_loss(pairs).detach())
    for _ in range(40):
        drv._snapshot = drv._flat_params()
        drv.after_update(rng)
    assert float(drv.critic_loss(pairs).detach()) < 0.3 * first
    drv.problem(0)  # caches problem 0's text for the value prompt
    values = drv.critic_values([(0, "", False)])
    assert values[0] in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)  # never invalid
    head_state = drv.state_dict()["head"]
    other = _driver(setup, critic="head")
    other.load_state_dict(drv.state_dict())
    assert torch.equal(other.head.weight, head_state["weight"])
