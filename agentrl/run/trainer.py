"""The training loop: rollout → credit → PPO update → log → checkpoint, read top to bottom.

:func:`train` takes a validated :class:`~agentrl.run.config.RunConfig` and an output directory.
Each iteration draws B task seeds, rolls out G episodes per task with the current policy,
flattens them into a :class:`~agentrl.credit.batch.StepBatch`, builds the trajectory graph when the
estimator needs one, asks the estimator for one advantage per step, broadcasts it to the
response tokens and runs the learner. Every ``eval_every`` iterations the policy plays held-out
seeds (seeds ≥ 2³¹, never drawn for training) at the evaluation temperature.

Metrics go to TensorBoard (namespaces ``env/``, ``eval/``, ``credit/``, ``loss/``, ``perf/``,
``diag/``: reachable headroom, gradient cosine), to ``metrics.jsonl`` and to the console.
Checkpoints (``<out_dir>/checkpoints/iter-NNNNNN``) hold the model in Hugging Face format plus
``trainer_state.pt`` (optimizer, LR schedule, RNG states, iteration, a stateful estimator's
state), so ``trainer.resume=true`` continues a killed run exactly where its last checkpoint
left it.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import yaml

from agentrl.configuration import ConfigError
from agentrl.credit import EstimatorSpec, compute_advantages, get_estimator
from agentrl.credit.batch import StepBatch, TrajectoryGroup, flat_steps
from agentrl.credit.diagnostics import batch_diagnostics
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
from agentrl.learn.parallel import resolve_strategy
from agentrl.model import banned_token_ids
from agentrl.registry import env_spec, make
from agentrl.rollout import HFBackend, Sampling, collect
from agentrl.rollout.env_pool import make_pool
from agentrl.rollout.prompting import build_prompt
from agentrl.run.config import RunConfig
from agentrl.run.distributed import Dist, init_distributed, shard, shutdown

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
    return out


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _latest_checkpoint(out_dir: Path) -> Path | None:
    marker = out_dir / "checkpoints" / "latest"
    if not marker.exists():
        return None
    path = out_dir / "checkpoints" / marker.read_text().strip()
    # One process writes trainer_state.pt, several ranks trainer_state_rank<r>.pt each.
    done = (path / "trainer_state.pt").exists() or (path / "trainer_state_rank0.pt").exists()
    return path if done else None


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
    cfg: RunConfig,
    out_dir: Path,
    iteration: int,
    state: dict,
    extra: Callable[[Path], None] | None = None,
) -> Path:
    """Write the model (HF format), the run ``state`` and the config; point ``latest`` at it.

    ``extra(path)`` writes further files into the checkpoint folder first (a critic's value
    head), so a checkpoint that ``latest`` names holds them."""
    path = out_dir / "checkpoints" / f"iter-{iteration:06d}"
    path.mkdir(parents=True, exist_ok=True)
    save_model(model, tokenizer, path, cfg.model)
    if extra is not None:
        extra(path)
    # Write then rename, so a kill mid-save never leaves a checkpoint that looks complete.
    torch.save(state, path / "trainer_state.tmp")
    (path / "trainer_state.tmp").replace(path / "trainer_state.pt")
    (path / "agentrl_config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    _point_latest(out_dir, path)
    return path


def _point_latest(out_dir: Path, path: Path) -> None:
    tmp = out_dir / "checkpoints" / "latest.tmp"
    tmp.write_text(path.name)
    tmp.replace(out_dir / "checkpoints" / "latest")


class Evaluator:
    """Plays held-out seeds with the current policy at the evaluation temperature.

    With several ranks each plays its contiguous share of the seeds and the metrics are those
    of all episodes (every rank gets them)."""

    def __init__(self, cfg: RunConfig, backend, tokenizer, dist: Dist | None = None):
        rc = cfg.rollout
        self.cfg = cfg
        self.backend = backend
        self.tokenizer = tokenizer
        self.dist = dist or Dist()
        lo, hi = shard(cfg.trainer.eval_episodes, self.dist.world, self.dist.rank)
        self.envs = make_pool(cfg.env_name, cfg.env_kwargs, max(hi - lo, 1), rc.pool_config())
        self.seeds = [EVAL_SEED_BASE + k for k in range(lo, hi)]
        self.sampling = Sampling(
            max_new_tokens=rc.max_new_tokens,
            temperature=rc.eval_temperature,
            top_p=rc.top_p,
            top_k=rc.top_k,
            stop_strings=("</action>",) if rc.action_format == "tag" else (),
        )

    def run(self) -> tuple[dict[str, float], list[TrajectoryGroup]]:
        # Sampled evaluations draw from a stream of their own, the same at every evaluation:
        # the score is a function of the policy alone (a checkpoint re-evaluated scores the
        # same; successive evaluations share their random numbers, so their difference is the
        # policy's), and training's sampling does not depend on how often it is evaluated.
        with torch.random.fork_rng(devices=_cuda_devices()):
            torch.manual_seed(self.cfg.trainer.seed + EVAL_SEED_BASE + self.dist.rank)
            groups = collect(
                self.envs,
                self.seeds,
                self.backend,
                self.tokenizer,
                self.cfg.rollout,
                self.sampling,
                options={"split": "eval"},
            )
        all_groups, _ = gather_groups(groups, self.dist)
        batch = StepBatch.from_groups(all_groups)
        metrics = {**env_metrics(batch, "eval"), **per_type_success(all_groups, "eval")}
        return {**metrics, **env_scores(all_groups, "eval")}, groups


def _cuda_devices() -> list[int]:
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


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


class RunDirInUse(RuntimeError):
    """Another live process holds the run directory's lock."""


