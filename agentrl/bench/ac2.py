"""AC2 vs GRPO on proof derivations with the tiny model: ``python -m agentrl.bench ac2``.

Both methods train the tiny model on ``env=proof`` (generated derivation problems, graded 0–7
by the mechanical checker) from the same warm start and seeds, each run in its own process
through ``python -m agentrl.run``. GRPO samples ``n_tasks × group_size`` full attempts per
iteration; AC2 refills its buffer with ``n_refill`` attempts and continues ``n_batch`` prefixes
``group_size`` times, in chunks once a problem is ready. Every run evaluates on the validation
problems every ``eval_every`` iterations (mean reward = points / 7).

The warm start (:func:`warm_start`) is ``agentrl.run.sft`` (behaviour cloning of the proof
environment's reference derivations) at difficulty 1, where the tiny model writes a full-marks
attempt about half the time, so AC2 banks references and its readiness rule can fire; the report
gives the warm start's points histogram (:func:`points_histogram`).

The report gives, per method, the peak and final validation score with a 95% t-interval over
seeds, the decoding tokens each seed had spent when it first reached GRPO's peak (the paper's
compute measure is decoding FLOPs = 2 × parameters × generated tokens; with one model both give
the same ratio), and for AC2 the ready fraction, ready problems and critic error over time.
Writes ``results/ac2.md`` and ``results/ac2.png``.
Options: ``--seeds 3 --iterations 240 --eval-every 30 --sft-steps 1500 --report-only``.
"""

from __future__ import annotations

import argparse
import os
from datetime import date
from pathlib import Path

import numpy as np

from agentrl.bench._report import cpu_name, read_metrics, run_agentrl, version
from agentrl.bench.stats import t_interval

ENV = ["env=proof", "env.difficulty=[1]"]
"""One-step derivations: the tiny model's warm start scores about 0.4 on them (0.04 on the
default mix of difficulties 1-3, where no attempt ever reached 6/7 and readiness never fired)."""
COMMON = [
    *ENV,
    "model=tiny",
    "rollout.max_new_tokens=48",
    "rollout.history_length=0",
    "rollout.eval_temperature=1.0",
    "rollout.invalid_penalty=0",  # the validation score is then exactly mean points / 7
    "learner.lr=2e-4",  # at 1e-3 GRPO's training return fell to 0 within 80 iterations
    "trainer.eval_episodes=96",
    "trainer.save_every=0",
    "trainer.progress=false",
]
SFT = ["sft.episodes=1000", "sft.lr=3e-3", "sft.batch_size=32", "sft.seed=0", "sft.log_every=100"]
"""Warm start: 1000 demonstration episodes (about 630 of the 1000 training problems)."""
METHODS: dict[str, list[str]] = {
    # Same number of trained continuations per iteration: 8 x 4 = 32.
    "grpo": ["algo=grpo", "algo.norm_by_std=false", "rollout.n_tasks=8", "rollout.group_size=4"],
    "ac2": [
        "algo=ac2",
        # A problem stays buffer_capacity / n_refill = 16 iterations in the buffer and is drawn
        # n_batch / n_refill = 2 times in expectation, so a problem whose critic error was
        # measured is often drawn again (readiness needs that error first).
        "algo.n_refill=4",
        "algo.n_batch=8",
        "algo.group_size=4",
        # Attempts are ~16 tokens: chunks of 8 give prefixes cut at 0 and 8 and chunks that end
        # before the attempt does (valued by the critic); with 16 the only cut was 0 (16 > 0.9 L)
        # and most chunks ended the attempt, leaving the critic little to value.
        "algo.chunk_tokens=8",
        "algo.budget_tokens=48",
    ],
}
# Banking each task's own reference solution as well (readiness then waits only on the critic).
METHODS["ac2_given_ref"] = [*METHODS["ac2"], "algo.bank_given_reference=true"]
AC2_METHODS = ("ac2", "ac2_given_ref")


