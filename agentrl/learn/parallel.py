"""Data-parallel wrapping of the policy: DDP, FSDP2 (``fully_shard``) or none.

``learner.strategy`` picks how the ranks of a torchrun job share the model:

- ``none``: the plain module (world size 1; also what ``auto`` means there).
- ``ddp``: :class:`torch.nn.parallel.DistributedDataParallel`; every rank holds the whole
  model, gradients are averaged once per optimiser step (micro-batches accumulate under
  ``no_sync``). ``auto`` on CPU (gloo).
- ``fsdp``: FSDP2 — ``fully_shard`` on every decoder layer (the classes the model lists in
  ``_no_split_modules``) and on the root; on CUDA with bf16 parameters and fp32 gradient
  reduction. ``auto`` on GPUs. FSDP2 also runs on gloo (CPU), which the tests use.

Both reducers average gradients over the ranks, so the learner scales each rank's loss by the
world size: with global loss denominators the gradient is then the single-process gradient of
the whole batch. Every forward of an FSDP model is a collective (parameters are all-gathered
per layer), so every rank must run the same number of forwards: the learner pads the ranks'
micro-batch counts with empty passes (:func:`dummy_backward`).
"""

from __future__ import annotations

import contextlib
from typing import Literal

import torch

Strategy = Literal["auto", "none", "ddp", "fsdp"]


def resolve_strategy(strategy: Strategy, world: int, cuda: bool) -> str:
    """The concrete strategy: one process never wraps (``none``, whatever was asked, so a
    config written for a cluster also runs on a laptop); ``auto`` → fsdp (GPU) or ddp (CPU)."""
    if world <= 1:
        return "none"
    if strategy != "auto":
        return strategy
    return "fsdp" if cuda else "ddp"


def _layer_classes(model) -> set[str]:
    names = getattr(model, "_no_split_modules", None) or []
    base = getattr(model, "base_model", None)  # peft: the wrapped transformers model
    inner = getattr(base, "model", None)
    names = list(names) + list(getattr(inner, "_no_split_modules", None) or [])
    return set(names) or {"LlamaDecoderLayer", "Qwen2DecoderLayer"}


def wrap(model, strategy: str, device: torch.device):
    """Wrap ``model`` for ``strategy`` (``none``, ``ddp`` or ``fsdp``); returns the module to
    train with. FSDP shards in place, so the returned object is ``model`` itself."""
    if strategy == "none":
        return model
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        # No buffer broadcast: it is a collective in every forward, and ranks run different
        # numbers of forwards when they score or generate their own samples.
        return DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False)
    if strategy == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = None
        if device.type == "cuda":
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        kwargs = {"mp_policy": mp} if mp is not None else {}
        classes = _layer_classes(model)
        for module in model.modules():
            if type(module).__name__ in classes:
                fully_shard(module, **kwargs)
        fully_shard(model, **kwargs)
        return model
    raise ValueError(f"unknown strategy {strategy!r}")


def unwrap(model):
    """The transformers module inside a DDP wrapper (FSDP2 modules are their own inner)."""
    return getattr(model, "module", model) if _is_ddp(model) else model


def _is_ddp(model) -> bool:
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(model, DistributedDataParallel)


def _is_fsdp(model) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without FSDP2
        return False
    return isinstance(model, FSDPModule)


@contextlib.contextmanager
def gradient_sync(model, enabled: bool):
    """Accumulate gradients locally (``enabled=False``) or reduce them in this backward."""
    if _is_ddp(model) and not enabled:
        with model.no_sync():
            yield
    elif _is_fsdp(model):
        model.set_requires_gradient_sync(enabled)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        yield


def dummy_backward(model, pad_id: int, device: torch.device) -> None:
    """A forward and backward that changes no gradient: keeps a rank with fewer micro-batches
    in step with the others' collectives (FSDP all-gathers, the DDP gradient reduction)."""
    ids = torch.full((1, 1), pad_id, dtype=torch.long, device=device)
    out = model(input_ids=ids)
    (out.logits.float().sum() * 0.0).backward()


def reshard(model) -> None:
    """Shard again the parameters an FSDP2 module left gathered after a forward without
    gradients (no-op for other models).

    FSDP2 leaves the root module's own parameters (embeddings, final norm) unsharded after its
    forward, expecting a backward. After a no-grad pass over the policy (scoring before an
    update: ``old_logprobs=recompute``, a policy loss's ``prepare`` hook) the next training
    step then computed its gradient norm, and clipped, before those parameters had their
    gradients (seen with torch 2.13 on gloo: the norm missed them, the step was under-clipped).
    """
    if _is_fsdp(model):
        model.reshard()


def needs_lockstep(model) -> bool:
    """Whether every forward is a collective (FSDP), so all ranks must run as many."""
    return _is_fsdp(model)


def full_state_dict(model, to_rank0_cpu: bool = True) -> dict[str, torch.Tensor]:
    """The whole model's state dict (a collective under FSDP: call it on every rank).

    ``to_rank0_cpu``: gathered to rank 0 on the CPU only (others get an empty dict), as for
    saving; otherwise every rank gets the full tensors (to refresh a generation copy).
    """
    if _is_fsdp(model):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=to_rank0_cpu)
        return get_model_state_dict(model, options=opts)
    return unwrap(model).state_dict()


def save_optimizer(model, optimizer, path) -> None:
    """Save the optimizer state with ``torch.distributed.checkpoint`` (each rank its shard;
    a collective: every rank calls it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    dcp.save({"optimizer": get_optimizer_state_dict(model, optimizer)}, checkpoint_id=str(path))


def load_optimizer(model, optimizer, path) -> None:
    """Load what :func:`save_optimizer` wrote into ``optimizer`` (same world size)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    dcp.load(state, checkpoint_id=str(path))
    set_optimizer_state_dict(model, optimizer, optim_state_dict=state["optimizer"])
