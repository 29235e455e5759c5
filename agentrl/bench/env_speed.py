"""Environment speed: one ``## <environment>`` section of ``<out>/env_speed.md`` each.

:data:`ENVIRONMENTS` maps each section to its measurement, which returns the section's body and
its raw results; a section is rewritten by its own measurement and the others are kept
(:func:`~agentrl.bench._report.update_markdown_section`).

- Sokoban: for each room setting of :data:`SETTINGS` (7x7 with 2 boxes, gym-sokoban's
  ``Sokoban-small-v0`` and the reference number; 6x6 with 1 box, agentrl's default) it times
  ``reset`` (one fresh level each) and ``step`` with random valid moves on the bare environment
  class (no gymnasium wrappers), for agentrl's ``SokobanEnv`` and, when it imports, gym-sokoban
  0.0.6's in the same process (``pip install "setuptools<81" gym==0.26.2 gym-sokoban==0.0.6``),
  and solves a sample of levels of both with the BFS solver to compare their difficulty.
  Without gym-sokoban its rows are copied from the committed report, marked
  (:func:`sokoban_section`).
- ALFWorld: agentrl's ``FastEngine`` against the stock textworld engine on the same generated
  games in one process: load + first reset (the stock engine translates the PDDL problem on
  every load and reset; the fast one caches it per process, so its first load is reported
  cold), a reset of a loaded game, steps/s with the same seeded random admissible commands
  (the transcripts must be identical), and the whole ``ALFWorldEnv.step``. Without the alfworld
  extra the committed section is kept (:func:`keep_section`).
- WebShop: per catalogue size, generating it, building and loading the BM25 index, query
  latency (whole goal instructions and short queries), and steps/s of ``WebShopEnv`` under a
  random shopper; an oracle shopper checks that the generated goals are solvable with the
  environment's own search.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.bench._check import parse_number
from agentrl.bench._report import (
    SCRATCH,
    cache_dir,
    committed_dir,
    header,
    kept_rows,
    kept_section,
    missing,
    render,
    update_markdown_section,
)

COMMAND = "python -m agentrl.bench env-speed"
SETTINGS: tuple[tuple[tuple[int, int], int], ...] = (((7, 7), 2), ((6, 6), 1))
SECTION = "Sokoban"
GYM = "gym-sokoban 0.0.6"
"""The peer's name in the report's rows (``<room> gym-sokoban 0.0.6``)."""
WEBSHOP_TARGET_MS = 2.0
"""The most a WebShop query may take at the largest catalogue (the report says if it is met)."""


def write_env_speed_section(out_dir: str | os.PathLike, heading: str, body: str) -> Path:
    """Write one environment's ``## heading`` section of ``<out_dir>/env_speed.md``."""
    path = Path(out_dir) / "env_speed.md"
    update_markdown_section(path, heading, body, render("env_speed"))
    return path


def _head(packages: tuple[str, ...], quick: bool, note: str = "") -> str:
    return header(("agentrl", *packages), COMMAND, quick, note)


# --- Sokoban ---


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
        r, opt = self.reset_s, self.opt_len
        speedup = "-"
        if ref is not None:
            speedup = f"{ref[0] / r.mean():,.0f}x / {self.steps_per_s / ref[1]:,.0f}x{mark}"
        moves = f"{opt.mean():.1f} / {np.median(opt):.0f} / {opt.max()}" if len(opt) else "-"
        return (
            f"| {self.name} | {len(r)} | {r.mean() * 1e3:.3f} | {np.median(r) * 1e3:.3f} | "
            f"{r.max() * 1e3:.3f} | {1 / r.mean():,.0f} | {self.steps_per_s:,.0f} | {speedup} "
            f"| {moves} |"
        )


def _timed_steps(step: Callable[[Any], bool], reset: Callable[[], Any], actions) -> float:
    """Steps/s of ``step(action)`` (True when the episode ended, then ``reset()``, untimed)."""
    spent = 0.0
    for a in actions:
        t0 = time.perf_counter()
        ended = step(a)
        spent += time.perf_counter() - t0
        if ended:
            reset()
    return len(actions) / spent