def warm_start(out: Path, steps: int, seed: int = 0) -> Path:
    """The tiny model behaviour-cloned on reference derivations (both methods start from it).

    ``python -m agentrl.sft`` with :data:`SFT`: (problem prompt → reference solution) pairs of
    the training split. From scratch the tiny model writes bytes the grader cannot read, so no
    method would get a reward; after this it writes legible one-step derivations, about half of
    them correct.
    """
    path = out / "sft"
    if (path / "config.json").exists():
        return path
    from agentrl.run.sft import compose_sft, train_sft

    run_cfg, cfg = compose_sft([*COMMON, f"trainer.seed={seed}", *SFT, f"sft.steps={steps}"])
    metrics = train_sft(run_cfg, cfg, path)
    (out / "sft_loss").write_text(f"{metrics['sft/loss']:.4f}")
    return path


def points_histogram(init: Path, split: str, n: int = 128, seed: int = 0) -> np.ndarray:
    """(8,) int: how many of ``n`` attempts of ``init`` at temperature 1.0 scored 0..7 points.

    ``n`` seeds of ``split`` (train: seeds 10,000 on; eval: the trainer's validation seeds),
    ``rollout.max_new_tokens`` as in :data:`COMMON`."""
    from dataclasses import replace

    import torch

    from agentrl.learn.model import load_pretrained
    from agentrl.registry import make
    from agentrl.rollout import Sampling, encode_prompt
    from agentrl.rollout.backends import HFBackend
    from agentrl.rollout.prompting import build_prompt
    from agentrl.run import compose
    from agentrl.run.trainer import EVAL_SEED_BASE

    cfg = compose([*COMMON, f"model.name_or_path={init}"])
    torch.manual_seed(seed)
    model, tok = load_pretrained(replace(cfg.model, name_or_path=str(init)))
    model.eval()
    env = make("proof", **cfg.env_kwargs)
    seeds = [(EVAL_SEED_BASE if split == "eval" else 10_000) + k for k in range(n)]
    prompts = []
    for s in seeds:
        obs, info = env.reset(seed=s, options={"split": split})
        text = build_prompt(info["task"], [], obs, None, 0, "plain", "generic")
        prompts.append(encode_prompt(tok, text, cfg.rollout.max_prompt_tokens))
    sampling = Sampling(max_new_tokens=cfg.rollout.max_new_tokens, temperature=1.0)
    gens = HFBackend(model, tok, 64).generate(prompts, sampling)
    points = []
    for s, g in zip(seeds, gens):
        env.reset(seed=s, options={"split": split})
        points.append(int(env.step(g.text)[4].get("points") or 0))
    return np.bincount(points, minlength=8)


def _run(
    method: str, seed: int, iterations: int, eval_every: int, out: Path, init: Path
) -> list[dict]:
    run_agentrl(
        [
            *COMMON,
            *METHODS[method],
            f"trainer.seed={seed}",
            f"trainer.steps={iterations}",
            f"trainer.eval_every={eval_every}",
            f"model.name_or_path={init}",
        ],
        out,
    )
    return read_metrics(out)


def _sft_loss(work: Path) -> str:
    f = work / "sft_loss"
    return f.read_text().strip() if f.exists() else "n/a"


def curve(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(decoding tokens so far, validation score) at every evaluation (iteration 0 first)."""
    xs, ys, total = [], [], 0.0
    for r in rows:
        total = r.get("perf/decode_tokens_total", total)
        if "eval/return" in r:
            xs.append(total)
            ys.append(r["eval/return"])
    return np.array(xs), np.array(ys)


def tokens_to_reach(xs: np.ndarray, ys: np.ndarray, target: float) -> float | None:
    """Decoding tokens at the first evaluation scoring at least ``target`` (None: never)."""
    hit = np.flatnonzero(ys >= target - 1e-12)
    return float(xs[hit[0]]) if len(hit) else None


def readiness_trace(rows: list[dict], eval_every: int) -> list[tuple[int, float, float, float]]:
    """(iteration, ready fraction, ready problems, critic error) at every evaluation after 0.

    The ready fraction is the mean of ``ac2/ready_frac`` (share of the iteration's prefixes
    whose problem was ready) over the ``eval_every`` iterations up to the evaluation; ready
    problems (cumulative) and the critic error (mean over the last 5 steps) are the values at
    the evaluation's iteration."""
    by_it = {r["iteration"]: r for r in rows if "iteration" in r and "ac2/ready_frac" in r}
    out = []
    for it in sorted(r["iteration"] for r in rows if "eval/return" in r and r["iteration"] > 0):
        window = [by_it[k]["ac2/ready_frac"] for k in range(it - eval_every + 1, it + 1)
                  if k in by_it]  # fmt: skip
        last = by_it.get(it, {})
        out.append(
            (
                it,
                float(np.mean(window)) if window else float("nan"),
                float(last.get("ac2/ready_problems", np.nan)),
                float(last.get("ac2/critic_error", np.nan)),
            )
        )
    return out


def _ci(x) -> str:
    m, lo, hi = t_interval(x)
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]"


