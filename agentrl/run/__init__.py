"""The run layer: the command line, the run config and the training loop.

``python -m agentrl.run [group=option ...] [key=value ...]`` (:mod:`~agentrl.run.cli`) composes
the Hydra config, validates it into a :class:`~agentrl.run.config.RunConfig` and calls
:func:`~agentrl.run.trainer.train`, which drives rollout → credit → learn → log each iteration.
"""

from __future__ import annotations

from agentrl.run.cli import compose, main
from agentrl.run.config import RunConfig, build_run_config

__all__ = ["RunConfig", "build_run_config", "compose", "main"]
