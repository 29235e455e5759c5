"""AC2 vs GRPO on proof derivations with the tiny model: ``python -m agentrl.bench ac2``.

Both methods train the tiny model on ``env=proof`` (generated derivations, graded 0–7) from the
same warm start (:func:`warm_start`, behaviour cloning of reference derivations at difficulty 1,
where the model writes full-marks attempts, so AC2 banks references and readiness can fire) and
seeds, one process per run, evaluating on the validation problems every ``eval_every``
iterations. The report gives per method the peak and final validation score (95% t-intervals
over seeds), the decoding tokens each seed spent to first reach GRPO's peak (with one model,
the ratio of the paper's decoding FLOPs), and AC2's readiness over time. Writes ``<out>/ac2.md``
and ``ac2.png``; summaries go to ``<out>/ac2_runs.jsonl`` (:mod:`agentrl.bench.experiment`);
``results/ac2_notes.md`` says why this task and budget. Options: ``--seeds --iterations
--eval-every --sft-steps --jobs --report-only --code-version``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agentrl.bench import experiment as ex
from agentrl.bench._report import (
    SCRATCH,
    committed_dir,
    figure,
    header,
    notes,
    read_metrics,
    render,
    run_agentrl,
    spans,
    styles,
    write_markdown,
)
from agentrl.bench.stats import interval_cell, t_interval, verdict

ENV = ["env=proof", "env.difficulty=[1]"]
"""One-step derivations, where the warm start writes full-marks attempts (``ac2_notes.md``)."""
COMMON = [
    *ENV,
    "model=tiny",
    "rollout.max_new_tokens=48",
    "rollout.history_length=0",
    "trainer.eval_temperature=1.0",
    "rollout.invalid_penalty=0",  # the validation score is then exactly mean points / 7
    "learner.lr=2e-4",  # why not larger: ac2_notes.md
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
        # Chunks shorter than an attempt, so the critic values unfinished ones (ac2_notes.md).
        "algo.chunk_tokens=8",
        "algo.budget_tokens=48",
    ],
}
# Banking each task's own reference solution as well (readiness then waits only on the critic).
METHODS["ac2_given_ref"] = [*METHODS["ac2"], "algo.bank_given_reference=true"]
AC2_METHODS = ("ac2", "ac2_given_ref")
STORE = "ac2_runs.jsonl"
KEEP = ("iteration", "eval/return", "perf/decode_tokens_total", "env/return")
"""The metrics a run's stored summary keeps of each row (with every ``ac2/`` one)."""


def warm_start(out: Path, steps: int, seed: int = 0) -> Path:
    """The tiny model behaviour-cloned on reference derivations (both methods start from it):
    ``python -m agentrl.sft`` with :data:`SFT`, (problem prompt → reference solution) pairs of
    the training split. From scratch the tiny model writes bytes the grader cannot read, so no
    method would get a reward; after this it writes legible one-step derivations."""
    args = [*COMMON, f"trainer.seed={seed}", *SFT, f"sft.steps={steps}"]
    return ex.warm_start(out / "sft", args)


def points_histogram(init: Path, split: str, n: int = 128, seed: int = 0) -> np.ndarray:
    """(8,) int: how many of ``n`` attempts of ``init`` at temperature 1.0 scored 0..7 points.

    ``n`` seeds of ``split`` (train: seeds 10,000 on; eval: the trainer's validation seeds),
    ``rollout.max_new_tokens`` as in :data:`COMMON`."""
    from dataclasses import replace

    import torch

    from agentrl.env_api import EVAL_SEED_BASE
    from agentrl.model import encode_prompt, load_pretrained
    from agentrl.registry import make
    from agentrl.rollout import Sampling
    from agentrl.rollout.backends import HFBackend
    from agentrl.rollout.prompting import build_prompt
    from agentrl.run import compose

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