def _levels(reset: Callable[[], Any], level: Callable[[], Any], n: int, n_solve: int):
    """Seconds of each of ``n`` resets and the optimal lengths of the first ``n_solve`` levels."""
    from agentrl.envs.sokoban.solver import optimal_length

    times, levels = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        reset()
        times.append(time.perf_counter() - t0)
        if len(levels) < n_solve:
            levels.append(level())
    return np.array(times), np.array([optimal_length(lv) for lv in levels], dtype=int)


def _ours(room, boxes: int, n_levels: int, n_steps: int, n_solve: int, **kw: Any) -> Timing:
    from agentrl.envs.sokoban.env import ACTIONS, SokobanEnv

    env = SokobanEnv(dim_room=room, num_boxes=boxes, max_steps=100, **kw)
    env.reset(seed=0)
    times, opt = _levels(env.reset, lambda: env.level, n_levels, n_solve)
    actions = [ACTIONS[i] for i in np.random.default_rng(0).integers(0, 4, n_steps)]
    env.reset(seed=1)
    sps = _timed_steps(lambda a: any(env.step(a)[2:4]), env.reset, actions)
    return Timing("", times, sps, opt)


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


def _gym_sokoban(room, boxes: int, n_levels: int, n_steps: int, n_solve: int) -> Timing:
    from gym_sokoban.envs.sokoban_env import SokobanEnv as GymSokobanEnv

    # gym-sokoban draws from the global ``random`` and ``np.random`` states.
    random.seed(0)
    np.random.seed(0)
    env = GymSokobanEnv(dim_room=room, num_boxes=boxes, max_steps=100, reset=False)
    # It prints "[SOKOBAN] Retry" whenever a room fails; keep that out of the report.
    with contextlib.redirect_stdout(io.StringIO()):
        times, opt = _levels(
            env.reset, lambda: _gym_level(env.room_fixed, env.room_state), n_levels, n_solve
        )
        env.reset()
        actions = np.random.default_rng(0).integers(1, 9, n_steps).tolist()  # push/move 1..8
        sps = _timed_steps(lambda a: env.step(a)[2], env.reset, actions)
    return Timing("", times, sps, opt)


def committed_gym_rows(
    committed: str | os.PathLike | None = None,
) -> tuple[dict[str, tuple[str, float, float]], str | None]:
    """The gym-sokoban rows of the committed report's Sokoban section (``committed`` folder,
    default :func:`~agentrl.bench._report.committed_dir`) by room (``"7x7/2"``): (the row's
    line, marked as kept, mean seconds per level, steps/s); and the date of that run."""

    def room(cells: list[str]) -> str | None:
        ok = len(cells) >= 7 and " gym-sokoban" in cells[0] and parse_number(cells[6])
        return cells[0].split(" ", 1)[0] if ok and parse_number(cells[2]) is not None else None

    lines, date = kept_rows("env_speed.md", SECTION, room, "gym-sokoban", committed)
    rows = {}
    for key, line in lines.items():
        cells = line.split("|")
        rows[key] = (line, parse_number(cells[3]) / 1e3, parse_number(cells[7]))
    return rows, date


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
    kept, date = committed_gym_rows(committed) if gym_error is not None else ({}, None)
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
            lines.append(kept[key][0])
    note = "gym_measured" if gym_error is None else "gym_kept" if kept else "gym_none"
    gym_note = render("env_speed", note, error=gym_error, date=date or "an unknown date")
    head = _head(("numpy", "gymnasium", "gym", "gym-sokoban"), quick)
    return render("env_speed", SECTION, head=head, gym_note=gym_note, n_solve=n_solve,
                  rows="\n".join(lines))  # fmt: skip


