"""Solvable Sokoban levels by reverse play, drawn from a ``numpy.random.Generator``.

:func:`generate_level` carves a room with a random walk of small floor stamps, puts every box
on its own target (a solved position) plus the player, and then plays *backwards*: the player
walks and may *pull* the box behind it. Every reverse move undoes a legal forward move (a pull
is a push played backwards), so each visited position is solvable in at most as many moves as
the reverse play took. Of the visited positions the most scrambled one is kept, with at least
one box off its target. Everything is tight pure Python over flat cell indices with all random
numbers drawn in a few vectorised calls, so a 7x7 level takes well under a millisecond; the
same generator state always gives the same :class:`Level`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Text symbols (verl-agent convention), shared by the environment's observation.
WALL = "#"
FLOOR = "_"
TARGET = "O"
BOX = "X"
BOX_ON_TARGET = "√"
PLAYER = "P"
PLAYER_ON_TARGET = "S"

Pos = tuple[int, int]

# Floor stamps applied at each random-walk position, as (row, col) offsets from the walker:
# bars, corners and a 2x2 block, so rooms get corridors as well as open areas.
_STAMPS: tuple[tuple[Pos, ...], ...] = (
    ((0, -1), (0, 0), (0, 1)),
    ((-1, 0), (0, 0), (1, 0)),
    ((0, -1), (0, 0), (1, 0)),
    ((0, 0), (0, 1), (1, 0)),
    ((0, -1), (0, 0), (1, -1), (1, 0)),
)
# Unit moves as (row, col) steps, in the action order up, down, left, right.
_STEPS: tuple[Pos, ...] = ((-1, 0), (1, 0), (0, -1), (0, 1))


@dataclass(frozen=True)
class Level:
    """One Sokoban position; all coordinates are ``(row, col)`` with row 0 at the top.

    The grid is ``height x width`` cells and its outer ring is always wall, so moves never
    leave the grid. Equality and hashing use the layout only (not ``solution_bound``).
    """

    walls: tuple[tuple[bool, ...], ...]
    """``height`` rows of ``width`` flags; True is a wall."""
    targets: tuple[Pos, ...]
    """Target cells, sorted."""
    boxes: tuple[Pos, ...]
    """Box cells, sorted; as many as targets."""
    player: Pos
    """The player's cell."""
    solution_bound: int | None = field(default=None, compare=False)
    """Moves of the reverse play that made the level: an upper bound on the optimal
    solution length (None for hand-made levels)."""

    def __post_init__(self) -> None:
        h, w = self.shape
        if h < 3 or w < 3 or any(len(row) != w for row in self.walls):
            raise ValueError(f"walls must be a rectangle of at least 3x3 cells, got {h} rows")
        if any(not (self.walls[0][c] and self.walls[h - 1][c]) for c in range(w)) or any(
            not (row[0] and row[w - 1]) for row in self.walls
        ):
            raise ValueError("the outer ring of the grid must be wall")
        if not self.boxes or len(self.boxes) != len(self.targets):
            raise ValueError(
                f"need at least one box and as many targets as boxes, got "
                f"{len(self.boxes)} boxes and {len(self.targets)} targets"
            )
        cells = (*self.targets, *self.boxes, self.player)
        for r, c in cells:
            if not (0 <= r < h and 0 <= c < w) or self.walls[r][c]:
                raise ValueError(f"cell {(r, c)} is outside the grid or a wall")
        if len(set(self.boxes)) != len(self.boxes) or len(set(self.targets)) != len(self.targets):
            raise ValueError("boxes and targets must be distinct cells")
        if self.player in self.boxes:
            raise ValueError("the player stands on a box")

    @property
    def shape(self) -> tuple[int, int]:
        """``(height, width)`` in cells."""
        return len(self.walls), len(self.walls[0]) if self.walls else 0

    @property
    def num_boxes(self) -> int:
        return len(self.boxes)

    @property
    def solved(self) -> bool:
        """Whether every box stands on a target."""
        return set(self.boxes) == set(self.targets)

    def wall_array(self) -> np.ndarray:
        """The walls as a ``(height, width)`` bool array."""
        return np.array(self.walls, dtype=bool)

    def to_text(self, sep: str = "") -> str:
        """The grid in the observation symbols, one row per line, cells joined by ``sep``."""
        targets, boxes = set(self.targets), set(self.boxes)
        rows = []
        for r, row in enumerate(self.walls):
            cells = []
            for c, wall in enumerate(row):
                p, t, b = (r, c) == self.player, (r, c) in targets, (r, c) in boxes
                if wall:
                    cells.append(WALL)
                elif b:
                    cells.append(BOX_ON_TARGET if t else BOX)
                elif p:
                    cells.append(PLAYER_ON_TARGET if t else PLAYER)
                else:
                    cells.append(TARGET if t else FLOOR)
            rows.append(sep.join(cells))
        return "\n".join(rows)

    @classmethod
    def from_text(cls, text: str) -> Level:
        """Parse a grid written in the observation symbols (spaces and blank lines ignored).

        Raises:
            ValueError: on unknown symbols, a ragged grid, or an invalid position.
        """
        walls, targets, boxes, players = [], [], [], []
        for line in text.strip().splitlines():
            cells = line.replace(" ", "").replace("\t", "")
            if not cells:
                continue
            r = len(walls)
            for c, ch in enumerate(cells):
                if ch not in (WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET):
                    raise ValueError(f"unknown symbol {ch!r} at row {r}, column {c}")
                if ch in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                    targets.append((r, c))
                if ch in (BOX, BOX_ON_TARGET):
                    boxes.append((r, c))
                if ch in (PLAYER, PLAYER_ON_TARGET):
                    players.append((r, c))
            walls.append(tuple(ch == WALL for ch in cells))
        if len(players) != 1:
            raise ValueError(f"need exactly one player, found {len(players)}")
        return cls(tuple(walls), tuple(sorted(targets)), tuple(sorted(boxes)), players[0])


