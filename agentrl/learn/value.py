"""State values from a causal LM: a linear value head over the hidden state at a prompt's end.

A value V(s) of a turn is read where the policy starts to answer: the last layer's hidden state
h ∈ R^H at the prompt's last token (the chat template's assistant header), mapped by a linear
head to a scalar, V(s) = wᵀh + b. Prompts are the rollout's own token ids (left-padded, position
ids from the mask, exactly as generation sees them), so the value of a turn is the value of the
prompt the policy acted on. The supervised warm start (:mod:`agentrl.run.sft`, ``sft.value_coef``)
and learned critics (``algo=gae``) share this module, the PPO value loss and the file format of
a saved head (:data:`VALUE_HEAD_FILE` next to the model's weights).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from agentrl.model.forward import budget_chunks

VALUE_HEAD_FILE = "value_head.safetensors"
"""A value head saved next to a checkpoint's weights: tensors ``weight`` (1, H) and ``bias``
(1,), metadata (e.g. the discount γ of its targets) as JSON under the key ``agentrl``."""


def hidden_size(model) -> int:
    """H: the width of the model's hidden states (its input embeddings)."""
    return int(model.get_input_embeddings().weight.shape[1])


def new_value_head(model) -> torch.nn.Linear:
    """A float32 linear head H → 1 on the model's device, initialised to zero: V ≡ 0 until it
    is trained (a fresh critic neither helps nor misleads the first advantages)."""
    device = next(model.parameters()).device
    head = torch.nn.Linear(hidden_size(model), 1).to(device=device, dtype=torch.float32)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return head


def prompt_hidden(model, prompts: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Last-layer hidden state at the last token of each prompt.

    Args:
        model: a transformers causal LM (or a peft model around one).
        prompts: B token-id lists (non-empty).
        pad_id: the padding token (prompts are left-padded to one width).
    Returns:
        (B, H) float32; differentiable when grad is enabled (the caller chooses).
    """
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        attn[r, width - len(p) :] = 1
    ids, attn = ids.to(device), attn.to(device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=ids,
        attention_mask=attn,
        position_ids=positions,
        output_hidden_states=True,
        logits_to_keep=1,  # only the hidden states are needed: skip the lm-head over the prompt
    )
    return out.hidden_states[-1][:, -1].float()


def token_chunks(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Indices grouped into chunks of at most ``token_budget`` padded tokens (rows × longest),
    similar lengths together; one item longer than the budget forms its own chunk."""
    order = sorted(range(len(lengths)), key=lambda k: lengths[k])
    chunks = budget_chunks([lengths[k] for k in order], token_budget)
    return [[order[i] for i in c] for c in chunks]


@torch.no_grad()
def prompt_values(
    model,
    head: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    pad_id: int,
    token_budget: int = 8192,
) -> np.ndarray:
    """V of each prompt, (B,) float64, in eval mode (restored after) and micro-batches of at
    most ``token_budget`` padded tokens, so a value does not depend on its batch-mates."""
    out = np.zeros(len(prompts), dtype=np.float64)
    was_training = model.training
    model.eval()
    try:
        for chunk in token_chunks([len(p) for p in prompts], token_budget):
            h = prompt_hidden(model, [prompts[i] for i in chunk], pad_id)
            out[chunk] = head(h).squeeze(-1).double().cpu().numpy()
    finally:
        model.train(was_training)
    return out


def clipped_value_loss(
    value: torch.Tensor, old_value: torch.Tensor, target: torch.Tensor, clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss per element.

    ℓ = ½ · max((v − R)², (v_clip − R)²) with v_clip = v_old + clip(v − v_old, −ε, ε): the value
    may not gain by moving more than ε from the value the targets were computed with. ε = 0
    turns clipping off (ℓ = ½ (v − R)²).

    Args:
        value: (B,) v, the current prediction (differentiable).
        old_value: (B,) v_old, the prediction when the targets were made.
        target: (B,) R, the targets (e.g. GAE returns A + v_old).
        clip: ε ≥ 0.
    Returns:
        (loss (B,), clipped (B,) bool — the clipped term was strictly the larger one).
    """
    unclipped = (value - target) ** 2
    if clip <= 0:
        return 0.5 * unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    v_clip = old_value + (value - old_value).clamp(-clip, clip)
    clipped = (v_clip - target) ** 2
    return 0.5 * torch.maximum(unclipped, clipped), clipped > unclipped


def explained_variance(pred: np.ndarray, target: np.ndarray) -> float:
    """1 − Var(R − V) / Var(R) (1 = perfect, 0 = no better than a constant); 0 when R is
    constant."""
    var = float(np.var(target))
    return 0.0 if var == 0 else 1.0 - float(np.var(target - pred)) / var


def save_value_head(
    head: torch.nn.Module, path: str | Path, metadata: Mapping[str, object]
) -> None:
    """Write ``head``'s weights to ``path/VALUE_HEAD_FILE`` with ``metadata`` (JSON-able)."""
    from safetensors.torch import save_file

    state = {k: v.detach().float().cpu().contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(Path(path) / VALUE_HEAD_FILE), {"agentrl": json.dumps(dict(metadata))})


def load_value_head(path: str | Path) -> tuple[dict[str, torch.Tensor], dict] | None:
    """``(state_dict, metadata)`` of the head saved in folder ``path``; None when it has none."""
    from safetensors import safe_open

    file = Path(path) / VALUE_HEAD_FILE
    if not file.is_file():
        return None
    with safe_open(str(file), framework="pt") as fh:
        meta = json.loads((fh.metadata() or {}).get("agentrl", "{}"))
        state = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - not a dict
    return state, meta
