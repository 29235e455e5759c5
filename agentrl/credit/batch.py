"""Trajectories and the typed step batch that credit estimators consume.

The rollout records every environment step as a :class:`Step` (token ids, sampling log-probs,
reward, termination flags, anchor key, executed action). The episodes of one task form a
:class:`TrajectoryGroup`. :class:`StepBatch` flattens a list of groups into named numpy arrays so
that estimators are vectorised over steps: letters follow STYLE.md — N steps in the batch,
M trajectories, G rollouts per group. Steps are ordered by trajectory, then by turn; trajectories
are ordered by group.

Anchors and actions are interned to integers: ``step_anchor`` ids are unique per
(group, anchor) pair, so anchors never match across different tasks; ``step_action`` ids are
unique per executed action string (an invalid action is the single action ``"<invalid>"``).

Optional per-step costs (``info["costs"]``, named non-negative floats such as ``invalid`` or
``steps``; see :mod:`agentrl.env_api`) become the (N, K) array ``step_cost`` with column names
``cost_names`` (the sorted union of the names the steps report; a name a step does not report
costs 0 there). Each group also gets a *cluster* key (``group_cluster``) that estimators with
history across iterations (BV-Blend, BASIS) pool statistics by: :func:`cluster_key`.

An optional per-step rubric reward (``info["rubric_reward"]``, one finite float, either sign: a
process reward that the environment computes from the transition, read by ``algo=trca``) becomes
the (N,) array ``step_rubric``, 0 where a step reports none; it is None when no step of the
batch reports one. It is kept apart from ``step_reward`` so that estimators can still tell the
environment's own outcome from the shaping.

An episode whose environment (or env worker process) failed is *lost*: it ends truncated
through no fault of the policy (``Step.lost``, ``StepBatch.traj_lost``). Its short length and
missing step penalties say nothing about the policy, so credit assignment leaves it out of
every group statistic and gives it advantage 0, and the learner drops its steps (see
:func:`agentrl.credit.compute_advantages` and :meth:`StepBatch.select_trajs`).
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

INVALID_ACTION = "<invalid>"


@dataclass
class Step:
    """One environment step of one episode."""

    prompt_ids: list[int]
    """Token ids of the prompt the policy saw at this turn."""
    response_ids: list[int]
    """Token ids the policy generated (including a final EOS when it stopped on one)."""
    logprobs: list[float]
    """Sampling log-prob of each response token, same length as ``response_ids``."""
    reward: float
    """Environment reward plus any invalid-action penalty."""
    terminated: bool
    truncated: bool
    anchor: Hashable
    """The environment's state key after ``reset``/before this action (``info['anchor']``)."""
    action: str | None
    """Executed action (canonical string), ``None`` when the response was invalid."""
    valid: bool
    response_text: str = ""
    observation: str = ""
    """The observation the policy acted on (kept for logging sample trajectories)."""
    prompt_text: str = ""
    """The user message of this turn before chat formatting (for rescoring, e.g. RELACE)."""
    lost: bool = False
    """The environment or its worker process failed at this step (``info["worker_error"]``):
    the episode was cut short (truncated, reward 0) through no fault of the policy, so it is
    left out of credit assignment and training."""
    costs: Mapping[str, float] | None = None
    """Named non-negative costs of this step (``info["costs"]`` after the rollout's checks), or
    None when the environment reports none."""
    rubric_reward: float | None = None
    """The step's rubric reward (``info["rubric_reward"]`` after the rollout's checks), or None
    when the environment reports none. Not part of ``reward``."""
    policy_version: int | None = None
    """Version of the weights that sampled the response (the number of learner updates they
    had seen), set by the asynchronous producer (``rollout.max_staleness``); None when not
    recorded (synchronous rollouts: the iteration's own weights)."""


@dataclass
class Trajectory:
    """The steps of one episode; ``won`` is the environment's verdict at the last step."""

    steps: list[Step] = field(default_factory=list)
    won: bool = False
    final_obs: str = ""
    """The observation after the last step."""
    final_prompt: str = ""
    """The user message the policy would have seen after the last step (built like every turn's
    prompt), for critics that bootstrap from the state where an episode was cut; "" if unknown."""
    task_type: str | None = None
    """``info['task_type']`` at the end, for environments that report one (per-type success)."""
    score: float | None = None
    """``info['score']`` at the end, for environments that grade on their own scale (WebShop:
    reward × 100), logged apart from success."""

    @property
    def ret(self) -> float:
        """Undiscounted return: the sum of step rewards."""
        return float(sum(s.reward for s in self.steps))

    @property
    def lost(self) -> bool:
        """Whether the episode was cut short by a failed environment or worker (see
        :attr:`Step.lost`)."""
        return any(s.lost for s in self.steps)


