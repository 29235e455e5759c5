"""GiGPO: an episode advantage plus a step advantage over steps that share an anchor state.

A_{i,t} = A^E(τ_i) + ω·A^S(i,t) (Feng et al. 2025, Eq. 8; docs/methods.md#gigpo). The episode
term is A^E(τ_i) = (R_i − mean_j R_j)/F_norm over the G trajectories of the task group, with
R_i = Σ_{t=0}^{T_i−1} r_{i,t}. The step term is A^S(i,t) = (G_{i,t} − mean_{G^S} G)/F_norm(G^S),
where G_{i,t} = Σ_{k=t}^{T_i−1} γ^{k−t} r_{i,k} is the discounted return-to-go (reset at each
trajectory's end, no bootstrap after truncation) and G^S is the set of steps of the same group
whose anchor equals s_{i,t} (``StepBatch.step_anchor`` ids never match across groups). F_norm is
1 for ``mode="mean_norm"`` and the unbiased std + ε for ``"mean_std_norm"`` (our default; the
verl-agent function default is ``mean_norm``, and 10 of verl-agent's 14 example scripts use
``mean_norm``, so ``algo.mode=mean_norm`` matches most of its published runs). Edge cases
follow verl-agent: a group with one member uses mean 0 and std 1 (A^E = R_i, or R_i/(1 + ε)),
a singleton anchor group gives A^S = 0, and an all-equal group gives exactly 0.

Episode statistics (``episode_stats``). ``"trajectory"`` (our default) gives the episode mean
and std ONE VALUE PER TRAJECTORY, as the paper's Eq. 3 is written and as verl-agent did before
its 2025-06 change. verl-agent's shipped code since that change computes them with one value per
step-row (``episode_norm_reward(compute_mean_std_cross_steps=True)``, its default): every step
of trajectory i contributes R_i once, so the mean is Σ_i T_i R_i / Σ_i T_i, a 50-step failure
weighs 50 times as much as a 3-step success, and the baseline drifts toward the long (usually
failing, time-limited) trajectories; a group is a singleton there only if it has a single step
in all (one trajectory of several steps has equal rows, so A^E = 0). ``"step"`` reproduces
verl-agent's shipped behaviour exactly. (docs/methods.md#gigpo summarises this history; some
accounts of it state it the other way round.)

Revisits of an anchor within one trajectory are separate group members (earlier visits have
smaller discounted returns, so loops are penalised). Optional ``similarity`` clustering merges
anchors of one group whose ``str()`` texts match by ``difflib.SequenceMatcher`` ratio (greedy,
first matching representative wins, as verl-agent's ``build_step_group``); it needs
``StepBatch.anchor_keys``. Shapes: N steps, M trajectories.

Identical groups: when all G rollouts of a group are the same action sequence with the same
rewards, nothing tells them apart, yet the step term is not 0 if an anchor is revisited within
the rollout (earlier visits have smaller discounted returns-to-go), so the same action in the
same state gets credit of both signs. ``zero_identical_groups=true`` sets the step term to 0 in
such groups (off by default, as in the reference code).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.algos._common import centred_by_group, divide_or_zero, identical_groups, safe_std
from agentrl.configuration import check, check_choice
from agentrl.credit import Advantages, discounted_returns, register_estimator
from agentrl.credit.batch import StepBatch

NormMode = Literal["mean_norm", "mean_std_norm"]
NORM_MODES: tuple[str, ...] = ("mean_norm", "mean_std_norm")
EpisodeStats = Literal["trajectory", "step"]
EPISODE_STATS: tuple[str, ...] = ("trajectory", "step")


@dataclass(frozen=True)
class GiGPOConfig:
    """Options of GiGPO."""

    gamma: float = 0.95
    """Discount γ of the step return-to-go G_{i,t} (verl-agent ``algorithm.gamma``)."""
    omega: float = 1.0
    """Weight ω of the step advantage A^S (verl-agent ``gigpo.step_advantage_w``)."""
    mode: NormMode = "mean_std_norm"
    """F_norm of both levels: ``mean_std_norm`` divides by std + ε, ``mean_norm`` by 1."""
    epsilon: float = 1e-6
    """Added to the std in ``mean_std_norm`` mode."""
    similarity: float = 0.0
    """0 groups exactly equal anchors; in (0, 1] clusters anchor texts with ratio ≥ this."""
    episode_stats: EpisodeStats = "trajectory"
    """Members of the episode mean/std: one value per ``trajectory`` (the paper's Eq. 3) or one
    per ``step``-row (verl-agent's shipped code, ``compute_mean_std_cross_steps=True``)."""
    zero_identical_groups: bool = False
    """Give the step term 0 in a task group whose rollouts are all identical (same anchors,
    actions and rewards step by step); off by default, as in the reference code."""

    def __post_init__(self) -> None:
        check_gigpo_fields(self.gamma, self.mode, self.epsilon, self.similarity)
        check(self.omega >= 0, "algo.omega", self.omega, ">= 0")
        check_choice("algo.episode_stats", self.episode_stats, EPISODE_STATS)


def check_gigpo_fields(gamma: float, mode: str, epsilon: float, similarity: float) -> None:
    """Validate the fields GiGPO shares with estimators built on it (GACA)."""
    check(0.0 <= gamma <= 1.0, "algo.gamma", gamma, "in [0, 1]")
    check_choice("algo.mode", mode, NORM_MODES)
    check(epsilon >= 0, "algo.epsilon", epsilon, ">= 0")
    check(
        0.0 <= similarity <= 1.0,
        "algo.similarity",
        similarity,
        "in [0, 1] (0 = exact anchor match; e.g. 0.95 clusters near-identical texts)",
    )


def episode_advantage(
    traj_return: np.ndarray,
    traj_group: np.ndarray,
    n_groups: int,
    mode: str,
    epsilon: float,
    traj_len: np.ndarray | None = None,
) -> np.ndarray:
    """A^E per trajectory (Eq. 3).

    Args:
        traj_return: (M,) float — undiscounted return R_i of each trajectory.
        traj_group: (M,) int in [0, n_groups) — task group of each trajectory.
        mode: ``mean_norm`` or ``mean_std_norm``.
        traj_len: None for one value per trajectory in the group statistics; (M,) int T_i for
            one value per step-row (verl-agent's ``compute_mean_std_cross_steps=True``): R_i
            counts T_i times, mean = Σ T_i R_i / Σ T_i, unbiased std over the Σ T_i rows.
    Returns:
        (M,) float64. A group of one member (one trajectory, or one step-row) uses mean 0 and
        std 1. With ``traj_len``, trajectories without steps (no rows) get their uncentred R_i.
    """
    traj_return = np.asarray(traj_return, dtype=np.float64)
    if traj_len is None:
        centred, std, count = centred_by_group(traj_return, traj_group, n_groups)
    else:
        m = traj_return.shape[0]
        rows = np.repeat(np.arange(m), traj_len)  # (Σ T_i,) trajectory of each step-row
        row_c, row_std, row_count = centred_by_group(traj_return[rows], traj_group[rows], n_groups)
        # All rows of a trajectory carry the same R_i, hence the same centred value.
        centred, std, count = np.zeros(m), np.ones(m), np.zeros(m)
        centred[rows], std[rows], count[rows] = row_c, row_std, row_count
    single = count <= 1
    centred = np.where(single, traj_return, centred)
    if mode == "mean_norm":
        return centred
    return divide_or_zero(centred, np.where(single, 1.0, std) + epsilon)


def step_advantage(
    step_return: np.ndarray, step_anchor: np.ndarray, n_anchors: int, mode: str, epsilon: float
) -> np.ndarray:
    """A^S per step: the return-to-go against the other visits of the same anchor (Eq. 7).

    Args:
        step_return: (N,) float — discounted return-to-go G_{i,t}.
        step_anchor: (N,) int in [0, n_anchors) — anchor group of each step (unique per task
            group; every visit, including revisits within one trajectory, is a member).
        mode: ``mean_norm`` or ``mean_std_norm``.
    Returns:
        (N,) float64; 0 for singleton anchor groups and all-equal anchor groups.
    """
    centred, std, count = centred_by_group(step_return, step_anchor, n_anchors)
    if mode == "mean_norm":
        return centred
    # A singleton's centred value is exactly 0; std 1 (as verl-agent) just avoids 0/ε.
    return divide_or_zero(centred, np.where(count <= 1, 1.0, std) + epsilon)


def cluster_anchors(keys: Sequence[str], threshold: float) -> np.ndarray:
    """Greedy similarity clustering of anchor texts (verl-agent ``build_step_group``).

    Each key, in order, joins the first cluster whose representative (its first member) has
    ``difflib.SequenceMatcher(None, key, rep).ratio() >= threshold``; otherwise it starts a
    new cluster. Equal keys always share a cluster.

    Args:
        keys: (K,) anchor texts of one task group, in first-visit order.
        threshold: similarity in (0, 1].
    Returns:
        (K,) int64 cluster index of each key, in [0, number of clusters).
    """
    # One matcher per representative, with the representative as sequence b: difflib caches
    # its analysis of b, so each comparison only swaps in sequence a (the new key).
    matchers: list[difflib.SequenceMatcher] = []
    seen: dict[str, int] = {}
    out = np.empty(len(keys), dtype=np.int64)
    for k, key in enumerate(keys):
        if key in seen:  # distinct anchors may share a text (str of different keys)
            out[k] = seen[key]
            continue
        for c, matcher in enumerate(matchers):
            matcher.set_seq1(key)
            # The quick ratios are upper bounds of ratio(): cheap rejections, same result.
            if (
                matcher.real_quick_ratio() >= threshold
                and matcher.quick_ratio() >= threshold
                and matcher.ratio() >= threshold
            ):
                out[k] = c
                break
        else:
            out[k] = len(matchers)
            matchers.append(difflib.SequenceMatcher(None, "", key))
        seen[key] = int(out[k])
    return out


def anchor_groups(batch: StepBatch, similarity: float) -> tuple[np.ndarray, int]:
    """The anchor group of each step: the anchor id itself, or its similarity cluster.

    Args:
        batch: the step batch; ``batch.anchor_keys`` (the original anchor of each anchor id)
            is needed when ``similarity > 0``.
        similarity: 0 for exact anchors, else the clustering threshold in (0, 1].
    Returns:
        ((N,) int64 ids, number of ids). Clusters never span task groups.
    """
    step_anchor = np.asarray(batch.step_anchor, dtype=np.int64)
    n_anchor = int(step_anchor.max()) + 1 if step_anchor.size else 0
    if similarity <= 0.0 or step_anchor.size == 0:
        return step_anchor, n_anchor
    keys = getattr(batch, "anchor_keys", None)
    if keys is None:
        raise ValueError(
            f"algo.similarity={similarity} clusters anchor texts, but this StepBatch has no "
            "anchor_keys (build it with StepBatch.from_groups, or set algo.similarity=0)"
        )
    if len(keys) < n_anchor:
        raise ValueError(f"batch.anchor_keys has {len(keys)} entries, anchor ids go to {n_anchor}")
    # Group of each anchor id that occurs (ids are unique per task group).
    anchor_group = np.full(n_anchor, -1, dtype=np.int64)
    anchor_group[step_anchor] = batch.traj_group[batch.step_traj]
    present = np.flatnonzero(anchor_group >= 0)  # ascending id = first-visit order
    present = present[np.argsort(anchor_group[present], kind="stable")]
    splits = np.flatnonzero(np.diff(anchor_group[present])) + 1
    cluster_of = np.zeros(n_anchor, dtype=np.int64)
    offset = 0
    # One Python pass per task group; SequenceMatcher is the cost, and the option is off by
    # default.
    for ids in np.split(present, splits):
        local = cluster_anchors([str(keys[a]) for a in ids], similarity)
        cluster_of[ids] = offset + local
        offset += int(local.max()) + 1
    return cluster_of[step_anchor], offset


def gigpo_components(
    batch: StepBatch,
    gamma: float,
    mode: str,
    epsilon: float,
    similarity: float,
    episode_stats: str = "trajectory",
    zero_identical: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The two GiGPO advantages of a batch, before weighting.

    ``episode_stats`` is ``"trajectory"`` or ``"step"`` (see :class:`GiGPOConfig`);
    ``zero_identical`` gives A^S = 0 in groups of identical rollouts
    (:func:`agentrl.algos._common.identical_groups`).

    Returns:
        (episode, step): (M,) float64 A^E per trajectory and (N,) float64 A^S per step.
    """
    traj_len = batch.traj_len if episode_stats == "step" else None
    episode = episode_advantage(
        batch.traj_return, batch.traj_group, batch.n_groups, mode, epsilon, traj_len
    )
    returns = discounted_returns(batch.step_reward, batch.step_traj, gamma)
    groups, n_anchor = anchor_groups(batch, similarity)
    step = step_advantage(returns, groups, n_anchor, mode, epsilon)
    if zero_identical:
        step = np.where(identical_groups(batch)[batch.step_traj], 0.0, step)
    return episode, step


@register_estimator("gigpo", config=GiGPOConfig)
def gigpo(batch: StepBatch, graph: object, cfg: GiGPOConfig) -> Advantages:
    """GiGPO advantage A^E + ω·A^S: (N,) float64."""
    episode, step = gigpo_components(
        batch,
        cfg.gamma,
        cfg.mode,
        cfg.epsilon,
        cfg.similarity,
        cfg.episode_stats,
        cfg.zero_identical_groups,
    )
    return Advantages(
        step=episode[batch.step_traj] + cfg.omega * step,
        metrics={"step_adv_std": safe_std(step), "episode_adv_std": safe_std(episode)},
    )
