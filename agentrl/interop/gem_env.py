"""A GEM environment as an agentrl environment: ``env=gem env.id=<GEM id>``.

GEM (``gem-llm``) environments follow Gymnasium's five-tuple API with text observations and
actions, but GEM's own games carry none of the ``info`` keys agentrl's contract asks for.
:class:`GemEnv` wraps ``gem.make(env.id, **env.options)`` in a
:class:`~agentrl.env_api.TextEnv` and supplies them. A GEM environment that does report them
keeps its own: agentrl's environments offered to GEM (:mod:`agentrl.interop.gem`) come back
unchanged, so ``env=gem env.id=agentrl/sokoban`` plays Sokoban step for step.

- the action: the projected text with surrounding spaces removed, put into
  ``env.action_template`` (``{action}`` is replaced by it; GEM's games read the last
  ``\\boxed{...}``, so ``\\boxed{{action}}`` lets the model answer with the bare move). Every
  text goes to GEM, empty text (nothing projected) included: GEM's games answer text they cannot
  parse with their format-error reward and end the episode, which is their rule, not agentrl's.
- ``action_valid``/``executed_action``: GEM's ``info`` values when it reports them; otherwise
  any non-empty text counts as valid, since GEM does not say which texts it parsed, and
  ``executed_action`` is that text before the template, so identical answers share statistics
  downstream.
- ``task``: GEM's ``info["task"]``, else its reset observation (GEM's games put their
  instructions there; it is also the first observation, so the first prompt shows them twice).
- ``anchor``: GEM's ``info[env.anchor_key]`` (``anchor``) when it reports one; otherwise a hash
  of the observation text, since GEM's games expose no state key. Graph-based credit (GiGPO,
  CRBC and the other step-level methods) then merges steps whose observations are the same
  text: exact when the observation shows the whole state (a board), an approximation when it
  does not (a hint that also depends on earlier guesses).
- ``admissible_actions``: GEM's ``info[env.admissible_key]`` (``admissible_actions``) when it is
  a list of strings, else None (the games of gem-llm 0.1 list none).
- ``terminated``/``truncated``: GEM's, except that a step GEM flags both (its games do at their
  turn limit) counts as truncated only: the limit is not a true end of the task.
  ``env.max_steps`` adds agentrl's own step limit.
- ``won``: GEM's ``info["won"]``, else whether GEM ended the episode (terminated, not truncated)
  with a step reward of at least ``env.won_reward`` (GEM's games give 1.0 for success).
- ``costs``: GEM's ``info["costs"]`` when the GEM environment names its costs
  (``cost_names``, as agentrl's do), else agentrl's ``invalid`` and ``steps``.
- GEM's own ``info`` is passed on as ``info["gem_info"]``.

Seeds: ``reset(seed=s)`` resets GEM with the same ``s``; ``reset()`` without a seed passes one
drawn from the env's ``np_random``, so twin runs agree. GEM's games draw from Python's global
``random`` (and numpy's global generator), which their reset seeds; each :class:`GemEnv` keeps
its own copy of both global states and swaps it in around every call into GEM, so environments
stepped in turn neither disturb one another nor the rest of the process. The swap assumes no
other thread draws from those global generators during a GEM call (agentrl steps one
environment per thread, ``step_concurrency = 1``).

``gem`` is imported only when a :class:`GemEnv` is built: registering ``env=gem`` costs nothing
for runs that never use it. Installing GEM: see :mod:`agentrl.interop.gem`.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentrl.configuration import ConfigError, check, closest, from_mapping
from agentrl.env_api import COSTS_KEY, TextEnv, Transition
from agentrl.interop.anchors import text_anchor
from agentrl.registry import register_env

INSTALL = (
    "pip install 'agentrl[gem]' && pip install --no-deps 'gem-llm==0.1.0' (the README's GEM "
    "section says why --no-deps)"
)


@dataclass(frozen=True)
class GemConfig:
    """Every ``env=gem`` setting with its default (``env.*`` keys)."""

    id: str = ""
    """The GEM environment to wrap (``gem.make(id)``), e.g. ``game:GuessTheNumber-v0-easy``;
    required (empty only so that the default config can be listed)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``gem.make``: the GEM environment's own settings (set them with
    ``+env.options.max_turns=5``). GEM's games ignore names they do not know."""
    action_template: str = "{action}"
    """The text sent to GEM, with ``{action}`` replaced by the projected action."""
    max_steps: int = 50
    """Steps before agentrl truncates the episode (GEM's own limits apply as well)."""
    anchor_key: str | None = "anchor"
    """The key of GEM's ``info`` that identifies the state; where GEM reports none (or null),
    the anchor is a hash of the observation text."""
    admissible_key: str | None = "admissible_actions"
    """The key of GEM's ``info`` that lists the valid actions; where GEM reports none (or
    null), the action space is open."""
    won_reward: float = 1.0
    """A terminating step with at least this reward counts as a win."""

    def __post_init__(self) -> None:
        check(self.max_steps >= 1, "max_steps", self.max_steps, "at least 1")
        check(
            "{action}" in self.action_template,
            "action_template",
            self.action_template,
            "a text containing {action}, where the projected action goes",
        )
        for name in ("anchor_key", "admissible_key"):
            value = getattr(self, name)
            check(value is None or bool(value), name, value, "a non-empty key or null")


