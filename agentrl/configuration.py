"""Turning Hydra/YAML mappings into the frozen dataclasses that hold every default.

Each configurable thing in agentrl owns one frozen dataclass next to its code; YAML only
overrides fields. :func:`from_mapping` builds such a dataclass from a mapping and fails with a
:class:`ConfigError` that names the bad key (with its full dotted path) and lists the valid
choices, so a broken config stops the run at start-up rather than mid-way.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message says which and what is valid."""


REMOVED_KEYS: dict[str, str] = {
    "learner.query_preserved": "learner.batching=query_preserved",
    "model.name": "the config group model=<preset> (model.name was never read)",
    "rollout.eval_temperature": "trainer.eval_temperature",
    "trainer.tokenizer_episodes": "model.tokenizer_episodes",
    "learner.loss_args.actor_clip_low": "learner.clip_low (one clip for every loss)",
    "learner.loss_args.actor_clip_high": "learner.clip_high (one clip for every loss)",
    "learner.loss_args.actor_clip_c": "learner.clip_ratio_c (one clip for every loss)",
}
"""Keys of agentrl 0.2.0 that were removed or moved, and what to use instead: for one release
setting one fails with a message that names the replacement."""


def removed_key(path: str) -> str:
    """The removal message for the full key ``path`` (e.g. ``rollout.eval_temperature``), or
    "" if it was never removed."""
    if path not in REMOVED_KEYS:
        return ""
    return f" {path} was removed in agentrl 0.2.1; use {REMOVED_KEYS[path]}."


def closest(name: str, choices: Iterable[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest choice, or an empty string."""
    match = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.5)
    return f" Did you mean {match[0]!r}?" if match else ""


def check_choice(path: str, value: Any, choices: Iterable[Any]) -> None:
    """Raise :class:`ConfigError` unless ``value`` is one of ``choices``."""
    choices = list(choices)
    if value not in choices:
        raise ConfigError(
            f"{path}={value!r} is not valid; choose one of {choices}."
            + closest(str(value), map(str, choices))
        )


def check(condition: bool, path: str, value: Any, requirement: str) -> None:
    """Raise :class:`ConfigError` saying ``path=value`` must satisfy ``requirement``."""
    if not condition:
        raise ConfigError(f"{path}={value!r} is invalid: it must be {requirement}.")


def _coerce(path: str, value: Any, annotation: Any) -> Any:
    """Coerce YAML values (lists, ints) to the field's annotated type where that is lossless."""
    origin = get_origin(annotation)
    args = get_args(annotation)
    if annotation is Any or annotation is None:
        return value
    if origin is Literal:
        check_choice(path, value, args)
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(path, value, arg)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{path}={value!r} has the wrong type.")
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path}={value!r} must be a list.")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(f"{path}[{i}]", v, args[0]) for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{path}={value!r} must have {len(args)} elements.")
        return tuple(_coerce(f"{path}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args)))
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}={value!r} must be a number.")
        # inf/nan pass every ordering check (lr=inf > 0) and then poison the weights.
        if not math.isfinite(value):
            raise ConfigError(f"{path}={value!r} must be a finite number.")
        return float(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}={value!r} must be an integer.")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}={value!r} must be true or false.")
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}={value!r} must be a string.")
        return value
    if dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}={value!r} must be a mapping.")
        return from_mapping(annotation, value, path)
    return value


def from_mapping(cls: type[T], mapping: Mapping[str, Any] | None, path: str = "") -> T:
    """Build the dataclass ``cls`` from ``mapping``, rejecting unknown keys with a helpful error.

    Args:
        cls: a dataclass type whose fields carry the defaults.
        mapping: overrides (e.g. a Hydra node converted to a dict); ``None`` means none.
        path: dotted prefix used in error messages (``"trainer"`` gives ``trainer.lr``).
    """
    mapping = dict(mapping or {})
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    prefix = f"{path}." if path else ""
    for key in mapping:
        if key not in fields:
            raise ConfigError(
                f"{prefix}{key} is not a valid key; valid keys are {sorted(fields)}."
                + (removed_key(prefix + key) or closest(key, fields))
            )
    kwargs = {k: _coerce(prefix + k, v, hints[k]) for k, v in mapping.items()}
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        # Checks in __post_init__ name the field; add where the config sits in the run.
        if prefix and not str(exc).startswith(prefix):
            raise ConfigError(prefix + str(exc)) from exc
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path or cls.__name__}: {exc}") from exc


def to_dict(obj: Any) -> dict[str, Any]:
    """A dataclass as a plain (JSON/YAML-friendly) dict; tuples become lists."""

    def plain(v: Any) -> Any:
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return {k: plain(v) for k, v in dataclasses.asdict(obj).items()}
