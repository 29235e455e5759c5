"""Set-up shared by training and supervised warm starts: start-up checks, device, CPU threads,
prompt layout, the policy model and its tokenizer, and the rollout backend.

Both ``python -m agentrl.run`` (:mod:`agentrl.run.trainer`) and ``python -m agentrl.sft``
(:mod:`agentrl.run.sft`) start the same way; these functions are that common part, so neither
reaches into the other's private names.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from agentrl.configuration import ConfigError
from agentrl.credit import EstimatorSpec
from agentrl.credit.stage import CreditStage
from agentrl.env_api import EVAL_SEED_BASE
from agentrl.learn.policy_loss import policy_loss_config
from agentrl.model import (
    build_tiny_model,
    build_tokenizer,
    enable_checkpointing,
    load_pretrained,
    prepare_for_training,
    save_model,
)
from agentrl.model.scoring import PolicyScorer
from agentrl.registry import env_spec, make
from agentrl.rollout import HFBackend, Sampling
from agentrl.rollout.pools import make_pool
from agentrl.rollout.prompting import build_prompt
from agentrl.rollout.sampler import DriverSampler, DynamicSampling, Sampler
from agentrl.run.config import RunConfig
from agentrl.run.distributed import shard

log = logging.getLogger("agentrl")


def startup_warnings(cfg: RunConfig, estimator: EstimatorSpec) -> list[str]:
    """Settings that are valid but probably not what the user meant, as messages."""
    out = []
    if estimator.group_based and estimator.driver is None and cfg.rollout.group_size == 1:
        out.append(
            f"algo={cfg.algo_name} compares the rollouts of a task, but rollout.group_size=1: "
            "every advantage will be 0 and nothing is learned; use rollout.group_size >= 2"
        )
    for key, value in estimator.learner_hints:
        if getattr(cfg.learner, key) != value:
            out.append(
                f"algo={cfg.algo_name} is designed for learner.{key}={value!r} "
                f"(this run: {getattr(cfg.learner, key)!r})"
            )
    lc = cfg.learner
    own = getattr(policy_loss_config(lc.loss, lc.loss_args), "loss_agg", None)
    if own is not None and own != lc.loss_agg:
        out.append(
            f"learner.loss={lc.loss} aggregates tokens with its own loss_agg={own!r} "
            f"(learner.loss_args.loss_agg), not learner.loss_agg={lc.loss_agg!r}"
        )
    return out


def check_method_fits(cfg: RunConfig, estimator: EstimatorSpec, world: int) -> None:
    """Refuse combinations a method does not support (at start-up, with the reason)."""
    what = "brings its own rollout driver" if estimator.driver else "trains a critic"
    if world > 1 and (estimator.driver or estimator.critic):
        raise ConfigError(
            f"algo={cfg.algo_name} {what}, which runs in one process only; launch it without "
            "torchrun"
        )
    if cfg.rollout.dynamic_sampling and estimator.driver:
        raise ConfigError(
            f"rollout.dynamic_sampling=true: algo={cfg.algo_name} samples its own batches "
            "(a rollout driver); turn dynamic sampling off"
        )


def check_shards(cfg: RunConfig, world: int) -> None:
    """Refuse a job in which some rank would get no task group or no evaluation episode.

    The ranks split ``rollout.n_tasks`` groups and ``trainer.eval_episodes`` episodes into
    contiguous shards; an empty shard has nothing to roll out and its metrics divide by zero
    mid-run, so the job is refused at start-up with the numbers that do not fit.
    """
    if world <= 1:
        return
    problems = []
    if cfg.trainer.steps > 0 and cfg.rollout.n_tasks < world:
        problems.append(f"rollout.n_tasks={cfg.rollout.n_tasks} < {world} ranks")
    if cfg.trainer.eval_every > 0 and cfg.trainer.eval_episodes < world:
        problems.append(f"trainer.eval_episodes={cfg.trainer.eval_episodes} < {world} ranks")
    if problems:
        raise ConfigError(
            f"every one of the {world} ranks needs at least one task group and one evaluation "
            f"episode: {'; '.join(problems)}. Raise them to >= {world}, or launch fewer ranks"
        )


def resolve_device(name: str) -> torch.device:
    """``trainer.device``: ``auto`` is CUDA when available."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def with_prompt_style(cfg: RunConfig) -> RunConfig:
    """``rollout.prompt_style=auto`` replaced by the environment's own layout."""
    if cfg.rollout.prompt_style != "auto":
        return cfg
    style = env_spec(cfg.env_name).prompt_style
    return replace(cfg, rollout=replace(cfg.rollout, prompt_style=style))


