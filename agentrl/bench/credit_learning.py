"""Does better credit make an agent learn faster? Cheap policies on the real environments.

``python -m agentrl.bench credit-learning [--quick] [--update] [--check]`` →
``credit_learning.md``, ``credit_learning.png`` and ``credit_learning.json`` (per-run figures).

The LLM benchmark cannot separate credit methods on 2 CPU cores (results/learning_warm.md); a
policy that costs nothing can. A run trains a cheap policy (:mod:`agentrl.bench.cheap_policy`)
with one registered estimator on one setting (environment) for one seed. Each iteration:

1. draw ``tasks`` training levels (the same draw for every method of a seed) and play ``group``
   sampled episodes on each, recording every step with the trainer's own
   :func:`~agentrl.rollout.loop.record_step` / :func:`~agentrl.rollout.loop.end_trajectory`;
2. assign credit with the trainer's Credit stage, :class:`~agentrl.credit.stage.CreditStage`
   (``StepBatch.from_groups`` → ``build_graph`` → ``compute_advantages``);
3. take one policy-gradient step (:func:`~agentrl.bench.cheap_policy.policy_gradient_step`, the
   learner's clipped surrogate with ratio 1, i.e. REINFORCE). Protocol ``rms`` first divides the
   batch's advantages by their root mean square and uses one learning rate for all methods (it
   compares directions, not the estimators' scales); protocol ``best-lr`` uses the raw
   advantages with each method's best learning rate from a grid, picked on pilot seeds that the
   comparison does not use (it compares methods as users run them).

Within a seed every method plays the same levels, draws the same tasks at every iteration and
starts from the same policy (uniform, or the same warm start). Every ``eval_every`` iterations
the policy is evaluated greedily and sampled, one episode per evaluation level (a sampling
stream of its own, the same at every evaluation): for the tabular policy the evaluation levels
are the training levels (new episodes, not new levels), for the linear policy they are held-out
levels. On synthetic MDPs the evaluation is exact (the policy's success probability). A run's
figure is its success AUC over environment steps (:func:`agentrl.bench.stats.auc`).
"""

from __future__ import annotations

import gc
import json
import math
import os
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.bench.cheap_policy import Choice, LinearPolicy, TabularPolicy, policy_gradient_step
from agentrl.bench.credit_levels import (
    DirectLevel,
    MemoLevel,
    Spot,
    SyntheticEnv,
    policy_success,
)
from agentrl.credit.batch import Step, Trajectory, TrajectoryGroup
from agentrl.credit.estimators import estimator_config, get_estimator, list_estimators
from agentrl.credit.stage import CreditStage
from agentrl.rollout.loop import end_trajectory, record_step

OPEN_QUERY = "search[<your query>]"
CORE = ("grpo", "rloo", "gigpo", "crbc")
"""The methods of ``--quick``."""
LINEAR = (*CORE, "gagpo", "g2po", "graphgpo", "tigpo")
"""The methods of the linear policy's held-out setting: the core ones and the graph methods
that lead on Sokoban 7×7 with the tabular policy."""
TRAIN_BASE, HELD_OUT_BASE = 10_000, 900_000
"""Level seeds: seed s trains on ``TRAIN_BASE + 1000 s + i`` and holds out
``HELD_OUT_BASE + 1000 s + i``."""


def sokoban_restore(env, anchor) -> dict:
    """Reset options that start a Sokoban episode of the current level in the state ``anchor``
    (the player's cell and the box cells: the whole state)."""
    player, boxes = anchor
    return {"level": replace(env.level, player=tuple(player), boxes=tuple(boxes))}


RESTORE: dict[str, Callable[[Any, Hashable], dict]] = {"sokoban": sokoban_restore}
"""Environments whose anchor is their whole state, with the reset options that restore it: the
memo is then shared by every history reaching a state
(:class:`~agentrl.bench.credit_levels.MemoLevel`)."""
DEMO_BY_STATE = frozenset({"sokoban", "webshop"})
"""Environments whose ``demonstration()`` is a function of the state the anchor names (a
planner from the current state). Elsewhere (ALFWorld: the walkthrough holds only while every
command so far followed it) the warm start reads the expert's path from the reset state
(:class:`~agentrl.bench.credit_levels.MemoLevel`'s ``demo_by_state``), so a state's prior never
depends on which run or history reached it first."""
SYNTHETIC_MDP: dict[str, Any] = {"n_states": 24, "n_actions": 4}
"""The random MDPs of the ``synthetic`` setting (:func:`agentrl.credit.synthetic.random_mdp`,
otherwise its defaults): success 0.2–0.8 from every start state under the MDP's behaviour
policy, 1 under the best one."""
PILOT_SEEDS = (1000, 1001, 1002, 1003)
"""Seeds that pick each method's learning rate under ``best-lr`` (not used for verdicts)."""


@dataclass(frozen=True)
class Setting:
    """One environment of the benchmark, its policy and its budget."""

    name: str
    env: str
    """A registered environment, or ``synthetic`` (a random MDP per seed)."""
    env_kwargs: tuple[tuple[str, Any], ...] = ()
    policy: str = "tabular"
    """``tabular`` (evaluated on new episodes of the training levels) or ``linear`` (evaluated
    on held-out levels)."""
    levels: int = 32
    """Training levels of a seed; each iteration draws its tasks among them."""
    tasks: int = 8
    group: int = 8
    iterations: int = 20
    eval_every: int = 4
    eval_levels: int = 32
    warm: float = 0.0
    """Warm start: the initial policy puts this much probability on the environment's
    demonstrated action (the rest uniform over the admissible actions); 0 = uniform."""
    lr: float = 300.0
    """The common learning rate of protocol ``rms`` (the loss is a mean over the batch's
    ~1,500 decisions, so a state's logits move by about lr × its share of them)."""
    lr_grid: tuple[float, ...] = (30.0, 300.0, 3000.0)
    """The learning rates protocol ``best-lr`` tries per method (raw advantages)."""
    invalid_penalty: float = 0.1
    note: str = ""
    sanity: bool = False
    """A sanity row: reported, left out of the figure."""

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.env_kwargs)

    @property
    def synthetic(self) -> bool:
        return self.env == "synthetic"


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "sokoban-7x7",
            "sokoban",
            (("dim_room", (7, 7)), ("num_boxes", 2), ("max_steps", 30)),
            note="7×7 rooms with two boxes, at most 30 moves; uniform start",
        ),
        Setting(
            "alfworld",
            "alfworld",
            (("max_steps", 20),),
            levels=8,
            tasks=4,
            iterations=12,
            eval_levels=8,
            warm=0.7,
            lr=300.0,
            note="generated games with the fast engine, at most 20 actions; warm start; a "
            "smaller budget (a game's step costs milliseconds)",
        ),
        Setting(
            "webshop",
            "webshop",
            (),
            warm=0.3,
            note="the generated catalogue, at most 15 actions; warm start",
        ),
        Setting(
            "synthetic",
            "synthetic",
            tasks=4,
            lr=10.0,
            note="a random MDP per seed (24 states, 4 actions); exact evaluation",
        ),
        Setting(
            "sokoban-6x6",
            "sokoban",
            (("dim_room", (6, 6)), ("num_boxes", 1), ("max_steps", 20)),
            note="sanity row: 6×6 rooms with one box saturate",
            sanity=True,
        ),
        Setting(
            "sokoban-7x7-linear",
            "sokoban",
            (("dim_room", (7, 7)), ("num_boxes", 2), ("max_steps", 30)),
            policy="linear",
            iterations=40,
            eval_every=8,
            lr=0.3,
            note="7×7 rooms with two boxes and a linear policy over the room's text (the cells "
            "around the player, the directions to the nearest box and target), evaluated on "
            "held-out levels it never trained on; uniform start",
        ),
    )
}


