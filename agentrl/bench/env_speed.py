"""Environment speed benchmark: Sokoban (ours vs gym-sokoban), ALFWorld (our engine vs the
stock textworld engine, :mod:`agentrl.bench.env_speed_alfworld`) and WebShop (BM25 search and
stepping, :mod:`agentrl.bench.env_speed_webshop`).

For each room setting (7x7 with 2 boxes, gym-sokoban's ``Sokoban-small-v0`` and the reference
number, and 6x6 with 1 box, agentrl's default) it times ``reset`` (one fresh level each) and
``step`` with random valid moves on the bare environment class (no gymnasium wrappers), for
:class:`agentrl.envs.sokoban.SokobanEnv` and, when it imports, gym-sokoban 0.0.6's
``SokobanEnv`` in the same process. It also solves a sample of levels from both with the BFS
solver to compare how hard the levels are. Results go to ``<out>/env_speed.md`` (``bench-out/``
unless ``--update``) under a ``## Sokoban`` section;
:func:`~agentrl.bench._report.update_markdown_section` keeps other environments' sections.
Without gym-sokoban its rows are copied from the committed report, marked as from that run
(:func:`sokoban_section`), never dropped.

Reproduce with ``python -m agentrl.bench env-speed`` (``--quick`` for a smoke run). gym-sokoban
needs ``pip install "setuptools<81" gym==0.26.2 gym-sokoban==0.0.6``.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl.bench._check import parse_number
from agentrl.bench._report import (
    SCRATCH,
    committed_section,
    header,
    kept_note,
    mark_kept,
    table_rows,
    write_env_speed_section,
)

SETTINGS: tuple[tuple[tuple[int, int], int], ...] = (((7, 7), 2), ((6, 6), 1))
SECTION = "Sokoban"


@dataclass
class Timing:
    """Per-level reset times (seconds) and per-step throughput for one implementation."""

    name: str
    reset_s: np.ndarray
    steps_per_s: float
    opt_len: np.ndarray  # optimal solution lengths (moves) of a sample of levels

    def row(self, ref: tuple[float, float] | None, mark: str = "") -> str:
        """A markdown table row; speed-ups are against ``ref`` (gym-sokoban's mean seconds per
        level and steps/s), if known, followed by ``mark``."""
        r = self.reset_s
        speedup = (
            f"{ref[0] / r.mean():,.0f}x / {self.steps_per_s / ref[1]:,.0f}x{mark}"
            if ref is not None
            else "-"
        )
        opt = (
            f"{self.opt_len.mean():.1f} / {np.median(self.opt_len):.0f} / {self.opt_len.max()}"
            if len(self.opt_len)
            else "-"
        )
        return (
            f"| {self.name} | {len(r)} | {r.mean() * 1e3:.3f} | {np.median(r) * 1e3:.3f} | "
            f"{r.max() * 1e3:.3f} | {1 / r.mean():,.0f} | {self.steps_per_s:,.0f} | {speedup} "
            f"| {opt} |"
        )


def _ours(
    dim_room: tuple[int, int], num_boxes: int, n_levels: int, n_steps: int, n_solve: int, **kw: Any
) -> Timing:
    from agentrl.envs.sokoban.env import ACTIONS, SokobanEnv
    from agentrl.envs.sokoban.solver import optimal_length

    env = SokobanEnv(dim_room=dim_room, num_boxes=num_boxes, max_steps=100, **kw)
    env.reset(seed=0)
    times, levels = [], []
    for _ in range(n_levels):
        t0 = time.perf_counter()
        env.reset()
        times.append(time.perf_counter() - t0)
        if len(levels) < n_solve:
            levels.append(env.level)
    rng = np.random.default_rng(0)
    actions = [ACTIONS[i] for i in rng.integers(0, 4, n_steps)]
    env.reset(seed=1)
    spent = 0.0
    for a in actions:
        t0 = time.perf_counter()
        _, _, term, trunc, _ = env.step(a)
        spent += time.perf_counter() - t0
        if term or trunc:
            env.reset()
    opt = np.array([optimal_length(lv) for lv in levels], dtype=int)
    return Timing("", np.array(times), n_steps / spent, opt)


def _gym_level(fixed: np.ndarray, state: np.ndarray) -> Any:
    """gym-sokoban's arrays (0 wall, 2 target, 3/4 box, 5 player) as our Level."""
    from agentrl.envs.sokoban.generator import Level

    h, w = fixed.shape
    return Level(
        walls=tuple(tuple(bool(fixed[r, c] == 0) for c in range(w)) for r in range(h)),
        targets=tuple(sorted((int(r), int(c)) for r, c in np.argwhere(fixed == 2))),
        boxes=tuple(sorted((int(r), int(c)) for r, c in np.argwhere((state == 3) | (state == 4)))),
        player=tuple(int(x) for x in np.argwhere(state == 5)[0]),
    )


