"""The PPO-style learner: policy-loss updates over the response tokens of a batch.

One training sample is one environment step: the prompt the policy saw and the response it
generated, with the step's advantage broadcast to every response token. Per mini-batch the loss
is the registered policy loss ``learner.loss`` (:mod:`agentrl.learn.policy_loss`; by default
``ppo``, the clipped surrogate: asymmetric clip ε_low/ε_high, dual clip ``c`` for negative
advantages, token- or step-level ratio, aggregated by ``learner.loss_agg``), after the
``learner.token_weights`` transforms, plus ``kl_coef``·KL to a frozen reference and minus
``entropy_coef``·entropy (pieces in :mod:`agentrl.learn.losses`; docs/methods.md#policy-losses).
Mini-batches (``learner.batching``: random, query-preserved or reward-balanced) are split into
micro-batches by a token budget; each micro-batch's loss is normalised by the *mini-batch's*
token/sequence counts, so gradient accumulation gives exactly the mini-batch gradient. Old log-probs
come from the sampler or are recomputed by the trainer (``learner.old_logprobs``); the mismatch
between the two is logged when recomputing. With ``learner.grad_cosine`` the micro-batches of a
mini-batch run in two halves and the gradients of the halves are compared (``diag/grad_cos``,
``diag/grad_snr``; :func:`gradient_halves`), from the gradients computed anyway.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

import numpy as np
import torch

from agentrl.configuration import ConfigError, check, check_choice
from agentrl.learn import parallel
from agentrl.learn.gradients import gradient_agreement, gradient_halves, half_gradient_stats
from agentrl.learn.losses import (
    KLType,
    LossAgg,
    RatioLevel,
    aggregate_loss,
    entropy_from_logits,
    kl_penalty,
)
from agentrl.learn.policy_loss import (
    Aggregator,
    LossInputs,
    get_policy_loss,
    get_token_weight,
    policy_loss_config,
    split_token_weight_args,
    token_weight_config,
)
from agentrl.model.forward import (
    Alone,
    Reducer,
    Sample,
    dummy_forward,
    forward_chunk,
    logprobs_from_logits,
    map_samples,
    micro_batches,
    score_samples,
)

log = logging.getLogger("agentrl")

Batching = Literal["random", "query_preserved", "reward_balanced"]

__all__ = ["Learner", "LearnerConfig", "NonFiniteLossError"]


@dataclass(frozen=True)
class LearnerConfig:
    """Optimiser and loss settings of the policy update."""

    lr: float = 1e-3
    """AdamW learning rate (1e-3 suits the tiny model; real models use ~1e-6)."""
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    """Decay after warm-up, over ``trainer.steps`` iterations (one scheduler step each)."""
    warmup_iters: int = 0
    """Iterations of linear warm-up from 0 to ``lr``."""
    min_lr_ratio: float = 0.0
    """Floor of the cosine/linear decay as a fraction of ``lr``."""
    clip_low: float = 0.2
    """ε_low: ratio floor is 1 − clip_low."""
    clip_high: float = 0.2
    """ε_high: ratio ceiling is 1 + clip_high (0.28 = DAPO clip-higher)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound for negative advantages (must be > 1)."""
    ratio_level: RatioLevel = "token"
    """``token``: PPO's per-token ratio; ``step``: one length-normalised ratio per response
    (GSPO-style; GAGPO's action-level ratio — use small clips, e.g. 3e-4/4e-4)."""
    loss_agg: LossAgg = "token-mean"
    """How token losses are aggregated (see :func:`agentrl.learn.losses.aggregate_loss`)."""
    loss_scale: int = 0
    """Divisor of ``seq-mean-token-sum-norm``; 0 = ``rollout.max_new_tokens``."""
    kl_coef: float = 0.0
    """Weight of KL(π‖π_ref) in the loss; 0 = no reference model at all."""
    kl_type: KLType = "k3"
    """KL estimator: k1, k2, k3 (low-variance, clamped as verl) or abs."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (verl-agent uses 0.001)."""
    ppo_epochs: int = 1
    """Passes over the batch per iteration."""
    mini_batch_steps: int = 0
    """Steps per optimiser step; 0 = the whole batch in one mini-batch."""
    batching: Batching = "random"
    """How a batch is split into mini-batches (:func:`mini_batches`; docs/methods.md#batching):
    ``random``; ``query_preserved`` keeps all steps of a group in the same mini-batch;
    ``reward_balanced`` gives every mini-batch the batch's share of positive- and
    negative-advantage steps. Irrelevant with one mini-batch (``mini_batch_steps=0``)."""
    loss: str = "ppo"
    """Policy loss, by registered name (:mod:`agentrl.learn.policy_loss`): ``ppo`` (the
    clipped surrogate configured by the fields above), ``cispo``, ``klpo``, ``bpo``,
    ``vimpo``, or a third-party one."""
    loss_args: dict[str, Any] | None = None
    """Options of the loss, checked against its config dataclass, e.g.
    ``learner.loss_args={beta: 0.1, m: 16}`` (None: the paper's defaults). None rather than
    an empty mapping in the schema, so that Hydra accepts the whole mapping as an override."""
    token_weights: tuple[str, ...] = ()
    """Token-weight transforms applied in order before the loss, e.g. ``[taco, ntf]``."""
    token_weight_args: dict[str, Any] | None = None
    """Their options as ``<transform>_<field>``, e.g. ``{taco_alpha: 0.02, ntf_threshold:
    0.9}`` (flat, so the config stays two levels deep)."""
    micro_batch_tokens: int = 8192
    """Token budget of one forward/backward pass (gradient accumulation within a mini-batch)."""
    share_prompts: bool = True
    """Process a prompt shared by several samples of a micro-batch once (responses packed
    after it under a block attention mask); same result, less compute."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables."""
    old_logprobs: Literal["sampler", "recompute"] = "sampler"
    """Behaviour log-probs: as recorded by the sampler, or recomputed by the trainer before
    the update (then ``loss/old_logp_mismatch`` logs the difference)."""
    strategy: Literal["auto", "none", "ddp", "fsdp"] = "auto"
    """How the ranks of a torchrun job share the model (:mod:`agentrl.learn.parallel`):
    ``auto`` = none with one process, FSDP2 on GPUs, DDP on CPUs."""
    max_nonfinite_skips: int = 3
    """An optimiser step whose loss or gradient norm is not finite is skipped (and counted in
    ``loss/skipped_steps``); this many skips in a row stop the run with an error."""
    grad_cosine: bool = True
    """Log ``diag/grad_cos`` and ``diag/grad_snr``, the agreement of the gradients of two halves
    of each mini-batch (see :func:`gradient_halves`, :func:`half_gradient_stats`). No second
    backward: the gradient after the first half is kept (one copy of the gradient in memory)
    and compared with the rest; under torchrun the first half is reduced over the ranks too
    (one more gradient reduction per optimiser step), so the figures are global."""

    def __post_init__(self) -> None:
        check(math.isfinite(self.lr) and self.lr > 0, "learner.lr", self.lr, "finite and > 0")
        check(self.weight_decay >= 0, "learner.weight_decay", self.weight_decay, ">= 0")
        check(self.warmup_iters >= 0, "learner.warmup_iters", self.warmup_iters, ">= 0")
        check(0 <= self.min_lr_ratio <= 1, "learner.min_lr_ratio", self.min_lr_ratio, "in [0, 1]")
        check(self.clip_low > 0, "learner.clip_low", self.clip_low, "> 0")
        check(self.clip_low < 1, "learner.clip_low", self.clip_low, "< 1")
        check(self.clip_high > 0, "learner.clip_high", self.clip_high, "> 0")
        check(self.clip_ratio_c > 1, "learner.clip_ratio_c", self.clip_ratio_c, "> 1")
        check(self.loss_scale >= 0, "learner.loss_scale", self.loss_scale, ">= 0")
        check(self.kl_coef >= 0, "learner.kl_coef", self.kl_coef, ">= 0")
        check(self.entropy_coef >= 0, "learner.entropy_coef", self.entropy_coef, ">= 0")
        check(self.ppo_epochs >= 1, "learner.ppo_epochs", self.ppo_epochs, ">= 1")
        check(self.mini_batch_steps >= 0, "learner.mini_batch_steps", self.mini_batch_steps, ">= 0")
        check(
            self.micro_batch_tokens >= 1,
            "learner.micro_batch_tokens",
            self.micro_batch_tokens,
            ">= 1",
        )
        check(self.max_grad_norm >= 0, "learner.max_grad_norm", self.max_grad_norm, ">= 0")
        check(
            self.max_nonfinite_skips >= 1,
            "learner.max_nonfinite_skips",
            self.max_nonfinite_skips,
            ">= 1",
        )
        check_choice("learner.batching", self.batching, get_args(Batching))
        # Names and options of the loss and token weights are checked here, at start-up.
        for key in ("loss_args", "token_weight_args"):
            value = getattr(self, key)
            check(value is None or isinstance(value, Mapping), f"learner.{key}", value, "a mapping")
        policy_loss_config(self.loss, self.loss_args)
        if len(set(self.token_weights)) < len(self.token_weights):
            raise ConfigError(
                f"learner.token_weights={list(self.token_weights)} lists a transform twice"
            )
        split = split_token_weight_args(self.token_weights, self.token_weight_args or {})
        for name in self.token_weights:
            token_weight_config(name, split[name])


def mini_batches(
    samples: Sequence[Sample],
    size: int,
    rng: np.random.Generator,
    batching: Batching = "random",
) -> list[list[Sample]]:
    """Shuffle ``samples`` into mini-batches of about ``size`` steps (docs/methods.md#batching).

    ``batching``:

    - ``random``: a random permutation cut into consecutive mini-batches of ``size``.
    - ``query_preserved``: whole groups are shuffled and packed, so every step of a group
      lands in the same mini-batch (a mini-batch may then exceed ``size`` by one group).
    - ``reward_balanced``: k = ⌈N/size⌉ mini-batches; the positive-, negative- and
      zero-advantage steps are each shuffled and dealt round-robin over the mini-batches
      (continuing where the previous sign stopped), so every mini-batch holds the batch's share
      of each sign (±1) and sizes differ by at most one. The paper balances positive and
      negative *rollouts*; a sample here is one environment step, balanced by the sign of its
      advantage (for episode-level estimators, the rollout's sign).
    """
    mode = batching
    if mode == "reward_balanced":
        k = max(1, math.ceil(len(samples) / size))
        out: list[list[Sample]] = [[] for _ in range(k)]
        dealt = 0
        for sign in (1, -1, 0):
            part = [s for s in samples if np.sign(s.advantage) == sign]
            for i in rng.permutation(len(part)):
                out[dealt % k].append(part[i])
                dealt += 1
        return [m for m in out if m]
    if mode == "random":
        order = rng.permutation(len(samples))
        return [[samples[i] for i in order[k : k + size]] for k in range(0, len(samples), size)]
    groups: dict[int, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    keys = list(groups)
    out = [[]]
    for k in rng.permutation(len(keys)):
        if out[-1] and len(out[-1]) + len(groups[keys[k]]) > size:
            out.append([])
        out[-1].extend(groups[keys[k]])
    return out


def lr_lambda(cfg: LearnerConfig, total_iters: int):
    """The multiplier of ``lr`` at iteration i: linear warm-up, then constant/cosine/linear."""

    def fn(i: int) -> float:
        if cfg.warmup_iters and i < cfg.warmup_iters:
            return (i + 1) / cfg.warmup_iters
        if cfg.lr_schedule == "constant":
            return 1.0
        span = max(total_iters - cfg.warmup_iters, 1)
        frac = min(max(i - cfg.warmup_iters, 0) / span, 1.0)
        if cfg.lr_schedule == "cosine":
            decay = 0.5 * (1.0 + math.cos(math.pi * frac))
        else:
            decay = 1.0 - frac
        return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * decay

    return fn


class NonFiniteLossError(RuntimeError):
    """Too many optimiser steps in a row had a non-finite loss or gradient norm."""


class Learner:
    """Owns the optimiser, the LR schedule and the reference model; runs the PPO update."""

    def __init__(
        self,
        model,
        cfg: LearnerConfig,
        pad_id: int,
        temperature: float = 1.0,
        total_iters: int = 1,
        max_response_tokens: int = 1,
        dist: Reducer | None = None,
        banned_ids: Sequence[int] = (),
    ):
        """``model`` is the plain transformers (or peft) module; with ``dist`` of world size
        > 1 the learner wraps it for ``cfg.strategy`` (DDP or FSDP2) and :attr:`model` is the
        wrapped module, :attr:`module` the transformers one (for saving and generation).
        ``banned_ids``: the token ids the sampler never emits
        (:func:`agentrl.model.banned_token_ids`); the learner normalises over the same
        vocabulary as the sampler, so their probability is 0 and their logits get no gradient."""
        self.cfg = cfg
        self.pad_id = pad_id
        self.banned = tuple(banned_ids)
        self.dist: Reducer = dist or Alone()
        self.temperature = temperature if temperature > 0 else 1.0
        self.loss_scale = float(cfg.loss_scale or max_response_tokens)
        # The policy loss and token-weight transforms, resolved once (names were checked when
        # the config was built).
        self.loss_spec = get_policy_loss(cfg.loss)
        self.loss_cfg = policy_loss_config(cfg.loss, cfg.loss_args)
        self.loss_agg: LossAgg = getattr(self.loss_cfg, "loss_agg", None) or cfg.loss_agg
        split = split_token_weight_args(cfg.token_weights, cfg.token_weight_args or {})
        self.token_weights = [
            (get_token_weight(n), token_weight_config(n, split[n])) for n in cfg.token_weights
        ]
        self.metric_names = list(
            dict.fromkeys(
                [m for m in self.loss_spec.metrics if m != "clipfrac"]
                + [m for spec, _ in self.token_weights for m in spec.metrics]
            )
        )
        self.ref_model = None
        if (cfg.kl_coef > 0 or self.loss_spec.needs_ref) and not _is_peft(model):
            # A frozen copy of the initial policy; with LoRA the base model (adapters disabled)
            # is the reference, so no copy is needed.
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        device = next(model.parameters()).device
        self.strategy = parallel.resolve_strategy(
            cfg.strategy, self.dist.world, device.type == "cuda"
        )
        self.model = parallel.wrap(model, self.strategy, device)
        self.module = parallel.unwrap(self.model)
        if self.ref_model is not None and self.strategy == "fsdp":
            self.ref_model = parallel.wrap(self.ref_model, "fsdp", device)  # sharded too
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(cfg, total_iters)
        )
        self.nonfinite_streak = 0
        """Optimiser steps skipped in a row for a non-finite loss or gradient norm."""

    def state_dict(self) -> dict:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "nonfinite_streak": self.nonfinite_streak,
        }

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.nonfinite_streak = int(state.get("nonfinite_streak", 0))

    def score(self, samples: Sequence[Sample], reference: bool = False) -> list[list[float]]:
        """Teacher-forced log-probs of each sample's response under the policy (or reference).

        Under FSDP every rank must call this together (each with its own samples)."""
        model = self.ref_model if reference and self.ref_model is not None else self.module
        ctx = model.disable_adapter() if reference and _is_peft(model) else nullcontext()
        with ctx:
            out = score_samples(
                model,
                samples,
                self.pad_id,
                self.temperature,
                self.cfg.micro_batch_tokens,
                self.cfg.share_prompts,
                reducer=self.dist if parallel.needs_lockstep(model) else None,
                banned=self.banned,
            )
        parallel.reshard(model)
        return out

    def update(self, samples: Sequence[Sample], rng: np.random.Generator) -> dict[str, float]:
        """Run ``ppo_epochs`` passes of clipped-surrogate updates and one scheduler step.

        Returns ``loss/`` and ``perf/`` metrics averaged over optimiser steps.
        """
        samples = [s for s in samples if s.response_ids]
        # Every rank takes part while any rank has samples (the collectives must match).
        if not self.dist.sum([len(samples)])[0]:
            self.scheduler.step()
            return {}
        cfg = self.cfg
        device = next(self.module.parameters()).device
        out: dict[str, float] = {"loss/lr": self.optimizer.param_groups[0]["lr"]}
        t0 = time.perf_counter()
        if cfg.old_logprobs == "recompute":
            fresh = self.score(samples)
            diffs = np.concatenate(
                [np.abs(np.subtract(f, s.old_logprobs)) for f, s in zip(fresh, samples)]
            )
            out["loss/old_logp_mismatch_mean"] = float(diffs.mean())
            out["loss/old_logp_mismatch_max"] = float(diffs.max())
            for f, s in zip(fresh, samples):
                s.old_logprobs = f
        if cfg.kl_coef > 0 or self.loss_spec.needs_ref == "logp":
            for ref, s in zip(self.score(samples, reference=True), samples):
                s.ref_logprobs = ref
        if self.loss_spec.prepare is not None:
            seed = int(rng.integers(2**62))
            ctx = _PrepareContext(self, samples, seed)
            prep = self.loss_spec.prepare(ctx, samples, self.loss_cfg) or {}
            out.update({f"loss/{k}": float(v) for k, v in prep.items()})
        self.model.train()
        sums: dict[str, float] = {}
        diag: dict[str, list[float]] = {}
        n_updates = n_tokens = 0
        for _ in range(cfg.ppo_epochs):
            for mini in self._mini_batches(samples, rng):
                stats = self._step(mini, device)
                n_tokens += int(stats.pop("tokens"))
                for k in [k for k in stats if k.startswith("diag/")]:  # not every step has them
                    diag.setdefault(k, []).append(stats.pop(k))
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_updates += 1
        self.scheduler.step()
        elapsed = time.perf_counter() - t0
        out.update({k: v / n_updates for k, v in sums.items()})
        out["loss/skipped_steps"] = sums["loss/skipped_steps"]  # a count, not a mean
        out["perf/learn_tokens_per_s"] = n_tokens / max(elapsed, 1e-9)
        out["loss/updates"] = float(n_updates)
        out.update({k: float(np.mean(v)) for k, v in diag.items()})
        return out

    def _mini_batches(
        self, samples: Sequence[Sample], rng: np.random.Generator
    ) -> list[list[Sample]]:
        """This rank's mini-batches; every rank gets the same number (some may be empty).

        With one process: :func:`mini_batches` of ``mini_batch_steps`` (all samples if 0).
        With W ranks each rank splits its own shard into mini-batches of ``⌈size / W⌉``, so an
        optimiser step sees about ``mini_batch_steps`` samples over all ranks.
        """
        cfg = self.cfg
        if self.dist.world == 1:
            return mini_batches(
                samples, cfg.mini_batch_steps or len(samples), rng, batching=cfg.batching
            )
        if not cfg.mini_batch_steps:
            minis = [list(samples)]
        else:
            size = max(1, math.ceil(cfg.mini_batch_steps / self.dist.world))
            minis = mini_batches(samples, size, rng, batching=cfg.batching) if samples else []
        n = int(self.dist.max([len(minis)])[0])
        return minis + [[] for _ in range(n - len(minis))]

    def _step(self, mini: Sequence[Sample], device) -> dict[str, float]:
        """One optimiser step on this rank's share ``mini`` of a mini-batch (every rank calls
        it together): global denominators, the accumulated gradient, its agreement between
        halves, clipping, then the step unless something is not finite."""
        agg = self._denominators(mini)
        self.optimizer.zero_grad(set_to_none=True)
        params = [p for p in self.model.parameters() if p.requires_grad]
        sums, first = self._accumulate(mini, device, agg, params)
        diag = self._halves_agreement(first, params)
        return {**self._apply(sums, self._clip(params), agg["n_tokens"]), **diag}

    def _denominators(self, mini: Sequence[Sample]) -> dict:
        """The loss aggregation's settings with the mini-batch's token and sequence counts over
        every rank, so that N ranks update as one process would on the whole mini-batch."""
        n_tokens, n_seqs = self.dist.sum([sum(len(s.response_ids) for s in mini), len(mini)])
        return dict(mode=self.loss_agg, n_tokens=n_tokens, n_seqs=n_seqs, scale=self.loss_scale)

    def _accumulate(self, mini, device, agg: dict, params) -> tuple[dict, list | None]:
        """Backward over the micro-batches of ``mini``; returns the global metric sums and the
        gradient after the first half (None unless ``grad_cosine`` split it in two).

        With ``grad_cosine`` the micro-batches run in two halves (:func:`gradient_halves`); the
        accumulated sum, and so the update, is the same. Every rank runs as many backward
        passes per half as the rank with the most (no-op ones where it has fewer), since each
        is a collective under DDP/FSDP; gradients are reduced in the last backward of each
        half: once per mini-batch (twice with grad_cosine on several ranks, so that the first
        half is global too)."""
        world = self.dist.world
        sums = dict(pg=0.0, clip=0.0, approx_kl=0.0, kl=0.0, entropy=0.0, loss=0.0)
        # The loss's own metrics, declared at registration: the same keys on every rank.
        sums.update({f"m:{k}": 0.0 for k in self.metric_names})
        chunks = micro_batches(mini, self.cfg.micro_batch_tokens) if mini else []
        parts = gradient_halves(chunks) if self.cfg.grad_cosine else [chunks]
        counts = [len(p) for p in parts]
        if world > 1:
            counts = [int(c) for c in self.dist.max(counts)]
        first = None
        for h, (part, n_part) in enumerate(zip(parts, counts)):
            for k in range(len(part), n_part):  # keep in step with ranks that have more
                with parallel.gradient_sync(self.model, k == n_part - 1):
                    parallel.dummy_backward(self.model, self.pad_id, device)
                if self.loss_spec.needs_ref == "logits":
                    self._ref_logits(None, device)  # an FSDP reference forward is a collective
            for k, chunk in enumerate(part):
                last = k == len(part) - 1 and len(part) == n_part
                with parallel.gradient_sync(self.model, last or world == 1):
                    self._backward(chunk, device, agg, sums, agg["n_tokens"])
            if h == 0 and len(parts) == 2 and counts[0] and counts[1]:
                first = [None if p.grad is None else _local(p.grad).clone() for p in params]
        if world > 1:
            keys = list(sums)
            sums = dict(zip(keys, self.dist.sum([sums[k] for k in keys])))
        return sums, first

    def _halves_agreement(self, first, params) -> dict[str, float]:
        """``diag/grad_cos`` and ``diag/grad_snr`` of the two halves' gradients, before
        clipping (:func:`gradient_agreement`); {} without a split."""
        if first is None:
            return {}
        total = [None if p.grad is None else _local(p.grad) for p in params]
        stats = half_gradient_stats(first, total)
        if self.dist.world > 1 and any(hasattr(p.grad, "to_local") for p in params):
            stats = self.dist.sum(stats)  # FSDP: each rank holds a shard (DDP: replicas)
        return gradient_agreement(*stats)

    def _clip(self, params) -> float:
        """Clip the gradient to ``max_grad_norm`` (if set); the global norm before clipping."""
        if self.cfg.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
            return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        grads = [p.grad.norm() ** 2 for p in params if p.grad is not None]
        return float(torch.sqrt(sum(grads))) if grads else 0.0

    def _backward(self, chunk, device, agg: dict, sums: dict, n_tokens: float) -> None:
        """Loss of one micro-batch, its backward, and its share of the metrics in ``sums``.

        The policy loss is ``learner.loss`` (after the ``token_weights`` transforms), plus
        ``kl_coef``·KL to the reference and minus ``entropy_coef``·entropy over the response
        tokens. The loss is multiplied by the world size because DDP and FSDP average gradients
        over the ranks while the denominators in ``agg`` are already global."""
        cfg = self.cfg
        logits, t = forward_chunk(
            self.model, chunk, self.pad_id, device, cfg.share_prompts, self.banned
        )
        mask = t["mask"]
        logp = logprobs_from_logits(logits, t["targets"], self.temperature)
        if cfg.entropy_coef > 0:
            ent_tok = entropy_from_logits(logits / self.temperature)
        else:
            with torch.no_grad():
                ent_tok = entropy_from_logits(logits / self.temperature)
        ref_logits = (
            self._ref_logits(chunk, device) if self.loss_spec.needs_ref == "logits" else None
        )
        inp = LossInputs(
            logp=logp,
            old_logp=t["old"],
            adv=t["adv"],
            mask=mask,
            agg=Aggregator(mask=mask, **agg),
            response_mask=mask,
            targets=t["targets"],
            logits=logits,
            temperature=self.temperature,
            entropy=ent_tok.detach(),
            ref_logp=t.get("ref"),
            ref_logits=ref_logits,
            extra={k[6:]: v for k, v in t.items() if k.startswith("extra:")},
            learner=cfg,
        )
        metrics: dict[str, Any] = {}
        for spec, tw_cfg in self.token_weights:
            adv, loss_mask, tw_metrics = spec.fn(inp, tw_cfg)
            inp = replace(inp, adv=adv, mask=loss_mask, agg=replace(inp.agg, mask=loss_mask))
            metrics.update(tw_metrics)
        pg, loss_metrics = self.loss_spec.fn(inp, self.loss_cfg)
        metrics.update(loss_metrics)
        loss = pg
        if cfg.entropy_coef > 0:
            loss = loss - cfg.entropy_coef * aggregate_loss(ent_tok, mask, **agg)
        if cfg.kl_coef > 0:
            kl = aggregate_loss(kl_penalty(logp, t["ref"], cfg.kl_type), mask, **agg)
            loss = loss + cfg.kl_coef * kl
            sums["kl"] += float(kl.detach())
        (loss * self.dist.world if self.dist.world > 1 else loss).backward()
        with torch.no_grad():
            sums["loss"] += float(loss)
            sums["pg"] += float(pg)
            sums["clip"] += float(metrics.pop("clipfrac", 0.0))
            sums["approx_kl"] += float(((t["old"] - logp) * mask).sum()) / n_tokens
            sums["entropy"] += float((ent_tok * mask).sum()) / n_tokens
            for k, v in metrics.items():
                if f"m:{k}" not in sums:
                    raise KeyError(
                        f"policy loss {cfg.loss!r} or a token weight reported the metric {k!r} "
                        "that it did not declare (register it with metrics=(...))"
                    )
                sums[f"m:{k}"] += float(v)

    def _ref_logits(self, chunk, device) -> torch.Tensor | None:
        """Raw (S, R, V) logits of the frozen reference on ``chunk``, without gradients (the
        base model with LoRA adapters disabled). ``chunk=None``: only keep an FSDP reference's
        collectives in step with the other ranks; returns None."""
        model = self.ref_model if self.ref_model is not None else self.module
        if chunk is None:
            if parallel.needs_lockstep(model):
                dummy_forward(model, self.pad_id, device)
            return None
        peft = self.ref_model is None
        was_training = model.training
        ctx = model.disable_adapter() if peft else nullcontext()
        try:
            if peft:
                model.eval()  # no dropout in the reference
            with torch.no_grad(), ctx:
                logits, _ = forward_chunk(
                    model, chunk, self.pad_id, device, self.cfg.share_prompts, self.banned
                )
        finally:
            model.train(was_training)
        return logits

    def _apply(self, sums: dict, grad_norm: float, n_tokens: float) -> dict[str, float]:
        """Step the optimiser unless the loss or gradient norm is not finite; the metrics.

        ``sums`` and ``grad_norm`` are global (equal on every rank), so every rank decides
        alike."""
        cfg = self.cfg
        skipped = not (math.isfinite(sums["loss"]) and math.isfinite(grad_norm))
        if skipped:
            # Stepping would write NaN/inf into the weights (and the optimiser's moments):
            # drop this mini-batch's gradient instead, and stop if it keeps happening.
            self.optimizer.zero_grad(set_to_none=True)
            self.nonfinite_streak += 1
            log.warning(
                "skipped an optimiser step: loss %s, gradient norm %s (%d in a row)",
                sums["loss"],
                grad_norm,
                self.nonfinite_streak,
            )
            if self.nonfinite_streak >= cfg.max_nonfinite_skips:
                raise NonFiniteLossError(
                    f"{self.nonfinite_streak} optimiser steps in a row had a non-finite loss or "
                    f"gradient norm (last: loss {sums['loss']}, grad norm {grad_norm}); stopping. "
                    "Lower learner.lr, check the rewards and advantages, or resume from the last "
                    "checkpoint (the weights were never updated with a non-finite step)."
                )
        else:
            self.nonfinite_streak = 0
            self.optimizer.step()
        return {
            "loss/skipped_steps": float(skipped),
            "loss/total": sums["loss"],
            "loss/pg": sums["pg"],
            "loss/kl": sums["kl"],
            "loss/entropy": sums["entropy"],
            "loss/clipfrac": sums["clip"],
            "loss/approx_kl": sums["approx_kl"],
            "loss/grad_norm": grad_norm if math.isfinite(grad_norm) else float("nan"),
            **{f"loss/{k}": sums[f"m:{k}"] for k in self.metric_names},
            "tokens": n_tokens,
        }


