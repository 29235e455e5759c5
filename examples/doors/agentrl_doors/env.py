"""Doors: open the door that hides the treasure (a text bandit, the README's env example)."""

import re
from dataclasses import dataclass

from agentrl import register_env
from agentrl.configuration import check, from_mapping
from agentrl.env_api import TextEnv, Transition


def parse_door(text):
    """The one door a short answer names ("2", "Door 2.", "open 2"), else None.

    Lenient, as the bundled environments are; long text or several doors is invalid."""
    words = re.findall(r"\w+", text)
    doors = {w for w in words if w in ("1", "2", "3")}
    return int(doors.pop()) if len(doors) == 1 and len(words) <= 4 else None


@dataclass(frozen=True)
class DoorsConfig:
    max_steps: int = 2
    """Doors the agent may try before the episode ends."""
    odds: tuple[float, float, float] = (0.2, 0.6, 0.2)
    """Chance that the treasure is behind door 1, 2 or 3."""

    def __post_init__(self):
        check(self.max_steps >= 1, "env.max_steps", self.max_steps, ">= 1")
        check(abs(sum(self.odds) - 1) < 1e-9, "env.odds", self.odds, "summing to 1")


class DoorsEnv(TextEnv):
    def __init__(self, **kwargs):
        super().__init__()
        self.cfg = from_mapping(DoorsConfig, kwargs, path="env")
        self.max_steps = self.cfg.max_steps

    def _reset(self, options):
        # All randomness from self.np_random, so a seed replays the episode exactly.
        self.treasure = 1 + int(self.np_random.choice(3, p=list(self.cfg.odds)))
        self.tried = ()
        self.found = False
        return "Three closed doors: 1, 2 and 3."

    def _step(self, action):
        door = parse_door(action)
        if door is None:  # malformed output is an invalid action, never an exception
            return Transition("Nothing happens.", 0.0, False, False, None)
        self.tried += (door,)
        self.found = door == self.treasure
        obs = "You found the treasure!" if self.found else f"Door {door} is empty."
        return Transition(obs, float(self.found), self.found, True, str(door))

    def _anchor(self):
        return self.tried  # the state: which doors were tried (not the hidden treasure)

    def _won(self):
        return self.found

    def _admissible(self):
        return ["1", "2", "3"]

    def _task(self):
        return "Open the door that hides the treasure."


register_env("doors", "agentrl_doors/Doors-v0", entry_point=DoorsEnv, config_cls=DoorsConfig)