def summarise(rows: list[dict]) -> dict:
    """A run's summary: decoding tokens so far (``x``) and validation score (``y``) at every
    evaluation (iteration 0 first), and its rows cut to :data:`KEEP` and the ``ac2/`` metrics."""
    xs, ys, total = [], [], 0.0
    for r in rows:
        total = r.get("perf/decode_tokens_total", total)
        if "eval/return" in r:
            xs.append(total)
            ys.append(r["eval/return"])
    kept = [{k: v for k, v in r.items() if k in KEEP or k.startswith("ac2/")} for r in rows]
    return {"x": xs, "y": ys, "rows": kept}


def tokens_to_reach(xs, ys, target: float) -> float | None:
    """Decoding tokens at the first evaluation scoring at least ``target`` (None: never)."""
    hit = np.flatnonzero(np.asarray(ys) >= target - 1e-12)
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


def summary(by: dict[str, list[dict]]) -> list[str]:
    """Sentences computed from the runs (each method's summaries, paired by seed): nothing is
    claimed beyond the 95% intervals."""
    grpo = [r["rows"] for r in by["grpo"]]
    out = [render(
        "ac2", "grpo_return", first=interval_cell([training_return(r, True) for r in grpo]),
        last=interval_cell([training_return(r, False) for r in grpo]),
    )]  # fmt: skip
    for m, rs in by.items():
        gain = [r["y"][-1] - r["y"][0] for r in rs]
        _, lo, hi = t_interval(gain)
        contains = "contains" if lo <= 0 <= hi else "excludes"
        out.append(render("ac2", "gain", method=m, interval=interval_cell(gain), contains=contains))
    for m, rs in by.items():
        for what, pick in (("peak", max), ("final", lambda ys: ys[-1])) if m != "grpo" else ():
            diff = [pick(a["y"]) - pick(b["y"]) for a, b in zip(rs, by["grpo"])]
            # An interval that touches 0 shows no difference (stats.verdict needs it off 0).
            _, lo, hi = t_interval(diff)
            phrase = "versus_" + ("not_resolved" if lo <= 0 <= hi else verdict(lo, hi))
            out.append(render("ac2", "versus", method=m, what=what, interval=interval_cell(diff),
                              verdict=render("ac2", phrase)))  # fmt: skip
    for m in AC2_METHODS:
        fire = [first_iteration(r["rows"], "ac2/ready_problems", lambda v: v > 0) for r in by[m]]
        low = [first_iteration(r["rows"], "ac2/critic_error", lambda v: v < 0.20) for r in by[m]]
        out.append(render(
            "ac2", "fired", method=m, fired=sum(f is not None for f in fire), seeds=len(fire),
            first=_iterations(fire), low=_iterations(low),
        ))  # fmt: skip
    g = int(next(c for c in METHODS["ac2"] if c.startswith("algo.group_size=")).split("=")[1])
    floor = critic_error_floor
    out.append(render(
        "ac2", "floor", p50=f"{floor(0.5, g):.2f}", p30=f"{floor(0.3, g):.2f}",
        p10=f"{floor(0.1, g):.2f}", g=g, paper=f"{floor(0.5, 16):.2f}",
    ))  # fmt: skip
    return out


def _iterations(found: list[int | None]) -> str:
    return ", ".join("never" if f is None else str(f) for f in found)


