"""A test environment that can kill, hang or break its worker on command (fault injection)."""

from __future__ import annotations

import os
import time

from agentrl import register_env
from agentrl.env_api import TextEnv, Transition


class CrashyEnv(TextEnv):
    """Counts valid "tick" actions; "die" kills the process, "hang" sleeps, "raise" raises."""

    max_steps = 6

    def _reset(self, options):
        self.ticks = 0
        self.pid = os.getpid()
        self.label = int(self.np_random.integers(1000))  # seeds differ, as the contract wants
        return "tick away"

    def _step(self, action):
        if action == "die":
            os._exit(3)
        if action == "hang":
            time.sleep(3600)
        if action == "raise":
            raise RuntimeError("environment bug")
        if action != "tick":
            return Transition("?", 0.0, False, action_valid=False, executed_action=None)
        self.ticks += 1
        return Transition(f"ticks={self.ticks}", 1.0, self.ticks >= 3, True, "tick")

    def _anchor(self):
        return (self.label, self.ticks)

    def _won(self):
        return self.ticks >= 3

    def _admissible(self):
        return ["tick"]

    def _task(self):
        return "Tick three times."

    def _extra_info(self):
        return {"pid": self.pid}


register_env("crashy", "agentrl-test/Crashy-v0", entry_point=CrashyEnv, parallel=True)


class SlowStartEnv(CrashyEnv):
    """A crashy env whose construction takes 2 s, as a heavy engine's start-up does."""

    def __init__(self) -> None:
        time.sleep(2.0)
        super().__init__()


register_env("slow-start", "agentrl-test/SlowStart-v0", entry_point=SlowStartEnv, parallel=True)
