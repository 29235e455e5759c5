"""The asynchronous producer (rollout.max_staleness): pacing, versions, the staleness bound.

A stand-in engine answers every prompt with the version of the weights it was last synced
with, so each step's text says which weights really sampled it; a one-parameter "policy"
carries the version as its value.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import agentrl
from agentrl.configuration import ConfigError
from agentrl.credit.batch import Step, Trajectory, TrajectoryGroup
from agentrl.model import build_tokenizer
from agentrl.rollout import Generation, RolloutConfig, Sampling
from agentrl.rollout.env_pool import InlinePool
from agentrl.rollout.producer import AsyncSampler, draw_task_seeds, staleness_metrics
from agentrl.rollout.sampler import Alone, DynamicSampling, Sampler

N_TASKS, GROUP = 2, 2


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))


class VersionEngine:
    """Answers with the version it was synced with; records (started, version) at each sync."""

    def __init__(self, owner: list, delay: float = 0.0):
        self.owner, self.delay = owner, delay
        self.weight = None
        self.ahead = []  # batches started beyond the learner's version, seen at each generate

    def sync(self, model) -> None:
        self.weight = int(model.w.item())

    def sleep(self) -> None:
        pass

    def generate(self, prompts, sampling):
        time.sleep(self.delay)
        s = self.owner[0]
        self.ahead.append(s.started - 1 - s.version)
        text = str(self.weight)
        return [Generation(token_ids=[7], logprobs=[-1.0], text=text) for _ in prompts]


def make(k: int, total: int, delay: float = 0.0, seed: int = 0, partial: bool = False):
    envs = InlinePool([agentrl.make("guess", max_steps=3) for _ in range(N_TASKS * GROUP)])
    cfg = RolloutConfig(n_tasks=N_TASKS, group_size=GROUP)
    tok = build_tokenizer(["Guess a number from 1 to 3."] * 4, 200)
    owner: list = []
    engine = VersionEngine(owner, delay)
    plain = Sampler(envs, engine, tok, cfg, Sampling(max_new_tokens=2))
    task_rng = np.random.default_rng(seed)
    policy = Policy()
    sampler = AsyncSampler(plain, policy, task_rng, k, total, partial=partial)
    owner.append(sampler)
    return sampler, policy, task_rng, engine


def train_loop(sampler, policy, task_rng, iters: int, learn_s: float = 0.0, before_publish=None):
    """What the trainer does: draw the seeds, collect, 'update' (the version as the weight),
    publish."""
    out = []
    for it in range(iters):
        seeds = draw_task_seeds(task_rng, N_TASKS)
        got = sampler.collect(seeds, np.random.default_rng(it))
        out.append((it, seeds, got))
        time.sleep(learn_s)
        if before_publish is not None:
            before_publish(it)
        with torch.no_grad():
            policy.w.fill_(it + 1)
        sampler.publish(policy)
    return out


@pytest.mark.parametrize("k", [1, 2])
def test_every_step_within_k_versions_and_tagged_with_its_sampler(k):
    iters = 6
    sampler, policy, task_rng, engine = make(k, iters)
    # A slow learner: the producer runs ahead as far as pacing lets it.
    out = train_loop(sampler, policy, task_rng, iters, learn_s=0.1)
    sampler.close()
    ages = []
    for it, seeds, got in out:
        assert [g.seed for g in got.groups] == list(seeds)  # the trainer's tasks, in order
        assert got.metrics["rollout/groups_dropped"] == 0
        for g in got.groups:
            for t in g.trajectories:
                for s in t.steps:
                    # The weights that answered are the version the step records.
                    assert s.response_text == str(s.policy_version)
                    assert 0 <= it - s.policy_version <= k
                    ages.append(it - s.policy_version)
        hist = [got.metrics[f"rollout/staleness_{j}"] for j in range(k + 1)]
        assert sum(hist) == pytest.approx(1.0)
    # With a slow learner the producer really is k versions ahead once it has run up.
    assert max(ages) == k
    # Pacing: never more than k batches started beyond the one the learner needs next.
    assert max(engine.ahead) <= k
    assert not sampler._thread.is_alive()


def test_no_batch_beyond_the_run_and_producer_errors_reach_the_learner():
    sampler, policy, task_rng, engine = make(1, 2)
    train_loop(sampler, policy, task_rng, 2)
    sampler.close()
    assert sampler.started == 2  # nothing played for an iteration that never comes

    sampler, policy, task_rng, engine = make(1, 3)

    def boom(prompts, sampling):
        raise OSError("engine died")

    engine.generate = boom
    with pytest.raises(RuntimeError, match="rollout producer failed: OSError: engine died"):
        sampler.collect(draw_task_seeds(task_rng, N_TASKS), np.random.default_rng(0))
    sampler.close()


def test_seeds_out_of_step_are_refused():
    sampler, policy, task_rng, _ = make(1, 3)
    train_loop(sampler, policy, task_rng, 1)
    with pytest.raises(RuntimeError, match="out of step"):
        sampler.collect(np.array([1, 2]), np.random.default_rng(0))
    sampler.close()


def test_state_counts_in_flight_batches_and_resume_reports_them():
    sampler, policy, task_rng, _ = make(2, 10)
    train_loop(sampler, policy, task_rng, 2, learn_s=0.05)
    deadline = time.time() + 10
    # Batch 2 (needed next) and k = 2 more beyond it may be played with version 2.
    while sampler.started < 5 and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    state = sampler.state_dict()
    sampler.close()
    assert state["version"] == 2 and state["in_flight"] == 3 and state["groups_dropped"] == 0
    again, _, rng2, _ = make(2, 10)
    again.load_state_dict(state)
    for _ in range(2):  # the task stream as the resumed trainer has it
        draw_task_seeds(rng2, N_TASKS)
    got = again.collect(draw_task_seeds(rng2, N_TASKS), np.random.default_rng(0))
    again.close()
    assert got.metrics["rollout/in_flight_replayed"] == 3
    assert got.metrics["rollout/policy_version"] == 2  # played again with the current weights


def _group(versions: list[int]) -> TrajectoryGroup:
    steps = [
        Step([1], [2], [-1.0], 0.0, False, False, 0, "a", True, policy_version=v) for v in versions
    ]
    return TrajectoryGroup(task="t", seed=0, trajectories=[Trajectory(steps=steps)])


def test_admission_drops_and_counts_groups_beyond_the_bound():
    groups = [_group([5, 5]), _group([4, 5]), _group([3, 5])]
    kept, m, dropped = staleness_metrics(groups, 5, 1, Alone())
    assert kept == groups[:2] and dropped == 1
    assert m["rollout/groups_dropped_now"] == 1
    # Histogram over the admitted steps: three of age 0, one of age 1.
    assert m["rollout/staleness_0"] == pytest.approx(0.75)
    assert m["rollout/staleness_1"] == pytest.approx(0.25)
    assert m["rollout/staleness_mean"] == pytest.approx(0.25)
    assert m["rollout/staleness_max"] == 1


def test_config_errors():
    with pytest.raises(ConfigError, match=r"rollout\.max_staleness.*>= 0"):
        RolloutConfig(max_staleness=-1)
    with pytest.raises(ConfigError, match=r"rollout\.partial.*max_staleness >= 1"):
        RolloutConfig(partial=True)
    assert RolloutConfig(max_staleness=1, partial=True).partial
    sampler, policy, task_rng, _ = make(1, 2)
    dyn = DynamicSampling(sampler.inner, 3)
    with pytest.raises(ConfigError, match=r"needs the plain sampler.*DynamicSampling"):
        AsyncSampler(dyn, policy, task_rng, 1, 2)
    sampler.close()


def test_publish_hands_a_copy_not_the_live_weights():
    """The learner's in-place steps after publish never reach the producer's copy."""
    sampler, policy, _, _ = make(1, 2)
    with torch.no_grad():
        policy.w.fill_(3)
    sampler.publish(policy)
    with torch.no_grad():
        policy.w.fill_(99)  # a later optimiser step, not yet published
    snap = sampler._pending[1]
    assert snap["w"].item() == 3
    sampler.close()


# -- partial rollouts ---------------------------------------------------------------------------


class HoldingEngine(VersionEngine):
    """A VersionEngine whose first call of batch 1 waits until the learner has published
    version 1: the rest of batch 1's turns are generated after that update, whatever the
    timing, so with partial rollouts its episodes must switch weights mid-episode."""

    def __init__(self, owner: list):
        super().__init__(owner)
        self.held_once = False

    def generate(self, prompts, sampling):
        s = self.owner[0]
        if s.started - 1 == 1 and not self.held_once:
            self.held_once = True
            deadline = time.time() + 30
            while s.version < 1 and time.time() < deadline:
                time.sleep(0.005)
        return super().generate(prompts, sampling)


def _make_holding(k: int, total: int, partial: bool):
    sampler, policy, task_rng, _ = make(k, total, partial=partial)
    engine = HoldingEngine([sampler])
    sampler.engine.inner = engine  # under the producer's lock, as the stand-in it replaces
    return sampler, policy, task_rng, engine


@pytest.mark.parametrize("partial", [False, True])
def test_partial_rollouts_switch_weights_between_turns_and_record_each_steps_version(partial):
    iters = 3
    sampler, policy, task_rng, engine = _make_holding(1, iters, partial)

    def batch1_started(it):  # the update of batch 0 ends while batch 1 is being played
        deadline = time.time() + 30
        while it == 0 and not engine.held_once and time.time() < deadline:
            time.sleep(0.005)

    out = train_loop(sampler, policy, task_rng, iters, before_publish=batch1_started)
    sampler.close()
    _, _, got1 = out[1]
    versions = [[s.policy_version for s in t.steps] for g in got1.groups for t in g.trajectories]
    for it, _, got in out:
        for g in got.groups:
            for t in g.trajectories:
                for s in t.steps:
                    assert s.response_text == str(s.policy_version)  # the weights that answered
                    assert 0 <= it - s.policy_version <= 1  # the bound holds either way
    # A guess of "0" is never right: every episode of batch 1 has a second turn.
    assert all(len(v) >= 2 for v in versions)
    if partial:
        # Turn 1 was generated before the update, the later turns after it (a guess of "1"
        # may end an episode at turn 2).
        assert all(v == [0] + [1] * (len(v) - 1) for v in versions)
        assert got1.metrics["rollout/mixed_version_episodes"] == 1.0
        assert out[0][2].metrics["rollout/mixed_version_episodes"] == 0.0
    else:
        # Without partial rollouts the batch keeps the version it started with.
        assert all(v == [0, 0, 0] for v in versions)  # and "0" is wrong three times
        assert "rollout/mixed_version_episodes" not in got1.metrics


class StubProducer:
    def __init__(self):
        self.partial, self.held, self.published, self.refreshes = True, 0, 0, 0

    def newer_weights(self) -> bool:
        return self.published > self.held

    def refresh(self) -> None:
        self.refreshes += 1
        self.held = self.published


class QueueEngine:
    """A request queue: each request finishes after ``steps`` advances; its text is the
    version the engine held when the request was added (that is what generated it)."""

    def __init__(self, producer: StubProducer, steps: int = 2):
        self.producer, self.steps = producer, steps
        self.running: dict = {}

    def submit(self, key, prompt, sampling, seed=None):
        self.running[key] = [self.steps, self.producer.held]

    def advance(self):
        done = []
        for key, r in list(self.running.items()):
            r[0] -= 1
            if r[0] == 0:
                del self.running[key]
                done.append((key, Generation(token_ids=[1], logprobs=[0.0], text=str(r[1]))))
        return done


def test_queue_engine_loads_new_weights_only_between_requests():
    from agentrl.rollout.producer import _VersionedQueue, versioned

    prod = StubProducer()
    inner = QueueEngine(prod)
    q = versioned(inner, prod)
    assert isinstance(q, _VersionedQueue)
    q.submit("a", [1], None, 0)
    prod.published = 1  # the learner publishes while "a" is in flight
    q.submit("b", [1], None, 1)  # held back: it will run on the new weights
    assert list(inner.running) == ["a"] and prod.held == 0
    assert q.advance() == []
    ((key, gen),) = q.advance()  # "a" finishes under the weights it started with
    assert key == "a" and gen.text == "0" and gen.policy_version == 0
    # Nothing in flight: the new weights are loaded and "b" is submitted under them.
    assert q.advance() == [] and prod.held == 1 and list(inner.running) == ["b"]
    ((key, gen),) = q.advance()
    assert key == "b" and gen.text == "1" and gen.policy_version == 1
    # Without partial rollouts nothing is held back and the weights never change here.
    prod2 = StubProducer()
    prod2.partial = False
    q2 = versioned(QueueEngine(prod2), prod2)
    q2.submit("a", [1], None, 0)
    prod2.published = 1
    q2.submit("b", [1], None, 1)
    assert {k for k, _ in q2.advance() + q2.advance()} == {"a", "b"}
    assert prod2.refreshes == 0 and prod2.held == 0