def methods(scorer: bool = False) -> list[str]:
    """The registered estimators a cheap policy can drive: no rollout driver, no learned critic;
    those that rescore texts (``needs_scorer``) only with ``scorer`` (synthetic MDPs, where an
    exact oracle stands in for the policy model)."""
    out = []
    for name in list_estimators():
        spec = get_estimator(name)
        if spec.driver or spec.critic or (spec.needs_scorer and not scorer):
            continue
        out.append(name)
    return out


# ------------------------------------------------------------------------------ playing


def actions_of(info: dict) -> tuple[str, ...]:
    """The actions a cheap policy chooses among: the admissible ones, with WebShop's open search
    box (``search[<your query>]``) replaced by a search with the instruction and one with its
    first three words."""
    acts = list(info.get("admissible_actions") or ())
    if OPEN_QUERY in acts:
        words = str(info.get("task", "")).split()
        acts.remove(OPEN_QUERY)
        acts = [f"search[{' '.join(words)}]", f"search[{' '.join(words[:3])}]", *acts]
    return tuple(dict.fromkeys(acts))


class World:
    """The levels of one (setting, seed): training and evaluation, built once and shared by the
    methods and learning rates of that seed (so their memo is too), and the warm-start priors."""

    def __init__(self, setting: Setting, seed: int):
        self.setting, self.seed = setting, seed
        self.mdp = None
        if setting.synthetic:
            from agentrl.credit.synthetic import random_mdp

            self.mdp = random_mdp(np.random.default_rng(seed), **SYNTHETIC_MDP)
        self.train = [self._level(TRAIN_BASE + 1000 * seed + i) for i in range(setting.levels)]
        if setting.policy == "linear":
            base = HELD_OUT_BASE + 1000 * seed
            self.eval = [self._level(base + i) for i in range(setting.eval_levels)]
        else:
            self.eval = self.train[: setting.eval_levels]
        self._priors: dict[Hashable, np.ndarray] = {}

    def _level(self, level_seed: int):
        if self.setting.synthetic:
            return DirectLevel(SyntheticEnv(self.mdp), level_seed)
        from agentrl.registry import make

        env = make(self.setting.env, **self.setting.kwargs)
        restore = RESTORE.get(self.setting.env)
        return MemoLevel(
            env,
            level_seed,
            restore=restore,
            demos=self.setting.warm > 0,
            demo_by_state=self.setting.env in DEMO_BY_STATE,
        )

    def prior(self, key: Hashable, spot: Spot, actions: Sequence[str]) -> np.ndarray:
        """The warm start's probabilities in ``spot`` (once per key, from the demonstration the
        level recorded in that state)."""
        p = self._priors.get(key)
        if p is None:
            warm = self.setting.warm
            p = np.full(len(actions), (1.0 - warm) / len(actions))
            demo = spot.demo
            if demo and demo[0] in actions:
                p[list(actions).index(demo[0])] += warm
            else:  # no demonstration from here: uniform
                p = np.full(len(actions), 1.0 / len(actions))
            self._priors[key] = p
        return p

    def restart(self) -> None:
        """Before a run: levels with random transitions start their draws over, so every method
        (and learning rate) of a seed meets the same transition noise, whatever ran before."""
        for level in self.train + self.eval:
            if isinstance(level, DirectLevel):
                level.restart()

    def env_steps(self) -> int:
        return sum(level.misses for level in self.train + self.eval)

    def memo_size(self) -> int:
        return sum(level.size for level in {id(x): x for x in self.train + self.eval}.values())


def state_key(setting: Setting, level_index: int, info: dict) -> Hashable:
    """The tabular policy's state: (level, anchor); on a synthetic MDP the anchor alone (every
    level is the same MDP, so a state is one state whichever level reached it)."""
    anchor = info.get("anchor")
    return anchor if setting.synthetic else (level_index, anchor)


def play(
    world: World,
    level_index: int,
    levels: Sequence,
    policy,
    rng: np.random.Generator | None,
) -> tuple[Trajectory, list[Choice | None]]:
    """One episode on ``levels[level_index]``: sampled from ``rng``, greedy when it is None.

    Returns the trajectory (its steps recorded as the trainer records them) and one
    :class:`Choice` per step (None for a step lost to a failing environment).
    """
    level = levels[level_index]
    if isinstance(policy, TabularPolicy) and isinstance(level, MemoLevel):
        return _play_memo(world, level_index, level, policy, rng)
    setting = world.setting
    spot = level.reset()
    traj, choices = Trajectory(), []
    warm = setting.warm > 0 and setting.policy == "tabular"
    views = getattr(level, "views", None)  # memoised levels: one (actions, key) per node
    cache = policy.cache if isinstance(policy, TabularPolicy) else None
    while True:
        view = None if views is None else views.get(spot.node)
        if view is None:
            view = _view(setting, level_index, level, spot)
        actions, key = view[:2]
        dist = None if cache is None else cache.get(key)
        if dist is None or dist[0] is not policy.table.get(key) or len(dist[1]) != len(actions):
            dist = _distribution(world, policy, key, spot, actions, warm)
        _, z, total, greedy, logps = dist
        index = greedy if rng is None else _sample(rng, z, total)
        logp = logps[index]
        if logp is None:
            logp = math.log(z[index] / total)
        nxt, result = level.step(spot, actions[index])
        step = record_step(
            result,
            anchor=spot.info.get("anchor"),
            observation=spot.obs,
            parsed=True,
            invalid_penalty=setting.invalid_penalty,
            prompt_text=spot.obs,
            response_text=actions[index],
            logprobs=[logp],
        )
        traj.steps.append(step)
        choices.append(None if step.lost else Choice(key, spot.obs, actions, index, logp))
        if step.terminated or step.truncated:
            end_trajectory(traj, result)
            return traj, choices
        spot = nxt


