"""How a prompt text becomes the token ids the policy reads (rollout, scorers and warm starts
alike)."""

from __future__ import annotations


def encode_prompt(tokenizer, text: str, max_tokens: int) -> list[int]:
    """Chat-format ``text`` as a user turn and tokenize it, keeping the last ``max_tokens``."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids[-max_tokens:]
