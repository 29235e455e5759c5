"""``--check``: re-measure a benchmark and compare it with its committed report.

A benchmark's ``check(results_dir, log, tolerance)`` re-measures a reduced but representative
part of its run and returns :class:`Figure` objects: one number each, read from the committed
markdown report (``results/<name>.md``, parsed by section and column header names with
:func:`~agentrl.bench._report.read_tables`) and measured now. Only figures that are stable
across machines and load are compared: ratios within one run (agentrl vs TRL, an estimator vs
GRPO) and deterministic accuracy figures. A figure regresses when it moved in its bad direction
by more than ``tolerance`` (default 30 %) of the committed value; :func:`evaluate` prints one
line per figure and gives the exit code (1 on any failure). A figure that cannot be compared
(TRL not installed, …) is *skipped* with its reason, never passed silently.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.bench._report import Table, read_tables

__all__ = ["CheckError", "Figure", "Table", "evaluate", "parse_number", "read_tables", "tables_in"]

TOLERANCE = 0.30
"""Default: a figure may move by at most 30 % of its committed value in its bad direction."""


@dataclass(frozen=True)
class Figure:
    """One compared number.

    Attributes:
        name: what it is, e.g. ``"credit: Pearson r of gigpo at G = 8"``.
        committed: the value in the committed report; None when the report lacks it (a failure
            unless ``skip`` says why).
        measured: the value measured now; None or NaN when the measurement failed (a failure).
        higher_is_better: the direction of an improvement.
        skip: why the figure was not compared (then it neither passes nor fails).
        unit: appended to the numbers in messages (e.g. ``"×"``).
    """

    name: str
    committed: float | None
    measured: float | None
    higher_is_better: bool
    skip: str | None = None
    unit: str = ""

    def regression(self) -> float:
        """How far the figure moved in its bad direction, relative to |committed| (≤ 0: it did
        not get worse); inf when either side is missing."""
        if self.committed is None or self.measured is None or not math.isfinite(self.measured):
            return math.inf
        worse = self.measured - self.committed
        if self.higher_is_better:
            worse = -worse
        return worse / max(abs(self.committed), 1e-12)

    def verdict(self, tolerance: float = TOLERANCE) -> str:
        """``"skip"``, ``"pass"`` or ``"fail"``."""
        if self.skip is not None:
            return "skip"
        return "fail" if self.regression() > tolerance else "pass"

    def message(self, tolerance: float = TOLERANCE) -> str:
        """One line naming the figure, the committed and the measured value, and the verdict."""
        verdict = self.verdict(tolerance)
        if verdict == "skip":
            return f"SKIP {self.name}: {self.skip}"
        if self.committed is None:
            return f"FAIL {self.name}: not in the committed report (regenerate it)"
        committed = _num(self.committed, self.unit)
        if self.measured is None or not math.isfinite(self.measured):
            return f"FAIL {self.name}: committed {committed}, measured nothing (it failed)"
        change = (self.measured - self.committed) / max(abs(self.committed), 1e-12)
        better = "higher" if self.higher_is_better else "lower"
        text = (
            f"{self.name}: committed {committed}, measured {_num(self.measured, self.unit)} "
            f"({change:+.0%}; {better} is better"
        )
        if verdict == "fail":
            return f"FAIL {text}, a regression beyond {tolerance:.0%})"
        return f"ok   {text})"


def _num(x: float, unit: str) -> str:
    return f"{x:.3g}{unit}"


def evaluate(
    title: str,
    figures: Sequence[Figure],
    tolerance: float = TOLERANCE,
    log: Callable[[str], Any] = print,
) -> int:
    """Print one line per figure and a summary; return 1 if any figure failed, else 0.

    Every figure skipped (nothing compared) returns 0 but says so in the summary, which then
    reads ``SKIPPED`` rather than ``PASSED``.
    """
    verdicts = [f.verdict(tolerance) for f in figures]
    for f in figures:
        log(f.message(tolerance))
    n_fail, n_skip = verdicts.count("fail"), verdicts.count("skip")
    n_pass = verdicts.count("pass")
    if n_fail:
        failed = ", ".join(f.name for f, v in zip(figures, verdicts) if v == "fail")
        log(
            f"{title}: FAILED — {n_fail} of {len(figures)} figures regressed by more than "
            f"{tolerance:.0%} or are missing: {failed}"
        )
        return 1
    if not n_pass:
        log(f"{title}: SKIPPED — nothing was compared ({n_skip} figures skipped, see above)")
        return 0
    skipped = f", {n_skip} skipped (see above)" if n_skip else ""
    log(f"{title}: PASSED — {n_pass} figures within {tolerance:.0%}{skipped}")
    return 0


class CheckError(Exception):
    """The committed report cannot be compared at all (missing, a ``--quick`` run, unparsable)."""


# --- reading the committed report ---


def committed_report(results_dir: str | os.PathLike, name: str, command: str) -> tuple[Path, str]:
    """The path and text of the committed report ``<results_dir>/<name>``; :class:`CheckError`
    when it is missing or a ``--quick`` smoke run (its figures compare with nothing)."""
    path = Path(results_dir) / name
    if not path.exists():
        raise CheckError(f"{path} does not exist: run `python -m agentrl.bench {command}` first")
    text = path.read_text()
    if "this was a `--quick` smoke run" in text:
        raise CheckError(f"{path} is a --quick smoke run; regenerate it with the full benchmark")
    return path, text


def confirmed(
    measure: Callable[[], list[Figure]], tolerance: float, log: Callable[[str], Any], title: str
) -> list[Figure]:
    """``measure()``'s figures; when one is beyond ``tolerance`` it measures once more and each
    figure keeps the better of its two values: one busy moment of a shared machine slows one
    measurement, a real regression shows twice."""
    figures = measure()
    if any(f.verdict(tolerance) == "fail" and f.committed is not None for f in figures):
        log(f"[{title}] a figure is beyond the tolerance: measuring again to confirm")
        again = measure()
        figures = [min(a, b, key=Figure.regression) for a, b in zip(figures, again)]
    return figures


def tables_in(text: str, section: str) -> list[Table]:
    """The tables under the ``## section`` heading; a missing section raises KeyError."""
    found = [t for t in read_tables(text) if t.section == section]
    if not found:
        raise KeyError(f"no table under '## {section}' in the committed report")
    return found


_NUMBER = re.compile(
    r"(?P<value>[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?)"
    r"(?:\s*(?P<unit>ms|s|×)(?![A-Za-z]))?"  # a unit only as a whole word: not "5 steps"
)


def parse_number(cell: str) -> float | None:
    """The first number of a table cell, in seconds for ``ms``/``s`` cells; None when the cell
    has none (``-``, ``n/a``, ``error: …``).

    ``"0.54 ± 0.09"`` → 0.54, ``"18,923"`` → 18923, ``"164.1 ms"`` → 0.1641, ``"1.19 s
    (scoring 488.0 ms)"`` → 1.19, ``"**1.56×**"`` → 1.56.
    """
    text = cell.replace("*", "").strip()
    if text.startswith(("error", "n/a", "-")) and not re.match(r"-\d", text):
        return None
    m = _NUMBER.search(text)
    if m is None:
        return None
    value = float(m.group("value").replace(",", ""))
    return value / 1e3 if m.group("unit") == "ms" else value
