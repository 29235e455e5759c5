"""Command line for the benchmarks: ``python -m agentrl.bench <name> [--out DIR] [--quick]``.

``COMMANDS`` maps each name to ``"module:function"``; the function is imported only when its
command runs (so one benchmark's heavy imports never slow another) and is called as
``function(out_dir=..., quick=...)``; a benchmark with options of its own also takes
``argv`` (the remaining command-line arguments). Adding a benchmark is one line in
``COMMANDS``.

``python -m agentrl.bench <name> --check`` re-measures a reduced part of a benchmark and
compares it with the committed report in ``--out`` (default ``results/``; nothing is written):
``CHECKS`` maps a name to its ``check(results_dir=..., log=..., tolerance=...)``, which returns
the compared figures (:mod:`agentrl.bench._check`). The exit code is 1 when a figure regressed
by more than ``--tolerance`` (default 30 %) or is missing from the report, 0 otherwise; figures
that cannot be compared (TRL not installed) are listed as skipped.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys

from agentrl.bench._check import TOLERANCE, CheckError, evaluate

COMMANDS: dict[str, str] = {
    "env-speed": "agentrl.bench.env_speed:run",
    "credit": "agentrl.bench.credit:run",
    "learner-speed": "agentrl.bench.learner_speed:run",
    "learning": "agentrl.bench.learning:run",
    "learning-warm": "agentrl.bench.learning_warm:run",
    "ac2": "agentrl.bench.ac2:run",
    "vllm": "agentrl.bench.vllm:run",
    "gpu": "agentrl.bench.gpu:run",
    "scale": "agentrl.bench.scale:run",
    "threads": "agentrl.bench.threads:run",
}
CHECKS: dict[str, str] = {
    "credit": "agentrl.bench.credit:check",
    "learner-speed": "agentrl.bench.learner_speed:check",
}


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the benchmark, return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m agentrl.bench",
        description=f"Run a benchmark: {', '.join(COMMANDS)}.",
    )
    parser.add_argument("command", nargs="?", help=f"one of {', '.join(COMMANDS)}")
    parser.add_argument(
        "--out",
        default="results",
        help="report folder (default: results); with --check, where the committed report is",
    )
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"re-measure and compare with the committed report ({', '.join(CHECKS)})",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help=f"with --check: the largest allowed regression (default {TOLERANCE})",
    )
    args, rest = parser.parse_known_args(argv)
    if args.command not in COMMANDS:
        what = "no benchmark given" if args.command is None else f"unknown {args.command!r}"
        print(f"{what}; valid benchmarks: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if args.check:
        return _check(parser, args, rest)
    if args.tolerance is not None:
        parser.error("--tolerance goes with --check")
    module, func = COMMANDS[args.command].split(":")
    fn = getattr(importlib.import_module(module), func)
    extra = {}
    if "argv" in inspect.signature(fn).parameters:
        extra["argv"] = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    fn(out_dir=args.out, quick=args.quick, **extra)
    return 0


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace, rest: list[str]) -> int:
    """``<name> --check``: run the benchmark's check and turn its figures into an exit code."""
    if args.command not in CHECKS:
        print(
            f"no --check for {args.command!r}; checks exist for {', '.join(CHECKS)}",
            file=sys.stderr,
        )
        return 2
    if args.quick or rest:
        extra = " ".join((["--quick"] if args.quick else []) + rest)
        parser.error(f"--check takes no other options: {extra}")
    tolerance = TOLERANCE if args.tolerance is None else args.tolerance
    if not 0 < tolerance < 10:
        parser.error(f"--tolerance {tolerance} must be in (0, 10)")
    title = f"{args.command} --check"
    module, func = CHECKS[args.command].split(":")
    try:
        fn = getattr(importlib.import_module(module), func)
        figures = fn(results_dir=args.out, log=print, tolerance=tolerance)
    except CheckError as exc:
        print(f"{title}: FAILED — {exc}")
        return 1
    return evaluate(title, figures, tolerance)


if __name__ == "__main__":
    sys.exit(main())
