"""The test suite's own toy environment, registered as ``guess``.

A minimal TextEnv that puts a second small environment under the contract suite and serves the
rollout and plugin tests (the README's example is examples/doors, tested in test_examples.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrl import register_env
from agentrl.configuration import from_mapping
from agentrl.env_api import TextEnv, Transition


@dataclass(frozen=True)
class GuessConfig:
    max_steps: int = 5


class GuessEnv(TextEnv):
    def __init__(self, **kwargs):
        super().__init__()
        self.cfg = from_mapping(GuessConfig, kwargs, path="env")
        self.max_steps = self.cfg.max_steps

    def _reset(self, options):
        self.secret = int(self.np_random.integers(1, 4))  # randomness only from np_random
        self.solved = False
        return "Guess a number from 1 to 3."

    def _step(self, action):
        text = action.strip()
        if text not in ("1", "2", "3"):
            return Transition(
                "Invalid guess.", 0.0, False, action_valid=False, executed_action=None
            )
        self.solved = int(text) == self.secret
        return Transition(
            "Right!" if self.solved else "Wrong.",
            float(self.solved),
            self.solved,
            action_valid=True,
            executed_action=text,
        )

    def _anchor(self):
        return self.solved

    def _won(self):
        return self.solved

    def _admissible(self):
        return ["1", "2", "3"]

    def _task(self):
        return "Find the secret number."


register_env("guess", "myproject/Guess-v0", entry_point=GuessEnv, config_cls=GuessConfig)
