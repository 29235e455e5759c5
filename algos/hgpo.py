"""HGPO: step advantages from groups of steps that share the same window of recent anchors.

Hierarchy-of-Groups Policy Optimization (He, Feng, Wei, Cheng, Feng, An, arXiv 2602.22817,
ICLR 2026; docs/methods.md#hgpo), written from the authors' public verl-agent code
(``recipe/hgpo/core_hgpo.py``). A step-wise agent's prompt holds the current observation and
the last K turns (``rollout.history_length``). GiGPO groups steps by the current anchor only, so
members of one group may have seen different prompts; HGPO groups at every context depth and
blends the levels.

With G_{i,t} = Σ_{k=t}^{T_i−1} γ^{k−t} r_{i,k} the return-to-go (as GiGPO), the context key of
depth k = 1..K+1 is the window of the trajectory's own last k anchors,
C_k(i,t) = (s_{i,t−k+1}, …, s_{i,t}), defined only for t ≥ k − 1; the level-k group G_k(i,t) is
every step of the task group with the same window (any trajectory, any turn index). k = 1 is
GiGPO's anchor group; the groups are nested, G_{K+1} ⊆ … ⊆ G_1. Per level,

    a_k(i,t) = (G_{i,t} − mean_{G_k} G) / (pstd_{G_k} G + ε)   (``mode="mean_std_norm"``)
    a_k(i,t) =  G_{i,t} − mean_{G_k} G                          (``mode="mean_norm"``)

with the POPULATION std (divisor n, the reference's ``unbiased=False``), and a group of one
member gives a_k = 0. The step's items {(k, a_k)} are then aggregated after dropping every item
with a_k == 0 exactly:

    A_{i,t} = Σ_k w_k a_k,   w_k = (k+1)^α / (Σ_{k'} (k'+1)^α + ε),

the sums running over the kept items only; no item left gives A = 0. Dropping exact zeros
renormalises the weights over the remaining levels, so a level where the step sits exactly at
its group mean (a zero-variance group, a singleton) is ignored rather than counted as "no
advantage". With ``base_group`` the item (0, A^E_{i,t}) (GiGPO's episode advantage of the
step's trajectory, weight 1^α = 1) joins the items before the zero-drop. This aggregate is the
whole advantage: unlike GiGPO there is no separate episode term, so a step whose anchor is
unique in its task group gets exactly 0 unless ``base_group`` is on.

Defaults (the reference's): γ = 0.95, K = ``history_length`` = 2 (the reference's 1.5B ALFWorld
script; its best reported runs use 4), α = 1, ``mean_std_norm``, ε = 1e-6, ``base_group``
off. K must equal the rollout's ``rollout.history_length`` (also 2 by default) for the windows
to match what the policy saw; the estimator cannot see the rollout config, so set both.

Departures from the reference code:

- The invalid-action penalty is part of agentrl's step reward, so it is discounted into the
  returns of earlier steps; the reference subtracts it from the invalid row's own return only.
- The base item uses agentrl's episode return R_i (with every penalty of the trajectory) on
  every row; the reference's row reward subtracts only that row's own penalty. Its statistics
  are over step-rows by default (``episode_stats="step"``, the reference's hard-coded
  ``compute_mean_std_cross_steps=True``); ``"trajectory"`` gives one value per trajectory.
- float64 instead of float32.
- The window key holds anchors only, as in the reference, while agentrl's prompt also shows the
  past actions (``agentrl.rollout.prompting``): two steps with the same anchor window but
  different past actions (e.g. an invalid action that left the state unchanged) share a group,
  so the context match is approximate. Keying the past steps on (anchor, action) would make it
  exact; that variant is a reconstruction and is not implemented.

Shapes: N steps, M trajectories.

Identical groups: identical rollouts that revisit an anchor get nonzero step credit, because
the anchor's group pools visits whose discounted returns-to-go differ, although nothing tells the
rollouts apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.algos._common import divide_or_zero, safe_mean
from agentrl.algos.gigpo import EPISODE_STATS, NORM_MODES, episode_advantage
from agentrl.configuration import check, check_choice
from agentrl.credit import Advantages, discounted_returns, register_estimator
from agentrl.credit.batch import StepBatch


@dataclass(frozen=True)
class HGPOConfig:
    """Options of HGPO (defaults: verl-agent's ``recipe/hgpo``)."""

    gamma: float = 0.95
    """Discount γ of the return-to-go G_{i,t} (verl-agent ``algorithm.gamma``)."""
    history_length: int = 2
    """K: context windows of depth 1..K+1. Set it equal to ``rollout.history_length`` (default
    2), the number of past turns the prompt shows; 0 keeps only GiGPO's anchor groups."""
    alpha: float = 1.0
    """Exponent α of the level weights (k+1)^α (verl-agent ``length_weight_alpha``); 0 weighs
    all levels equally, larger values favour the deeper (more consistent) contexts."""
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_std_norm"
    """``mean_std_norm`` divides each level by its population std + ε, ``mean_norm`` by 1."""
    epsilon: float = 1e-6
    """Added to each level's std and to the sum of the weights."""
    base_group: bool = False
    """Add GiGPO's episode advantage as the item of level 0 (weight 1)."""
    episode_stats: Literal["trajectory", "step"] = "step"
    """Members of the base item's mean/std (only with ``base_group``): one value per ``step``
    row (the reference's code) or one per ``trajectory``."""

    def __post_init__(self) -> None:
        check(0.0 <= self.gamma <= 1.0, "algo.gamma", self.gamma, "in [0, 1]")
        check(
            isinstance(self.history_length, int)
            and not isinstance(self.history_length, bool)
            and self.history_length >= 0,
            "algo.history_length",
            self.history_length,
            "an integer >= 0 (equal to rollout.history_length)",
        )
        check(math.isfinite(self.alpha), "algo.alpha", self.alpha, "a finite number")
        check_choice("algo.mode", self.mode, NORM_MODES)
        check(self.epsilon >= 0, "algo.epsilon", self.epsilon, ">= 0")
        check_choice("algo.episode_stats", self.episode_stats, EPISODE_STATS)


def context_windows(
    step_anchor: np.ndarray, step_traj: np.ndarray, depth: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The context groups of every depth k = 1..depth.

    Args:
        step_anchor: (N,) int — anchor id of each step (ids never match across task groups,
            so neither do windows).
        step_traj: (N,) int — trajectory of each step; steps contiguous, in turn order.
        depth: the deepest window, K + 1 ≥ 1.
    Returns:
        One ``(rows, ids)`` per depth k (index k − 1): ``rows`` (L_k,) int64 are the steps with
        at least k − 1 earlier steps in their trajectory, ``ids`` (L_k,) int64 in [0, L_k) the
        interned window (s_{t−k+1}, …, s_t) of each of them.
    """
    out = []
    for valid, bins, _ in _window_bins(step_anchor, step_traj, depth):
        rows = np.flatnonzero(valid)
        # For k ≥ 2 the steps without a window hold bin 0 (code −1 sorts first), so the
        # windows' bins start at 1 whenever such a step exists.
        out.append((rows, bins[rows] - int(rows.size < valid.size)))
    return out


def _window_bins(
    step_anchor: np.ndarray, step_traj: np.ndarray, depth: int
) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """The context groups of every depth k = 1..depth over all N steps (what
    :func:`context_windows` gives, kept full length so that the estimator needs no gather or
    scatter through ``rows``).

    Returns:
        One ``(valid, bins, n_bins)`` per depth k: ``valid`` (N,) bool — the step has at least
        k − 1 earlier steps in its trajectory (so a window of depth k); ``bins`` (N,) int64 in
        [0, n_bins) — equal for two valid steps exactly when their windows are equal. For
        k = 1 the bins are the anchors; for k ≥ 2 the steps without a window (each
        trajectory's first k − 1) share bin 0, which then holds no valid step.
    """
    step_anchor = np.asarray(step_anchor, dtype=np.int64)
    n = step_anchor.shape[0]
    if n == 0:
        return [(np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64), 0)] * depth
    lengths = np.bincount(step_traj)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    pos = np.arange(n) - starts[step_traj]  # turn index within the trajectory
    bins = step_anchor  # the window of depth 1 is the anchor
    out = [(np.ones(n, dtype=bool), bins, int(bins.max()) + 1)]
    if depth < 2:
        return out
    # The window of depth k is the pair (window of depth k − 1 ending here, the anchor k − 1
    # steps back): one interning of integer pairs per level instead of hashing tuples of
    # length k. Each pair is coded as ONE int64, bin · base + anchor, and interned by sorting:
    # np.unique(pairs, axis=0) sorts a structured view of the rows and took ~2 s per level at
    # 1M steps. The code is monotone in the pair (lexicographic order), so the windows get
    # exactly the ids of the row-wise unique. Bins are < max(N + 1, base); anchor ids so
    # large that the code could overflow int64 are first made dense (in order, so again the
    # same ids).
    anchor = step_anchor
    if anchor.min() < 0 or max(n + 1, int(anchor.max()) + 1) * (int(anchor.max()) + 1) >= 2**63:
        anchor = np.unique(anchor, return_inverse=True)[1].reshape(-1).astype(np.int64)
    base = int(anchor.max()) + 1
    back = np.zeros(n, dtype=np.int64)  # the anchor k − 1 steps back (where pos ≥ k − 1)
    order = None
    for k in range(2, depth + 1):
        valid = pos >= k - 1
        back[k - 1 :] = anchor[: n - (k - 1)]
        # Steps without a window get code −1: one bin of their own, masked out by `valid`.
        bins, n_bins, order = _intern(np.where(valid, bins * base + back, -1), order)
        out.append((valid, bins, n_bins))
    return out


def _intern(code: np.ndarray, hint: np.ndarray | None = None) -> tuple[np.ndarray, int, np.ndarray]:
    """Dense ids of the (L,) int64 ``code`` in sorted order: the same ids as
    ``np.unique(code, return_inverse=True)[1]``, only faster.

    np.unique sorts with quicksort; a stable sort (timsort for int64) is about twice as fast
    here because the codes come in runs: the steps of a task group are contiguous and their
    codes share a range disjoint from the other groups', so timsort merges whole groups.
    ``hint`` is an order that nearly sorts ``code`` (the previous level's: a window's code
    starts with the bin of its shorter window, so in that order only the short runs of one
    bin are out of order), which timsort sorts in half the time again. Ties may end in any
    order: equal codes get the same id wherever they sit.

    Returns:
        (ids, number of distinct codes, the sorting order of ``code``).
    """
    if hint is None:
        order = np.argsort(code, kind="stable")
    else:
        order = hint[np.argsort(code[hint], kind="stable")]
    ordered = code[order]
    first = np.empty(code.shape[0], dtype=bool)  # first of its value in sorted order
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    rank = np.cumsum(first)
    rank -= 1  # the id of each sorted code
    ids = np.empty(code.shape[0], dtype=np.int64)
    ids[order] = rank
    return ids, int(rank[-1]) + 1 if rank.size else 0, order


def _level_advantage(
    values: np.ndarray, bins: np.ndarray, n_bins: int, mode: str, epsilon: float
) -> np.ndarray:
    """(N,) float64 a_k of every step: its value centred on its bin's mean, divided by the
    bin's population std + ε in ``mean_std_norm`` (0 where that is 0).

    The arithmetic of ``centred_by_group(values, bins, n_bins, ddof=0)`` followed by
    ``divide_or_zero(centred, std + epsilon)``, operation for operation, so the result is the
    same to the bit; it only keeps the std per bin and gathers it once, instead of gathering
    mean, std and count to every step and rescaling the std there (a third less time). As
    there, each bin is first shifted by one member's value, so a constant bin (a singleton in
    particular) centres to exactly 0, and its items are dropped like any other zero item.
    """
    ref = np.zeros(n_bins, dtype=np.float64)
    ref[bins] = values
    shifted = values - ref[bins]
    count = np.bincount(bins, minlength=n_bins).astype(np.float64)
    mean = np.bincount(bins, weights=shifted, minlength=n_bins) / np.maximum(count, 1.0)
    centred = shifted - mean[bins]
    if mode == "mean_norm":
        return centred
    dev2 = np.bincount(bins, weights=centred**2, minlength=n_bins)
    std = np.sqrt(dev2 / np.maximum(count - 1.0, 1.0))  # unbiased, as group_mean_std
    std = std * np.sqrt(np.maximum(count - 1.0, 0.0) / np.maximum(count, 1.0))  # → population
    return divide_or_zero(centred, (std + epsilon)[bins])


def hgpo_advantage(
    step_return: np.ndarray,
    step_anchor: np.ndarray,
    step_traj: np.ndarray,
    history_length: int,
    alpha: float,
    mode: str,
    epsilon: float,
    base: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """HGPO advantage per step: the weighted blend of the non-zero level advantages.

    Args:
        step_return: (N,) float — return-to-go G_{i,t}.
        step_anchor: (N,) int — anchor id of each step (unique per task group).
        step_traj: (N,) int — trajectory of each step; steps contiguous, in turn order.
        history_length: K; levels k = 1..K+1.
        alpha: exponent of the weights (k+1)^α.
        mode: ``mean_norm`` or ``mean_std_norm`` (population std).
        base: None, or (N,) float — the level-0 item of each step (weight 1).
    Returns:
        (advantage, items): (N,) float64 A_{i,t}, and (N,) int64 the number of items each step
        kept after the zero-drop (0 ⇒ A = 0).
    """
    step_return = np.asarray(step_return, dtype=np.float64)
    n = step_return.shape[0]
    weighted = np.zeros(n, dtype=np.float64)  # Σ (k+1)^α a_k over kept items
    total = np.zeros(n, dtype=np.float64)  # Σ (k+1)^α over kept items
    items = np.zeros(n, dtype=np.int64)
    if base is not None:
        base = np.asarray(base, dtype=np.float64)
        keep = base != 0.0
        weighted += np.where(keep, base, 0.0)  # weight (0+1)^α = 1 for every α
        total += keep
        items += keep
    levels = _window_bins(step_anchor, step_traj, history_length + 1)
    for k, (valid, bins, n_bins) in enumerate(levels, 1):
        # Every level runs over all N steps: the steps without a window of depth k form one
        # extra bin, whose statistics touch no other bin (each bin's sums run over its own
        # steps in step order, as over `rows` alone), and `valid` drops their items. Adding
        # the 0.0 of a dropped item leaves the sums unchanged, so this is bit-identical to
        # working on the rows of context_windows, without gathering and scattering them.
        a = _level_advantage(step_return, bins, n_bins, mode, epsilon)
        keep = (a != 0.0) & valid
        w = float(k + 1) ** alpha
        weighted += np.where(keep, w * a, 0.0)
        total += w * keep
        items += keep
    # No kept item: 0/ε (or 0/0 with ε = 0) is 0.
    return divide_or_zero(weighted, total + epsilon), items


@register_estimator("hgpo", config=HGPOConfig)
def hgpo(batch: StepBatch, graph: object, cfg: HGPOConfig) -> Advantages:
    """HGPO advantage over context windows of depth 1..K+1: (N,) float64."""
    returns = discounted_returns(batch.step_reward, batch.step_traj, cfg.gamma)
    base = None
    if cfg.base_group:
        traj_len = batch.traj_len if cfg.episode_stats == "step" else None
        episode = episode_advantage(
            batch.traj_return, batch.traj_group, batch.n_groups, cfg.mode, cfg.epsilon, traj_len
        )
        base = episode[batch.step_traj]
    adv, items = hgpo_advantage(
        returns,
        batch.step_anchor,
        batch.step_traj,
        cfg.history_length,
        cfg.alpha,
        cfg.mode,
        cfg.epsilon,
        base,
    )
    return Advantages(
        step=adv,
        metrics={
            "items_mean": safe_mean(items),
            "no_item_frac": safe_mean(items == 0),
        },
    )
