"""Continuous rollout (rollout.mode=continuous): equal to lock-step under greedy decoding,
independent of timing under sampling, generation overlapping slow env steps, lost episodes of a
dying worker; the pools' asynchronous stepping and the per-prompt sampling streams."""

from __future__ import annotations

import threading
from dataclasses import replace

import crashy_env  # noqa: F401 - registers "crashy"
import latency_env
import numpy as np
import pytest
import torch
from helpers import ScriptedBackend
from transformers import LogitsProcessorList

from agentrl.credit.batch import StepBatch
from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer
from agentrl.registry import make
from agentrl.rollout import HFBackend, RolloutConfig, Sampling, collect
from agentrl.rollout.backends import GumbelNoise, seeded_sampling
from agentrl.rollout.continuous import collect_continuous
from agentrl.rollout.env_pool import InlinePool, ProcessPool

CORPUS = ["say something you said turns nothing", "Say a few things. 1 2 3 4 5 6"] * 10


@pytest.fixture(scope="module")
def tiny():
    tok = build_tokenizer(CORPUS, 300)
    torch.manual_seed(0)
    # One torch thread: the tiny model gains nothing from more, and on a loaded machine two
    # threads spinning beside the env threads make generation ten times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tok, build_tiny_model(ModelConfig(), tok)
    torch.set_num_threads(threads)


def _transcripts(groups):
    return [
        [(s.prompt_ids, s.response_ids, s.reward, s.terminated, s.truncated) for s in t.steps]
        for g in groups
        for t in g.trajectories
    ]


def _play(tiny, mode, temperature, delay, seeds=(1, 2, 3), group=3, batch=256):
    tok, model = tiny
    envs = InlinePool([latency_env.LatencyEnv(delay) for _ in range(len(seeds) * group)])
    cfg = RolloutConfig(n_tasks=len(seeds), group_size=group, max_new_tokens=4, mode=mode,
                        max_batch_size=batch)  # fmt: skip
    torch.manual_seed(11)
    sampling = Sampling(max_new_tokens=4, temperature=temperature)
    return collect(envs, list(seeds), HFBackend(model, tok, batch), tok, cfg, sampling)


def test_greedy_continuous_equals_lockstep_transcript_for_transcript(tiny):
    lock = _play(tiny, "lockstep", 0.0, 0.0)
    # Random step delays (up to 10 ms) and small calls: batches unlike lock-step's turns.
    cont = _play(tiny, "continuous", 0.0, 0.01, batch=4)
    assert _transcripts(cont) == _transcripts(lock)
    assert [(g.seed, g.task, g.env) for g in cont] == [(g.seed, g.task, g.env) for g in lock]
    lengths = {len(t.steps) for g in lock for t in g.trajectories}
    assert len(lengths) > 2  # uneven episodes: continuous batches differ from lock-step's
    for a, b in zip(cont, lock):
        for ta, tb in zip(a.trajectories, b.trajectories):
            ends = [(t.won, t.final_obs, t.final_prompt) for t in (ta, tb)]
            assert ends[0] == ends[1]
            for sa, sb in zip(ta.steps, tb.steps):
                assert sa.anchor == sb.anchor and sa.action == sb.action
                np.testing.assert_allclose(sa.logprobs, sb.logprobs, atol=1e-5)


def test_sampled_continuous_transcripts_do_not_depend_on_timing(tiny):
    calm = _play(tiny, "continuous", 1.0, 0.0)
    jittery = _play(tiny, "continuous", 1.0, 0.01, batch=3)
    assert _transcripts(calm) == _transcripts(jittery)
    # Sampling did sample: the members of a group (same task, same prompt) answer differently.
    first = [t.steps[0].response_ids for t in calm[0].trajectories]
    assert len({tuple(r) for r in first}) > 1


def test_seeded_sampling_draws_from_the_warped_distribution():
    torch.manual_seed(0)
    scores = torch.randn(1, 12) * 2
    n = 20_000
    for sampling in (
        Sampling(4, temperature=1.0),
        Sampling(4, temperature=0.7, top_k=5),
        Sampling(4, temperature=1.3, top_p=0.8),
    ):
        procs = seeded_sampling(sampling, range(n), "cpu")
        picks = procs(None, scores.expand(n, -1).clone()).argmax(-1)
        freq = torch.bincount(picks, minlength=12).double() / n
        want = LogitsProcessorList(procs[:-1])(None, scores.clone())  # HF's warpers alone
        probs = torch.softmax(want.double(), -1)[0]
        assert torch.all(freq[probs == 0] == 0)
        # Binomial standard error at n = 20000 is at most 0.0036: 5 sigma.
        assert torch.max(torch.abs(freq - probs)) < 0.018
    # A row's draws depend on its seed only, not on its neighbours.
    a = GumbelNoise([5, 6], "cpu")(None, torch.zeros(2, 7))
    b = GumbelNoise([9, 6], "cpu")(None, torch.zeros(2, 7))
    assert torch.equal(a[1], b[1]) and not torch.equal(a[0], b[0])


class _RecordingBackend(ScriptedBackend):
    """Says "hi" to every prompt, logs each call, and opens the gate on its third call."""

    def __init__(self, log):
        super().__init__(iter(lambda: "hi", None))
        self.log = log

    def generate(self, prompts, sampling):
        self.log.append(("generate", len(prompts)))
        if len(self.calls) == 2:
            latency_env.LatencyEnv.gate.set()
        return super().generate(prompts, sampling)


