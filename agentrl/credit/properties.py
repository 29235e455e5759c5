"""Exact properties of credit estimators: termination bias and identical groups.

**Termination bias** (verl-project/verl issue #7244). A baseline may depend on the state, never
on the action being scored. A construction that sums per-turn centred terms over a number of
turns the policy chooses (MT-GRPO's per-turn-index normalisation, Zeng, Wei et al., arXiv
2505.11821) breaks that rule when the policy decides when to stop. :func:`termination_gradient`
measures it on a deterministic two-turn MDP, exactly (no sampling):

- turn 1 (anchor ``s1``): STOP or CONTINUE, π(CONTINUE) = p = σ(θ); CONTINUE leads to turn 2
  (anchor ``s2``, action END), which always ends the episode; both ends are terminations,
  never truncations;
- every turn taken earns the turn reward c; the outcome at the end is R_T = K − c·T (variant A:
  the return is K either way, so ∂J/∂θ = 0) or K + Δ·[T = 2] − c·T (variant B: ∂J/∂θ =
  p(1−p)Δ). Every episode ends as a success (``Trajectory.won``);
- for m ~ Binomial(G, p) continuers the batch holds m two-turn and G − m one-turn rollouts of
  one task; the estimator's advantage A_{i,1} of each first turn gives
  ĝ(m) = (1/G)·Σ_i ∇_θ log π(a_{i,1})·A_{i,1} with ∇ = 1 − p for CONTINUE and −p for STOP, and
  E[ĝ] = Σ_m Binom(m; G, p)·ĝ(m).

An unbiased estimator gives |E[ĝ]| = 0 (to rounding) in variant A and the sign of Δ in variant
B (:func:`passes`; :func:`termination_grid` runs the test's grid of c and p). A discount γ < 1
makes STOP and CONTINUE differ in value even in variant A (a discounted objective, not a biased
baseline), so the test is meant to run with the discount off: :func:`undiscounted`.

The outcome is either ``"folded"`` into the last turn's reward, or ``"separate"``: then each
turn's reward c is the step's rubric (process) reward (``Step.rubric_reward``) and the outcome
R_T is the last step's environment reward, the split agentrl's step batch has for "turn reward"
and "outcome". An estimator that ignores the rubric reward cannot receive the outcome separately
(it would see R_T alone as the return), so it gets the folded batch:
:func:`takes_separate_outcome`.

**Identical groups.** :func:`identical_group_magnitude`: the largest |A| when every rollout of a
group is the same action sequence with the same rewards (a success and a failure case). There
is nothing to compare, so a group-relative estimator should give 0; estimators that give
nonzero values say why in their docstrings.

Estimators that need a learned critic or their own rollout driver are not measured
(:func:`skip_reason`); estimators that rescore responses get :class:`ConstantScorer`, whose
outcome-conditioned and plain likelihoods are equal (hindsight ratio 1: the rescoring part is
switched off, the rest of the estimator is measured). Stateful estimators run once from
``state=None`` (their first iteration) in the termination test; the identical-groups test also
feeds their state back (see there). Pure: no estimator state or randomness is kept here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

import numpy as np

from agentrl.credit.batch import Step, StepBatch, Trajectory, TrajectoryGroup
from agentrl.credit.estimators import (
    Advantages,
    compute_advantages,
    estimator_config,
    get_estimator,
)
from agentrl.credit.graph import build_graph

Variant = Literal["A", "B"]
Outcome = Literal["folded", "separate"]
TOL = 1e-9
"""|E[ĝ]| below this counts as unbiased in variant A."""
C_VALUES: tuple[float, ...] = (-1.0, 0.0, 1.0)
"""The turn rewards c of the test (a per-turn cost, none, a per-turn bonus)."""
P_VALUES: tuple[float, ...] = (0.2, 0.5, 0.8)
"""The probabilities p = π(CONTINUE) of the test."""
DISCOUNTS: tuple[str, ...] = ("gamma", "beta")
"""Config fields that discount later rewards: :func:`undiscounted` sets them to 1."""


class ConstantScorer:
    """A :class:`~agentrl.credit.Scorer` that gives every response log-prob 0, with or without
    an outcome in the context: hindsight ratios are 1, so rescoring changes nothing."""

    def score(self, contexts: Sequence[str], responses: Sequence[str]) -> np.ndarray:
        return np.zeros(len(responses))


def skip_reason(name: str) -> str | None:
    """Why estimator ``name`` cannot be measured on a plain batch (None when it can)."""
    spec = get_estimator(name)
    if spec.critic:
        return f"needs a learned critic ({spec.critic})"
    if spec.driver:
        return f"rolls out with its own driver ({spec.driver})"
    return None


def _advantages(name: str, batch: StepBatch, cfg: Any, state: Any = None) -> Advantages:
    spec = get_estimator(name)
    why = skip_reason(name)
    if why is not None:
        raise ValueError(f"estimator {name!r} cannot be measured here: it {why}")
    cfg = estimator_config(name) if cfg is None else cfg
    graph = build_graph(batch) if spec.needs_graph else None
    scorer = ConstantScorer() if spec.needs_scorer else None
    return compute_advantages(name, batch, cfg, graph=graph, scorer=scorer, state=state)


def _step(anchor: str, action: str, reward: float, rubric: float | None, end: bool) -> Step:
    return Step(
        prompt_ids=[],
        response_ids=[],
        logprobs=[],
        reward=reward,
        terminated=end,
        truncated=False,
        anchor=anchor,
        action=action,
        valid=True,
        response_text=action,
        prompt_text=f"state {anchor}",
        rubric_reward=rubric,
    )


def stop_batch(
    m: int, G: int, c: float, K: float, delta: float, variant: Variant, outcome: Outcome
) -> StepBatch:
    """The batch of one group: m CONTINUE (two-turn) rollouts first, then G − m STOP ones."""
    trajs = []
    for i in range(G):
        T = 2 if i < m else 1
        R = K + (delta if variant == "B" and T == 2 else 0.0) - c * T  # the outcome R_T
        # folded: reward c on every turn, + R_T on the last; separate: rubric c, reward R_T.
        rew = [c] * T if outcome == "folded" else [0.0] * T
        rew[-1] += R
        rubric = c if outcome == "separate" else None
        steps = [_step("s1", "CONTINUE" if T == 2 else "STOP", rew[0], rubric, T == 1)]
        if T == 2:
            steps.append(_step("s2", "END", rew[1], rubric, True))
        trajs.append(Trajectory(steps=steps, won=True, final_obs="done"))
    return StepBatch.from_groups([TrajectoryGroup("stop or continue", 0, trajs)])


def takes_separate_outcome(name: str, cfg: Any = None) -> bool:
    """Whether estimator ``name`` reads the rubric reward, and so can receive the outcome
    separately from the turn rewards: its advantages change when the rubric is removed."""
    batch = stop_batch(1, 3, 0.5, 1.0, 0.5, "B", "separate")
    bare = replace(batch, step_rubric=None)
    return not np.array_equal(_advantages(name, batch, cfg).step, _advantages(name, bare, cfg).step)


def termination_gradient(
    name: str,
    cfg: Any = None,
    variant: Variant = "A",
    c: float = 0.0,
    p: float = 0.5,
    G: int = 8,
    K: float = 1.0,
    delta: float = 0.5,
    outcome: Outcome = "folded",
) -> float:
    """E[ĝ] of estimator ``name`` on the stop/continue MDP (see the module), exactly.

    Args:
        name: a registered estimator (not one with a critic or a driver: :func:`skip_reason`).
        cfg: its config (default: the defaults).
        variant: ``"A"`` (true gradient 0) or ``"B"`` (true gradient p(1−p)Δ).
        c: the reward of every turn taken; p: π(CONTINUE); G: rollouts per group.
        K, delta: the outcome's constant and variant B's bonus Δ for continuing.
        outcome: ``"folded"`` or ``"separate"`` (falls back to folded for an estimator that
            does not read the rubric reward, :func:`takes_separate_outcome`).
    Returns:
        E[ĝ] = Σ_m Binom(m; G, p)·ĝ(m).
    """
    if outcome == "separate" and not takes_separate_outcome(name, cfg):
        outcome = "folded"
    total = 0.0
    for m in range(G + 1):
        batch = stop_batch(m, G, c, K, delta, variant, outcome)
        adv = _advantages(name, batch, cfg).step
        first = adv[batch.step_t == 0]  # (G,) A_{i,1}, trajectories in order
        grad = np.where(np.arange(G) < m, 1.0 - p, -p)
        total += math.comb(G, m) * p**m * (1 - p) ** (G - m) * float(grad @ first) / G
    return total


def undiscounted(name: str) -> dict[str, float]:
    """The overrides that switch off estimator ``name``'s discount (every field of
    :data:`DISCOUNTS` its config has, set to 1); empty when it has none or it defaults to 1.

    With γ < 1 the later turn's rewards count less, so CONTINUE and STOP differ in value even
    in variant A: a discounted objective, not a biased baseline. The termination test is about
    baselines, so it runs with the discount off (the report also shows the default)."""
    fields = get_estimator(name).config_cls.__dataclass_fields__
    return {k: 1.0 for k in DISCOUNTS if k in fields and fields[k].default != 1}


def termination_grid(
    name: str, cfg: Any = None, variant: Variant = "A", outcome: Outcome = "folded"
) -> list[float]:
    """:func:`termination_gradient` at every (c, p) of :data:`C_VALUES` × :data:`P_VALUES`,
    c-major (G = 8, K = 1, Δ = 0.5)."""
    return [
        termination_gradient(name, cfg, variant, c, p, outcome=outcome)
        for c in C_VALUES
        for p in P_VALUES
    ]


def passes(a_values: Sequence[float], b_values: Sequence[float], delta: float = 0.5) -> bool:
    """The verdict: |E[ĝ]| < :data:`TOL` for every variant-A value and sign(E[ĝ]) = sign(Δ)
    for every variant-B value."""
    return all(abs(v) < TOL for v in a_values) and all(
        np.sign(v) == np.sign(delta) for v in b_values
    )


def identical_group_magnitude(name: str, cfg: Any = None, T: int = 4, G: int = 8) -> float:
    """max |A| over a group of G identical rollouts, for a success and a failure.

    Each rollout takes the same action at every turn of a two-state loop (anchors ``s0``,
    ``s1``, ``s0``, … so states are revisited, as when an action does not change the state),
    with reward −0.1 on every turn (a step cost; returns such as 0.6 are not exact binary
    fractions, so rounding noise shows) and +1 more on the last, which ends the episode
    (terminated) as a success (``won``), or not for the failure. A stateful estimator is called
    three times in a row on the same group, carrying its state (the task seen again with the
    same result, so its history agrees with the group); the largest |A| of the three counts.
    """
    out = 0.0
    for won in (True, False):
        steps = [
            _step(f"s{t % 2}", "go", -0.1 + float(won and t == T - 1), None, t == T - 1)
            for t in range(T)
        ]
        trajs = [Trajectory(steps=list(steps), won=won, final_obs="done") for _ in range(G)]
        batch = StepBatch.from_groups([TrajectoryGroup("identical", 0, trajs)])
        state = None
        for _ in range(3 if get_estimator(name).stateful else 1):
            adv = _advantages(name, batch, cfg, state)
            out = max(out, float(np.max(np.abs(adv.step))))
            state = adv.state
    return out
