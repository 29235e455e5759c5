"""The vLLM backend's plumbing, without vLLM: a stand-in ``vllm`` module records what the backend
asks of the engine (version gate, CPU defaults, sleep/wake around the update, LoRA slots), and
the merged LoRA weights are checked against peft. The real engine is tested in test_vllm.py."""

from __future__ import annotations

import copy
import logging
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from agentrl.configuration import ConfigError
from agentrl.model import (
    LoRAConfig,
    ModelConfig,
    build_tiny_model,
    build_tokenizer,
    prepare_for_training,
)
from agentrl.rollout import RolloutConfig, Sampling
from agentrl.rollout.vllm_backend import (
    VLLM_MIN_TEMPERATURE,
    VLLMBackend,
    _hf_weights,
    lora_rank_slot,
    quiet_vllm,
    truncates,
    weight_sync_path,
)

VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # vLLM 0.32 CPU attention


class FakeLLM:
    """Records the engine calls; generates token 7 with log-prob -0.5 for every prompt."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls: list[tuple] = []

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up",))

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        names = [name for name, _ in kwargs["weights_iterator"]]
        self.calls.append((method, kwargs["is_checkpoint_format"], len(names)))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))

    def generate(self, inputs, params, use_tqdm=False, lora_request=None):
        self.calls.append(("generate", [len(i["prompt_token_ids"]) for i in inputs]))
        step = {7: SimpleNamespace(logprob=-0.5)}
        comp = SimpleNamespace(token_ids=[7], logprobs=[step], text="x")
        return [SimpleNamespace(outputs=[comp]) for _ in inputs]


@pytest.fixture
def fake_vllm(monkeypatch):
    """Install a stand-in ``vllm``; returns its platform (set ``cpu``/``sleep`` per test)."""
    platform = SimpleNamespace(cpu=False, sleep=True)
    vllm = types.ModuleType("vllm")
    vllm.__version__ = "0.32.0"
    vllm.LLM = FakeLLM
    vllm.SamplingParams = lambda **kw: kw
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(
        is_cpu=lambda: platform.cpu, is_sleep_mode_available=lambda: platform.sleep
    )
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    for name, mod in (("vllm", vllm), ("vllm.platforms", platforms), ("vllm.inputs", inputs)):
        monkeypatch.setitem(sys.modules, name, mod)
    platform.module = vllm
    return platform


@pytest.fixture(scope="module")
def tiny():
    tok = build_tokenizer(["push the box up down left right"] * 40, 400)
    torch.manual_seed(0)
    return tok, build_tiny_model(ModelConfig(), tok)


def test_default_tiny_model_has_a_head_size_vllm_supports_on_cpu():
    cfg = ModelConfig()
    assert cfg.hidden_size // cfg.num_heads in VLLM_CPU_HEAD_SIZES


def test_version_gate_names_the_supported_versions():
    assert weight_sync_path("0.32.0+cpu", on_cpu=True) == "reload"
    assert weight_sync_path("0.16.0rc1", on_cpu=True) == "reload"
    assert weight_sync_path("0.15.1", on_cpu=False) == "load_weights"  # GPU fallback
    with pytest.raises(RuntimeError, match=r"vLLM >= 0\.16 \(tested with vllm-cpu 0\.32\.0\)"):
        weight_sync_path("0.15.1", on_cpu=True)


def test_lora_rank_slots_and_truncation():
    assert [lora_rank_slot(r) for r in (1, 2, 8, 9, 64, 300)] == [1, 8, 8, 16, 64, 320]
    with pytest.raises(ValueError, match="512"):
        lora_rank_slot(513)
    assert not truncates(Sampling(4, temperature=0.0, top_p=0.5, top_k=3))  # greedy
    assert not truncates(Sampling(4, temperature=0.7))
    assert truncates(Sampling(4, temperature=0.7, top_p=0.9))
    assert truncates(Sampling(4, temperature=0.7, top_k=5))


def test_gpu_sleep_mode_frees_the_engine_for_the_update_and_sync_wakes_it(fake_vllm, tiny):
    tok, model = tiny
    vl = VLLMBackend("ckpt", tok)
    llm = vl.llm
    assert llm.kwargs["enable_sleep_mode"] and "enforce_eager" not in llm.kwargs
    assert "kv_cache_memory_bytes" not in llm.kwargs  # on a GPU: the memory fraction
    vl.sleep()
    vl.sleep()  # idempotent
    vl.sync(model)
    n = len(model.state_dict())
    assert llm.calls == [
        ("sleep", 1),
        ("wake_up",),
        ("reload_weights", True, n),
        ("reset_prefix_cache",),
    ]
    vl.sleep()
    llm.calls.clear()
    vl.generate([[1, 2, 3]], Sampling(4, temperature=0.0))
    assert llm.calls == [("wake_up",), ("generate", [3])]


def test_cpu_engine_defaults_and_no_sleep(fake_vllm, tiny):
    tok, _ = tiny
    fake_vllm.cpu, fake_vllm.sleep = True, False
    vl = VLLMBackend("ckpt", tok, max_model_len=10)
    assert vl.llm.kwargs["enforce_eager"] is True
    assert vl.llm.kwargs["kv_cache_memory_bytes"] == 2**30
    assert "enable_sleep_mode" not in vl.llm.kwargs
    vl.sleep()
    assert vl.llm.calls == []
    # A prompt longer than the engine takes keeps its end (room for the response).
    gen = vl.generate([list(range(20))], Sampling(4, temperature=0.0))
    assert vl.llm.calls == [("generate", [6])]
    assert (gen[0].token_ids, gen[0].logprobs) == ([7], [-0.5])
    with pytest.raises(ValueError, match="vllm_sleep=on"):
        VLLMBackend("ckpt", tok, sleep="on")


def test_old_vllm_is_refused_on_cpu_and_loads_through_apply_model_on_gpu(fake_vllm, tiny):
    tok, model = tiny
    fake_vllm.module.__version__ = "0.15.1"
    fake_vllm.cpu = True
    with pytest.raises(RuntimeError, match=r"supports vLLM >= 0\.16.*0\.15\.1 is installed"):
        VLLMBackend("ckpt", tok)
    fake_vllm.cpu = False
    loaded = []
    fake_vllm.module.LLM = type(
        "OldLLM",
        (FakeLLM,),
        {
            "apply_model": lambda self, fn: [
                fn(SimpleNamespace(load_weights=lambda w: loaded.extend(name for name, _ in w)))
            ]
        },
    )
    vl = VLLMBackend("ckpt", tok, sleep="off")
    vl.sync(model)
    assert loaded == list(model.state_dict())


def test_lora_weights_for_the_engine_match_peft_merge_and_leave_the_model_untouched(tiny):
    _, base = tiny
    cfg = ModelConfig(lora=LoRAConfig(r=8))
    model = prepare_for_training(copy.deepcopy(base), cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    merged = dict(_hf_weights(model, merge=True))
    reference = copy.deepcopy(model).merge_and_unload().state_dict()
    assert merged.keys() == reference.keys()
    for name, tensor in reference.items():
        torch.testing.assert_close(merged[name], tensor, rtol=0, atol=1e-6)
    unmerged = dict(_hf_weights(model, merge=False))
    for name, tensor in base.state_dict().items():
        assert torch.equal(unmerged[name], tensor)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), f"{name} changed"


def test_rollout_config_checks_the_vllm_settings():
    assert RolloutConfig(vllm_kv_cache_gb=0.5, vllm_lora_sync="adapter").vllm_kv_cache_gb == 0.5
    with pytest.raises(ConfigError, match="vllm_kv_cache_gb"):
        RolloutConfig(vllm_kv_cache_gb=0.0)
    with pytest.raises(ConfigError, match="vllm_max_model_len"):  # no room for a response
        RolloutConfig(vllm_max_model_len=8, max_new_tokens=8)


def test_adapter_sync_needs_an_engine_with_lora(fake_vllm, tiny):
    tok, base = tiny
    model = prepare_for_training(copy.deepcopy(base), ModelConfig(lora=LoRAConfig(r=8)))
    vl = VLLMBackend("ckpt", tok, lora_sync="adapter", sleep="off")  # lora_rank=0
    assert "enable_lora" not in vl.llm.kwargs
    with pytest.raises(ValueError, match="lora_rank"):
        vl.sync(model)
    vl = VLLMBackend("ckpt", tok, lora_rank=9, lora_sync="merged", sleep="off")
    assert "enable_lora" not in vl.llm.kwargs  # merged sync needs no LoRA in the engine


@pytest.mark.slow
def test_trainer_puts_the_backend_to_sleep_for_the_update_and_syncs_after(tmp_path, monkeypatch):
    from agentrl.learn.learner import Learner
    from agentrl.run import compose, trainer

    calls: list[str] = []
    make_backend, update = trainer.make_backend, Learner.update

    class Recorder:
        def __init__(self, inner):
            self.inner = inner

        def generate(self, prompts, sampling):
            calls.append("generate")
            return self.inner.generate(prompts, sampling)

        def sleep(self):
            calls.append("sleep")

        def sync(self, model):
            calls.append("sync")

    def recording_update(self, samples, rng):
        calls.append("update")
        return update(self, samples, rng)

    monkeypatch.setattr(trainer, "make_backend", lambda *a: Recorder(make_backend(*a)))
    monkeypatch.setattr(Learner, "update", recording_update)
    cfg = compose(
        [
            "trainer.steps=1",
            "trainer.eval_every=0",
            "trainer.progress=false",
            "model.tokenizer_episodes=2",
            "rollout.n_tasks=1",
            "rollout.group_size=2",
        ]
    )
    trainer.train(cfg, tmp_path)
    assert calls[-3:] == ["sleep", "update", "sync"] and set(calls[:-3]) == {"generate"}


def test_rescoring_only_where_vllm_logprobs_are_not_the_convention(fake_vllm, tiny):
    """Processed log-probs (after the pad's -100 bias and the temperature) are the masked
    convention at every temperature vLLM takes (0 to 2); truncation, a temperature vLLM raises to
    its minimum, or a vLLM without logprobs_mode (raw log-probs, pad in the normaliser) need
    re-scoring."""
    tok, _ = tiny
    assert tok.pad_token_id != tok.eos_token_id  # the tiny tokenizer bans its pad
    vl = VLLMBackend("ckpt", tok, sleep="off")
    assert vl.llm.kwargs["logprobs_mode"] == "processed_logprobs" and vl.processed_logprobs
    for t in (0.0, VLLM_MIN_TEMPERATURE, 0.7, 1.0, 1.3, 2.0):
        assert not vl.needs_rescoring(Sampling(4, temperature=t))
    assert vl.needs_rescoring(Sampling(4, temperature=0.7, top_p=0.9))
    assert vl.needs_rescoring(Sampling(4, temperature=VLLM_MIN_TEMPERATURE / 2))
    with pytest.raises(ValueError, match="policy"):  # no policy to re-score with
        vl.generate([[1, 2]], Sampling(4, temperature=0.7, top_k=5))
    assert vl.generate([[1, 2]], Sampling(4, temperature=0.7))[0].logprobs == [-0.5]
    unbanned = copy.deepcopy(tok)
    unbanned.pad_token = unbanned.eos_token
    vl = VLLMBackend("ckpt", unbanned, sleep="off")
    assert not vl.needs_rescoring(Sampling(4, temperature=1.7))
    vl.processed_logprobs = False  # as on a vLLM without logprobs_mode
    assert [vl.needs_rescoring(Sampling(4, temperature=t)) for t in (0.0, 1.0, 0.7)] == [
        False,
        False,
        True,
    ]
    vl = VLLMBackend("ckpt", tok, sleep="off")
    vl.processed_logprobs = False
    assert vl.needs_rescoring(Sampling(4, temperature=1.0))  # raw: pad in the normaliser


def test_quiet_vllm_drops_only_the_expected_messages():
    """The rotary embedding's "Failed to load weights" is dropped (it has no checkpoint weight);
    the same message for any other layer, and anything outside the block, still shows."""
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logger = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    seed_logger = logging.getLogger("vllm.engine.arg_utils")
    handler = Keep(logging.WARNING)
    # Another library's logging set-up earlier in the session (a dictConfig that disables the
    # loggers existing then, or a raised level) must not silence what this test listens to.
    saved = [(lg.disabled, lg.level) for lg in (logger, seed_logger)]
    for lg in (logger, seed_logger):
        lg.addHandler(handler)
        lg.disabled = False
        lg.setLevel(logging.WARNING)
    try:
        with quiet_vllm():
            for layer in ("RotaryEmbedding", "Llama3RotaryEmbedding", "QKVParallelLinear"):
                logger.warning("%s: Failed to load weights", layer)
            seed_logger.warning("The global random seed is set to %d. ...", 0)
            seed_logger.warning("something else")
        logger.warning("%s: Failed to load weights", "RotaryEmbedding")
    finally:
        for lg, (disabled, level) in zip((logger, seed_logger), saved):
            lg.removeHandler(handler)
            lg.disabled = disabled
            lg.setLevel(level)
    assert seen == [
        "QKVParallelLinear: Failed to load weights",
        "something else",
        "RotaryEmbedding: Failed to load weights",
    ]
    assert not logger.filters and not seed_logger.filters
