"""Learning, the Update stage: the PPO-style learner, its loss pieces and the policy-loss registry.

:class:`~agentrl.learn.learner.Learner` turns samples with advantages into parameter updates
(:mod:`~agentrl.learn.losses` holds the pure tensor functions of the objective,
:mod:`~agentrl.learn.policy_loss` the registry of losses by name); :mod:`~agentrl.learn.update`
wraps it as the trainer's Update stage with its hooks; :mod:`~agentrl.learn.parallel` shards it
over the ranks of a torchrun job; :mod:`~agentrl.learn.value` holds value heads. The forward
passes it trains through are the model room's (:mod:`agentrl.model.forward`).
"""

from __future__ import annotations

from agentrl.learn.learner import Learner, LearnerConfig
from agentrl.model.forward import Sample

__all__ = ["Learner", "LearnerConfig", "Sample"]