def import_gem() -> Any:
    """The ``gem`` package, or a :class:`ConfigError` that says how to install it.

    Importing gem calls ``logging.basicConfig(level=INFO)``: in a process whose logging is not
    configured yet (an env worker) that would print every library's INFO records, so the root
    logger is left as it was.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import gem
    except ImportError as exc:
        raise ConfigError(
            f"env=gem needs GEM (gem-llm), which does not import ({exc}): {INSTALL}"
        ) from exc
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    return gem


class GemEnv(TextEnv):
    """``gem.make(env.id, **env.options)`` behind agentrl's environment contract (see the
    module docstring for how each ``info`` key is derived)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.cfg = from_mapping(GemConfig, kwargs, path="env")
        self.max_steps = self.cfg.max_steps
        if not self.cfg.id:
            raise ConfigError(
                "env.id is required with env=gem: the GEM environment to wrap, e.g. "
                "env.id=game:GuessTheNumber-v0-easy (gem.print_envs() lists them all)"
            )
        gem = import_gem()
        registered = gem.envs.registration.ENV_REGISTRY
        if self.cfg.id.startswith("agentrl/") and self.cfg.id not in registered:
            # agentrl's own environments join GEM's registry when this module is imported (in
            # every process that builds one: env worker processes and Ray actors too).
            import agentrl.interop.gem  # noqa: F401
        if self.cfg.id not in registered:
            raise ConfigError(
                f"env.id={self.cfg.id!r} is not a registered GEM environment ({len(registered)} "
                "are; gem.print_envs() lists them)." + closest(self.cfg.id, registered)
            )
        # Each env owns a copy of the global generators GEM draws from (module docstring).
        self._py_state = random.Random(0).getstate()
        self._np_state = np.random.RandomState(0).get_state()
        with self._own_global_rng():
            self.gem_env = gem.make(self.cfg.id, **self.cfg.options)
        names = getattr(self.gem_env, "cost_names", None)
        if isinstance(names, tuple) and all(isinstance(n, str) for n in names):
            self.cost_names = names  # an agentrl environment's own costs (see _step_costs)
        self._seed: int | None = None
        self._task_text = ""
        self._obs = ""
        self._gem_info: dict[str, Any] = {}
        self._won_flag = False
        self._gem_truncated = False

    @contextlib.contextmanager
    def _own_global_rng(self) -> Iterator[None]:
        outer = random.getstate(), np.random.get_state()
        random.setstate(self._py_state)
        np.random.set_state(self._np_state)
        try:
            yield
        finally:
            self._py_state, self._np_state = random.getstate(), np.random.get_state()
            random.setstate(outer[0])
            np.random.set_state(outer[1])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        self._seed = seed  # GEM is reset with the caller's seed itself (module docstring)
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._gem_truncated = False
        obs, reward, terminated, truncated, info = super().step(action)
        if self._gem_truncated and not truncated:
            # GEM's own limit ended the episode; TextEnv only knows agentrl's max_steps.
            truncated = True
            self._done = True
        return obs, reward, terminated, truncated, info

    def _reset(self, options: dict[str, Any] | None) -> str:
        seed = self._seed if self._seed is not None else int(self.np_random.integers(2**31))
        with self._own_global_rng():
            obs, info = self.gem_env.reset(seed=seed)
        self._obs = str(obs)
        self._gem_info = dict(info or {})
        task = self._gem_info.get("task")
        self._task_text = task if isinstance(task, str) else self._obs
        self._won_flag = False
        return self._obs

    def _step(self, action: str) -> Transition:
        text = action.strip()
        sent = self.cfg.action_template.replace("{action}", text)
        with self._own_global_rng():
            obs, reward, terminated, truncated, info = self.gem_env.step(sent)
        self._gem_truncated = bool(truncated)
        ended = bool(terminated) and not self._gem_truncated
        self._obs = str(obs)
        self._gem_info = dict(info or {})
        won = self._gem_info.get("won")
        if isinstance(won, bool):
            self._won_flag = won
        else:
            self._won_flag = ended and float(reward) >= self.cfg.won_reward
        valid = self._gem_info.get("action_valid")
        if isinstance(valid, bool):  # GEM's env follows agentrl's contract: keep its verdict
            executed = self._gem_info.get("executed_action") if valid else None
        else:
            valid, executed = bool(text), text or None
        return Transition(
            self._obs,
            float(reward),
            ended,
            action_valid=valid,
            executed_action=executed,
            extra={"gem_info": self._gem_info},
        )

    def _step_costs(self, tr: Transition) -> dict[str, float]:
        costs = self._gem_info.get(COSTS_KEY)
        if isinstance(costs, dict) and tuple(costs) == self.cost_names:
            return dict(costs)  # GEM's env reports agentrl's costs: keep them
        return super()._step_costs(tr)

    def _anchor(self) -> Hashable:
        key = self.cfg.anchor_key
        value = self._gem_info.get(key) if key is not None else None
        if value is None:
            return text_anchor(self._obs)
        try:
            hash(value)
        except TypeError:  # e.g. a list: its text is a key that compares by value
            return repr(value)
        return value

    def _won(self) -> bool:
        return self._won_flag

    def _admissible(self) -> list[str] | None:
        key = self.cfg.admissible_key
        value = self._gem_info.get(key) if key is not None else None
        if isinstance(value, list | tuple) and all(isinstance(a, str) for a in value):
            return list(value)
        return None

    def _task(self) -> str:
        return self._task_text


register_env(
    "gem", "agentrl/GEM-v0", entry_point="agentrl.interop.gem_env:GemEnv", config_cls=GemConfig
)
