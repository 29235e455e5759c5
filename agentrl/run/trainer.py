"""The training loop: three stages, one lifecycle, read top to bottom.

:func:`train` takes a validated :class:`~agentrl.run.config.RunConfig` and an output folder and
runs a :class:`Trainer`. Each iteration:

1. the **Sampler** (:mod:`agentrl.rollout.sampler`) plays this rank's share of the iteration's
   task seeds, ``rollout.group_size`` episodes each (plain, DAPO's dynamic sampling, or a
   method's own rollout driver);
2. the **Credit** stage (:mod:`agentrl.credit.stage`) gathers the whole batch's credit inputs,
   builds the trajectory graph if the estimator needs it and gives one advantage per step;
3. the **Update** stage (:mod:`agentrl.learn.update`) runs the learner on this rank's steps,
   then its hooks (a driver's or critic's own step, the FSDP full copy, the backend's weights).

Every ``trainer.eval_every`` iterations the policy plays held-out seeds
(:mod:`agentrl.run.evaluate`). Metrics go to TensorBoard, ``metrics.jsonl`` and the console
(:mod:`agentrl.run.run_log`); checkpoints (:mod:`agentrl.run.checkpoint`) hold the model in
Hugging Face format and the state of each stage plus the random streams, so
``trainer.resume=true`` continues a killed run exactly where its last checkpoint left it.
"""

from __future__ import annotations

import copy
import logging
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import yaml

from agentrl.configuration import ConfigError
from agentrl.credit import get_estimator
from agentrl.credit.stage import gather_groups
from agentrl.env_api import EVAL_SEED_BASE
from agentrl.learn.learner import Learner
from agentrl.learn.parallel import resolve_strategy
from agentrl.learn.update import UpdateStage, training_samples
from agentrl.model import banned_token_ids
from agentrl.rollout.producer import AsyncSampler
from agentrl.rollout.sampler import response_tokens
from agentrl.run import checkpoint as ckpt
from agentrl.run.config import RunConfig
from agentrl.run.distributed import Dist, init_distributed, shutdown
from agentrl.run.evaluate import Evaluator, episode_metrics
from agentrl.run.rollout_records import RolloutRecorder
from agentrl.run.run_log import RunLog, log_iteration, print_summary
from agentrl.run.setup import (
    build_policy,
    check_method_fits,
    check_shards,
    make_backend,
    make_credit,
    make_sampler,
    resolve_device,
    set_threads,
    startup_warnings,
    with_prompt_style,
)

log = logging.getLogger("agentrl")


def train(cfg: RunConfig, out_dir: str | Path) -> dict[str, float]:
    """Train the policy described by ``cfg``; return the last iteration's metrics.

    Under ``torchrun`` every rank calls this with the same config (SPMD, see
    :mod:`agentrl.run.distributed`); rank 0 chooses the run folder (its ``out_dir``; the
    others' is ignored), holds an exclusive lock on it (:func:`~agentrl.run.checkpoint.
    exclusive_run_dir`) and writes the logs, the others only their shard of the state. At the
    end rank 0 prints a summary (:func:`~agentrl.run.run_log.print_summary`).
    """
    device = resolve_device(cfg.trainer.device)
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
        lock = ckpt.exclusive_run_dir(out_dir) if dist.is_main else nullcontext()
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