@dataclass
class TrajectoryGroup:
    """G rollouts of the same task (same environment seed)."""

    task: str
    seed: int
    trajectories: list[Trajectory] = field(default_factory=list)
    env: str = ""
    """The environment the episodes came from (its registered name, e.g. ``sokoban``), for
    error messages; empty when unknown."""


def cluster_key(task: str, task_type: str | None) -> str:
    """The cluster of a task for estimators that keep statistics across iterations.

    ``"type:<task_type>"`` when the environment reports a task type (ALFWorld's six task types,
    WebShop's product category), otherwise ``"task:<first 16 hex digits of the SHA-1 of the task
    text>"``: tasks with the same instruction share a cluster (all Sokoban levels share one
    instruction, so Sokoban is one cluster; each proof problem is its own). A hash of the text,
    not Python's salted ``hash``, so keys are the same in every process and after a resume.
    """
    if task_type:
        return f"type:{task_type}"
    return "task:" + hashlib.sha1(task.encode("utf-8", "replace")).hexdigest()[:16]


@dataclass(frozen=True)
class StepTexts:
    """Texts of a batch for estimators that rescore responses (RELACE); N steps, M trajectories.

    Attributes:
        prompts: (N,) the user message each response answered (no chat formatting).
        responses: (N,) the generated text of each step.
        final_obs: (M,) the last observation of each trajectory (after its last step).
        final_prompts: (M,) the user message after each trajectory's last step
            (:attr:`Trajectory.final_prompt`); empty when not recorded.
    """

    prompts: tuple[str, ...]
    responses: tuple[str, ...]
    final_obs: tuple[str, ...]
    final_prompts: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepBatch:
    """A batch of N steps from M trajectories in ``n_groups`` groups, as flat arrays.

    Attributes (shapes):
        step_reward: (N,) float64 — reward of each step.
        step_traj: (N,) int64 — trajectory index in [0, M); steps of a trajectory are
            contiguous and in turn order.
        step_t: (N,) int64 — turn index within its trajectory, 0-based.
        step_anchor: (N,) int64 — interned (group, anchor) id.
        step_action: (N,) int64 — interned executed-action id (invalid → one shared id).
        step_valid: (N,) bool — whether the response parsed to a valid action.
        step_terminated: (N,) bool — the episode ended here with a true end of the task.
        step_truncated: (N,) bool — the episode was cut here by the step limit.
        step_nll: (N,) float64 — mean token negative log-likelihood of the response at
            sampling time (NaN when unknown).
        traj_group: (M,) int64 — group index of each trajectory.
        traj_won: (M,) bool — whether the trajectory solved its task.
        n_groups: number of groups.
        traj_lost: (M,) bool — the episode was cut short by a failed environment or env worker
            (:attr:`Step.lost`); all False when not given. ``step_lost`` is its (N,) view.
        step_cost: (N, K) float64 — non-negative cost ``cost_names[k]`` of each step; (N, 0)
            when not given. ``traj_cost`` is its (M, K) per-episode sum.
        group_cluster: (n_groups,) cluster key of each group (:func:`cluster_key`), or None
            when unknown (estimators then treat all groups as one cluster).
    """

    step_reward: np.ndarray
    step_traj: np.ndarray
    step_t: np.ndarray
    step_anchor: np.ndarray
    step_action: np.ndarray
    step_valid: np.ndarray
    step_terminated: np.ndarray
    step_truncated: np.ndarray
    step_nll: np.ndarray
    traj_group: np.ndarray
    traj_won: np.ndarray
    n_groups: int
    action_names: tuple[str, ...] = ()
    """``action_names[step_action[n]]`` is the executed action string."""
    texts: StepTexts | None = None
    """Prompt/response texts, present for batches built from rollouts."""
    anchor_keys: tuple[Hashable, ...] | None = None
    """The environment's anchor of each interned anchor id (``anchor_keys[step_anchor[n]]``),
    present for batches built from rollouts; used e.g. for similarity clustering."""
    traj_lost: np.ndarray | None = None
    """(M,) bool — lost episodes (see the class docstring); None is normalised to all False."""
    step_cost: np.ndarray | None = None
    """(N, K) float64 — per-step costs, columns named by ``cost_names``; None is (N, 0)."""
    cost_names: tuple[str, ...] = ()
    """Name of each column of ``step_cost``."""
    group_cluster: tuple[str, ...] | None = None
    """(n_groups,) — cluster key of each group (:func:`cluster_key`); None when unknown."""
    step_rubric: np.ndarray | None = None
    """(N,) float64 — rubric reward of each step (``Step.rubric_reward``, 0 where a step has
    none); None when no step of the batch reported one."""

    def __post_init__(self) -> None:
        n = self.step_reward.shape[0]
        for name in (
            "step_traj",
            "step_t",
            "step_anchor",
            "step_action",
            "step_valid",
            "step_terminated",
            "step_truncated",
            "step_nll",
        ):
            arr = getattr(self, name)
            if arr.shape != (n,):
                raise ValueError(f"{name} has shape {arr.shape}, expected ({n},)")
        if self.traj_won.shape != self.traj_group.shape:
            raise ValueError("traj_won and traj_group must have the same shape (M,)")
        if self.traj_lost is None:
            object.__setattr__(self, "traj_lost", np.zeros(self.traj_group.shape, dtype=bool))
        elif self.traj_lost.shape != self.traj_group.shape:
            raise ValueError("traj_lost and traj_group must have the same shape (M,)")
        if self.step_cost is None:
            object.__setattr__(self, "step_cost", np.zeros((n, len(self.cost_names))))
        if self.step_cost.shape != (n, len(self.cost_names)):
            raise ValueError(
                f"step_cost has shape {self.step_cost.shape}, expected ({n}, "
                f"{len(self.cost_names)}) for cost_names {self.cost_names}"
            )
        if not np.all(np.isfinite(self.step_cost) & (self.step_cost >= 0)):
            raise ValueError("step_cost must be finite and non-negative")
        if self.group_cluster is not None and len(self.group_cluster) != self.n_groups:
            raise ValueError(
                f"group_cluster has {len(self.group_cluster)} keys, expected n_groups = "
                f"{self.n_groups}"
            )
        if self.step_rubric is not None and (
            self.step_rubric.shape != (n,) or not np.all(np.isfinite(self.step_rubric))
        ):
            raise ValueError(
                f"step_rubric must be None or a finite (N,) = ({n},) array, got shape "
                f"{self.step_rubric.shape}"
            )
        if not np.all(np.isfinite(self.step_reward)):
            bad = np.flatnonzero(~np.isfinite(self.step_reward))
            raise ValueError(
                f"step_reward is not finite at steps {bad[:10].tolist()} "
                f"(e.g. {self.step_reward[bad[0]]!r}); rewards must be finite numbers"
            )

    @property
    def n_steps(self) -> int:
        return int(self.step_reward.shape[0])

    @property
    def n_trajs(self) -> int:
        return int(self.traj_group.shape[0])

    @property
    def step_group(self) -> np.ndarray:
        """(N,) int64 — group index of each step."""
        return self.traj_group[self.step_traj]

    @property
    def step_lost(self) -> np.ndarray:
        """(N,) bool — whether each step belongs to a lost episode."""
        assert self.traj_lost is not None  # set by __post_init__
        return self.traj_lost[self.step_traj]

    @property
    def n_lost(self) -> int:
        """Number of lost episodes in the batch."""
        return int(np.count_nonzero(self.traj_lost))

    @property
    def traj_len(self) -> np.ndarray:
        """(M,) int64 — number of steps in each trajectory."""
        return np.bincount(self.step_traj, minlength=self.n_trajs)

    @property
    def traj_return(self) -> np.ndarray:
        """(M,) float64 — undiscounted return of each trajectory."""
        return np.bincount(self.step_traj, weights=self.step_reward, minlength=self.n_trajs)

    @property
    def traj_cost(self) -> np.ndarray:
        """(M, K) float64 — each trajectory's summed cost per name of ``cost_names``."""
        assert self.step_cost is not None  # set by __post_init__
        out = np.zeros((self.n_trajs, len(self.cost_names)))
        for k in range(len(self.cost_names)):
            out[:, k] = np.bincount(
                self.step_traj, weights=self.step_cost[:, k], minlength=self.n_trajs
            )
        return out

    def group_clusters(self) -> tuple[np.ndarray, tuple[str, ...]]:
        """Clusters as integers: ((n_groups,) int64 cluster index of each group, the keys).

        Keys are in order of first appearance; a batch without ``group_cluster`` is one cluster
        with the key ``""``.
        """
        keys = self.group_cluster if self.group_cluster is not None else ("",) * self.n_groups
        index: dict[str, int] = {}
        ids = np.fromiter(
            (index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys)
        )
        return ids, tuple(index)

    def select_trajs(self, keep: np.ndarray) -> StepBatch:
        """The batch of the trajectories with ``keep[i]`` true, in their order.

        Trajectories, groups, anchors and actions are renumbered densely in their original
        order (a group none of whose trajectories is kept disappears, so ``n_groups`` may
        shrink); texts and ``anchor_keys`` follow. Steps keep their order, so the result's steps
        are ``self``'s steps where ``keep[step_traj]`` holds.

        Args:
            keep: (M,) bool — which trajectories to keep.
        Returns:
            A :class:`StepBatch` of the kept trajectories.
        """
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (self.n_trajs,):
            raise ValueError(f"keep has shape {keep.shape}, expected ({self.n_trajs},)")
        step_keep = keep[self.step_traj]  # (N,)
        traj_new = np.cumsum(keep) - 1  # new index of each kept trajectory
        groups, traj_group = np.unique(self.traj_group[keep], return_inverse=True)
        # np.unique sorts ids; ids were interned in first-visit order, so that order stays.
        anchor_ids, step_anchor = np.unique(self.step_anchor[step_keep], return_inverse=True)
        action_ids, step_action = np.unique(self.step_action[step_keep], return_inverse=True)
        texts = None
        if self.texts is not None:
            texts = StepTexts(
                prompts=tuple(p for p, k in zip(self.texts.prompts, step_keep) if k),
                responses=tuple(r for r, k in zip(self.texts.responses, step_keep) if k),
                final_obs=tuple(o for o, k in zip(self.texts.final_obs, keep) if k),
                final_prompts=tuple(p for p, k in zip(self.texts.final_prompts, keep) if k),
            )
        names, keys = self.action_names, self.anchor_keys
        return StepBatch(
            step_reward=self.step_reward[step_keep],
            step_traj=traj_new[self.step_traj[step_keep]].astype(np.int64),
            step_t=self.step_t[step_keep],
            step_anchor=step_anchor.astype(np.int64),
            step_action=step_action.astype(np.int64),
            step_valid=self.step_valid[step_keep],
            step_terminated=self.step_terminated[step_keep],
            step_truncated=self.step_truncated[step_keep],
            step_nll=self.step_nll[step_keep],
            traj_group=traj_group.astype(np.int64),
            traj_won=self.traj_won[keep],
            n_groups=len(groups),
            action_names=tuple(names[a] for a in action_ids) if names else (),
            texts=texts,
            anchor_keys=None if keys is None else tuple(keys[a] for a in anchor_ids),
            traj_lost=self.traj_lost[keep],
            step_cost=self.step_cost[step_keep],
            cost_names=self.cost_names,
            group_cluster=None
            if self.group_cluster is None
            else tuple(self.group_cluster[g] for g in groups.tolist()),
            step_rubric=None if self.step_rubric is None else self.step_rubric[step_keep],
        )

    def without_lost(self) -> StepBatch:
        """The batch without its lost episodes (``self`` itself when there are none)."""
        return self.select_trajs(~self.traj_lost) if self.n_lost else self

    @staticmethod
    def from_groups(groups: Sequence[TrajectoryGroup]) -> StepBatch:
        """Flatten groups of trajectories (in order) into a :class:`StepBatch`.

        Raises:
            ValueError: a step's reward is NaN or infinite; the message names the environment,
                the seed, the trajectory and the step.
        """
        traj_group, traj_won, traj_lost, final_obs, final_prompts = [], [], [], [], []
        clusters = []
        steps: list[Step] = []
        step_group: list[int] = []
        step_traj: list[int] = []
        step_t: list[int] = []
        m = 0
        for g, group in enumerate(groups):
            for traj in group.trajectories:
                n = len(traj.steps)
                steps += traj.steps
                step_group += [g] * n
                step_traj += [m] * n
                step_t += range(n)
                traj_group.append(g)
                final_obs.append(traj.final_obs)
                final_prompts.append(traj.final_prompt)
                traj_won.append(traj.won)
                traj_lost.append(traj.lost)
                m += 1
            types = [t.task_type for t in group.trajectories if t.task_type]
            clusters.append(cluster_key(group.task, types[0] if types else None))
        # Column by column over all the steps at once: a cheap policy's batch has thousands of
        # steps, and per-step appends cost more than most estimators.
        columns = list(zip(*map(_STEP_COLUMNS, steps))) if steps else [()] * 11
        rewards, step_anchors, acts, valids, terms, truncs, logprobs = columns[:7]
        prompts, responses, costs, rubric = columns[7:]
        isfinite = math.isfinite
        if not all(map(isfinite, rewards)):
            n = next(n for n, r in enumerate(rewards) if not isfinite(r))
            group = groups[step_group[n]]
            i = step_traj[n] - traj_group.index(step_group[n])
            raise ValueError(
                f"non-finite reward {rewards[n]!r} from environment "
                f"{group.env or '<unknown>'!r}, seed {group.seed}, at step {step_t[n]} "
                f"(0-based) of trajectory {i} of group {step_group[n]} (task {group.task!r}); "
                "the environment must return finite rewards"
            )
        anchors: dict[tuple[int, Hashable], int] = {}
        actions: dict[str, int] = {}
        cols = {
            "reward": rewards,
            "traj": step_traj,
            "t": step_t,
            "anchor": [anchors.setdefault(k, len(anchors)) for k in zip(step_group, step_anchors)],
            "action": [
                actions.setdefault(
                    a if (v and a is not None) else INVALID_ACTION,
                    len(actions),
                )
                for a, v in zip(acts, valids)
            ],
            "valid": valids,
            "term": terms,
            "trunc": truncs,
            # np.mean's call overhead dominates for one-value lists (cheap policies); the mean
            # of one value is that value exactly.
            "nll": [
                -float(lp[0]) if len(lp) == 1 else -float(np.mean(lp)) if lp else np.nan
                for lp in logprobs
            ],
        }
        names = tuple(sorted({k for c in costs if c for k in c}))
        step_cost = np.zeros((len(costs), len(names)))
        for j, k in enumerate(names):
            step_cost[:, j] = [c.get(k, 0.0) if c else 0.0 for c in costs]
        return StepBatch(
            step_reward=np.asarray(cols["reward"], dtype=np.float64),
            step_traj=np.asarray(cols["traj"], dtype=np.int64),
            step_t=np.asarray(cols["t"], dtype=np.int64),
            step_anchor=np.asarray(cols["anchor"], dtype=np.int64),
            step_action=np.asarray(cols["action"], dtype=np.int64),
            step_valid=np.asarray(cols["valid"], dtype=bool),
            step_terminated=np.asarray(cols["term"], dtype=bool),
            step_truncated=np.asarray(cols["trunc"], dtype=bool),
            step_nll=np.asarray(cols["nll"], dtype=np.float64),
            traj_group=np.asarray(traj_group, dtype=np.int64),
            traj_won=np.asarray(traj_won, dtype=bool),
            n_groups=len(groups),
            action_names=tuple(actions),
            texts=StepTexts(
                tuple(prompts), tuple(responses), tuple(final_obs), tuple(final_prompts)
            ),
            anchor_keys=tuple(key for _, key in anchors),
            traj_lost=np.asarray(traj_lost, dtype=bool),
            step_cost=step_cost,
            cost_names=names,
            group_cluster=tuple(clusters),
            step_rubric=None
            if all(r is None for r in rubric)
            else np.array([0.0 if r is None else r for r in rubric], dtype=np.float64),
        )


_STEP_COLUMNS = operator.attrgetter(
    "reward",
    "anchor",
    "action",
    "valid",
    "terminated",
    "truncated",
    "logprobs",
    "prompt_text",
    "response_text",
    "costs",
    "rubric_reward",
)
"""What :meth:`StepBatch.from_groups` reads of a step."""


def flat_steps(groups: Sequence[TrajectoryGroup]) -> list[Step]:
    """The steps of ``groups`` in :class:`StepBatch` order."""
    return [s for g in groups for tr in g.trajectories for s in tr.steps]