def run(out_dir: str = SCRATCH, quick: bool = False, log=print, argv: list[str] | None = None):
    """Run the benchmark (see the module); write ``<out_dir>/ac2.md`` and its plot."""
    parser = ex.grid_parser("ac2", seeds=3, iterations=240, eval_every=30)
    parser.add_argument("--sft-steps", type=int, default=1500)
    opts = parser.parse_args(argv or [])
    seeds = list(range(opts.seeds))
    iterations, eval_every, sft_steps = opts.iterations, opts.eval_every, opts.sft_steps
    if quick:
        seeds, iterations, eval_every, sft_steps = seeds[:1], 2, 1, 20
    out = Path(out_dir)
    work = out / ".ac2_runs"
    store = ex.RunStore(out / STORE, committed_dir() / STORE)
    init = work / "sft"
    if not opts.report_only:
        log(f"[ac2] warm start: {sft_steps} SFT steps on reference derivations")
        warm_start(work, sft_steps)
    init_hash, hist = ex.init_hash(store, init), {}
    if (init / "config.json").exists():
        hist = {s: points_histogram(init, s, 16 if quick else 128) for s in ("train", "eval")}
    specs = [
        ex.Spec(
            m,
            s,
            (*COMMON, *METHODS[m], f"trainer.seed={s}", f"trainer.steps={iterations}",
             f"trainer.eval_every={eval_every}", f"model.name_or_path={init}"),
            ex.spec_key(COMMON, METHODS[m], s, iterations, eval_every, init_hash),
        )
        for s in seeds
        for m in METHODS
    ]  # fmt: skip
    code = ex.pick_version(store, specs, opts)
    results = ex.collect(
        specs, store, code, work, lambda spec, o: run_agentrl(list(spec.args), o),
        lambda spec, o: {**summarise(read_metrics(o)), "wall_s": float((o / "wall_s").read_text())},
        opts.report_only, opts.jobs, {"init": init_hash}, log,
    )  # fmt: skip
    by = ex.by_method(results, list(METHODS))
    if set(by) != set(METHODS):
        raise SystemExit(f"ac2: no runs of {sorted(set(METHODS) - set(by))} (code {code})")
    sft_loss = f"{read_metrics(init)[-1]['sft/loss']:.4f}" if hist else "n/a"
    command = (
        f"python -m agentrl.bench ac2 --seeds {len(seeds)} --iterations {iterations} "
        f"--eval-every {eval_every} --sft-steps {sft_steps}"
    )
    head = header(
        ("agentrl", "torch"), command, quick, "; one run at a time with `OMP_NUM_THREADS=1`"
    )
    traces = {m: [readiness_trace(r["rows"], eval_every) for r in by[m]] for m in AC2_METHODS}
    text = render(
        "ac2",
        head=head,
        wall=f"{sum(r['wall_s'] for r in results) / 60:.1f}",
        n_runs=len(results),
        version=ex.version_line(store, specs, code),
        sft_steps=sft_steps,
        sft=spans(SFT),
        sft_loss=sft_loss,
        env=spans(ENV),
        histogram=_histogram(hist),
        warm_note=notes("ac2_notes.md").get("Warm start", ""),
        common=spans(COMMON),
        grpo=spans(METHODS["grpo"]),
        ac2=spans(METHODS["ac2"]),
        episodes=96 if not quick else "the",
        n_seeds=len(seeds),
        scores=_scores(by),
        eval_every=eval_every,
        readiness=_readiness(by, traces),
        summary="\n".join(summary(by)),
        per_seed="\n".join(ex.per_seed([r for rs in by.values() for r in rs])),
    )
    write_markdown(out / "ac2.md", text + "\n")
    _plot(by, traces, out / "ac2.png")
    log(f"[ac2] wrote {out / 'ac2.md'}")
    return by


def _histogram(hist: dict[str, np.ndarray]) -> str:
    """The warm start's points table: attempts per split scoring 0..7 and their mean / 7."""
    if not hist:
        return render("ac2", "no_histogram")
    head = "| problems | attempts | " + " | ".join(str(k) for k in range(8)) + " | mean / 7 |"
    rows = [
        f"| {split} | {h.sum()} | " + " | ".join(str(int(v)) for v in h)
        + f" | {np.dot(np.arange(8), h) / max(h.sum(), 1) / 7:.3f} |"
        for split, h in hist.items()
    ]  # fmt: skip
    return "\n".join([head, "|---|---:|" + "---:|" * 9, *rows])


