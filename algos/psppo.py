"""PS-PPO (``algo=psppo``): critic-free PPO with prefix-sampled baselines (docs/methods.md#psppo).

Hwang, Kim (arXiv 2606.29758) [A + R]: K continuations are sampled from intermediate prefixes
of each response and their rewards give the baseline, instead of a value network. Only the
abstract was available; the definition here is our reconstruction **[R]**, as written:

    at a prefix cut c of response i, sample K continuations with rewards R_k; then
    A_{i,≥c} = R_i − mean_k R_k (or a pairwise-win fraction); segments between cuts get their
    own baselines.

So each response i (reward R_i, L_i tokens) is cut at 0 = c_0 < c_1 < … < c_m < L_i, and the
tokens of segment j, [c_j, c_{j+1}), get A_{i,j} = R_i − b_{i,j} with b_{i,j} the mean reward of
the K continuations sampled after the prefix of length c_j. Choices the reconstruction leaves
open, made here **[R]**:

- **Cuts**: ``algo.max_cuts`` cuts drawn uniformly without replacement among the multiples of
  ``algo.chunk_tokens`` in (0, ``algo.max_cut_frac``·L_i] (AC2's chunk boundaries,
  :func:`agentrl.algos._prefix.cut_points`); fewer when the response is short.
- **The first segment** [0, c_1): the continuations of the bare problem are fresh attempts,
  and the other G − 1 responses of the problem already are such attempts, so
  b_{i,0} = mean_{j≠i} R_j (docs/methods.md#rloo) and no extra sampling. With no cut at all a
  response is trained as in RLOO (unscaled leave-one-out); with G = 1 its baseline is 0.
- **Pairwise** (``algo.advantage=pairwise``): A = ½·mean_k sign(R_i − R_k), i.e. the fraction
  of the baseline rewards R_i beats (ties count ½) minus ½.
- **Continuations** only give baselines (their tokens are not trained) unless
  ``algo.train_continuations=true``, when each is trained with the leave-one-out advantage
  against the other rows of its prefix (the other continuations and response i's segment).
- Ungraded attempts (a failed judge) are invalid: advantage 0, left out of every baseline.

Problems per iteration, responses per problem and the token budget are the rollout settings
(``rollout.n_tasks``, ``rollout.group_size``, ``rollout.max_new_tokens``). The batch the driver
hands the trainer has one group per problem: each response is a trajectory whose steps are its
segments (the prefix sits in the prompt, so each step trains its own tokens; the last carries
R_i), each continuation a one-step trajectory whose step shares the anchor of the segment it is
a baseline for, with no tokens to train unless ``train_continuations``. The estimator
(:func:`psppo_advantages`) is therefore a leave-one-out comparison among the valid rows sharing
an anchor, over each row's final reward. Sampling, prefixes and grading reuse AC2's machinery
(:class:`agentrl.algos._prefix.PrefixSampler`); the environment must be single-turn
(``env=proof``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentrl.algos._prefix import PrefixSampler, cut_points
from agentrl.configuration import check, check_choice
from agentrl.credit import Advantages, register_estimator
from agentrl.credit.batch import StepBatch, Trajectory, TrajectoryGroup
from agentrl.env_api import EVAL_SEED_BASE
from agentrl.rollout.sampler import Collected

ADVANTAGES: tuple[str, ...] = ("mean", "pairwise")


@dataclass(frozen=True)
class PSPPOConfig:
    """PS-PPO's settings (``algo.*``); problems, responses and budget are ``rollout.*``."""

    chunk_tokens: int = 8
    """Cuts fall on multiples of this many response tokens."""
    max_cuts: int = 2
    """Intermediate cuts per response (0: no prefix sampling, i.e. RLOO over the group)."""
    continuations: int = 4
    """K: continuations sampled after each cut."""
    max_cut_frac: float = 0.9
    """Cuts lie in (0, max_cut_frac · L] for a response of L tokens."""
    advantage: Literal["mean", "pairwise"] = "mean"
    """``mean``: R_i − mean_k R_k; ``pairwise``: ½·mean_k sign(R_i − R_k)."""
    train_continuations: bool = False
    """Also train the continuations (leave-one-out within their prefix); [R] trains only the
    responses' segments."""

    def __post_init__(self) -> None:
        check(self.chunk_tokens >= 1, "algo.chunk_tokens", self.chunk_tokens, ">= 1")
        check(self.max_cuts >= 0, "algo.max_cuts", self.max_cuts, ">= 0")
        check(self.continuations >= 1, "algo.continuations", self.continuations, ">= 1")
        check(0 < self.max_cut_frac < 1, "algo.max_cut_frac", self.max_cut_frac, "in (0, 1)")
        check_choice("algo.advantage", self.advantage, ADVANTAGES)


