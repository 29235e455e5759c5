"""Held-out evaluation and the episode metrics of a batch (``env/``, ``eval/``).

:class:`Evaluator` plays held-out seeds (seeds >= :data:`~agentrl.env_api.EVAL_SEED_BASE`, never
drawn for training) with the current policy at ``trainer.eval_temperature``; with several
ranks each plays its contiguous share and every rank gets the metrics of all episodes.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from agentrl.credit.batch import StepBatch, TrajectoryGroup
from agentrl.credit.stage import gather_groups
from agentrl.env_api import EVAL_SEED_BASE
from agentrl.rollout import Sampling, collect
from agentrl.rollout.pools import make_pool
from agentrl.run.config import RunConfig
from agentrl.run.distributed import Dist, shard


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


def episode_metrics(groups: list[TrajectoryGroup], prefix: str) -> dict[str, float]:
    """Every episode metric of ``groups`` under ``prefix`` (``env`` or ``eval``)."""
    batch = StepBatch.from_groups(groups)
    return {
        **env_metrics(batch, prefix),
        **per_type_success(groups, prefix),
        **env_scores(groups, prefix),
    }


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


def _cuda_devices() -> list[int]:
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


class Evaluator:
    """Plays held-out seeds with the current policy at the evaluation temperature.

    With several ranks each plays its contiguous share of the seeds and the metrics are those
    of all episodes (every rank gets them)."""

    def __init__(self, cfg: RunConfig, backend, tokenizer, dist: Dist | None = None):
        rc, tc = cfg.rollout, cfg.trainer
        self.cfg = cfg
        self.backend = backend
        self.tokenizer = tokenizer
        self.dist = dist or Dist()
        lo, hi = shard(tc.eval_episodes, self.dist.world, self.dist.rank)
        self.envs = make_pool(cfg.env_name, cfg.env_kwargs, max(hi - lo, 1), rc.pool_config())
        self.seeds = [EVAL_SEED_BASE + k for k in range(lo, hi)]
        self.sampling = Sampling(
            max_new_tokens=rc.max_new_tokens,
            temperature=tc.eval_temperature,
            top_p=rc.top_p,
            top_k=rc.top_k,
            stop_strings=("</action>",) if rc.action_format == "tag" else (),
        )

    def run(self) -> tuple[dict[str, float], list[TrajectoryGroup]]:
        """The metrics of all ranks' episodes, and this rank's groups."""
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
        return episode_metrics(all_groups, "eval"), groups

    def close(self) -> None:
        self.envs.close()