def _gym_sokoban(
    dim_room: tuple[int, int], num_boxes: int, n_levels: int, n_steps: int, n_solve: int
) -> Timing:
    from gym_sokoban.envs.sokoban_env import SokobanEnv as GymSokobanEnv

    from agentrl.envs.sokoban.solver import optimal_length

    # gym-sokoban draws from the global ``random`` and ``np.random`` states.
    random.seed(0)
    np.random.seed(0)
    env = GymSokobanEnv(dim_room=dim_room, num_boxes=num_boxes, max_steps=100, reset=False)
    times, levels = [], []
    # It prints "[SOKOBAN] Retry" whenever a room fails; keep that out of the report.
    with contextlib.redirect_stdout(io.StringIO()):
        for _ in range(n_levels):
            t0 = time.perf_counter()
            env.reset()
            times.append(time.perf_counter() - t0)
            if len(levels) < n_solve:
                levels.append(_gym_level(env.room_fixed, env.room_state))
        env.reset()
        rng = np.random.default_rng(0)
        spent = 0.0
        for a in rng.integers(1, 9, n_steps).tolist():  # 1..8: push/move in four directions
            t0 = time.perf_counter()
            _, _, done, _ = env.step(a)
            spent += time.perf_counter() - t0
            if done:
                env.reset()
    opt = np.array([optimal_length(lv) for lv in levels], dtype=int)
    return Timing("", np.array(times), n_steps / spent, opt)


def _import_gym_sokoban() -> str | None:
    """None if gym-sokoban imports, else why not."""
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            import gym_sokoban  # noqa: F401
    except Exception as exc:  # any import failure only drops the comparison rows
        return f"{type(exc).__name__}: {exc}"
    return None


GYM = "gym-sokoban 0.0.6"
"""The peer's name in the report's rows (``<room> gym-sokoban 0.0.6``)."""


def committed_gym_rows(body: str | None) -> dict[str, tuple[str, float, float]]:
    """The gym-sokoban rows of a committed env-speed report's Sokoban section (its ``body``),
    by room (``"7x7/2"``): (the row's markdown line, mean seconds per level, steps/s)."""
    rows: dict[str, tuple[str, float, float]] = {}
    for line, cells in table_rows(body or ""):
        if len(cells) < 7 or " gym-sokoban" not in cells[0]:
            continue
        mean_ms, steps = parse_number(cells[2]), parse_number(cells[6])
        if mean_ms is not None and steps:
            rows[cells[0].split(" ", 1)[0]] = (line, mean_ms / 1e3, steps)
    return rows


