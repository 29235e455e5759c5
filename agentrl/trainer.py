"""The training loop: rollout → credit → PPO update → log → checkpoint, read top to bottom.

:func:`train` takes a validated :class:`~agentrl.runconfig.RunConfig` and an output directory.
Each iteration draws B task seeds, rolls out G episodes per task with the current policy,
flattens them into a :class:`~agentrl.batch.StepBatch`, asks the configured estimator for one
advantage per step, broadcasts it to the response tokens and runs the learner. Metrics go to
TensorBoard (namespaces ``env/``, ``credit/``, ``loss/``, ``perf/``) and the console; the model
is saved in Hugging Face format under ``<out_dir>/checkpoints/``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from agentrl.batch import StepBatch, TrajectoryGroup, flat_steps
from agentrl.credit import compute_advantages, get_estimator
from agentrl.graph import build_graph
from agentrl.learner import Learner, Sample
from agentrl.model import build_tiny_model, build_tokenizer, load_pretrained
from agentrl.prompting import build_prompt
from agentrl.registry import make
from agentrl.rollout import HFBackend, Sampling, collect
from agentrl.runconfig import RunConfig

log = logging.getLogger("agentrl")


def tokenizer_corpus(env, cfg: RunConfig, rng: np.random.Generator) -> list[str]:
    """Prompts and actions from random episodes of ``env``: the tiny tokenizer's training text."""
    texts: list[str] = []
    hist = cfg.rollout.history_length
    for _ in range(cfg.trainer.tokenizer_episodes):
        obs, info = env.reset(seed=int(rng.integers(0, 2**31 - 1)))
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
                )
            )
            action = str(acts[int(rng.integers(len(acts)))])
            texts.extend([action, f"<action>{action}</action>"])
            history.append((obs, action))
            obs, _, term, trunc, info = env.step(action)
            done = term or trunc
    return texts


def env_metrics(batch: StepBatch, groups: list[TrajectoryGroup]) -> dict[str, float]:
    """Success, return, length and invalid-action rate of a batch (``env/`` namespace)."""
    lens = batch.traj_len
    return {
        "env/success": float(batch.traj_won.mean()),
        "env/return": float(batch.traj_return.mean()),
        "env/length": float(lens.mean()),
        "env/invalid_rate": float(1.0 - batch.step_valid.mean()),
        "env/truncated": float(batch.step_truncated.sum() / max(batch.n_trajs, 1)),
    }


def save_checkpoint(model, tokenizer, cfg: RunConfig, out_dir: Path, iteration: int) -> Path:
    """Write model + tokenizer (HF format) and the run state to ``checkpoints/iter-NNNNNN``."""
    path = out_dir / "checkpoints" / f"iter-{iteration:06d}"
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "agentrl_state.json").write_text(
        json.dumps({"iteration": iteration, "config": cfg.to_dict()}, indent=2)
    )
    (out_dir / "checkpoints" / "latest").write_text(path.name)
    return path


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def train(cfg: RunConfig, out_dir: str | Path) -> dict[str, float]:
    """Train the policy described by ``cfg``; return the last iteration's metrics."""
    from torch.utils.tensorboard import SummaryWriter
    from tqdm.auto import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "run_config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    tc, rc = cfg.trainer, cfg.rollout
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    torch.manual_seed(tc.seed)
    rng = np.random.default_rng(tc.seed)
    device = _device(tc.device)

    envs = [make(cfg.env_name, **cfg.env_kwargs) for _ in range(rc.n_tasks * rc.group_size)]
    if cfg.model.name_or_path:
        model, tokenizer = load_pretrained(cfg.model)
    else:
        tokenizer = build_tokenizer(tokenizer_corpus(envs[0], cfg, rng), cfg.model.vocab_size)
        model = build_tiny_model(cfg.model, tokenizer)
    model.to(device)
    backend = HFBackend(model, tokenizer, rc.max_batch_size)
    learner = Learner(
        model,
        cfg.learner,
        tokenizer.pad_token_id,
        temperature=rc.temperature,
        total_iters=tc.steps,
        max_response_tokens=rc.max_new_tokens,
    )
    sampling = Sampling(
        max_new_tokens=rc.max_new_tokens,
        temperature=rc.temperature,
        top_p=rc.top_p,
        top_k=rc.top_k,
        stop_strings=("</action>",) if rc.action_format == "tag" else (),
    )
    estimator = get_estimator(cfg.algo_name)
    scorer = None
    if estimator.needs_scorer:
        from agentrl.scoring import PolicyScorer

        scorer = PolicyScorer(
            model,
            tokenizer,
            temperature=rc.temperature or 1.0,
            max_prompt_tokens=rc.max_prompt_tokens,
        )
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "model: %s parameters, vocab %d, device %s; writing to %s",
        f"{n_params:,}",
        len(tokenizer),
        device,
        out_dir,
    )

    if tc.save_initial:
        save_checkpoint(model, tokenizer, cfg, out_dir, 0)
    writer = SummaryWriter(str(out_dir / "tb"))
    metrics: dict[str, float] = {}
    bar = tqdm(range(tc.steps), desc="train", disable=not tc.progress, dynamic_ncols=True)
    for it in bar:
        t0 = time.perf_counter()
        seeds = rng.integers(0, 2**31 - 1, size=rc.n_tasks)
        groups = collect(envs, seeds, backend, tokenizer, rc, sampling)
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
        t3 = time.perf_counter()
        gen_tokens = sum(len(s.response_ids) for s in steps)
        metrics = {
            **env_metrics(batch, groups),
            **adv.metrics,
            **learn,
            "perf/rollout_s": t1 - t0,
            "perf/credit_s": t2 - t1,
            "perf/learn_s": t3 - t2,
            "perf/gen_tokens_per_s": gen_tokens / max(t1 - t0, 1e-9),
        }
        for k, v in metrics.items():
            writer.add_scalar(k, v, it + 1)
        bar.set_postfix(
            success=f"{metrics['env/success']:.2f}",
            ret=f"{metrics['env/return']:.2f}",
            invalid=f"{metrics['env/invalid_rate']:.2f}",
        )
        log.info(
            "iter %d/%d  success %.3f  return %.3f  length %.1f  invalid %.3f  "
            "pg %.4f  (rollout %.1fs, learn %.1fs)",
            it + 1,
            tc.steps,
            metrics["env/success"],
            metrics["env/return"],
            metrics["env/length"],
            metrics["env/invalid_rate"],
            metrics.get("loss/pg", float("nan")),
            t1 - t0,
            t3 - t2,
        )
        last = it + 1 == tc.steps
        if last or (tc.save_every and (it + 1) % tc.save_every == 0):
            path = save_checkpoint(model, tokenizer, cfg, out_dir, it + 1)
            if last:
                log.info("saved checkpoint %s", path)
    writer.close()
    return metrics
