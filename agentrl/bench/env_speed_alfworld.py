"""ALFWorld engine speed: agentrl's :class:`FastEngine` against the stock textworld engine.

Both engines play the same generated games in the same process. Per engine it measures

- load + first reset of a game (the stock engine translates the PDDL problem on every load and
  every reset; the fast engine caches the translation per process, so its first load is
  reported cold (caches cleared) and its later resets warm);
- a reset of an already loaded game;
- steps/s with random admissible commands (the same seeded sequence for both engines; both
  engines produce identical transcripts, which the benchmark also checks), resets excluded;
- steps/s of the whole environment (``ALFWorldEnv.step`` on the fast engine, the same games and
  commands: action matching, anchor and info included).

Writes the ``## ALFWorld`` section of ``<out>/env_speed.md``; run as part of
``python -m agentrl.bench env-speed``. Without the alfworld extra the committed section is
copied over, marked as from the committed run (:func:`keep_alfworld_section`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from agentrl.bench._report import (
    ENV_SPEED_PREAMBLE,
    SCRATCH,
    cache_dir,
    header,
    keep_committed_section,
    write_env_speed_section,
)

SECTION = "ALFWorld"


def _clear_caches() -> None:
    from agentrl.envs.alfworld import engine

    engine._translate.cache_clear()
    engine._game_logic.cache_clear()
    engine._parse_symbols.cache_clear()
    engine._parse_query.cache_clear()


def _play(engine, games: list[str], n_steps: int, seed: int) -> dict[str, Any]:
    """Time loads, resets and random-admissible steps; return timings and the transcript."""
    rng = np.random.default_rng(seed)
    load_s, reset_s, step_s = [], [], 0.0
    steps = 0
    transcript = []
    commands: list[tuple[str, str]] = []  # (game, command), "" = reset
    per_game = max(1, n_steps // len(games))
    for g in games:
        t0 = time.perf_counter()
        engine.load(g)
        st = engine.reset()
        load_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        st = engine.reset()
        reset_s.append(time.perf_counter() - t0)
        transcript.append(st)
        for _ in range(per_game):
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
    return {
        "load_s": np.array(load_s),
        "reset_s": np.array(reset_s),
        "steps_per_s": steps / step_s,
        "steps": steps,
        "transcript": transcript,
        "commands": commands,
    }


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


def keep_alfworld_section(
    out_dir: str | os.PathLike, reason: str, committed: str | os.PathLike | None = None
) -> str | None:
    """Without the alfworld extra neither engine runs here: the committed report's ALFWorld
    section is copied into ``<out_dir>/env_speed.md``, marked as from that run (returns the
    note; None when the committed report has no such section)."""
    return keep_committed_section(
        out_dir,
        "env_speed.md",
        SECTION,
        "alfworld (the stock engine)",
        reason,
        committed,
        ENV_SPEED_PREAMBLE,
    )


def run(
    out_dir: str | os.PathLike = SCRATCH,
    n_games: int = 12,
    n_steps: int = 600,
    quick: bool = False,
    log: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """Measure both engines and write the ``## ALFWorld`` section of ``<out_dir>/env_speed.md``
    (``n_games`` generated games, about ``n_steps`` steps per engine)."""
    try:
        from agentrl.envs.alfworld import data
        from agentrl.envs.alfworld.engine import FastEngine, StockEngine
    except ImportError as exc:  # pragma: no cover - optional extra
        kept = keep_alfworld_section(out_dir, f"{type(exc).__name__}: {exc}")
        log(f"[env-speed] ALFWorld not measured ({exc}); " + (kept or "no committed section"))
        return {}
    if quick:
        n_games, n_steps = 3, 60
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
    body = "\n".join(
        [
            *header(
                ("agentrl", "alfworld", "textworld"),
                "python -m agentrl.bench env-speed",
                quick,
                " (other jobs on the machine slow both engines alike)",
            ),
            "",
            f"Games: {len(games)} generated games (all six task types; `agentrl.envs.alfworld."
            f"generate`, seed 0; generating them took {gen_s:.0f} s, or 0 s when cached), "
            "played by both engines in one process. Steps: random admissible commands, the "
            "same seeded sequence for both engines, resets excluded. Load: `load(game)` + "
            "first `reset()` (the fast engine's caches cleared first, so this is its cold "
            "load). Reset: a `reset()` of the loaded game. Transcripts (observation, score, "
            f"done, won, admissible commands, location, inventory) identical: "
            f"**{'yes' if identical else 'NO'}** over {len(stock['transcript'])} states. The "
            "fast engine's steps/s include filling its caches (it starts cold); the whole-env "
            "row replays the same commands afterwards, with the caches of the process warm.",
            "",
            "| engine | steps | steps/s | speed-up | load + reset s | reset ms |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    write_env_speed_section(out_dir, SECTION, body)
    for r in rows:
        log("  " + r)
    return {"stock": stock, "fast": fast, "identical": identical, "env_steps_per_s": env_sps}
