"""Environment pools on ALFWorld: env steps/s of the inline, process and Ray pools.

Every pool plays the same generated ALFWorld games with the same commands: ``E`` environments
reset with seeds ``0..E-1`` (the seed picks the game), then ``T`` batch steps in which every
environment takes a random admissible command from a generator seeded with its index; an
episode that ends is reset and plays on. The environments are deterministic, so every pool
sees the same states and sends the same commands; the transcripts (observation, reward, end
flags) are compared across pools. Steps/s counts the time spent in ``pool.step`` (resets
excluded, as in ``env-speed``). The pools take turns, in :data:`ROUNDS` rounds of ``T /
ROUNDS`` batch steps each, so that a change in the machine's load touches them all alike.
Start-up (building the environments, for Ray also starting a local Ray) is reported on its
own. The process and Ray pools get ``W`` workers (the CPU cores).

Called by ``python -m agentrl.bench scale``: :func:`measure_pools` returns the rows,
:func:`pools_section` renders them as markdown.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from agentrl.bench._report import (
    cache_dir,
    committed_section,
    kept_body,
    kept_note,
    mark_kept,
    table_rows,
)

ROUNDS = 5
"""The pools play their batch steps in this many rounds, taking turns."""


class _Player:
    """One pool's run: its environments' commands, states and transcript, played in chunks."""

    def __init__(self, pool, n_envs: int):
        self.pool = pool
        self.rngs = [np.random.default_rng(j) for j in range(n_envs)]
        self.infos = [info for _, info in pool.reset([(j, j, None) for j in range(n_envs)])]
        self.step_s, self.steps, self.transcript = 0.0, 0, []

    def play(self, turns: int) -> None:
        for _ in range(turns):
            jobs = []
            for j, info in enumerate(self.infos):
                adm = info["admissible_actions"] or ["look"]
                jobs.append((j, adm[int(self.rngs[j].integers(len(adm)))]))
            t0 = time.perf_counter()
            res = self.pool.step(jobs)
            self.step_s += time.perf_counter() - t0
            self.steps += len(jobs)
            self.transcript.append([(obs, r, term, trunc) for obs, r, term, trunc, _ in res])
            self.infos = [r[4] for r in res]
            ended = [j for j, r in enumerate(res) if r[2] or r[3]]
            if ended:
                again = self.pool.reset([(j, None, None) for j in ended])
                for j, (_, info) in zip(ended, again):
                    self.infos[j] = info


def measure_pools(quick: bool, log: Callable[[str], Any] = print) -> list[dict[str, Any]]:
    """Env steps/s of the inline, process and Ray pools on ALFWorld (the same games and
    commands). Returns one row per pool: ``pool``, ``workers``, ``envs``, ``steps``,
    ``steps_per_s``, ``start_s``, ``load`` (the 1-minute load average, mean over the rounds)
    and ``same`` (transcript identical to the inline pool's). Pools whose extra is missing
    (alfworld, ray) are skipped with a log line."""
    try:
        from agentrl.envs.alfworld import data  # noqa: F401 - the alfworld extra
    except ImportError as exc:  # pragma: no cover - optional extra
        log(f"[scale] env pools skipped: ALFWorld is not installed ({exc})")
        return []
    from agentrl.rollout.env_pool import PoolConfig
    from agentrl.rollout.pools import make_pool

    n_games, n_envs, turns = (4, 4, 100) if quick else (6, 8, 200)
    workers = os.cpu_count() or 1
    kwargs = {"generated_games": n_games, "cache_dir": cache_dir("alfworld"), "progress": False}
    t0 = time.perf_counter()
    make_pool("alfworld", kwargs, 1, PoolConfig(kind="process", workers=1)).close()  # prepare
    log(f"[scale] ALFWorld: {n_games} generated games ready in {time.perf_counter() - t0:.0f} s")
    kinds: list[tuple[str, int]] = [("inline", 1), ("process", workers)]
    try:
        import ray  # noqa: F401 - the ray extra
    except ImportError:
        log('[scale] Ray pool skipped: Ray is not installed (pip install -e ".[ray]")')
    else:
        kinds.append(("ray", workers))
    players: dict[str, _Player] = {}
    rows: list[dict[str, Any]] = []
    try:
        for kind, w in kinds:
            log(f"[scale] {kind} pool: {n_envs} envs, {w} worker(s)")
            t0 = time.perf_counter()
            pool = make_pool("alfworld", kwargs, n_envs, PoolConfig(kind=kind, workers=w))
            rows.append({"pool": kind, "workers": w if kind != "inline" else 0,
                         "envs": n_envs, "start_s": time.perf_counter() - t0})  # fmt: skip
            players[kind] = _Player(pool, n_envs)
        # Rounds, the pools in turn: a change in the machine's load touches them all alike.
        loads = []
        for r in range(ROUNDS):
            for player in players.values():
                player.play(turns // ROUNDS)
            loads.append(os.getloadavg()[0])
            log(f"[scale] round {r + 1}/{ROUNDS}, load {loads[-1]:.1f}")
    finally:
        for player in players.values():
            player.pool.close()
    reference = players["inline"].transcript
    for row in rows:
        player = players[row["pool"]]
        row.update(steps=player.steps, steps_per_s=player.steps / player.step_s,
                   load=float(np.mean(loads)), same=player.transcript == reference)  # fmt: skip
        log(f"[scale]   {row['pool']}: {row['steps_per_s']:,.1f} steps/s")
    if any(r["pool"] == "ray" for r in rows):
        from agentrl.rollout.ray_pool import shutdown_local_ray

        shutdown_local_ray()  # its idle processes would disturb what is measured next
    return rows


SECTION = "Environment pools on ALFWorld"
"""The section of ``scale.md`` that :func:`pools_section` fills."""


def pools_section(rows: list[dict[str, Any]], committed: str | os.PathLike | None = None) -> str:
    """The rows of :func:`measure_pools` as a markdown table with a sentence on what it shows.

    A pool whose extra is missing here is not dropped: without ALFWorld (no rows at all) the
    committed report's section is copied whole, without Ray its committed row is; both are
    marked as from the committed run (``committed``: the committed reports' folder, default
    :func:`~agentrl.bench._report.committed_dir`)."""
    body, date = committed_section("scale.md", SECTION, committed)
    if not rows:
        if body and body.strip():
            return kept_body(
                body, kept_note("alfworld", date), "the alfworld extra is not installed"
            )
        return "Environment pools: not measured (the alfworld extra is not installed)."
    kept = []
    if not any(r["pool"] == "ray" for r in rows):
        note = kept_note("Ray", date)
        kept = [
            mark_kept(ln, note)
            for ln, cells in table_rows(body or "")
            if cells[0].startswith("ray")
        ]
    inline = next((r for r in rows if r["pool"] == "inline"), rows[0])
    lines = [
        "| pool | workers | envs | steps | steps/s | vs inline | start s | load | same "
        "transcript |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['pool']} | {r['workers'] or '-'} | {r['envs']} | {r['steps']} "
            f"| {r['steps_per_s']:,.1f} | {r['steps_per_s'] / inline['steps_per_s']:.2f}x "
            f"| {r['start_s']:.1f} | {r['load']:.1f} | {'yes' if r['same'] else 'NO'} |"
        )
    lines += kept
    by = {r["pool"]: r for r in rows}
    load = max(r["load"] for r in rows)
    ms = 1e3 / inline["steps_per_s"]
    text = (
        f"ALFWorld over {inline['envs']} environments (generated games, random admissible "
        f"commands, the same for every pool; resets excluded; the pools took turns in "
        f"{ROUNDS} rounds). An ALFWorld step costs {ms:.1f} ms inline."
    )
    for kind in ("process", "ray"):
        if kind in by:
            text += (
                f" The {kind} pool ({by[kind]['workers']} workers) steps at "
                f"{by[kind]['steps_per_s'] / inline['steps_per_s']:.2f}x the inline rate."
            )
    text += (
        f" Each batch step of a worker pool also pays a round trip per worker (a pipe for "
        f"processes, a task through Ray's scheduler for Ray), and here its workers share "
        f"{os.cpu_count()} cores with other work (load {load:.1f}), which bounds what they "
        "can gain; they pay off with slower environments and more cores, and Ray with other "
        "machines."
    )
    if "ray" in by:
        text += (
            f" The Ray pool's start-up ({by['ray']['start_s']:.0f} s) includes starting a "
            "local Ray."
        )
    if kept:
        text += (
            " Ray is not installed here: its row is from the committed run (its steps/s and "
            "'vs inline' are that run's, against that run's inline pool)."
        )
    return "\n".join([*lines, "", text])
