"""Environment registry: short names (``env=sokoban``) mapped to gymnasium ids.

``register_env("sokoban", "agentrl/Sokoban-v0", entry_point=..., config_cls=SokobanConfig)``
registers the environment with gymnasium (so ``gymnasium.make("agentrl/Sokoban-v0")`` works)
and under its short name for :func:`make`. ``config_cls`` is the environment's frozen config
dataclass; it lets a run validate ``env.*`` keys at start-up, before any work is done.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from agentrl.configuration import ConfigError, closest, from_mapping


@dataclass(frozen=True)
class EnvSpec:
    """One registered environment."""

    name: str
    env_id: str
    entry_point: str | Callable[..., gym.Env]
    config_cls: type | None
    parallel: bool = False
    """Steps are slow enough (an external engine) that a batch should step in worker processes
    (``rollout.env_pool=auto`` then picks the process pool)."""
    prompt_style: str = "generic"
    """Prompt layout used when ``rollout.prompt_style=auto`` (see
    :mod:`agentrl.rollout.prompting`)."""


_ENVS: dict[str, EnvSpec] = {}


def _origin(value: Any) -> Any:
    """What identifies a registered value across re-imports: a function's or class's module
    and qualified name (a re-imported module makes new objects with the same names)."""
    if callable(value) and hasattr(value, "__qualname__"):
        return (getattr(value, "__module__", None), value.__qualname__)
    if isinstance(value, tuple):
        return tuple(_origin(v) for v in value)
    return value


def same_definition(old: Any, new: Any) -> bool:
    """Whether two registry specs (dataclasses) describe the same definition: every field
    equal, functions and classes compared by where they are defined. Registering the same
    thing twice (a module imported again, by a plugin entry point and by hand) is harmless;
    registering something else under a taken name is an error."""
    fields = [f.name for f in dataclasses.fields(old)]
    return type(old) is type(new) and all(
        _origin(getattr(old, f)) == _origin(getattr(new, f)) for f in fields
    )


def where(value: Any) -> str:
    """``module.qualname`` of a registered function or class, for error messages."""
    module, name = _origin(value) if callable(value) else (None, repr(value))
    return f"{module}.{name}" if module else str(name)


def register_env(
    name: str,
    env_id: str,
    entry_point: str | Callable[..., gym.Env],
    config_cls: type | None = None,
    parallel: bool = False,
    prompt_style: str = "generic",
) -> EnvSpec:
    """Register an environment under a short name and a gymnasium id.

    Registering the same definition again (the module imported twice) is harmless
    (:func:`same_definition`); estimators and policy losses follow the same rule.

    Raises:
        ValueError: if ``name`` or ``env_id`` is already registered to something else.
    """
    spec = EnvSpec(name, env_id, entry_point, config_cls, parallel, prompt_style)
    if name in _ENVS:
        if same_definition(_ENVS[name], spec):
            _ENVS[name] = spec  # re-import of the same module: keep the newest objects
            gym.registry[env_id].entry_point = entry_point
            return spec
        raise ValueError(
            f"environment name {name!r} is already registered ({_ENVS[name].env_id}, "
            f"{where(_ENVS[name].entry_point)}); choose another name"
        )
    if env_id in gym.registry:
        raise ValueError(f"gymnasium id {env_id!r} is already registered")
    # Step limits are the environment's own (``max_steps``), so no TimeLimit wrapper.
    gym.register(id=env_id, entry_point=entry_point, max_episode_steps=None)
    _ENVS[name] = spec
    return spec


def load_plugins(group: str) -> None:
    """Import the bundled package named ``group`` and every module advertised under the
    entry-point ``group`` (once per process).

    The bundled environments and methods are the packages ``agentrl.envs`` and
    ``agentrl.algos``; they are loaded by that name, never imported by the core, so the arrows
    stay envs -> core <- algos. Third-party packages register environments (group
    ``agentrl.envs``), estimators (``agentrl.algos``) or policy losses the same way by naming a
    module in their ``[project.entry-points]``; importing the module runs its
    ``register_*`` calls, so ``env=<name>`` works on the command line without changes to
    agentrl.
    """
    # Under a lock: a second thread (a benchmark's thread pool resolving method names) must
    # wait for the first one's imports, not see the group as loaded with its registry still
    # empty. Re-entrant, since a plugin's import may load another group.
    with _LOAD_LOCK:
        if group in _LOADED_GROUPS:
            return
        _LOADED_GROUPS.add(group)
        import importlib
        from importlib.metadata import entry_points

        importlib.import_module(group)
        for ep in entry_points(group=group):
            ep.load()


_LOADED_GROUPS: set[str] = set()
_LOAD_LOCK = threading.RLock()


def _ensure_builtin_envs() -> None:
    load_plugins("agentrl.envs")


def list_envs() -> list[str]:
    """Short names of every registered environment, sorted."""
    _ensure_builtin_envs()
    return sorted(_ENVS)


def env_spec(name: str) -> EnvSpec:
    """The spec registered under ``name``; unknown names list the valid ones."""
    _ensure_builtin_envs()
    if name not in _ENVS:
        by_id = {s.env_id: s for s in _ENVS.values()}
        if name in by_id:
            return by_id[name]
        raise ConfigError(
            f"unknown environment {name!r}; registered environments are {sorted(_ENVS)}."
            + closest(name, _ENVS)
        )
    return _ENVS[name]


def validate_env_kwargs(name: str, kwargs: dict[str, Any]) -> Any:
    """Check ``kwargs`` against the environment's config dataclass (errors name ``env.<key>``)."""
    spec = env_spec(name)
    if spec.config_cls is None:
        return kwargs
    return from_mapping(spec.config_cls, kwargs, path="env")


def make(name: str, **kwargs: Any) -> gym.Env:
    """Create the environment registered as ``name`` (short name or gymnasium id).

    The environment checker is off: the contract test suite checks every registered
    environment instead, and the checker's wrappers would slow stepping in training.
    """
    spec = env_spec(name)
    if spec.config_cls is not None:
        # render_mode is gymnasium's own keyword, not part of an environment's config.
        validate_env_kwargs(spec.name, {k: v for k, v in kwargs.items() if k != "render_mode"})
    # The options travel inside the spec, not as gym.make's keyword arguments, where one named
    # like a parameter of gym.make itself (env=gem's ``id``) would collide with it.
    gym_spec = gym.spec(spec.env_id)
    gym_spec = dataclasses.replace(gym_spec, kwargs={**gym_spec.kwargs, **kwargs})
    return gym.make(gym_spec, disable_env_checker=True)