def _play_memo(
    world: World,
    level_index: int,
    level: MemoLevel,
    policy: TabularPolicy,
    rng: np.random.Generator | None,
) -> tuple[Trajectory, list[Choice | None]]:
    """:func:`play` for a tabular policy on a memoised level: the same episode, with what
    repeats cached.

    A step of the memo is a function of the node it leaves, the choice made there and (with
    ``restore``) the step count, and :func:`record_step` is a pure function of that step and
    of what the policy saw; so a memo edge's :class:`Step` is recorded once per (edge,
    truncation) and copied with the step's own log-prob afterwards, and a :class:`Spot` is
    built only where something reads it (a miss of the memo, a new state or a new row of the
    policy). The softmax of a state is computed once per version of its row
    (:func:`_distribution`).
    """
    setting = world.setting
    warm = setting.warm > 0 and setting.policy == "tabular"
    penalty = setting.invalid_penalty
    views, edges, table, cache = level.views, level.edges, policy.table, policy.cache
    restore, max_steps = level.restore is not None, level.max_steps
    spot: Spot | None = level.reset()
    node, t, path = spot.node, spot.t, spot.path
    traj, choices = Trajectory(), []
    steps = traj.steps
    while True:
        view = views.get(node)
        if view is None:
            if spot is None:
                spot = level.reach(node, t, path)[0]
            view = _view(setting, level_index, level, spot)
        actions, key, obs, edge_of = view
        dist = cache.get(key)
        if dist is None or dist[0] is not table.get(key) or len(dist[1]) != len(actions):
            if spot is None:
                spot = level.reach(node, t, path)[0]
            dist = _distribution(world, policy, key, spot, actions, warm)
        _, z, total, greedy, logps = dist
        if rng is None:
            index = greedy
        else:  # _sample, inline: this loop runs for every step of the benchmark
            u, index, last = rng.random() * total, 0, len(z) - 1
            while index < last and u >= z[index]:
                u -= z[index]
                index += 1
        logp = logps[index]
        if logp is None:
            logp = math.log(z[index] / total)
        action = actions[index]
        t1 = t + 1
        edge = edges.get((edge_of, index))
        nxt = result = None
        if edge is None:
            if spot is None:
                spot = level.reach(node, t, path)[0]
            nxt, result = level.step(spot, action)
            edge = edges[(edge_of, index)] = (nxt.node, {})
        next_node, templates = edge
        next_path = (path, action) if nxt is None else nxt.path
        # With ``restore`` a step's result depends on the step count only through truncation.
        tkey = restore and t1 >= max_steps
        template = templates.get(tkey)
        if template is None:
            if spot is None:
                spot = level.reach(node, t, path)[0]
            if result is None:
                result = level.reach(next_node, t1, next_path)[1]
            step = record_step(
                result,
                anchor=spot.info.get("anchor"),
                observation=obs,
                parsed=True,
                invalid_penalty=penalty,
                prompt_text=obs,
                response_text=action,
                logprobs=[logp],
            )
            templates[tkey] = _template(step)
        else:
            step = _copy_step(template, logp)
        steps.append(step)
        choices.append(None if step.lost else Choice(key, obs, actions, index, logp))
        if step.terminated or step.truncated:
            if result is None:
                result = level.reach(next_node, t1, next_path)[1]
            end_trajectory(traj, result)
            return traj, choices
        node, t, path, spot = next_node, t1, next_path, nxt


def _view(setting: Setting, level_index: int, level, spot: Spot) -> tuple:
    """What the player derives from the state of ``spot``: its actions, its key, its
    observation and (memoised levels) the edges its steps share. With ``restore`` the memo
    answers a step by the state's anchor and the action, so the nodes whose anchor,
    observation and actions agree share their edges; otherwise a node's edges are its own.
    Cached in a memoised level's ``views`` by node."""
    actions = actions_of(spot.info)
    edge_of = spot.node
    if getattr(level, "restore", None) is not None:
        shared = level.edge_classes
        edge_of = shared.setdefault((spot.info.get("anchor"), spot.obs, actions), -len(shared) - 1)
    view = actions, state_key(setting, level_index, spot.info), spot.obs, edge_of
    views = getattr(level, "views", None)
    if views is not None:
        views[spot.node] = view
    return view


def _distribution(
    world: World, policy, key: Hashable, spot: Spot, actions: Sequence[str], warm: bool
) -> tuple:
    """The policy's distribution over ``actions`` in ``spot``, as the player samples it:
    (row, exp(logit − max logit) per action, their sum, the greedy index (the first maximum),
    each action's log-probability (None where it underflows: computed again, and raising, only
    if chosen)). Cached in a tabular policy's ``cache`` under ``key`` with the row it came from
    (valid while that row is the policy's)."""
    prior = None
    if warm:

        def prior(key=key, spot=spot, actions=actions):
            return world.prior(key, spot, actions)

    row = policy.logits(key, spot.obs, actions, prior)
    logits = row.tolist()
    # Softmax and inverse-CDF sampling in plain Python: a handful of actions per state, where
    # numpy's per-call overhead would dominate.
    top = max(logits)
    z = [math.exp(x - top) for x in logits]
    total = sum(z)
    logps = [math.log(p / total) if p / total > 0 else None for p in z]
    out = (row, z, total, logits.index(top), logps)
    if isinstance(policy, TabularPolicy):
        policy.cache[key] = out
    return out