@contextmanager
def exclusive_run_dir(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out_dir`` for the duration of a run.

    Two processes writing checkpoints and ``metrics.jsonl`` into one folder corrupt each other
    silently; the second one gets :class:`RunDirInUse` instead. The lock is an ``flock`` on
    ``<out_dir>/.agentrl.lock``: the kernel releases it when the process exits, however it
    exits (a crash or ``kill -9`` included), so a killed run never leaves a stale lock.
    """
    import fcntl

    path = out_dir / ".agentrl.lock"
    fh = path.open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "unknown"
        fh.close()
        raise RunDirInUse(
            f"{out_dir} is in use by another agentrl run (pid {holder}); wait for it to end or "
            "choose another trainer.out_dir"
        ) from None
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def load_trainer_state(path: Path) -> dict:
    """Read a checkpoint's ``trainer_state.pt`` with ``weights_only=True``.

    The state holds tensors, numbers, strings and containers only; the restricted unpickler
    refuses anything else, so resuming from a run folder of unknown origin cannot execute code.
    """
    import pickle

    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise RuntimeError(
            f"{path} holds objects other than tensors, numbers and containers; refusing to load "
            f"it (it may execute code). Details: {exc}"
        ) from None


def check_resume_world(path: Path, world: int) -> None:
    """Refuse to resume checkpoint ``path`` with another world size than the one that wrote it
    (the optimizer shards and per-rank states would not match the ranks)."""
    # One process writes trainer_state.pt (with the optimizer: large, so not read here);
    # several ranks write small trainer_state_rank<r>.pt files that record the world size.
    if (path / "trainer_state.pt").exists():
        saved = 1
    else:
        saved = int(load_trainer_state(path / "trainer_state_rank0.pt").get("world_size", 1))
    if saved != world:
        raise ConfigError(
            f"{path} was written by {saved} rank(s) and this run has {world}: resume with the "
            "same world size (torchrun --nproc_per_node x --nnodes), or start a new run from "
            f"its weights with model.name_or_path={path} (optimizer state is then not carried "
            "over)"
        )


def _metrics_rows_kept(path: Path, start: int) -> None:
    """On resume, drop ``metrics.jsonl`` rows past the checkpoint: those iterations are replayed.

    From scratch (``start == 0``) nothing is kept: iteration 0 (the untrained evaluation) is
    written again, and keeping the old row would leave two of them.
    """
    if not path.exists():
        return
    rows = path.read_text().splitlines()
    kept = [ln for ln in rows if ln and start and json.loads(ln)["iteration"] <= start]
    path.write_text("".join(k + "\n" for k in kept))


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


def train(cfg: RunConfig, out_dir: str | Path) -> dict[str, float]:
    """Train the policy described by ``cfg``; return the last iteration's metrics.

    Under ``torchrun`` every rank calls this with the same config (SPMD, see
    :mod:`agentrl.run.distributed`); rank 0 chooses the run folder (its ``out_dir``; the
    others' is ignored), holds an exclusive lock on it (:func:`exclusive_run_dir`) and writes
    the logs, the others only their shard of the state. At the end rank 0 prints a summary
    (:func:`print_summary`).
    """
    device = _device(cfg.trainer.device)
    dist = init_distributed(cfg.trainer.dist_timeout_s, device.type == "cuda")
    failed = True
    try:
        check_shards(cfg, dist.world)
        # One run, one folder: without trainer.out_dir each rank's Hydra picks a folder of its
        # own (timestamped), which would split the checkpoint shards across folders.
        out_dir = Path(dist.from_main(str(out_dir)))
        out_dir.mkdir(parents=True, exist_ok=True)
        if dist.enabled and device.type == "cuda":
            device = torch.device("cuda", dist.local_rank)
        lock = exclusive_run_dir(out_dir) if dist.is_main else nullcontext()
        with lock:
            dist.barrier()  # no rank starts writing before rank 0 holds the lock
            trainer = Trainer(cfg, out_dir, dist, device)
            metrics = trainer.run()
        print_summary(out_dir, trainer.last_checkpoint, dist.is_main)
        failed = False
        return metrics
    except BaseException as exc:
        if dist.enabled and not isinstance(exc, ConfigError):
            # Said before leaving: the other ranks fail only once this one has left, so this
            # line comes before their connection errors in the job's output.
            log.error(
                "rank %d of %d failed (%s: %s); leaving the job so that torchrun stops it",
                dist.rank,
                dist.world,
                type(exc).__name__,
                exc,
            )
        raise
    finally:
        shutdown(dist, failed=failed)


def run_summary(rows: list[dict], out_dir: Path, checkpoint: Path | None) -> str:
    """The closing block of a run, from its ``metrics.jsonl`` rows: final train and eval
    success (with the untrained evaluation of iteration 0, when there was one), where the
    run is, its last checkpoint and how to view it."""
    lines = []
    trained = [r for r in rows if "env/success" in r]
    evals = [r for r in rows if "eval/success" in r]
    if trained:
        last = trained[-1]
        lines.append(
            f"  train success   {last['env/success']:.3f}  (iteration {last['iteration']})"
        )
    if evals:
        last = evals[-1]
        untrained = next((r for r in evals if r["iteration"] == 0), None)
        text = f"  eval success    {last['eval/success']:.3f}  (iteration {last['iteration']}"
        if untrained is not None and untrained is not last:
            text += f"; untrained, iteration 0: {untrained['eval/success']:.3f}"
        lines.append(text + ")")
    lines += [
        f"  run folder      {out_dir}",
        f"  last checkpoint {checkpoint if checkpoint is not None else 'none saved'}",
        f"  view it with    tensorboard --logdir {out_dir / 'tb'}",
    ]
    return "\n".join(["", "agentrl: run finished", *lines])


def print_summary(out_dir: Path, checkpoint: Path | None, is_main: bool) -> None:
    """Print :func:`run_summary` to stdout (visible even when logging is quiet); only the
    main rank prints, the others hold no ``metrics.jsonl`` of their own."""
    if not is_main:
        return
    path = out_dir / "metrics.jsonl"
    rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln] if path.exists() else []
    print(run_summary(rows, out_dir, checkpoint), flush=True)


def _strip_tokens(groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """The credit inputs of ``groups``: everything but token ids (rewards, anchors, validity,
    texts, the mean sampling log-prob of each step). Small enough to gather to every rank."""
    out = []
    for g in groups:
        trajs = []
        for tr in g.trajectories:
            steps = [
                replace(
                    s,
                    prompt_ids=[],
                    response_ids=[],
                    logprobs=[float(np.mean(s.logprobs))] if s.logprobs else [],
                    observation="",
                )
                for s in tr.steps
            ]
            trajs.append(replace(tr, steps=steps))
        out.append(replace(g, trajectories=trajs))
    return out


def gather_groups(groups: list[TrajectoryGroup], dist: Dist) -> tuple[list[TrajectoryGroup], slice]:
    """Every rank's groups in rank order (the global batch) and this rank's slice of its steps.

    With one process: ``groups`` itself and all its steps. The ranks own contiguous shards of
    the task seeds, so the gathered batch is the batch one process would have collected.
    """
    if not dist.enabled:
        return groups, slice(0, sum(len(t.steps) for g in groups for t in g.trajectories))
    parts = dist.gather(_strip_tokens(groups))
    counts = [sum(len(t.steps) for g in part for t in g.trajectories) for part in parts]
    lo = sum(counts[: dist.rank])
    return [g for part in parts for g in part], slice(lo, lo + counts[dist.rank])


class Trainer:
    """One run: set-up, then ``run()`` = iterations of rollout → credit → update → log → save.

    Attributes that matter between iterations: ``task_rng`` draws the task seeds (identical on
    every rank and for every method with the same ``trainer.seed``), ``rng`` built the tiny
    model's tokenizer corpus, ``local_rng`` shuffles mini-batches and drives a rollout driver
    (per rank; the same object as ``rng`` in a one-process run), ``policy`` is the plain
    transformers model that generates, scores and is saved (a full copy of the FSDP-sharded
    weights under ``learner.strategy=fsdp``), ``learner.model`` the module that trains.
    """

    def __init__(self, cfg: RunConfig, out_dir: Path, dist: Dist, device: torch.device):
        if cfg.rollout.prompt_style == "auto":  # the environment's own prompt layout
            style = env_spec(cfg.env_name).prompt_style
            cfg = replace(cfg, rollout=replace(cfg.rollout, prompt_style=style))
        self.cfg, self.out_dir, self.dist, self.device = cfg, out_dir, dist, device
        tc, rc = cfg.trainer, cfg.rollout
        if not dist.is_main:
            logging.getLogger("agentrl").setLevel(logging.WARNING)  # rank 0 speaks for all
        self.estimator = get_estimator(cfg.algo_name)
        if dist.enabled and self.estimator.driver:
            raise ConfigError(
                f"algo={cfg.algo_name} brings its own rollout driver, which runs in one process "
                "only; launch it without torchrun"
            )
        if dist.enabled and self.estimator.critic:
            raise ConfigError(
                f"algo={cfg.algo_name} trains a critic, which runs in one process only; launch "
                "it without torchrun"
            )
        if rc.dynamic_sampling and self.estimator.driver:
            raise ConfigError(
                f"rollout.dynamic_sampling=true: algo={cfg.algo_name} samples its own batches "
                "(a rollout driver); turn dynamic sampling off"
            )
        self.resume_from = _latest_checkpoint(out_dir) if tc.resume else None
        if tc.resume and self.resume_from is None:
            log.info("trainer.resume: no checkpoint in %s, starting from scratch", out_dir)
        if self.resume_from is not None:  # refused before anything in the folder is written
            check_resume_world(self.resume_from, dist.world)
        self.last_checkpoint = self.resume_from
        if dist.is_main:
            (out_dir / "run_config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        threads, why = choose_num_threads(
            tc.num_threads,
            cores=len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count(),
            load=os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0,
            omp_env=os.environ.get("OMP_NUM_THREADS"),
        )
        torch.set_num_threads(threads)
        log.info("torch CPU threads: %d (%s)", threads, why)
        torch.manual_seed(tc.seed)
        self.rng = np.random.default_rng(tc.seed)
        # Model building draws from rng identically on every rank: same initial weights.
        model, self.tokenizer = _build_model(cfg, self.rng, self.resume_from)
        model.to(device)
        self.n_params = sum(p.numel() for p in model.parameters())
        # Task seeds come from a stream of their own: every estimator, loss and rank draws the
        # same tasks for the same trainer.seed, whatever else consumes random numbers (paired
        # comparisons in the benchmarks; identical shards on every rank).
        self.task_rng = np.random.default_rng([tc.seed, 0x7A5C5])
        self.local_rng = self.rng
        if dist.enabled:  # sampling and shuffling differ per rank, deterministically
            torch.manual_seed(tc.seed + 1_000_003 * (dist.rank + 1))
            self.local_rng = np.random.default_rng([tc.seed, dist.rank])
        lo, hi = shard(rc.n_tasks, dist.world, dist.rank)
        self.task_slice = slice(lo, hi)
        self.envs = make_pool(
            cfg.env_name, cfg.env_kwargs, max(hi - lo, 1) * rc.group_size, rc.pool_config()
        )
        strategy = resolve_strategy(cfg.learner.strategy, dist.world, device.type == "cuda")
        # FSDP shards the training module in place; generation, scoring and saving use a full
        # copy refreshed after every update (as a vLLM engine is), so ranks never wait on
        # each other's generate calls.
        self.policy = copy.deepcopy(model) if strategy == "fsdp" else model
        self.backend = make_backend(cfg, self.policy, self.tokenizer, out_dir)
        self.learner = Learner(
            model,
            cfg.learner,
            self.tokenizer.pad_token_id,
            temperature=rc.temperature,
            total_iters=tc.steps,
            max_response_tokens=rc.max_new_tokens,
            dist=dist,
            banned_ids=banned_token_ids(self.tokenizer),
        )
        self.sampling = Sampling(
            max_new_tokens=rc.max_new_tokens,
            temperature=rc.temperature,
            top_p=rc.top_p,
            top_k=rc.top_k,
            stop_strings=("</action>",) if rc.action_format == "tag" else (),
        )
        for message in startup_warnings(cfg, self.estimator):
            log.warning(message)
        self.scorer = None
        if self.estimator.needs_scorer:
            from agentrl.learn.scoring import PolicyScorer

            self.scorer = PolicyScorer(
                self.policy,
                self.tokenizer,
                temperature=rc.temperature or 1.0,
                max_prompt_tokens=rc.max_prompt_tokens,
            )
        self.evaluator = (
            Evaluator(cfg, self.backend, self.tokenizer, dist) if tc.eval_every else None
        )
        self.driver = None
        if self.estimator.driver:  # the estimator samples its own batches (AC2)
            module, _, cls = self.estimator.driver.partition(":")
            self.driver = getattr(importlib.import_module(module), cls)(
                cfg, self.policy, self.tokenizer, self.backend
            )
        self.critic = None
        if self.estimator.critic:  # the estimator's learned value function (GAE)
            module, _, cls = self.estimator.critic.partition(":")
            self.critic = getattr(importlib.import_module(module), cls)(
                cfg, self.policy, self.tokenizer
            )
        # The components above may draw from torch's generator (an nn.Linear value head is
        # initialised randomly before it is zeroed): re-seed, so sampling starts from the same
        # state for every estimator and loss with the same trainer.seed (paired benchmarks).
        # A resumed run then restores the saved state below.
        torch.manual_seed(tc.seed + 1_000_003 * (dist.rank + 1) if dist.enabled else tc.seed)
        self.start = 0
        self.decode_total = 0.0
        # A stateful estimator's state (plain data), carried from iteration to iteration and
        # saved with checkpoints; identical on every rank (credit runs on the gathered batch).
        self.credit_state = None
        if self.resume_from is not None:
            self._restore(self.resume_from)
        log.info(
            "model: %s parameters, vocab %d, device %s, %d rank(s) (%s); writing to %s",
            f"{self.n_params:,}",
            len(self.tokenizer),
            device,
            dist.world,
            self.learner.strategy,
            out_dir,
        )

    # -- state -------------------------------------------------------------------------------

    def _state(self, iteration: int) -> dict:
        state = {
            "iteration": iteration,
            "world_size": self.dist.world,
            "learner": self.learner.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "numpy_rng": self.rng.bit_generator.state,
            "task_rng": self.task_rng.bit_generator.state,
            "decode_tokens_total": self.decode_total,
        }
        if self.dist.enabled:
            state["local_numpy_rng"] = self.local_rng.bit_generator.state
            del state["learner"]["optimizer"]  # sharded with torch.distributed.checkpoint
        if self.driver is not None:
            state["driver"] = self.driver.state_dict()
        if self.credit_state is not None:
            state["credit_state"] = self.credit_state
        if self.critic is not None:
            state["critic"] = self.critic.state_dict()
        return state

    def _restore(self, path: Path) -> None:
        name = f"trainer_state_rank{self.dist.rank}.pt" if self.dist.enabled else "trainer_state.pt"
        if not (path / name).exists():  # written with another world size: read what is there
            name = next(
                n for n in ("trainer_state.pt", "trainer_state_rank0.pt") if (path / n).exists()
            )
        state = load_trainer_state(path / name)
        if self.dist.enabled:
            from agentrl.learn.parallel import load_optimizer

            # No shards: saved before the first step (trainer.save_initial), when the
            # optimizer had no state yet; it starts fresh, as it did then.
            if (path / "optimizer").exists():
                load_optimizer(self.learner.model, self.learner.optimizer, path / "optimizer")
            state["learner"]["optimizer"] = self.learner.optimizer.state_dict()
            self.local_rng.bit_generator.state = state["local_numpy_rng"]
        self.learner.load_state_dict(state["learner"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        self.rng.bit_generator.state = state["numpy_rng"]
        self.task_rng.bit_generator.state = state["task_rng"]
        self.start = int(state["iteration"])
        self.decode_total = float(state.get("decode_tokens_total", 0.0))
        if self.driver is not None and "driver" in state:
            self.driver.load_state_dict(state["driver"])
        self.credit_state = state.get("credit_state")
        if self.critic is not None and "critic" in state:
            self.critic.load_state_dict(state["critic"])
        log.info("resumed from %s (iteration %d)", path, self.start)

    def save(self, iteration: int) -> Path:
        """Write checkpoint ``iteration``: the HF model (rank 0), the optimizer (sharded with
        ``torch.distributed.checkpoint`` on several ranks), each rank's state; then point
        ``latest`` at it, last, so a checkpoint that ``latest`` names is complete."""
        if not self.dist.enabled:
            return save_checkpoint(
                self.policy,
                self.tokenizer,
                self.cfg,
                self.out_dir,
                iteration,
                self._state(iteration),
                extra=self.critic.save if self.critic is not None else None,
            )
        from agentrl.learn.parallel import save_optimizer

        path = self.out_dir / "checkpoints" / f"iter-{iteration:06d}"
        if self.dist.is_main:
            path.mkdir(parents=True, exist_ok=True)
            save_model(self.policy, self.tokenizer, path, self.cfg.model)
            (path / "agentrl_config.json").write_text(json.dumps(self.cfg.to_dict(), indent=2))
        self.dist.barrier()
        # torch initialises an empty optimizer's state for saving by taking a step with lr 0,
        # which counts as a step in Adam's bias correction: before the first update
        # (trainer.save_initial) there is nothing to save, so nothing is touched. The ranks
        # decide together, since saving is a collective.
        if self.dist.max([float(bool(self.learner.optimizer.state))])[0] > 0:
            save_optimizer(self.learner.model, self.learner.optimizer, path / "optimizer")
        name = f"trainer_state_rank{self.dist.rank}"
        torch.save(self._state(iteration), path / f"{name}.tmp")
        (path / f"{name}.tmp").replace(path / f"{name}.pt")
        self.dist.barrier()
        if self.dist.is_main:
            _point_latest(self.out_dir, path)
        return path

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> dict[str, float]:
        from torch.utils.tensorboard import SummaryWriter
        from tqdm.auto import tqdm

        tc, main = self.cfg.trainer, self.dist.is_main
        if tc.save_initial and self.start == 0:
            self.last_checkpoint = self.save(0)
        writer = None
        metrics_path = self.out_dir / "metrics.jsonl"
        if main:
            # On resume, drop logs past the checkpoint: those iterations are replayed (from
            # scratch, iteration 0 is logged again, so everything goes).
            start = self.start
            writer = SummaryWriter(str(self.out_dir / "tb"), purge_step=start + 1 if start else 0)
            _metrics_rows_kept(metrics_path, start)
        if self.evaluator is not None and self.start == 0:
            # The untrained policy's score: the baseline every later evaluation is compared with.
            initial, _ = self.evaluator.run()
            if main:
                for k, v in initial.items():
                    writer.add_scalar(k, v, 0)
                with metrics_path.open("a") as fh:
                    fh.write(json.dumps({"iteration": 0, **initial}) + "\n")
            log.info("iter 0 (untrained)  eval success %.3f", initial["eval/success"])
        metrics: dict[str, float] = {}
        bar = tqdm(
            range(self.start, tc.steps),
            desc="train",
            disable=not (tc.progress and main),
            dynamic_ncols=True,
            initial=self.start,
            total=tc.steps,
        )
        for it in bar:
            metrics = self.iteration()
            last = it + 1 == tc.steps
            eval_groups: list[TrajectoryGroup] = []
            if self.evaluator is not None and ((it + 1) % tc.eval_every == 0 or last):
                eval_metrics, eval_groups = self.evaluator.run()
                metrics.update(eval_metrics)
            if main:
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
            _log_iteration(it + 1, tc.steps, metrics)
            if last or (tc.save_every and (it + 1) % tc.save_every == 0):
                self.last_checkpoint = self.save(it + 1)
                log.info("saved checkpoint %s", self.last_checkpoint)
        if writer is not None:
            writer.close()
        self.envs.close()
        if self.evaluator is not None:
            self.evaluator.envs.close()
        return metrics

    def iteration(self) -> dict[str, float]:
        """One iteration: rollout (this rank's tasks) → credit (global) → update → sync."""
        rc, dist = self.cfg.rollout, self.dist
        t0 = time.perf_counter()
        # Drawn globally (identical on every rank), then each rank plays its own shard.
        seeds = self.task_rng.integers(0, EVAL_SEED_BASE - 1, size=rc.n_tasks)
        if self.driver is not None:
            groups, driver_metrics = self.driver.collect(self.local_rng)
        else:
            local_seeds = seeds[self.task_slice]
            groups = collect(
                self.envs, local_seeds, self.backend, self.tokenizer, rc, self.sampling
            )
            driver_metrics = {}
        first_draw = groups  # the env/ metrics describe it, with or without dynamic sampling
        if rc.dynamic_sampling:  # DAPO: only groups whose returns differ reach the learner
            groups, sampled = self._dynamic_sampling(groups)
            driver_metrics.update(sampled)
        t1 = time.perf_counter()
        # Credit sees the whole batch on every rank, so every estimator gives the numbers one
        # process would; each rank then trains on its own steps.
        all_groups, mine = gather_groups(groups, dist)
        batch = StepBatch.from_groups(all_groups)
        # Built once per batch and shared; only estimators that declare the need get it. The
        # estimator sees the batch without lost episodes (crashed env workers), so the graph too.
        graph = build_graph(batch.without_lost()) if self.estimator.needs_graph else None
        adv = compute_advantages(
            self.cfg.algo_name,
            batch,
            self.cfg.algo,
            graph=graph,
            scorer=self.scorer,
            state=self.credit_state,
            critic=self.critic,
        )
        self.credit_state = adv.state
        # Headroom and partial-credit conflict (global: the gathered batch); cheap, always on.
        diagnostics = batch_diagnostics(batch, all_groups, adv.step)
        t2 = time.perf_counter()
        steps = flat_steps(groups)
        # Lost episodes give no gradient at all (policy, KL and entropy terms alike).
        samples = [
            Sample(s.prompt_ids, s.response_ids, list(s.logprobs), float(a), group=int(g))
            for s, a, g, lost in zip(
                steps, adv.step[mine], batch.step_group[mine], batch.step_lost[mine]
            )
            if not lost
        ]
        self.backend.sleep()  # vLLM sleep mode: the update gets the engine's memory
        learn = self.learner.update(samples, self.local_rng)
        if self.driver is not None:
            driver_metrics.update(self.driver.after_update(self.local_rng))
        if self.critic is not None:  # after the policy's update, as PPO's value step
            driver_metrics.update(self.critic.after_update(batch, adv, self.local_rng))
        if self.policy is not self.learner.module:  # FSDP: refresh the full copy
            from agentrl.learn.parallel import full_state_dict

            self.policy.load_state_dict(full_state_dict(self.learner.model, to_rank0_cpu=False))
        self.backend.sync(self.policy)
        t3 = time.perf_counter()
        gen_tokens = dist.sum([sum(len(s.response_ids) for s in steps)])[0]
        # Decoding work: AC2 also decodes refill attempts and critic answers.
        decoded = driver_metrics.pop("perf/decode_tokens", float(gen_tokens))
        self.decode_total += decoded
        n_params = self.n_params
        env_groups = all_groups
        if first_draw is not groups:  # dynamic sampling: the policy's success, not the kept's
            env_groups, _ = gather_groups(first_draw, dist)
        return {
            **env_metrics(StepBatch.from_groups(env_groups)),
            **per_type_success(env_groups, "env"),
            **env_scores(env_groups, "env"),
            **adv.metrics,
            **diagnostics,
            **learn,
            "perf/rollout_s": t1 - t0,
            "perf/credit_s": t2 - t1,
            "perf/learn_s": t3 - t2,
            "perf/gen_tokens_per_s": gen_tokens / max(t1 - t0, 1e-9),
            "perf/iteration_s": t3 - t0,
            "perf/decode_tokens": decoded,
            "perf/decode_flops": 2.0 * n_params * decoded,
            "perf/decode_tokens_total": self.decode_total,
            "perf/decode_flops_total": 2.0 * n_params * self.decode_total,
            **driver_metrics,
        }

    def _dynamic_sampling(
        self, groups: list[TrajectoryGroup]
    ) -> tuple[list[TrajectoryGroup], dict[str, float]]:
        """DAPO's dynamic sampling on this rank's share of the tasks.

        Keeps the groups of ``groups`` whose returns differ (:func:`informative_group`) and rolls
        out rounds of as many new tasks (seeds from ``local_rng``: per rank, saved with
        checkpoints, and leaving the shared task stream alone) until this rank holds as many
        informative groups as it had tasks, or ``rollout.dynamic_sampling_max_rounds`` rounds
        were played; surplus groups of the last round are dropped. Metrics (over all ranks):
        ``rollout/informative_frac`` of the first round, ``rollout/resampled_groups`` drawn
        after it, ``rollout/dynamic_rounds`` (the most any rank played), ``rollout/kept_groups``
        and ``rollout/dynamic_capped`` (1 when the cap left the batch short).
        """
        rc = self.cfg.rollout
        want = len(groups)
        kept = [g for g in groups if informative_group(g)]
        first = len(kept)
        rounds, drawn, decoded = 1, 0, _response_tokens(groups)
        while len(kept) < want and rounds < rc.dynamic_sampling_max_rounds:
            seeds = self.local_rng.integers(0, EVAL_SEED_BASE - 1, size=want)
            more = collect(self.envs, seeds, self.backend, self.tokenizer, rc, self.sampling)
            kept.extend(g for g in more if informative_group(g))
            drawn += len(more)
            decoded += _response_tokens(more)
            rounds += 1
        kept = kept[:want]
        total = self.dist.sum([first, want, drawn, len(kept), float(len(kept) < want), decoded])
        most_rounds = self.dist.max([rounds])[0]
        if total[4]:
            log.warning(
                "dynamic sampling: %d of %d groups with differing returns after %d rounds "
                "(rollout.dynamic_sampling_max_rounds); training on those",
                int(total[3]),
                int(total[1]),
                int(most_rounds),
            )
        return kept, {
            "rollout/informative_frac": total[0] / max(total[1], 1.0),
            "rollout/resampled_groups": total[2],
            "rollout/dynamic_rounds": most_rounds,
            "rollout/kept_groups": total[3],
            "rollout/dynamic_capped": float(total[4] > 0),
            "perf/decode_tokens": total[5],  # every round's tokens, dropped groups included
        }


def _response_tokens(groups: list[TrajectoryGroup]) -> int:
    return sum(len(s.response_ids) for g in groups for t in g.trajectories for s in t.steps)


def informative_group(group: TrajectoryGroup, tol: float = 1e-9) -> bool:
    """Whether the returns of ``group``'s episodes differ (DAPO keeps only such groups).

    Lost episodes (failed env workers) are left out, as credit assignment leaves them out;
    returns within ``tol`` (relative to their size, at least absolute) count as equal, so
    rounding in a sum of step rewards does not make a group look informative.
    """
    returns = [t.ret for t in group.trajectories if not t.lost]
    if len(returns) < 2:
        return False
    return max(returns) - min(returns) > tol * max(1.0, max(abs(r) for r in returns))


def _log_iteration(it: int, total: int, metrics: dict[str, float]) -> None:
    extra = f"  eval success {metrics['eval/success']:.3f}" if "eval/success" in metrics else ""
    log.info(
        "iter %d/%d  success %.3f  return %.3f  length %.1f  invalid %.3f  "
        "pg %.4f  (rollout %.1fs, learn %.1fs)%s",
        it,
        total,
        metrics["env/success"],
        metrics["env/return"],
        metrics["env/length"],
        metrics["env/invalid_rate"],
        metrics.get("loss/pg", float("nan")),
        metrics["perf/rollout_s"],
        metrics["perf/learn_s"],
        extra,
    )
