"""DAPO dynamic sampling (``rollout.dynamic_sampling``): groups whose returns are all equal never
reach credit assignment or the learner; new tasks are rolled out until the batch is full or the
round cap is hit."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import ScriptedBackend

import agentrl.credit.stage as stage_mod
from agentrl.configuration import ConfigError
from agentrl.credit.batch import Step, Trajectory, TrajectoryGroup
from agentrl.rollout.sampler import informative_group
from agentrl.run import compose
from agentrl.run.distributed import Dist
from agentrl.run.trainer import Trainer

N_TASKS = 4


def _group(*returns: float, lost: tuple[int, ...] = ()) -> TrajectoryGroup:
    trajs = []
    for k, r in enumerate(returns):
        step = Step([1], [2], [-0.5], r, True, False, 0, "a", True, lost=k in lost)
        trajs.append(Trajectory(steps=[step]))
    return TrajectoryGroup("t", 0, trajs)


def test_informative_group():
    assert informative_group(_group(1.0, 0.0))
    assert not informative_group(_group(1.0, 1.0, 1.0))
    assert not informative_group(_group(0.3))  # one episode: nothing to compare
    # Returns equal up to rounding in a sum of step rewards count as equal.
    assert not informative_group(_group(0.1 + 0.2, 0.3))
    # Lost episodes are left out, as credit assignment leaves them out.
    assert not informative_group(_group(1.0, 0.0, 1.0, lost=(1,)))
    assert informative_group(_group(1.0, 0.0, 0.0, lost=(2,)))


def _trainer(tmp_path, answers, *extra: str) -> Trainer:
    """A trainer on ``guess`` (one guess per episode, so a group is informative iff its two
    guesses differ in being right) whose policy answers ``answers`` in turn."""
    cfg = compose(
        [
            "env=guess",
            "env.max_steps=1",
            f"rollout.n_tasks={N_TASKS}",
            "rollout.group_size=2",
            "trainer.eval_every=0",
            "trainer.progress=false",
            "model.tokenizer_episodes=2",
            *extra,
        ]
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, tmp_path, Dist(), torch.device("cpu"))
    trainer.backend = ScriptedBackend(answers)
    trainer.backend.sleep = trainer.backend.sync = lambda *a: None
    plain = getattr(trainer.sampler, "inner", trainer.sampler)  # under DynamicSampling
    plain.backend = trainer.backend
    return trainer


def _spy(monkeypatch, trainer):
    """Record the groups credit assignment sees and the samples the learner gets."""
    seen: dict[str, list] = {"batches": [], "samples": []}
    compute = stage_mod.compute_advantages

    def credit(name, batch, *args, **kwargs):
        seen["batches"].append(batch)
        return compute(name, batch, *args, **kwargs)

    monkeypatch.setattr(stage_mod, "compute_advantages", credit)
    trainer.update.learner.update = lambda samples, rng: seen["samples"].append(samples) or {}
    return seen


def _group_returns(batch):
    returns = batch.traj_return
    return [sorted(returns[batch.traj_group == g].tolist()) for g in range(batch.n_groups)]


@pytest.mark.slow
def test_all_equal_groups_never_reach_the_learner(tmp_path, monkeypatch):
    answers = itertools.cycle(["1", "2", "3"])  # a group's two episodes guess a, a + 1
    trainer = _trainer(tmp_path, answers, "rollout.dynamic_sampling=true")
    seen = _spy(monkeypatch, trainer)
    metrics = [trainer.iteration() for _ in range(3)]
    for batch, samples in zip(seen["batches"], seen["samples"]):
        assert batch.n_groups == N_TASKS  # refilled to a full batch
        for returns in _group_returns(batch):
            assert returns[0] != returns[-1], returns
        assert len(samples) == batch.n_steps and all(s.advantage != 0 for s in samples)
    assert sum(m["rollout/resampled_groups"] for m in metrics) > 0  # some rounds were needed
    for m in metrics:
        assert m["rollout/kept_groups"] == N_TASKS and m["rollout/dynamic_capped"] == 0
        assert m["rollout/dynamic_rounds"] >= 1 and 0 <= m["rollout/informative_frac"] <= 1
        # env/ describes the first draw of n_tasks groups (the policy), not the kept ones.
        assert 0 <= m["env/success"] <= 1
    # The same policy without dynamic sampling trains on all-equal groups too.
    plain = _trainer(tmp_path / "plain", itertools.cycle(["1", "2", "3"]))
    seen = _spy(monkeypatch, plain)
    for _ in range(3):
        plain.iteration()
    equal = [r for b in seen["batches"] for r in _group_returns(b) if r[0] == r[-1]]
    assert equal, "the control run should see all-equal groups"


@pytest.mark.slow
def test_the_round_cap_trains_on_what_there_is(tmp_path, monkeypatch):
    """Every episode guesses "1": both episodes of a group always agree, no group is ever
    informative; after the cap the update gets nothing, and the iteration says so."""
    trainer = _trainer(
        tmp_path,
        itertools.repeat("1"),
        "rollout.dynamic_sampling=true",
        "rollout.dynamic_sampling_max_rounds=3",
    )
    seen = _spy(monkeypatch, trainer)
    metrics = trainer.iteration()
    assert metrics["rollout/dynamic_rounds"] == 3 and metrics["rollout/dynamic_capped"] == 1
    assert metrics["rollout/resampled_groups"] == 2 * N_TASKS
    assert metrics["rollout/kept_groups"] == 0 and metrics["rollout/informative_frac"] == 0
    assert seen["batches"][0].n_groups == 0 and seen["samples"] == [[]]
    assert metrics["perf/decode_tokens"] == 3 * N_TASKS * 2  # every round's one-token answers


def test_settings_that_cannot_work_fail_at_start_up(tmp_path):
    with pytest.raises(ConfigError, match="group_size"):
        compose(["rollout.dynamic_sampling=true", "rollout.group_size=1"])
    with pytest.raises(ConfigError, match="dynamic_sampling_max_rounds"):
        compose(["rollout.dynamic_sampling_max_rounds=0"])
    cfg = compose(["algo=ac2", "env=proof", "rollout.dynamic_sampling=true"])
    with pytest.raises(ConfigError, match="dynamic sampling off"):
        Trainer(cfg, tmp_path, Dist(), torch.device("cpu"))
