"""agentrl: reinforcement learning of LLM agents on multi-turn text environments.

The public entry points: :func:`make` creates a registered environment by short name,
:func:`register_env` adds one, :func:`list_envs` lists them. Credit-assignment estimators live
in :mod:`agentrl.credit` (``register_estimator``); training runs through ``python -m agentrl.run``.
"""

from __future__ import annotations

from agentrl import _moved
from agentrl.registry import list_envs, make, register_env

_moved.install()

__all__ = ["list_envs", "make", "register_env"]
__version__ = "0.2.1"
