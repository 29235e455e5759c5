"""AC2 advantage (``algo=ac2``): endpoint value minus its prefix group's mean (docs/methods.md#ac2).

Each step of the batch is one continuation of a prefix (the prefix sits in the prompt, so only
the new tokens are trained); its reward is the endpoint value that :class:`agentrl.algos.ac2.driver.
AC2Driver` computed — the critic's grid estimate, or the grader's reward when the continuation
finished. Rows whose critic answer was off-grid are marked invalid and get advantage 0.
"""

from __future__ import annotations

from agentrl.algos.ac2.core import AC2Config, ac2_advantages
from agentrl.credit import Advantages, register_estimator
from agentrl.credit.batch import StepBatch


# Its groups are the algo.group_size continuations of one prefix, not rollout.group_size.
@register_estimator(
    "ac2", config=AC2Config, driver="agentrl.algos.ac2.driver:AC2Driver", group_based=False
)
def ac2(batch: StepBatch, graph: object, cfg: AC2Config) -> Advantages:
    """(N,) float64: v_i − mean_j v_j over the valid rows of each prefix group (O(N))."""
    adv = ac2_advantages(batch.step_reward, batch.step_valid, batch.step_group)
    valid_frac = float(batch.step_valid.mean()) if batch.n_steps else 0.0
    return Advantages(step=adv, metrics={"ac2_valid_frac": valid_frac})
