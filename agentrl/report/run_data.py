"""What a report reads from a run folder, and the advantages it recomputes.

Only run files are read: ``run_config.yaml``, ``versions.json`` (when the run wrote one),
``metrics.jsonl`` and the rollout records (:mod:`agentrl.credit.rollout_records`). The
advantages of every estimator that :func:`~agentrl.credit.assign` accepts are recomputed from
the records when the report is built: the run's own estimator with the run's ``algo`` options,
the others with their defaults. Estimators that keep state across iterations start afresh
(no history), so only stateless ones are comparable with what their own run would have used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agentrl.credit import assign, get_estimator, list_estimators
from agentrl.credit.records import records_config
from agentrl.credit.rollout_records import read_records, record_files


class ReportError(ValueError):
    """A folder that is not a readable run; the message says what is missing."""


@dataclass
class Run:
    """A run folder's files, read."""

    path: Path
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    versions: dict[str, Any] = field(default_factory=dict)
    train_files: dict[int, Path] = field(default_factory=dict)
    eval_files: dict[int, Path] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def algo(self) -> str:
        return str(self.config.get("algo", {}).get("name", "?"))

    @property
    def label(self) -> str:
        """A short name for legends: the folder and the method."""
        return f"{self.name} ({self.algo})"


def read_run(path: str | Path) -> Run:
    """Read run folder ``path``.

    Raises:
        ReportError: no ``metrics.jsonl`` (not a run folder, or ``trainer.loggers`` without
            ``jsonl``).
    """
    path = Path(path)
    metrics_path = path / "metrics.jsonl"
    if not metrics_path.exists():
        raise ReportError(
            f"{path} has no metrics.jsonl: give the folder of a run (its trainer.out_dir), "
            "one that logged with trainer.loggers including jsonl"
        )
    rows = [json.loads(ln) for ln in metrics_path.read_text().splitlines() if ln.strip()]
    cfg_path = path / "run_config.yaml"
    config = yaml.safe_load(cfg_path.read_text()) if cfg_path.exists() else {}
    versions_path = path / "versions.json"
    versions = json.loads(versions_path.read_text()) if versions_path.exists() else {}
    files = record_files(path)
    return Run(path, config or {}, rows, versions, files["train"], files["eval"])


def comparable_estimators() -> list[str]:
    """Every registered estimator :func:`~agentrl.credit.assign` can run on records alone
    (no rollout driver, no learned critic, no rescoring model)."""
    out = []
    for name in list_estimators():
        try:
            records_config(name, {})
        except ValueError:
            continue
        out.append(name)
    return out


@dataclass
class Advantages:
    """Per-record advantages of several estimators for one record file (rows in file order)."""

    by_method: dict[str, np.ndarray]
    failed: dict[str, str]
    """Estimators that could not run on these records, and why."""
    recorded_match: float | None
    """max |recomputed - recorded| for the run's own estimator (None when it is stateful or
    not comparable): 0 means the report shows the trainer's numbers."""


def recompute(
    records: list[dict[str, Any]], run_method: str, run_options: dict[str, Any]
) -> Advantages:
    """Every comparable estimator's advantages for ``records``."""
    out: dict[str, np.ndarray] = {}
    failed: dict[str, str] = {}
    methods = comparable_estimators()
    for name in methods:
        options = run_options if name == run_method else {}
        try:
            out[name] = assign(records, name, allow_mixed_versions=True, **options).advantages
        except Exception as exc:  # one estimator's limit must not sink the whole report
            failed[name] = f"{type(exc).__name__}: {exc}"
    match = None
    recorded = [r.get("advantage") for r in records]
    if (
        run_method in out
        and not get_estimator(run_method).stateful
        and all(a is not None for a in recorded)
    ):
        match = float(np.max(np.abs(out[run_method] - np.asarray(recorded)), initial=0.0))
    return Advantages(out, failed, match)


def recorded_advantages(records: list[dict[str, Any]]) -> np.ndarray | None:
    """The advantages the trainer used, when the records hold them (training files)."""
    values = [r.get("advantage") for r in records]
    if any(v is None for v in values):
        return None
    return np.asarray(values, dtype=np.float64)


def run_options(run: Run) -> tuple[str, dict[str, Any]]:
    """The run's estimator and its options (``algo`` of ``run_config.yaml``)."""
    algo = dict(run.config.get("algo", {}))
    return str(algo.pop("name", "grpo")), algo


def pick_iterations(available: list[int], limit: int) -> list[int]:
    """At most ``limit`` of the recorded iterations, spread evenly, the first and last
    included (0 or fewer: all)."""
    if limit <= 0 or len(available) <= limit:
        return list(available)
    if limit == 1:
        return [available[-1]]
    idx = np.round(np.linspace(0, len(available) - 1, limit)).astype(int)
    return [available[i] for i in sorted(set(idx.tolist()))]


def load_records(path: Path) -> list[dict[str, Any]]:
    """A record file's rows sorted into batch order (group, episode, turn)."""
    rows = read_records(path)
    rows.sort(key=lambda r: (r["group_id"], r["trajectory_id"], r["turn_index"]))
    return rows