def _sample(rng: np.random.Generator, z: Sequence[float], total: float) -> int:
    """Inverse-CDF sampling of an index with weights ``z`` (summing to ``total``)."""
    u, index = rng.random() * total, 0
    while index < len(z) - 1 and u >= z[index]:
        u -= z[index]
        index += 1
    return index


def _template(step: Step) -> dict:
    """What :func:`_copy_step` copies: the fields of ``step``, its mutable ones copied."""
    fields = dict(step.__dict__)
    fields["costs"] = None if step.costs is None else dict(step.costs)
    return fields


def _copy_step(template: dict, logp: float) -> Step:
    """A :class:`Step` with the fields of ``template`` (fresh lists and dicts) and the sampling
    log-prob ``logp``."""
    step = Step.__new__(Step)
    fields = template.copy()
    fields["prompt_ids"], fields["response_ids"], fields["logprobs"] = [], [], [logp]
    costs = fields["costs"]
    if costs is not None:
        fields["costs"] = costs.copy()
    step.__dict__ = fields
    return step


def make_policy(setting: Setting):
    return LinearPolicy() if setting.policy == "linear" else TabularPolicy()


def policy_matrix(policy: TabularPolicy, mdp) -> np.ndarray:
    """(S, A) action probabilities of a tabular policy keyed by state (unseen states uniform),
    floored at 1e-9 so that it is a valid behaviour policy of a :class:`SyntheticMDP`."""
    S, A = mdp.n_states, mdp.n_actions
    pi = np.full((S, A), 1.0 / A)
    for s in range(S):
        row = policy.table.get(s)
        if row is not None:
            z = np.exp(row - row.max())
            pi[s] = z / z.sum()
    pi = np.maximum(pi, 1e-9)
    return pi / pi.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------------------ one run


@dataclass
class Curve:
    """A run's learning curve: training environment steps at each evaluation and the greedy
    and sampled success there."""

    steps: list[int] = field(default_factory=list)
    greedy: list[float] = field(default_factory=list)
    sampled: list[float] = field(default_factory=list)


@dataclass
class RunResult:
    setting: str
    method: str
    seed: int
    protocol: str
    lr: float
    curve: Curve
    seconds: float
    tasks: list[list[int]] = field(default_factory=list)
    """The training levels drawn at each iteration (pairing evidence)."""
    initial: dict[str, float] = field(default_factory=dict)
    """Initial greedy/sampled success (pairing evidence: equal across methods of a seed)."""

    def auc(self, kind: str = "greedy") -> float:
        from agentrl.bench.stats import auc

        return auc(self.curve.steps, getattr(self.curve, kind))

    @property
    def final(self) -> float:
        return self.curve.greedy[-1]


def evaluate(world: World, policy, seed: int) -> tuple[float, float]:
    """Greedy and sampled success of ``policy`` on the evaluation levels."""
    if world.mdp is not None:  # exact: the policy's success probability
        pi = policy_matrix(policy, world.mdp)
        greedy = np.eye(world.mdp.n_actions)[pi.argmax(axis=1)]
        return policy_success(world.mdp, greedy), policy_success(world.mdp, pi)
    rng = np.random.default_rng((seed, 77))  # the same stream at every evaluation
    won_g = [play(world, i, world.eval, policy, None)[0].won for i in range(len(world.eval))]
    won_s = [play(world, i, world.eval, policy, rng)[0].won for i in range(len(world.eval))]
    return float(np.mean(won_g)), float(np.mean(won_s))


def task_draws(setting: Setting, seed: int) -> list[list[int]]:
    """The training levels of every iteration of a seed (the same for every method)."""
    rng = np.random.default_rng((seed, 11))
    k = min(setting.tasks, setting.levels)
    return [
        sorted(rng.choice(setting.levels, size=k, replace=False).tolist())
        for _ in range(setting.iterations)
    ]


def train_run(
    world: World, method: str, protocol: str, lr: float, algo: dict | None = None
) -> RunResult:
    """One run: ``method`` trains a fresh cheap policy on ``world`` (see the module)."""
    setting, seed = world.setting, world.seed
    start = time.perf_counter()
    world.restart()
    policy = make_policy(setting)
    rng = np.random.default_rng((seed, 23))  # sampling; the same stream for every method
    stage = CreditStage(method, estimator_config(method, algo))
    curve = Curve()
    steps = 0
    draws = task_draws(setting, seed)

    def record() -> None:
        g, s = evaluate(world, policy, seed)
        curve.steps.append(steps)
        curve.greedy.append(g)
        curve.sampled.append(s)

    record()
    initial = {"greedy": curve.greedy[0], "sampled": curve.sampled[0]}
    for it, tasks in enumerate(draws, start=1):
        groups, choices = [], []
        for level_index in tasks:
            trajs = []
            for _ in range(setting.group):
                traj, ch = play(world, level_index, world.train, policy, rng)
                trajs.append(traj)
                choices.extend(ch)
                steps += len(traj.steps)
            groups.append(
                TrajectoryGroup(
                    task=f"level {level_index}",
                    seed=level_index,
                    trajectories=trajs,
                    env=setting.env,
                )
            )
        if stage.spec.needs_scorer:
            from agentrl.credit.synthetic import SyntheticScorer

            stage.scorer = SyntheticScorer(replace(world.mdp, mu=policy_matrix(policy, world.mdp)))
        adv = np.asarray(stage.assign(groups).advantages.step, dtype=float)
        keep = [i for i, c in enumerate(choices) if c is not None]
        adv, kept = adv[keep], [choices[i] for i in keep]
        if protocol == "rms":
            rms = math.sqrt(float(np.mean(adv**2))) if len(adv) else 0.0
            adv = adv / rms if rms > 0 else adv
        if kept and np.any(adv != 0):
            policy_gradient_step(policy, kept, adv, lr)
        if it % setting.eval_every == 0 or it == len(draws):
            record()
    return RunResult(
        setting.name, method, seed, protocol, lr, curve, time.perf_counter() - start, draws, initial
    )


# ------------------------------------------------------------------------------ the grid


@dataclass(frozen=True)
class Job:
    """The runs of one (setting, seed): every (method, learning rate) pair on one world."""

    setting: str
    seed: int
    runs: tuple[tuple[str, float], ...]
    protocol: str = "rms"


