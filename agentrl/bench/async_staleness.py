"""Asynchronous training (``rollout.max_staleness=k``): throughput rows and learning curves.

Two measurements for ``python -m agentrl.bench async`` (:func:`async_row` makes its section
"training with bounded staleness"; ``--section staleness`` runs it alone) or for direct use:

- :func:`async_row`: one training run with staleness bound k; steady-state episodes/s,
  generated tokens/s and the learner's idle fraction (the share of each iteration the learner
  waits for its batch: the whole rollout when k = 0, only what the producer has not finished
  ahead of time when k >= 1), with the mean and max staleness and the groups dropped (always
  0: admission is paced). The first iteration (start-up, nothing played ahead yet) is left
  out.
- :func:`learning_curves`: the same job for several k and seeds; per k the mean training
  return over the last iterations with its 95% t-interval, and whether the intervals of all k
  overlap (:func:`curves_overlap`).

Every run is a plain ``agentrl.run`` training job in this process (Hydra overrides), so the
figures include everything an iteration does.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agentrl.bench.stats import interval_cell, t_interval

__all__ = [
    "async_row",
    "curves_overlap",
    "episodes_per_iter",
    "learning_curves",
    "row_markdown",
    "rows_markdown",
    "train_rows",
]

# A small Sokoban job: the default environment and model, a batch that fits a laptop CPU.
DEFAULT_JOB = (
    "rollout.n_tasks=4",
    "rollout.group_size=4",
    "trainer.eval_every=0",
    "trainer.progress=false",
    "trainer.save_every=0",
)


def train_rows(overrides: Sequence[str], out_dir: Path) -> list[dict]:
    """Run ``python -m agentrl.run <overrides>`` in this process; its metrics rows."""
    from agentrl.run import compose
    from agentrl.run.trainer import train

    cfg = compose([*overrides, f"trainer.out_dir={out_dir}"])
    level = logging.getLogger("agentrl").level
    logging.getLogger("agentrl").setLevel(logging.WARNING)  # one line per run, not per iter
    try:
        train(cfg, out_dir)
    finally:
        logging.getLogger("agentrl").setLevel(level)
    lines = (Path(out_dir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def async_row(
    k: int,
    iters: int = 5,
    seed: int = 0,
    job: Sequence[str] = DEFAULT_JOB,
    out_dir: Path | None = None,
) -> dict[str, float]:
    """Throughput of one run with ``rollout.max_staleness=k`` (k = 0: synchronous).

    Returns ``episodes_per_s``, ``gen_tokens_per_s``, ``learner_idle_frac`` (Σ wait for the
    batch / Σ iteration time), ``staleness_mean`` (of the iterations' means), ``staleness_max``,
    ``groups_dropped``, ``iteration_s`` and ``learner_s`` (credit and update; means), over
    iterations 2..``iters``.
    """
    if iters < 2:
        raise ValueError("async_row needs iters >= 2 (the first iteration is left out)")
    with tempfile.TemporaryDirectory(prefix="agentrl-async-") as tmp:
        out = Path(out_dir or tmp) / f"k{k}-s{seed}"
        rows = train_rows(
            [*job, f"trainer.steps={iters}", f"trainer.seed={seed}", f"rollout.max_staleness={k}"],
            out,
        )
    rows = [r for r in rows if r["iteration"] >= 2]
    wall = sum(r["perf/iteration_s"] for r in rows)
    n_eps = episodes_per_iter(job) * len(rows)
    return {
        "k": float(k),
        "episodes_per_s": n_eps / wall,
        "gen_tokens_per_s": sum(r["perf/decode_tokens"] for r in rows) / wall,
        "learner_idle_frac": sum(r["perf/rollout_s"] for r in rows) / wall,
        "staleness_mean": float(np.mean([r.get("rollout/staleness_mean", 0.0) for r in rows])),
        "staleness_max": float(max(r.get("rollout/staleness_max", 0.0) for r in rows)),
        "groups_dropped": float(rows[-1].get("rollout/groups_dropped", 0.0)),
        "iteration_s": wall / len(rows),
        "learner_s": sum(r["perf/credit_s"] + r["perf/learn_s"] for r in rows) / len(rows),
    }


def episodes_per_iter(job: Sequence[str]) -> int:
    from agentrl.run import compose

    rc = compose(list(job)).rollout
    return rc.n_tasks * rc.group_size


CURVES_JOB = ("trainer.eval_every=0", "trainer.progress=false", "trainer.save_every=0")
"""The default training job (``python -m agentrl.run``: 20 iterations of 8 tasks × 8 rollouts on
6×6 Sokoban), without its held-out evaluations (they do not change training) or checkpoints."""
ASYNC_LOSS = ("learner.loss=decoupled_ppo",)
"""What runs with k >= 1 add: the loss for stale samples (the default ``ppo`` clips against
the stale sampling policy itself, so tokens the learner has already moved past get no
gradient)."""


def learning_curves(
    ks: Sequence[int] = (0, 1, 2),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    iters: int | None = 20,
    last: int = 5,
    job: Sequence[str] = DEFAULT_JOB,
    metric: str = "env/return",
    cache: Path | None = None,
    async_extra: Sequence[str] = (),
) -> dict[int, dict]:
    """For each k: the per-seed curves of ``metric`` and the mean over the ``last`` iterations
    of each seed (the run's final level), with its 95% t-interval over seeds.

    ``iters`` None keeps the job's own ``trainer.steps``. With ``cache`` (a folder) each run's
    metric rows are kept there as ``k<k>-s<seed>.json`` and a run already there is not run
    again, so an interrupted measurement resumes where it stopped. ``async_extra``: overrides
    added to the runs with k >= 1 (:data:`ASYNC_LOSS`)."""
    out: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="agentrl-async-curves-") as tmp:
        for k in ks:
            curves, finals = [], []
            for seed in seeds:
                run_job = [*job, *(async_extra if k else ())]
                rows = _cached_run(run_job, iters, seed, k, Path(tmp), cache)
                curve = [r[metric] for r in rows if "iteration" in r and metric in r]
                curves.append(curve)
                finals.append(float(np.mean(curve[-last:])))
            mean, lo, hi = t_interval(finals)
            out[k] = {"curves": curves, "finals": finals, "mean": mean, "lo": lo, "hi": hi}
    return out


def _cached_run(
    job: Sequence[str], iters: int | None, seed: int, k: int, tmp: Path, cache: Path | None
) -> list[dict]:
    """The metric rows of one run of ``job`` (read from ``cache`` when it holds them, under a
    name that includes a hash of the run's overrides)."""
    import hashlib

    steps = [] if iters is None else [f"trainer.steps={iters}"]
    overrides = [*job, *steps, f"trainer.seed={seed}", f"rollout.max_staleness={k}"]
    digest = hashlib.sha1("\n".join(overrides).encode()).hexdigest()[:10]
    name = f"k{k}-s{seed}-{digest}"
    stored = Path(cache) / f"{name}.json" if cache is not None else None
    if stored is not None and stored.is_file():
        return json.loads(stored.read_text())
    rows = train_rows(overrides, tmp / name)
    if cache is not None:
        Path(cache).mkdir(parents=True, exist_ok=True)
        (Path(cache) / f"{name}.json").write_text(json.dumps(rows))
    return rows


def curves_overlap(result: dict[int, dict]) -> bool:
    """Whether the 95% intervals of every pair of k overlap."""
    ks = list(result)
    return all(
        result[a]["lo"] <= result[b]["hi"] and result[b]["lo"] <= result[a]["hi"]
        for i, a in enumerate(ks)
        for b in ks[i + 1 :]
    )


def row_markdown(r: dict, base: dict | None) -> str:
    """One throughput row (the columns of :func:`rows_markdown`'s table); ``base``: the k = 0
    row the ratio is over (None: "n/a")."""
    name = "synchronous (k=0)" if r["k"] == 0 else f"async k={int(r['k'])}"
    ratio = f"{r['episodes_per_s'] / base['episodes_per_s']:.2f}×" if base else "n/a"
    return (
        f"| {name} | {r['iteration_s']:.1f} | {r.get('learner_s', float('nan')):.1f} | "
        f"{r['episodes_per_s']:.2f} | "
        f"{r['gen_tokens_per_s']:.1f} | {ratio} | {r['learner_idle_frac']:.2f} | "
        f"{r['staleness_mean']:.2f} / {r.get('staleness_max', 0.0):.0f} | "
        f"{int(r['groups_dropped'])} |"
    )


def rows_markdown(rows: Sequence[dict], curves: dict[int, dict] | None = None) -> list[str]:
    """Markdown lines: the throughput table (ratios to k = 0 when it is there) and, with
    ``curves``, the final-return table."""
    base = next((r for r in rows if r["k"] == 0), None)
    lines = [
        "| mode | iteration s | learner s | episodes/s | gen tokens/s | vs k=0 | learner idle "
        "| staleness mean / max | groups dropped |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [row_markdown(r, base) for r in rows]
    if curves:
        lines += [
            "",
            "| k | final return (mean of last iterations, 95% CI over seeds) |",
            "|---|---|",
        ]
        lines += [f"| {k} | {interval_cell(v['finals'])} |" for k, v in curves.items()]
        lines += ["", f"Intervals overlap for every pair of k: **{curves_overlap(curves)}**."]
    return lines
