"""Command-line entry point: ``python -m agentrl.run [group=option ...] [key=value ...]``.

With no arguments it trains ``env=sokoban algo=grpo model=tiny`` (see ``configs/config.yaml``).
Hydra composes the config groups ``env/ algo/ model/ rollout/ learner/ trainer/``; every value
is then validated (:func:`agentrl.run.config.build_run_config`) before any work starts, so a
broken config fails at once with a message naming the bad key and the valid choices.
"""

from __future__ import annotations

import logging
import os
import re
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from agentrl.configuration import ConfigError, closest, removed_key
from agentrl.run.config import NODES, RunConfig, build_run_config, register_schemas

log = logging.getLogger("agentrl")


@hydra.main(version_base="1.3", config_path="pkg://agentrl.configs", config_name="config")
def _main(cfg: DictConfig) -> None:
    try:
        run_cfg = build_run_config(OmegaConf.to_container(cfg, resolve=True))
    except ConfigError as exc:
        log.error("invalid config: %s", exc)
        sys.exit(2)
    from agentrl.learn.learner import NonFiniteLossError
    from agentrl.run.checkpoint import RunDirInUse
    from agentrl.run.trainer import train

    # Under torchrun the ranks other than 0 take rank 0's folder (see train()).
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

    Raises :class:`ConfigError` for unknown keys, group options and bad values (other Hydra
    errors, such as override syntax, as Hydra raises them).
    """
    return build_run_config(OmegaConf.to_container(_compose(overrides), resolve=False))


def _compose(overrides: list[str] | None) -> DictConfig:
    """Hydra's composition of ``overrides``, with its errors about unknown keys and group
    options turned into :class:`ConfigError` (see :func:`explain_hydra_error`)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    register_schemas()
    with initialize_config_module("agentrl.configs", version_base="1.3"):
        try:
            return hydra_compose("config", overrides=list(overrides or []))
        except Exception as exc:
            error = explain_hydra_error(exc)
            if error is None:
                raise
            raise error from exc


def explain_hydra_error(exc: BaseException) -> ConfigError | None:
    """agentrl's message for Hydra's errors about a misspelt key (``trainer.stepz=3``) or
    group option (``algo=crbx``): the bad name, the valid choices and the closest one. None
    for other errors."""
    from hydra.errors import ConfigCompositionException, MissingConfigException

    if isinstance(exc, MissingConfigException):
        found = re.search(r"Could not find '(.+)/([^/']+)'", str(exc))
        if found is None or not exc.options:
            return None
        group, option = found.groups()
        return ConfigError(
            f"{group}={option} is not a valid option; choose one of {list(exc.options)}."
            + closest(option, exc.options)
        )
    if isinstance(exc, ConfigCompositionException):
        cause = exc.__cause__
        key, full_key = getattr(cause, "key", None), getattr(cause, "full_key", None)
        parent = getattr(cause, "parent_node", None)
        if not key or not full_key or not hasattr(parent, "keys"):
            return None
        valid = list(NODES) if "." not in full_key else [str(k) for k in parent]
        if not valid:
            return None
        return ConfigError(
            f"{full_key} is not a valid key; valid keys are {sorted(valid)}."
            + (removed_key(str(full_key)) or closest(str(key), valid))
        )
    return None


def _check_overrides(args: list[str]) -> None:
    """Compose the command line's overrides before Hydra runs the job, so that a misspelt key
    or group option exits with agentrl's message (Hydra would print its own, which names no
    valid choice). Command lines with Hydra flags (``--multirun``, ``--cfg`` ...) are left to
    Hydra."""
    if any(a.startswith("-") for a in args):
        return
    try:
        _compose(args)
    except ConfigError as exc:  # only Hydra's errors that agentrl explains
        print(f"invalid config: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception:  # anything else (override syntax ...) is Hydra's to report, as usual
        return


def _follower_overrides() -> list[str]:
    """Hydra overrides for a torchrun rank other than 0: no run folder of its own.

    Each rank's Hydra would create a timestamped folder (a second apart, so different ones)
    with its ``.hydra/`` and log file; the run goes to rank 0's folder instead (broadcast in
    :func:`agentrl.run.trainer.train`), so here the "run folder" is the current directory,
    nothing is saved into it, and the log file goes nowhere (the console keeps the rank's
    warnings and errors).
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or int(os.environ.get("RANK", "0")) == 0:
        return []
    out = ["hydra.run.dir=.", "hydra.output_subdir=null"]
    if not any("hydra/job_logging" in a for a in sys.argv):  # a logging config of the user's
        out.append(f"hydra.job_logging.handlers.file.filename={os.devnull}")
    return out


def main() -> None:
    register_schemas()
    _check_overrides(sys.argv[1:])
    sys.argv += _follower_overrides()
    _main()
