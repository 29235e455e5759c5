"""The environment contract every agentrl environment follows.

An environment is a ``gymnasium.Env[str, str]``: the observation and the action are text.
``reset(*, seed=None, options=None) -> (obs, info)`` and
``step(action) -> (obs, reward, terminated, truncated, info)``. ``info`` always carries

- ``anchor``: a hashable key of the true environment state, without interaction history;
- ``won``: whether the task is solved;
- ``admissible_actions``: the valid actions as a list of strings, or ``None`` when the action
  space is open;
- ``task``: the instruction text.

After a step it also carries ``action_valid`` (whether the text parsed to an action) and
``executed_action`` (the canonical action string that was executed, ``None`` if invalid), so
that different responses executing the same action share statistics downstream.

Optionally, after a step, ``info["costs"]`` is a dict of named non-negative finite floats, the
costs of that step for constrained methods (``algo=constrained_grpo``: each name's episode sum
is held below a threshold). An environment reports the same names at every step (0.0 where a
cost does not apply). :class:`TextEnv` reports ``invalid`` (1.0 for an invalid action, else
0.0) and ``steps`` (1.0 per step) for every environment built on it; an environment adds its own
through ``_step_costs`` and lists them in ``cost_names`` (WebShop: ``over_budget``, 1.0 at a
purchase above the goal's price limit). The rollout drops malformed entries with a warning
instead of failing (:func:`agentrl.rollout.loop.step_costs`).

Optionally, after a step, ``info["rubric_reward"]`` is one finite float of either sign: a
process reward the environment computes from the transition (s, a, s') by its own rubric, read
by rubric-based credit assignment (``algo=trca``). It is kept apart from the step's reward, so
other estimators never see it. None of the bundled environments reports one.

:class:`TextEnv` implements the bookkeeping (step limit, truncation vs termination, the info
keys, never raising on bad actions); subclasses implement ``_reset``/``_step`` and draw all
randomness from ``self.np_random``. ``step`` before the first successful ``reset`` is a caller
bug and raises :class:`ResetNeeded`, also on the unwrapped env (gymnasium's ``OrderEnforcing``
wrapper only guards wrapped ones).

Optionally an environment offers demonstrations: ``demonstration() -> list[str] | None`` (on
the unwrapped env) returns actions that finish the task well from the *current* state (a solver
plan, a walkthrough, a reference answer), or None when it knows none from here. The supervised
warm start (``python -m agentrl.sft``) clones them; nothing else relies on it.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

EVAL_SEED_BASE = 2**31
"""Held-out seeds start here: training draws its task seeds below it, evaluation plays seeds
from it on, so no evaluation episode is ever a training task (for every environment whose tasks
are a function of the seed)."""

INFO_KEYS: tuple[str, ...] = ("anchor", "won", "admissible_actions", "task")
COSTS_KEY = "costs"
"""The optional ``info`` key of a step's named costs (see the module docstring)."""
RUBRIC_KEY = "rubric_reward"
"""The optional ``info`` key of a step's rubric reward (see the module docstring)."""
STEP_INFO_KEYS: tuple[str, ...] = (*INFO_KEYS, "action_valid", "executed_action")


class ResetNeeded(gym.error.ResetNeeded, RuntimeError):
    """``step()`` was called before ``reset()`` started an episode. Both a gymnasium
    ``ResetNeeded`` (what the ``OrderEnforcing`` wrapper raises) and a ``RuntimeError``."""