def _scores(by: dict[str, list[dict]]) -> str:
    """The table of peak and final scores and tokens to GRPO's peak, and what that peak is."""
    grpo_curve = ex.mean_curve(by["grpo"])[1].mean(axis=0)
    peak, at_start = float(grpo_curve.max()), int(np.argmax(grpo_curve)) == 0

    def reach(rs: list[dict]) -> str:
        hit = [x for r in rs if (x := tokens_to_reach(r["x"], r["y"], peak)) is not None]
        if at_start:
            return "undefined"
        return f"{interval_cell(hit, ',.0f')}" if hit else "not reached"

    def reached(rs: list[dict]) -> str:
        n = sum(tokens_to_reach(r["x"], r["y"], peak) is not None for r in rs)
        return "–" if at_start else f"{n}/{len(rs)}"

    table = ex.method_table(
        by,
        [
            ("peak validation score", "---:", lambda rs: interval_cell([max(r["y"]) for r in rs])),
            ("final validation score", "---:", lambda rs: interval_cell([r["y"][-1] for r in rs])),
            ("tokens to reach GRPO's peak", "---:", reach),
            ("seeds that reached it", "---:", reached),
            (
                "decoding tokens (total)",
                "---:",
                lambda rs: f"{np.mean([r['x'][-1] for r in rs]):,.0f}",
            ),
        ],
    )
    what = render("ac2", "peak_at_start" if at_start else "peak", peak=f"{peak:.3f}")
    return "\n".join([*table, "", what])


def _readiness(by: dict[str, list[dict]], traces: dict) -> str:
    """The readiness table over time (mean over seeds) and each AC2 method's end state."""
    lines = [
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
                f"{np.mean([t[k][j] for t in ts]):.{d}f}" for j, d in ((1, 3), (2, 1), (3, 3))
            ]
        lines.append(f"| {traces[AC2_METHODS[0]][0][k][0]} | " + " | ".join(cells) + " |")
    for m in AC2_METHODS:
        final = [r["rows"][-1] for r in by[m]]
        ever = [
            float(
                np.mean([x["ac2/ready_frac"] for x in r["rows"] if "ac2/ready_frac" in x] or [0.0])
            )
            for r in by[m]
        ]
        lines += ["", render(
            "ac2", "readiness_end", method=m,
            ready=interval_cell([x.get("ac2/ready_problems", 0) for x in final]),
            fraction=interval_cell(ever),
            error=interval_cell([x.get("ac2/critic_error", np.nan) for x in final]),
            bank=interval_cell([x.get("ac2/bank_size", 0) for x in final]),
        )]  # fmt: skip
    return "\n".join(lines)


def _plot(by: dict[str, list[dict]], traces: dict, path: Path) -> None:
    """Validation score against decoding tokens (mean over seeds, min–max band) and AC2's
    readiness over iterations; a method has one colour in both panels."""
    style = styles(list(by))
    with figure(path, 2, (6, 4)) as (ax, bx):
        ex.plot_curves(ax, by, style)
        ax.set_xlabel("decoding tokens (cumulative)")
        ax.set_ylabel("validation score (mean points / 7)")
        ax.set_title("proof derivations (difficulty 1), tiny model, mean over seeds")
        for m, ts in traces.items():
            n = min(len(t) for t in ts)
            it = [ts[0][k][0] for k in range(n)]
            for j, mark, dash, what in (
                (1, "o", "-", "ready fraction"),
                (3, "s", "--", "critic error"),
            ):
                mean = [np.mean([t[k][j] for t in ts]) for k in range(n)]
                bx.plot(
                    it,
                    mean,
                    marker=mark,
                    linestyle=dash,
                    color=style[m]["color"],
                    label=f"{m}: {what}",
                )
        bx.axhline(0.20, color="grey", linewidth=0.8, linestyle=":", label="tau_global = 0.20")
        bx.set_xlabel("iteration")
        bx.set_title("AC2 readiness (mean over seeds)")
        bx.legend(fontsize=8)
        bx.grid(alpha=0.3)
