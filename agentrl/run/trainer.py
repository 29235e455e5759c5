"""The training loop: rollout → credit → PPO update → log → checkpoint, read top to bottom.

:func:`train` takes a validated :class:`~agentrl.run.config.RunConfig` and an output directory.
Each iteration draws B task seeds, rolls out G episodes per task with the current policy,
flattens them into a :class:`~agentrl.credit.batch.StepBatch`, builds the trajectory graph when the
estimator needs one, asks the estimator for one advantage per step, broadcasts it to the
response tokens and runs the learner. Every ``eval_every`` iterations the policy plays held-out
seeds (seeds ≥ 2³¹, never drawn for training) at the evaluation temperature.

Metrics go to TensorBoard (namespaces ``env/``, ``eval/``, ``credit/``, ``loss/``, ``perf/``),
to ``metrics.jsonl`` and to the console. Checkpoints (``<out_dir>/checkpoints/iter-NNNNNN``)
hold the model in Hugging Face format plus ``trainer_state.pt`` (optimizer, LR schedule, RNG
states, iteration), so ``trainer.resume=true`` continues a killed run exactly where its last
checkpoint left it.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import yaml

from agentrl.credit import compute_advantages, get_estimator
from agentrl.credit.batch import StepBatch, TrajectoryGroup, flat_steps
from agentrl.credit.graph import build_graph
from agentrl.learn.learner import Learner, Sample
from agentrl.learn.model import (
    build_tiny_model,
    build_tokenizer,
    enable_checkpointing,
    load_pretrained,
    prepare_for_training,
    save_model,
)
from agentrl.registry import env_spec, make
from agentrl.rollout import HFBackend, Sampling, collect
from agentrl.rollout.env_pool import make_pool
from agentrl.rollout.prompting import build_prompt
from agentrl.run.config import RunConfig

log = logging.getLogger("agentrl")

EVAL_SEED_BASE = 2**31
"""Evaluation seeds start here; training seeds are drawn below it."""


def tokenizer_corpus(env, cfg: RunConfig, rng: np.random.Generator) -> list[str]:
    """Prompts and actions from random episodes of ``env``: the tiny tokenizer's training text."""
    texts: list[str] = []
    hist = cfg.rollout.history_length
    for _ in range(cfg.trainer.tokenizer_episodes):
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


def env_metrics(batch: StepBatch, prefix: str = "env") -> dict[str, float]:
    """Success, return, length and invalid-action rate of a batch."""
    return {
        f"{prefix}/success": float(batch.traj_won.mean()),
        f"{prefix}/return": float(batch.traj_return.mean()),
        f"{prefix}/length": float(batch.traj_len.mean()),
        f"{prefix}/invalid_rate": float(1.0 - batch.step_valid.mean()),
        f"{prefix}/truncated": float(batch.step_truncated.sum() / max(batch.n_trajs, 1)),
    }


def env_scores(groups: list[TrajectoryGroup], prefix: str) -> dict[str, float]:
    """Mean ``info['score']`` of the episodes that report one (WebShop's score = reward × 100),
    logged next to success (the fraction of wins)."""
    scores = [t.score for g in groups for t in g.trajectories if t.score is not None]
    return {f"{prefix}/score": float(np.mean(scores))} if scores else {}


def per_type_success(groups: list[TrajectoryGroup], prefix: str) -> dict[str, float]:
    """Success per ``task_type`` for environments that report one."""
    by_type: dict[str, list[bool]] = defaultdict(list)
    for g in groups:
        for tr in g.trajectories:
            if tr.task_type is not None:
                by_type[str(tr.task_type)].append(tr.won)
    return {f"{prefix}/success_{k}": float(np.mean(v)) for k, v in sorted(by_type.items())}


