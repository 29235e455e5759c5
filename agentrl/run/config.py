"""The whole run's configuration, assembled from Hydra nodes and checked at start-up.

A run has six nodes: ``env`` (``name`` + the environment's own config), ``algo`` (``name`` + the
estimator's config), ``model``, ``rollout``, ``learner`` and ``trainer``. Every default lives in
the frozen dataclass next to the code it configures; :func:`register_schemas` publishes those
defaults to Hydra's ConfigStore (group ``schema/<node>``) so that the YAML files in
``configs/`` only name a schema and override fields, and so that ``env.dim_room=[7,7]`` works
without a ``+``. :func:`build_run_config` turns the composed mapping into :class:`RunConfig`,
raising :class:`~agentrl.configuration.ConfigError` for any bad key or value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrl.configuration import ConfigError, closest, from_mapping, to_dict
from agentrl.credit import estimator_config, get_estimator, list_estimators
from agentrl.learn.learner import LearnerConfig
from agentrl.model import ModelConfig, check_model_source
from agentrl.registry import env_spec, list_envs, validate_env_kwargs
from agentrl.rollout import RolloutConfig
from agentrl.run.trainer_config import TrainerConfig

NODES = ("env", "algo", "model", "rollout", "learner", "trainer")


@dataclass(frozen=True)
class RunConfig:
    """Everything a training run needs, validated."""

    env_name: str
    env_kwargs: dict[str, Any]
    algo_name: str
    algo: Any
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def to_dict(self) -> dict[str, Any]:
        """The config as nested plain data (saved with checkpoints)."""
        return {
            "env": {"name": self.env_name, **self.env_kwargs},
            "algo": {"name": self.algo_name, **to_dict(self.algo)},
            "model": to_dict(self.model),
            "rollout": to_dict(self.rollout),
            "learner": to_dict(self.learner),
            "trainer": to_dict(self.trainer),
        }


def _named(node: Mapping[str, Any] | None, what: str) -> tuple[str, dict[str, Any]]:
    node = dict(node or {})
    if "name" not in node:
        raise ConfigError(f"{what}.name is missing")
    return str(node.pop("name")), node


def build_run_config(cfg: Mapping[str, Any]) -> RunConfig:
    """Validate a composed config mapping (e.g. ``OmegaConf.to_container(cfg)``)."""
    cfg = {k: v for k, v in cfg.items() if k != "hydra"}
    for key in cfg:
        if key not in NODES:
            raise ConfigError(
                f"{key} is not a valid top-level key; valid keys are {list(NODES)}."
                + closest(key, NODES)
            )
    env_name, env_kwargs = _named(cfg.get("env"), "env")
    env_name = env_spec(env_name).name
    validate_env_kwargs(env_name, env_kwargs)
    algo_name, algo_over = _named(cfg.get("algo"), "algo")
    algo = estimator_config(algo_name, algo_over)
    model = from_mapping(ModelConfig, cfg.get("model"), "model")
    if model.name_or_path:
        check_model_source(model.name_or_path)
    return RunConfig(
        env_name=env_name,
        env_kwargs=env_kwargs,
        algo_name=algo_name,
        algo=algo,
        model=model,
        rollout=from_mapping(RolloutConfig, cfg.get("rollout"), "rollout"),
        learner=from_mapping(LearnerConfig, cfg.get("learner"), "learner"),
        trainer=from_mapping(TrainerConfig, cfg.get("trainer"), "trainer"),
    )


def register_schemas() -> None:
    """Publish every default to Hydra's ConfigStore under ``schema/<node>/<name>``.

    Also registers a plain option ``env/<name>`` / ``algo/<name>`` for environments and
    estimators that have no YAML file, so a newly registered one is usable as ``env=<name>``.
    """
    from hydra.core.config_store import ConfigStore

    from agentrl import configs as configs_pkg

    cs = ConfigStore.instance()
    cfg_dir = __import__("pathlib").Path(configs_pkg.__file__).parent
    for name in list_envs():
        cls = env_spec(name).config_cls
        node = {"name": name, **(to_dict(cls()) if cls is not None else {})}
        cs.store(group="schema/env", name=name, node=node)
        if not (cfg_dir / "env" / f"{name}.yaml").exists():
            cs.store(group="env", name=name, node=node)
    for name in list_estimators():
        node = {"name": name, **to_dict(get_estimator(name).config_cls())}
        cs.store(group="schema/algo", name=name, node=node)
        if not (cfg_dir / "algo" / f"{name}.yaml").exists():
            cs.store(group="algo", name=name, node=node)
    cs.store(group="schema/model", name="default", node=to_dict(ModelConfig()))
    cs.store(group="schema/rollout", name="default", node=to_dict(RolloutConfig()))
    cs.store(group="schema/learner", name="default", node=to_dict(LearnerConfig()))
    cs.store(group="schema/trainer", name="default", node=to_dict(TrainerConfig()))
