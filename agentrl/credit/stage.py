"""The Credit stage: groups of episodes in, one advantage per step of the whole batch out.

``credit.assign(groups) -> Credited``: the ranks of a job gather each other's credit inputs
(every step without its token ids: rewards, anchors, validity, texts), every rank builds the
same :class:`~agentrl.credit.batch.StepBatch` of the whole batch, the trajectory graph when the
estimator needs one, and asks the estimator for its advantages; each rank then keeps the slice
of its own steps. So every estimator gives exactly the numbers of one process on the same
batch. What an estimator carries between iterations lives here too: a stateful estimator's
state, a scorer (the policy rescoring texts) and a learned critic. ``state_dict`` holds the
estimator's state and the critic's weights for checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from agentrl.credit.batch import StepBatch, TrajectoryGroup
from agentrl.credit.diagnostics import batch_diagnostics
from agentrl.credit.estimators import (
    Advantages,
    Critic,
    Scorer,
    compute_advantages,
    get_estimator,
)
from agentrl.credit.graph import build_graph


class Gatherer(Protocol):
    """All-gather over the ranks of a job (``agentrl.run.distributed.Dist``)."""

    rank: int

    @property
    def enabled(self) -> bool: ...

    def gather(self, obj: Any) -> list[Any]: ...


class NoGather:
    """One process: nothing to gather."""

    rank = 0
    enabled = False

    def gather(self, obj: Any) -> list[Any]:
        return [obj]


def credit_inputs(groups: Sequence[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """``groups`` without token ids (rewards, anchors, validity, texts, the mean sampling
    log-prob of each step): what credit reads, small enough to gather to every rank."""
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


def gather_groups(
    groups: list[TrajectoryGroup], dist: Gatherer
) -> tuple[list[TrajectoryGroup], slice]:
    """Every rank's groups in rank order (the global batch) and this rank's slice of its steps.

    With one process: ``groups`` itself and all its steps. The ranks own contiguous shards of
    the task seeds, so the gathered batch is the batch one process would have collected.
    """
    if not dist.enabled:
        return groups, slice(0, sum(len(t.steps) for g in groups for t in g.trajectories))
    parts = dist.gather(credit_inputs(groups))
    counts = [sum(len(t.steps) for g in part for t in g.trajectories) for part in parts]
    lo = sum(counts[: dist.rank])
    return [g for part in parts for g in part], slice(lo, lo + counts[dist.rank])


@dataclass
class Credited:
    """The Credit stage's answer for one iteration.

    Attributes:
        batch: the whole batch's :class:`StepBatch` (every rank's steps, N in all).
        groups: the whole batch's groups (token ids only in this rank's, if several ranks).
        advantages: the estimator's :class:`Advantages`, (N,) per step.
        mine: this rank's steps within ``batch`` (``batch.step_*[mine]``).
        metrics: ``credit/`` and ``diag/`` metrics of the whole batch.
    """

    batch: StepBatch
    groups: list[TrajectoryGroup]
    advantages: Advantages
    mine: slice
    metrics: dict[str, float]


class CreditStage:
    """Assigns credit with estimator ``name`` (config ``cfg``) over the gathered batch.

    ``scorer`` (for estimators registered with ``needs_scorer``) and ``critic`` (``critic=``)
    are built by the trainer and handed in; the stage keeps the estimator's state between
    iterations.
    """

    def __init__(
        self,
        name: str,
        cfg: Any,
        dist: Gatherer | None = None,
        scorer: Scorer | None = None,
        critic: Critic | None = None,
    ):
        self.name, self.cfg = name, cfg
        self.spec = get_estimator(name)
        self.dist: Gatherer = dist or NoGather()
        self.scorer, self.critic = scorer, critic
        self.state: Any = None
        """A stateful estimator's state (plain data), identical on every rank."""

    def assign(self, groups: list[TrajectoryGroup]) -> Credited:
        all_groups, mine = gather_groups(groups, self.dist)
        batch = StepBatch.from_groups(all_groups)
        # Built once per batch and shared; only estimators that declare the need get it. The
        # estimator sees the batch without lost episodes (crashed env workers), so the graph too.
        graph = build_graph(batch.without_lost()) if self.spec.needs_graph else None
        adv = compute_advantages(
            self.name,
            batch,
            self.cfg,
            graph=graph,
            scorer=self.scorer,
            state=self.state,
            critic=self.critic,
        )
        self.state = adv.state
        # Headroom and partial-credit conflict (global: the gathered batch); cheap, always on.
        metrics = {**adv.metrics, **batch_diagnostics(batch, all_groups, adv.step)}
        return Credited(batch, all_groups, adv, mine, metrics)

    def state_dict(self) -> dict:
        out: dict[str, Any] = {}
        if self.state is not None:
            out["credit_state"] = self.state
        if self.critic is not None:
            out["critic"] = self.critic.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        self.state = state.get("credit_state")
        if self.critic is not None and "critic" in state:
            self.critic.load_state_dict(state["critic"])