def psppo_advantages(
    outcome: np.ndarray, valid: np.ndarray, anchor: np.ndarray, mode: str = "mean"
) -> np.ndarray:
    """Leave-one-out advantage of each row against the valid rows that share its anchor.

    ``mean``: A_r = R_r − mean_{s≠r} R_s; ``pairwise``: A_r = ½·mean_{s≠r} sign(R_r − R_s);
    s ranges over the valid rows with r's anchor (a prefix state). A row without valid others
    gets baseline 0 (A = R_r, or 0 pairwise); invalid rows get 0. O(N log N), vectorised.

    Args:
        outcome: (N,) float — final reward R of the attempt each row belongs to.
        valid: (N,) bool — whether the reward is known (graded).
        anchor: (N,) int >= 0 — prefix-state id of each row (dense ids, as ``step_anchor``).
    Returns:
        (N,) float64; exactly 0 in anchors whose valid rewards are all equal.
    """
    r = np.asarray(outcome, dtype=np.float64)
    valid = np.asarray(valid, dtype=bool)
    a = np.asarray(anchor, dtype=np.int64)
    if not r.shape == valid.shape == a.shape or r.ndim != 1:
        raise ValueError(f"outcome, valid, anchor must be (N,) alike: {r.shape}, {a.shape}")
    check_choice("mode", mode, ADVANTAGES)
    out = np.zeros(r.shape[0])
    if not valid.any():
        return out
    rv, av = (r, a) if valid.all() else (r[valid], a[valid])
    if mode == "mean":
        n_anchors = int(av.max()) + 1
        # Per-anchor quantities stay per anchor (K,) and are gathered once each: a batch has
        # about ten rows per anchor, so this halves the (V,) temporaries.
        count = np.bincount(av, minlength=n_anchors)  # (K,) valid rows of each anchor
        # Centre on one member of each anchor first, so equal rewards give exact zeros.
        first = np.empty(n_anchors)
        first[av[::-1]] = rv[::-1]  # the first valid row's reward of each anchor
        x = rv - first[av]
        total = np.bincount(av, weights=x, minlength=n_anchors)  # (K,)
        others = np.maximum(count - 1.0, 1.0)  # (K,)
        adv = x - (total[av] - x) / others[av]
        alone = count[av] == 1  # no valid other: baseline 0
        adv[alone] = rv[alone]
    else:
        n = np.bincount(av)[av].astype(np.float64)  # (V,) valid rows sharing each row's anchor
        others = np.maximum(n - 1.0, 1.0)
        rank = np.unique(rv, return_inverse=True)[1].reshape(-1)  # dense reward ranks
        key = av * (int(rank.max()) + 1) + rank  # sorts by anchor, then reward
        keys = np.sort(key)
        lo = np.searchsorted(keys, av * (int(rank.max()) + 1), "left")  # anchor's first key
        hi = lo + n.astype(np.int64)
        less = np.searchsorted(keys, key, "left") - lo
        greater = hi - np.searchsorted(keys, key, "right")
        adv = np.where(n > 1, 0.5 * (less - greater) / others, 0.0)
    out[valid] = adv
    return out


@register_estimator(
    "psppo",
    config=PSPPOConfig,
    driver="agentrl.algos.psppo:PSPPODriver",
    group_based=False,
)
def psppo(batch: StepBatch, graph: object, cfg: PSPPOConfig) -> Advantages:
    """(N,) float64: each row's final reward against the other rows of its prefix state."""
    outcome = batch.traj_return[batch.step_traj]
    adv = psppo_advantages(outcome, batch.step_valid, batch.step_anchor, cfg.advantage)
    return Advantages(step=adv, metrics={})


