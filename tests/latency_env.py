"""Test environments for continuous rollout: random episode lengths and step latencies, a
step that waits for a signal, and a worker that dies once mid-episode."""

from __future__ import annotations

import os
import threading
import time

from agentrl import register_env
from agentrl.env_api import TextEnv, Transition


class LatencyEnv(TextEnv):
    """Episodes of 1-6 steps (drawn at reset, invalid steps included); each step sleeps up to
    ``max_delay_s`` (drawn from the env's generator, so the same in every rollout mode). Any
    non-empty action is valid; the observation echoes it, so a changed response changes the
    rest of the episode.

    Class hooks for in-process tests: ``log`` (a list) receives ``("step-start", label)`` and
    ``("step-end", label)``; a step of an env whose label is in ``hold`` waits for ``gate``."""

    max_steps = 10
    step_concurrency = 8
    log: list | None = None
    hold: frozenset = frozenset()
    gate: threading.Event | None = None

    def __init__(self, max_delay_s: float = 0.0):
        super().__init__()
        self.max_delay_s = max_delay_s

    def _reset(self, options):
        self.length = int(self.np_random.integers(1, 7))
        self.said: list[str] = []
        self.label = int(self.np_random.integers(1_000_000))
        return f"say something ({self.length} turns)"

    def _step(self, action):
        cls = type(self)
        if cls.log is not None:
            cls.log.append(("step-start", id(self)))
        time.sleep(self.max_delay_s * float(self.np_random.random()))
        if id(self) in cls.hold and cls.gate is not None:
            cls.gate.wait(timeout=1.0)
        if cls.log is not None:
            cls.log.append(("step-end", id(self)))
        action = action.strip()
        self.said.append(action[:12])
        done = len(self.said) >= self.length  # invalid steps count: lengths stay as drawn
        if not action:
            return Transition("nothing said", 0.0, done, False, None)
        return Transition(f"you said {action[:12]!r}", float(len(action) % 3), done, True, action)

    def _anchor(self):
        return (self.label, tuple(self.said))

    def _won(self):
        return len(self.said) >= self.length

    def _task(self):
        return "Say a few things."


class DyingEnv(LatencyEnv):
    """A latency env of which the first one to take its second step (over all processes:
    an exclusive file at ``flag``) kills its worker process."""

    def __init__(self, flag: str = "", max_delay_s: float = 0.0):
        super().__init__(max_delay_s)
        self.flag = flag

    def _step(self, action):
        if len(self.said) == 1 and self.flag:
            try:
                os.close(os.open(self.flag, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os._exit(3)
        return super()._step(action)


register_env("latency-test", "agentrl-test/Latency-v0", entry_point=LatencyEnv)
register_env("dying-test", "agentrl-test/Dying-v0", entry_point=DyingEnv, parallel=True)
