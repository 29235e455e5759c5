"""Learning: the PPO-style learner, its loss pieces, model building and saving, and scoring.

:class:`~agentrl.learn.learner.Learner` turns samples with advantages into parameter updates
(:mod:`~agentrl.learn.losses` holds the pure tensor functions of the objective);
:mod:`~agentrl.learn.model` builds the tiny offline model or loads a real one and saves
Hugging Face checkpoints; :mod:`~agentrl.learn.scoring` lets an estimator rescore responses with
the policy (the :class:`~agentrl.credit.Scorer` interface).
"""

from __future__ import annotations

from agentrl.learn.learner import Learner, LearnerConfig, Sample
from agentrl.learn.model import LoRAConfig, ModelConfig

__all__ = ["Learner", "LearnerConfig", "LoRAConfig", "ModelConfig", "Sample"]
