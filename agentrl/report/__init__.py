"""Run reports: one self-contained HTML file per run, or a comparison of runs.

``python -m agentrl.report RUN_DIR [--out report.html]`` reads a run folder's files only
(``run_config.yaml``, ``versions.json``, ``metrics.jsonl`` and the rollout records of
:mod:`agentrl.credit.rollout_records`) and writes the run's config and software versions, its
learning curves, the trajectory graph of each task group of the recorded iterations with the
advantages of every estimator that :func:`agentrl.credit.assign` can run on records, and its
evaluation episodes as transcripts. ``python -m agentrl.report --compare RUN_A RUN_B ...``
draws the learning curves of several runs on shared axes.
"""

from __future__ import annotations

from agentrl.report.build import ReportConfig, build_compare, build_report
from agentrl.report.run_data import ReportError, comparable_estimators, read_run

__all__ = [
    "ReportConfig",
    "ReportError",
    "build_compare",
    "build_report",
    "comparable_estimators",
    "read_run",
]
