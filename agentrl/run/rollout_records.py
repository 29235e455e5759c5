"""The trainer's rollout records: which iterations are written, by whom, and how they survive
a resume.

The files and their fields are those of :mod:`agentrl.credit.rollout_records`. Training
episodes are written every ``trainer.rollouts_every`` iterations and at the last one (-1: at
the iterations that evaluate; 0: never), with the advantage each step was given; evaluation
episodes at every evaluation while records are on.

Under torchrun every rank turns its own episodes into records (only a rank's own steps still
carry their observations after the Credit stage's gather) and rank 0 gathers and writes them,
numbered across ranks in rank order: the file of a several-rank run is the file one process
would have written. On resume the files past the checkpoint are deleted before the replayed
iterations write them again, and a file is written through a temporary name, so a kill never
leaves a duplicate, a gap or half a file.
"""

from __future__ import annotations

from pathlib import Path

from agentrl.credit.batch import TrajectoryGroup
from agentrl.credit.rollout_records import (
    episode_records,
    prune_records,
    record_path,
    renumber,
    write_records,
)
from agentrl.credit.stage import Credited
from agentrl.run.distributed import Dist
from agentrl.run.trainer_config import TrainerConfig


class RolloutRecorder:
    """Writes a run's rollout records (see the module docstring)."""

    def __init__(self, out_dir: Path, tc: TrainerConfig, dist: Dist, start: int):
        self.out_dir, self.tc, self.dist = out_dir, tc, dist
        if dist.is_main and tc.rollouts_every != 0:
            # From scratch everything goes (-1); on resume the files past the checkpoint.
            prune_records(out_dir, start if start else -1)

    @property
    def enabled(self) -> bool:
        return self.tc.rollouts_every != 0

    def due(self, iteration: int) -> bool:
        """Whether training iteration ``iteration`` (1-based, as in ``metrics.jsonl``) is
        recorded; the same answer on every rank."""
        tc = self.tc
        if tc.rollouts_every == 0:
            return False
        last = iteration == tc.steps
        if tc.rollouts_every < 0:  # at each evaluation (the trainer's rule)
            return tc.eval_every > 0 and (iteration % tc.eval_every == 0 or last)
        return iteration % tc.rollouts_every == 0 or last

    def train(self, iteration: int, groups: list[TrajectoryGroup], credit: Credited) -> None:
        """Record iteration ``iteration``'s episodes (``groups``: this rank's) with the
        advantages ``credit`` gave them, if the iteration is due; a collective under torchrun."""
        if not self.due(iteration):
            return
        adv = credit.advantages
        values = None if adv.values is None else adv.values[credit.mine]
        mine = episode_records(
            groups,
            split="train",
            iteration=iteration,
            policy_version=iteration - 1,
            advantages=adv.step[credit.mine],
            values=values,
            max_chars=self.tc.rollouts_max_chars,
        )
        self._write("train", iteration, mine)

    def evaluation(self, iteration: int, groups: list[TrajectoryGroup]) -> None:
        """Record the evaluation of the policy after ``iteration`` updates (``groups``: this
        rank's episodes); a collective under torchrun."""
        if not self.enabled:
            return
        mine = episode_records(
            groups,
            split="eval",
            iteration=iteration,
            policy_version=iteration,
            max_chars=self.tc.rollouts_max_chars,
        )
        self._write("eval", iteration, mine)

    def _write(self, split: str, iteration: int, mine: list[dict]) -> None:
        parts = self.dist.gather(mine)
        if self.dist.is_main:
            write_records(record_path(self.out_dir, split, iteration), renumber(parts))
