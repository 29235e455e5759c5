"""Policies that cost nothing to run, with exact policy-gradient updates.

A credit estimator is only as good as the learning it produces. Measuring that with a language
model on 2 CPU cores is hopeless (the LLM benchmark cannot separate any two methods); these
policies let the same registered estimators drive learning thousands of times faster, on the
same environments, through the same batches:

- :class:`TabularPolicy`: one logit per (task, anchor, admissible action), the softmax over a
  state's admissible actions. A state first met gets its logits from a *prior* (uniform, or a
  warm start that mixes the environment's demonstration with uniform), so every method of a
  seed starts from the same policy.
- :class:`LinearPolicy`: logits linear in hashed features of (observation text, action), each
  crossed with the action: the bag of its words and, where the text draws a grid (a Sokoban
  room), the cells around each one-of-a-kind symbol (the player) and the direction to the
  nearest cell of every other kind, all relative to that symbol (text without a grid: each
  token with its position). States never seen, such as held-out levels, still get a
  distribution, and what was learned about a neighbourhood carries over to every room that
  has it.

Both are updated by :func:`policy_gradient_step`: the learner's own surrogate
(:func:`agentrl.learn.losses.clipped_surrogate`, aggregated as a mean over steps) on the
policy's log-probabilities. One pass with the behaviour log-probs equal to the current ones is
REINFORCE exactly (the ratio is 1 and the clip inactive); more passes are PPO. The update is
plain gradient ascent with learning rate ``lr``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from agentrl.learn.losses import clipped_surrogate


@dataclass
class Choice:
    """One decision of a cheap policy: where, among what, what it chose and with which
    log-probability (the behaviour policy's)."""

    key: Hashable
    """The state's key: (task, anchor) for the tabular policy."""
    observation: str
    actions: tuple[str, ...]
    index: int
    logp: float


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max()
    e = np.exp(z)
    return e / e.sum()


class TabularPolicy:
    """Logits per state key (``(level, anchor)``) over the state's admissible actions.

    A key first met gets its logits from ``prior()`` when given (initial probabilities over the
    actions, as logits log p; a prior may not put probability 0 on an action), else 0
    (uniform). The prior is asked once per key, so an expensive one (a demonstration) is paid
    once.
    """

    def __init__(self):
        self.table: dict[Hashable, np.ndarray] = {}
        self.cache: dict[Hashable, tuple] = {}
        """What a player derives from a row (its sampling distribution), by key, with the row
        it came from: valid while that row is the table's (rows are replaced, never changed
        in place)."""

    def logits(
        self,
        key: Hashable,
        observation: str,
        actions: Sequence[str],
        prior: Callable[[], np.ndarray] | None = None,
    ) -> np.ndarray:
        row = self.table.get(key)
        if row is None or len(row) != len(actions):
            if prior is None:
                row = np.zeros(len(actions))
            else:
                row = np.log(np.asarray(prior(), dtype=float))
            self.table[key] = row
        return row

    def batch_logits(self, choices: Sequence[Choice]) -> tuple[torch.Tensor, Callable[[], None]]:
        """(N, A_max) logits of ``choices`` as one tensor that requires grad (padding: −inf),
        and the function that applies that tensor's gradient ascent to the table."""
        where: dict[Hashable, int] = {}
        index = [where.setdefault(c.key, len(where)) for c in choices]
        keys = list(where)
        width = max(len(c.actions) for c in choices)
        table = [self.table[key] for key in keys]
        if all(len(row) == width for row in table):
            values = np.array(table, dtype=np.float64).reshape(len(keys), width)
        else:
            values = np.full((len(keys), width), -np.inf)
            for k, row in enumerate(table):
                values[k, : len(row)] = row
        rows = torch.from_numpy(values).requires_grad_(True)

        def apply(lr: float) -> None:
            # Row by row, the arithmetic of ``row - lr * grad`` (padding left out).
            new = values - lr * rows.grad.numpy()
            for k, key in enumerate(keys):
                self.table[key] = new[k, : len(table[k])]

        return rows[torch.tensor(index)], apply

    def state_size(self) -> int:
        return len(self.table)


def _bucket(text: str, buckets: int) -> int:
    return zlib.crc32(text.encode()) % buckets


STEPS = {"n": (-1, 0), "s": (1, 0), "w": (0, -1), "e": (0, 1)}
"""The four grid neighbours, by compass direction (rows grow southwards)."""


def text_grid(observation: str) -> list[list[str]]:
    """The grid an observation draws: the longest run (at least 3) of consecutive lines with
    the same number (at least 3) of whitespace-separated tokens, as rows of tokens; [] when
    there is none. A Sokoban room is one; its legend line is not part of it."""
    best: list[list[str]] = []
    run: list[list[str]] = []
    for line in observation.splitlines():
        tokens = line.split()
        if len(tokens) < 3:
            run = []
            continue
        run = [*run, tokens] if run and len(tokens) == len(run[0]) else [tokens]
        if len(run) > len(best):
            best = run
    return best if len(best) >= 3 else []


def grid_features(grid: Sequence[Sequence[str]], radius: int = 2) -> list[str]:
    """Features of a grid relative to each symbol that occurs once in it (the agent: ``P`` in
    a Sokoban room), so that they mean the same in every room:

    - ``<m>(dr,dc)=<t>``: the token ``t`` at offset (dr, dc) within ``radius`` (``|`` off the
      grid);
    - ``<m>><d>=<t1><t2>``: the next two tokens in direction ``d`` (what a move or a push
      there meets);
    - ``<m>~<t>=(sr,sc)``: the signs of the offset to the nearest ``t`` (Manhattan), for every
      token kind that fills at most a quarter of the grid (boxes and targets, not walls).
    """
    h, w = len(grid), len(grid[0]) if grid else 0
    cells: dict[str, list[tuple[int, int]]] = {}
    for r, row in enumerate(grid):
        for c, t in enumerate(row):
            cells.setdefault(t, []).append((r, c))

    def at(r: int, c: int) -> str:
        return grid[r][c] if 0 <= r < h and 0 <= c < w else "|"

    out: list[str] = []
    for m, where in cells.items():
        if len(where) != 1:
            continue
        (r0, c0) = where[0]
        out += [
            f"{m}({dr},{dc})={at(r0 + dr, c0 + dc)}"
            for dr in range(-radius, radius + 1)
            for dc in range(-radius, radius + 1)
            if dr or dc
        ]
        out += [
            f"{m}>{d}={at(r0 + dr, c0 + dc)}{at(r0 + 2 * dr, c0 + 2 * dc)}"
            for d, (dr, dc) in STEPS.items()
        ]
        for t, spots in cells.items():
            if t != m and len(spots) <= h * w // 4:
                r, c = min(spots, key=lambda p: abs(p[0] - r0) + abs(p[1] - c0))
                out.append(f"{m}~{t}=({(r > r0) - (r < r0)},{(c > c0) - (c < c0)})")
    return out


class LinearPolicy:
    """Logits linear in hashed (feature, action) pairs of the observation text (see the module).

    Features of an observation: a bias, each distinct token (``w=<tok>``), and either the
    :func:`grid_features` of the grid it draws (:func:`text_grid`) or, for text without one,
    each token with its position (``p<i>=<tok>``, up to ``max_positions``). logit(s, a) is the
    sum of the weights of the buckets ``crc32(feature | a) mod buckets``. Weights start at 0
    (uniform).
    """

    def __init__(self, buckets: int = 1 << 16, max_positions: int = 400, radius: int = 2):
        self.buckets, self.max_positions, self.radius = buckets, max_positions, radius
        self.weights = np.zeros(buckets)
        self._features: dict[str, list[str]] = {}
        self._indices: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}

    def features(self, observation: str) -> list[str]:
        cached = self._features.get(observation)
        if cached is None:
            tokens = observation.split()
            cached = ["bias", *(f"w={t}" for t in sorted(set(tokens)))]
            grid = text_grid(observation)
            if grid:
                cached += grid_features(grid, self.radius)
            else:
                cached += [f"p{i}={t}" for i, t in enumerate(tokens[: self.max_positions])]
            if len(self._features) < 200_000:  # a cache, not a leak: observations repeat
                self._features[observation] = cached
        return cached

    def index_matrix(self, observation: str, actions: Sequence[str]) -> np.ndarray:
        """(A, F) the buckets of the F features of ``observation`` crossed with each action."""
        key = (observation, tuple(actions))
        cached = self._indices.get(key)
        if cached is None:
            feats = self.features(observation)
            cached = np.array(
                [[_bucket(f"{f}|{a}", self.buckets) for f in feats] for a in actions],
                dtype=np.int64,
            ).reshape(len(actions), len(feats))
            if len(self._indices) < 200_000:  # hashing is most of a step's cost otherwise
                self._indices[key] = cached
        return cached

    def logits(
        self,
        key: Hashable,
        observation: str,
        actions: Sequence[str],
        prior: Callable[[], np.ndarray] | None = None,
    ) -> np.ndarray:
        """Logits of ``actions`` in ``observation`` (``key`` and ``prior`` are not used: a
        linear policy starts uniform everywhere)."""
        return self.weights[self.index_matrix(observation, actions)].sum(axis=1)

    def batch_logits(self, choices: Sequence[Choice]) -> tuple[torch.Tensor, Callable[[], None]]:
        width = max(len(c.actions) for c in choices)
        weights = torch.from_numpy(self.weights).requires_grad_(True)
        out = torch.full((len(choices), width), -torch.inf, dtype=torch.float64)
        flat, rows, cols = [], [], []
        for r, c in enumerate(choices):
            idx = self.index_matrix(c.observation, c.actions)
            flat.append(idx.ravel())
            rows.append(np.full(idx.size, r))
            cols.append(np.repeat(np.arange(idx.shape[0]), idx.shape[1]))
        flat_t = torch.from_numpy(np.concatenate(flat))
        cells = torch.from_numpy(np.concatenate(rows) * width + np.concatenate(cols))
        sums = torch.zeros(len(choices) * width, dtype=torch.float64).index_add(
            0, cells, weights[flat_t]
        )
        valid = torch.zeros(len(choices) * width, dtype=torch.bool)
        valid[cells] = True
        out = torch.where(valid, sums, out.view(-1)).view(len(choices), width)

        def apply(lr: float) -> None:
            self.weights = self.weights - lr * weights.grad.numpy()

        return out, apply

    def state_size(self) -> int:
        return int(np.count_nonzero(self.weights))


