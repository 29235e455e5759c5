"""Command-line entry point: ``python -m agentrl.run [group=option ...] [key=value ...]``.

With no arguments it trains ``env=sokoban algo=grpo model=tiny`` (see ``configs/config.yaml``).
Hydra composes the config groups ``env/ algo/ model/ rollout/ learner/ trainer/``; every value
is then validated (:func:`agentrl.run.config.build_run_config`) before any work starts, so a
broken config fails at once with a message naming the bad key and the valid choices.
"""

from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from agentrl.configuration import ConfigError
from agentrl.run.config import RunConfig, build_run_config, register_schemas

log = logging.getLogger("agentrl")


@hydra.main(version_base="1.3", config_path="pkg://agentrl.configs", config_name="config")
def _main(cfg: DictConfig) -> None:
    try:
        run_cfg = build_run_config(OmegaConf.to_container(cfg, resolve=True))
    except ConfigError as exc:
        log.error("invalid config: %s", exc)
        sys.exit(2)
    from agentrl.learn.learner import NonFiniteLossError
    from agentrl.run.trainer import RunDirInUse, train

    out_dir = run_cfg.trainer.out_dir or HydraConfig.get().runtime.output_dir
    try:
        train(run_cfg, out_dir)
    except ConfigError as exc:  # found once the run looks at the world (a model path, data)
        log.error("invalid config: %s", exc)
        sys.exit(2)
    except (RunDirInUse, NonFiniteLossError) as exc:  # a clear message, not a traceback
        log.error("%s", exc)
        sys.exit(1)


def compose(overrides: list[str] | None = None) -> RunConfig:
    """Compose and validate a run config in-process (the CLI's config, without running).

    Raises Hydra's errors for unknown groups/options and :class:`ConfigError` for bad values.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    register_schemas()
    with initialize_config_module("agentrl.configs", version_base="1.3"):
        cfg = hydra_compose("config", overrides=list(overrides or []))
    return build_run_config(OmegaConf.to_container(cfg, resolve=False))


def main() -> None:
    register_schemas()
    _main()
