"""Episodes lost to a failed environment or env worker: flagged by the rollout, left out of every
estimator's statistics with advantage 0, dropped from the learner's samples, counted in a metric.

The batches come from the real rollout loop over ``crashy`` environments (tests/crashy_env.py):
an action ``raise`` makes the environment raise, and the pool ends that episode truncated with
``info["worker_error"]``, exactly as it does for a worker process that dies
(tests/test_env_pool.py checks the dying-worker path).
"""

from __future__ import annotations

import copy
import hashlib

import crashy_env  # noqa: F401 - registers "crashy"
import numpy as np
import pytest
from helpers import ScriptedBackend, read_metrics

from agentrl.credit import compute_advantages, estimator_config
from agentrl.credit.batch import StepBatch
from agentrl.credit.graph import build_graph
from agentrl.model import build_tokenizer
from agentrl.registry import make
from agentrl.rollout import RolloutConfig, Sampling, collect

WIN = ["tick"] * 3  # +1 per tick, won at the third
LATE_WIN = ["x", "tick", "tick", "tick"]  # one invalid action (−0.5) first: return 2.5
FAIL = ["x"] * 6  # six invalid actions, truncated at max_steps = 6: return −3
LOST = ["raise"]  # the environment fails on the first step: truncated, reward 0, lost
# Group 0 (seed 0): the lost episode's 0 is above its peers' returns (−3, −3, 2.5), so treated
# as an ordinary episode it gets a positive advantage. Group 1 (seed 1) has no lost episode.
SCRIPTS = [[FAIL, LOST, FAIL, LATE_WIN], [WIN, LATE_WIN, FAIL, WIN]]
LOST_TRAJ = 1  # index of the lost trajectory in the batch


def answers(scripts: list[list[str]]) -> list[str]:
    """The scripted backend's answers in call order: each turn answers the live envs in order
    (a script ends exactly when its episode does)."""
    out = []
    for t in range(max(len(s) for s in scripts)):
        out.extend(s[t] for s in scripts if len(s) > t)
    return out


def rollout(scripts_by_group=SCRIPTS):
    scripts = [s for group in scripts_by_group for s in group]
    g = len(scripts_by_group[0])
    envs = [make("crashy") for _ in scripts]
    tok = build_tokenizer(["tick away", "Tick three times.", "tick raise x"] * 5, 300)
    cfg = RolloutConfig(n_tasks=len(scripts_by_group), group_size=g, invalid_penalty=0.5)
    seeds = list(range(len(scripts_by_group)))
    backend = ScriptedBackend(answers(scripts))
    return collect(envs, seeds, backend, tok, cfg, Sampling(max_new_tokens=2))


def without(groups, g: int, i: int):
    """A deep copy of ``groups`` without trajectory ``i`` of group ``g``."""
    out = copy.deepcopy(groups)
    del out[g].trajectories[i]
    return out


class TextScorer:
    """A deterministic stand-in for the policy scorer: ℓ from a hash of (context, response)."""

    def score(self, contexts, responses):
        return np.array(
            [
                -4.0 * int(hashlib.md5(f"{c}\x00{r}".encode()).hexdigest()[:8], 16) / 2**32
                for c, r in zip(contexts, responses)
            ]
        )


def advantages(name, batch, **overrides):
    cfg = estimator_config(name, overrides)
    return compute_advantages(name, batch, cfg, scorer=TextScorer())


def test_rollout_flags_the_lost_episode_and_the_batch_carries_it():
    groups = rollout()
    trajs = [t for g in groups for t in g.trajectories]
    lost = trajs[LOST_TRAJ]
    assert len(lost.steps) == 1 and lost.steps[0].truncated and lost.steps[0].reward == 0.0
    assert lost.steps[0].lost and lost.lost
    assert not any(s.lost for k, t in enumerate(trajs) if k != LOST_TRAJ for s in t.steps)
    assert [t.ret for t in trajs] == [-3.0, 0.0, -3.0, 2.5, 3.0, 2.5, -3.0, 3.0]
    batch = StepBatch.from_groups(groups)
    assert batch.traj_lost.tolist() == [k == LOST_TRAJ for k in range(8)]
    assert batch.step_lost.tolist() == (batch.step_traj == LOST_TRAJ).tolist()
    assert batch.n_lost == 1
    # Groups know their environment (for error messages).
    assert groups[0].env == "crashy"


def test_grpo_gave_the_lost_episode_a_positive_advantage_before():
    """The bug: the same batch without the flag treats the lost episode as a short, cheap
    episode and rewards it; with the flag it gets exactly 0."""
    batch = StepBatch.from_groups(rollout())
    unflagged = StepBatch(**{**vars(batch), "traj_lost": None})
    before = compute_advantages("grpo", unflagged).step
    # returns (−3, 0, −3, 2.5): mean −0.875, unbiased std 2.658 → A = +0.329
    assert before[batch.step_traj == LOST_TRAJ][0] > 0.3
    after = compute_advantages("grpo", batch)
    assert np.all(after.step[batch.step_lost] == 0.0)
    assert after.metrics["credit/lost_episodes"] == 1.0


ESTIMATORS = [
    ("grpo", {}),
    ("grpo", {"norm_by_std": False}),
    ("rloo", {}),
    ("reinforce_pp", {}),
    ("reinforce_pp_baseline", {}),
    ("gigpo", {}),
    ("gigpo", {"episode_stats": "step", "mode": "mean_norm"}),
    ("gagpo", {}),
    ("gaca", {}),
    ("crbc", {}),
    ("crbc", {"base": "rloo", "depth": 2}),
    ("relace", {"mode": "mean_std_norm"}),
]


