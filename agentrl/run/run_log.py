"""Where a run's metrics go: the loggers of ``trainer.loggers`` (TensorBoard, ``metrics.jsonl``,
wandb, MLflow: :mod:`agentrl.run.loggers`), the console, and the closing summary.

Only the main rank writes (:class:`RunLog` with ``is_main=False`` writes nothing). On resume the
rows past the checkpoint are dropped from ``metrics.jsonl`` and TensorBoard purges the same
steps, so a replayed iteration is logged once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.credit.batch import TrajectoryGroup
from agentrl.run.evaluate import format_trajectory
from agentrl.run.loggers import make_loggers

log = logging.getLogger("agentrl")


class RunLog:
    """The run's metric sinks, opened for a run that starts (or resumes) at ``start``."""

    def __init__(
        self,
        out_dir: Path,
        start: int,
        is_main: bool,
        loggers: Sequence[str] = ("tensorboard", "jsonl"),
        config: Mapping[str, Any] | None = None,
    ):
        self.path = out_dir / "metrics.jsonl"
        self.loggers = make_loggers(loggers, out_dir, start, config or {}) if is_main else []
        if is_main:  # what the run ran on, for its report (python -m agentrl.report)
            (out_dir / "versions.json").write_text(json.dumps(software_versions(), indent=2))

    def write(
        self, it: int, metrics: dict[str, float], samples: list[TrajectoryGroup] = ()
    ) -> None:
        """Iteration ``it``'s metrics (and evaluation transcripts as text) to every sink."""
        for logger in self.loggers:
            for k, group in enumerate(samples):
                logger.text(it, f"eval/sample_{k}", format_trajectory(group))
            logger.scalars(it, metrics)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


def software_versions() -> dict[str, Any]:
    """Python, the platform, the packages a run's numbers depend on, and the devices."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    import torch

    packages = {}
    for name in ("agentrl", "torch", "transformers", "numpy", "gymnasium", "vllm", "peft"):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            continue
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": packages,
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    }


def log_iteration(it: int, total: int, metrics: dict[str, float]) -> None:
    """One console line per iteration."""
    extra = f"  eval success {metrics['eval/success']:.3f}" if "eval/success" in metrics else ""
    log.info(
        "iter %d/%d  success %.3f  return %.3f  length %.1f  invalid %.3f  "
        "pg %.4f  (rollout %.1fs, learn %.1fs)%s",
        it,
        total,
        metrics["env/success"],
        metrics["env/return"],
        metrics["env/length"],
        metrics["env/invalid_rate"],
        metrics.get("loss/pg", float("nan")),
        metrics["perf/rollout_s"],
        metrics["perf/learn_s"],
        extra,
    )


def run_summary(rows: list[dict], out_dir: Path, checkpoint: Path | None) -> str:
    """The closing block of a run, from its ``metrics.jsonl`` rows: final train and eval
    success (with the untrained evaluation of iteration 0, when there was one), where the
    run is, its last checkpoint and how to view it."""
    lines = []
    trained = [r for r in rows if "env/success" in r]
    evals = [r for r in rows if "eval/success" in r]
    if trained:
        last = trained[-1]
        lines.append(
            f"  train success   {last['env/success']:.3f}  (iteration {last['iteration']})"
        )
    if evals:
        last = evals[-1]
        untrained = next((r for r in evals if r["iteration"] == 0), None)
        text = f"  eval success    {last['eval/success']:.3f}  (iteration {last['iteration']}"
        if untrained is not None and untrained is not last:
            text += f"; untrained, iteration 0: {untrained['eval/success']:.3f}"
        lines.append(text + ")")
    lines += [
        f"  run folder      {out_dir}",
        f"  last checkpoint {checkpoint if checkpoint is not None else 'none saved'}",
        f"  report          python -m agentrl.report {out_dir}",
        f"  view it with    tensorboard --logdir {out_dir / 'tb'}",
    ]
    return "\n".join(["", "agentrl: run finished", *lines])


def print_summary(out_dir: Path, checkpoint: Path | None, is_main: bool) -> None:
    """Print :func:`run_summary` to stdout (visible even when logging is quiet); only the
    main rank prints, the others hold no ``metrics.jsonl`` of their own."""
    if not is_main:
        return
    path = out_dir / "metrics.jsonl"
    rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln] if path.exists() else []
    print(run_summary(rows, out_dir, checkpoint), flush=True)
