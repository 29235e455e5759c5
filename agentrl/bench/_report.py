"""Shared bits of the benchmark reports: installed versions and the CPU's name."""

from __future__ import annotations

import platform
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
