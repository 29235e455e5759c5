"""Projection of generated text to actions: the tag scan agrees with the regex it replaced and
stays linear on adversarial responses (timings compared within the test, never absolute)."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from agentrl.rollout.prompting import MAX_ACTION_CHARS, project_action

_OLD_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


def _old_project_tag(text: str) -> tuple[str, bool]:
    """The former ``tag`` projection (a lazy regex over the whole response): the reference."""
    found = _OLD_TAG.findall(text)
    if not found:
        return "", False
    action = found[-1].strip()
    if not action or len(action) > MAX_ACTION_CHARS:
        return "", False
    return action, True


FRAGMENTS = [
    "<action>",
    "</action>",
    "<ACTION>",
    "</ACTION>",
    "<Action>",
    "</aCtIoN>",
    "<actİon>",  # re's IGNORECASE matches U+0130 and U+0131 with "i"
    "</actıon>",
    "<action",
    "</action",
    "action>",
    "<",
    ">",
    "/",
    "x",
    "up",
    " ",
    "\n",
    "\t",
]


def test_tag_projection_agrees_with_the_former_regex_on_random_strings():
    rng = np.random.default_rng(0)
    for _ in range(20_000):
        n = int(rng.integers(0, 12))
        text = "".join(FRAGMENTS[int(k)] for k in rng.integers(len(FRAGMENTS), size=n))
        assert project_action(text, "tag") == _old_project_tag(text), repr(text)


@pytest.mark.parametrize(
    "text",
    [
        "<action>a<action>b</action>",  # a repeated opening tag belongs to the content
        "<action>x</action><action>y<action>z</action>",
        "<action>a</action></action>",  # a stray closing tag closes nothing
        "<action>ok</action><action>unclosed",
        "<ACTION>\n left \n</action>",
        "<action>" + "y" * (MAX_ACTION_CHARS + 1) + "</action>",  # too long: invalid
        "<action>" + "y" * MAX_ACTION_CHARS + "</action>",
        "<action>ok</action><action> </action>",  # the last one is empty: invalid
    ],
)
def test_tag_projection_agrees_on_edge_cases(text):
    assert project_action(text, "tag") == _old_project_tag(text)


def _best_time(text: str, give_up_after: float = float("inf")) -> float:
    """The least CPU time of this thread over repeated projections of ``text`` (for at least
    0.05 s of repeats, at least 3). CPU time, not wall time, and the minimum: other processes on
    a shared machine then barely move the measurement. Stops early past ``give_up_after``."""
    best, spent, runs = float("inf"), 0.0, 0
    while runs < 3 or (spent < 0.05 and runs < 500):
        t0 = time.thread_time()
        project_action(text, "tag")
        elapsed = time.thread_time() - t0
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
        if best > give_up_after:
            break
    return best


# Each builds a response of about n characters; all but the last defeat a lazy regex.
ADVERSARIAL = {
    "open_tags": lambda n: "<action>" * (n // 8),
    "open_tags_mixed_case": lambda n: "<ACTION>x" * (n // 9),
    "one_open_then_text": lambda n: "<action>" + "x" * n,
    "near_miss_closes": lambda n: "<action></action" * (n // 16),
    "open_then_near_miss_closes": lambda n: "<action>" + "</actio" * (n // 7),
    "closed_pairs": lambda n: "<action>up</action>" * (n // 19),
}


@pytest.mark.parametrize("shape", sorted(ADVERSARIAL))
def test_tag_projection_time_grows_linearly(shape):
    """10k -> 100k -> 1M characters: each tenfold input may take at most 40x longer (a linear
    scan takes ~10x, the former regex ~100x). Sizes grow in steps so that a quadratic scan fails
    at 100k instead of spending minutes on 1M."""
    build = ADVERSARIAL[shape]
    previous = None
    for n in (10_000, 100_000, 1_000_000):
        text = build(n)
        assert len(text) >= 0.9 * n
        # The floor keeps timer resolution on the small input from deciding the test.
        bound = float("inf") if previous is None else 40 * max(previous, 1e-5)
        elapsed = _best_time(text, give_up_after=bound)
        assert elapsed < bound, (shape, n, elapsed, previous)
        previous = elapsed
