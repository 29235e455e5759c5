"""Sokoban: push every box onto a target, with text observations and free-text moves.

Registered as ``sokoban`` / ``agentrl/Sokoban-v0``. :mod:`.env` holds :class:`SokobanConfig`
and :class:`SokobanEnv`; :mod:`.generator` makes solvable levels by reverse play (well under a
millisecond for 7x7 rooms); :mod:`.solver` finds optimal solutions by breadth-first search.
"""

from __future__ import annotations

from agentrl.registry import register_env

from .env import SokobanConfig, SokobanEnv, parse_action
from .generator import Level, generate_level

register_env(
    "sokoban",
    "agentrl/Sokoban-v0",
    entry_point="agentrl.envs.sokoban.env:SokobanEnv",
    config_cls=SokobanConfig,
)

__all__ = ["Level", "SokobanConfig", "SokobanEnv", "generate_level", "parse_action"]
