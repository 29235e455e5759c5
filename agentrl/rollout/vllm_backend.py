"""Rollout generation with vLLM (optional ``vllm`` extra, GPU only).

:class:`VLLMBackend` implements the same ``generate(prompts, sampling) -> list[Generation]``
contract as :class:`~agentrl.rollout.HFBackend`: token ids, text and per-token sampling
log-probs. The engine runs in the trainer's process, colocated with the policy on the same GPU
(``gpu_memory_utilization`` bounds its share); after every policy update :meth:`sync` copies
the current weights into the engine (LoRA adapters are merged for the copy) and clears the
prefix cache, so the next rollout samples from the updated policy.

Log-probs: agentrl's convention is log_softmax(logits / temperature) of the raw logits. vLLM is
asked for ``processed_logprobs`` where the installed version supports ``logprobs_mode``; on
older versions it returns raw (temperature-1) log-probs, and ``learner.old_logprobs=recompute``
should be used (the learner then logs the mismatch).

vLLM is imported lazily: nothing here is needed on CPU-only machines.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import torch

from agentrl.rollout import Generation, Sampling


class VLLMBackend:
    """A colocated vLLM engine serving the policy's current weights."""

    def __init__(
        self,
        model_path: str,
        tokenizer,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.4,
        max_model_len: int = 4096,
        seed: int = 0,
    ):
        # The weight copy in sync() needs the model in this process (vLLM v1 otherwise runs
        # the engine core in a separate process).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        self.tokenizer = tokenizer
        kwargs = dict(
            model=str(model_path),
            tokenizer=str(model_path),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
            enable_prefix_caching=True,
        )
        try:
            self.llm = LLM(**kwargs, logprobs_mode="processed_logprobs")
            self.processed_logprobs = True
        except TypeError:  # vLLM without logprobs_mode
            self.llm = LLM(**kwargs)
            self.processed_logprobs = False

    def generate(self, prompts: Sequence[list[int]], sampling: Sampling) -> list[Generation]:
        from vllm import SamplingParams

        try:
            from vllm.inputs import TokensPrompt
        except ImportError:  # pragma: no cover - very old vLLM
            TokensPrompt = dict

        greedy = sampling.temperature == 0
        params = SamplingParams(
            n=1,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=-1 if greedy or sampling.top_k == 0 else sampling.top_k,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop_strings) or None,
            include_stop_str_in_output=True,
            logprobs=0,  # the sampled token's log-prob only
            skip_special_tokens=True,
        )
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False
        )
        gens = []
        for out in outs:
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            logprobs = [float(step[tok].logprob) for tok, step in zip(ids, comp.logprobs or [])]
            gens.append(Generation(token_ids=ids, logprobs=logprobs, text=comp.text))
        return gens

    def _engine_model(self):
        """The engine's ``nn.Module``, found through the executor (its path moved across
        vLLM versions)."""
        executor = self.llm.llm_engine.model_executor
        worker = executor.driver_worker
        for path in ("worker.model_runner.model", "model_runner.model"):
            obj = worker
            try:
                for name in path.split("."):
                    obj = getattr(obj, name)
                return obj
            except AttributeError:
                continue
        raise RuntimeError("cannot reach the vLLM model; set VLLM_ENABLE_V1_MULTIPROCESSING=0")

    @torch.no_grad()
    def sync(self, model) -> None:
        """Copy the policy's current weights into the engine and drop cached prefixes."""
        self._engine_model().load_weights(_hf_weights(model))
        self.llm.reset_prefix_cache()


def _hf_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs in plain Hugging Face naming; LoRA adapters merged in."""
    if hasattr(model, "merge_adapter") and hasattr(model, "peft_config"):
        model.merge_adapter()
        try:
            prefix = "base_model.model."
            for name, tensor in model.state_dict().items():
                if "lora_" in name or "modules_to_save" in name:
                    continue
                name = name.removeprefix(prefix).replace(".base_layer.", ".")
                yield name, tensor
        finally:
            model.unmerge_adapter()
        return
    yield from model.state_dict().items()