@dataclass(frozen=True)
class Plan:
    """What a benchmark invocation runs: per setting, its methods and seeds (``rms``), and the
    settings that also run ``best-lr`` (pilot seeds pick each method's learning rate)."""

    settings: tuple[tuple[str, tuple[str, ...], int], ...]
    best_lr: tuple[str, ...] = ()
    pilot_seeds: tuple[int, ...] = PILOT_SEEDS[:2]
    best_lr_seeds: int | None = None
    """Seeds of the ``best-lr`` comparison (default: the setting's)."""
    iterations: int | None = None
    """Override every setting's iterations (tests)."""


def default_plan() -> Plan:
    """Every method on Sokoban 7×7 (both protocols; ``best-lr`` on 10 seeds), WebShop, ALFWorld
    (20 seeds each) and the synthetic MDPs (with the oracle-scorer
    methods); the core methods on the 6×6 sanity setting; the :data:`LINEAR` methods with the
    linear policy on held-out Sokoban 7×7 levels (20 seeds)."""
    every, scored = tuple(methods()), tuple(methods(scorer=True))
    return Plan(
        (
            ("sokoban-7x7", every, 20),
            ("webshop", every, 20),
            ("synthetic", scored, 20),
            ("alfworld", every, 20),
            ("sokoban-6x6", CORE, 10),
            ("sokoban-7x7-linear", LINEAR, 20),
        ),
        best_lr=("sokoban-7x7",),
        best_lr_seeds=10,
    )


def quick_plan() -> Plan:
    """``--quick``: three settings × the core methods × 5 seeds (seeds 0–4 of the default run,
    so ``--check`` compares them run by run)."""
    return Plan(
        (("sokoban-7x7", CORE, 5), ("webshop", CORE, 5), ("synthetic", CORE, 5)),
    )


def setting_of(plan: Plan, name: str) -> Setting:
    s = SETTINGS[name]
    return replace(s, iterations=plan.iterations) if plan.iterations else s