def sokoban_section(
    results: dict[str, dict[str, Timing]],
    gym_error: str | None,
    n_solve: int,
    quick: bool,
    committed: str | os.PathLike | None = None,
) -> str:
    """The body of the ``## Sokoban`` section. When gym-sokoban was not measured here
    (``gym_error`` says why), its rows are copied from the committed report (``committed``
    folder, default :func:`~agentrl.bench._report.committed_dir`), marked as from that run, and
    the speed-ups are computed against them (marked †); without committed rows the section says
    that no comparison is shown."""
    kept: dict[str, tuple[str, float, float]] = {}
    note, date = "", None
    if gym_error is not None:
        body, date = committed_section("env_speed.md", SECTION, committed)
        kept, note = committed_gym_rows(body), kept_note("gym-sokoban", date)
    lines = []
    for key, row in results.items():
        measured = row.get(GYM)
        ref = (float(measured.reset_s.mean()), measured.steps_per_s) if measured else None
        mark = ""
        if ref is None and key in kept:
            ref, mark = kept[key][1:], " †"
        for name, timing in row.items():
            timing.name = f"{key} {name}"
            lines.append(timing.row(ref, mark))
        if measured is None and key in kept:
            lines.append(mark_kept(kept[key][0], note))
    if gym_error is None:
        gym_note = "gym-sokoban ran in the same process on the same machine."
    elif kept:
        gym_note = (
            f"gym-sokoban is not installed here ({gym_error}): its rows are copied from the "
            f"committed run of {date or 'an unknown date'} (`results/env_speed.md`), not "
            "re-measured, and the speed-ups marked † compare this run with that one (another "
            "process, perhaps another machine and load)."
        )
    else:
        gym_note = (
            f"gym-sokoban was not measured ({gym_error}) and the committed report has no "
            "gym-sokoban rows to keep: no comparison is shown."
        )
    return "\n".join(
        [
            *header(
                ("agentrl", "numpy", "gymnasium", "gym", "gym-sokoban"),
                "python -m agentrl.bench env-speed",
                quick,
            ),
            "",
            "Per level: one `reset()` of the bare env class, i.e. generating a fresh level plus "
            "the first observation (text for agentrl, a 16 px RGB image for gym-sokoban). "
            "Steps/s: random moves (agentrl: up/down/left/right text; gym-sokoban: actions "
            "1-8), reset time excluded. Speed-up: over gym-sokoban, in levels/s and steps/s. "
            "Optimal moves: BFS optimum over the first levels generated (mean / median / max), "
            "to compare difficulty. Room = height x width / boxes. " + gym_note,
            "",
            f"| room, implementation | levels | mean ms/level | p50 ms | max ms | levels/s "
            f"| steps/s | speed-up (levels / steps) | optimal moves (n={n_solve}) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            *lines,
        ]
    )


def run(
    out_dir: str | os.PathLike = SCRATCH,
    n_levels: int = 1000,
    n_steps: int = 20_000,
    n_ref_levels: int = 200,
    n_ref_steps: int = 1000,
    n_solve: int = 100,
    quick: bool = False,
    log: Callable[[str], Any] = print,
) -> dict[str, dict[str, Timing]]:
    """Run the benchmark, write ``<out_dir>/env_speed.md`` and return the timings.

    Args:
        out_dir: folder of the markdown report.
        n_levels, n_steps: levels generated and steps taken with agentrl's env per setting.
        n_ref_levels, n_ref_steps: the same for gym-sokoban (much slower per level).
        n_solve: levels per implementation solved optimally to compare difficulty.
        quick: a smoke run with a few levels and steps.
        log: where progress lines go.

    Returns:
        ``{"7x7/2": {"ours": Timing, "ours (all boxes off)": ..., "gym-sokoban": ...}, ...}``.
    """
    if quick:
        n_levels, n_steps, n_ref_levels, n_ref_steps, n_solve = 50, 2000, 5, 100, 10
    gym_error = _import_gym_sokoban()
    results: dict[str, dict[str, Timing]] = {}
    for dim_room, num_boxes in SETTINGS:
        key = f"{dim_room[0]}x{dim_room[1]}/{num_boxes}"
        row: dict[str, Timing] = {}
        log(f"[env-speed] {key}: agentrl")
        row["agentrl"] = _ours(dim_room, num_boxes, n_levels, n_steps, n_solve)
        if num_boxes > 1:
            row[f"agentrl, min_boxes_off_target={num_boxes}"] = _ours(
                dim_room, num_boxes, n_levels, n_steps, n_solve, min_boxes_off_target=num_boxes
            )
        if gym_error is None:
            log(f"[env-speed] {key}: {GYM}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row[GYM] = _gym_sokoban(dim_room, num_boxes, n_ref_levels, n_ref_steps, n_solve)
        results[key] = row
    if gym_error is not None:
        log(f"[env-speed] gym-sokoban not installed ({gym_error}): keeping the committed rows")
    body = sokoban_section(results, gym_error, n_solve, quick)
    path = write_env_speed_section(out_dir, SECTION, body)
    log(f"[env-speed] wrote {path}")
    from agentrl.bench import env_speed_alfworld

    results["alfworld"] = env_speed_alfworld.run(out_dir, quick=quick, log=log)
    from agentrl.bench import env_speed_webshop

    results["webshop"] = env_speed_webshop.run(out_dir, quick=quick, log=log)
    return results
