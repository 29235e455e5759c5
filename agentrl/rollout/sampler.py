"""The Sampler stage: one iteration's task seeds in, this rank's groups of episodes out.

``sampler.collect(seeds, rng) -> Collected`` is what the trainer calls every iteration. Three
kinds compose:

- :class:`Sampler`: plain collection: this rank's share of ``seeds``, ``rollout.group_size``
  episodes each, over the environment pool (:func:`~agentrl.rollout.loop.collect`);
- :class:`DynamicSampling`: DAPO's dynamic sampling around another sampler: groups whose
  episodes all have the same return are dropped and new tasks are rolled out until the batch
  is full again or a round limit is reached;
- :class:`DriverSampler`: a method's own sampling behind the :class:`Driver` protocol (AC2's
  refills, prefixes and chunks; PS-PPO's continuations), which ignores the seeds.

What the stage returns is explicit: :class:`Collected` holds the groups that go on to credit,
the groups the policy played first (what the ``env/`` metrics describe: with dynamic sampling
these differ), and the tokens decoded on the way (refills and dropped groups included). Every
sampler has ``state_dict``/``load_state_dict``, so a checkpoint is the dict of the stages'
states.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from agentrl.credit.batch import TrajectoryGroup
from agentrl.env_api import EVAL_SEED_BASE
from agentrl.rollout.backends import Backend, Sampling
from agentrl.rollout.env_pool import EnvPool
from agentrl.rollout.loop import RolloutConfig, collect

log = logging.getLogger("agentrl")


class Reducer(Protocol):
    """Sums and maxima over the ranks of a job (``agentrl.run.distributed.Dist``)."""

    def sum(self, values: Sequence[float]) -> list[float]: ...

    def max(self, values: Sequence[float]) -> list[float]: ...


class Alone:
    """A one-process :class:`Reducer`: the values themselves."""

    def sum(self, values: Sequence[float]) -> list[float]:
        return [float(v) for v in values]

    max = sum


@dataclass
class Collected:
    """What one iteration's sampling produced on this rank.

    Attributes:
        groups: the groups that go on to credit assignment and the learner.
        played: when a sampler filtered (dynamic sampling), the groups of its first draw: the
            policy's own record, which the ``env/`` metrics describe; None when ``groups`` is
            what the policy played.
        decoded_tokens: response tokens generated on this rank (every round, refills and
            critic answers included): the decoding work of the iteration.
        metrics: the sampler's own metrics (``rollout/``, a driver's namespace).
    """

    groups: list[TrajectoryGroup]
    played: list[TrajectoryGroup] | None
    decoded_tokens: float
    metrics: dict[str, float] = field(default_factory=dict)


def response_tokens(groups: Sequence[TrajectoryGroup]) -> int:
    """Response tokens in ``groups`` (every step of every episode)."""
    return sum(len(s.response_ids) for g in groups for t in g.trajectories for s in t.steps)


class Sampler:
    """Plain collection: this rank's contiguous share ``task_slice`` of the iteration's seeds."""

    def __init__(
        self,
        envs: EnvPool,
        backend: Backend,
        tokenizer,
        cfg: RolloutConfig,
        sampling: Sampling,
        task_slice: slice = slice(None),
    ):
        self.envs, self.backend, self.tokenizer = envs, backend, tokenizer
        self.cfg, self.sampling, self.task_slice = cfg, sampling, task_slice

    def play(self, seeds: Sequence[int]) -> list[TrajectoryGroup]:
        """One group of episodes per seed (all of them, whatever ``task_slice`` says)."""
        return collect(self.envs, seeds, self.backend, self.tokenizer, self.cfg, self.sampling)

    def collect(self, seeds: np.ndarray, rng: np.random.Generator) -> Collected:
        groups = self.play(seeds[self.task_slice])
        return Collected(groups, None, float(response_tokens(groups)))

    def close(self) -> None:
        self.envs.close()

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Nothing to restore: plain collection keeps no state."""


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


class DynamicSampling:
    """DAPO's dynamic sampling around ``inner`` (a :class:`Sampler`), on this rank's share.

    Keeps the groups whose returns differ (:func:`informative_group`) and rolls out rounds of
    as many new tasks (seeds from ``rng``: per rank, saved with checkpoints, and leaving the
    shared task stream alone) until this rank holds as many informative groups as it had
    tasks, or ``max_rounds`` rounds were played; surplus groups of the last round are dropped.
    Metrics (over all ranks, ``reducer``): ``rollout/informative_frac`` of the first round,
    ``rollout/resampled_groups`` drawn after it, ``rollout/dynamic_rounds`` (the most any rank
    played), ``rollout/kept_groups`` and ``rollout/dynamic_capped`` (1 when the cap left the
    batch short).
    """

    def __init__(self, inner: Sampler, max_rounds: int, reducer: Reducer | None = None):
        self.inner, self.max_rounds = inner, max_rounds
        self.reducer: Reducer = reducer or Alone()

    def collect(self, seeds: np.ndarray, rng: np.random.Generator) -> Collected:
        first = self.inner.collect(seeds, rng)
        want = len(first.groups)
        kept = [g for g in first.groups if informative_group(g)]
        n_first, rounds, drawn, decoded = len(kept), 1, 0, first.decoded_tokens
        while len(kept) < want and rounds < self.max_rounds:
            more = self.inner.play(rng.integers(0, EVAL_SEED_BASE - 1, size=want))
            kept.extend(g for g in more if informative_group(g))
            drawn += len(more)
            decoded += response_tokens(more)
            rounds += 1
        kept = kept[:want]
        red = self.reducer
        total = red.sum([n_first, want, drawn, len(kept), float(len(kept) < want)])
        most_rounds = red.max([rounds])[0]
        if total[4]:
            log.warning(
                "dynamic sampling: %d of %d groups with differing returns after %d rounds "
                "(rollout.dynamic_sampling_max_rounds); training on those",
                int(total[3]),
                int(total[1]),
                int(most_rounds),
            )
        metrics = {
            "rollout/informative_frac": total[0] / max(total[1], 1.0),
            "rollout/resampled_groups": total[2],
            "rollout/dynamic_rounds": most_rounds,
            "rollout/kept_groups": total[3],
            "rollout/dynamic_capped": float(total[4] > 0),
        }
        return Collected(kept, first.groups, decoded, {**first.metrics, **metrics})

    def close(self) -> None:
        self.inner.close()

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)


class Driver(Protocol):
    """A method's own sampling (``register_estimator(..., driver="module:Class")``).

    The trainer builds it as ``Class(run_cfg, policy, tokenizer, backend)``. ``collect`` plays
    one iteration's batch (its :attr:`Collected.decoded_tokens` counts all it generated:
    prefix refills, continuations, critic answers), ``after_update`` runs after the learner's
    update (a critic step, a replay buffer's bookkeeping) and returns metrics; its state is
    checkpointed with the Sampler stage.
    """

    def collect(self, rng: np.random.Generator) -> Collected: ...

    def after_update(self, rng: np.random.Generator) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class DriverSampler:
    """A :class:`Driver` as a sampler: the seeds are the driver's business, not the task
    stream's (it keeps its own problems and replay buffer)."""

    def __init__(self, driver: Driver):
        self.driver = driver

    def collect(self, seeds: np.ndarray, rng: np.random.Generator) -> Collected:
        return self.driver.collect(rng)

    def close(self) -> None:
        """The driver owns no pool of the trainer's."""

    def state_dict(self) -> dict:
        return {"driver": self.driver.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "driver" in state:
            self.driver.load_state_dict(state["driver"])
