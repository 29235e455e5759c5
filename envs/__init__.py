"""Bundled environments; importing this package registers them (see :mod:`agentrl.registry`)."""

from __future__ import annotations

from agentrl.envs import alfworld, proof, sokoban, webshop  # noqa: F401 - registers each env
