"""Can the learning benchmark tell credit methods apart? ``python -m agentrl.bench learning-warm``.

The from-scratch benchmark (:mod:`agentrl.bench.learning`) shows that every estimator learns,
but the tiny model then plateaus near a random valid mover and no ordering is resolvable. This
one starts where credit matters: from one supervised checkpoint (``python -m agentrl.sft``,
solver plans with a fraction ``--noise`` of the moves random, so some but far from full
success), on 7×7 Sokoban with two boxes and 30 steps, where one early push decides. Every
method runs with the same seeds (the same task stream, evaluation episodes and start weights),
so methods are compared seed by seed (:mod:`agentrl.bench.stats`): training success, the area
under the eval curve (AUC) and final success, each pair better, worse or not resolved.

Options: ``--methods`` (core, every pair compared), ``--extra-methods`` (each against grpo),
``--seeds``, ``--extra-seeds``, ``--iterations``, ``--eval-every``, ``--jobs``, ``--noise`` and
the grid's ``--report-only``, ``--code-version``. Runs live in ``<out>/.learning_warm_runs``;
their summaries in ``<out>/learning_warm_runs.jsonl``, with the committed
``results/learning_warm_runs.jsonl`` read as well (:mod:`agentrl.bench.experiment`). Why the
budget is what it is, and what some results mean, is in ``results/learning_warm_notes.md``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from agentrl.bench import experiment as ex
from agentrl.bench._report import (
    SCRATCH,
    committed_dir,
    figure,
    header,
    notes,
    render,
    run_agentrl,
    spans,
    styles,
    write_markdown,
)
from agentrl.bench.stats import (
    PairVerdict,
    auc,
    holm,
    interval_cell,
    pairs_table,
    t_interval,
    verdict,
)

NOTES = "learning_warm_notes.md"
"""The committed notes: the budget's reasons and the mechanisms behind methods that come apart
(``## Mechanism: <method>`` sections, shown beside that method's results)."""
TASK = ["env=sokoban", "env.dim_room=[7,7]", "env.num_boxes=2", "env.max_steps=30"]
# A model wide and deep enough to learn the board from demonstrations (the notes: Budget); the
# RL runs load this architecture from the checkpoint.
SFT = [
    "model.hidden_size=128",
    "model.num_layers=4",
    "model.num_heads=4",
    "model.num_kv_heads=2",
    "rollout.history_length=0",
    "sft.steps=1500",
    "sft.episodes=512",
    # A value head fitted to the demonstrations' returns, so CFP (GAE with a fresh critic) can be
    # compared with a pretrained critic on the same actor; the other methods ignore it.
    "sft.value_coef=0.5",
]
EVAL_EPISODES = 128
BUDGET = [
    *TASK,
    "rollout.n_tasks=8",
    "rollout.group_size=8",
    "rollout.history_length=0",
    "rollout.max_new_tokens=3",
    # Sampled evaluation: the warm start's greedy policy loops, and sampling is what RL trains.
    "trainer.eval_temperature=1.0",
    # The learning rate whose first update moves the policy by the usual PPO KL (the notes:
    # Budget, with the larger rate that left every method at the warm start).
    "learner.lr=3e-4",
    "learner.ppo_epochs=1",
    "learner.mini_batch_steps=512",
    f"trainer.eval_episodes={EVAL_EPISODES}",
    "trainer.save_every=0",
    "trainer.progress=false",
]
METHODS: dict[str, list[str]] = {
    "grpo": ["algo=grpo"],
    "rloo": ["algo=rloo"],
    "gigpo": ["algo=gigpo"],
    "crbc": ["algo=crbc"],
    "crbc_k1": ["algo=crbc", "algo.depth=1"],
    "gagpo": ["algo=gagpo"],
    "relace": ["algo=relace"],
    "gae": ["algo=gae"],
}
"""The core methods (the issue's list): name → the overrides that select it (on top of
:data:`BUDGET`). Every pair among them gets a verdict."""
EXTRA: dict[str, list[str]] = {
    # CFP (seed 001): the same GAE learner with the critic the warm start fitted, against the
    # fresh critic of ``gae``.
    "gae_pretrained": ["algo=gae", "algo.critic_init=pretrained"],
}
"""Methods that join with ``--methods``: these, the policy objectives of
:data:`agentrl.bench.learning.OBJECTIVES`, and any registered estimator without a rollout
driver (by its name). Each is compared with ``grpo`` (the baseline it modifies)."""
VERSUS: dict[str, str] = {"gae_pretrained": "gae"}
"""Extra methods also compared with a baseline other than grpo: CFP's question is whether a
pretrained critic beats a fresh one on the same actor."""
BATCH = 8 * 8
STORE = "learning_warm_runs.jsonl"
"""The committed run summaries (one JSON object per line), next to the report."""
SERIES = {"train": "env/success", "invalid": "env/invalid_rate", "entropy": "loss/entropy"}
"""Per-iteration series of a summary: training success, and the invalid-action rate and policy
entropy (the signs of a policy that has come apart)."""
SIGNAL = {
    "mixed": "diag/mixed_groups",
    "grad_cos": "diag/grad_cos",
    "grad_snr": "diag/grad_snr",
    "approx_kl": "loss/approx_kl",
}
"""How much signal each update carries (name in the stored summary → metric): the fraction of
groups whose success varies (only they carry an outcome signal), and whether two halves of a
mini-batch agree on the gradient (cosine and SNR near 0: the update is mostly sampling noise);
the approximate KL says how far each iteration moved the policy. The report's template says
what each is."""


def _reshaped(name: str) -> bool:
    """Whether method ``name`` changes the rollout shape (tasks x rollouts per iteration)."""
    args = method_args(name) or []
    return any(a.startswith(("rollout.n_tasks=", "rollout.group_size=")) for a in args)


def method_args(name: str) -> list[str] | None:
    """The overrides of method ``name`` (estimator learner hints included), or None when it
    is unknown, its estimator is not registered here, or it needs a rollout driver (its
    episodes are not the trainer's, so the env-step axis would not compare)."""
    from agentrl.bench.learning import OBJECTIVES
    from agentrl.credit import get_estimator, list_estimators

    args = METHODS.get(name) or EXTRA.get(name) or OBJECTIVES.get(name) or [f"algo={name}"]
    algo = next(a.split("=", 1)[1] for a in args if a.startswith("algo="))
    if algo not in list_estimators() or get_estimator(algo).driver:
        return None
    given = {a.split("=", 1)[0] for a in args}
    hints = [f"learner.{k}={v}" for k, v in get_estimator(algo).learner_hints]
    return [*args, *(h for h in hints if h.split("=", 1)[0] not in given)]


def known_methods() -> list[str]:
    """Every name ``--methods`` accepts."""
    from agentrl.bench.learning import OBJECTIVES
    from agentrl.credit import list_estimators

    return sorted({*METHODS, *EXTRA, *OBJECTIVES, *list_estimators()})


def warm_start(work: Path, noise: float, log=print) -> Path:
    """The shared supervised checkpoint (built once, reused)."""
    args = [*TASK, *SFT, f"sft.noise={noise}"]
    return ex.warm_start(work / f"sft_noise{noise:g}", args, log)


def spec(method: str, seed: int, init: Path, init_hash: str, iterations: int, eval_every: int):
    """The run of ``method`` and ``seed`` (:class:`~agentrl.bench.experiment.Spec`): its key is
    the one summaries were stored under before they carried a code version, so those stay
    reportable."""
    args = [
        *BUDGET,
        *method_args(method),
        # One thread each: runs go side by side (--jobs) on a small machine.
        "trainer.num_threads=1",
        f"model.name_or_path={init}",
        f"trainer.seed={seed}",
        f"trainer.steps={iterations}",
        f"trainer.eval_every={eval_every}",
    ]
    key = ex.spec_key(BUDGET, method_args(method), seed, iterations, eval_every, init_hash)
    return ex.Spec(method, seed, tuple(args), key)


def _train(spec: ex.Spec, out: Path) -> None:
    run_agentrl(list(spec.args), out)


def summarise(spec: ex.Spec, out: Path) -> dict:
    """A finished run's summary (:func:`agentrl.bench.experiment.summarise` with
    :data:`SERIES`) and the signal in each update (``signal``: the :data:`SIGNAL` diagnostics
    per iteration)."""
    record = ex.summarise(out, BATCH, {**SERIES, **{f"signal.{n}": m for n, m in SIGNAL.items()}})
    record["signal"] = {name: record.pop(f"signal.{name}") for name in SIGNAL}
    return record


def run(
    out_dir: str = SCRATCH,
    quick: bool = False,
    log=print,
    argv: list[str] | None = None,
    committed: str | Path | None = None,
):
    """Run the benchmark (see the module) and write ``<out_dir>/learning_warm.md`` and its plot.

    Finished runs are looked up in the committed store (``<committed>/learning_warm_runs.jsonl``,
    default :func:`~agentrl.bench._report.committed_dir`) and in ``<out_dir>``'s; new ones are
    appended to ``<out_dir>``'s (the committed one itself with ``--update``)."""
    p = ex.grid_parser("learning-warm", seeds=5, iterations=12, eval_every=4, jobs=2)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--extra-methods", default="", help="compared with grpo only")
    p.add_argument("--extra-seeds", type=int, default=3)
    p.add_argument("--noise", type=float, default=0.5)
    opts = p.parse_args(argv or [])
    core = [m for m in opts.methods.split(",") if m]
    extra = [m for m in opts.extra_methods.split(",") if m and m not in core]
    unknown = [m for m in core + extra if m not in known_methods()]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; valid: {known_methods()}")
    skipped = [m for m in core + extra if method_args(m) is None]
    core = [m for m in core if m not in skipped]
    extra = [m for m in extra if m not in skipped]
    seeds, extra_seeds = list(range(opts.seeds)), list(range(opts.extra_seeds))
    iterations, eval_every = opts.iterations, opts.eval_every
    if quick:
        core, extra, seeds, iterations, eval_every = core[:2], [], seeds[:2], 2, 1
    out = Path(out_dir)
    work = out / ".learning_warm_runs"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    root = Path(committed if committed is not None else committed_dir())
    store = ex.RunStore(out / STORE, root / STORE)
    # A warm start already built beside the committed reports (by an `--update` run) is the
    # same checkpoint (built single-threaded, so bitwise the same): use it, do not rebuild it.
    built = root / work.name
    work_init = built if (built / f"sft_noise{opts.noise:g}" / "config.json").exists() else work
    init = work_init / f"sft_noise{opts.noise:g}"
    if not opts.report_only:
        init = warm_start(work_init, opts.noise, log)
    init_hash = ex.init_hash(store, init)
    # Seed-major, core methods first: a benchmark cut short still has every core method paired.
    jobs = [(m, s) for s in seeds for m in core] + [(m, s) for s in extra_seeds for m in extra]
    specs = [spec(m, s, init, init_hash, iterations, eval_every) for m, s in jobs]
    code = ex.pick_version(store, specs, opts)
    log(
        f"[learning-warm] {len(specs)} runs ({sum(store.get(s, code) is not None for s in specs)}"
        f" stored in {store.path} or the committed store): {core} x seeds {seeds}, {extra} x "
        f"{extra_seeds}; warm start {init_hash}, code {code}"
    )
    results = ex.collect(
        specs, store, code, work, _train, summarise, opts.report_only, opts.jobs,
        {"init": init_hash}, log,
    )  # fmt: skip
    wall = sum(r.get("wall_s") or 0.0 for r in results)
    command = (
        f"python -m agentrl.bench learning-warm --methods {','.join(core)} --seeds {len(seeds)}"
        + (f" --extra-methods {','.join(extra)} --extra-seeds {len(extra_seeds)}" if extra else "")
        + f" --iterations {iterations} --eval-every {eval_every} --noise {opts.noise}"
    )
    setting = render(
        "learning_warm",
        "setting",
        task=spans(TASK),
        budget=spans(BUDGET[len(TASK) :]),
        iterations=iterations,
        episodes=iterations * BATCH,
        eval_every=eval_every,
        eval_episodes=EVAL_EPISODES,
        noise=f"{opts.noise:.0%}",
        sft=spans(SFT),
        jobs=opts.jobs,
        minutes=f"{wall / 60:.0f}",
    )
    head = [header(("torch", "transformers"), command, quick), "", setting]
    lines = build_report(results, core, extra, [*head, "", ex.version_line(store, specs, code)])
    lines += ex.coverage(results, [(m, seeds) for m in core] + [(m, extra_seeds) for m in extra])
    if skipped:
        lines += ["", render("learning_warm", "not_run", methods=skipped)]
    lines += ["", render("learning_warm", "plot"), ""]
    write_markdown(out / "learning_warm.md", "\n".join(lines))
    _plot(results, core, extra, out / "learning_warm.png")
    took = (time.perf_counter() - t0) / 60
    log(f"[learning-warm] wrote {out / 'learning_warm.md'} ({took:.1f} min)")
    return results


def _final(r: dict) -> float:
    return r["y"][-1]


def _train_success(r: dict) -> float:
    """Mean success over every training episode (each iteration has the same number): the
    area under the training curve, the figure with the most episodes behind it."""
    return float(np.mean(r["train"]))


def _gain(r: dict) -> float:
    """Final eval success minus the warm start's (iteration 0, the same for every method)."""
    return r["y"][-1] - r["y"][0]


def _auc(r: dict) -> float:
    return auc(r["x"], r["y"])


def _drift(rs: list[dict], series: str) -> tuple[float, float]:
    """Mean over seeds of ``series`` (``invalid`` or ``entropy``) at the first iteration and
    over the last 3; NaN when the runs did not record it."""
    have = [r[series] for r in rs if r.get(series)]
    if not have:
        return float("nan"), float("nan")
    return float(np.mean([h[0] for h in have])), float(np.mean([np.mean(h[-3:]) for h in have]))


def _drift_cell(series: str):
    def cell(rs: list[dict]) -> str:
        first, last = _drift(rs, series)
        return f"{first:.2f} → {last:.2f}" if np.isfinite(last) else "—"

    return cell


METRICS = (("training success", _train_success), ("eval AUC", _auc), ("final eval success", _final))
COLUMNS = (
    ("seeds", "---:", lambda rs: str(len(rs))),
    *(
        (title, "---", lambda rs, key=key: interval_cell([key(r) for r in rs]))
        for title, key in (
            ("training success, all episodes (95% t)", _train_success),
            ("eval AUC over env steps (95% t)", _auc),
            ("final eval success (95% t)", _final),
            ("final − start eval (95% t)", _gain),
        )
    ),
    ("invalid actions, first → last 3 iterations", "---", _drift_cell("invalid")),
    ("entropy, first → last 3", "---", _drift_cell("entropy")),
)
"""The columns of the method tables: seeds, four figures with 95% t-intervals over seeds, and
the drift of the invalid-action rate and of the entropy."""


def build_report(
    results: list[dict], core: list[str], extra: list[str], head: list[str]
) -> list[str]:
    """The report's lines: a table per group (final success and AUC with 95% t-intervals over
    seeds), the verdicts of every pair of core methods, and each extra method against grpo.

    Args:
        results: one dict per run: ``method``, ``seed``, ``x`` (environment steps at each
            evaluation), ``y`` (eval success there; the first at iteration 0), ``train``.
        core, extra: method names in report order (methods without results are left out).
        head: the report's opening lines (machine, command).
    """
    lines = [render("learning_warm"), "", *head, ""]
    by_core, by_extra = ex.by_method(results, core), ex.by_method(results, extra)
    if by_core:
        start = [r["y"][0] for r in next(iter(by_core.values()))]
        mean = f"{np.mean(start):.3f}"
        lines += [render("learning_warm", "start", mean=mean, n=len(start)), ""]
    for title, by in (("Core methods", by_core), ("Joined with a flag", by_extra)):
        if by:
            lines += [f"## {title}", "", *ex.method_table(by, COLUMNS), ""]
    lines += _signal_table({**by_core, **by_extra})
    # Every pair of core methods per metric, once: the tables and the summary both read them.
    core_pairs = {what: holm(ex.all_paired(by_core, key)) for what, key in METRICS}
    if len(by_core) > 1:
        for what, pairs in core_pairs.items():
            lines += [f"## Core pairs: {what}", "", *pairs_table(pairs, what, family=True), ""]
    every = {**by_core, **by_extra}
    versus = [(m, "grpo") for m in by_extra] if "grpo" in by_core else []
    own = [(m, b) for m, b in VERSUS.items() if m in by_extra and b in every and b != "grpo"]
    lines += _against("Against grpo", versus, every)
    lines += _summary(by_core, by_extra, core_pairs)
    return lines + _against("Against their own baseline", own, every)


def _against(title: str, pairs: list[tuple[str, str]], every: dict[str, list[dict]]) -> list[str]:
    """A pairs table per metric of each (method, its baseline), one family per metric."""
    lines = []
    for what, key in METRICS if pairs else ():
        verdicts = [ex.paired(m, every[m], b, every[b], key) for m, b in pairs]
        lines += [f"## {title}: {what}", "", *pairs_table(verdicts, what, family=True), ""]
    return lines


def _summary(
    by_core: dict[str, list[dict]],
    by_extra: dict[str, list[dict]],
    core_pairs: dict[str, list[PairVerdict]],
) -> list[str]:
    """Generated sentences: which methods moved from the warm start, and which core pairs are
    resolved (each statement is an interval's, nothing more), with the notes' mechanism of each
    method that ran.

    Args:
        core_pairs: metric name → every pair of core methods, Holm-adjusted (:func:`holm`).
    """
    out = ["## What the data shows", ""]
    every = {**by_core, **by_extra}
    # Single-rollout objectives (KLPO, negative-token filtering) draw 64 tasks x 1 rollout:
    # their first batch differs from the 8 x 8 one by design.
    own_shape = sorted(m for m in every if _reshaped(m))
    firsts: dict[int, set] = {}
    for m, rs in every.items():
        for r in rs:
            if m not in own_shape:
                firsts.setdefault(r["seed"], set()).add(round(r["train"][0], 9))
    same = sum(len(v) == 1 for v in firsts.values())
    block = "pairing_reshaped" if own_shape else "pairing"
    out.append(render("learning_warm", block, same=same, seeds=len(firsts),
                      methods=", ".join(own_shape)))  # fmt: skip
    starts = [r["y"][0] for rs in (by_core or every).values() for r in rs]
    if starts:
        p = float(np.mean(starts))
        se = np.sqrt(p * (1 - p) / EVAL_EPISODES)
        train = len(next(iter(every.values()))[0]["train"]) * BATCH
        out.append(render("learning_warm", "noise", episodes=EVAL_EPISODES, p=f"{p:.2f}",
                          se=f"{se:.3f}", train_episodes=train))  # fmt: skip
    if "grpo" in every:
        mixed, cos = _signal(every["grpo"], "mixed")[0], _signal(every["grpo"], "grad_cos")[0]
        if np.isfinite(mixed) and np.isfinite(cos):
            orthogonal = render("learning_warm", "orthogonal") if abs(cos) < 0.2 else ""
            out.append(render("learning_warm", "grpo_signal", mixed=f"{mixed:.0%}",
                              cos=f"{cos:+.2f}", orthogonal=orthogonal))  # fmt: skip
    for m, rs in every.items():
        gains = [_gain(r) for r in rs]
        _, lo, hi = t_interval(gains)
        first, last = _drift(rs, "invalid")
        # A policy that no longer answers with a move has come apart, whatever its success.
        broke = ""
        if last - first > 0.25:
            broke = render("learning_warm", "broke", first=f"{first:.2f}", last=f"{last:.2f}")
        out.append(render(
            "learning_warm", "gain", method=m, interval=interval_cell(gains, "+.3f"), n=len(rs),
            what=render("learning_warm", verdict(lo, hi).replace(" ", "_")), broke=broke,
        ))  # fmt: skip
    mechanisms = {k.removeprefix("Mechanism: "): v for k, v in notes(NOTES).items()}
    out += [
        render("learning_warm", "mechanism", method=m, text=mechanisms[m])
        for m in every
        if m in mechanisms
    ]
    for what, pairs in core_pairs.items():
        if not pairs:
            continue
        resolved = [p for p in pairs if p.verdict != "not resolved"]
        kept = [p for p in pairs if p.verdict_holm != "not resolved"]
        out.append(render(
            "learning_warm", "resolved", what=what, n=len(resolved), total=len(pairs),
            told=_told(resolved), chance=f"{0.05 * len(pairs):.1f}", n_holm=len(kept),
            told_holm=_told(kept),
        ))  # fmt: skip
        out += _resolution(pairs, what)
    return [*out, ""]


def _told(pairs: list[PairVerdict]) -> str:
    return "; ".join(f"{p.a} {p.verdict} than {p.b}" for p in pairs) or "none"


def _per_run(rs: list[dict], name: str) -> list[float]:
    """Each run's mean ``signal[name]`` over its iterations; runs that did not record it (stored
    before it was) are left out."""
    return [
        float(np.nanmean(r["signal"][name]))
        for r in rs
        if r.get("signal", {}).get(name) and np.isfinite(r["signal"][name]).any()
    ]


def _signal(rs: list[dict], name: str) -> tuple[float, float, float]:
    """Mean over seeds of :func:`_per_run` with a 95% t-interval; NaN when no run has it."""
    per_run = _per_run(rs, name)
    return t_interval(per_run) if per_run else (np.nan, np.nan, np.nan)


def _signal_table(every: dict[str, list[dict]]) -> list[str]:
    """The signal in each update per method (:data:`SIGNAL`), averaged over iterations, with
    95% t-intervals over seeds; methods whose runs did not record it are left out."""
    shown = {m: rs for m, rs in every.items() if any(_per_run(rs, n) for n in SIGNAL)}
    if not shown:
        return []
    columns = [
        (n, "---", lambda rs, n=n: interval_cell(_per_run(rs, n)) if _per_run(rs, n) else "—")
        for n in SIGNAL
    ]
    table = "\n".join(ex.method_table(shown, columns))
    return [render("learning_warm", "signal", table=table), ""]


def _resolution(pairs: list[PairVerdict], what: str) -> list[str]:
    """How large a difference the benchmark could have resolved: the median half-width of the
    core pairs' paired-t intervals. "Not resolved" is then a statement with a size: a true
    difference well below this half-width is invisible at this budget, one well above it is
    not (a pair whose mean difference equals the half-width sits on the edge)."""
    half = [(p.t[1] - p.t[0]) / 2 for p in pairs if np.isfinite(p.t[0])]
    if not half:
        return []
    seeds = sorted({p.n for p in pairs if np.isfinite(p.t[0])})
    return [render(
        "learning_warm", "resolution", what=what, median=f"{np.median(half):.3f}",
        low=f"{min(half):.3f}", high=f"{max(half):.3f}", pairs=len(half),
        seeds="/".join(map(str, seeds)),
    )]  # fmt: skip


def _plot(results: list[dict], core: list[str], extra: list[str], path: Path) -> None:
    """Mean success over seeds against environment steps, with a min–max band: core methods
    on the left, the extra methods (with grpo for reference) on the right."""
    panels = [("core methods", core)] + (
        [("joined with a flag", ["grpo", *extra])] if extra else []
    )
    with figure(path, len(panels)) as axes:
        for ax, (title, methods) in zip(axes, panels, strict=True):
            # As many distinct colours as the panel has lines, the boldest first (grpo leads
            # both panels, so it has the same colour in each), and a marker each.
            shown = ex.by_method(results, methods)
            ex.plot_curves(ax, shown, styles(list(shown)), counts=True)
            ax.set_title(title)
            ax.set_xlabel("environment steps")
            ax.set_ylabel("eval success (temperature 1)")
