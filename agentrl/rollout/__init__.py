"""Rollout, the Sampler stage: prompts, action projection, environment pools, generation
backends.

:func:`collect` plays one episode in each environment of a batch: it builds the prompts
(:mod:`~agentrl.rollout.prompting`), generates with a backend (:mod:`~agentrl.rollout.backends`:
``hf``; :mod:`~agentrl.rollout.vllm_backend`: ``vllm``), projects each response onto an action
and steps the environments in a pool (:mod:`~agentrl.rollout.env_pool`, inline or in worker
processes). Its output, a list of :class:`~agentrl.credit.TrajectoryGroup`, is what credit
assignment reads. ``rollout.mode=continuous`` (:mod:`~agentrl.rollout.continuous`) drops the
turn barrier: each episode advances on its own, env steps overlapping generation.
:mod:`~agentrl.rollout.sampler` is the trainer's Sampler stage around it
(plain collection, DAPO's dynamic sampling, a method's own rollout driver).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Names load on first use: environment worker processes import agentrl.rollout.env_pool, and
# must not pay for torch (backends) at start-up, where a step timeout is already running.
_WHERE = {
    "Backend": "backends",
    "Generation": "backends",
    "HFBackend": "backends",
    "Sampling": "backends",
    "RolloutConfig": "loop",
    "collect": "loop",
}

if TYPE_CHECKING:
    from agentrl.rollout.backends import Backend, Generation, HFBackend, Sampling
    from agentrl.rollout.loop import RolloutConfig, collect

__all__ = [
    "Backend",
    "Generation",
    "HFBackend",
    "RolloutConfig",
    "Sampling",
    "collect",
]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
