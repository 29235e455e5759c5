"""``python -m agentrl.report RUN_DIR [--out FILE]``, or ``--compare RUN_A RUN_B ... [--out FILE]``
(see :mod:`agentrl.report`)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from agentrl.report.build import ReportConfig, build_compare, build_report
from agentrl.report.run_data import ReportError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentrl.report",
        description="Write a self-contained HTML report of an agentrl run (curves, trajectory "
        "graphs with per-edge advantages, transcripts), or compare several runs' curves.",
    )
    parser.add_argument("run_dir", nargs="?", help="the run folder (its trainer.out_dir)")
    parser.add_argument(
        "--compare", nargs="+", metavar="RUN", help="several run folders: curves on shared axes"
    )
    parser.add_argument(
        "--out", help="the HTML file (default RUN_DIR/report.html, or compare.html here)"
    )
    defaults = ReportConfig()
    for f in fields(ReportConfig):
        parser.add_argument(
            "--" + f.name.replace("_", "-"), type=int, default=getattr(defaults, f.name)
        )
    args = parser.parse_args(argv)
    if bool(args.run_dir) == bool(args.compare):
        parser.error("give one RUN_DIR, or --compare RUN_A RUN_B ...")
    try:
        if args.compare:
            out = build_compare(args.compare, args.out or "compare.html")
        else:
            cfg = ReportConfig(**{f.name: getattr(args, f.name) for f in fields(ReportConfig)})
            out = build_report(args.run_dir, args.out, cfg)
    except (ReportError, ValueError) as exc:
        print(f"agentrl.report: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