def default_topology_steps(dim_room: tuple[int, int]) -> int:
    """Random-walk length for carving a room, ``int(1.7 * (height + width))`` as gym-sokoban."""
    return int(1.7 * (dim_room[0] + dim_room[1]))


def carve_room(
    rng: np.random.Generator, dim_room: tuple[int, int], steps: int, p_turn: float = 0.35
) -> bytearray:
    """Floor cells of a random room, as a flat ``height * width`` mask (1 = floor).

    A walker starts on a random interior cell, turns with probability ``p_turn`` per step and
    stamps a random small shape around itself. Consecutive stamps overlap (each contains the
    walker), so the floor is connected; the outer ring stays wall.
    """
    h, w = dim_room
    start = rng.integers(1, (h - 1, w - 1)).tolist()
    turns = (rng.random(steps) < p_turn).tolist()
    dirs = rng.integers(0, 4, steps + 1).tolist()
    stamps = rng.integers(0, len(_STAMPS), steps).tolist()
    floor = bytearray(h * w)
    r, c = start
    dr, dc = _STEPS[dirs[steps]]
    for i in range(steps):
        if turns[i]:
            dr, dc = _STEPS[dirs[i]]
        # Clamp to the interior: the walker slides along the wall instead of leaving.
        r = min(max(r + dr, 1), h - 2)
        c = min(max(c + dc, 1), w - 2)
        for a, b in _STAMPS[stamps[i]]:
            rr, cc = r + a, c + b
            if 0 < rr < h - 1 and 0 < cc < w - 1:
                floor[rr * w + cc] = 1
    return floor


