"""Command line for the benchmarks: ``python -m agentrl.bench <name> [--out DIR] [--quick]``.

``COMMANDS`` maps each name to ``"module:function"``; the function is imported only when its
command runs (so one benchmark's heavy imports never slow another) and is called as
``function(out_dir=..., quick=...)``; a benchmark with options of its own also takes
``argv`` (the remaining command-line arguments). Adding a benchmark is one line in
``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys

COMMANDS: dict[str, str] = {
    "env-speed": "agentrl.bench.env_speed:run",
    "credit": "agentrl.bench.credit:run",
    "learner-speed": "agentrl.bench.learner_speed:run",
    "learning": "agentrl.bench.learning:run",
    "ac2": "agentrl.bench.ac2:run",
}


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the benchmark, return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m agentrl.bench",
        description=f"Run a benchmark: {', '.join(COMMANDS)}.",
    )
    parser.add_argument("command", nargs="?", help=f"one of {', '.join(COMMANDS)}")
    parser.add_argument("--out", default="results", help="report folder (default: results)")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    args, rest = parser.parse_known_args(argv)
    if args.command not in COMMANDS:
        what = "no benchmark given" if args.command is None else f"unknown {args.command!r}"
        print(f"{what}; valid benchmarks: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module, func = COMMANDS[args.command].split(":")
    fn = getattr(importlib.import_module(module), func)
    extra = {}
    if "argv" in inspect.signature(fn).parameters:
        extra["argv"] = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    fn(out_dir=args.out, quick=args.quick, **extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
