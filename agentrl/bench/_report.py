"""Shared bits of the benchmark reports: installed versions and the CPU's name."""

from __future__ import annotations

import os
import platform
import re
from importlib import metadata
from pathlib import Path


def version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``"not installed"``."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (or what ``platform`` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def header(packages: tuple[str, ...], command: str, quick: bool, note: str = "") -> list[str]:
    """The opening lines of a report section: machine, date, load, versions, how to reproduce.

    Args:
        packages: distributions whose installed versions are listed.
        command: the command that reproduces the section.
        quick: whether this was a ``--quick`` smoke run (said in the reproduce line).
        note: appended to the machine line (e.g. why the load matters).
    """
    import datetime
    import os

    versions = ", ".join(f"{d} {version(d)}" for d in packages)
    return [
        f"Machine: {os.cpu_count()} CPU cores ({cpu_name()}), no GPU; "
        f"Python {platform.python_version()}. Date: {datetime.date.today().isoformat()}. "
        f"Load average at the end: {os.getloadavg()[0]:.1f}{note}.  ",
        f"Versions: {versions}.  ",
        f"Reproduce: `{command}`" + (" (this was a `--quick` smoke run)." if quick else "."),
    ]


def read_metrics(out: Path) -> list[dict]:
    """The rows of a run's ``out/metrics.jsonl`` (one per iteration; iteration 0 first)."""
    import json

    return [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def run_agentrl(overrides: list[str], out: Path) -> float:
    """Run ``python -m agentrl.run <overrides>`` writing to ``out``; return its wall time.

    Each benchmark run is its own process (fresh RNG and thread state, as a user would run
    it); the wall time is also written to ``out/wall_s``. A failing run raises with the tail
    of its stderr.
    """
    import subprocess
    import sys
    import time

    args = [sys.executable, "-m", "agentrl.run", *overrides]
    args += [f"trainer.out_dir={out}", f"hydra.run.dir={out}/hydra"]
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"agentrl.run {' '.join(overrides)} failed:\n{proc.stderr[-3000:]}")
    wall = time.perf_counter() - t0
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "wall_s").write_text(f"{wall:.1f}")
    return wall


def update_markdown_section(path: Path, heading: str, body: str, preamble: str) -> None:
    """Write ``## heading`` + ``body`` into ``path``, keeping every other ``## `` section.

    The file is a preamble followed by sections, each from a ``## `` line to the next; an
    existing section with the same heading is replaced in place, a new one is appended.
    ``preamble`` is only used when the file is new (an existing one is kept).
    """
    sections: list[tuple[str, str]] = []
    if path.exists():
        text = path.read_text()
        parts = re.split(r"^(?=## )", text, flags=re.MULTILINE)
        preamble = parts[0] if parts[0].strip() else preamble
        for part in parts[1:]:
            title = part.splitlines()[0][3:].strip()
            sections.append((title, part.rstrip() + "\n"))
    new = f"## {heading}\n\n{body.rstrip()}\n"
    if any(title == heading for title, _ in sections):
        sections = [(t, new if t == heading else s) for t, s in sections]
    else:
        sections.append((heading, new))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(preamble.rstrip() + "\n\n" + "\n".join(s for _, s in sections))


ENV_SPEED_PREAMBLE = (
    "# Environment speed\n\n"
    "Reproduce with `python -m agentrl.bench env-speed` (`--quick` for a smoke run). Each "
    "`## <environment>` section is rewritten by its own benchmark; the others are kept.\n"
)


def write_env_speed_section(out_dir: str | os.PathLike, heading: str, body: str) -> Path:
    """Write one environment's ``## heading`` section of ``<out_dir>/env_speed.md``."""
    path = Path(out_dir) / "env_speed.md"
    update_markdown_section(path, heading, body, ENV_SPEED_PREAMBLE)
    return path