def format_trajectory(group: TrajectoryGroup, index: int = 0) -> str:
    """One trajectory as markdown text (for TensorBoard)."""
    tr = group.trajectories[index]
    lines = [f"**task** (seed {group.seed}): {group.task}", ""]
    for t, s in enumerate(tr.steps):
        lines.append(
            f"step {t + 1}: `{s.response_text!r}` → action {s.action!r}, reward {s.reward:+.2f}"
        )
    lines.append(f"\n**won**: {tr.won}")
    return "  \n".join(lines)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _latest_checkpoint(out_dir: Path) -> Path | None:
    marker = out_dir / "checkpoints" / "latest"
    if not marker.exists():
        return None
    path = out_dir / "checkpoints" / marker.read_text().strip()
    return path if (path / "trainer_state.pt").exists() else None


def _build_model(cfg: RunConfig, rng: np.random.Generator, resume_from: Path | None):
    """Model and tokenizer: from a checkpoint, from ``name_or_path``, or the tiny model."""
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


def save_checkpoint(
    model,
    tokenizer,
    learner: Learner,
    cfg: RunConfig,
    out_dir: Path,
    iteration: int,
    rng: np.random.Generator,
    extra: dict | None = None,
) -> Path:
    """Write the model (HF format), the run state and the config; point ``latest`` at it."""
    path = out_dir / "checkpoints" / f"iter-{iteration:06d}"
    path.mkdir(parents=True, exist_ok=True)
    save_model(model, tokenizer, path, cfg.model)
    state = {
        "iteration": iteration,
        "learner": learner.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy_rng": rng.bit_generator.state,
        **(extra or {}),
    }
    # Write then rename, so a kill mid-save never leaves a checkpoint that looks complete.
    torch.save(state, path / "trainer_state.tmp")
    (path / "trainer_state.tmp").replace(path / "trainer_state.pt")
    (path / "agentrl_config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    tmp = out_dir / "checkpoints" / "latest.tmp"
    tmp.write_text(path.name)
    tmp.replace(out_dir / "checkpoints" / "latest")
    return path


class Evaluator:
    """Plays held-out seeds with the current policy at the evaluation temperature."""

    def __init__(self, cfg: RunConfig, backend, tokenizer):
        rc = cfg.rollout
        self.cfg = cfg
        self.backend = backend
        self.tokenizer = tokenizer
        self.envs = make_pool(
            cfg.env_name, cfg.env_kwargs, cfg.trainer.eval_episodes, rc.pool_config()
        )
        self.seeds = [EVAL_SEED_BASE + k for k in range(cfg.trainer.eval_episodes)]
        self.sampling = Sampling(
            max_new_tokens=rc.max_new_tokens,
            temperature=rc.eval_temperature,
            top_p=rc.top_p,
            top_k=rc.top_k,
            stop_strings=("</action>",) if rc.action_format == "tag" else (),
        )

    def run(self) -> tuple[dict[str, float], list[TrajectoryGroup]]:
        groups = collect(
            self.envs,
            self.seeds,
            self.backend,
            self.tokenizer,
            self.cfg.rollout,
            self.sampling,
            options={"split": "eval"},
        )
        batch = StepBatch.from_groups(groups)
        metrics = {**env_metrics(batch, "eval"), **per_type_success(groups, "eval")}
        return {**metrics, **env_scores(groups, "eval")}, groups


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
    )


