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
