"""Thread-count benchmark: the default job's iteration time for each torch thread count,
on the machine as it is and with competing processes (``threads.md``).

torch defaults to one intra-op thread per core. On a shared CPU those threads oversubscribe
the cores and wait on each other, and for the tiny model the work per matrix product is too
small for threads to pay back their synchronisation. The benchmark runs ``python -m
agentrl.run`` (the default config, a few iterations, no evaluation) once per thread count and
condition, alternating the counts so a drift of the machine's speed touches all of them alike,
and reports the median ``perf/iteration_s`` of each and its ratio to one thread. ``busy``
conditions start that many single-core busy-loop processes first, standing in for the other
jobs of a shared machine; the load average of each condition is recorded.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.bench._report import SCRATCH, header, read_metrics, run_agentrl, write_markdown


def _spin() -> None:
    while True:
        pass


def _iteration_seconds(threads: int, steps: int, out: Path) -> list[float]:
    run_agentrl(
        [
            f"trainer.steps={steps}",
            "trainer.eval_every=0",
            "trainer.progress=false",
            f"trainer.num_threads={threads}",
        ],
        out,
    )
    rows = read_metrics(out)
    return [r["perf/iteration_s"] for r in rows if r["iteration"] > 1]  # the first warms up


def run(
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
    lines = [
        "# Threads: iteration time of the default job by torch thread count",
        "",
        *header(("torch",), "python -m agentrl.bench threads", quick),
        "",
        "`python -m agentrl.run` (sokoban, grpo, tiny model; 8 tasks x 8 rollouts) for "
        f"{steps} iterations, {repeats} run(s) per cell, no evaluation; median seconds per "
        "iteration after the first. *busy* = busy-loop processes started beside it (other jobs "
        "of a shared machine).",
        "",
        "| busy processes | load average | threads | s / iteration | vs 1 thread |",
        "|---:|---:|---:|---:|---:|",
    ]
    for busy in busy_levels:
        for n in counts:
            ratio = medians[(busy, n)] / medians[(busy, 1)]
            lines.append(
                f"| {busy} | {loads[busy]:.1f} | {n} | {medians[(busy, n)]:.2f} | {ratio:.2f}x |"
            )
    lines += [
        "",
        "`trainer.num_threads=0` (the default) uses `OMP_NUM_THREADS` when set, otherwise the "
        "cores the load average leaves free (all of them when idle, one here when a busy "
        "process runs beside it); the run logs its choice.",
    ]
    path = write_markdown(Path(out_dir) / "threads.md", "\n".join(lines) + "\n")
    log(f"[threads] wrote {path}")
    return medians