class TextSpace(gym.spaces.Space[str]):
    """Any string of at most ``max_length`` characters (gymnasium's ``Text`` limits the charset)."""

    def __init__(self, max_length: int = 100_000, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random lowercase word; only used by generic tooling, never by agentrl itself."""
        n = int(self.np_random.integers(1, 12))
        return "".join(chr(int(c)) for c in self.np_random.integers(97, 123, size=n))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


@dataclass(frozen=True)
class Transition:
    """What a subclass's ``_step`` reports; :class:`TextEnv` adds the bookkeeping."""

    obs: str
    reward: float
    terminated: bool
    action_valid: bool
    executed_action: str | None
    extra: dict[str, Any] | None = None


class TextEnv(gym.Env[str, str]):
    """Base class implementing the agentrl env contract around ``_reset`` and ``_step``.

    Subclasses set ``self.max_steps`` and implement:

    - ``_reset(options) -> str``: start a new episode using ``self.np_random``; return the
      observation.
    - ``_step(action: str) -> Transition``: apply the action text. Bad text must come back as
      ``action_valid=False``, never as an exception.
    - ``_anchor() -> Hashable``, ``_won() -> bool``, ``_admissible() -> list[str] | None``,
      ``_task() -> str``, and optionally ``_extra_info() -> dict``.

    ``truncated`` becomes true when ``max_steps`` steps have been taken without termination;
    ``terminated`` is only ever set by the subclass (a true end of the task). ``step`` before a
    successful ``reset`` raises :class:`ResetNeeded`, so subclasses never see it.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}  # noqa: RUF012 - gymnasium's API
    max_steps: int = 50
    ends_only_on_success: bool = False
    """True when ``terminated`` can only mean the task was solved (e.g. Sokoban)."""
    step_concurrency: int = 1
    """How many environments of this kind an inline pool may step at once, in threads. 1 (one
    after another) for steps that compute; more for steps that mostly wait on I/O, e.g. the
    proof env's remote judge (``env.judge_concurrency``). Each env is stepped by one thread at a
    time, so an env needs no locking of its own, but what its instances share must be
    thread-safe."""
    cost_names: tuple[str, ...] = ("invalid", "steps")
    """The names of the costs every step reports in ``info["costs"]`` (``_step_costs``)."""
    data_notice: str | None = None
    """A sentence a run shows once about where this environment's data comes from (e.g.
    generated games whose results are not comparable to published numbers); the env pools
    collect it from their environments, wherever they run, and log each distinct one once per
    process (:func:`agentrl.rollout.env_pool.announce`)."""

    def __init__(self) -> None:
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self._t = 0
        self._done = True
        self._started = False  # a reset has succeeded: the subclass holds an episode
        self._last_obs = ""

    # -- hooks for subclasses ------------------------------------------------------------
    def _reset(self, options: dict[str, Any] | None) -> str:
        raise NotImplementedError

    def _step(self, action: str) -> Transition:
        raise NotImplementedError

    def _anchor(self) -> Hashable:
        raise NotImplementedError

    def _won(self) -> bool:
        raise NotImplementedError

    def _admissible(self) -> list[str] | None:
        return None

    def _task(self) -> str:
        raise NotImplementedError

    def _extra_info(self) -> dict[str, Any]:
        return {}

    def _step_costs(self, tr: Transition) -> dict[str, float]:
        """The costs of the step ``tr`` (keys: ``cost_names``); subclasses that add costs
        extend this dict."""
        return {"invalid": 0.0 if tr.action_valid else 1.0, "steps": 1.0}

    def demonstration(self) -> list[str] | None:
        """Actions that solve the task from the current state, e.g. a solver plan (optional).

        Called after ``reset`` and between steps; ``[]`` once the episode is over or the task
        is solved, None when the environment knows no solution from here (e.g. after a move
        that left its walkthrough). The default knows none. Must not change the episode: no
        stepping, no draws from ``self.np_random``.
        """
        return None

    # -- gymnasium API -------------------------------------------------------------------
    def _info(self) -> dict[str, Any]:
        info = {
            "anchor": self._anchor(),
            "won": bool(self._won()),
            "admissible_actions": self._admissible(),
            "task": self._task(),
            "step": self._t,
        }
        info.update(self._extra_info())
        return info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        # A reset that raises (e.g. bad options) leaves no episode to step.
        self._started = False
        self._done = True
        self._last_obs = self._reset(options)
        self._done = False
        self._started = True
        return self._last_obs, self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self._started:
            # Without an episode the subclass has no state to describe (Sokoban divided by a
            # zero-width board, ALFWorld read a missing game): say what the caller must do.
            raise ResetNeeded(
                f"{type(self).__name__}.step() was called before reset(): call reset() to "
                "start an episode first"
            )
        if self._done:
            # Stepping a finished episode is a caller bug, but it must not crash a run.
            info = self._info()
            info.update(action_valid=False, executed_action=None, error="episode is over")
            return self._last_obs, 0.0, False, True, info
        # The action space is text: anything else is an invalid action, and "" is invalid in
        # every environment (the contract suite checks it).
        tr = self._step(action if isinstance(action, str) else "")
        self._t += 1
        terminated = bool(tr.terminated)
        truncated = not terminated and self._t >= self.max_steps
        self._done = terminated or truncated
        self._last_obs = tr.obs
        info = self._info()
        info.update(action_valid=bool(tr.action_valid), executed_action=tr.executed_action)
        if tr.extra:
            info.update(tr.extra)
        info[COSTS_KEY] = self._step_costs(tr)
        return tr.obs, float(tr.reward), terminated, truncated, info

    def render(self) -> str:
        return self._last_obs


def seeded_rng(seed: int | None) -> np.random.Generator:
    """The same generator gymnasium would make for ``seed`` (used by tools outside an env)."""
    rng, _ = gym.utils.seeding.np_random(seed)
    return rng
