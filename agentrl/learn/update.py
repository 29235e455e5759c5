"""The Update stage: this rank's samples with their advantages in, new weights out.

``update.step(samples, batch, advantages, rng) -> metrics`` runs the learner's update
(:class:`~agentrl.learn.learner.Learner`), with hooks around it:

- ``before``: callables run before the update (the vLLM engine's sleep, so the update gets its
  memory);
- ``after``: callables ``(batch, advantages, rng) -> metrics`` run after it, in order (a
  rollout driver's bookkeeping, a critic's value step, refreshing the full copy of an FSDP
  model, syncing the rollout backend's weights).

A new optional part of an iteration's update is one more hook here, never an edit of the
trainer's loop. ``state_dict`` is the learner's (optimizer, schedule); hooks whose objects keep
state (a driver, a critic) are checkpointed by the stage that owns them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from agentrl.credit.batch import StepBatch, TrajectoryGroup, flat_steps
from agentrl.learn.learner import Learner
from agentrl.model.forward import Sample

AfterHook = Callable[[Any, Any, np.random.Generator], dict[str, float] | None]


def training_samples(
    groups: Sequence[TrajectoryGroup], batch: StepBatch, step_adv: np.ndarray, mine: slice
) -> list[Sample]:
    """This rank's steps as learner samples with their advantages.

    Args:
        groups: this rank's groups (with token ids), in the order of its steps in ``batch``.
        batch: the whole batch (N steps); ``mine`` is this rank's slice of it.
        step_adv: (N,) the advantage of every step of the batch.
    Lost episodes (crashed env workers) give no sample at all: no policy, KL or entropy term.
    """
    steps = flat_steps(groups)
    return [
        Sample(s.prompt_ids, s.response_ids, list(s.logprobs), float(a), group=int(g))
        for s, a, g, lost in zip(
            steps, step_adv[mine], batch.step_group[mine], batch.step_lost[mine]
        )
        if not lost
    ]


class UpdateStage:
    """The learner and the hooks around its update (see the module docstring)."""

    def __init__(
        self,
        learner: Learner,
        before: Sequence[Callable[[], None]] = (),
        after: Sequence[AfterHook] = (),
    ):
        self.learner = learner
        self.before = list(before)
        self.after = list(after)

    def step(
        self, samples: Sequence[Sample], batch: Any, advantages: Any, rng: np.random.Generator
    ) -> dict[str, float]:
        for hook in self.before:
            hook()
        metrics = self.learner.update(samples, rng)
        for hook in self.after:
            metrics.update(hook(batch, advantages, rng) or {})
        return metrics

    def state_dict(self) -> dict:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state)