def choose_num_threads(
    requested: int, cores: int, load: float, omp_env: str | None
) -> tuple[int, str]:
    """The torch intra-op thread count for a CPU run, and why.

    Args:
        requested: ``trainer.num_threads`` (0 = choose).
        cores: CPUs this process may run on.
        load: the 1-minute load average before the run starts (other processes' work).
        omp_env: the ``OMP_NUM_THREADS`` environment variable (torchrun sets it to 1).

    torch's default is one thread per core, whatever else runs: on a shared machine the threads
    then oversubscribe the cores and wait on each other. So: an explicit request wins, then
    ``OMP_NUM_THREADS``, else the cores the load average leaves free. Measured on the default
    job (results/threads.md): on an idle 2-core machine 2 threads take 0.71x the time of 1;
    beside one busy process they take 2.8x, and with the machine loaded by 5 other jobs
    36-75 s per iteration against 6-7 s.
    """
    if requested > 0:
        return requested, "trainer.num_threads"
    if omp_env and omp_env.strip().isdigit() and int(omp_env) > 0:
        return int(omp_env), "OMP_NUM_THREADS"
    free = max(1, cores - round(load))
    return free, f"{cores} cores, load {load:.1f}"


def set_threads(requested: int) -> None:
    """Set torch's CPU threads as :func:`choose_num_threads` decides, and say so."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads, why = choose_num_threads(
        requested,
        cores=cores or 1,
        load=os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0,
        omp_env=os.environ.get("OMP_NUM_THREADS"),
    )
    torch.set_num_threads(threads)
    log.info("torch CPU threads: %d (%s)", threads, why)


def tokenizer_corpus(env, cfg: RunConfig, rng: np.random.Generator) -> list[str]:
    """Prompts and actions from random episodes of ``env``: the tiny tokenizer's training text."""
    texts: list[str] = []
    hist = cfg.rollout.history_length
    for _ in range(cfg.model.tokenizer_episodes):
        obs, info = env.reset(seed=int(rng.integers(0, EVAL_SEED_BASE - 1)))
        history: list[tuple[str, str]] = []
        done = False
        while not done:
            acts = info["admissible_actions"] or obs.split()[:8] or ["look"]
            texts.append(
                build_prompt(
                    info["task"],
                    history[-hist:] if hist else [],
                    obs,
                    acts,
                    len(history),
                    cfg.rollout.action_format,
                    cfg.rollout.prompt_style,
                )
            )
            action = str(acts[int(rng.integers(len(acts)))])
            texts.extend([action, f"<action>{action}</action>"])
            history.append((obs, action))
            obs, _, term, trunc, info = env.step(action)
            done = term or trunc
    return texts


def build_policy(cfg: RunConfig, rng: np.random.Generator, resume_from: Path | None = None):
    """Model and tokenizer: from a checkpoint, from ``model.name_or_path``, or the tiny model
    (its tokenizer trained on random episodes of the environment, drawn from ``rng``)."""
    lora = cfg.model.lora.r > 0
    if resume_from is not None and not lora:
        model, tokenizer = load_pretrained(cfg.model, str(resume_from))
        return prepare_for_training(model, cfg.model), tokenizer
    if cfg.model.name_or_path:
        model, tokenizer = load_pretrained(cfg.model)
    elif resume_from is not None:
        # LoRA on the tiny model: rebuild the same base (same seed) around the saved tokenizer.
        _, tokenizer = load_pretrained(cfg.model, str(resume_from))
        model = build_tiny_model(cfg.model, tokenizer)
    else:
        env = make(cfg.env_name, **cfg.env_kwargs)  # a local env only for the tokenizer's text
        tokenizer = build_tokenizer(tokenizer_corpus(env, cfg, rng), cfg.model.vocab_size)
        env.close()
        model = build_tiny_model(cfg.model, tokenizer)
    if resume_from is not None:  # LoRA: base model + saved adapter
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, resume_from / "adapter", is_trainable=True)
        if cfg.model.gradient_checkpointing:
            enable_checkpointing(model)
        return model, tokenizer
    return prepare_for_training(model, cfg.model), tokenizer


