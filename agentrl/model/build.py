"""Policy models and tokenizers: a tiny model built offline, or any HF causal LM by name.

``model=tiny`` (the default) builds a small Llama- or Qwen2-architecture causal LM from a config
and a byte-level BPE tokenizer trained locally on text from the environment being trained
(prompts of random episodes), so tests and the default job need no model hub. Setting
``model.name_or_path`` (a hub id or a local directory) loads any causal LM and its tokenizer with
``from_pretrained`` instead; checkpoints saved by agentrl load the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

from agentrl.configuration import ConfigError, check

PAD, EOS = "<|pad|>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
# A chat template in the usual shape, so tiny and real models share one prompt path.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class LoRAConfig:
    """Low-rank adapters via peft; ``r = 0`` trains the full model."""

    r: int = 0
    """Adapter rank; 0 disables LoRA."""
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: str = "all-linear"
    """peft target modules: ``all-linear`` or a comma-separated list of module names."""
    save: Literal["merged", "adapter"] = "merged"
    """Checkpoints hold the merged model (loadable by transformers/vLLM as is) or the adapter
    (a resumable adapter is always saved alongside, under ``adapter/``)."""

    def __post_init__(self) -> None:
        check(self.r >= 0, "model.lora.r", self.r, ">= 0")
        check(self.alpha > 0, "model.lora.alpha", self.alpha, "> 0")
        check(0 <= self.dropout < 1, "model.lora.dropout", self.dropout, "in [0, 1)")


@dataclass(frozen=True)
class ModelConfig:
    """Which policy model to use; the ``tiny_*`` fields only apply when building one."""

    name_or_path: str | None = None
    """Hub id or local directory to load with ``from_pretrained``; None builds the tiny model."""
    arch: Literal["llama", "qwen2"] = "llama"
    """Architecture of the tiny model. Llama is the default because ``AutoTokenizer`` loads a
    saved Llama checkpoint with its own (generic) tokenizer, whereas for ``qwen2`` checkpoints
    transformers substitutes ``Qwen2Tokenizer``, whose digit splitting changes the tiny
    tokenizer's output (so reloading a qwen2 tiny checkpoint elsewhere would re-tokenize)."""
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    """Head size = hidden_size / num_heads: 32 by default, a size vLLM's CPU attention supports
    (it rejects 16), so ``rollout.backend=vllm`` runs the tiny model on CPU too."""
    num_kv_heads: int = 1
    intermediate_size: int = 256
    max_positions: int = 4096
    vocab_size: int = 768
    """Target vocabulary of the locally trained BPE tokenizer (special tokens included)."""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """Parameter dtype; bfloat16 is for GPUs."""
    trust_remote_code: bool = False
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, more compute)."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    tokenizer_episodes: int = 32
    """Random episodes whose prompts train the tiny model's tokenizer."""

    def __post_init__(self) -> None:
        check(
            self.hidden_size % self.num_heads == 0,
            "model.hidden_size",
            self.hidden_size,
            f"divisible by model.num_heads={self.num_heads}",
        )
        check(
            self.num_heads % self.num_kv_heads == 0,
            "model.num_kv_heads",
            self.num_kv_heads,
            f"a divisor of model.num_heads={self.num_heads}",
        )
        check(
            self.vocab_size >= 300,
            "model.vocab_size",
            self.vocab_size,
            ">= 300 (256 byte symbols plus merges and special tokens)",
        )
        for name in (
            "hidden_size",
            "num_layers",
            "intermediate_size",
            "max_positions",
            "tokenizer_episodes",
        ):
            check(getattr(self, name) > 0, f"model.{name}", getattr(self, name), "positive")


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 768) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``corpus`` (deterministic for the same corpus).

    Byte-level means any text, including malformed model output, round-trips without unknown
    tokens. The result has pad/EOS/role special tokens and :data:`CHAT_TEMPLATE`.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS)
    fast.padding_side = "left"
    fast.chat_template = CHAT_TEMPLATE
    return fast


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_tiny_model(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """A randomly initialised small causal LM sized to ``tokenizer`` (seed torch beforehand)."""
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    config = Qwen2Config(**common) if cfg.arch == "qwen2" else LlamaConfig(**common)
    model = AutoModelForCausalLM.from_config(config)
    if cfg.dtype in _DTYPES:
        model = model.to(_DTYPES[cfg.dtype])
    return model


def check_model_source(name_or_path: str) -> None:
    """Fail early, with agentrl's message, when ``name_or_path`` is a local path that is not
    there (transformers would instead try it as a hub repo id and fail with a repo-id error).

    A value that starts like a path (``/``, ``./``, ``../``, ``~``) or names an existing file
    must be a directory holding ``config.json``; anything else is taken as a hub id.
    """
    import os

    expanded = os.path.expanduser(name_or_path)
    looks_local = name_or_path.startswith(("/", "./", "../", "~")) or os.path.exists(expanded)
    if looks_local and not os.path.isfile(os.path.join(expanded, "config.json")):
        what = "is not a directory" if not os.path.isdir(expanded) else "has no config.json"
        raise ConfigError(
            f"model.name_or_path={name_or_path!r} {what}: give the folder of a Hugging Face "
            "checkpoint (config.json, weights, tokenizer files), e.g. an agentrl checkpoint "
            "<out_dir>/checkpoints/iter-NNNNNN, or a hub id such as Qwen/Qwen2.5-1.5B-Instruct."
        )


def load_pretrained(
    cfg: ModelConfig, path: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load model and tokenizer with ``from_pretrained`` from ``path`` or ``cfg.name_or_path``.

    Raises :class:`~agentrl.configuration.ConfigError` naming ``model.name_or_path`` when the
    source is neither a checkpoint folder nor a loadable hub id (offline machines included).
    """
    source = path or cfg.name_or_path
    if source is None:
        raise ValueError("load_pretrained needs model.name_or_path or a checkpoint path")
    check_model_source(source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=cfg.trust_remote_code)
    except (OSError, ValueError) as exc:  # HF's repo-id validation errors are ValueErrors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"model.name_or_path={source!r} could not be loaded: it is not a local checkpoint "
            f"folder and not a hub id this machine can fetch ({first}). Give the folder of a "
            "Hugging Face checkpoint, or a hub id on a machine with access to the hub."
        ) from exc
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = "auto" if cfg.dtype == "auto" else _DTYPES[cfg.dtype]
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=dtype, trust_remote_code=cfg.trust_remote_code
    )
    return model, tokenizer


def enable_checkpointing(model) -> None:
    """Recompute activations in backward (transformers ≥ 5 names it activation checkpointing)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False


def prepare_for_training(model: PreTrainedModel, cfg: ModelConfig) -> PreTrainedModel:
    """Apply gradient checkpointing and LoRA adapters as configured; returns the model to train."""
    if cfg.gradient_checkpointing:
        enable_checkpointing(model)
    if cfg.lora.r > 0:
        from peft import LoraConfig, get_peft_model

        targets = cfg.lora.target_modules
        lora = LoraConfig(
            r=cfg.lora.r,
            lora_alpha=cfg.lora.alpha,
            lora_dropout=cfg.lora.dropout,
            target_modules=targets if targets == "all-linear" else targets.split(","),
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
    return model


def save_model(model: PreTrainedModel, tokenizer, path, cfg: ModelConfig) -> None:
    """Save in Hugging Face format: the full (LoRA-merged) model, or the adapter only.

    With LoRA the adapter is also written to ``path/adapter`` so that a run can resume.
    """
    from pathlib import Path

    path = Path(path)
    tokenizer.save_pretrained(path)
    if cfg.lora.r > 0:
        model.save_pretrained(path / "adapter")
        if cfg.lora.save == "adapter":
            model.save_pretrained(path)
            return
        # Merge into a copy so that training continues with separate adapters.
        import copy

        merged = copy.deepcopy(model).merge_and_unload()
        merged.save_pretrained(path)
        return
    model.save_pretrained(path)
