"""The policy model: building and loading it, its vocabulary, prompts and forward passes.

Both stages that use the model import from here, never from each other: rollout generates with
it and re-scores through :mod:`~agentrl.model.forward`; learning trains through the same
forward primitives; credit estimators rescore texts through :mod:`~agentrl.model.scoring`.

- :mod:`~agentrl.model.build`: ``ModelConfig``, the tiny offline model and its tokenizer,
  ``from_pretrained`` loading, Hugging Face checkpoints;
- :mod:`~agentrl.model.vocab`: the vocabulary generation samples from (the pad token banned);
- :mod:`~agentrl.model.prompt`: chat-formatting and tokenizing a prompt;
- :mod:`~agentrl.model.forward`: training samples, packing, teacher-forced logits/log-probs;
- :mod:`~agentrl.model.scoring`: ``PolicyScorer``, the policy as a credit estimator's scorer.
"""

from agentrl.model.build import (
    LoRAConfig,
    ModelConfig,
    build_tiny_model,
    build_tokenizer,
    check_model_source,
    enable_checkpointing,
    load_pretrained,
    prepare_for_training,
    save_model,
)
from agentrl.model.forward import Sample, score_samples, token_logprobs
from agentrl.model.prompt import encode_prompt
from agentrl.model.vocab import BANNED_LOGIT, banned_token_ids, mask_banned

__all__ = [
    "BANNED_LOGIT",
    "LoRAConfig",
    "ModelConfig",
    "Sample",
    "banned_token_ids",
    "build_tiny_model",
    "build_tokenizer",
    "check_model_source",
    "enable_checkpointing",
    "encode_prompt",
    "load_pretrained",
    "mask_banned",
    "prepare_for_training",
    "save_model",
    "score_samples",
    "token_logprobs",
]