def sokoban(quick: bool, log: Callable[[str], Any] = print) -> tuple[str, dict]:
    """Measure every room setting; return the section's body and ``{"7x7/2": {"agentrl":
    Timing, "agentrl, min_boxes_off_target=2": ..., "gym-sokoban 0.0.6": ...}, ...}``.

    agentrl's env generates 1000 levels and takes 20,000 steps per setting, gym-sokoban (much
    slower per level) 200 and 1000; 100 levels of each are solved optimally."""
    n_levels, n_steps, n_ref_levels, n_ref_steps, n_solve = 1000, 20_000, 200, 1000, 100
    if quick:
        n_levels, n_steps, n_ref_levels, n_ref_steps, n_solve = 50, 2000, 5, 100, 10
    gym_error = missing("gym_sokoban")
    results: dict[str, dict[str, Timing]] = {}
    for room, boxes in SETTINGS:
        key = f"{room[0]}x{room[1]}/{boxes}"
        log(f"[env-speed] {key}: agentrl")
        row = {"agentrl": _ours(room, boxes, n_levels, n_steps, n_solve)}
        if boxes > 1:
            row[f"agentrl, min_boxes_off_target={boxes}"] = _ours(
                room, boxes, n_levels, n_steps, n_solve, min_boxes_off_target=boxes
            )
        if gym_error is None:
            log(f"[env-speed] {key}: {GYM}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row[GYM] = _gym_sokoban(room, boxes, n_ref_levels, n_ref_steps, n_solve)
        results[key] = row
    if gym_error is not None:
        log(f"[env-speed] gym-sokoban not installed ({gym_error}): keeping the committed rows")
    return sokoban_section(results, gym_error, n_solve, quick), results


# --- ALFWorld ---


def _clear_caches() -> None:
    from agentrl.envs.alfworld import engine

    engine._translate.cache_clear()
    engine._game_logic.cache_clear()
    engine._parse_symbols.cache_clear()
    engine._parse_query.cache_clear()


def _play(engine, games: list[str], n_steps: int, seed: int) -> dict[str, Any]:
    """Time loads, resets and random-admissible steps; return timings and the transcript."""
    rng = np.random.default_rng(seed)
    load_s, reset_s, step_s, steps = [], [], 0.0, 0
    transcript = []
    commands: list[tuple[str, str]] = []  # (game, command), "" = reset
    for g in games:
        t0 = time.perf_counter()
        engine.load(g)
        st = engine.reset()
        load_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        st = engine.reset()
        reset_s.append(time.perf_counter() - t0)
        transcript.append(st)
        for _ in range(max(1, n_steps // len(games))):
            if st.done:
                st = engine.reset()
                transcript.append(st)
                commands.append((g, ""))
            cmd = st.admissible_commands[int(rng.integers(len(st.admissible_commands)))]
            commands.append((g, cmd))
            t0 = time.perf_counter()
            st = engine.step(cmd)
            step_s += time.perf_counter() - t0
            steps += 1
            transcript.append(st)
    return {"load_s": np.array(load_s), "reset_s": np.array(reset_s), "steps": steps,
            "steps_per_s": steps / step_s, "transcript": transcript,
            "commands": commands}  # fmt: skip


def _env_steps_per_s(commands: list[tuple[str, str]]) -> float:
    """``ALFWorldEnv.step`` (fast engine) over the same games and commands as the engines."""
    from agentrl.envs.alfworld.env import ALFWorldEnv

    env = ALFWorldEnv(progress=False)
    total, current, steps = 0.0, None, 0
    for game, cmd in commands:
        if game != current or not cmd:
            env.reset(seed=0, options={"gamefile": game})
            current = game
            if not cmd:
                continue
        t0 = time.perf_counter()
        env.step(cmd)
        total += time.perf_counter() - t0
        steps += 1
    return steps / total


def keep_section(
    out_dir: str | os.PathLike,
    section: str,
    reason: str,
    committed: str | os.PathLike | None = None,
) -> str | None:
    """A section whose extra is missing here (:data:`ENVIRONMENTS`) is not measured: the
    committed report's section is copied into ``<out_dir>/env_speed.md``, marked as from that
    run (returns the note; None when the committed report has no such section)."""
    extra = ENVIRONMENTS[section].extra
    body, note = kept_section("env_speed.md", section, extra, reason, committed)
    if body is None:
        return None
    # In the committed folder itself the section is that run's already: it stays as it is.
    if Path(out_dir).resolve() != Path(committed or committed_dir()).resolve():
        write_env_speed_section(out_dir, section, body)
    return note


def alfworld(quick: bool, log: Callable[[str], Any] = print) -> tuple[str, dict]:
    """Measure both engines on 12 generated games (3 with ``quick``), about 600 steps each (60);
    raises ImportError without the alfworld extra."""
    from agentrl.envs.alfworld import data
    from agentrl.envs.alfworld.engine import FastEngine, StockEngine

    n_games, n_steps = (3, 60) if quick else (12, 600)
    cache = cache_dir("alfworld")
    log(f"[env-speed] ALFWorld: {n_games} generated games (cache {cache})")
    t0 = time.perf_counter()
    games = data.generated_games(cache, "train", n_games, 0, (1, 2, 3, 4, 5, 6), progress=False)
    gen_s = time.perf_counter() - t0
    log("[env-speed] ALFWorld: stock engine")
    stock = _play(StockEngine(), games, n_steps, seed=1)
    log("[env-speed] ALFWorld: fast engine")
    _clear_caches()
    fast = _play(FastEngine(), games, n_steps, seed=1)
    identical = stock["transcript"] == fast["transcript"]
    env_sps = _env_steps_per_s(fast["commands"])
    rows = []
    named = (("stock (textworld PddlEnv + alfworld wrappers)", stock), ("agentrl fast", fast))
    for name, r in named:
        speed = r["steps_per_s"] / stock["steps_per_s"]
        rows.append(
            f"| {name} | {r['steps']} | {r['steps_per_s']:,.1f} | {speed:.1f}x "
            f"| {r['load_s'].mean():.3f} | {r['reset_s'].mean() * 1e3:.1f} |"
        )
    rows.append(f"| agentrl `ALFWorldEnv.step` (fast engine, whole env) | {fast['steps']} "
                f"| {env_sps:,.1f} | {env_sps / stock['steps_per_s']:.1f}x | - | - |")  # fmt: skip
    for r in rows:
        log("  " + r)
    head = _head(("alfworld", "textworld"), quick, " (other jobs on the machine slow both engines "
                 "alike)")  # fmt: skip
    body = render("env_speed", "ALFWorld", head=head, n_games=len(games), gen_s=f"{gen_s:.0f}",
                  identical="yes" if identical else "NO", states=len(stock["transcript"]),
                  rows="\n".join(rows))  # fmt: skip
    return body, {"stock": stock, "fast": fast, "identical": identical, "env_steps_per_s": env_sps}


# --- WebShop ---


def _time_queries(index, queries: list[str], k: int) -> np.ndarray:
    """Milliseconds of each query, timed alone."""
    for q in queries[:10]:  # warm the analyzer's stem cache and numpy's code paths
        index.search(q, k)
    out = []
    for q in queries:
        t0 = time.perf_counter()
        index.search(q, k)
        out.append(time.perf_counter() - t0)
    return np.array(out) * 1e3


def _queries(products, goals, n: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """``n`` whole goal instructions and ``n`` short queries (a product type and an attribute)."""
    instructions = [goals[int(i)].instruction for i in rng.integers(len(goals), size=n)]
    short = []
    for i in rng.integers(len(products), size=n):
        p = products[int(i)]
        attribute = p.attributes[int(rng.integers(len(p.attributes)))] if p.attributes else ""
        short.append(f"{p.query} {attribute}".strip())
    return instructions, short


def _shopper_steps(env, n_steps: int, seed: int) -> tuple[float, float]:
    """(steps/s, share of steps that searched) of a random shopper: on the search page it
    searches for the goal instruction or a short query, elsewhere it clicks a random button."""
    rng = np.random.default_rng(seed)
    u = env.unwrapped
    _, info = env.reset(seed=seed)
    spent, searches = 0.0, 0
    for _ in range(n_steps):
        if info["has_search_bar"]:
            goal = u.goal
            if rng.random() < 0.5:
                action = f"search[{goal.instruction}]"
            else:
                product = u.store.products[goal.product]
                action = f"search[{product.query} {' '.join(goal.attributes[:1])}]"
            searches += 1
        else:
            clicks = info["admissible_actions"]
            action = clicks[int(rng.integers(len(clicks)))]
        t0 = time.perf_counter()
        _, _, term, trunc, info = env.step(action)
        spent += time.perf_counter() - t0
        if term or trunc:
            _, info = env.reset()
    return n_steps / spent, searches / n_steps


def _oracle(env, n_goals: int) -> tuple[float, float]:
    """(success rate, mean score) of the oracle shopper on the first ``n_goals`` test goals:
    search the instruction, page to the goal product, select the goal options, buy."""
    u = env.unwrapped
    rewards = []
    for g in range(n_goals):
        _, info = env.reset(seed=g, options={"split": "eval", "goal_index": g})
        goal = u.goal
        _, _, _, _, info = env.step(f"search[{goal.instruction}]")
        target = f"click[{goal.asin.lower()}]"
        for _ in range(4):
            if target in info["admissible_actions"]:
                break
            _, _, _, _, info = env.step("click[next >]")
        if target not in info["admissible_actions"]:
            rewards.append(0.0)
            continue
        env.step(target)
        for value in goal.options:
            env.step(f"click[{value}]")
        rewards.append(env.step("click[buy now]")[1])
    r = np.array(rewards)
    return float((r >= 1.0).mean()), float(100 * r.mean())


def _catalogue(n: int, n_queries: int, n_steps: int, rng, log) -> tuple[dict, Any]:
    """One catalogue size's figures (generate, index, queries, env steps) and its env."""
    from agentrl.envs.webshop import data, generate
    from agentrl.envs.webshop.env import WebShopEnv
    from agentrl.envs.webshop.search import SearchIndex, product_document

    cache = Path(cache_dir("webshop"))
    log(f"[env-speed] WebShop: generating {n:,} products")
    t0 = time.perf_counter()
    raw = generate.generate_catalog(n, seed=0)
    gen_s = time.perf_counter() - t0
    products = [data._product_from_dict(d) for d in raw]
    texts = [product_document(p.title, p.description, p.bullet_points, p.options)
             for p in products]  # fmt: skip
    log(f"[env-speed] WebShop: indexing {n:,} products")
    t0 = time.perf_counter()
    index = SearchIndex.build(texts)
    index_s = time.perf_counter() - t0
    tmp = cache / f"bench-index-{n}"
    shutil.rmtree(tmp, ignore_errors=True)
    index.save(tmp)
    t0 = time.perf_counter()
    SearchIndex.load(tmp)
    load_s = time.perf_counter() - t0
    prng = np.random.default_rng(0)
    goals = data.build_goals(products, data.product_prices(products, prng), "synthetic", prng)
    instructions, short = _queries(products, goals, n_queries, rng)
    del raw, texts
    res = {"generate_s": gen_s, "index_s": index_s, "load_s": load_s, "goals": len(goals),
           "terms": len(index.vocab), "postings": len(index.data),
           "instruction_ms": _time_queries(index, instructions, 50),
           "short_ms": _time_queries(index, short, 50)}  # fmt: skip
    del index, products, goals  # a 100k catalogue is large: free it before the env builds its own
    log(f"[env-speed] WebShop: stepping the env on {n:,} products")
    env = WebShopEnv(num_products=n, cache_dir=str(cache))
    res["steps_per_s"], res["search_share"] = _shopper_steps(env, n_steps, seed=1)
    return res, env


def webshop(quick: bool, log: Callable[[str], Any] = print) -> tuple[str, dict]:
    """Measure catalogues of 1,000 and 100,000 products (300 queries of each kind, 3000 env
    steps; the oracle plays 200 test goals of the smallest); with ``quick`` 1,000 and 5,000
    products, fewer queries and steps. Returns the section's body and ``{size: {"generate_s",
    "index_s", "load_s", "instruction_ms", "short_ms", "steps_per_s", ...}, "oracle": (success,
    score), "noun_extractor": name}``."""
    sizes, n_queries, n_steps, n_oracle = (1000, 100_000), 300, 3000, 200
    if quick:
        sizes, n_queries, n_steps, n_oracle = (1000, 5000), 50, 300, 50
    rng = np.random.default_rng(0)
    results: dict[Any, Any] = {}
    rows = []
    for n in sizes:
        res, env = _catalogue(n, n_queries, n_steps, rng, log)
        if n == min(sizes):
            n_oracle = min(n_oracle, env.unwrapped.cfg.eval_goals)
            results["oracle"] = _oracle(env, n_oracle)
            results["noun_extractor"] = env.unwrapped.nouns.name
        results[n] = res
        del env
        t_inst, t_short = res["instruction_ms"], res["short_ms"]
        rows.append(
            f"| {n:,} | {res['goals']:,} | {res['generate_s']:.1f} | {res['index_s']:.1f} "
            f"| {res['load_s']:.2f} | {res['terms']:,} / {res['postings'] / 1e6:.2f}M "
            f"| {t_inst.mean():.2f} / {np.median(t_inst):.2f} / {np.percentile(t_inst, 99):.2f} "
            f"| {t_short.mean():.2f} / {np.median(t_short):.2f} / "
            f"{np.percentile(t_short, 99):.2f} | {res['steps_per_s']:,.0f} |"
        )
        log("  " + rows[-1])
    largest = results[max(sizes)]
    worst = max(largest["instruction_ms"].mean(), largest["short_ms"].mean())
    success, score = results["oracle"]
    head = _head(("bm25s", "PyStemmer", "rapidfuzz", "numpy"), quick)
    body = render(
        "env_speed", "WebShop", head=head, n_queries=n_queries, target=f"{WEBSHOP_TARGET_MS:g}",
        met="met" if worst <= WEBSHOP_TARGET_MS else "NOT met", worst=f"{worst:.2f}",
        n_steps=n_steps, search_share=f"{100 * largest['search_share']:.0f}", n_oracle=n_oracle,
        oracle_size=f"{min(sizes):,}", success=f"{100 * success:.0f}", score=f"{score:.1f}",
        nouns=results["noun_extractor"], rows="\n".join(rows),
    )  # fmt: skip
    return body, results


@dataclass(frozen=True)
class Environment:
    """One section of the report: ``measure(quick, log)`` gives its body and raw results."""

    measure: Callable[[bool, Callable], tuple[str, Any]]
    extra: str | None = None
    """What is missing when its import fails (the committed section is then kept, marked);
    None: a failed import is an error."""


def served(quick: bool, log: Callable[[str], Any] = print) -> tuple[str, Any]:
    """The OpenEnv boundary (:mod:`agentrl.bench.env_speed_served`); imported here, so that
    a missing openenv extra keeps the committed section instead of failing the run."""
    from agentrl.bench.env_speed_served import openenv

    return openenv(quick, log)


ENVIRONMENTS: dict[str, Environment] = {
    "Sokoban": Environment(sokoban),
    "ALFWorld": Environment(alfworld, extra="alfworld (the stock engine)"),
    "WebShop": Environment(webshop),
    "OpenEnv": Environment(served, extra="openenv (openenv-core)"),
}


def run(
    out_dir: str | os.PathLike = SCRATCH,
    quick: bool = False,
    log: Callable[[str], Any] = print,
    argv: list[str] | None = None,
) -> dict[str, Any]:
    """Measure every environment of :data:`ENVIRONMENTS` (``--section NAME``, repeatable, in
    ``argv``: only those), write its section of ``<out_dir>/env_speed.md`` and return the
    results by section."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"{COMMAND} [--quick]")
    parser.add_argument(
        "--section",
        action="append",
        choices=list(ENVIRONMENTS),
        help="measure only this section (repeatable); the others are kept",
    )
    chosen = parser.parse_args(argv or []).section or list(ENVIRONMENTS)
    results: dict[str, Any] = {}
    for section, env in ENVIRONMENTS.items():
        if section not in chosen:
            continue
        try:
            body, results[section] = env.measure(quick, log)
        except ImportError as exc:
            if env.extra is None:
                raise
            kept = keep_section(out_dir, section, f"{type(exc).__name__}: {exc}")
            log(f"[env-speed] {section} not measured ({exc}); " + (kept or "no committed section"))
            continue
        log(f"[env-speed] wrote {write_env_speed_section(out_dir, section, body)}")
    return results
