"""Credit assignment: the step batch, the trajectory graph, the estimator registry.

The data an estimator reads (:class:`StepBatch`, flattened from the rollout's
:class:`TrajectoryGroup` list, and the :class:`TrajectoryGraph` over its anchor states), the
registry that maps ``algo=<name>`` to a pure estimator (:func:`register_estimator`,
:func:`compute_advantages`) and the synthetic MDPs the credit benchmark measures them on
(:mod:`agentrl.credit.synthetic`). The methods themselves live in ``agentrl.algos``.
"""

from __future__ import annotations

from agentrl.credit.batch import (
    INVALID_ACTION,
    Step,
    StepBatch,
    StepTexts,
    Trajectory,
    TrajectoryGroup,
    cluster_key,
    flat_steps,
)
from agentrl.credit.estimators import (
    Advantages,
    Critic,
    EstimatorSpec,
    NoConfig,
    Scorer,
    check_state,
    compute_advantages,
    discounted_returns,
    estimator_config,
    get_estimator,
    group_mean_std,
    list_estimators,
    register_estimator,
    step_metrics,
    steps_from_end,
)
from agentrl.credit.graph import TrajectoryGraph, build_graph

__all__ = [
    "INVALID_ACTION",
    "Advantages",
    "Critic",
    "EstimatorSpec",
    "NoConfig",
    "Scorer",
    "Step",
    "StepBatch",
    "StepTexts",
    "Trajectory",
    "TrajectoryGraph",
    "TrajectoryGroup",
    "build_graph",
    "check_state",
    "cluster_key",
    "compute_advantages",
    "discounted_returns",
    "estimator_config",
    "flat_steps",
    "get_estimator",
    "group_mean_std",
    "list_estimators",
    "register_estimator",
    "step_metrics",
    "steps_from_end",
]