def run_job(job: Job, setting: Setting) -> list[RunResult]:
    """Every run of ``job`` on one shared world (its memo and priors)."""
    import torch

    torch.set_num_threads(1)
    world = World(setting, job.seed)
    # The world's memo (and the imported modules) are hundreds of thousands of long-lived
    # objects that the collector's full passes would scan again and again, for a third of a
    # run's time: each run starts with them frozen out of its scans (and fewer passes), and
    # the job hands them back at its end. The garbage of earlier jobs is collected first, so
    # that no freeze keeps it.
    gc.collect()
    threshold = gc.get_threshold()
    gc.set_threshold(10_000, 10, 10)
    try:
        out = []
        for m, lr in job.runs:
            gc.freeze()
            out.append(train_run(world, m, job.protocol, lr))
        return out
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def run_jobs(jobs: Sequence[tuple[Job, Setting]], workers: int, log=print) -> list[RunResult]:
    """Run ``jobs`` in ``workers`` processes (1: in this process), the slowest settings
    first."""
    out: list[RunResult] = []
    order = sorted(jobs, key=lambda js: -_cost(js[1]) * len(js[0].runs))
    if workers <= 1:
        for job, setting in order:
            out.extend(run_job(job, setting))
        return out
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no forked torch/OpenMP state
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futures = [pool.submit(run_job, job, setting) for job, setting in order]
        for k, fut in enumerate(futures, 1):
            out.extend(fut.result())
            if k % max(1, len(futures) // 10) == 0:
                log(f"[credit-learning] {k}/{len(futures)} jobs done")
    return out


def _cost(setting: Setting) -> float:
    base = {"alfworld": 20.0, "synthetic": 1.5, "webshop": 1.2}.get(setting.env, 1.0)
    return base * (3.0 if setting.policy == "linear" else 1.0) * setting.iterations


def primary(setting: Setting) -> str:
    """The curve a setting's verdicts read: greedy success from a uniform start; sampled
    success under a warm start (whose greedy action is the demonstration, success ≈ 1 from
    the start) and on synthetic MDPs (where greedy success of a half-trained policy jumps
    between 0 and 1)."""
    return "sampled" if setting.warm > 0 or setting.synthetic else "greedy"


def execute(plan: Plan, workers: int = 2, log=print) -> tuple[list[RunResult], dict[str, float]]:
    """Run ``plan``: the ``rms`` runs, then for ``best_lr`` settings the pilot runs and the
    comparison at each method's best learning rate. Returns the runs and wall seconds per
    setting-phase."""
    times: dict[str, float] = {}
    jobs = []
    for name, ms, n_seeds in plan.settings:
        s = setting_of(plan, name)
        jobs += [(Job(name, seed, tuple((m, s.lr) for m in ms)), s) for seed in range(n_seeds)]
    t0 = time.perf_counter()
    results = run_jobs(jobs, workers, log)
    times["rms"] = time.perf_counter() - t0
    for name in plan.best_lr:
        s = setting_of(plan, name)
        ms = next(m for n, m, _ in plan.settings if n == name)
        n_seeds = plan.best_lr_seeds or next(k for n, _, k in plan.settings if n == name)
        t0 = time.perf_counter()
        pilot = [
            (Job(name, seed, tuple((m, lr) for m in ms for lr in s.lr_grid), "pilot"), s)
            for seed in plan.pilot_seeds
        ]
        pilot_runs = run_jobs([(replace(j, protocol="raw"), st) for j, st in pilot], workers, log)
        pilot_runs = [replace(r, protocol="pilot") for r in pilot_runs]
        best = best_lrs(pilot_runs, primary(s))
        jobs = [
            (Job(name, seed, tuple((m, best[m]) for m in ms), "raw"), s) for seed in range(n_seeds)
        ]
        results += pilot_runs + [
            replace(r, protocol="best-lr") for r in run_jobs(jobs, workers, log)
        ]
        times[f"best-lr {name}"] = time.perf_counter() - t0
    return results, times


def best_lrs(pilot: Sequence[RunResult], kind: str) -> dict[str, float]:
    """Each method's learning rate with the highest mean AUC over the pilot seeds (ties: the
    smaller rate)."""
    scores: dict[tuple[str, float], list[float]] = {}
    for r in pilot:
        scores.setdefault((r.method, r.lr), []).append(r.auc(kind))
    best: dict[str, tuple[float, float]] = {}
    for (m, lr), v in sorted(scores.items()):
        mean = float(np.mean(v))
        if m not in best or mean > best[m][0] + 1e-12:
            best[m] = (mean, lr)
    return {m: lr for m, (_, lr) in best.items()}


# ------------------------------------------------------------------------------ analysis


def runs_of(
    results: Sequence[RunResult], setting: str, protocol: str
) -> dict[str, list[RunResult]]:
    """The runs of one setting and protocol by method (methods in registry order, runs by
    seed)."""
    out: dict[str, list[RunResult]] = {}
    for r in sorted(results, key=lambda r: (r.method, r.seed)):
        if r.setting == setting and r.protocol == protocol:
            out.setdefault(r.method, []).append(r)
    return out


def steps_to(runs: Sequence[RunResult], level: float, kind: str) -> float:
    """Median over seeds of the environment steps at which a run's ``kind`` success first
    reached ``level``; inf when half of the seeds or more never did."""
    hits = []
    for r in runs:
        values = getattr(r.curve, kind)
        k = next((i for i, v in enumerate(values) if v >= level - 1e-12), None)
        hits.append(math.inf if k is None else r.curve.steps[k])
    return float(np.median(hits))


def setting_table(by_method: dict[str, list[RunResult]], kind: str) -> list[str]:
    """Markdown rows: method, AUC (primary and the other curve), final success, steps to 50% /
    80% of the best method's final success."""
    from agentrl.bench.stats import interval_cell

    other = "greedy" if kind == "sampled" else "sampled"
    finals = {
        m: float(np.mean([getattr(r.curve, kind)[-1] for r in rs])) for m, rs in by_method.items()
    }
    best = max(finals.values()) if finals else 0.0
    order = sorted(by_method, key=lambda m: -np.mean([r.auc(kind) for r in by_method[m]]))
    rows = []
    for m in order:
        rs = by_method[m]
        s50, s80 = steps_to(rs, 0.5 * best, kind), steps_to(rs, 0.8 * best, kind)
        lrs = sorted({r.lr for r in rs})
        rows.append(
            f"| {m}{scorer_mark(m)} | {len(rs)} | {_lr(lrs)} "
            f"| {interval_cell([r.auc(kind) for r in rs])} "
            f"| {interval_cell([r.auc(other) for r in rs])} "
            f"| {interval_cell([getattr(r.curve, kind)[-1] for r in rs])} "
            f"| {_steps(s50)} | {_steps(s80)} |"
        )
    return rows


def _lr(lrs: Sequence[float]) -> str:
    return ", ".join(f"{x:g}" for x in lrs)


def _steps(x: float) -> str:
    return "not reached" if not math.isfinite(x) else f"{x:,.0f}"


def scorer_mark(method: str) -> str:
    return " *(oracle scorer)*" if get_estimator(method).needs_scorer else ""


def family(by_method: dict[str, list[RunResult]], kind: str):
    """Every pair of methods compared on paired seeds, adjusted as one Holm family."""
    from agentrl.bench.stats import all_pairs, holm

    seeds = [tuple(r.seed for r in rs) for rs in by_method.values()]
    if len(set(seeds)) > 1:
        raise ValueError("methods of one setting must share their seeds for paired comparisons")
    return holm(all_pairs({m: [r.auc(kind) for r in rs] for m, rs in by_method.items()}))


def pair_matrix(pairs, names: Sequence[str]) -> list[str]:
    """An all-pairs matrix of family-wise verdicts: row vs column, ``>`` better, ``<`` worse,
    ``·`` not resolved."""
    mark = {"better": ">", "worse": "<", "not resolved": "·"}
    cell: dict[tuple[str, str], str] = {}
    for p in pairs:
        v = p.verdict_holm
        cell[(p.a, p.b)] = mark[v]
        cell[(p.b, p.a)] = mark[{"better": "worse", "worse": "better"}.get(v, v)]
    head = "| | " + " | ".join(names) + " |"
    rule = "|---|" + "---|" * len(names)
    rows = [
        f"| **{a}** | " + " | ".join("" if a == b else cell.get((a, b), "") for b in names) + " |"
        for a in names
    ]
    return [head, rule, *rows]


def vs(pairs, base: str) -> list:
    """The pairs of a family that involve ``base``, oriented as (other − base)."""
    from agentrl.bench.stats import PairVerdict

    out = []
    for p in pairs:
        if p.b == base:
            out.append(p)
        elif p.a == base:
            flip = {"better": "worse", "worse": "better"}.get(p.verdict, p.verdict)
            out.append(
                PairVerdict(
                    p.b,
                    p.a,
                    p.n,
                    -p.mean_diff,
                    (-p.boot[1], -p.boot[0]),
                    (-p.t[1], -p.t[0]),
                    flip,
                    p.p,
                    p.p_holm,
                )
            )
    return out


def verdict_rows(pairs, what: str) -> list[str]:
    """Markdown rows of family-wise verdicts (the pairs already Holm-adjusted as one family)."""
    from agentrl.bench._report import table
    from agentrl.bench.stats import bounds

    head = (
        f"| A | B | seeds | mean {what} A − B | 95% paired t | p | Holm p | verdict, family-wise |"
    )
    rows = [
        f"| {p.a} | {p.b} | {p.n} | {p.mean_diff:+.3f} | {bounds(*p.t, '+.3f')} | {p.p:.3f} "
        f"| {p.p_holm:.3f} | {p.verdict_holm} |"
        for p in pairs
    ]
    return table([head, "|---|---|---:|---:|---|---:|---:|---|"], rows, "No pairs.")


def pairing(by_method: dict[str, list[RunResult]]) -> tuple[int, int]:
    """Seeds on which every method drew the same tasks and started from the same success
    (greedy and sampled), and the number of seeds."""
    seeds: dict[int, set] = {}
    for rs in by_method.values():
        for r in rs:
            start = (r.initial.get("greedy"), r.initial.get("sampled"))
            seeds.setdefault(r.seed, set()).add((start, json.dumps(r.tasks)))
    return sum(len(v) == 1 for v in seeds.values()), len(seeds)


def accuracy(credit_md: str | None) -> dict[str, float]:
    """Pearson r with the true advantage at G = 8 per estimator, from the credit benchmark's
    committed report (``## Pearson r with the true advantage``)."""
    from agentrl.bench._report import section_text, table_rows

    body = section_text(credit_md or "", "Pearson r with the true advantage")
    out = {}
    for _, cells in table_rows(body or ""):
        try:
            out[cells[0].split(" (")[0].strip()] = float(cells[2].split("±")[0])
        except (IndexError, ValueError):
            continue
    return out


def rank_correlation(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Spearman ρ of two sequences and its two-sided p (NaN with fewer than 3 pairs)."""
    from scipy import stats

    if len(xs) < 3:
        return math.nan, math.nan
    rho, p = stats.spearmanr(xs, ys)
    return float(rho), float(p)


# ------------------------------------------------------------------------------ report

HEAD = (
    "| method | seeds | lr | primary AUC | other AUC | final (primary) "
    "| steps to 50% of best | steps to 80% of best |"
)
RULE = "|---|---:|---|---|---|---|---:|---:|"


def budget_line(s: Setting) -> str:
    levels = f"{s.levels} training levels" + (
        f", {s.eval_levels} held-out evaluation levels" if s.policy == "linear" else ""
    )
    warm = f", warm start {s.warm:g} on the demonstrated action" if s.warm else ""
    return (
        f"Budget per run: {s.iterations} iterations × {s.tasks} tasks × {s.group} episodes, "
        f"{levels}, evaluation every {s.eval_every} iterations; {s.policy} policy, "
        f"common lr {s.lr:g}{warm}."
    )


def setting_section(results, name: str, protocol: str = "rms", plan: Plan | None = None) -> str:
    from agentrl.bench._report import render, table
    from agentrl.bench.stats import interval_cell

    s = setting_of(plan, name) if plan else SETTINGS[name]
    by_method = runs_of(results, name, protocol)
    if not by_method:
        return ""
    kind = primary(s)
    pairs = family(by_method, kind)
    names = list(by_method)
    first = next(iter(by_method.values()))
    values = dict(
        title=f"{name}" + (" (quick)" if protocol == "quick" else ""),
        table="\n".join(table([HEAD, RULE], setting_table(by_method, kind), "No runs.")),
        vs_grpo="\n".join(verdict_rows(vs(pairs, "grpo"), f"{kind} AUC")),
    )
    if protocol == "best-lr":
        pilots = sorted({r.seed for r in results if r.setting == name and r.protocol == "pilot"})
        resolved = sum(p.verdict_holm != "not resolved" for p in pairs)
        return render(
            "credit_learning",
            "best_lr",
            grid=_lr(s.lr_grid),
            pilots=_lr(pilots),
            n_resolved=resolved,
            n_pairs=len(pairs),
            **values,
        )
    return render(
        "credit_learning",
        "setting",
        note=s.note[0].upper() + s.note[1:],
        budget=budget_line(s),
        kind=kind,
        start_greedy=interval_cell([r.initial["greedy"] for r in first]),
        start_sampled=interval_cell([r.initial["sampled"] for r in first]),
        paired="{} of {}".format(*pairing(by_method)),
        matrix="\n".join(pair_matrix(pairs, names)),
        **values,
    )


def accuracy_section(results, credit_md: str | None) -> tuple[str, str]:
    from agentrl.bench._report import render, table

    acc = accuracy(credit_md)
    syn = {
        m: np.mean([r.auc("sampled") for r in rs])
        for m, rs in runs_of(results, "synthetic", "rms").items()
    }
    sok = {
        m: np.mean([r.auc("greedy") for r in rs])
        for m, rs in runs_of(results, "sokoban-7x7", "rms").items()
    }
    names = [m for m in acc if m in syn or m in sok]
    rows = [
        f"| {m}{scorer_mark(m)} | {acc[m]:.2f} | {_num(syn.get(m))} | {_num(sok.get(m))} |"
        for m in sorted(names, key=lambda m: -acc[m])
    ]
    head = "| estimator | Pearson r (G = 8) | AUC synthetic (sampled) | AUC Sokoban 7×7 (greedy) |"
    text = "\n".join(table([head, "|---|---:|---:|---:|"], rows, "No estimator in both."))
    both_syn = [m for m in names if m in syn]
    both_sok = [m for m in names if m in sok]
    r1, p1 = rank_correlation([acc[m] for m in both_syn], [syn[m] for m in both_syn])
    r2, p2 = rank_correlation([acc[m] for m in both_sok], [sok[m] for m in both_sok])
    rho = render(
        "credit_learning",
        "rho",
        n=len(names),
        rho_syn=_num(r1, ".2f"),
        p_syn=_num(p1),
        rho_sok=_num(r2, ".2f"),
        p_sok=_num(p2),
    )
    return text, rho


def _num(x, fmt: str = ".3f") -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:{fmt}}"


def write_report(
    out_dir,
    results,
    plan: Plan,
    times: dict[str, float],
    workers: int,
    quick: bool,
    kept: int = 0,
    total: float | None = None,
) -> Path:
    """Write the report, its runs (JSON) and its figure to ``out_dir``. ``total``: the wall
    seconds of the whole command (start-up, runs and report), when it was timed; otherwise the
    sum of the phases in ``times``."""
    from agentrl.bench._report import header, read_committed, render, write_markdown
    from agentrl.bench.experiment import code_version

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = [setting_section(results, name, "rms", plan) for name, _, _ in plan.settings]
    sections += [setting_section(results, name, "best-lr", plan) for name in plan.best_lr]
    acc, rho = accuracy_section(results, read_committed("credit.md"))
    time_rows = [f"| {k} | {v / 60:.1f} min |" for k, v in times.items()]
    if total is not None:
        time_rows.append(f"| the whole command, start to report | {total / 60:.1f} min |")
    per_setting = {}
    for r in results:
        per_setting.setdefault(r.setting, []).append(r.seconds)
    time_rows += [
        f"| {k} (sum of run times) | {sum(v) / 60:.1f} min over {len(v)} runs |"
        for k, v in per_setting.items()
    ]
    text = render(
        "credit_learning",
        head=header(
            ["agentrl", "torch", "numpy", "scipy"],
            "python -m agentrl.bench credit-learning" + (" --quick" if quick else ""),
            quick,
        ),
        wall=f"{(sum(times.values()) if total is None else total) / 60:.1f} min",
        n_runs=f"{len(results) - kept} runs"
        + (f" (and {kept} runs kept from the report's previous run)" if kept else ""),
        workers=workers,
        version=f"Code version `{code_version()}` (agentrl's version and a hash of its sources).",
        grid=_lr(SETTINGS["sokoban-7x7"].lr_grid),
        n_pilot=len(plan.pilot_seeds),
        sections="\n\n".join(x for x in sections if x),
        accuracy=acc,
        rho=rho,
        times="\n".join(["| phase | wall |", "|---|---:|", *time_rows]),
    )
    path = write_markdown(out / "credit_learning.md", text)
    save_runs(out / "credit_learning.json", results)
    plot(out / "credit_learning.png", results, plan)
    return path


def plot(path: Path, results, plan: Plan) -> None:
    """One panel per setting (sanity rows left out): each method's mean primary success over
    environment steps. A method has one colour and marker in every panel, and the legend lists
    every method of the figure."""
    from matplotlib.lines import Line2D

    from agentrl.bench._report import figure, styles

    names = [n for n, _, _ in plan.settings if not setting_of(plan, n).sanity]
    panels = {name: runs_of(results, name, "rms") for name in names}
    style = styles(sorted({m for by_method in panels.values() for m in by_method}))
    with figure(path, panels=len(names), size=(5.0, 4.0)) as axes:
        for ax, name in zip(axes, names):
            s = setting_of(plan, name)
            kind = primary(s)
            by_method = panels[name]
            for m, rs in by_method.items():
                n = min(len(r.curve.steps) for r in rs)
                x = np.mean([r.curve.steps[:n] for r in rs], axis=0)
                y = np.mean([getattr(r.curve, kind)[:n] for r in rs], axis=0)
                ax.plot(x, y, label=m, **style[m])
            ax.set_title(f"{name} ({kind}, {len(next(iter(by_method.values()), []))} seeds)")
            ax.set_xlabel("environment steps")
            ax.set_ylabel("success")
        handles = [Line2D([], [], label=m, **kw) for m, kw in style.items()]
        axes[-1].legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)


def save_runs(path: Path, results: Sequence[RunResult]) -> None:
    rows = [{**asdict(r), "curve": asdict(r.curve)} for r in results]
    path.with_suffix(".json").write_text(json.dumps(rows, separators=(",", ":")) + "\n")


def load_runs(path: Path) -> list[RunResult]:
    rows = json.loads(Path(path).read_text())
    return [RunResult(**{**row, "curve": Curve(**row["curve"])}) for row in rows]


# ------------------------------------------------------------------------------ entry points


def run(
    out_dir: str | os.PathLike = "bench-out", quick: bool = False, argv: Sequence[str] | None = None
) -> Path:
    """``python -m agentrl.bench credit-learning [--quick] [--workers N] [--only S1,S2]``."""
    import argparse

    start = time.perf_counter()
    parser = argparse.ArgumentParser(prog="credit-learning")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated settings to run again; the other settings' runs are kept from "
        "the report's credit_learning.json in the output folder",
    )
    args = parser.parse_args(list(argv or []))
    plan = quick_plan() if quick else default_plan()
    only = [x for x in args.only.split(",") if x]
    kept: list[RunResult] = []
    full = plan
    if only:
        unknown = sorted(set(only) - {n for n, _, _ in plan.settings})
        if unknown:
            raise SystemExit(
                f"--only: unknown settings {unknown}; choose from "
                f"{[n for n, _, _ in plan.settings]}"
            )
        stored = Path(out_dir) / "credit_learning.json"
        kept = [r for r in load_runs(stored) if r.setting not in only] if stored.is_file() else []
        plan = replace(
            plan,
            settings=tuple(x for x in plan.settings if x[0] in only),
            best_lr=tuple(x for x in plan.best_lr if x in only),
        )
    results, times = execute(plan, args.workers)
    if kept:
        names = ", ".join(sorted({r.setting for r in kept}))
        times[f"kept from the previous run ({names})"] = 0.0
    path = write_report(
        out_dir,
        kept + results,
        full,
        times,
        args.workers,
        quick,
        kept=len(kept),
        total=time.perf_counter() - start,
    )
    print(f"[credit-learning] wrote {path}")
    return path


def check(results_dir: str | os.PathLike = "results", log=print, tolerance: float = 0.30):
    """``credit-learning --check``: re-run the ``--quick`` plan (seeds 0–4 of the committed
    default run) and compare run by run with ``<results_dir>/credit_learning.json``: every
    primary AUC within the committed run's own interval over seeds, and the sign of every
    family-wise verdict against grpo unchanged."""
    from agentrl.bench._check import CheckError, Figure
    from agentrl.bench.stats import t_interval

    path = Path(results_dir) / "credit_learning.json"
    if not path.is_file():
        raise CheckError(
            f"{path} is missing: run `python -m agentrl.bench credit-learning --update` first"
        )
    committed = load_runs(path)
    plan = quick_plan()
    results, _ = execute(plan, min(2, os.cpu_count() or 1), log)
    figures = []
    for name, ms, n_seeds in plan.settings:
        kind = primary(SETTINGS[name])
        # The committed runs of the quick plan's methods and seeds only, so that the verdicts
        # are taken over the same family as the new ones.
        old = {
            m: [r for r in rs if r.seed < n_seeds]
            for m, rs in runs_of(committed, name, "rms").items()
            if m in ms
        }
        new = runs_of(results, name, "rms")
        for m in ms:
            if m not in old or len(old[m]) < n_seeds:
                figures.append(
                    Figure(
                        f"credit-learning: {name} {m}",
                        None,
                        None,
                        True,
                        skip="not in the committed runs",
                    )
                )
                continue
            mean_old, lo, hi = t_interval([r.auc(kind) for r in old[m]])
            mean_new = float(np.mean([r.auc(kind) for r in new[m]]))
            # Within the committed interval counts as unchanged: the figure's tolerance is
            # the interval's half-width relative to the committed mean.
            ok = lo - 1e-9 <= mean_new <= hi + 1e-9
            figures.append(
                Figure(
                    f"credit-learning: {name} {m} {kind} AUC (5 seeds)",
                    mean_old,
                    mean_new if ok else -math.inf,
                    True,
                )
            )
        signs_old = {p.a: p.verdict_holm for p in vs(family(old, kind), "grpo")}
        signs_new = {p.a: p.verdict_holm for p in vs(family(new, kind), "grpo")}
        for m, v in signs_old.items():
            same = signs_new.get(m) == v
            figures.append(
                Figure(
                    f"credit-learning: {name} {m} vs grpo verdict ({v})",
                    1.0,
                    1.0 if same else 0.0,
                    True,
                )
            )
    return figures
