"""Does training improve the agent? ``python -m agentrl.bench learning``.

Trains the tiny model on small Sokoban with each credit estimator (GRPO, GiGPO, CRBC and every
other registered one unless ``--algos`` narrows the list) on the same budget and the same seeds,
each run in its own process via ``python -m agentrl.run``. Every run evaluates the untrained
policy (iteration 0) and then every ``eval_every`` iterations on the same held-out seeds. The
report compares the final evaluation success with the untrained one per estimator: mean over
seeds with a 95% t-interval, whether those intervals are disjoint, whether the per-seed ranges
are disjoint, and how many runs improved. It writes
``results/learning_sokoban.md`` and ``results/learning_sokoban.png`` (success vs environment
steps).

Estimators registered with ``learner_hints`` (e.g. GAGPO's step-level ratio) run with those
learner settings; everything else is identical across estimators. The policy objectives of
:data:`OBJECTIVES` (``learner.loss`` and ``learner.token_weights``, each with its paper defaults
and the credit it was designed with) run on the same budget and are reported beside them.

Options (after the benchmark name): ``--algos grpo,gigpo,crbc``, ``--seeds 3``,
``--iterations 40``, ``--jobs 1`` (runs in parallel; 1 on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

import numpy as np

from agentrl.bench._report import read_metrics, run_agentrl
from agentrl.credit import get_estimator, list_estimators

# The budget, identical for every estimator: 8 tasks x 8 rollouts per iteration on 6x6 Sokoban
# with one box and 15 steps; prompts show the current grid only (no history) and responses are
# at most 3 tokens (the tiny model answers with the bare move).
BUDGET = [
    "env=sokoban",
    "model=tiny",
    "rollout.n_tasks=8",
    "rollout.group_size=8",
    "rollout.history_length=0",
    "rollout.max_new_tokens=3",
    "rollout.eval_temperature=1.0",
    "learner.lr=5e-3",
    "learner.ppo_epochs=2",
    "learner.mini_batch_steps=256",
    "trainer.eval_episodes=64",
    "trainer.save_every=0",
    "trainer.progress=false",
]


# Policy objectives (agentrl.learn.policy_loss), by report name: the overrides of each run. Same
# budget (64 episodes per iteration); the loss options are the paper defaults (no loss_args).
# KLPO and negative-token filtering are single-rollout methods: 64 tasks x 1 rollout, no group.
OBJECTIVES: dict[str, list[str]] = {
    "cispo": ["algo=grpo", "learner.loss=cispo"],
    "klpo": [
        "algo=grpo",
        "algo.norm_by_std=false",
        "rollout.n_tasks=64",
        "rollout.group_size=1",
        "learner.loss=klpo",
    ],
    "bpo": ["algo=grpo", "algo.norm_by_std=false", "learner.loss=bpo"],
    "vimpo": ["algo=grpo", "algo.norm_by_std=false", "learner.loss=vimpo"],
    "grpo+taco": ["algo=grpo", "learner.token_weights=[taco]"],
    "reinforce_pp+ntf": [
        "algo=reinforce_pp",
        "rollout.n_tasks=64",
        "rollout.group_size=1",
        "learner.token_weights=[ntf]",
    ],
    "grpo+reward_balanced": ["algo=grpo", "learner.batching=reward_balanced"],
}


def _method_args(name: str) -> list[str]:
    """The overrides of a method: an objective of :data:`OBJECTIVES`, or an estimator (with
    its learner hints)."""
    if name in OBJECTIVES:
        return list(OBJECTIVES[name])
    return [f"algo={name}", *(f"learner.{k}={v}" for k, v in get_estimator(name).learner_hints)]


def _t_interval(x: np.ndarray) -> tuple[float, float, float]:
    """Mean and 95% t-interval of ``x`` (n ≥ 2)."""
    from scipy import stats

    m = float(np.mean(x))
    if len(x) < 2:
        return m, m, m
    half = float(stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x)))
    return m, m - half, m + half


def _run_one(algo: str, seed: int, iterations: int, eval_every: int, out: Path) -> dict:
    """Train one (method, seed) in a subprocess; return its metrics rows."""
    run_agentrl(
        [
            *BUDGET,
            f"trainer.seed={seed}",
            f"trainer.steps={iterations}",
            f"trainer.eval_every={eval_every}",
            *_method_args(algo),
        ],
        out,
    )
    return _load_run(algo, seed, out)


def _reevaluate(seed: int, episodes: int, out: Path, checkpoint: Path | None) -> float:
    """Eval success of the untrained policy of ``seed`` (no checkpoint) or of a checkpoint on
    ``episodes`` held-out seeds (an evaluation-only run, ``trainer.steps=0``); cached."""
    done = out / "metrics.jsonl"
    if not done.exists():
        args = [
            *(b for b in BUDGET if not b.startswith("trainer.eval_episodes=")),
            f"trainer.seed={seed}",
            "trainer.steps=0",
            "trainer.eval_every=1",
            f"trainer.eval_episodes={episodes}",
        ]
        if checkpoint is not None:
            args.append(f"model.name_or_path={checkpoint}")
        run_agentrl(args, out)
    return float(json.loads(done.read_text().splitlines()[0])["eval/success"])


def _load_run(algo: str, seed: int, out: Path) -> dict:
    """A finished run's metrics rows (and wall time) from its output directory."""
    rows = read_metrics(out)
    wall = out / "wall_s"
    hints = [a for a in _method_args(algo) if a != f"algo={algo}"]
    return {
        "algo": algo,
        "seed": seed,
        "rows": rows,
        "hints": hints,
        "wall_s": float(wall.read_text()) if wall.exists() else float("nan"),
    }


