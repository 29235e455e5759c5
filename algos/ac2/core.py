"""AC2: actor-critic over action chunks with a critic that shares the policy's weights.

docs/methods.md#ac2 (Wen, Bailey, Mahankali, Ma; repo ``richardxd/AC2``). A *state* is a problem
plus a token prefix of an earlier attempt; an *action chunk* is at most ``chunk_tokens`` new tokens
continuing it. The critic is the policy model itself, asked a value prompt ("how much rubric
credit will this attempt earn if continued?") and answering on the grid {0, 0.1, …, 1}.

Per training iteration (:class:`AC2Driver`):

1. **Refill**: ``n_refill`` fresh problems are rolled out once (full budget) and pushed into a
   FIFO :class:`ReplayBuffer`; these rollouts are not trained on.
2. **Batch**: ``n_batch`` prefixes: a stored trajectory drawn uniformly over distinct problems,
   cut at a multiple of ``chunk_tokens`` in ``[0, 0.9 L]`` (:func:`cut_points`).
3. **Continuations**: ``group_size`` per prefix. A problem that is not *ready* is continued to
   the end of the token budget and scored by the grader; a ready one gets a chunk, whose
   endpoint value is the critic's estimate, or the grader's reward when the chunk finishes the
   attempt. A fraction ``audit_frac`` of ready prefixes is *audited* with full continuations.
4. **Advantage** (:func:`ac2_advantages`, registered as ``algo=ac2``): endpoint value minus the
   group mean over valid rows (Dr.GRPO, no std), on the new tokens only: the prefix is part of
   the prompt, so the learner never trains on it. A group of one has mean 0 (verl's GRPO).
5. **Actor**: the shared PPO learner.
6. **Critic**: cross-entropy on the grid-rounded mean of each fully continued group's rewards
   (at least ``critic_min_valid`` graded rewards), with and without the reference solution in
   the prompt; FIFO buffer of pairs; its own AdamW, gradient clip and LR ladder
   (:class:`LRLadder`). Here the critic update runs after the actor update, not between its two
   mini-batches as in the paper (the shared learner runs its mini-batches in one call).
7. **Readiness** (:class:`Readiness`): global critic error over the last 5 steps below
   ``tau_global``, the problem's own latest error below ``tau_local``, a nonzero prediction and
   a reference solution (an attempt with ≥ 6/7 points) in the bank; once ready, always ready.

The driver grades through the environment (``env.reset(seed)`` then ``env.step(text)``), so it
works with any single-turn environment whose reward is points / 7 — ``env=proof`` here.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# cut_points lives with the prefix machinery AC2 shares with PS-PPO (also importable from here).
from agentrl.algos._prefix import cut_points
from agentrl.configuration import check, check_choice

GRID: tuple[float, ...] = tuple(round(0.1 * k, 1) for k in range(11))
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")


@dataclass(frozen=True)
class AC2Config:
    """Every AC2 setting (``algo.*``); paper values in brackets, defaults sized for CPU tests."""

    chunk_tokens: int = 16
    """b: new tokens per action chunk [10,000]."""
    budget_tokens: int = 48
    """Total response budget of an attempt [50,000]."""
    n_refill: int = 8
    """Fresh problems rolled out once per iteration into the buffer [192]."""
    n_batch: int = 8
    """Prefixes per iteration [192]."""
    group_size: int = 4
    """g: continuations per prefix [16]."""
    buffer_capacity: int = 64
    """FIFO replay buffer of trajectories [256]."""
    max_cut_frac: float = 0.9
    """Prefixes are cut at chunk multiples in [0, max_cut_frac · L]."""
    audit_frac: float = 0.25
    """α: share of ready prefixes continued fully (audited) [1/4]."""
    tau_global: float = 0.20
    """Readiness: mean critic error over the last ``error_window`` steps below this."""
    tau_local: float = 0.18
    """Readiness: the problem's own latest critic error below this."""
    error_window: int = 5
    reference_points: float = 6.0
    """An attempt with at least these points (of 7) banks a reference solution."""
    bank_given_reference: bool = False
    """Also bank the task's own reference solution (if the environment has one)."""
    critic_min_valid: int = 2
    """Graded rewards a group needs to become a critic target [8]."""
    critic_buffer: int = 256
    """FIFO critic buffer of (prompt, target) pairs [1,920]."""
    critic_pairs: int = 32
    """Pairs per critic update [768]."""
    critic_lr: float = 2 * math.sqrt(2) * 1e-4
    """Start of the critic LR ladder [2√2e-6 for a 4B model]."""
    critic_lr_floor: float = 5 * math.sqrt(2) * 1e-5
    critic_ladder_ratio: float = math.sqrt(2)
    """The critic LR halves after ``critic_ladder_patience`` steps with ‖ΔQ‖ / ‖ΔPPO‖ above
    this (the critic moving the shared weights more than the actor)."""
    critic_ladder_patience: int = 2
    critic_grad_clip: float = 0.2
    critic_value_tokens: int = 4
    """Greedy tokens the critic may answer with."""
    critic: str = "prompt"
    """``prompt``: the policy answers the value prompt in text (the paper); ``head``: a linear
    head over the policy's last hidden state at the end of the value prompt classifies the 11
    grid values (never invalid; trained with the same cross-entropy target)."""

    def __post_init__(self) -> None:
        for name in ("chunk_tokens", "budget_tokens", "n_refill", "n_batch", "group_size"):
            check(getattr(self, name) >= 1, f"algo.{name}", getattr(self, name), ">= 1")
        check(
            self.budget_tokens >= self.chunk_tokens,
            "algo.budget_tokens",
            self.budget_tokens,
            ">= algo.chunk_tokens",
        )
        check(0 <= self.max_cut_frac < 1, "algo.max_cut_frac", self.max_cut_frac, "in [0, 1)")
        check(0 <= self.audit_frac <= 1, "algo.audit_frac", self.audit_frac, "in [0, 1]")
        check(self.critic_lr > 0, "algo.critic_lr", self.critic_lr, "> 0")
        check(self.error_window >= 1, "algo.error_window", self.error_window, ">= 1")
        check_choice("algo.critic", self.critic, ("prompt", "head"))