class _PrepareContext:
    """The learner's side of a loss's ``prepare`` hook (:class:`~agentrl.learn.policy_loss.
    PrepareContext`): no-grad passes of the pre-update policy (and reference) over the batch."""

    def __init__(self, learner: Learner, samples: Sequence[Sample], seed: int):
        self._learner = learner
        self.learner = learner.cfg
        device = next(learner.module.parameters()).device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    @property
    def dist(self) -> Reducer:
        return self._learner.dist

    def map_tokens(
        self, samples: Sequence[Sample], fn: Callable[..., torch.Tensor], reference: bool = False
    ) -> list[np.ndarray]:
        lr = self._learner
        device = next(lr.module.parameters()).device
        lockstep = parallel.needs_lockstep(lr.module)
        out = map_samples(
            lr.module,
            samples,
            lr.pad_id,
            lr.temperature,
            lr.cfg.micro_batch_tokens,
            lr.cfg.share_prompts,
            fn,
            ref_logits=(lambda c: lr._ref_logits(c, device)) if reference else None,
            reducer=lr.dist if lockstep else None,
            banned=lr.banned,
        )
        parallel.reshard(lr.module)
        return out


def _local(grad: torch.Tensor) -> torch.Tensor:
    """This rank's part of a gradient: the local shard of an FSDP DTensor, else the tensor."""
    return grad.to_local() if hasattr(grad, "to_local") else grad


def _is_peft(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")
