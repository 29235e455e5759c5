"""RELACE: retrospective likelihood-based action credit on top of the GRPO episode advantage.

**This is a reconstruction** (docs/methods.md#relace): the paper's abstract fixes the
ingredients — teacher-forced likelihood of each executed response under its original and an
outcome-augmented context, a trajectory-normalised retrospective factor reweighting discounted
returns, anchor-local advantages, temporal smoothing, success-protecting masking, added to GRPO —
but the equations below and every default are our design, not the paper's (its text and code
were not available). For step t of trajectory i (N steps, M trajectories in the batch):

1. ℓ⁰_{i,t} = scorer.score(h_{i,t}, y_{i,t}) and ℓ¹_{i,t} = scorer.score(h_{i,t} ⊕ o_i, y_{i,t}),
   the mean token log-prob of the response under the policy; h is the step's user message
   (``batch.texts.prompts``) and o_i = ``"\\nOutcome: success|failure. Final observation: …"``
   built from ``batch.traj_won`` and ``batch.texts.final_obs`` (truncated to ``max_obs_chars``).
   It is appended at the end so the scorer's left truncation never cuts it. Δ = ℓ¹ − ℓ⁰.
2. w_{i,t} = exp(Δ_{i,t}/τ) / ((1/T_i) Σ_u exp(Δ_{i,u}/τ)) (mean 1 over each trajectory),
   computed as exp(Δ/τ − max_u Δ_{i,u}/τ) / mean(…) so that huge |Δ| cannot overflow; then
   optionally clipped to [w_min, w_max] (clipping gives up the exact mean 1).
3. G̃_{i,t} = w_{i,t} · G_{i,t}, G_{i,t} = Σ_{k≥t} γ^{k−t} r_{i,k}.
4. A^L_{i,t} = (G̃_{i,t} − mean_{G^S(s_{i,t})} G̃) / F_norm over the anchor group of the step
   (``batch.step_anchor``, already task-local); F_norm = 1 (``mean_norm``) or std + ε
   (``mean_std_norm``, unbiased std); a singleton anchor group gives 0.
5. Ā_{i,t} = (1−α)·A^L_{i,t} + α·Ā_{i,t+1} (backward EMA within the trajectory), started at
   the last step with Ā_{i,T_i} = A^L_{i,T_i}, so the weights along the trajectory sum to 1.
6. If trajectory i won: Ā_{i,t} ← max(Ā_{i,t}, 0).
7. A_{i,t} = A^GRPO_i + ω·Ā_{i,t}, with A^GRPO from :func:`agentrl.algos.grpo.grpo_traj_advantage`.

Defaults are choices, since the paper's values are unknown: τ = 1, w clip (0.2, 5), γ = 0.95 and
``mean_norm`` (GiGPO's conventions), α = 0.3, ω = 1. With Δ ≡ 0 (the outcome does not change any
likelihood) w ≡ 1 and the step term is GiGPO's anchor-local step advantage, smoothed and masked.

The outcome text is used only to score; the estimator returns advantages (N,) float64 and scalar
metrics, never a context, so it cannot leak into training prompts. All N steps are scored in two
batched scorer calls (original and augmented contexts).

Identical groups: identical rollouts that revisit an anchor get a nonzero step term, because the
anchor group pools visits whose discounted returns-to-go differ (as GiGPO's), although nothing
tells the rollouts apart.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.algos._common import centred_by_group, divide_or_zero
from agentrl.algos.grpo import GRPOConfig, grpo_traj_advantage
from agentrl.configuration import check
from agentrl.credit import (
    Advantages,
    Scorer,
    discounted_returns,
    register_estimator,
    steps_from_end,
)
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class RELACEConfig:
    """Options of RELACE (a reconstruction; every default is our choice, see the module)."""

    gamma: float = 0.95
    """γ of the step return-to-go (GiGPO's value)."""
    tau: float = 1.0
    """Temperature of the retrospective factor exp(Δ/τ); larger τ flattens w towards 1."""
    w_clip: tuple[float, float] | None = (0.2, 5.0)
    """[w_min, w_max] clip of the factor, null for none."""
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    """Anchor-local normalisation: F_norm = 1 or the group's std + ε."""
    alpha: float = 0.3
    """Backward-EMA smoothing weight α of the next step's smoothed term (0 = no smoothing)."""
    omega: float = 1.0
    """ω: weight of the step term added to the GRPO episode advantage."""
    success_mask: bool = True
    """Clamp the step term of won trajectories at 0 from below."""
    norm_by_std: bool = True
    """GRPO episode term divides by the group std (false: Dr.GRPO)."""
    epsilon: float = 1e-6
    """Added to stds (episode term and ``mean_std_norm``); 0 is allowed (all-equal groups and
    singleton anchors give 0)."""
    max_obs_chars: int = 512
    """Final observations in the outcome text keep their first this many characters."""

    def __post_init__(self) -> None:
        check(0 <= self.gamma <= 1, "algo.gamma", self.gamma, "in [0, 1]")
        check(self.tau > 0, "algo.tau", self.tau, "> 0")
        if self.w_clip is not None:
            lo, hi = self.w_clip
            need = "null or [w_min, w_max] with 0 <= w_min <= 1 <= w_max (w has mean 1)"
            check(0 <= lo <= 1 <= hi, "algo.w_clip", self.w_clip, need)
        check(0 <= self.alpha <= 1, "algo.alpha", self.alpha, "in [0, 1]")
        check(self.omega >= 0, "algo.omega", self.omega, ">= 0")
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")
        check(self.max_obs_chars >= 0, "algo.max_obs_chars", self.max_obs_chars, ">= 0")


def outcome_text(won: bool, final_obs: str, max_chars: int) -> str:
    """The outcome appended to a context for the hindsight score, e.g.
    ``"\\nOutcome: success. Final observation: You won!"`` (no observation when empty or
    ``max_chars == 0``; longer ones keep their first ``max_chars`` characters and ``...``)."""
    text = f"\nOutcome: {'success' if won else 'failure'}."
    obs = final_obs.strip() if max_chars > 0 else ""
    if len(obs) > max_chars:
        obs = obs[:max_chars] + "..."
    return text + (f" Final observation: {obs}" if obs else "")


def augmented_contexts(
    prompts: Sequence[str],
    step_traj: np.ndarray,
    traj_won: np.ndarray,
    final_obs: Sequence[str],
    max_chars: int,
) -> list[str]:
    """h_{i,t} ⊕ o_i for each step: (N,) strings (new strings; the inputs are not touched)."""
    outcomes = [outcome_text(bool(w), o, max_chars) for w, o in zip(traj_won, final_obs)]
    return [p + outcomes[i] for p, i in zip(prompts, step_traj.tolist())]


def retrospective_weights(
    delta: np.ndarray, step_traj: np.ndarray, n_trajs: int, tau: float
) -> np.ndarray:
    """w = exp(Δ/τ) / mean_traj exp(Δ/τ), unclipped, stable for any finite Δ.

    Args:
        delta: (N,) float — Δ of each step.
        step_traj: (N,) int in [0, n_trajs).
    Returns:
        (N,) float64 in (0, T_i]: the per-trajectory max is subtracted before ``exp``, so the
        largest term is exp(0) = 1 and the mean is at least 1/T_i (no overflow, no 0/0).
    """
    x = np.asarray(delta, dtype=np.float64) / tau
    top = np.full(n_trajs, -np.inf)
    np.maximum.at(top, step_traj, x)
    e = np.exp(x - top[step_traj])  # (N,) in (0, 1]
    count = np.bincount(step_traj, minlength=n_trajs)
    mean = np.bincount(step_traj, weights=e, minlength=n_trajs) / np.maximum(count, 1)
    return e / mean[step_traj]


def anchor_local_advantage(
    values: np.ndarray,
    step_anchor: np.ndarray,
    mode: Literal["mean_norm", "mean_std_norm"],
    epsilon: float,
) -> np.ndarray:
    """(v − mean_{anchor} v) / F_norm per step; singleton anchor groups give 0.

    Args:
        values: (N,) float — e.g. weighted returns G̃.
        step_anchor: (N,) int — anchor group of each step (task-local ids).
    Returns:
        (N,) float64.
    """
    if values.shape[0] == 0:
        return np.zeros(0)
    # Exactly 0 in all-equal groups (and singletons), and zero-safe for ε = 0.
    adv, std, count = centred_by_group(values, step_anchor, int(step_anchor.max()) + 1)
    if mode == "mean_std_norm":
        adv = divide_or_zero(adv, std + epsilon)
    return np.where(count > 1, adv, 0.0)


def backward_ema(values: np.ndarray, step_traj: np.ndarray, alpha: float) -> np.ndarray:
    """Ā_t = (1−α)·A_t + α·Ā_{t+1} within each trajectory, with Ā_T = A_T at its last step.

    Unrolled, this is the discounted sum of x_t = (1−α)·A_t (x_T = A_T) with discount α, so it
    reuses :func:`agentrl.credit.discounted_returns` (vectorised by distance from the end).

    Args:
        values: (N,) float; step_traj: (N,) int, trajectories contiguous, in turn order.
    Returns:
        (N,) float64.
    """
    values = np.asarray(values, dtype=np.float64)
    x = np.where(steps_from_end(step_traj) == 0, values, (1.0 - alpha) * values)
    return discounted_returns(x, step_traj, alpha)


def relace_step_term(
    batch: StepBatch, delta: np.ndarray, cfg: RELACEConfig
) -> dict[str, np.ndarray]:
    """Steps 2–6 of the module docstring from Δ: each intermediate, (N,) float64.

    Returns:
        ``w`` (clipped factor), ``ret`` (G), ``weighted`` (G̃), ``local`` (A^L), ``smoothed``
        (Ā before the mask) and ``step`` (Ā after the mask).
    """
    w = retrospective_weights(delta, batch.step_traj, batch.n_trajs, cfg.tau)
    if cfg.w_clip is not None:
        w = np.clip(w, *cfg.w_clip)
    ret = discounted_returns(batch.step_reward, batch.step_traj, cfg.gamma)
    weighted = w * ret
    local = anchor_local_advantage(weighted, batch.step_anchor, cfg.mode, cfg.epsilon)
    smoothed = backward_ema(local, batch.step_traj, cfg.alpha)
    step = smoothed
    if cfg.success_mask:
        step = np.where(batch.traj_won[batch.step_traj], np.maximum(smoothed, 0.0), smoothed)
    return dict(w=w, ret=ret, weighted=weighted, local=local, smoothed=smoothed, step=step)


def hindsight_delta(
    batch: StepBatch, scorer: Scorer, max_obs_chars: int, name: str
) -> tuple[np.ndarray, float]:
    """(N,) float64 log π(a|s, outcome) − log π(a|s) of every step, and the scoring time.

    Each response is scored twice by ``scorer``: after its own prompt, and after the prompt
    with the trajectory's outcome prepended (:func:`augmented_contexts`). Shared by RELACE
    and HCAPO; ``name`` goes into the error messages.
    """
    if batch.texts is None:
        raise ValueError(
            f"{name} rescores each step's response, so the batch needs its texts "
            "(batch.texts is None); build it with StepBatch.from_groups from rollouts"
        )
    texts = batch.texts
    aug = augmented_contexts(
        texts.prompts, batch.step_traj, batch.traj_won, texts.final_obs, max_obs_chars
    )
    t0 = time.perf_counter()
    l0 = np.asarray(scorer.score(list(texts.prompts), list(texts.responses)), dtype=np.float64)
    l1 = np.asarray(scorer.score(aug, list(texts.responses)), dtype=np.float64)
    score_time = time.perf_counter() - t0
    if l0.shape != (batch.n_steps,) or l1.shape != (batch.n_steps,):
        raise ValueError(f"scorer returned shapes {l0.shape}, {l1.shape}; expected (N,)")
    if not (np.all(np.isfinite(l0)) and np.all(np.isfinite(l1))):
        raise FloatingPointError(f"{name}: the scorer returned non-finite log-probs")
    return l1 - l0, score_time


@register_estimator("relace", config=RELACEConfig, needs_scorer=True)
def relace(batch: StepBatch, graph: object, cfg: RELACEConfig, *, scorer: Scorer) -> Advantages:
    """RELACE advantage per step: (N,) float64 = A^GRPO_i + ω·Ā_{i,t} (see the module)."""
    if batch.n_steps == 0:
        return Advantages(step=np.zeros(0), metrics={})
    delta, score_time = hindsight_delta(batch, scorer, cfg.max_obs_chars, "relace")
    terms = relace_step_term(batch, delta, cfg)
    episode = grpo_traj_advantage(
        batch.traj_return,
        batch.traj_group,
        batch.n_groups,
        GRPOConfig(norm_by_std=cfg.norm_by_std, epsilon=cfg.epsilon),
    )
    adv = episode[batch.step_traj] + cfg.omega * terms["step"]
    metrics = {
        "delta_mean": float(delta.mean()),
        "delta_std": float(delta.std()),
        "w_mean": float(terms["w"].mean()),
        "w_std": float(terms["w"].std()),
        "step_term_std": float(terms["step"].std()),
        "score_time_s": score_time,
    }
    return Advantages(step=adv, metrics=metrics)