def first_iteration(rows: list[dict], key: str, test) -> int | None:
    """The first iteration whose ``key`` passes ``test`` (None: none did)."""
    for r in rows:
        if key in r and "iteration" in r and test(r[key]):
            return int(r["iteration"])
    return None


def training_return(rows: list[dict], first: bool, n: int = 10) -> float:
    """Mean ``env/return`` over the first (or last) ``n`` training iterations."""
    vals = [r["env/return"] for r in rows if "env/return" in r]
    return float(np.mean(vals[:n] if first else vals[-n:]))


def critic_error_floor(p: float, g: int) -> float:
    """E|grid(p) − grid(k / g)|, k ~ Binomial(g, p): the critic error (as readiness measures it)
    of a critic that knows a problem's true success rate p exactly, when the target is the
    grid-rounded mean of g graded 0/1 continuations (one-step derivations score 0 or 7)."""
    from math import comb

    from agentrl.algos.ac2.core import grid_round

    return sum(
        comb(g, k) * p**k * (1 - p) ** (g - k) * abs(grid_round(p) - grid_round(k / g))
        for k in range(g + 1)
    )


def summary(runs: dict[str, list[list[dict]]], curves, seeds: list[int]) -> list[str]:
    """Sentences computed from the runs: nothing is claimed beyond the 95% intervals."""
    out = []
    g0 = [training_return(r, True) for r in runs["grpo"]]
    g1 = [training_return(r, False) for r in runs["grpo"]]
    out.append(
        f"- GRPO's training return (its own sampled attempts on training problems) went from "
        f"{_ci(g0)} over the first 10 iterations to {_ci(g1)} over the last 10. (AC2's training "
        "return is not comparable: it mixes graded rewards with critic estimates.)"
    )
    for m in runs:
        gain = [ys[-1] - ys[0] for _, ys in curves[m]]
        _, lo, hi = t_interval(gain)
        verdict = "the interval contains 0" if lo <= 0 <= hi else "the interval excludes 0"
        out.append(f"- {m}, final − starting validation score, per seed: {_ci(gain)} ({verdict}).")
    for m in runs:
        if m == "grpo":
            continue
        for what, pick in (("peak", lambda ys: ys.max()), ("final", lambda ys: ys[-1])):
            diff = [pick(a[1]) - pick(b[1]) for a, b in zip(curves[m], curves["grpo"])]
            _, lo, hi = t_interval(diff)
            verdict = (
                "the interval contains 0: no difference is shown"
                if lo <= 0 <= hi
                else ("higher" if lo > 0 else "lower") + " than GRPO"
            )
            out.append(
                f"- {m} − grpo, {what} validation score, paired by seed: {_ci(diff)} ({verdict})."
            )
    for m in AC2_METHODS:
        fire = [first_iteration(r, "ac2/ready_problems", lambda v: v > 0) for r in runs[m]]
        low = [first_iteration(r, "ac2/critic_error", lambda v: v < 0.20) for r in runs[m]]
        n_fire = sum(f is not None for f in fire)
        out.append(
            f"- {m}: some problem became ready in {n_fire}/{len(fire)} seeds (the first one at "
            "iteration, per seed: "
            + ", ".join("never" if f is None else str(f) for f in fire)
            + "); the critic error first fell below tau_global = 0.20 at iteration, per seed: "
            + ", ".join("never" if f is None else str(f) for f in low)
            + "."
        )
    g = int(next(c for c in METHODS["ac2"] if c.startswith("algo.group_size=")).split("=")[1])
    out.append(
        "- The critic error has a floor at this scale: even a critic that knows each problem's "
        f"true success rate p errs by {critic_error_floor(0.5, g):.2f} at p = 0.5 "
        f"({critic_error_floor(0.3, g):.2f} at p = 0.3 or 0.7, "
        f"{critic_error_floor(0.1, g):.2f} at p = 0.1 or 0.9), because its target is the "
        f"grid-rounded mean of only g = {g} graded continuations (with the paper's g = 16: "
        f"{critic_error_floor(0.5, 16):.2f} at p = 0.5). So the global error can fall below "
        "tau_global = 0.20, and a problem pass tau_local = 0.18, mainly where p is near 0 or 1. "
        "A problem must also be drawn as a prefix again after its error was measured (about "
        "n_batch / n_refill = 2 draws while it is in the buffer) and have a nonzero latest "
        "critic prediction; the bank sizes above show that references are not what is missing."
    )
    return out


