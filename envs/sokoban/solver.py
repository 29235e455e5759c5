"""An optimal Sokoban solver: breadth-first search over (player, boxes) positions.

Used to check that generated levels are solvable and to measure their optimal solution
length in moves (every player step counts, pushes included, as in the environment). A state
is the player's cell plus a bitmask of box cells over flat indices, so hashing is cheap. Pushes
onto "dead" cells (from which no box could ever reach a target, computed once by pulling boxes
backwards from the targets) are pruned; this never removes an optimal solution. Small rooms
(7x7 with 2 boxes: a few thousand states) solve in milliseconds.
"""

from __future__ import annotations

from collections import deque

from .generator import Level

ACTIONS: tuple[str, ...] = ("up", "down", "left", "right")


def _live_cells(walls: list[bool], w: int, targets: list[int]) -> bytearray:
    """Cells from which a lone box can still be pushed onto some target (flat mask).

    A box can be pushed from ``c`` to ``c + d`` iff both ``c + d`` and ``c - d`` (where the
    player stands) are floor; so pulling backwards from the targets finds every live cell.
    """
    live = bytearray(len(walls))
    stack = list(targets)
    for t in targets:
        live[t] = 1
    while stack:
        c = stack.pop()
        for d in (-w, w, -1, 1):
            prev, player = c - d, c - 2 * d
            # prev is interior whenever it is floor, so player stays inside the grid.
            if not walls[prev] and not walls[player] and not live[prev]:
                live[prev] = 1
                stack.append(prev)
    return live


def solve(
    level: Level,
    max_nodes: int = 2_000_000,
    player: tuple[int, int] | None = None,
    boxes: tuple[tuple[int, int], ...] | None = None,
) -> list[str] | None:
    """A shortest action list (``"up"``/``"down"``/``"left"``/``"right"``) solving ``level``.

    Args:
        level: the level (walls and targets; by default also the start position).
        max_nodes: give up after expanding this many states.
        player, boxes: start from this position instead of the level's own.

    Returns:
        The actions (``[]`` if already solved), or None if the level is unsolvable or the
        search gave up after ``max_nodes`` states.
    """
    h, w = level.shape
    walls = [cell for row in level.walls for cell in row]
    targets = [r * w + c for r, c in level.targets]
    pr, pc = level.player if player is None else player
    start_p = pr * w + pc
    start_boxes = 0
    for r, c in level.boxes if boxes is None else boxes:
        start_boxes |= 1 << (r * w + c)
    goal = 0
    for t in targets:
        goal |= 1 << t
    if start_boxes == goal:
        return []
    live = _live_cells(walls, w, targets)
    steps = (-w, w, -1, 1)
    # parent[state] = (previous state, action index); a state is ``boxes * size + player``.
    size = h * w
    start = start_boxes * size + start_p
    parent: dict[int, tuple[int, int]] = {start: (-1, -1)}
    queue = deque([start])
    expanded = 0
    while queue:
        state = queue.popleft()
        expanded += 1
        if expanded > max_nodes:
            return None
        bx, p = divmod(state, size)
        for a, d in enumerate(steps):
            nxt = p + d
            if walls[nxt]:
                continue
            nbx = bx
            if bx >> nxt & 1:
                beyond = nxt + d
                if walls[beyond] or bx >> beyond & 1 or not live[beyond]:
                    continue
                nbx = bx ^ (1 << nxt) ^ (1 << beyond)
            child = nbx * size + nxt
            if child in parent:
                continue
            parent[child] = (state, a)
            if nbx == goal:
                path = []
                while child != start:
                    child, a = parent[child]
                    path.append(ACTIONS[a])
                return path[::-1]
            queue.append(child)
    return None


def optimal_length(level: Level, max_nodes: int = 2_000_000) -> int | None:
    """Moves in an optimal solution of ``level``; None if unsolvable or the search gave up."""
    path = solve(level, max_nodes=max_nodes)
    return None if path is None else len(path)