def train(cfg: RunConfig, out_dir: str | Path) -> dict[str, float]:
    """Train the policy described by ``cfg``; return the last iteration's metrics."""
    from torch.utils.tensorboard import SummaryWriter
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.rollout.prompt_style == "auto":  # the environment's own prompt layout
        style = env_spec(cfg.env_name).prompt_style
        cfg = replace(cfg, rollout=replace(cfg.rollout, prompt_style=style))
    tc, rc = cfg.trainer, cfg.rollout
    resume_from = _latest_checkpoint(out_dir) if tc.resume else None
    if tc.resume and resume_from is None:
        log.info("trainer.resume: no checkpoint in %s, starting from scratch", out_dir)
    (out_dir / "run_config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    torch.manual_seed(tc.seed)
    rng = np.random.default_rng(tc.seed)
    device = _device(tc.device)

    envs = make_pool(cfg.env_name, cfg.env_kwargs, rc.n_tasks * rc.group_size, rc.pool_config())
    model, tokenizer = _build_model(cfg, rng, resume_from)
    model.to(device)
    backend = make_backend(cfg, model, tokenizer, out_dir)
    learner = Learner(
        model,
        cfg.learner,
        tokenizer.pad_token_id,
        temperature=rc.temperature,
        total_iters=tc.steps,
        max_response_tokens=rc.max_new_tokens,
    )
    start = 0
    if resume_from is not None:
        state = torch.load(resume_from / "trainer_state.pt", weights_only=False)
        learner.load_state_dict(state["learner"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        rng.bit_generator.state = state["numpy_rng"]
        start = int(state["iteration"])
        log.info("resumed from %s (iteration %d)", resume_from, start)
    sampling = Sampling(
        max_new_tokens=rc.max_new_tokens,
        temperature=rc.temperature,
        top_p=rc.top_p,
        top_k=rc.top_k,
        stop_strings=("</action>",) if rc.action_format == "tag" else (),
    )
    estimator = get_estimator(cfg.algo_name)
    for key, value in estimator.learner_hints:
        if getattr(cfg.learner, key) != value:
            log.warning(
                "algo=%s is designed for learner.%s=%r (this run: %r)",
                cfg.algo_name,
                key,
                value,
                getattr(cfg.learner, key),
            )
    scorer = None
    if estimator.needs_scorer:
        from agentrl.learn.scoring import PolicyScorer

        scorer = PolicyScorer(
            model,
            tokenizer,
            temperature=rc.temperature or 1.0,
            max_prompt_tokens=rc.max_prompt_tokens,
        )
    evaluator = Evaluator(cfg, backend, tokenizer) if tc.eval_every else None
    driver = None
    if estimator.driver:  # the estimator samples its own batches (AC2's prefixes and chunks)
        module, _, cls = estimator.driver.partition(":")
        driver = getattr(importlib.import_module(module), cls)(cfg, model, tokenizer, backend)
    n_params = sum(p.numel() for p in model.parameters())
    decode_total = 0.0
    if resume_from is not None:
        decode_total = float(state.get("decode_tokens_total", 0.0))
        if driver is not None and "driver" in state:
            driver.load_state_dict(state["driver"])
    log.info(
        "model: %s parameters, vocab %d, device %s; writing to %s",
        f"{n_params:,}",
        len(tokenizer),
        device,
        out_dir,
    )
    if tc.save_initial and start == 0:
        save_checkpoint(model, tokenizer, learner, cfg, out_dir, 0, rng)

    # On resume, drop logs past the checkpoint: those iterations are replayed.
    writer = SummaryWriter(str(out_dir / "tb"), purge_step=start + 1 if start else None)
    metrics_path = out_dir / "metrics.jsonl"
    if metrics_path.exists():
        kept = [
            ln
            for ln in metrics_path.read_text().splitlines()
            if ln and json.loads(ln)["iteration"] <= start
        ]
        metrics_path.write_text("".join(k + "\n" for k in kept))
    if evaluator is not None and start == 0:
        # The untrained policy's score: the baseline every later evaluation is compared with.
        initial, _ = evaluator.run()
        for k, v in initial.items():
            writer.add_scalar(k, v, 0)
        with metrics_path.open("a") as fh:
            fh.write(json.dumps({"iteration": 0, **initial}) + "\n")
        log.info("iter 0 (untrained)  eval success %.3f", initial["eval/success"])
    metrics: dict[str, float] = {}
    bar = tqdm(
        range(start, tc.steps),
        desc="train",
        disable=not tc.progress,
        dynamic_ncols=True,
        initial=start,
        total=tc.steps,
    )
    for it in bar:
        t0 = time.perf_counter()
        seeds = rng.integers(0, EVAL_SEED_BASE - 1, size=rc.n_tasks)
        if driver is not None:
            groups, driver_metrics = driver.collect(rng)
        else:
            groups, driver_metrics = collect(envs, seeds, backend, tokenizer, rc, sampling), {}
        t1 = time.perf_counter()
        batch = StepBatch.from_groups(groups)
        # Built once per batch and shared; only estimators that declare the need get it.
        graph = build_graph(batch) if estimator.needs_graph else None
        adv = compute_advantages(cfg.algo_name, batch, cfg.algo, graph=graph, scorer=scorer)
        t2 = time.perf_counter()
        steps = flat_steps(groups)
        samples = [
            Sample(s.prompt_ids, s.response_ids, list(s.logprobs), float(a), group=int(g))
            for s, a, g in zip(steps, adv.step, batch.step_group)
        ]
        learn = learner.update(samples, rng)
        if driver is not None:
            driver_metrics.update(driver.after_update(rng))
        backend.sync(model)
        t3 = time.perf_counter()
        gen_tokens = sum(len(s.response_ids) for s in steps)
        # Decoding work: AC2 also decodes refill attempts and critic answers.
        decoded = driver_metrics.pop("perf/decode_tokens", float(gen_tokens))
        decode_total += decoded
        metrics = {
            **env_metrics(batch),
            **per_type_success(groups, "env"),
            **env_scores(groups, "env"),
            **adv.metrics,
            **learn,
            "perf/rollout_s": t1 - t0,
            "perf/credit_s": t2 - t1,
            "perf/learn_s": t3 - t2,
            "perf/gen_tokens_per_s": gen_tokens / max(t1 - t0, 1e-9),
            "perf/iteration_s": t3 - t0,
            "perf/decode_tokens": decoded,
            "perf/decode_flops": 2.0 * n_params * decoded,
            "perf/decode_tokens_total": decode_total,
            "perf/decode_flops_total": 2.0 * n_params * decode_total,
            **driver_metrics,
        }
        last = it + 1 == tc.steps
        if evaluator is not None and ((it + 1) % tc.eval_every == 0 or last):
            eval_metrics, eval_groups = evaluator.run()
            metrics.update(eval_metrics)
            for k in range(min(tc.eval_samples, len(eval_groups))):
                writer.add_text(f"eval/sample_{k}", format_trajectory(eval_groups[k]), it + 1)
        for k, v in metrics.items():
            writer.add_scalar(k, v, it + 1)
        with metrics_path.open("a") as fh:
            fh.write(json.dumps({"iteration": it + 1, **metrics}) + "\n")
        bar.set_postfix(
            success=f"{metrics['env/success']:.2f}",
            ret=f"{metrics['env/return']:.2f}",
            invalid=f"{metrics['env/invalid_rate']:.2f}",
        )
        extra = f"  eval success {metrics['eval/success']:.3f}" if "eval/success" in metrics else ""
        log.info(
            "iter %d/%d  success %.3f  return %.3f  length %.1f  invalid %.3f  "
            "pg %.4f  (rollout %.1fs, learn %.1fs)%s",
            it + 1,
            tc.steps,
            metrics["env/success"],
            metrics["env/return"],
            metrics["env/length"],
            metrics["env/invalid_rate"],
            metrics.get("loss/pg", float("nan")),
            t1 - t0,
            t3 - t2,
            extra,
        )
        if last or (tc.save_every and (it + 1) % tc.save_every == 0):
            extra = {"decode_tokens_total": decode_total}
            if driver is not None:
                extra["driver"] = driver.state_dict()
            path = save_checkpoint(model, tokenizer, learner, cfg, out_dir, it + 1, rng, extra)
            log.info("saved checkpoint %s", path)
    writer.close()
    envs.close()
    if evaluator is not None:
        evaluator.envs.close()
    return metrics