@pytest.mark.parametrize(("name", "overrides"), ESTIMATORS)
def test_lost_episode_gets_zero_and_is_left_out_of_the_statistics(name, overrides):
    groups = rollout()
    batch = StepBatch.from_groups(groups)
    out = advantages(name, batch, **overrides)
    lost = batch.step_lost
    assert np.all(out.step[lost] == 0.0)
    # The peers get exactly what they get when the lost episode never happened.
    clean = StepBatch.from_groups(without(groups, 0, LOST_TRAJ))
    expected = advantages(name, clean, **overrides)
    np.testing.assert_allclose(out.step[~lost], expected.step, rtol=1e-12, atol=1e-12)
    assert out.metrics["credit/lost_episodes"] == 1.0
    assert expected.metrics["credit/lost_episodes"] == 0.0
    # Shared metrics describe the steps that are trained on.
    assert out.metrics["credit/adv_mean"] == pytest.approx(expected.metrics["credit/adv_mean"])


@pytest.mark.parametrize("name", ["grpo", "gigpo", "crbc", "rloo"])
def test_a_group_of_lost_episodes_or_a_batch_of_them(name):
    groups = rollout([[LOST, LOST], [WIN, FAIL]])
    batch = StepBatch.from_groups(groups)
    assert batch.traj_lost.tolist() == [True, True, False, False]
    out = advantages(name, batch)
    expected = advantages(name, StepBatch.from_groups(groups[1:]))
    np.testing.assert_array_equal(out.step[:2], 0.0)
    np.testing.assert_allclose(out.step[2:], expected.step, rtol=1e-12, atol=1e-12)
    assert out.metrics["credit/lost_episodes"] == 2.0
    # Every episode lost: nothing to assign credit to, and no crash.
    all_lost = StepBatch.from_groups(rollout([[LOST, LOST]]))
    out = advantages(name, all_lost)
    np.testing.assert_array_equal(out.step, [0.0, 0.0])
    assert out.metrics["credit/lost_episodes"] == 2.0


def test_select_trajs_equals_the_batch_built_without_them():
    groups = rollout([[WIN, LOST, FAIL], [LOST, LOST, LOST], [LATE_WIN, WIN, LOST]])
    batch = StepBatch.from_groups(groups)
    kept = batch.without_lost()
    clean = [copy.deepcopy(g) for g in groups]
    for g in clean:
        g.trajectories = [t for t in g.trajectories if not t.lost]
    clean = [g for g in clean if g.trajectories]
    want = StepBatch.from_groups(clean)
    assert kept.n_groups == want.n_groups == 2
    for f in StepBatch.__dataclass_fields__:
        a, b = getattr(kept, f), getattr(want, f)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=f)
        else:
            assert a == b, f
    assert kept.n_lost == 0 and kept.without_lost() is kept
    with pytest.raises(ValueError, match="keep has shape"):
        batch.select_trajs(np.ones(3, dtype=bool))


def test_a_graph_of_the_full_batch_is_rejected():
    batch = StepBatch.from_groups(rollout())
    with pytest.raises(ValueError, match=r"build_graph\(batch\.without_lost\(\)\)"):
        compute_advantages("crbc", batch, graph=build_graph(batch))
    good = compute_advantages("crbc", batch, graph=build_graph(batch.without_lost()))
    np.testing.assert_array_equal(good.step, compute_advantages("crbc", batch).step)


@pytest.mark.slow
def test_trainer_drops_lost_steps_from_the_samples(tmp_path, monkeypatch):
    """One training iteration in-process: the learner never sees a lost episode's steps, the
    graph estimator runs, and the metric is logged."""
    from agentrl.learn.learner import Learner
    from agentrl.rollout import sampler
    from agentrl.run import compose
    from agentrl.run.trainer import train

    real_collect = sampler.collect
    seen: dict[str, object] = {}

    def collect_with_a_lost_episode(*args, **kwargs):
        groups = real_collect(*args, **kwargs)
        tr = groups[0].trajectories[0]
        del tr.steps[1:]
        tr.steps[0].lost, tr.steps[0].truncated, tr.steps[0].terminated = True, True, False
        tr.steps[0].reward, tr.won = 0.0, False
        seen["steps"] = [s for g in groups for t in g.trajectories for s in t.steps]
        seen["lost"] = tr.steps[0]
        return groups

    real_update = Learner.update

    def spy_update(self, samples, rng):
        seen["samples"] = list(samples)
        return real_update(self, samples, rng)

    monkeypatch.setattr(sampler, "collect", collect_with_a_lost_episode)
    monkeypatch.setattr(Learner, "update", spy_update)
    cfg = compose(
        [
            "algo=crbc",
            "trainer.steps=1",
            "trainer.eval_every=0",
            "trainer.progress=false",
            "model.tokenizer_episodes=2",
            "rollout.n_tasks=2",
            "rollout.group_size=2",
            "env.max_steps=3",
        ]
    )
    train(cfg, tmp_path / "run")
    steps, samples = seen["steps"], seen["samples"]
    assert len(samples) == len(steps) - 1
    assert all(s.response_ids is not seen["lost"].response_ids for s in samples)
    rows = read_metrics(tmp_path / "run")
    assert rows[-1]["credit/lost_episodes"] == 1.0
