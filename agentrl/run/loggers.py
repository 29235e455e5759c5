"""Metric loggers: where a run's scalars go (``trainer.loggers``), by name.

Built in: ``tensorboard`` (``<out_dir>/tb``), ``jsonl`` (``<out_dir>/metrics.jsonl``, what the
run summary, the benchmarks and ``python -m agentrl.report`` read), and two optional ones
(extras of the same names):

- ``wandb``: a Weights & Biases run in ``<out_dir>/wandb``, project ``$WANDB_PROJECT`` or
  ``agentrl``, named after the run folder, with the run's config. Set ``WANDB_MODE=offline``
  to log without a network or an account (``wandb sync`` uploads it later).
- ``mlflow``: an MLflow run in experiment ``$MLFLOW_EXPERIMENT_NAME`` or ``agentrl``, with the
  run's config as parameters, in the store ``$MLFLOW_TRACKING_URI`` names or, without it, the
  local SQLite file ``<out_dir>/mlflow.db`` (no server; ``mlflow ui --backend-store-uri
  sqlite:///<out_dir>/mlflow.db`` shows it). A file store works too
  (``MLFLOW_TRACKING_URI=file:<dir>``; MLflow >= 3.7 also wants ``MLFLOW_ALLOW_FILE_STORE=true``).

Every logger receives the same ``{key: float}`` scalars at the same iteration (the keys of
``metrics.jsonl``, namespaced ``env/``, ``eval/``, ``credit/``, ``loss/``, ``perf/``...).
On resume, ``tensorboard`` purges the replayed steps and ``jsonl`` drops its rows past the
checkpoint; wandb and MLflow cannot delete logged points, so a resumed run logs to a new
wandb run and to the same MLflow run (its replayed iterations then appear twice in MLflow's
history, the later value last).

A new logger is a factory registered with :func:`register_logger`: ``factory(out_dir, start,
config) -> Logger``, built on the main rank only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agentrl.configuration import ConfigError, closest


class Logger(Protocol):
    """A sink for one run's scalars (and, where it can show them, texts)."""

    def scalars(self, iteration: int, metrics: Mapping[str, float]) -> None: ...

    def text(self, iteration: int, key: str, text: str) -> None: ...

    def close(self) -> None: ...


Factory = Callable[[Path, int, Mapping[str, Any]], Logger]


@dataclass(frozen=True)
class LoggerSpec:
    name: str
    factory: Factory
    module: str | None = None
    """The package the logger needs (checked at start-up), or None."""
    extra: str | None = None
    """The agentrl extra that installs it."""


_LOGGERS: dict[str, LoggerSpec] = {}


def register_logger(
    name: str, module: str | None = None, extra: str | None = None
) -> Callable[[Factory], Factory]:
    """Decorator registering ``factory(out_dir, start, config) -> Logger`` as ``name``.

    ``module``: a package the logger imports, so that a run naming the logger without it fails
    at start-up with the install command (``pip install 'agentrl[<extra>]'``).
    """

    def deco(factory: Factory) -> Factory:
        old = _LOGGERS.get(name)
        if old is not None and old.factory is not factory:
            raise ValueError(f"logger {name!r} is already registered")
        _LOGGERS[name] = LoggerSpec(name, factory, module, extra)
        return factory

    return deco


def list_loggers() -> list[str]:
    return sorted(_LOGGERS)


def check_loggers(names: Sequence[str], path: str = "trainer.loggers") -> None:
    """Raise :class:`ConfigError` for an unknown logger, a repeated one, or one whose package
    is not installed."""
    for name in names:
        if name not in _LOGGERS:
            raise ConfigError(
                f"{path} has {name!r}, which is not a logger; choose from {list_loggers()}."
                + closest(name, _LOGGERS)
            )
        spec = _LOGGERS[name]
        if spec.module and importlib.util.find_spec(spec.module) is None:
            raise ConfigError(
                f"{path} has {name!r}, which needs the {spec.module} package: "
                f"pip install 'agentrl[{spec.extra or spec.module}]'"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}={list(names)} names a logger twice")


