"""GEM interop both ways: agentrl environments in GEM's registry, GEM's environments in agentrl.

GEM (``gem-llm`` on PyPI) keeps a registry of text environments with Gymnasium's five-tuple API
(``gem.register``, ``gem.make``, ``gem.make_vec``), filled when ``gem`` is imported; it scans
no entry points. So importing this module is the step that registers agentrl's environments:

.. code-block:: python

    import gem
    import agentrl.interop.gem  # noqa: F401 - registers agentrl/<name> for every agentrl env

    env = gem.make("agentrl/sokoban", dim_room=[7, 7])  # env.* keys as keyword arguments
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("up")
    envs = gem.make_vec(["agentrl/webshop"] * 8, seed=0)

Every environment agentrl knows (bundled and plugins) is registered as ``agentrl/<name>``,
except the adapters to other ecosystems (``env=gem`` itself, ``env=openenv``). The GEM
environment *is* the agentrl environment: the same observations, rewards, flags and ``info``
(``anchor``, ``won``, ``admissible_actions``, ``task``, ``costs`` ...), step for step.
``seed`` given to the constructor (``gem.make_vec`` passes ``seed + index``) seeds the first
``reset()`` that names none, so vectorised environments are reproducible. An environment
registered after this import joins with :func:`register_gem_envs`.

The other direction, ``env=gem env.id=<GEM id>``, is :class:`~agentrl.interop.gem_env.GemEnv`.

Installing: gem-llm 0.1.0 requires ``math-verify[antlr4_13_2]``, which pins
``antlr4-python3-runtime==4.13.2``, while Hydra's omegaconf needs ``4.9.*`` (its generated
grammar does not load in the 4.13 runtime), so a plain ``pip install gem-llm`` breaks
``python -m agentrl.run``. The ``gem`` extra installs GEM's other requirements (math-verify
without that pin; its LaTeX parser ships a 4.9 grammar as well), then gem-llm goes in without
its dependency list: ``pip install 'agentrl[gem]' && pip install --no-deps 'gem-llm==0.1.0'``.
"""

from __future__ import annotations

from typing import Any

import gem
import numpy as np

from agentrl.interop.gem_env import GemConfig, GemEnv
from agentrl.registry import env_spec, list_envs, make

PREFIX = "agentrl/"
"""GEM ids of agentrl environments: ``agentrl/<short name>``."""
ENTRY_POINT = "agentrl.interop.gem:AgentrlGemEnv"


class AgentrlGemEnv(gem.Env):
    """An agentrl environment (``agentrl.make(env_name, **env_kwargs)``) behind GEM's API.

    ``reset`` and ``step`` return exactly what the agentrl environment returns. ``seed`` seeds
    the first ``reset()`` called without one (module docstring); ``agentrl_env`` is the
    environment itself.
    """

    def __init__(self, env_name: str, seed: int | None = None, **env_kwargs: Any) -> None:
        super().__init__()
        self.agentrl_env = make(env_name, **env_kwargs)
        self.env_name = env_name
        self.cost_names: tuple[str, ...] = getattr(self.agentrl_env.unwrapped, "cost_names", ())
        """The names of ``info["costs"]`` (agentrl's step costs)."""
        self._first_seed = seed
        # Own generator for sample_random_action: drawing from the env's np_random would change
        # the episodes (twin runs with and without random actions would differ).
        self._action_rng = np.random.default_rng(seed)
        self._admissible: list[str] | None = None

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed, self._first_seed = self._first_seed, None
        else:
            self._first_seed = None
        obs, info = self.agentrl_env.reset(seed=seed, options=options)
        self._admissible = info.get("admissible_actions")
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        out = self.agentrl_env.step(action)
        self._admissible = out[-1].get("admissible_actions")
        return out

    def sample_random_action(self) -> str:
        """One of the admissible actions when the environment lists them, else a random word."""
        if self._admissible:
            return self._admissible[int(self._action_rng.integers(len(self._admissible)))]
        n = int(self._action_rng.integers(1, 12))
        return "".join(chr(int(c)) for c in self._action_rng.integers(97, 123, size=n))

    def close(self) -> None:
        self.agentrl_env.close()


def is_adapter(name: str) -> bool:
    """Whether the agentrl environment ``name`` wraps another ecosystem's environments (its
    entry point lives in :mod:`agentrl.interop`); those are not offered to GEM."""
    entry = env_spec(name).entry_point
    where = entry if isinstance(entry, str) else f"{entry.__module__}.{entry.__qualname__}"
    return where.startswith("agentrl.interop.")


def register_gem_envs() -> list[str]:
    """Register ``agentrl/<name>`` in GEM for every agentrl environment not registered there
    yet (adapters excepted); returns the GEM ids added. Safe to call again."""
    added = []
    for name in list_envs():
        gem_id = PREFIX + name
        if is_adapter(name) or gem_id in gem.envs.registration.ENV_REGISTRY:
            continue
        gem.register(gem_id, ENTRY_POINT, env_name=name)
        added.append(gem_id)
    return added


register_gem_envs()

__all__ = ["PREFIX", "AgentrlGemEnv", "GemConfig", "GemEnv", "is_adapter", "register_gem_envs"]
