"""The levels the credit-learning benchmark plays: real environments, memoised; synthetic MDPs.

A *level* is one task of an environment (a reset seed) that a cheap policy plays many times.
:class:`MemoLevel` plays a registered environment through an
:class:`~agentrl.rollout.env_pool.InlinePool` (the pool the trainer uses in-process, with its
handling of an environment that raises) and memoises every step by the episode's action history:
the step after history h and action a is computed by the environment once and then looked up.
That is exact for environments that are deterministic given their reset seed and the actions
(Sokoban, WebShop and ALFWorld are; :func:`check_deterministic` is the test), and it makes the
thousands of episodes of a benchmark cost what their distinct histories cost. A miss replays the
history from a reset when the live environment is elsewhere.

:class:`SyntheticEnv` is a :class:`~agentrl.env_api.TextEnv` over a
:class:`~agentrl.credit.synthetic.SyntheticMDP` (random transitions, so it is played directly,
without memo), and :func:`optimal_success` its best achievable success probability by value
iteration over the horizon.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl.credit.synthetic import SyntheticMDP
from agentrl.env_api import TextEnv, Transition
from agentrl.rollout.env_pool import InlinePool, StepResult

Path = tuple | None
"""The actions of an episode so far as a linked list ``(previous path, action)``; None at the
reset state. One object per spot, so the live environment's position is known by identity."""


_NOWHERE = object()
"""The live environment is at no known anchor."""


@dataclass(frozen=True)
class Spot:
    """Where an episode is: the observation and info of its state, its step count and path."""

    obs: str
    info: dict[str, Any]
    t: int = 0
    path: Path = None
    node: int = 0
    """The memo's node of the history (history memo only)."""
    demo: tuple[str, ...] | None = None
    """The environment's demonstration from this state, when the level records them."""


def actions_on(path: Path) -> list[str]:
    """The actions of ``path``, first to last."""
    out = []
    while path is not None:
        path, action = path
        out.append(action)
    return out[::-1]


