"""The Sokoban text environment: push every box onto a target on a small generated grid.

Each episode draws a fresh solvable level from :func:`~agentrl.envs.sokoban.generator.
generate_level` with the env's own ``np_random``. The observation is the grid in verl-agent's
symbols (``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box on target, ``P`` player,
``S`` player on target), one row per line, followed by a one-line legend. The action is free
text naming one direction; rewards follow gym-sokoban (a step cost, +1 / -1 for a box pushed
onto / off a target, +10 when every box is on a target, which ends the episode).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from agentrl.configuration import check, from_mapping
from agentrl.env_api import TextEnv, Transition

from .generator import (
    BOX,
    BOX_ON_TARGET,
    FLOOR,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
    Level,
    generate_level,
)

ACTIONS: tuple[str, ...] = ("up", "down", "left", "right")
LEGEND = (
    f"Legend: {WALL} wall, {FLOOR} floor, {TARGET} target, {BOX} box, "
    f"{BOX_ON_TARGET} box on target, {PLAYER} you, {PLAYER_ON_TARGET} you on target"
)
TASK = (
    f"Push every box ({BOX}) onto a target ({TARGET}). Boxes can only be pushed, not pulled. "
    "Each turn, answer with one move: up, down, left or right."
)
DEMO_MAX_NODES = 200_000
"""Search budget of :meth:`SokobanEnv.demonstration` (a 6x6 room with 1-2 boxes needs a few
hundred states; larger rooms may give up and return None)."""
_DIRECTION = re.compile(r"\b(up|down|left|right)\b", re.IGNORECASE)


def parse_action(text: str) -> str | None:
    """The one direction named in ``text`` (lowercase), or None if it names none or several.

    Matching is case-insensitive on whole words, so ``"UP"``, ``" left "`` and
    ``"<action>down</action>"`` parse, while ``"up or down"`` is ambiguous and ``"upward"``
    names nothing.
    """
    found = {m.lower() for m in _DIRECTION.findall(text)}
    return found.pop() if len(found) == 1 else None


@dataclass(frozen=True)
class SokobanConfig:
    """Every Sokoban setting with its default; built from ``env.*`` keys by ``from_mapping``."""

    dim_room: tuple[int, int] = (6, 6)
    """Grid ``(height, width)`` in cells, the outer wall ring included."""
    num_boxes: int = 1
    """Boxes (and targets) per level."""
    max_steps: int = 15
    """Steps before the episode is truncated."""
    search_depth: int = 30
    """Moves of each reverse-play walk; bounds the optimal solution length (<= max_steps
    makes every level winnable within an episode)."""
    num_walks: int = 4
    """Reverse-play walks per level; the most scrambled position over all walks is kept."""
    min_boxes_off_target: int = 1
    """Boxes that must start off target (num_boxes mimics gym-sokoban: longer solutions)."""
    step_reward: float = -0.1
    """Reward of every step, invalid actions included."""
    box_on_target_reward: float = 1.0
    """Added when a box is pushed onto a target."""
    box_off_target_reward: float = -1.0
    """Added when a box is pushed off a target."""
    solved_reward: float = 10.0
    """Added when the last box reaches a target (the episode then terminates)."""
    cell_separator: str = " "
    """Text between cells of a row; a space keeps one token per cell for BPE tokenizers."""

    def __post_init__(self) -> None:
        h, w = self.dim_room
        check(5 <= h <= 64 and 5 <= w <= 64, "dim_room", self.dim_room, "two sizes in 5..64")
        interior = (h - 2) * (w - 2)
        check(
            1 <= self.num_boxes <= interior // 4,
            "num_boxes",
            self.num_boxes,
            f"in 1..{interior // 4} for dim_room={self.dim_room} (a quarter of the inner cells)",
        )
        check(self.max_steps >= 1, "max_steps", self.max_steps, "at least 1")
        check(self.search_depth >= 1, "search_depth", self.search_depth, "at least 1")
        check(self.num_walks >= 1, "num_walks", self.num_walks, "at least 1")
        check(
            1 <= self.min_boxes_off_target <= self.num_boxes,
            "min_boxes_off_target",
            self.min_boxes_off_target,
            f"in 1..num_boxes={self.num_boxes}",
        )
        rewards = ("step_reward", "box_on_target_reward", "box_off_target_reward", "solved_reward")
        for name in rewards:
            value = getattr(self, name)
            check(math.isfinite(value), name, value, "a finite number")
        check(
            "\n" not in self.cell_separator and len(self.cell_separator) <= 4,
            "cell_separator",
            self.cell_separator,
            "at most 4 characters without a newline",
        )


class SokobanEnv(TextEnv):
    """Sokoban with text observations and free-text actions (see the module docstring).

    Args:
        config: a ready :class:`SokobanConfig`; keyword arguments override its fields.
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the observation either way).
        **kwargs: :class:`SokobanConfig` fields; unknown keys raise ``ConfigError``.

    ``reset(options={"level": level})`` plays a given :class:`Level` (or its text) instead of
    generating one. ``self.level`` is the episode's starting level.
    """

    ends_only_on_success = True  # terminated means solved; there is no losing state

    def __init__(
        self,
        config: SokobanConfig | None = None,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if config is not None:
            kwargs = {
                **{f.name: getattr(config, f.name) for f in dataclasses.fields(config)},
                **kwargs,
            }
        self.config: SokobanConfig = from_mapping(SokobanConfig, kwargs, path="env")
        self.render_mode = render_mode
        self.max_steps = self.config.max_steps
        self.level: Level | None = None
        # Flat-index state: cell = row * width + col. The outer ring is wall, so a move can
        # never leave the grid and needs no bounds check.
        self._h = self._w = 0
        self._wall: bytes = b""
        self._targets: frozenset[int] = frozenset()
        self._boxes: set[int] = set()
        self._player = 0
        self._on_target = 0
        self._base: list[str] = []
        self._offsets: dict[str, int] = {}

    # -- TextEnv hooks -------------------------------------------------------------------
    def _reset(self, options: dict[str, Any] | None) -> str:
        level = (options or {}).get("level")
        if isinstance(level, str):
            level = Level.from_text(level)
        if level is None:
            cfg = self.config
            level = generate_level(
                self.np_random,
                cfg.dim_room,
                cfg.num_boxes,
                cfg.search_depth,
                num_walks=cfg.num_walks,
                min_off_target=cfg.min_boxes_off_target,
            )
        elif not isinstance(level, Level):
            raise TypeError(f"options['level'] must be a Level or its text, got {type(level)}")
        self.level = level
        h, w = self._h, self._w = level.shape
        self._wall = bytes(cell for row in level.walls for cell in row)
        self._targets = frozenset(r * w + c for r, c in level.targets)
        self._boxes = {r * w + c for r, c in level.boxes}
        self._player = level.player[0] * w + level.player[1]
        self._on_target = len(self._boxes & self._targets)
        self._base = [
            WALL if self._wall[i] else TARGET if i in self._targets else FLOOR for i in range(h * w)
        ]
        self._offsets = {"up": -w, "down": w, "left": -1, "right": 1}
        return self._render()

    def _step(self, action: str) -> Transition:
        cfg = self.config
        direction = parse_action(action)
        if direction is None:
            return Transition(self._last_obs, cfg.step_reward, False, False, None)
        reward = cfg.step_reward
        d = self._offsets[direction]
        nxt = self._player + d
        solved = False
        if not self._wall[nxt]:
            if nxt not in self._boxes:
                self._player = nxt
            else:
                beyond = nxt + d
                if not self._wall[beyond] and beyond not in self._boxes:
                    self._boxes.remove(nxt)
                    self._boxes.add(beyond)
                    self._player = nxt
                    # One box moved, so the count changes by at most one either way.
                    delta = (beyond in self._targets) - (nxt in self._targets)
                    if delta > 0:
                        reward += cfg.box_on_target_reward
                    elif delta < 0:
                        reward += cfg.box_off_target_reward
                    self._on_target += delta
                    if delta > 0 and self._on_target == len(self._targets):
                        reward += cfg.solved_reward
                        solved = True
        return Transition(self._render(), reward, solved, True, direction)

    def _anchor(self) -> Hashable:
        w = self._w
        return (divmod(self._player, w), tuple(sorted(divmod(b, w) for b in self._boxes)))

    def _won(self) -> bool:
        return self._on_target == len(self._targets)

    def _admissible(self) -> list[str] | None:
        return list(ACTIONS)

    def _task(self) -> str:
        return TASK

    def _extra_info(self) -> dict[str, Any]:
        return {"boxes_on_target": self._on_target}

    def demonstration(self) -> list[str] | None:
        """A shortest plan from the current position (:func:`~.solver.solve`); ``[]`` once the
        episode is over, None when no box arrangement can be solved from here (a box pushed
        into a corner) or the search gives up after ``DEMO_MAX_NODES`` states."""
        if self.level is None:
            return None
        if self._done:
            return []
        from .solver import solve

        w = self._w
        boxes = tuple(sorted(divmod(b, w) for b in self._boxes))
        return solve(self.level, DEMO_MAX_NODES, player=divmod(self._player, w), boxes=boxes)

    # -- helpers -------------------------------------------------------------------------
    def _render(self) -> str:
        """The grid (``height`` lines of ``width`` symbols) and the legend line."""
        cells = self._base.copy()
        for b in self._boxes:
            cells[b] = BOX_ON_TARGET if b in self._targets else BOX
        p = self._player
        cells[p] = PLAYER_ON_TARGET if p in self._targets else PLAYER
        w, sep = self._w, self.config.cell_separator
        rows = [sep.join(cells[i : i + w]) for i in range(0, len(cells), w)]
        rows.append(LEGEND)
        return "\n".join(rows)

    def state_level(self) -> Level:
        """The current position as a :class:`Level` (e.g. to solve it from here)."""
        if self.level is None:
            raise RuntimeError("call reset() first")
        w = self._w
        return dataclasses.replace(
            self.level,
            boxes=tuple(sorted(divmod(b, w) for b in self._boxes)),
            player=divmod(self._player, w),
            solution_bound=None,
        )