class PSPPODriver(PrefixSampler):
    """Responses, cuts and continuations for PS-PPO (see the module docstring).

    The trainer calls ``collect(rng)`` in place of the episode rollout; PS-PPO keeps nothing
    across iterations, so ``after_update`` and the checkpoint state are empty.
    """

    def __init__(self, run_cfg, model, tokenizer, backend):
        super().__init__(run_cfg, tokenizer, backend)
        self.cfg: PSPPOConfig = run_cfg.algo

    def cuts(self, length: int, rng: np.random.Generator) -> list[int]:
        """Up to ``max_cuts`` cut positions of a response of ``length`` tokens, sorted."""
        cands = [c for c in cut_points(length, self.cfg.chunk_tokens, self.cfg.max_cut_frac) if c]
        if len(cands) > self.cfg.max_cuts:
            pick = rng.choice(len(cands), size=self.cfg.max_cuts, replace=False)
            cands = [cands[int(i)] for i in sorted(pick)]
        return cands

    def collect(self, rng: np.random.Generator) -> Collected:
        cfg, rc = self.cfg, self.rc
        self.decode_tokens = 0
        budget, g_size, k_size = rc.max_new_tokens, rc.group_size, cfg.continuations
        seeds = [int(s) for s in rng.integers(0, EVAL_SEED_BASE - 1, size=rc.n_tasks)]
        # 1. G responses per problem, graded.
        owner = [s for s in seeds for _ in range(g_size)]
        gens = self.generate([self.problem(s)[1] for s in owner], [budget] * len(owner))
        graded = [self.grade_info(s, gen.text) for s, gen in zip(owner, gens)]
        # 2. Cuts of each response; K continuations after each.
        cuts = [self.cuts(len(gen.token_ids), rng) for gen in gens]
        jobs = [(r, c) for r, cs in enumerate(cuts) for c in cs for _ in range(k_size)]
        prompts = [self.problem(owner[r])[1] + list(gens[r].token_ids[:c]) for r, c in jobs]
        conts = self.generate(prompts, [budget - c for _, c in jobs])
        cont_graded = [
            self.grade_info(owner[r], self.decode(list(gens[r].token_ids[:c]) + cont.token_ids))
            for (r, c), cont in zip(jobs, conts)
        ]
        # 3. One group per problem: responses (steps = segments), then continuations.
        groups = {s: TrajectoryGroup(task=self.problem(s)[0], seed=s) for s in seeds}
        for r, (gen, (reward, info)) in enumerate(zip(gens, graded)):
            s, ids, lps = owner[r], list(gen.token_ids), list(gen.logprobs)
            bounds = [0, *cuts[r], len(ids)]
            traj = _trajectory(reward, info)
            for j in range(len(bounds) - 1):
                c, end = bounds[j], bounds[j + 1]
                traj.steps.append(
                    self.continuation_step(
                        s,
                        ids[:c],
                        ids[c:end],
                        lps[c:end],
                        reward,
                        anchor=(s, r, c) if c else (s, 0),
                        terminated=end == len(ids),
                    )
                )
            groups[s].trajectories.append(traj)
        for (r, c), cont, (reward, info) in zip(jobs, conts, cont_graded):
            s, prefix = owner[r], list(gens[r].token_ids[:c])
            train = cfg.train_continuations
            step = self.continuation_step(
                s,
                prefix,
                cont.token_ids if train else [],
                cont.logprobs if train else [],
                reward,
                anchor=(s, r, c),
                text=cont.text,
            )
            groups[s].trajectories.append(_trajectory(reward, info, [step]))
        rewards = [r for r, _ in graded if r is not None]
        cont_rewards = [r for r, _ in cont_graded if r is not None]
        metrics = {
            "psppo/response_reward": float(np.mean(rewards)) if rewards else 0.0,
            "psppo/response_success": float(np.mean([bool(i.get("won")) for _, i in graded])),
            "psppo/cuts_per_response": float(np.mean([len(c) for c in cuts])) if cuts else 0.0,
            "psppo/continuations": float(len(jobs)),
            "psppo/continuation_reward": float(np.mean(cont_rewards)) if cont_rewards else 0.0,
        }
        # Decoding work: the responses and every continuation sampled after a cut.
        return Collected(list(groups.values()), None, float(self.decode_tokens), metrics)

    def after_update(self, rng: np.random.Generator) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def _trajectory(reward: float | None, info: dict, steps: list | None = None) -> Trajectory:
    """A trajectory with the env's verdict, score and task type of its graded attempt."""
    score = info.get("score") if reward is not None else None
    return Trajectory(
        steps=steps or [],
        won=reward is not None and bool(info.get("won")),
        task_type=info.get("task_type"),
        score=float(score) if score is not None else None,
    )
