"""PS-PPO: the leave-one-out estimator and the driver on a scripted case (its end-to-end run is
a case of tests/run/test_e2e_matrix.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agentrl import list_envs, register_env
from agentrl.algos.psppo import PSPPOConfig, PSPPODriver, psppo_advantages
from agentrl.algos.rloo import rloo_traj_advantage
from agentrl.configuration import ConfigError
from agentrl.credit import StepBatch, compute_advantages, get_estimator
from agentrl.env_api import TextEnv, Transition
from agentrl.rollout.backends import Generation
from agentrl.run import compose


def test_mean_and_pairwise_advantages_by_hand():
    # anchor 0: rewards 1, .25 (a first segment each); anchor 1: response 1.0 + continuations
    # .5, .75; anchor 2: response .25 + continuations .75, .25 (one ungraded, left out).
    r = np.array([1.0, 0.25, 1.0, 0.5, 0.75, 0.25, 0.75, 0.25, 0.9])
    valid = np.array([True] * 8 + [False])
    anchor = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2])
    mean = psppo_advantages(r, valid, anchor, "mean")
    np.testing.assert_allclose(
        mean, [0.75, -0.75, 0.375, -0.375, 0.0, -0.25, 0.5, -0.25, 0.0], atol=1e-12
    )
    pair = psppo_advantages(r, valid, anchor, "pairwise")
    np.testing.assert_allclose(
        pair, [0.5, -0.5, 0.5, -0.5, 0.0, -0.25, 0.5, -0.25, 0.0], atol=1e-12
    )


def test_singletons_equal_groups_and_rloo():
    # A row alone at its anchor: baseline 0 (A = R), pairwise 0; equal rewards: exactly 0.
    r = np.array([0.3, 0.1, 0.1, 0.1])
    valid = np.ones(4, dtype=bool)
    anchor = np.array([0, 1, 1, 1])
    assert psppo_advantages(r, valid, anchor).tolist() == [0.3, 0.0, 0.0, 0.0]
    assert psppo_advantages(r, valid, anchor, "pairwise").tolist() == [0.0, 0.0, 0.0, 0.0]
    # Without cuts every response is one row at its problem's anchor: RLOO's leave-one-out.
    rng = np.random.default_rng(0)
    r = rng.random(12)
    group = np.repeat(np.arange(3), 4)
    np.testing.assert_allclose(
        psppo_advantages(r, valid.repeat(3), group), rloo_traj_advantage(r, group, 3)
    )
    with pytest.raises(ValueError):
        psppo_advantages(r, valid, group)


def test_config_is_validated_and_registered_with_its_driver():
    spec = get_estimator("psppo")
    assert spec.driver == "agentrl.algos.psppo:PSPPODriver" and not spec.group_based
    with pytest.raises(ConfigError, match=r"algo\.advantage"):
        PSPPOConfig(advantage="median")
    with pytest.raises(ConfigError, match=r"algo\.max_cut_frac"):
        PSPPOConfig(max_cut_frac=1.0)


# -- the driver on a scripted case -------------------------------------------------------------


class CountSevens(TextEnv):
    """One turn; reward = (number of '7' in the answer) / 4, full marks at four."""

    max_steps = 1

    def _reset(self, options):
        self.points = None
        return "Write sevens."

    def _step(self, action):
        self.points = action.count("7")
        extra = {"points": self.points, "score": self.points}
        return Transition("graded", self.points / 4, True, True, action, extra)

    def _anchor(self):
        return self.points

    def _won(self):
        return self.points == 4

    def _task(self):
        return "Write sevens."


class CharTokenizer:
    """One token per character (no chat template)."""

    pad_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


class ScriptedBackend:
    """Answers each generate call with the next scripted list of texts, in prompt order."""

    def __init__(self, calls):
        self.calls = list(calls)
        self.limits = []

    def generate(self, prompts, sampling):
        texts = self.calls.pop(0)
        assert len(texts) == len(prompts)
        self.limits.append(sampling.max_new_tokens)
        return [Generation([ord(c) for c in t], [-0.5] * len(t), t) for t in texts]


def scripted_driver(**algo):
    # Registered on first use, not at import: the env contract suite lists the registered envs
    # when it is collected, and this scripted env is not meant to pass it.
    if "count_sevens" not in list_envs():
        register_env("count_sevens", "agentrl-test/CountSevens-v0", entry_point=CountSevens)
    cfg = compose(
        [
            "env=count_sevens",
            "algo=psppo",
            "rollout.n_tasks=1",
            "rollout.group_size=2",
            "rollout.max_new_tokens=4",
        ]
    )
    algo_cfg = PSPPOConfig(**{"chunk_tokens": 2, "max_cuts": 1, "continuations": 2, **algo})
    # Responses 7777 (R=1) and 7xxx (R=.25); both are cut at 2 (the only chunk boundary in
    # (0, 0.9·4]); continuations after 77: xx (.5), 7x (.75); after 7x: 77 (.75), xx (.25).
    backend = ScriptedBackend([["7777", "7xxx"], ["xx", "7x", "77", "xx"]])
    return PSPPODriver(replace(cfg, algo=algo_cfg), None, CharTokenizer(), backend)


@pytest.mark.parametrize(
    ("advantage", "train", "expected"),
    [
        # segments of 7777, segments of 7xxx, then the continuations
        ("mean", False, [0.75, 0.375, -0.75, -0.25, -0.375, 0.0, 0.5, -0.25]),
        ("pairwise", True, [0.5, 0.5, -0.5, -0.25, -0.5, 0.0, 0.5, -0.25]),
    ],
)
def test_driver_segments_baselines_and_golden_advantages(advantage, train, expected):
    drv = scripted_driver(advantage=advantage, train_continuations=train)
    got = drv.collect(np.random.default_rng(0))
    groups, metrics = got.groups, got.metrics
    assert drv.backend.limits == [4, 2]  # continuations get the budget left after the cut
    (group,) = groups
    problem_ids = drv.problem(group.seed)[1]
    a, b, *conts = group.trajectories
    assert [len(t.steps) for t in group.trajectories] == [2, 2, 1, 1, 1, 1]
    # Each segment is a step whose prompt holds the problem and the prefix before it.
    for tr, text in ((a, "7777"), (b, "7xxx")):
        first, second = tr.steps
        assert first.prompt_ids == problem_ids and first.response_ids == [ord(c) for c in text[:2]]
        assert second.prompt_ids == problem_ids + [ord(c) for c in text[:2]]
        assert second.response_ids == [ord(c) for c in text[2:]]
        assert (first.reward, first.terminated, second.terminated) == (0.0, False, True)
    assert (a.ret, a.won, a.score, b.ret, b.won, b.score) == (1.0, True, 4.0, 0.25, False, 1.0)
    # Continuations: graded on prefix + continuation; trained only with train_continuations.
    assert [t.steps[0].reward for t in conts] == [0.5, 0.75, 0.75, 0.25]
    assert all(bool(t.steps[0].response_ids) == train for t in conts)
    batch = StepBatch.from_groups(groups)
    adv = compute_advantages("psppo", batch, drv.cfg)
    np.testing.assert_allclose(adv.step, expected, atol=1e-12)
    assert metrics["psppo/response_reward"] == 0.625
    assert metrics["psppo/response_success"] == 0.5
    assert metrics["psppo/cuts_per_response"] == 1.0 and metrics["psppo/continuations"] == 4
    assert got.decoded_tokens == 8 + 8
    assert drv.state_dict() == {} and drv.after_update(np.random.default_rng(0)) == {}


def test_cuts_are_chunk_boundaries_inside_the_response():
    drv = scripted_driver(max_cuts=2)
    rng = np.random.default_rng(0)
    for length in (0, 1, 2, 3, 10, 40):
        for _ in range(5):
            cuts = drv.cuts(length, rng)
            assert cuts == sorted(set(cuts)) and len(cuts) <= 2
            assert all(c % 2 == 0 and 0 < c <= 0.9 * length for c in cuts)
    # Drawn among the 18 boundaries of a 40-token response, not fixed.
    assert len({tuple(drv.cuts(40, rng)) for _ in range(20)}) > 1


def test_credit_benchmark_gives_psppo_one_continuation_per_step():
    """On episodes, PS-PPO's prefixes are the states: each step's return-to-go against the
    other visits of its state in its task group (leave-one-out)."""
    from helpers import make_batch

    from agentrl.bench.credit import _run_one, driver_batches

    batch = make_batch(
        [
            [[("s", "a", 0.0), ("t", "b", 1.0)], [("s", "c", 0.0)], [("t", "b", 0.5)]],
            [[("s", "a", 0.25), ("s", "a", 0.0)]],
        ]
    )
    views = driver_batches(["psppo", "grpo"], batch)
    assert set(views) == {"psppo"}
    adv = _run_one("psppo", batch, None, None, views)
    # s of task 0: to-go {1, 0}; t of task 0: {1, 0.5}; s of task 1: {0.25, 0}.
    np.testing.assert_allclose(adv, [1.0, 0.5, -1.0, -0.5, 0.25, -0.25])