def make_backend(cfg: RunConfig, model, tokenizer, out_dir: Path):
    """The configured rollout backend; vLLM starts from the current weights saved to disk."""
    rc = cfg.rollout
    if rc.backend == "hf":
        return HFBackend(model, tokenizer, rc.max_batch_size)
    from agentrl.rollout.vllm_backend import VLLMBackend

    init = out_dir / "vllm_init"
    save_model(
        model, tokenizer, init, replace(cfg.model, lora=replace(cfg.model.lora, save="merged"))
    )
    dtype = "auto" if cfg.model.dtype == "auto" else cfg.model.dtype
    return VLLMBackend(
        str(init),
        tokenizer,
        dtype=dtype,
        gpu_memory_utilization=rc.vllm_gpu_memory_utilization,
        max_model_len=rc.vllm_max_model_len,
        seed=cfg.trainer.seed,
        policy=model,
        lora_rank=cfg.model.lora.r,
        lora_sync=rc.vllm_lora_sync,
        sleep=rc.vllm_sleep,
        kv_cache_gb=rc.vllm_kv_cache_gb,
        scratch_dir=out_dir / "vllm_adapters",
    )


def load_target(target: str):
    """The class named ``"module:Class"`` (a method's driver or critic)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def make_sampler(cfg: RunConfig, estimator: EstimatorSpec, dist, policy, tokenizer, backend):
    """The Sampler stage of a run, and the method's rollout driver (None for most methods).

    A driver (AC2, PS-PPO) samples its own batches; otherwise the rank's share of the tasks is
    played over an environment pool, with DAPO's dynamic sampling around it when asked for.
    """
    rc = cfg.rollout
    if estimator.driver:
        driver = load_target(estimator.driver)(cfg, policy, tokenizer, backend)
        return DriverSampler(driver), driver
    lo, hi = shard(rc.n_tasks, dist.world, dist.rank)
    envs = make_pool(cfg.env_name, cfg.env_kwargs, (hi - lo) * rc.group_size, rc.pool_config())
    sampling = Sampling(
        max_new_tokens=rc.max_new_tokens,
        temperature=rc.temperature,
        top_p=rc.top_p,
        top_k=rc.top_k,
        stop_strings=("</action>",) if rc.action_format == "tag" else (),
    )
    plain = Sampler(envs, backend, tokenizer, rc, sampling, slice(lo, hi))
    if rc.dynamic_sampling:  # DAPO: only groups whose returns differ reach credit
        return DynamicSampling(plain, rc.dynamic_sampling_max_rounds, dist), None
    return plain, None


def make_credit(cfg: RunConfig, estimator: EstimatorSpec, dist, policy, tokenizer) -> CreditStage:
    """The Credit stage: the estimator with its scorer (the policy rescoring texts: RELACE,
    HCAPO) or learned critic (GAE) when it asks for one."""
    scorer = critic = None
    if estimator.needs_scorer:
        scorer = PolicyScorer(
            policy,
            tokenizer,
            temperature=cfg.rollout.temperature or 1.0,
            max_prompt_tokens=cfg.rollout.max_prompt_tokens,
        )
    if estimator.critic:
        critic = load_target(estimator.critic)(cfg, policy, tokenizer)
    return CreditStage(cfg.algo_name, cfg.algo, dist, scorer, critic)
