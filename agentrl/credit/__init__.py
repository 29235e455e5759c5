"""Credit assignment: the step batch, the trajectory graph, the estimator registry, the Credit
stage.

The data an estimator reads (:class:`StepBatch`, flattened from the rollout's
:class:`TrajectoryGroup` list, and the :class:`TrajectoryGraph` over its anchor states), the
registry that maps ``algo=<name>`` to a pure estimator (:func:`register_estimator`,
:func:`compute_advantages`), the trainer's Credit stage (:mod:`agentrl.credit.stage`: the
batch gathered over the ranks, the graph, the estimator's state and critic), the contract every
estimator keeps (:mod:`agentrl.credit.contract`) and the synthetic MDPs the credit benchmark
measures them on (:mod:`agentrl.credit.synthetic`). The methods themselves live in
``agentrl.algos``.

Another trainer's episodes get agentrl's credit through :func:`assign` (per-turn records in,
one advantage per record out; :mod:`agentrl.credit.records`), and Relax's custom-advantage hook
through :mod:`agentrl.credit.relax`. SkyRL's advantage-estimator registry gets them through
:mod:`agentrl.credit.skyrl_adapter` (imported only on request: it needs ``skyrl``), verl's
advantage step through :mod:`agentrl.credit.verl_adapter` (the same: it needs ``verl``).
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
from agentrl.credit.records import Assigned, RecordError, assign

__all__ = [
    "INVALID_ACTION",
    "Advantages",
    "Assigned",
    "Critic",
    "EstimatorSpec",
    "NoConfig",
    "RecordError",
    "Scorer",
    "Step",
    "StepBatch",
    "StepTexts",
    "Trajectory",
    "TrajectoryGraph",
    "TrajectoryGroup",
    "assign",
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
