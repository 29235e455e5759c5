"""Command line: ``python -m agentrl.bench <name> [--out DIR | --update] [--quick] [--check]``.

``COMMANDS`` maps each name to ``"module:function"``, imported only when its command runs and
called as ``function(out_dir=..., quick=...)`` (plus ``argv``, the remaining arguments, when it
takes them). Reports go to the scratch folder ``bench-out/`` unless ``--update`` (the same as
``--out results``) asks for the committed reports (:mod:`agentrl.bench._report`).

``<name> --check`` re-measures part of a benchmark and compares it with the committed report in
``--out`` (default ``results/``; nothing is written): ``CHECKS`` maps a name to its
``check(results_dir=..., log=..., tolerance=...)`` (:mod:`agentrl.bench._check`). The exit code
is 1 when a figure regressed by more than ``--tolerance`` or is missing, else 0.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from pathlib import Path

from agentrl.bench._check import TOLERANCE, CheckError, evaluate
from agentrl.bench._report import RESULTS, SCRATCH

COMMANDS: dict[str, str] = {
    "env-speed": "agentrl.bench.env_speed:run",
    "credit": "agentrl.bench.credit:run",
    "credit-learning": "agentrl.bench.credit_learning:run",
    "learner-speed": "agentrl.bench.learner_speed:run",
    "learning": "agentrl.bench.learning:run",
    "learning-warm": "agentrl.bench.learning_warm:run",
    "ac2": "agentrl.bench.ac2:run",
    "vllm": "agentrl.bench.vllm:run",
    "gpu": "agentrl.bench.gpu:run",
    "scale": "agentrl.bench.scale:run",
    "threads": "agentrl.bench.scale:run_threads",
    "async": "agentrl.bench.async_rollout:run",
}
CHECKS: dict[str, str] = {
    "credit": "agentrl.bench.credit:check",
    "credit-learning": "agentrl.bench.credit_learning:check",
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
        default=None,
        help=f"report folder (default: {SCRATCH}, a scratch folder; --update writes {RESULTS}); "
        f"with --check, where the committed report is (default: {RESULTS})",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help=f"rewrite the committed reports: the same as --out {RESULTS}",
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
        if args.update:
            parser.error("--check writes nothing: it takes no --update")
        args.out = RESULTS if args.out is None else args.out
        return _check(parser, args, rest)
    if args.tolerance is not None:
        parser.error("--tolerance goes with --check")
    if args.update and args.out is not None and Path(args.out).resolve() != Path(RESULTS).resolve():
        parser.error(f"--update writes {RESULTS}/; it cannot go with --out {args.out}")
    out = output_dir(args.out, args.update)
    fn = _function(COMMANDS[args.command])
    extra = {}
    if "argv" in inspect.signature(fn).parameters:
        extra["argv"] = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    committed = Path(out).resolve() == Path(RESULTS).resolve()
    where = "the committed reports" if committed else f"--update writes {RESULTS}/ instead"
    print(f"[{args.command}] reports go to {out.rstrip('/')}/ ({where})", file=sys.stderr)
    fn(out_dir=out, quick=args.quick, **extra)
    return 0


def _function(target: str):
    """The function of a ``"module:function"`` target, imported now (not before its command
    runs, so one benchmark's heavy imports never slow another)."""
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def output_dir(out: str | None, update: bool) -> str:
    """Where a benchmark run writes: ``out`` when given, ``results`` with ``update``, else the
    scratch folder :data:`~agentrl.bench._report.SCRATCH` (never the committed reports)."""
    if out is not None:
        return out
    return RESULTS if update else SCRATCH


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
    try:
        figures = _function(CHECKS[args.command])(
            results_dir=args.out, log=print, tolerance=tolerance
        )
    except CheckError as exc:
        print(f"{title}: FAILED — {exc}")
        return 1
    return evaluate(title, figures, tolerance)


if __name__ == "__main__":
    sys.exit(main())