@pytest.mark.parametrize("mode", ["continuous", "lockstep"])
def test_generation_proceeds_while_a_slow_step_is_pending(monkeypatch, mode):
    log: list = []
    envs = [latency_env.LatencyEnv() for _ in range(4)]
    monkeypatch.setattr(latency_env.LatencyEnv, "log", log)
    monkeypatch.setattr(latency_env.LatencyEnv, "gate", threading.Event())
    # Env 0's first step waits until the backend has been called three times (or 1 s).
    monkeypatch.setattr(latency_env.LatencyEnv, "hold", frozenset({id(envs[0])}))
    tok = build_tokenizer(CORPUS, 300)
    cfg = RolloutConfig(n_tasks=2, group_size=2, mode=mode)
    groups = collect(envs, [1, 2], _RecordingBackend(log), tok, cfg, Sampling(max_new_tokens=2))
    start = log.index(("step-start", id(envs[0])))
    end = log.index(("step-end", id(envs[0])))
    calls_while_pending = [e for e in log[start:end] if e[0] == "generate"]
    if mode == "continuous":
        # The other episodes' prompts were generated while env 0's step was pending.
        assert len(calls_while_pending) >= 2
        assert all(n < 4 for _, n in calls_while_pending)
    else:  # lock-step: the turn barrier holds generation until the slow step returns
        assert calls_while_pending == []
    assert all(t.won for g in groups for t in g.trajectories)


def test_a_worker_dying_mid_episode_gives_lost_flagged_episodes(tmp_path):
    tok = build_tokenizer(CORPUS, 300)
    cfg = RolloutConfig(n_tasks=2, group_size=2, mode="continuous")
    backend = ScriptedBackend(iter(lambda: "hi", None))
    kwargs = {"flag": str(tmp_path / "died"), "max_delay_s": 0.02}
    with ProcessPool("dying-test", kwargs, 4, workers=2) as pool:
        groups = collect(pool, [0, 1], backend, tok, cfg, Sampling(max_new_tokens=2))
        trajs = [t for g in groups for t in g.trajectories]
        lost = [j for j, t in enumerate(trajs) if t.lost]
        # One worker died: the episodes it held (one per group: env j lives on worker j % 2)
        # are lost, in flight or not; the other worker's play on.
        assert len(lost) == 2 and lost[0] % 2 == lost[1] % 2 and lost[0] < 2 <= lost[1]
        for j in lost:
            last = trajs[j].steps[-1]
            assert last.truncated and last.reward == 0.0 and not trajs[j].won
        assert all(trajs[j].won for j in range(4) if j not in lost)
        assert StepBatch.from_groups(groups).traj_lost.tolist() == [j in lost for j in range(4)]
        assert pool.restarts == 1
        # The next batch plays normally on the replacement worker.
        again = collect(pool, [2, 3], backend, tok, cfg, Sampling(max_new_tokens=2))
        assert all(t.won for g in again for t in g.trajectories)


def test_process_pool_submit_poll_matches_step_and_loses_a_dead_workers_episodes():
    moves = ["up", "left", "bogus", "down"]
    inline = InlinePool([make("sokoban") for _ in moves])
    inline.reset([(j, 5 + j // 2, None) for j in range(4)])
    want = inline.step(list(enumerate(moves)))
    with ProcessPool("sokoban", {}, 4, workers=2) as pool:
        pool.reset([(j, 5 + j // 2, None) for j in range(4)])
        pool.submit(list(enumerate(moves))[:3])
        pool.submit([(3, moves[3])])
        got = {}
        while pool.in_flight():
            got.update(pool.poll(timeout=10))
        assert [got[j] for j in range(4)] == want
        assert pool.poll(timeout=0) == []
    with ProcessPool("crashy", {}, 2, workers=1) as pool:
        pool.reset([(0, 0, None), (1, 1, None)])
        pool.submit([(0, "die")])
        ((j, res),) = pool.poll(timeout=30)
        assert j == 0 and res[3] and "exit code 3" in res[4]["worker_error"]
        # Env 1 shared the dead worker but had no step in flight: its episode is gone too.
        pool.submit([(1, "tick")])
        ((j, res),) = pool.poll(timeout=30)
        assert j == 1 and res[3] and "exit code 3" in res[4]["worker_error"]
        pool.reset([(1, 1, None)])  # a new episode plays normally
        pool.submit([(1, "tick")])
        assert pool.poll(timeout=30)[0][1][0] == "ticks=1"


def test_continuous_collect_accepts_a_plain_backend_and_a_list_of_envs():
    tok = build_tokenizer(CORPUS, 300)
    cfg = replace(RolloutConfig(n_tasks=1, group_size=2), mode="continuous")
    envs = [latency_env.LatencyEnv() for _ in range(2)]
    groups = collect_continuous(
        InlinePool(envs), [7], ScriptedBackend(iter(lambda: "hi", None)), tok, cfg,
        Sampling(max_new_tokens=2),
    )  # fmt: skip
    assert len(groups) == 1 and all(t.won for t in groups[0].trajectories)
