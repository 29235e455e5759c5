"""Turn prompts and the projection of generated text to environment actions.

The prompt of a turn holds the task, the last ``history_length`` (observation, action) turns,
the current observation and, when the environment lists them, the admissible actions. Recent
history lives only in the prompt, never in the anchor key.

Projection maps the model's text to the action string passed to ``env.step``. In ``tag`` mode
the action is the content of the last ``<action>...</action>``; in ``plain`` mode (for tiny
models) the whole response, stripped, is the action. Text that does not project is an invalid
action: the environment receives an empty action (which every environment rejects without
raising) and the step is recorded as invalid.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

ActionFormat = Literal["tag", "plain"]
PromptStyle = Literal["auto", "generic", "household"]
"""``generic``: task, history, observation, admissible actions. ``household``: the layout
verl-agent uses for ALFWorld (an embodied-agent preamble, the step count, the history as
numbered observation/action pairs, the admissible actions as a bracketed quoted list).
``auto``: the style the environment registered (``register_env(..., prompt_style=...)``)."""

# Opening and closing tags, found in one left-to-right pass. Each is a fixed string, so the scan
# is linear; the lazy ``<action>(.*?)</action>`` it replaces retried from every unclosed
# ``<action>`` and was quadratic (100k characters of unclosed tags took seconds).
# Matching through ``re`` keeps its case-insensitivity exactly (``İ`` and ``ı`` match ``i``).
_TAGS = re.compile(r"<(/?)action>", re.IGNORECASE)
# A response longer than this is rejected before the env sees it. Long enough for a proof of
# ~20k tokens (env=proof grades whole answers); shorter actions are the env's to judge.
MAX_ACTION_CHARS = 100_000


def project_action(text: str, mode: ActionFormat) -> tuple[str, bool]:
    """Map generated ``text`` to ``(action, ok)``; ``ok`` is False when nothing projects."""
    if mode == "tag":
        content = _last_tagged(text)
        if content is None:
            return "", False
        action = content.strip()
    else:
        action = text.strip()
    if not action or len(action) > MAX_ACTION_CHARS:
        return "", False
    return action, True


def _last_tagged(text: str) -> str | None:
    """The content of the last ``<action>...</action>`` (None if there is none), exactly as
    ``re.findall(r"<action>(.*?)</action>", text, re.DOTALL | re.IGNORECASE)[-1]`` finds it.

    ``findall`` pairs the first opening tag after the previous match with the first closing
    tag after it (nested or repeated opening tags belong to the content); tags cannot overlap
    one another, so one pass over the tags in order reproduces its pairs in O(len(text)).
    """
    start = None  # where the content of an opened tag begins, None while none is open
    last = None
    for m in _TAGS.finditer(text):
        if not m.group(1):  # <action>
            if start is None:
                start = m.end()
        elif start is not None:  # </action> closing the open tag
            last = (start, m.start())
            start = None
    return None if last is None else text[last[0] : last[1]]


def build_prompt(
    task: str,
    history: Sequence[tuple[str, str]],
    observation: str,
    admissible: Sequence[str] | None,
    step: int,
    mode: ActionFormat,
    style: PromptStyle = "generic",
) -> str:
    """The user message of one turn.

    Args:
        task: the instruction text (``info['task']``).
        history: the last turns as (observation, action) pairs, oldest first.
        observation: the current observation.
        admissible: the admissible actions, or ``None`` when the env does not list them.
        step: the 0-based turn index (shown to the model as 1-based).
        mode: ``tag`` asks for ``<action>...</action>``, ``plain`` for the bare action.
        style: the prompt layout (:data:`PromptStyle`; ``auto`` reads as ``generic``).
    """
    if style == "household":
        return _household_prompt(task, history, observation, admissible, step, mode)
    parts = [task.strip()]
    if history:
        first = step - len(history) + 1
        lines = [
            f"Step {first + k}: observation:\n{obs.strip()}\naction: {act}"
            for k, (obs, act) in enumerate(history)
        ]
        parts.append("Recent history:\n" + "\n".join(lines))
    parts.append(f"Current observation (step {step + 1}):\n{observation.strip()}")
    if admissible:
        parts.append("Admissible actions: " + ", ".join(admissible))
    if mode == "tag":
        parts.append("Think briefly, then give your action as <action>...</action>.")
    else:
        parts.append("Answer with the action only.")
    return "\n".join(parts)


def _household_prompt(
    task: str,
    history: Sequence[tuple[str, str]],
    observation: str,
    admissible: Sequence[str] | None,
    step: int,
    mode: ActionFormat,
) -> str:
    """verl-agent's ALFWorld layout (in our words): who the agent is, the task, how many steps
    were taken, the recent turns, the current observation and the admissible actions."""
    goal = task.strip().removeprefix("Your task is to:").strip()
    parts = [f"You are an agent acting in a simulated household (ALFRED). Your task is to: {goal}"]
    if step:
        parts.append(f"You have taken {step} step(s) so far.")
    if history:
        first = step - len(history) + 1
        turns = "\n".join(
            f"[Observation {first + k}: {obs.strip()!r}, Action {first + k}: {act!r}]"
            for k, (obs, act) in enumerate(history)
        )
        parts.append(f"Your last {len(history)} observations and actions:\n{turns}")
    parts.append(f"You are now at step {step + 1}; you observe: {observation.strip()}")
    if admissible:
        listed = ",\n ".join(f"'{a}'" for a in admissible)
        parts.append(f"Your admissible actions now are:\n[{listed}]")
    if mode == "tag":
        parts.append(
            "Reason step by step inside <think> </think>, then choose one admissible action "
            "and write it inside <action> </action>."
        )
    else:
        parts.append("Answer with one admissible action only.")
    return "\n".join(parts)