class Trainer:
    """One run: set-up, then ``run()`` = iterations of sample → credit → update → log → save.

    Attributes that matter between iterations: ``task_rng`` draws the task seeds (identical on
    every rank and for every method with the same ``trainer.seed``), ``rng`` built the tiny
    model's tokenizer corpus, ``local_rng`` shuffles mini-batches and drives sampling refills
    and rollout drivers (per rank; the same object as ``rng`` in a one-process run);
    ``policy`` is the plain transformers model that generates, scores and is saved (a full copy
    of the FSDP-sharded weights under ``learner.strategy=fsdp``); ``sampler``, ``credit`` and
    ``update`` are the three stages.
    """

    def __init__(self, cfg: RunConfig, out_dir: Path, dist: Dist, device: torch.device):
        cfg = with_prompt_style(cfg)
        self.cfg, self.out_dir, self.dist = cfg, out_dir, dist
        tc, rc = cfg.trainer, cfg.rollout
        if not dist.is_main:
            logging.getLogger("agentrl").setLevel(logging.WARNING)  # rank 0 speaks for all
        estimator = get_estimator(cfg.algo_name)
        check_method_fits(cfg, estimator, dist.world)
        resume_from = ckpt.latest_checkpoint(out_dir) if tc.resume else None
        if tc.resume and resume_from is None:
            log.info("trainer.resume: no checkpoint in %s, starting from scratch", out_dir)
        if resume_from is not None:  # refused before anything in the folder is written
            ckpt.check_resume_world(resume_from, dist.world)
        self.last_checkpoint = resume_from
        if dist.is_main:
            (out_dir / "run_config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        set_threads(tc.num_threads)
        torch.manual_seed(tc.seed)
        self.rng = np.random.default_rng(tc.seed)
        # Model building draws from rng identically on every rank: same initial weights.
        model, self.tokenizer = build_policy(cfg, self.rng, resume_from)
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
        strategy = resolve_strategy(cfg.learner.strategy, dist.world, device.type == "cuda")
        # FSDP shards the training module in place; generation, scoring and saving use a full
        # copy refreshed after every update (as a vLLM engine is), so ranks never wait on
        # each other's generate calls.
        self.policy = copy.deepcopy(model) if strategy == "fsdp" else model
        self.backend = make_backend(cfg, self.policy, self.tokenizer, out_dir)
        learner = Learner(
            model,
            cfg.learner,
            self.tokenizer.pad_token_id,
            temperature=rc.temperature,
            total_iters=tc.steps,
            max_response_tokens=rc.max_new_tokens,
            dist=dist,
            banned_ids=banned_token_ids(self.tokenizer),
        )
        for message in startup_warnings(cfg, estimator):
            log.warning(message)
        self.evaluator = (
            Evaluator(cfg, self.backend, self.tokenizer, dist) if tc.eval_every else None
        )
        self.sampler, self.driver = make_sampler(
            cfg, estimator, dist, self.policy, self.tokenizer, self.backend
        )
        if rc.max_staleness:  # a producer thread plays ahead (agentrl/rollout/producer.py)
            if cfg.learner.loss != "decoupled_ppo" and dist.is_main:
                # Measured on the default job (results/async.md): with ppo's clip taken against
                # the stale sampling policy, k = 1 and 2 learned markedly slower than k = 0.
                log.warning(
                    "rollout.max_staleness=%d with learner.loss=%s: the loss clips against the "
                    "policy that sampled each step, up to %d updates old; "
                    "learner.loss=decoupled_ppo is the loss for stale samples.",
                    rc.max_staleness,
                    cfg.learner.loss,
                    rc.max_staleness,
                )
            seed = (tc.seed, dist.rank)
            self.sampler = AsyncSampler(
                self.sampler,
                self.policy,
                self.task_rng,
                rc.max_staleness,
                tc.steps,
                seed,
                dist,
                partial=rc.partial,
            )
            self.backend = self.sampler.backend  # vLLM: shared with the producer under a lock
            if self.evaluator is not None:
                self.evaluator.backend = self.backend
        self.credit = make_credit(cfg, estimator, dist, self.policy, self.tokenizer)
        # Asynchronous: the engine keeps generating during the update, so it never sleeps.
        before = [] if rc.max_staleness else [self.backend.sleep]
        self.update = UpdateStage(learner, before=before, after=self._hooks(learner))
        # The components above may draw from torch's generator (an nn.Linear value head is
        # initialised randomly before it is zeroed): re-seed, so sampling starts from the same
        # state for every estimator and loss with the same trainer.seed (paired benchmarks).
        # A resumed run then restores the saved state below.
        torch.manual_seed(tc.seed + 1_000_003 * (dist.rank + 1) if dist.enabled else tc.seed)
        self.start = 0
        self.decode_total = 0.0
        if resume_from is not None:
            self.restore(resume_from)
        log.info(
            "model: %s parameters, vocab %d, device %s, %d rank(s) (%s); writing to %s",
            f"{self.n_params:,}",
            len(self.tokenizer),
            device,
            dist.world,
            learner.strategy,
            out_dir,
        )

    # -- wiring: which object goes in which stage ---------------------------------------------

    def _hooks(self, learner: Learner) -> list:
        """What runs after the learner's update, in order."""
        hooks = []
        if self.driver is not None:
            hooks.append(lambda batch, adv, rng: self.driver.after_update(rng))
        if self.credit.critic is not None:  # after the policy's update, as PPO's value step
            hooks.append(self.credit.critic.after_update)
        if self.policy is not learner.module:  # FSDP: refresh the full copy

            def refresh(batch, adv, rng):
                from agentrl.learn.parallel import full_state_dict

                self.policy.load_state_dict(full_state_dict(learner.model, to_rank0_cpu=False))

            hooks.append(refresh)
        hooks.append(self._sync)
        return hooks

    def _sync(self, batch, adv, rng) -> None:
        """The new weights to the generator: the asynchronous producer's, else the backend."""
        if isinstance(self.sampler, AsyncSampler):  # it syncs its own engine between batches
            self.sampler.publish(self.policy)
        else:
            self.backend.sync(self.policy)

    # -- state ---------------------------------------------------------------------------------

    def state(self, iteration: int) -> dict:
        """Everything a resume needs besides the weights (:mod:`agentrl.run.checkpoint`)."""
        stages = {
            "sampler": self.sampler.state_dict(),
            "credit": self.credit.state_dict(),
            "update": self.update.state_dict(),
        }
        rng = {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "numpy": self.rng.bit_generator.state,
            "task": self.task_rng.bit_generator.state,
        }
        if self.dist.enabled:
            rng["local"] = self.local_rng.bit_generator.state
            del stages["update"]["optimizer"]  # sharded with torch.distributed.checkpoint
        return {
            "iteration": iteration,
            "world_size": self.dist.world,
            "stages": stages,
            "rng": rng,
            "schedule": {"decode_tokens_total": self.decode_total},
        }

    def restore(self, path: Path) -> None:
        state = ckpt.load_trainer_state(ckpt.state_file(path, self.dist.rank, self.dist.world))
        stages, rng = state["stages"], state["rng"]
        if self.dist.enabled:  # the optimizer's shards, and this rank's own stream
            stages["update"]["optimizer"] = ckpt.load_optimizer_shards(path, self.update.learner)
            self.local_rng.bit_generator.state = rng["local"]
        for name, stage in (("sampler", self.sampler), ("credit", self.credit)):
            stage.load_state_dict(stages[name])
        self.update.load_state_dict(stages["update"])
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        self.rng.bit_generator.state = rng["numpy"]
        self.task_rng.bit_generator.state = rng["task"]
        self.start = int(state["iteration"])
        self.decode_total = float(state["schedule"].get("decode_tokens_total", 0.0))
        log.info("resumed from %s (iteration %d)", path, self.start)

    def save(self, iteration: int) -> Path:
        """Checkpoint ``iteration`` (:func:`agentrl.run.checkpoint.save_checkpoint`)."""
        critic = self.credit.critic
        self.last_checkpoint = ckpt.save_checkpoint(
            self.out_dir,
            iteration,
            self.state(iteration),
            dist=self.dist,
            policy=self.policy,
            tokenizer=self.tokenizer,
            cfg=self.cfg,
            learner=self.update.learner,
            extra=critic.save if critic is not None else None,
        )
        return self.last_checkpoint

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> dict[str, float]:
        from tqdm.auto import tqdm

        tc, main = self.cfg.trainer, self.dist.is_main
        if tc.save_initial and self.start == 0:
            self.save(0)
        runlog = RunLog(self.out_dir, self.start, main, tc.loggers, self.cfg.to_dict())
        records = RolloutRecorder(self.out_dir, tc, self.dist, self.start)
        if self.evaluator is not None and self.start == 0:
            # The untrained policy's score: the baseline every later evaluation is compared with.
            initial, initial_groups = self.evaluator.run()
            records.evaluation(0, initial_groups)
            runlog.write(0, initial)
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
            records.train(it + 1, *self.recorded)
            self.recorded = None  # the episodes are not kept past their iteration
            last = it + 1 == tc.steps
            samples = []
            if self.evaluator is not None and ((it + 1) % tc.eval_every == 0 or last):
                eval_metrics, eval_groups = self.evaluator.run()
                records.evaluation(it + 1, eval_groups)
                metrics.update(eval_metrics)
                samples = eval_groups[: tc.eval_samples]
            runlog.write(it + 1, metrics, samples)
            bar.set_postfix(
                success=f"{metrics['env/success']:.2f}",
                ret=f"{metrics['env/return']:.2f}",
                invalid=f"{metrics['env/invalid_rate']:.2f}",
            )
            log_iteration(it + 1, tc.steps, metrics)
            if last or (tc.save_every and (it + 1) % tc.save_every == 0):
                log.info("saved checkpoint %s", self.save(it + 1))
        runlog.close()
        self.sampler.close()
        if self.evaluator is not None:
            self.evaluator.close()
        return metrics

    def iteration(self) -> dict[str, float]:
        """One iteration: sample (this rank's tasks) → credit (global) → update → sync."""
        t0 = time.perf_counter()
        # Drawn globally (identical on every rank), then each rank plays its own shard.
        seeds = self.task_rng.integers(0, EVAL_SEED_BASE - 1, size=self.cfg.rollout.n_tasks)
        got = self.sampler.collect(seeds, self.local_rng)
        t1 = time.perf_counter()
        credit = self.credit.assign(got.groups)
        self.recorded = (got.groups, credit)  # for the rollout records (RolloutRecorder)
        t2 = time.perf_counter()
        samples = training_samples(got.groups, credit.batch, credit.advantages.step, credit.mine)
        learned = self.update.step(samples, credit.batch, credit.advantages, self.local_rng)
        t3 = time.perf_counter()
        # The env/ metrics describe what the policy played, also when a sampler filtered it.
        played = credit.groups if got.played is None else gather_groups(got.played, self.dist)[0]
        return {
            **episode_metrics(played, "env"),
            **credit.metrics,
            **learned,
            **self.perf(got, t0, t1, t2, t3),
            **got.metrics,
        }

    def perf(self, got, t0: float, t1: float, t2: float, t3: float) -> dict[str, float]:
        """Stage times, generation throughput and decoding work (tokens, FLOPs ≈ 2·params)."""
        gen_tokens, decoded = self.dist.sum([response_tokens(got.groups), got.decoded_tokens])
        self.decode_total += decoded
        return {
            "perf/rollout_s": t1 - t0,
            "perf/credit_s": t2 - t1,
            "perf/learn_s": t3 - t2,
            "perf/gen_tokens_per_s": gen_tokens / max(t1 - t0, 1e-9),
            "perf/iteration_s": t3 - t0,
            "perf/decode_tokens": decoded,
            "perf/decode_flops": 2.0 * self.n_params * decoded,
            "perf/decode_tokens_total": self.decode_total,
            "perf/decode_flops_total": 2.0 * self.n_params * self.decode_total,
        }
