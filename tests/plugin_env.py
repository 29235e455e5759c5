"""A module a third-party package would advertise under the ``agentrl.envs`` entry point."""

from __future__ import annotations

from toy_env import GuessConfig, GuessEnv

from agentrl import register_env

register_env("plugin-guess", "plugin/Guess-v0", entry_point=GuessEnv, config_cls=GuessConfig)