def make_loggers(
    names: Sequence[str], out_dir: Path, start: int, config: Mapping[str, Any]
) -> list[Logger]:
    """The loggers ``names`` for a run in ``out_dir`` that starts (or resumes) at ``start``."""
    check_loggers(names)
    return [_LOGGERS[n].factory(out_dir, start, config) for n in names]


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as ``{"algo.name": "grpo", ...}`` (values as text) for parameter
    stores that take flat string pairs (MLflow)."""
    out: dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flat_config(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, tuple, bool)) or v is None else str(v)
    return out


# -- the built-in loggers ---------------------------------------------------------------------


class TensorBoardLogger:
    def __init__(self, out_dir: Path, start: int):
        from torch.utils.tensorboard import SummaryWriter

        # On resume, drop logs past the checkpoint: those iterations are replayed (from
        # scratch, iteration 0 is logged again, so everything goes).
        self.writer = SummaryWriter(str(out_dir / "tb"), purge_step=start + 1 if start else 0)

    def scalars(self, iteration: int, metrics: Mapping[str, float]) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, iteration)

    def text(self, iteration: int, key: str, text: str) -> None:
        self.writer.add_text(key, text, iteration)

    def close(self) -> None:
        self.writer.close()


class JsonlLogger:
    def __init__(self, out_dir: Path, start: int):
        from agentrl.run.checkpoint import metrics_rows_kept

        self.path = out_dir / "metrics.jsonl"
        metrics_rows_kept(self.path, start)

    def scalars(self, iteration: int, metrics: Mapping[str, float]) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps({"iteration": iteration, **metrics}) + "\n")

    def text(self, iteration: int, key: str, text: str) -> None:
        pass  # transcripts go to the rollout records (trainer.rollouts_every)

    def close(self) -> None:
        pass


class WandbLogger:
    def __init__(self, out_dir: Path, config: Mapping[str, Any]):
        import wandb

        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "agentrl"),
            dir=str(out_dir),
            name=out_dir.name,
            config=dict(config),
        )

    def scalars(self, iteration: int, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics), step=iteration)

    def text(self, iteration: int, key: str, text: str) -> None:
        pass  # wandb would need a table per sample; the scalars are what is compared

    def close(self) -> None:
        self.run.finish()


class MlflowLogger:
    def __init__(self, out_dir: Path, start: int, config: Mapping[str, Any]):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{out_dir.resolve()}/mlflow.db"
        self.client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "agentrl")
        exp = self.client.get_experiment_by_name(name)
        # Artifacts (none are logged, but MLflow reserves a place) stay in the run folder
        # instead of the working directory's ./mlruns.
        eid = (
            exp.experiment_id
            if exp is not None
            else self.client.create_experiment(
                name, artifact_location=(out_dir.resolve() / "mlflow-artifacts").as_uri()
            )
        )
        id_file = out_dir / "mlflow_run_id"
        if start and id_file.exists():  # a resumed run continues its MLflow run
            self.run_id = id_file.read_text().strip()
            self.client.update_run(self.run_id, status="RUNNING")
            return
        self.run_id = self.client.create_run(eid, run_name=out_dir.name).info.run_id
        id_file.write_text(self.run_id)
        params = [Param(k, v[:6000]) for k, v in flat_config(config).items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters a batch
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def scalars(self, iteration: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, iteration) for k, v in metrics.items()]
        for i in range(0, len(batch), 1000):  # MLflow's limit of metrics per batch
            self.client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def text(self, iteration: int, key: str, text: str) -> None:
        pass

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


@register_logger("tensorboard")
def _tensorboard(out_dir: Path, start: int, config: Mapping[str, Any]) -> Logger:
    return TensorBoardLogger(out_dir, start)


@register_logger("jsonl")
def _jsonl(out_dir: Path, start: int, config: Mapping[str, Any]) -> Logger:
    return JsonlLogger(out_dir, start)


@register_logger("wandb", module="wandb", extra="wandb")
def _wandb(out_dir: Path, start: int, config: Mapping[str, Any]) -> Logger:
    return WandbLogger(out_dir, config)


@register_logger("mlflow", module="mlflow", extra="mlflow")
def _mlflow(out_dir: Path, start: int, config: Mapping[str, Any]) -> Logger:
    return MlflowLogger(out_dir, start, config)