# -- pure pieces -------------------------------------------------------------------------------


def parse_value(text: str) -> float | None:
    """The critic's answer on the grid {0, 0.1, …, 1}, or None (invalid).

    The first whitespace-separated word must be a plain decimal number equal to a grid value
    ("0.3", "0.30", ".3", "1", "1.0"); off-grid numbers ("0.35", "2", "-0.1") and anything else
    are invalid, never rounded.
    """
    words = text.strip().split()
    if not words or not _NUMBER.match(words[0]):
        return None
    value = float(words[0])
    for g in GRID:
        if abs(value - g) < 1e-9:
            return g
    return None


def grid_round(x: float) -> float:
    """The grid value nearest to ``x`` (clipped to [0, 1])."""
    return round(min(1.0, max(0.0, round(float(x) * 10) / 10)), 1)


def ac2_advantages(values: np.ndarray, valid: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Â_i = v_i − mean of the valid v_j in i's group; invalid rows get 0.

    Vectorised over rows: per-group sums and counts of the valid rows by ``np.bincount``, so the
    cost is O(N) (plus a sort when the group ids are not small non-negative integers), not one
    pass over the batch per group.

    Args:
        values: (N,) float — endpoint value of each continuation (critic estimate, or the true
            reward when the continuation finished). Invalid rows may hold anything (NaN too).
        valid: (N,) bool — whether the value is usable (an off-grid critic answer is not).
        group: (N,) int — prefix group of each continuation (any integers).
    Returns:
        (N,) float64. A group with a single valid row has mean 0 (verl's GRPO convention); a
        group without valid rows contributes nothing.
    """
    values = np.asarray(values, dtype=np.float64)
    valid = np.asarray(valid, dtype=bool)
    group = np.asarray(group, dtype=np.int64)
    if not values.shape == valid.shape == group.shape or values.ndim != 1:
        raise ValueError(
            f"values, valid and group must be (N,) alike, got {values.shape}, {valid.shape}, "
            f"{group.shape}"
        )
    if values.size == 0:
        return np.zeros(0)
    if group.min() >= 0 and group.max() < 2 * group.size + 1024:
        ids = group  # already usable as bincount bins (the trainer's group indices are)
    else:
        ids = np.unique(group, return_inverse=True)[1].reshape(-1)
    v = np.where(valid, values, 0.0)  # (N,) invalid rows carry no weight, whatever they hold
    count = np.bincount(ids, weights=valid.astype(np.float64))  # (n_groups,) valid rows
    total = np.bincount(ids, weights=v)  # (n_groups,)
    mean = np.where(count > 1, total / np.maximum(count, 1.0), 0.0)  # singleton: mean 0
    return np.where(valid, v - mean[ids], 0.0)


class LRLadder:
    """The critic LR: halves after ``patience`` consecutive steps whose ratio exceeds
    ``threshold``, never below ``floor``."""

    def __init__(self, lr: float, floor: float, threshold: float, patience: int):
        self.lr, self.floor, self.threshold, self.patience = lr, floor, threshold, patience
        self.streak = 0

    def step(self, ratio: float) -> float:
        self.streak = self.streak + 1 if ratio > self.threshold else 0
        if self.streak >= self.patience:
            self.lr = max(self.floor, self.lr / 2)
            self.streak = 0
        return self.lr

    def state_dict(self) -> dict:
        return {"lr": self.lr, "streak": self.streak}

    def load_state_dict(self, state: dict) -> None:
        self.lr, self.streak = state["lr"], state["streak"]


@dataclass
class Readiness:
    """Per-problem readiness with one-way transitions (see the module docstring, step 7)."""

    tau_global: float = 0.20
    tau_local: float = 0.18
    window: int = 5
    global_errors: deque = field(default_factory=deque)
    local_error: dict = field(default_factory=dict)
    last_pred: dict = field(default_factory=dict)
    has_reference: set = field(default_factory=set)
    ready: set = field(default_factory=set)

    def record_step(self, errors: dict[Any, float], preds: dict[Any, float]) -> None:
        """One training step's critic errors (|prediction − target|) and predictions."""
        if errors:
            self.global_errors.append(float(np.mean(list(errors.values()))))
            while len(self.global_errors) > self.window:
                self.global_errors.popleft()
        self.local_error.update(errors)
        self.last_pred.update(preds)

    def global_error(self) -> float:
        return float(np.mean(self.global_errors)) if self.global_errors else math.inf

    def bank_reference(self, problem: Any) -> None:
        self.has_reference.add(problem)

    def is_ready(self, problem: Any) -> bool:
        """Ready now (and from now on) if every condition holds."""
        if problem in self.ready:
            return True
        ok = (
            self.global_error() < self.tau_global
            and self.local_error.get(problem, math.inf) < self.tau_local
            and self.last_pred.get(problem, 0.0) > 0
            and problem in self.has_reference
        )
        if ok:
            self.ready.add(problem)
        return ok

    def state_dict(self) -> dict:
        return {
            "global_errors": list(self.global_errors),
            "local_error": dict(self.local_error),
            "last_pred": dict(self.last_pred),
            "has_reference": set(self.has_reference),
            "ready": set(self.ready),
        }

    def load_state_dict(self, state: dict) -> None:
        self.global_errors = deque(state["global_errors"])
        self.local_error = dict(state["local_error"])
        self.last_pred = dict(state["last_pred"])
        self.has_reference = set(state["has_reference"])
        self.ready = set(state["ready"])


@dataclass
class Attempt:
    """A stored trajectory: the problem (its env seed) and the response tokens."""

    problem: int
    response_ids: list[int]
    reward: float


class ReplayBuffer:
    """FIFO buffer of attempts; prefixes are drawn uniformly over distinct problems."""

    def __init__(self, capacity: int):
        self.items: deque[Attempt] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self.items)

    def push(self, attempt: Attempt) -> None:
        self.items.append(attempt)

    def sample_prefixes(
        self, rng: np.random.Generator, n: int, chunk: int, max_frac: float
    ) -> list[tuple[Attempt, int]]:
        """``n`` (attempt, cut) pairs: a problem uniformly among the distinct problems held,
        one of its attempts uniformly, a cut uniformly among :func:`cut_points`."""
        by_problem: dict[int, list[Attempt]] = {}
        for a in self.items:
            by_problem.setdefault(a.problem, []).append(a)
        problems = sorted(by_problem)
        out = []
        for _ in range(n):
            attempts = by_problem[problems[int(rng.integers(len(problems)))]]
            a = attempts[int(rng.integers(len(attempts)))]
            cuts = cut_points(len(a.response_ids), chunk, max_frac)
            out.append((a, cuts[int(rng.integers(len(cuts)))]))
        return out

    def state_dict(self) -> dict:
        return {"items": [(a.problem, list(a.response_ids), a.reward) for a in self.items]}

    def load_state_dict(self, state: dict) -> None:
        self.items.clear()
        for p, ids, r in state["items"]:
            self.items.append(Attempt(p, ids, r))


def value_prompt(problem: str, attempt: str, reference: str | None) -> str:
    """The critic's question (docs/methods.md#ac2), with or without a reference solution."""
    parts = [
        f"Problem:\n{problem.strip()}",
        f"Partial attempt:\n{attempt.strip() or '(nothing yet)'}",
        "Estimate how much rubric credit this attempt will earn, as a fraction of full marks, "
        "if it is continued to completion within its remaining token budget.",
    ]
    if reference:
        parts.append(f"For reference, a correct solution:\n{reference.strip()}")
    parts.append("Answer with one of 0, 0.1, ..., 1.\nQ value: ")
    return "\n".join(parts)


def decode_flops(n_params: int, tokens: int) -> float:
    """Decoding FLOPs as AC2 counts them: 2 × parameters × generated tokens."""
    return 2.0 * n_params * tokens


def group_targets(rewards: Sequence[Sequence[float | None]], min_valid: int) -> list[float | None]:
    """Critic target per group: grid-rounded mean of its graded rewards, or None when fewer
    than ``min_valid`` rewards were graded."""
    out: list[float | None] = []
    for rs in rewards:
        vals = [r for r in rs if r is not None]
        out.append(grid_round(float(np.mean(vals))) if len(vals) >= min_valid else None)
    return out
