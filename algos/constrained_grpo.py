"""Constrained GRPO: scalarised standardised advantages with Lagrange multipliers on costs.

docs/methods.md#constrained_grpo (Girgis et al., arXiv 2602.05863; abstract only): a Lagrangian
with indicator costs C_k that scalarises *standardised advantages*, not rewards,

    A_i = λ_R·Z_R,i − Σ_k λ_k·Z_{C_k},i,

where each Z is its own group z-score (GRPO's, :func:`agentrl.algos.grpo.grpo_traj_advantage`:
unbiased std, ε, exactly 0 for all-equal groups), with dual ascent of λ_k towards the
thresholds. Scalarising rewards first would let the within-group variances and covariances
distort the weights.

Costs come from the environments (``info["costs"]``, :mod:`agentrl.env_api`; ``batch.step_cost``
with names ``batch.cost_names``); the episode cost C_k,i is the sum of trajectory i's step
costs of name k (e.g. ``invalid``: the number of invalid actions; ``steps``: the episode length;
WebShop's ``over_budget``: 1 if the purchase exceeded the price limit). The constraint is
E[C_k] ≤ d_k with d_k = ``thresholds[k]``. After the advantages (computed with the current
λ), the duals take one projected ascent step on the batch mean episode cost:
λ_k ← clip(λ_k + η_λ·(mean_i C_k,i − d_k), 0, λ_max). A cost named in ``thresholds`` that the
batch does not report counts as 0 (its λ decays to 0; ``credit/cost_<k>`` shows 0).

The λ_k are the estimator state (``{"updates": int, "lambda": {k: float}}``), kept by the
trainer across iterations, checkpointed and logged as ``credit/lambda_<k>`` (after the update),
with ``credit/cost_<k>`` (batch mean episode cost) and ``credit/violation_<k>`` (cost − d_k).
With every λ_k = 0 and λ_R = 1 the advantage is GRPO's exactly. Defaults are ours (the
abstract gives none): λ_R = 1, λ_k starting at 0, η_λ = 0.05, λ_max = 10, thresholds
``{invalid: 0.1}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl.algos.grpo import GRPOConfig, grpo_traj_advantage
from agentrl.configuration import ConfigError, check
from agentrl.credit import Advantages, register_estimator
from agentrl.credit.batch import StepBatch

DEFAULT_THRESHOLDS: dict[str, float] = {"invalid": 0.1}
"""The thresholds when ``algo.thresholds`` is null: at most 0.1 invalid actions per episode."""


@dataclass(frozen=True)
class ConstrainedGRPOConfig:
    """Options of Constrained GRPO (defaults are our choices, see the module)."""

    thresholds: dict[str, float] | None = None
    """Cost name → d_k, the limit on the mean episode cost, e.g. ``{invalid: 0.1, steps: 20}``;
    null means ``{invalid: 0.1}``. (The default is null so that Hydra's
    ``algo.thresholds={steps: 20}`` replaces it rather than merging into it.)"""
    lambda_r: float = 1.0
    """λ_R: weight of the reward z-score."""
    lambda_init: float = 0.0
    """Starting value of every λ_k."""
    dual_lr: float = 0.05
    """η_λ: step size of the dual ascent."""
    lambda_max: float = 10.0
    """Upper clip of every λ_k (keeps a never-satisfiable constraint from swamping the reward)."""
    norm_by_std: bool = True
    """Each Z divides by its group std (false: centred only, Dr.GRPO-style)."""
    epsilon: float = 1e-6
    """Added to each std (GRPO's ε)."""

    def __post_init__(self) -> None:
        if self.thresholds is not None:
            if not isinstance(self.thresholds, dict):
                raise ConfigError(
                    f"algo.thresholds={self.thresholds!r} is invalid: it must be a mapping "
                    "of cost names to limits, e.g. {invalid: 0.1}."
                )
            clean = {}
            for k, v in self.thresholds.items():
                ok = isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)
                check(isinstance(k, str) and ok and v >= 0, f"algo.thresholds.{k}", v,
                      "a finite number >= 0")  # fmt: skip
                clean[k] = float(v)
            object.__setattr__(self, "thresholds", dict(sorted(clean.items())))
        check(self.lambda_r >= 0, "algo.lambda_r", self.lambda_r, ">= 0")
        check(self.dual_lr >= 0, "algo.dual_lr", self.dual_lr, ">= 0")
        check(self.lambda_max >= 0, "algo.lambda_max", self.lambda_max, ">= 0")
        check(0 <= self.lambda_init <= self.lambda_max, "algo.lambda_init", self.lambda_init,
              "in [0, algo.lambda_max]")  # fmt: skip
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")

    @property
    def limits(self) -> dict[str, float]:
        """The thresholds in effect (the default when ``thresholds`` is null)."""
        return dict(DEFAULT_THRESHOLDS) if self.thresholds is None else dict(self.thresholds)


def episode_costs(batch: StepBatch, names: list[str]) -> np.ndarray:
    """(M, K) float64 — each trajectory's summed cost for each of ``names`` (0 if unreported)."""
    out = np.zeros((batch.n_trajs, len(names)))
    traj_cost = batch.traj_cost
    for k, name in enumerate(names):
        if name in batch.cost_names:
            out[:, k] = traj_cost[:, batch.cost_names.index(name)]
    return out


def dual_step(
    lam: np.ndarray, mean_cost: np.ndarray, limit: np.ndarray, lr: float, lam_max: float
) -> np.ndarray:
    """Projected dual ascent: clip(λ + lr·(mean_cost − limit), 0, lam_max); all (K,)."""
    return np.clip(lam + lr * (mean_cost - limit), 0.0, lam_max)


@register_estimator("constrained_grpo", config=ConstrainedGRPOConfig, stateful=True)
def constrained_grpo(
    batch: StepBatch, graph: object, cfg: ConstrainedGRPOConfig, *, state: dict[str, Any] | None
) -> Advantages:
    """λ_R·Z_R − Σ_k λ_k·Z_{C_k} per step: (N,) float64, and the updated λ (see the module)."""
    limits = cfg.limits
    names = sorted(limits)
    stored = (state or {}).get("lambda", {})
    lam = np.array([float(stored.get(k, cfg.lambda_init)) for k in names])  # (K,)
    zcfg = GRPOConfig(norm_by_std=cfg.norm_by_std, epsilon=cfg.epsilon)
    adv = cfg.lambda_r * grpo_traj_advantage(batch.traj_return, batch.traj_group,
                                             batch.n_groups, zcfg)  # fmt: skip
    costs = episode_costs(batch, names)  # (M, K)
    for k in range(len(names)):
        if lam[k] != 0.0:  # λ = 0 leaves GRPO's advantage bit for bit
            adv = adv - lam[k] * grpo_traj_advantage(
                costs[:, k], batch.traj_group, batch.n_groups, zcfg
            )
    mean_cost = costs.mean(axis=0) if batch.n_trajs else np.zeros(len(names))
    limit = np.array([limits[k] for k in names])
    new_lam = dual_step(lam, mean_cost, limit, cfg.dual_lr, cfg.lambda_max)
    metrics: dict[str, float] = {}
    for k, name in enumerate(names):
        metrics[f"lambda_{name}"] = float(new_lam[k])
        metrics[f"cost_{name}"] = float(mean_cost[k])
        metrics[f"violation_{name}"] = float(mean_cost[k] - limit[k])
    new_state = {
        "updates": int((state or {}).get("updates", 0)) + 1,
        "lambda": {name: float(new_lam[k]) for k, name in enumerate(names)},
    }
    return Advantages(step=adv[batch.step_traj], metrics=metrics, state=new_state)
