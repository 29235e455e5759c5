"""HCAPO: hindsight credit from the policy's own outcome-conditioned likelihoods, on top of GRPO.

**This is a reconstruction** (docs/methods.md#hcapo; Tan et al., arXiv 2603.08754):
the abstract says the LLM acts as a post-hoc critic through the hindsight ratio
ρ_t = π(a_t | s_t, outcome)/π(a_t | s_t), self-normalised within the trajectory, which refines
step Q estimates and adds a step advantage to GRPO's. The reconstruction we started from is
Q̂_t = ρ̃_t·R with ρ̃_t = ρ_t/mean_u ρ_u and A = A^GRPO + A^step(Q̂ − state baseline). Ours
makes the pieces concrete; every default is our choice. For step t of trajectory i (N steps, M
trajectories):

1. ℓ⁰_{i,t} = scorer.score(h_{i,t}, y_{i,t}) and ℓ¹_{i,t} = scorer.score(h_{i,t} ⊕ o_i, y_{i,t})
   through the :class:`~agentrl.credit.Scorer` interface (the policy's mean token log-prob of
   the response), with RELACE's outcome text o_i (:func:`agentrl.algos.relace.outcome_text`:
   "Outcome: success|failure. Final observation: …", appended at the end and used only to
   score, never in a training context). log ρ_{i,t} = (ℓ¹ − ℓ⁰)/τ: the per-token (geometric
   mean) hindsight ratio of the response, tempered by τ.
2. ρ̃_{i,t} = ρ_{i,t}/mean_u ρ_{i,u} (mean 1 over each trajectory, computed stably), then
   optionally clipped to [ρ_min, ρ_max] (clipping gives up the exact mean 1).
3. Q̂_{i,t} = ρ̃_{i,t}·Â_i with Â_i = A^GRPO_i, the group-standardised return, as the outcome
   signal (rather than the raw R_i, so that failed episodes, R = 0 under binary rewards, also
   assign credit, negatively); the state baseline is the trajectory's self-normalised mean,
   V̂_i = mean_t Q̂_{i,t} = Â_i (the expectation of ρ̃ under the policy is 1, as in hindsight
   credit assignment: Q − V = (ρ − 1)·Z).
4. A^step_{i,t} = Q̂_{i,t} − V̂_i = (ρ̃_{i,t} − 1)·A^GRPO_i, and
   A_{i,t} = A^GRPO_i + ω·A^step_{i,t}; with ω = 1 that is ρ̃_{i,t}·A^GRPO_i.

So the step term redistributes each episode's GRPO advantage over its steps in proportion to
how much more likely the outcome makes each action. A scorer whose hindsight ratio is 1
(ℓ¹ = ℓ⁰) gives exactly GRPO. The paper's multi-scale advantage at critical states is not
reconstructed. Defaults (ours): τ = 1, clip (0.2, 5), ω = 1, GRPO's ε and std normalisation.
All N steps are scored in two batched scorer calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentrl.algos.grpo import GRPOConfig, grpo_traj_advantage
from agentrl.algos.relace import hindsight_delta, retrospective_weights
from agentrl.configuration import check
from agentrl.credit import Advantages, Scorer, register_estimator
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class HCAPOConfig:
    """Options of HCAPO (a reconstruction; every default is our choice, see the module)."""

    tau: float = 1.0
    """Temperature of the hindsight ratio exp(Δ/τ); larger τ flattens ρ̃ towards 1."""
    rho_clip: tuple[float, float] | None = (0.2, 5.0)
    """[ρ_min, ρ_max] clip of the self-normalised ratio, null for none."""
    omega: float = 1.0
    """ω: weight of the step term added to the GRPO advantage."""
    norm_by_std: bool = True
    """GRPO term divides by the group std (false: Dr.GRPO)."""
    epsilon: float = 1e-6
    """Added to the GRPO std."""
    max_obs_chars: int = 512
    """Final observations in the outcome text keep their first this many characters."""

    def __post_init__(self) -> None:
        check(self.tau > 0, "algo.tau", self.tau, "> 0")
        if self.rho_clip is not None:
            lo, hi = self.rho_clip
            need = "null or [rho_min, rho_max] with 0 <= rho_min <= 1 <= rho_max"
            check(0 <= lo <= 1 <= hi, "algo.rho_clip", self.rho_clip, need)
        check(self.omega >= 0, "algo.omega", self.omega, ">= 0")
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")
        check(self.max_obs_chars >= 0, "algo.max_obs_chars", self.max_obs_chars, ">= 0")


def hcapo_advantage(
    batch: StepBatch, delta: np.ndarray, cfg: HCAPOConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Steps 2-4 of the module docstring from Δ = ℓ¹ − ℓ⁰ (N,).

    Returns:
        ((N,) float64 advantages, (N,) float64 ρ̃ after the clip).
    """
    rho = retrospective_weights(delta, batch.step_traj, batch.n_trajs, cfg.tau)
    if cfg.rho_clip is not None:
        rho = np.clip(rho, *cfg.rho_clip)
    episode = grpo_traj_advantage(
        batch.traj_return,
        batch.traj_group,
        batch.n_groups,
        GRPOConfig(norm_by_std=cfg.norm_by_std, epsilon=cfg.epsilon),
    )[batch.step_traj]
    return episode + cfg.omega * (rho - 1.0) * episode, rho


@register_estimator("hcapo", config=HCAPOConfig, needs_scorer=True)
def hcapo(batch: StepBatch, graph: object, cfg: HCAPOConfig, *, scorer: Scorer) -> Advantages:
    """HCAPO advantage per step: (N,) float64 = A^GRPO_i·(1 + ω(ρ̃_{i,t} − 1)) (see the
    module)."""
    if batch.n_steps == 0:
        return Advantages(step=np.zeros(0), metrics={})
    delta, score_time = hindsight_delta(batch, scorer, cfg.max_obs_chars, "hcapo")
    adv, rho = hcapo_advantage(batch, delta, cfg)
    metrics = {
        "delta_mean": float(delta.mean()),
        "delta_std": float(delta.std()),
        "rho_std": float(rho.std()),
        "rho_max": float(rho.max()),
        "score_time_s": score_time,
    }
    return Advantages(step=adv, metrics=metrics)