def run(out_dir: str = "results", quick: bool = False, log=print, argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog="python -m agentrl.bench ac2")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=240)
    parser.add_argument("--eval-every", type=int, default=30)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--sft-steps", type=int, default=1500)
    opts = parser.parse_args(argv or [])
    seeds = list(range(opts.seeds))
    iterations, eval_every, sft_steps = opts.iterations, opts.eval_every, opts.sft_steps
    if quick:
        seeds, iterations, eval_every, sft_steps = seeds[:1], 2, 1, 20
    out_dir = Path(out_dir)
    work = out_dir / ".ac2_runs"
    log(f"[ac2] warm start: {sft_steps} SFT steps on reference derivations")
    init = warm_start(work, sft_steps)
    hist = {s: points_histogram(init, s, 16 if quick else 128) for s in ("train", "eval")}
    runs: dict[str, list[list[dict]]] = {m: [] for m in METHODS}
    for seed in seeds:
        for m in METHODS:
            path = work / f"{m}_seed{seed}"
            log(f"[ac2] {m} seed {seed}")
            # A finished run (its wall time written) is reused: delete its folder to redo it.
            done = opts.report_only or (path / "wall_s").exists()
            rows = read_metrics(path) if done else _run(m, seed, iterations, eval_every, path, init)
            runs[m].append(rows)
    curves = {m: [curve(r) for r in rs] for m, rs in runs.items()}
    # Mean curve over seeds (same evaluation iterations for every run).
    mean: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for m, cs in curves.items():
        n = min(len(c[1]) for c in cs)
        mean[m] = (np.mean([c[0][:n] for c in cs], 0), np.mean([c[1][:n] for c in cs], 0))
    grpo_peak = float(mean["grpo"][1].max())
    grpo_peak_at_start = int(np.argmax(mean["grpo"][1])) == 0
    wall = sum(
        float((work / f"{m}_seed{s}" / "wall_s").read_text())
        for m in METHODS
        for s in seeds
        if (work / f"{m}_seed{s}" / "wall_s").exists()
    )
    n_runs = sum(len(r) for r in runs.values())
    lines = [
        "# AC2 vs GRPO on proof derivations (tiny model)",
        "",
        f"Machine: {os.cpu_count()} CPU cores ({cpu_name()}), no GPU; one run at a time with "
        f"`OMP_NUM_THREADS=1`. Date: {date.today()}. "
        f"Versions: agentrl {version('agentrl')}, torch {version('torch')}. "
        f"Wall time {wall / 60:.1f} min for the {n_runs} runs (warm start not included).",
        f"Reproduce: `python -m agentrl.bench ac2 --seeds {len(seeds)} --iterations "
        f"{iterations} --eval-every {eval_every} --sft-steps {sft_steps}`"
        + (" (this was a `--quick` smoke run)." if quick else "."),
        "",
        f"Warm start: `python -m agentrl.sft` ({sft_steps} steps, "
        + " ".join(f"`{c}`" for c in SFT)
        + f"; final SFT loss {_sft_loss(work)}) on the reference derivations of "
        + " ".join(f"`{c}`" for c in ENV)
        + " (one-step derivations: 1000 training problems, 100 validation problems, none shared)."
        " Its points at temperature 1.0 (attempts scoring 0, 1, ..., 7 points):",
        "",
        "| problems | attempts | " + " | ".join(str(k) for k in range(8)) + " | mean / 7 |",
        "|---|---:|" + "---:|" * 9,
    ]
    for split, h in hist.items():
        mean_pts = float(np.dot(np.arange(8), h) / max(h.sum(), 1) / 7)
        lines.append(
            f"| {split} | {h.sum()} | "
            + " | ".join(str(int(v)) for v in h)
            + f" | {mean_pts:.3f} |"
        )
    lines += [
        "",
        "A one-step derivation is either right (7 points) or not (0), so every attempt that "
        "scores banks a reference for AC2. On the default mix of difficulties 1-3 the same tiny "
        "model scored 0.04 on validation and never wrote a 6/7 attempt, so no problem ever "
        "became ready there.",
        "",
        "Settings shared by both: "
        + " ".join(f"`{c}`" for c in COMMON)
        + ". GRPO: "
        + " ".join(f"`{c}`" for c in METHODS["grpo"])
        + ". AC2: "
        + " ".join(f"`{c}`" for c in METHODS["ac2"])
        + "; ac2_given_ref adds `algo.bank_given_reference=true`. The readiness thresholds, "
        "the critic (`algo.critic=prompt`: the policy answers a value prompt in text) and its "
        "learning-rate ladder are the defaults of `algo=ac2`. Validation score: mean reward "
        f"(points / 7) on {96 if not quick else 'the'} validation episodes, sampled at "
        "temperature 1.0; decoding tokens count every generated token of training (AC2's refill "
        "attempts and critic answers included, evaluation not).",
        "",
        f"Intervals: mean over {len(seeds)} seeds with a 95% t-interval. Peak = each seed's "
        "best evaluation (biased upwards by evaluation noise); final = the last evaluation.",
        "",
        "| method | peak validation score | final validation score | tokens to reach GRPO's "
        "peak | seeds that reached it | decoding tokens (total) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m, cs in curves.items():
        reach = [tokens_to_reach(xs, ys, grpo_peak) for xs, ys in cs]
        hit = [x for x in reach if x is not None]
        if grpo_peak_at_start:
            reach_txt = "undefined"
        elif len(hit) >= 2:
            m_, lo, hi = t_interval(hit)
            reach_txt = f"{m_:,.0f} [{lo:,.0f}, {hi:,.0f}]"
        elif hit:
            reach_txt = f"{hit[0]:,.0f} (one seed: no interval)"
        else:
            reach_txt = "not reached"
        n_hit = "–" if grpo_peak_at_start else f"{len(hit)}/{len(cs)}"
        lines.append(
            f"| {m} | {_ci([ys.max() for _, ys in cs])} | {_ci([ys[-1] for _, ys in cs])} | "
            f"{reach_txt} | {n_hit} | {np.mean([xs[-1] for xs, _ in cs]):,.0f} |"
        )
    lines.append("")
    if grpo_peak_at_start:
        lines.append(
            f"GRPO's peak (mean curve, {grpo_peak:.3f}) is its starting score: it did not "
            "improve the validation score in this budget, so tokens-to-GRPO's-peak is undefined; "
            "compare the peaks and final scores instead."
        )
    else:
        lines.append(
            f"GRPO's peak for the tokens column: {grpo_peak:.3f}, the best evaluation of GRPO's "
            "mean curve over seeds (below the mean of the per-seed peaks, which picks each "
            "seed's best separately); tokens to reach it are per seed, over the seeds that "
            "reached it."
        )
    traces = {m: [readiness_trace(r, eval_every) for r in runs[m]] for m in AC2_METHODS}
    lines += [
        "",
        "Readiness over time (mean over seeds at each evaluation; ready fraction = share of the "
        f"iteration's prefixes whose problem was ready, averaged over the {eval_every} "
        "iterations up to it; ready problems = problems ready so far (cumulative); critic "
        "error = mean |prediction − target| over the last 5 steps, readiness needs < "
        "`algo.tau_global` = 0.20):",
        "",
        "| iteration | " + " | ".join(f"{m} ready fraction | {m} ready problems | "
                                      f"{m} critic error" for m in AC2_METHODS) + " |",
        "|---:|" + "---:|" * (3 * len(AC2_METHODS)),
    ]  # fmt: skip
    n_ev = min(len(t) for ts in traces.values() for t in ts)
    for k in range(n_ev):
        cells = []
        for m in AC2_METHODS:
            ts = traces[m]
            cells += [
                f"{np.mean([t[k][1] for t in ts]):.3f}",
                f"{np.mean([t[k][2] for t in ts]):.1f}",
                f"{np.mean([t[k][3] for t in ts]):.3f}",
            ]
        lines.append(f"| {traces[AC2_METHODS[0]][0][k][0]} | " + " | ".join(cells) + " |")
    for m in AC2_METHODS:
        final = [r[-1] for r in runs[m]]
        ever = [
            float(np.mean([x.get("ac2/ready_frac", 0.0) for x in r if "ac2/ready_frac" in x]))
            for r in runs[m]
        ]
        lines += [
            "",
            f"{m}: problems ready at the end {_ci([x.get('ac2/ready_problems', 0) for x in final])}"
            f"; ready fraction over the whole run {_ci(ever)}; critic error at the end "
            f"{_ci([x.get('ac2/critic_error', np.nan) for x in final])}; bank size at the end "
            f"{_ci([x.get('ac2/bank_size', 0) for x in final])}.",
        ]
    lines += ["", "## What the data shows", "", *summary(runs, curves, seeds)]
    lines += ["", "Per seed (validation score at each evaluation, iteration 0 first):", ""]
    for m, rs in runs.items():
        for seed, rows in zip(seeds, rs):
            lines.append(f"- {m} seed {seed}: " + ", ".join(f"{y:.3f}" for y in curve(rows)[1]))
    lines += ["", "![validation score vs decoding tokens; readiness over time](ac2.png)", ""]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ac2.md").write_text("\n".join(lines))
    _plot(mean, traces, out_dir / "ac2.png")
    log(f"[ac2] wrote {out_dir / 'ac2.md'}")
    return mean


def _plot(
    mean: dict[str, tuple[np.ndarray, np.ndarray]],
    traces: dict[str, list[list[tuple[int, float, float, float]]]],
    path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4))
    for m, (xs, ys) in mean.items():
        ax.plot(xs, ys, marker="o", label=m)
    ax.set_xlabel("decoding tokens (cumulative)")
    ax.set_ylabel("validation score (mean points / 7)")
    ax.set_title("proof derivations (difficulty 1), tiny model, mean over seeds")
    ax.legend()
    ax.grid(alpha=0.3)
    colour = {m: f"C{k}" for k, m in enumerate(mean)}  # as in the left panel
    for m, ts in traces.items():
        n = min(len(t) for t in ts)
        if not n:
            continue
        it = [ts[0][k][0] for k in range(n)]
        bx.plot(it, [np.mean([t[k][1] for t in ts]) for k in range(n)], marker="o",
                color=colour.get(m), label=f"{m}: ready fraction")  # fmt: skip
        bx.plot(it, [np.mean([t[k][3] for t in ts]) for k in range(n)], marker="s",
                color=colour.get(m), linestyle="--", label=f"{m}: critic error")  # fmt: skip
    bx.axhline(0.20, color="grey", linewidth=0.8, linestyle=":", label="tau_global = 0.20")
    bx.set_xlabel("iteration")
    bx.set_title("AC2 readiness (mean over seeds)")
    bx.legend(fontsize=8)
    bx.grid(alpha=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
