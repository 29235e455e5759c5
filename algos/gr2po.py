"""GR2PO: return-to-go normalised over the rollouts of a group at the same time index.

docs/methods.md#gr2po (Wang, Zhang, Shen, Ma, arXiv 2609.19850, cs.RO; abstract only): for
step t of rollout i of a group,

    A_{i,t} = (G_{i,t} − mean_j G_{j,t}) / (std_j G_{j,t} + ε),

where j runs over the rollouts of the same group that have a step at index t (``step_t``) and
G_{i,t} = Σ_{k≥t} γ^{k−t} r_{i,k} is the discounted return-to-go with a zero tail at the end of
the rollout (no bootstrap). The std is the unbiased one, as GRPO's. Our choices, where the
abstract is silent: a time index reached by a single rollout of its group gives 0 (nothing to
compare it with; GRPO would keep the uncentred value); an all-equal set gives exactly 0, also
with ε = 0; γ defaults to 0.99 (the MuJoCo convention of the paper's domain; its value is not
given) and ε to 1e-6 (GRPO's). The paper's entropy bonus and KL early stopping belong to the
learner, not to this estimator.

On one-step episodes every rollout has only t = 0 and G_{i,0} = R_i, so GR2PO is GRPO (for
groups of two or more rollouts). Vectorised: one pass over (group, t) keys, O(N).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos._common import centred_by_group, divide_or_zero
from agentrl.configuration import check
from agentrl.credit import Advantages, discounted_returns, register_estimator
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class GR2POConfig:
    """Options of GR2PO (γ and ε are our choices, see the module)."""

    gamma: float = 0.99
    """γ of the return-to-go."""
    norm_by_std: bool = True
    """Divide by the std over the rollouts at the same time index (false: centre only)."""
    epsilon: float = 1e-6
    """Added to the std; 0 is allowed (all-equal sets give exactly 0)."""

    def __post_init__(self) -> None:
        check(0 <= self.gamma <= 1, "algo.gamma", self.gamma, "in [0, 1]")
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")


def time_index_advantage(
    values: np.ndarray,
    step_group: np.ndarray,
    step_t: np.ndarray,
    norm_by_std: bool,
    epsilon: float,
) -> np.ndarray:
    """(v − mean)/(std + ε) over the steps that share (group, t); singleton sets give 0.

    Args:
        values: (N,) float — e.g. returns-to-go; step_group, step_t: (N,) int.
    Returns:
        (N,) float64.
    """
    if values.shape[0] == 0:
        return np.zeros(0)
    width = int(step_t.max()) + 1
    key = step_group * width + step_t
    n_keys = (int(step_group.max()) + 1) * width
    if n_keys > 4 * key.shape[0]:  # sparse (group, t) pairs: renumber densely (a sort)
        _, key = np.unique(key, return_inverse=True)
        key = key.reshape(-1)
        n_keys = int(key.max()) + 1
    centred, std, count = centred_by_group(values, key, n_keys)
    adv = divide_or_zero(centred, std + epsilon) if norm_by_std else centred
    return np.where(count > 1, adv, 0.0)


@register_estimator("gr2po", config=GR2POConfig)
def gr2po(batch: StepBatch, graph: object, cfg: GR2POConfig) -> Advantages:
    """GR2PO advantage per step: (N,) float64 (see the module)."""
    ret = discounted_returns(batch.step_reward, batch.step_traj, cfg.gamma)
    adv = time_index_advantage(ret, batch.step_group, batch.step_t, cfg.norm_by_std, cfg.epsilon)
    return Advantages(step=adv, metrics={})