class MemoLevel:
    """One level (``seed``) of an environment, its steps memoised.

    Args:
        env: a registered environment (``agentrl.registry.make``), owned by this level.
        seed: the reset seed of the level; ``options`` the reset options.
        restore: for an environment whose anchor is its whole state, the reset options that
            start an episode in the state of a given anchor. The memo is then keyed by
            (anchor, action), shared by every history that reaches the state, and a miss costs
            one reset and one step instead of a replay (only the step when the live
            environment is in that state already, its episode running). The step count, the
            one part of a result that depends on the history, is set from the episode:
            ``info["step"]`` and ``truncated`` (not terminated and ``max_steps`` reached), as
            :class:`~agentrl.env_api.TextEnv` sets them. The options of an anchor are computed
            once and reused. Without ``restore`` the memo is keyed by the whole action
            history.
        demos: record the environment's demonstration in every spot (``Spot.demo``).
        demo_by_state: whether the environment's ``demonstration()`` is a function of the
            state its anchor names (Sokoban's planner, WebShop's shopper). Then every spot gets
            the demonstration from its state, computed once per anchor. Otherwise (ALFWorld's
            walkthrough holds only while every command so far followed it, so two histories
            reaching one state can disagree) a spot's demonstration is the *expert's*: the
            reset state's demonstration is played once, and a spot whose anchor that expert
            path passes through gets the rest of the path from there (from the first pass);
            other spots get None. Either way a spot's demonstration depends on its anchor
            alone, never on which history reached it first, so what a player derives from it
            does not depend on the order in which runs explore a level.
    """

    def __init__(
        self,
        env,
        seed: int,
        options: dict | None = None,
        restore: Callable[[Any, Hashable], dict] | None = None,
        demos: bool = False,
        demo_by_state: bool = True,
    ):
        self.pool = InlinePool([env])
        self.env = env
        self.seed, self.options, self.restore = int(seed), options, restore
        self.demos, self.demo_by_state = demos, demo_by_state
        self.max_steps = int(getattr(env.unwrapped, "max_steps", 0) or 0)
        obs, info = self.pool.reset([(0, self.seed, options)])[0]
        root_demo = self._demo()
        self._expert: dict[Hashable, tuple[str, ...]] = {}
        if demos and not demo_by_state and root_demo:
            self._expert = self._expert_path(info.get("anchor"), root_demo)
        self.root = Spot(obs, info, demo=self._demo_at(info.get("anchor"), root_demo))
        self._memo: dict[tuple, tuple[int, StepResult, tuple[str, ...] | None]] = {}
        self._nodes: dict[int, tuple[int, StepResult, tuple[str, ...] | None]] = {}
        """The memo's entries by node."""
        self._at: Path | bool = None  # the path the live environment is at (False: unknown)
        self._live: Hashable = _NOWHERE
        """With ``restore``: the anchor of the live environment's state while its episode runs
        (not ended by the environment's own flags). The anchor being the whole state and the
        step count, the one thing a restored episode starts afresh, being set from the episode
        (see ``restore``), a step from there gives what a step after a reset into that state
        gives, so the reset is skipped."""
        self._restored: dict[Hashable, dict] = {}
        """``restore``'s reset options by anchor (a function of the level and the anchor)."""
        # Demonstrations by anchor: a planner run costs milliseconds (WebShop searches), and a
        # warm start reads one demonstration per (level, anchor) anyway.
        self._demos: dict[Hashable, tuple[str, ...] | None] = {info.get("anchor"): self.root.demo}
        self.misses = 0
        self.views: dict[int, Any] = {}
        """What a player derives from a node's state (its choices), cached by the player: a
        node's result never changes."""
        self.edges: dict[tuple[int, int], Any] = {}
        """What a player derives from a step it took (by the node, or the class of nodes the
        memo answers alike, and the index of its choice there), cached by the player: the
        memo answers that step the same way every time."""
        self.edge_classes: dict[Hashable, int] = {}
        """The player's classes of nodes that share their edges (see ``edges``)."""

    def reset(self) -> Spot:
        return self.root

    def step(self, spot: Spot, action: str) -> tuple[Spot, StepResult]:
        """The step from ``spot`` with ``action``: the next spot and the environment's result."""
        key = (spot.info.get("anchor"), action) if self.restore else (spot.node, action)
        path = (spot.path, action)
        hit = self._memo.get(key)
        if hit is None:
            self.goto(spot)
            result = self.pool.step([(0, action)])[0]
            # The environment is in the new state now: its demonstration costs no replay.
            anchor = result[4].get("anchor")
            if anchor in self._demos:
                demo = self._demos[anchor]
            else:
                demo = self._demo_at(anchor, self._demo() if self.demo_by_state else None)
                self._demos[anchor] = demo
            hit = (len(self._memo) + 1, result, demo)
            self._memo[key] = hit
            self._at = False if self.restore else path
            if self.restore:
                running = not (result[2] or result[3]) and "worker_error" not in result[4]
                self._live = anchor if running else _NOWHERE
            self.misses += 1
            self._nodes[hit[0]] = hit
        return self.reach(hit[0], spot.t + 1, path)

    def reach(self, node: int, t: int, path: Path) -> tuple[Spot, StepResult]:
        """The spot and result :meth:`step` returns when its step reaches the memo's ``node``
        (a node some step has reached already) at step ``t`` along ``path``."""
        _, result, demo = self._nodes[node]
        if self.restore:
            obs, reward, terminated, _, info = result
            truncated = not terminated and t >= self.max_steps
            result = (obs, reward, terminated, truncated, {**info, "step": t})
        return Spot(result[0], result[4], t, path, node, demo), result

    def _expert_path(self, anchor: Hashable, plan: tuple[str, ...]) -> dict:
        """anchor -> the rest of ``plan`` from the first state on its path with that anchor,
        playing ``plan`` from the reset state (the live environment ends where it stops)."""
        path: dict[Hashable, tuple[str, ...]] = {}
        for t, action in enumerate(plan):
            path.setdefault(anchor, plan[t:])
            result = self.pool.step([(0, action)])[0]
            anchor = result[4].get("anchor")
            if result[2] or result[3]:
                break
        path.setdefault(anchor, ())
        self.pool.reset([(0, self.seed, self.options)])
        return path

    def _demo_at(self, anchor: Hashable, own: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """A spot's demonstration: its state's own (``demo_by_state``), else the expert's."""
        if not self.demos:
            return None
        return own if self.demo_by_state else self._expert.get(anchor)

    def _demo(self) -> tuple[str, ...] | None:
        """The live environment's demonstration from where it is (``demos`` only)."""
        if not self.demos:
            return None
        plan = self.env.unwrapped.demonstration()
        return None if plan is None else tuple(plan)

    def goto(self, spot: Spot) -> None:
        """Put the live environment at ``spot``: a reset into its state (``restore``), else a
        reset and a replay of its actions when the environment is elsewhere."""
        if self.restore:
            anchor = spot.info.get("anchor")
            if self._live is not _NOWHERE and self._live == anchor:
                return  # already there, its episode still running (see ``_live``)
            options = self._restored.get(anchor)
            if options is None:
                options = self._restored[anchor] = self.restore(self.env.unwrapped, anchor)
            # No seed: the options give the whole state, and re-seeding the environment's
            # generator costs more than the step itself.
            self.pool.reset([(0, None, options)])
            self._live = anchor
            return
        if self._at is spot.path:
            return
        self.pool.reset([(0, self.seed, self.options)])
        for action in actions_on(spot.path):
            self.pool.step([(0, action)])
        self._at = spot.path

    @property
    def size(self) -> int:
        return len(self._memo)


class DirectLevel:
    """One level of an environment with random transitions: every episode is played afresh
    (each reset with the level's seed; the environment varies its own draws between episodes)."""

    def __init__(self, env, seed: int, options: dict | None = None):
        self.pool = InlinePool([env])
        self.env = env
        self.seed, self.options = int(seed), options
        self.misses = 0

    def reset(self) -> Spot:
        obs, info = self.pool.reset([(0, self.seed, self.options)])[0]
        return Spot(obs, info)

    def restart(self) -> None:
        """Start the environment's random draws over (a run's first episode gets the draws of
        every run's first episode, whatever ran before on this level)."""
        restart = getattr(self.env.unwrapped, "restart_draws", None)
        if restart is not None:
            restart()

    def step(self, spot: Spot, action: str) -> tuple[Spot, StepResult]:
        result = self.pool.step([(0, action)])[0]
        self.misses += 1
        return Spot(result[0], result[4], spot.t + 1), result

    @property
    def size(self) -> int:
        return 0


def check_deterministic(
    make_env,
    seed: int,
    histories: Sequence[Sequence[str]],
    restore: Callable[[Any, Hashable], dict] | None = None,
    options: dict | None = None,
    demos: bool = False,
) -> list[str]:
    """Play ``histories`` through one :class:`MemoLevel` and each through a fresh environment
    (reset with ``seed`` and ``options``); the differences found (``[]`` when the memo is exact
    for these histories). With ``demos``, after every step the memo's environment took, its
    demonstration is compared with the fresh environment's too (the level itself keeps one
    demonstration per anchor)."""
    memo = MemoLevel(make_env(), seed, options, restore=restore, demos=demos)
    bad = []
    for h, actions in enumerate(histories):
        direct = make_env()
        direct.reset(seed=seed, options=options)
        spot = memo.reset()
        for t, action in enumerate(actions):
            want = direct.step(action)
            misses = memo.misses
            spot, got = memo.step(spot, action)
            if _comparable(want) != _comparable(got):
                bad.append(f"history {h}, step {t} ({action!r}): {want[:4]} != {got[:4]}")
                break
            if demos and memo.misses > misses and _demo_of(memo.env) != _demo_of(direct):
                bad.append(f"history {h}, step {t}: demonstrations differ")
                break
            if want[2] or want[3]:
                break
    return bad


def _demo_of(env) -> tuple[str, ...] | None:
    plan = env.unwrapped.demonstration()
    return None if plan is None else tuple(plan)


def _comparable(result: StepResult) -> tuple:
    obs, reward, term, trunc, info = result
    return obs, reward, term, trunc, repr(sorted(info.items()))


# ------------------------------------------------------------------------ synthetic MDPs


class SyntheticEnv(TextEnv):
    """A :class:`SyntheticMDP` as a text environment.

    The observation is ``"state s"``, the actions ``a0 .. a{A-1}`` (all admissible), the anchor
    the state. A reset with seed k starts in the state drawn from ``mdp.initial`` by
    ``default_rng(k)``; the transitions of the i-th episode since the environment was built
    come from ``default_rng((k, i))``, so the G rollouts of a group start together and then
    differ, reproducibly (:meth:`restart_draws` numbers them from 0 again). Reward 1 on
    entering success, 0 otherwise; ``max_steps`` is the MDP's horizon (truncation counts as
    failure).
    """

    def __init__(self, mdp: SyntheticMDP):
        super().__init__()
        self.mdp = mdp
        self.max_steps = int(mdp.horizon)
        self._episodes = 0
        self._state = 0
        self._outcome: str | None = None
        self._draw = np.random.default_rng(0)
        self._names = mdp.action_names
        # Generator.choice(n, p=q) draws one uniform u and returns the first index whose
        # normalised cumulative sum exceeds u; the same arithmetic, done once per row, spares
        # its per-call checks (most of a step's cost).
        self._cdf = [[_cdf(mdp.P[s, a]) for a in range(mdp.n_actions)] for s in range(mdp.n_states)]
        self._initial_cdf = _cdf(mdp.initial)
        self._starts: dict[int, int] = {}  # the start state drawn for each reset seed
        # The generator of episode (seed, i) as it starts (a bit generator's state): setting
        # it costs a tenth of seeding a new one, and every run of a level replays them.
        self._draw_states: dict[tuple[int, int], dict] = {}
        self._replay = np.random.Generator(np.random.PCG64(0))

    def restart_draws(self) -> None:
        """Number the episodes from 0 again: the next episodes repeat the draws of the first
        ones since the environment was built."""
        self._episodes = 0

    def _reset(self, options: dict[str, Any] | None) -> str:
        seed = int(self.np_random.integers(2**31))  # the reset seed's stream, as other envs
        start = self._starts.get(seed)
        if start is None:
            start = bisect_right(self._initial_cdf, np.random.default_rng(seed).random())
            self._starts[seed] = start
        self._state = start
        key = (seed, self._episodes)
        state = self._draw_states.get(key)
        if state is None:
            self._draw = np.random.default_rng(key)
            if len(self._draw_states) < 100_000:
                self._draw_states[key] = self._draw.bit_generator.state
        else:
            self._replay.bit_generator.state = state
            self._draw = self._replay
        self._episodes += 1
        self._outcome = None
        return f"state {self._state}"

    def _step(self, action: str) -> Transition:
        names = self._names
        if action not in names:
            return Transition(f"state {self._state}", 0.0, False, False, None)
        a = names.index(action)
        x = bisect_right(self._cdf[self._state][a], self._draw.random())
        if x == self.mdp.success:
            self._outcome = "success"
            return Transition("success", 1.0, True, True, action)
        if x == self.mdp.failure:
            self._outcome = "failure"
            return Transition("failure", 0.0, True, True, action)
        self._state = x
        return Transition(f"state {x}", 0.0, False, True, action)

    def _anchor(self) -> Hashable:
        return self._outcome or self._state

    def _won(self) -> bool:
        return self._outcome == "success"

    def _admissible(self) -> list[str] | None:
        return list(self._names)

    def _task(self) -> str:
        return "Reach success."


def _cdf(p: np.ndarray) -> list[float]:
    """The cumulative distribution ``Generator.choice(len(p), p=p)`` samples by (its own
    arithmetic: the cumulative sum divided by its last value)."""
    cdf = np.asarray(p, dtype=np.float64).cumsum()
    cdf /= cdf[-1]
    return cdf.tolist()


def optimal_success(mdp: SyntheticMDP) -> float:
    """The best success probability within the horizon from ``mdp.initial`` (finite-horizon
    value iteration over the MDP's actions, no discount)."""
    S = mdp.n_states
    V = np.zeros(S)
    for _ in range(mdp.horizon):
        Q = mdp.P[:, :, :S] @ V + mdp.P[:, :, S]  # (S, A)
        V = Q.max(axis=1)
    return float(mdp.initial @ V)


def policy_success(mdp: SyntheticMDP, pi: np.ndarray) -> float:
    """Success probability within the horizon of the stationary policy ``pi`` (S, A)."""
    S = mdp.n_states
    V = np.zeros(S)
    for _ in range(mdp.horizon):
        Q = mdp.P[:, :, :S] @ V + mdp.P[:, :, S]
        V = (pi * Q).sum(axis=1)
    return float(mdp.initial @ V)
