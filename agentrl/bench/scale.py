"""How the default job uses more compute: ``scale`` (``scale.md``) and ``threads`` (``threads.md``).

``python -m agentrl.bench scale`` (:func:`run`) has two parts.

1. The default job (Sokoban, GRPO, tiny model) with the same global batch once as a plain
   process and once as ``torchrun --nproc_per_node=2`` (gloo, DDP, one thread per rank), in
   alternating runs: per iteration, environment steps/s and generated tokens/s of the rollout,
   learner tokens/s and seconds, with the scaling efficiency (speed-up / 2). On a 2-core machine
   the ceiling is 2x and anything else running eats into it; the load is recorded.
2. Environment pools on ALFWorld (:func:`measure_pools`): the inline, process and Ray pools play
   the same generated games with the same commands. ``E`` environments reset with seeds
   ``0..E-1`` (the seed picks the game), then ``T`` batch steps in which every environment takes
   a random admissible command from a generator seeded with its index; an episode that ends is
   reset and plays on. The environments are deterministic, so the transcripts (observation,
   reward, end flags) of every pool must be the same. Steps/s counts the time in ``pool.step``
   (resets excluded); the pools take turns in :data:`ROUNDS` rounds, so that a change of the
   machine's load touches them all alike; start-up is reported on its own. Without Ray (or
   ALFWorld) the committed row (section) is kept, marked (:func:`pools_section`).

``python -m agentrl.bench threads`` (:func:`run_threads`): torch defaults to one intra-op thread
per core; on a shared CPU those threads oversubscribe the cores and wait on each other, and for
the tiny model the work per matrix product is too small for threads to pay back their
synchronisation. It runs the default job once per thread count and condition, alternating the
counts so a drift of the machine's speed touches all of them alike, and reports the median
``perf/iteration_s`` of each and its ratio to one thread. ``busy`` conditions first start that
many single-core busy-loop processes, standing in for the other jobs of a shared machine.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.bench._report import (
    SCRATCH,
    cache_dir,
    header,
    kept_rows,
    kept_section,
    missing,
    read_metrics,
    render,
    run_agentrl,
    write_markdown,
)

ROUNDS = 5
"""The pools play their batch steps in this many rounds, taking turns."""
SECTION = "Environment pools on ALFWorld"
"""The section of ``scale.md`` that :func:`pools_section` fills."""
FIGURES: dict[str, tuple[str, Callable[[dict], float]]] = {
    "env_steps_per_s": ("env steps/s (rollout)",
                        lambda r: r["env/length"] * 64 / r["perf/rollout_s"]),
    "gen_tokens_per_s": ("generated tokens/s", lambda r: r["perf/gen_tokens_per_s"]),
    "learn_tokens_per_s": ("learner tokens/s", lambda r: r["perf/learn_tokens_per_s"]),
    "iteration_s": ("s / iteration", lambda r: r["perf/iteration_s"]),
}  # fmt: skip
"""The figures of one process against two ranks: name → (its row in the report, its value in
one iteration's metrics; 64 = 8 tasks x 8 rollouts)."""


def _iterations(
    overrides: Sequence[str], out: Path, launcher: Sequence[str] = (), env: dict | None = None
) -> list[dict]:
    """Run the default job without evaluation; its metric rows after the first (a warm-up)."""
    args = [*overrides, "trainer.eval_every=0", "trainer.progress=false"]
    run_agentrl(args, out, launcher=launcher, env=env)
    return [r for r in read_metrics(out) if r["iteration"] > 1]


def _run(world: int, steps: int, out: Path) -> dict[str, float]:
    """Median per-iteration :data:`FIGURES` of one run on ``world`` ranks."""
    launcher = []
    if world > 1:
        launcher = ["torch.distributed.run", "--standalone", f"--nproc_per_node={world}", "-m"]
    overrides = ["rollout.n_tasks=8", "rollout.group_size=8", f"trainer.steps={steps}"]
    rows = _iterations(overrides, out, launcher, {**os.environ, "OMP_NUM_THREADS": "1"})
    return {k: statistics.median(map(fn, rows)) for k, (_, fn) in FIGURES.items()}


def run(
    out_dir: str | os.PathLike = SCRATCH,
    quick: bool = False,
    log: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """Measure both parts and write ``<out_dir>/scale.md``."""
    steps = 3 if quick else 6
    tmp = Path(tempfile.mkdtemp(prefix="agentrl-scale-"))
    figures: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    loads = []
    for r in range(1 if quick else 2):  # alternate, so a drift of the load hits both
        for world in (1, 2):
            t0 = time.perf_counter()
            figures[world].append(_run(world, steps, tmp / f"w{world}-r{r}"))
            loads.append(os.getloadavg()[0])
            log(f"[scale] world {world} run {r}: {time.perf_counter() - t0:.0f} s")
    med = {w: {k: statistics.median(f[k] for f in figures[w]) for k in FIGURES} for w in (1, 2)}
    rows = []
    for k, (name, _) in FIGURES.items():
        one, two = med[1][k], med[2][k]
        speed = one / two if k == "iteration_s" else two / one
        rows.append(f"| {name} | {one:,.1f} | {two:,.1f} | {speed:.2f}x | {speed / 2:.0%} |")
    pools = measure_pools(quick, log)
    text = render(
        "scale",
        head=header(("torch", "ray"), "python -m agentrl.bench scale", quick),
        steps=steps,
        loads=f"{min(loads):.1f}-{max(loads):.1f}",
        rows="\n".join(rows),
        pools=pools_section(pools),
    )
    path = write_markdown(Path(out_dir) / "scale.md", text.rstrip() + "\n")
    log(f"[scale] wrote {path}")
    return {"world": med, "pools": pools}


# --- environment pools ---


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
    commands; the process and Ray pools get a worker per CPU core). Returns one row per pool:
    ``pool``, ``workers``, ``envs``, ``steps``, ``steps_per_s``, ``start_s``, ``load`` (the
    1-minute load average, mean over the rounds) and ``same`` (transcript identical to the
    inline pool's). Pools whose extra is missing (alfworld, ray) are skipped with a log line."""
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
    if missing("ray"):
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


def _ray_row(cells: list[str]) -> str | None:
    return "ray" if cells[0].startswith("ray") else None


def pools_section(rows: list[dict[str, Any]], committed: str | os.PathLike | None = None) -> str:
    """The rows of :func:`measure_pools` as a markdown table with a sentence on what it shows.

    A pool whose extra is missing here is not dropped: without ALFWorld (no rows at all) the
    committed report's section is copied whole, without Ray its committed row is; both are
    marked as from the committed run (``committed``: the committed reports' folder, default
    :func:`~agentrl.bench._report.committed_dir`)."""
    if not rows:
        why = "the alfworld extra is not installed"
        body = kept_section("scale.md", SECTION, "alfworld", why, committed)[0]
        return body or render("scale", "pools_none")
    kept: dict[str, str] = {}
    if not any(r["pool"] == "ray" for r in rows):
        kept = kept_rows("scale.md", SECTION, _ray_row, "Ray", committed)[0]
    inline = next((r for r in rows if r["pool"] == "inline"), rows[0])
    table = [
        f"| {r['pool']} | {r['workers'] or '-'} | {r['envs']} | {r['steps']} "
        f"| {r['steps_per_s']:,.1f} | {r['steps_per_s'] / inline['steps_per_s']:.2f}x "
        f"| {r['start_s']:.1f} | {r['load']:.1f} | {'yes' if r['same'] else 'NO'} |"
        for r in rows
    ]
    by = {r["pool"]: r for r in rows}
    ms = f"{1e3 / inline['steps_per_s']:.1f}"
    text = [render("scale", "pools_intro", envs=inline["envs"], rounds=ROUNDS, ms=ms)]
    for kind in ("process", "ray"):
        if kind in by:
            ratio = f"{by[kind]['steps_per_s'] / inline['steps_per_s']:.2f}"
            text.append(render("scale", "pools_versus", kind=kind, workers=by[kind]["workers"],
                               ratio=ratio))  # fmt: skip
    load = f"{max(r['load'] for r in rows):.1f}"
    text.append(render("scale", "pools_cost", cores=os.cpu_count(), load=load))
    if "ray" in by:
        text.append(render("scale", "pools_ray_start", start=f"{by['ray']['start_s']:.0f}"))
    if kept:
        text.append(render("scale", "pools_ray_kept"))
    rows_text = "\n".join([*table, *kept.values()])
    return render("scale", "pools", rows=rows_text, text=" ".join(text))


# --- threads ---


def _spin() -> None:
    while True:
        pass


def _iteration_seconds(threads: int, steps: int, out: Path) -> list[float]:
    rows = _iterations([f"trainer.steps={steps}", f"trainer.num_threads={threads}"], out)
    return [r["perf/iteration_s"] for r in rows]


def run_threads(
    out_dir: str | os.PathLike = SCRATCH,
    quick: bool = False,
    log: Callable[[str], Any] = print,
) -> dict[tuple[int, int], float]:
    """Measure and write ``<out_dir>/threads.md``; return {(busy, threads): median seconds}."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    counts = sorted({1, 2, cores})
    busy_levels = (0, 1) if quick else (0, cores)
    steps, repeats = (3, 1) if quick else (5, 2)
    medians: dict[tuple[int, int], float] = {}
    loads: dict[int, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="agentrl-threads-"))
    for busy in busy_levels:
        spinners = [mp.Process(target=_spin, daemon=True) for _ in range(busy)]
        for p in spinners:
            p.start()
        try:
            times: dict[int, list[float]] = {n: [] for n in counts}
            for r in range(repeats):
                for n in counts:
                    times[n] += _iteration_seconds(n, steps, tmp / f"b{busy}-t{n}-r{r}")
                    log(f"[threads] busy={busy} threads={n}: {statistics.median(times[n]):.2f} s")
            loads[busy] = os.getloadavg()[0]
        finally:
            for p in spinners:
                p.terminate()
        for n in counts:
            medians[(busy, n)] = statistics.median(times[n])
    rows = [
        f"| {busy} | {loads[busy]:.1f} | {n} | {medians[(busy, n)]:.2f} "
        f"| {medians[(busy, n)] / medians[(busy, 1)]:.2f}x |"
        for busy in busy_levels
        for n in counts
    ]
    head = header(("torch",), "python -m agentrl.bench threads", quick)
    text = render("threads", head=head, steps=steps, repeats=repeats, rows="\n".join(rows))
    path = write_markdown(Path(out_dir) / "threads.md", text + "\n")
    log(f"[threads] wrote {path}")
    return medians