def _curve(rows: list[dict], batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(environment steps so far, eval success) at every evaluation, iteration 0 included."""
    steps, xs, ys = 0.0, [], []
    for r in rows:
        if r["iteration"] > 0:
            steps += r["env/length"] * batch
        if "eval/success" in r:
            xs.append(steps)
            ys.append(r["eval/success"])
    return np.array(xs), np.array(ys)


def run(out_dir: str = "results", quick: bool = False, log=print, argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog="python -m agentrl.bench learning")
    parser.add_argument("--algos", default="", help="comma-separated (default: all registered)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--reeval-episodes",
        type=int,
        default=512,
        help="episodes of the precise evaluation of the untrained and final policies",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the report from the runs already in <out>/.learning_runs",
    )
    opts = parser.parse_args(argv or [])
    # Estimators with their own rollout driver (AC2: prefixes of long single-turn attempts)
    # do not apply to multi-turn Sokoban.
    algos = [a for a in opts.algos.split(",") if a] or [
        *(a for a in list_estimators() if not get_estimator(a).driver),
        *OBJECTIVES,
    ]
    seeds = list(range(opts.seeds))
    iterations, eval_every = opts.iterations, opts.eval_every
    if quick:
        algos, seeds, iterations, eval_every = algos[:2], seeds[:2], 2, 1
    out_dir = Path(out_dir)
    work = out_dir / ".learning_runs"
    jobs = [(a, s) for s in seeds for a in algos]
    log(f"[learning] {len(jobs)} runs: {algos} x seeds {seeds}, {iterations} iterations each")
    t0 = time.perf_counter()
    if opts.report_only:
        results = [_load_run(a, s, work / f"{a}_seed{s}") for a, s in jobs]
    else:
        with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
            results = list(
                pool.map(
                    lambda j: _run_one(
                        j[0], j[1], iterations, eval_every, work / f"{j[0]}_seed{j[1]}"
                    ),
                    jobs,
                )
            )
    # Precise evaluations: the untrained policy of each seed (the same for every estimator)
    # and every final checkpoint, on many more held-out seeds than the in-training evals.
    n_re = 16 if quick else opts.reeval_episodes
    log(f"[learning] re-evaluating untrained and final policies on {n_re} episodes each")

    def final(r: dict) -> float:
        run_dir = work / f"{r['algo']}_seed{r['seed']}"
        ckpt = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
        return _reevaluate(r["seed"], n_re, run_dir / f"eval{n_re}", ckpt)

    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        untrained = dict(
            zip(
                seeds,
                pool.map(
                    lambda s: _reevaluate(s, n_re, work / f"untrained_seed{s}_eval{n_re}", None),
                    seeds,
                ),
            )
        )
        for r, value in zip(results, pool.map(final, results)):
            r["final_precise"] = value
    total = sum(r["wall_s"] for r in results) if opts.report_only else time.perf_counter() - t0
    batch = 8 * 8
    per_algo: dict[str, list[dict]] = {a: [r for r in results if r["algo"] == a] for a in algos}
    m0, lo0, hi0 = _t_interval(np.array(list(untrained.values())))
    lines = [
        "# Learning on Sokoban with the tiny model",
        "",
        f"Machine: 2 CPU cores, no GPU; {platform.python_implementation()} "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f} at the end. "
        f"Date: {date.today()}. Wall time: {total / 60:.1f} min for {len(jobs)} runs.",
        f"Reproduce: `python -m agentrl.bench learning --seeds {len(seeds)} "
        f"--iterations {iterations}` (add `--algos a,b` for a subset).",
        "",
        "Budget, identical for every estimator and seed: "
        + " ".join(f"`{b}`" for b in BUDGET)
        + f", `trainer.steps={iterations}` ({iterations * batch} episodes). "
        "Evaluation: held-out seeds (never used for training), sampled at temperature 1.0 "
        "(the tiny model's greedy answer repeats one move forever). The untrained policy of "
        f"each seed (iteration 0, the same for every estimator) and each final policy are "
        f"re-evaluated on {n_re} held-out episodes (`trainer.steps=0` evaluation-only runs); "
        "the in-training evaluations (64 episodes) give the curves. Intervals are 95% "
        "t-intervals over seeds.",
        "",
        f"Untrained policy ({n_re} episodes per seed): "
        + ", ".join(f"seed {s}: {v:.3f}" for s, v in untrained.items())
        + f"; mean {m0:.3f} [{lo0:.3f}, {hi0:.3f}].",
        "",
        "| estimator | final eval success | gain | t-intervals disjoint? | seed ranges "
        "disjoint? | runs improved | final train success | final invalid rate | min/run |",
        "|---|---:|---:|---|---|---:|---:|---:|---:|",
    ]
    for a, runs in per_algo.items():
        first = np.array([untrained[r["seed"]] for r in runs])
        last = np.array([r["final_precise"] for r in runs])
        m1, lo1, hi1 = _t_interval(last)
        tail = [r["rows"][-1] for r in runs]
        train = np.mean([t.get("env/success", np.nan) for t in tail])
        invalid = np.mean([t.get("env/invalid_rate", np.nan) for t in tail])
        note = " (" + ", ".join(runs[0]["hints"]) + ")" if runs[0]["hints"] else ""
        lines.append(
            f"| {a}{note} | {m1:.3f} [{lo1:.3f}, {hi1:.3f}] "
            f"| {m1 - m0:+.3f} | {'yes' if lo1 > hi0 else 'no'} "
            f"| {'yes' if last.min() > first.max() else 'no'} ({first.min():.3f}-"
            f"{first.max():.3f} vs {last.min():.3f}-{last.max():.3f}) "
            f"| {int((last > first).sum())}/{len(runs)} | {train:.3f} | {invalid:.3f} "
            f"| {np.mean([r['wall_s'] for r in runs]) / 60:.1f} |"
        )
    lines += ["", "Per seed (eval success at each evaluation, iteration 0 first):", ""]
    for r in results:
        ys = _curve(r["rows"], batch)[1]
        lines.append(f"- {r['algo']} seed {r['seed']}: " + ", ".join(f"{y:.3f}" for y in ys))
    lines += ["", "![success vs environment steps](learning_sokoban.png)", ""]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "learning_sokoban.md").write_text("\n".join(lines))
    _plot(per_algo, batch, out_dir / "learning_sokoban.png")
    log(f"[learning] wrote {out_dir / 'learning_sokoban.md'} in {total:.0f} s")


def _plot(per_algo: dict[str, list[dict]], batch: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for a, runs in per_algo.items():
        curves = [_curve(r["rows"], batch) for r in runs]
        n = min(len(c[1]) for c in curves)
        xs = np.mean([c[0][:n] for c in curves], axis=0)
        ys = np.array([c[1][:n] for c in curves])
        ax.plot(xs, ys.mean(0), marker="o", label=a)
        if len(runs) > 1:
            ax.fill_between(xs, ys.min(0), ys.max(0), alpha=0.15)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("eval success (held-out seeds)")
    ax.set_title("Sokoban 6x6, tiny model: mean over seeds (band: min-max)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