def _reverse_play(
    rng: np.random.Generator,
    w: int,
    floor: bytearray,
    player: int,
    targets: list[int],
    search_depth: int,
    num_walks: int,
    min_off: int,
) -> tuple[int, tuple[int, ...], int] | None:
    """Random reverse walks from the solved position; the best ``(player, boxes, moves)``.

    Box ``i`` starts on ``targets[i]``. Each walk repeatedly picks, uniformly, one pull the
    player can make (walk to a free cell next to a box, then step away from it dragging the
    box along) among those that fit in the remaining budget of ``search_depth`` moves; so no
    draw is wasted on aimless walking, and pulling a box straight back is skipped. Positions
    with at least ``min_off`` boxes off target are ranked by boxes off target, then by
    gym-sokoban's scramble score: total Manhattan displacement of the boxes from their own
    targets times the number of times the pulled (box, direction) changed (each change makes
    the forward player walk around). Returns None when no walk reached such a position.
    """
    steps = (-w, w, -1, 1)
    n = len(floor)
    draws = rng.random(num_walks * search_depth).tolist()
    is_target = bytearray(n)
    for t in targets:
        is_target[t] = 1
    # Floor neighbours of each floor cell, so the flood fills below skip walls for free.
    adjacent = [[c + d for d in steps if floor[c + d]] if floor[c] else [] for c in range(n)]
    best_score, best = (0, 0), None
    k = 0
    for _ in range(num_walks):
        occ = bytearray(n)  # occ[cell] = 1 + index of the box there, 0 if none
        for i, t in enumerate(targets):
            occ[t] = i + 1
        boxes = list(targets)
        p = player
        disp = off = switches = moves = 0
        last = (0, 0)
        undo = (-1, 0)
        while moves < search_depth:
            # Breadth-first distances from the player over free floor (rooms are tiny).
            dist = {p: 0}
            frontier = [p]
            while frontier:
                nxt_frontier = []
                for c in frontier:
                    dc = dist[c] + 1
                    for q in adjacent[c]:
                        if not occ[q] and q not in dist:
                            dist[q] = dc
                            nxt_frontier.append(q)
                frontier = nxt_frontier
            budget = search_depth - moves - 1
            options = []
            for x in boxes:
                for d in steps:
                    if x == undo[0] and d == undo[1]:
                        continue  # pulling the same box straight back only wastes moves
                    q = x + d
                    e = q + d
                    if dist.get(q, budget + 1) <= budget and floor[e] and not occ[e]:
                        options.append((x, d))
            if not options:
                break
            x, d = options[int(draws[k] * len(options))]
            k += 1
            q = x + d
            moves += dist[q] + 1
            b = occ[x]
            origin = targets[b - 1]
            orow, ocol = divmod(origin, w)
            r0, c0 = divmod(x, w)
            r1, c1 = divmod(q, w)
            disp += abs(r1 - orow) + abs(c1 - ocol) - abs(r0 - orow) - abs(c0 - ocol)
            off += is_target[x] - is_target[q]
            occ[x] = 0
            occ[q] = b
            boxes[b - 1] = q
            p = q + d
            undo = (q, -d)
            if (b, d) != last:
                switches += 1
                last = (b, d)
            if off >= min_off:
                score = (off, disp * switches)
                if score > best_score:
                    best_score, best = score, (p, tuple(boxes), moves)
    return best


def generate_level(
    rng: np.random.Generator,
    dim_room: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    search_depth: int = 30,
    *,
    num_walks: int = 4,
    min_off_target: int = 1,
    topology_steps: int | None = None,
    p_turn: float = 0.35,
    max_tries: int = 1000,
) -> Level:
    """A random level that is solvable and not already solved; randomness only from ``rng``.

    Args:
        rng: the only source of randomness (an env passes ``self.np_random``).
        dim_room: ``(height, width)`` in cells, outer wall ring included.
        num_boxes: boxes (and targets).
        search_depth: moves of each reverse walk (walking and pulling); it bounds the
            optimal solution length, so ``search_depth <= max_steps`` makes every level
            winnable within an episode.
        num_walks: independent reverse walks from the solved position; the best is kept.
        min_off_target: boxes that must end off target (1 up to ``num_boxes``; gym-sokoban
            requires all, which favours larger rooms and longer solutions).
        topology_steps: random-walk length carving the room (default: gym-sokoban's rule).
        p_turn: probability that the carving walk turns at each step.
        max_tries: rooms to try before giving up.

    Raises:
        RuntimeError: if ``max_tries`` rooms in a row came out degenerate (too small for
            ``num_boxes``, or no reverse walk moved ``min_off_target`` boxes off target).
    """
    h, w = dim_room
    if not 1 <= min_off_target <= num_boxes:
        raise ValueError(f"min_off_target={min_off_target} must be in 1..num_boxes={num_boxes}")
    steps = default_topology_steps(dim_room) if topology_steps is None else topology_steps
    k = num_boxes + 1
    for _ in range(max_tries):
        floor = carve_room(rng, dim_room, steps, p_turn)
        cells = [i for i, f in enumerate(floor) if f]
        if len(cells) < k + 2:  # a pull needs the box, the player and a free cell
            continue
        # Partial Fisher-Yates: the player and the targets on distinct floor cells.
        draws = rng.random(k).tolist()
        for i in range(k):
            j = i + int(draws[i] * (len(cells) - i))
            cells[i], cells[j] = cells[j], cells[i]
        found = _reverse_play(
            rng, w, floor, cells[0], cells[1:k], search_depth, num_walks, min_off_target
        )
        if found is None:
            continue
        player, boxes, moves = found
        walls = tuple(tuple(not floor[r * w + c] for c in range(w)) for r in range(h))
        return Level(
            walls=walls,
            targets=tuple(sorted(divmod(t, w) for t in cells[1:k])),
            boxes=tuple(sorted(divmod(b, w) for b in boxes)),
            player=divmod(player, w),
            solution_bound=moves,
        )
    raise RuntimeError(
        f"no usable {h}x{w} room with {num_boxes} boxes in {max_tries} tries; "
        "use a larger dim_room, fewer boxes or a larger search_depth"
    )
