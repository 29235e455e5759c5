"""Settings of the training loop itself (iterations, seeding, output, devices)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentrl.configuration import check
from agentrl.run.loggers import check_loggers


@dataclass(frozen=True)
class TrainerConfig:
    """The outer loop: how long to train, where to write, what to save."""

    steps: int = 20
    """Training iterations (rollout → credit → update); 0 only evaluates the initial policy
    (e.g. a checkpoint given as ``model.name_or_path``) and saves nothing."""
    seed: int = 0
    """Seeds the model initialisation, sampling, task draws and mini-batch order."""
    out_dir: str = ""
    """Where logs and checkpoints go; empty = Hydra's run directory under runs/ (under torchrun
    rank 0's, which every rank then writes to)."""
    save_every: int = 5
    """Save a checkpoint every N iterations (0 = only at the end); the last one is always saved."""
    resume: bool = False
    """Continue from ``<out_dir>/checkpoints/latest`` (model, optimizer, RNG states, iteration)."""
    eval_every: int = 10
    """Evaluate on held-out seeds every N iterations and at the end (0 = never)."""
    eval_episodes: int = 32
    """Episodes per evaluation (one per held-out seed)."""
    eval_temperature: float = 0.0
    """Sampling temperature of evaluation episodes (0 = greedy). Sampled evaluations draw from a
    random stream of their own, the same at every evaluation, so a checkpoint's score is a
    function of its weights."""
    eval_samples: int = 2
    """Evaluation trajectories written to TensorBoard as text."""
    save_initial: bool = False
    """Also save the untrained model as ``iter-000000`` (a baseline for comparisons)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """``auto`` uses CUDA when available."""
    num_threads: int = 0
    """torch CPU threads; 0 = choose (see :func:`agentrl.run.trainer.choose_num_threads`):
    ``OMP_NUM_THREADS`` when set, else the cores the load average leaves free."""
    dist_timeout_s: float = 1800.0
    """Under torchrun: how long any collective may wait for the other ranks before the job
    fails (a hung or dead rank then stops every rank instead of hanging them)."""
    progress: bool = True
    """Show a progress bar."""
    loggers: tuple[str, ...] = ("tensorboard", "jsonl")
    """Where scalars go (:mod:`agentrl.run.loggers`): ``tensorboard``, ``jsonl`` (what the run
    summary and ``python -m agentrl.report`` read), ``wandb``, ``mlflow`` (extras)."""
    rollouts_every: int = -1
    """Write the iteration's episodes as per-turn records to ``rollouts/iter-NNNNNN.jsonl.gz``
    every N iterations and at the end (-1 = at each evaluation; 0 = never); evaluation
    episodes go to ``rollouts/eval-NNNNNN.jsonl.gz`` whenever records are on
    (:mod:`agentrl.credit.rollout_records`)."""
    rollouts_max_chars: int = 2000
    """Size bound of a record's texts: longer ones keep their first and last half around a
    ``…[N characters cut]…`` marker."""

    def __post_init__(self) -> None:
        check(self.steps >= 0, "trainer.steps", self.steps, ">= 0")
        check(
            self.steps > 0 or self.eval_every > 0,
            "trainer.eval_every",
            self.eval_every,
            "> 0 when trainer.steps=0 (an evaluation-only run)",
        )
        check(self.save_every >= 0, "trainer.save_every", self.save_every, ">= 0")
        check(self.eval_every >= 0, "trainer.eval_every", self.eval_every, ">= 0")
        check(self.eval_episodes >= 1, "trainer.eval_episodes", self.eval_episodes, ">= 1")
        check(
            0 <= self.eval_temperature <= 100,
            "trainer.eval_temperature",
            self.eval_temperature,
            "in [0, 100]",
        )
        check(self.num_threads >= 0, "trainer.num_threads", self.num_threads, ">= 0")
        check(self.dist_timeout_s > 0, "trainer.dist_timeout_s", self.dist_timeout_s, "> 0")
        check(self.rollouts_every >= -1, "trainer.rollouts_every", self.rollouts_every, ">= -1")
        check(
            self.rollouts_max_chars >= 0,
            "trainer.rollouts_max_chars",
            self.rollouts_max_chars,
            ">= 0",
        )
        check_loggers(self.loggers)