def policy_gradient_step(
    policy,
    choices: Sequence[Choice],
    advantages: np.ndarray,
    lr: float,
    epochs: int = 1,
    clip: float = 0.2,
) -> dict[str, float]:
    """Update ``policy`` on one batch of decisions with their advantages; its metrics.

    Args:
        choices: the N decisions of the batch (behaviour log-probs in ``Choice.logp``).
        advantages: (N,) the estimator's advantage of each decision.
        lr: the step size of gradient ascent on the mean surrogate.
        epochs: passes over the batch; 1 is REINFORCE (ratio 1), more is PPO with ``clip``.
    Loss per decision: :func:`~agentrl.learn.losses.clipped_surrogate` (ε_low = ε_high =
    ``clip``, dual clip 3), averaged over the N decisions.
    """
    adv = torch.as_tensor(np.asarray(advantages, dtype=np.float64))
    old = torch.tensor([c.logp for c in choices], dtype=torch.float64)
    target = torch.tensor([c.index for c in choices])
    clipped = 0.0
    for _ in range(epochs):
        logits, apply = policy.batch_logits(choices)
        logp = torch.log_softmax(logits, -1).gather(1, target[:, None]).squeeze(1)
        loss, mask = clipped_surrogate(torch.exp(logp - old), adv, clip, clip, 3.0)
        loss.mean().backward()
        apply(lr)
        clipped = float(mask.double().mean())
    return {"clipfrac": clipped}
