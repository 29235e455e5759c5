"""Credit-estimator benchmark: per-step credit against exact advantages, and compute time.

``python -m agentrl.bench credit`` runs every registered estimator that needs no learned critic
(default config) on batches sampled from random finite MDPs (:mod:`agentrl.credit.synthetic`),
whose behaviour values are known exactly: :func:`measure_quality` compares each estimator's
per-step advantage with Q^μ − V^μ, :func:`measure_speed` times it at about 6.4k, 100k and 1M
steps. The report's Setup section says how (driver estimators get :data:`DRIVER_BATCHES`,
stateful ones are warmed up, rescoring ones get an oracle scorer). Writes ``<out>/credit.md``
and ``credit.png`` (drawn from the report, :func:`replot`); ``--check`` (:func:`check`)
re-measures the accuracy tables and the times at 1M steps relative to GRPO's.
"""

from __future__ import annotations

import inspect
import math
import os
import re
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.bench._check import (
    TOLERANCE,
    CheckError,
    Figure,
    committed_report,
    confirmed,
    parse_number,
    tables_in,
)
from agentrl.bench._report import (
    SCRATCH,
    figure,
    header,
    render,
    section_text,
    styles,
    write_markdown,
)
from agentrl.credit import compute_advantages, estimator_config, get_estimator, list_estimators
from agentrl.credit.batch import StepBatch
from agentrl.credit.graph import build_graph
from agentrl.credit.properties import (
    C_VALUES,
    P_VALUES,
    identical_group_magnitude,
    passes,
    skip_reason,
    termination_grid,
    undiscounted,
)
from agentrl.credit.synthetic import (
    SyntheticScorer,
    expected_length,
    random_mdp,
    sample_groups,
    truncation_probability,
)

BETA = 0.98
GROUP_SIZES: tuple[int, ...] = (4, 8, 16)
SIZES: tuple[int, ...] = (6_400, 100_000, 1_000_000)
METRICS: tuple[str, ...] = ("pearson", "spearman", "mse", "mse_scaled", "rel_mse_scaled")
QUALITY_SECTIONS: tuple[tuple[str, str], ...] = (
    ("pearson", "Pearson r with the true advantage"),
    ("spearman", "Spearman ρ with the true advantage"),
    ("rel_mse_scaled", "Relative MSE after the best scale fit (1 = predicting 0)"),
    ("mse_scaled", "MSE after the best scale fit"),
    ("mse", "Raw MSE (unscaled)"),
)
"""The report's accuracy tables (metric, section title), in order."""
CHECK_METRICS = QUALITY_SECTIONS[:2]
"""The accuracy figures ``--check`` compares (metric, section of the report)."""
TIME_GROUP_SIZE = 8  # rollouts per group in the timing batches
WARMUP_BATCHES = 3
"""Earlier batches a stateful estimator sees (carrying its state) before a measured batch."""
SLOW_S = 20.0  # an estimator slower than this at one size is not timed at larger sizes
CALLS = 3
"""Calls in a row per estimator and round; the fastest counts. A single call of a ~10 ms
estimator at 1M steps varied by ±20% between rounds here (allocator and page-fault state), and
GRPO's time is the denominator of every ratio ``--check`` compares."""
GRAPH_ROW = "graph build"  # the shared graph's row of the timing tables
CLOCK = time.process_time
"""The timings' clock: CPU seconds of this process (user + system). With single-threaded numpy
(``OMP_NUM_THREADS=1``) it equals the wall time on an idle machine, and on a busy shared one it
leaves out the time spent waiting for a core, which wall time would add at random."""


class _TimedScorer:
    """Wraps a scorer and adds up the time (:data:`CLOCK`) spent in ``score``."""

    def __init__(self, scorer: Any):
        self.scorer = scorer
        self.seconds = 0.0

    def score(self, contexts: Sequence[str], responses: Sequence[str]) -> np.ndarray:
        t0 = CLOCK()
        try:
            return self.scorer.score(contexts, responses)
        finally:
            self.seconds += CLOCK() - t0


def credit_metrics(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Agreement of a per-step credit ``pred`` (N,) with the true advantage ``truth`` (N,).

    Returns Pearson r and Spearman ρ (NaN when either side is constant), the raw MSE, the MSE
    after the best scale c* = ⟨pred, truth⟩/⟨pred, pred⟩ (0 for an all-zero ``pred``) and that
    scaled MSE divided by mean(truth²) (1 means no better than predicting 0).
    """

    def corr(x: np.ndarray, y: np.ndarray) -> float:
        x, y = x - x.mean(), y - y.mean()
        den = np.sqrt((x @ x) * (y @ y))
        return float(x @ y / den) if den > 1e-12 * len(x) else float("nan")

    pp = float(pred @ pred)
    scale = float(pred @ truth) / pp if pp > 0 else 0.0
    mse_scaled = float(np.mean((scale * pred - truth) ** 2))
    energy = float(np.mean(truth**2))
    return {
        "pearson": corr(pred, truth),
        "spearman": corr(_ranks(pred), _ranks(truth)),
        "mse": float(np.mean((pred - truth) ** 2)),
        "mse_scaled": mse_scaled,
        "rel_mse_scaled": mse_scaled / energy if energy > 0 else float("nan"),
    }


def _ranks(x: np.ndarray) -> np.ndarray:
    """(L,) average ranks (ties share the mean of their positions), as Spearman's ρ needs;
    written out because importing ``scipy.stats`` alone takes seconds."""
    _, inverse, count = np.unique(x, return_inverse=True, return_counts=True)
    last = np.cumsum(count)
    return (last - (count - 1) / 2.0)[inverse.reshape(-1)]


@dataclass
class Quality:
    """Per estimator and group size, one row of :data:`METRICS` per MDP; plus batch facts."""

    scores: dict[str, dict[int, list[list[float]]]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    data: dict[int, list[list[float]]] = field(default_factory=dict)
    """Per G, per MDP: steps, success rate, non-singleton fraction, truncated fraction."""
    per_step: dict[str, bool] = field(default_factory=dict)
    """Whether an estimator ever gave two steps of one trajectory different credit."""

    def array(self, name: str, g: int) -> np.ndarray:
        """(n_mdps, len(METRICS)) float64."""
        return np.asarray(self.scores.get(name, {}).get(g, []), dtype=np.float64).reshape(
            -1, len(METRICS)
        )


@dataclass
class Timing:
    """Median seconds per batch size; ``None`` where skipped."""

    sizes: list[int] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    sample_s: list[float] = field(default_factory=list)
    graph_s: list[float] = field(default_factory=list)
    est_s: dict[str, list[float | None]] = field(default_factory=dict)
    scoring_s: dict[str, list[float | None]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    calls_s: list[dict[str, list[float]]] = field(default_factory=list)
    """Per size, the seconds of every call, round by round (``"graph build"`` and each
    estimator; fewer calls for an estimator that failed or went over :data:`SLOW_S`)."""


def continuation_batch(batch: StepBatch) -> StepBatch:
    """The episodes of ``batch`` as AC2 (``algo=ac2``) consumes data: one row per step.

    AC2's driver (:class:`agentrl.algos.ac2.driver.AC2Driver`) emits one single-step
    trajectory per continuation of a prefix, valued by its endpoint, and groups the
    continuations of one prefix. Here step n (state s_n, action a_n) is one continuation of the
    prefix "state s_n of its task group": its group is its anchor (``step_anchor``, interned per
    task group, so steps of one group that visit the same state share it: the states are
    Markov, so every visit is the same prefix), and its endpoint value is the undiscounted return
    that followed it, Σ_{t ≥ n} r_t — AC2's fully continued, graded case (an unready or audited
    problem). AC2's critic path (value estimates of unfinished chunks) is not modelled. Rows
    keep the order of ``batch``'s steps, so advantages line up with the episode steps.

    Returns:
        A :class:`StepBatch` of N single-step trajectories: ``traj_group = step_anchor`` (not
        sorted by group), reward = return-to-go, validity, lost flags and NLLs copied.
    """
    n = batch.n_steps
    r = batch.step_reward
    c = np.cumsum(r)  # (N,)
    last = np.cumsum(batch.traj_len) - 1  # (M,) index of each trajectory's last step
    to_go = c[last][batch.step_traj] - c + r if n else r.copy()  # (N,) Σ_{t ≥ n} r_t
    rows = np.arange(n, dtype=np.int64)
    return StepBatch(
        step_reward=to_go,
        step_traj=rows,
        step_t=np.zeros(n, dtype=np.int64),
        step_anchor=batch.step_anchor,
        step_action=batch.step_action,
        step_valid=batch.step_valid,
        step_terminated=np.ones(n, dtype=bool),  # each continuation ends at its endpoint
        step_truncated=np.zeros(n, dtype=bool),
        step_nll=batch.step_nll,
        traj_group=batch.step_anchor.astype(np.int64),
        traj_won=batch.traj_won[batch.step_traj],
        n_groups=int(batch.step_anchor.max()) + 1 if n else 0,
        action_names=batch.action_names,
        anchor_keys=batch.anchor_keys,
        traj_lost=batch.step_lost,
    )


def benchmarked() -> tuple[list[str], list[str]]:
    """(the estimators the benchmark measures, those it leaves out): every registered estimator
    except those that need a learned critic (``critic=``, e.g. GAE), whose advantages depend on
    a trained value model rather than on the batch alone."""
    names = list_estimators()
    left_out = [n for n in names if getattr(get_estimator(n), "critic", None)]
    return [n for n in names if n not in left_out], left_out


DRIVER_BATCHES: dict[str, Callable[[StepBatch], StepBatch]] = {
    "ac2": continuation_batch,
    # PS-PPO compares an attempt with the other continuations of its prefix (its anchor): on
    # episodes, each step's return-to-go against the other visits of its state, as for AC2.
    "psppo": continuation_batch,
}
"""How the benchmark turns a batch of episodes into the batch that an estimator with its own
rollout driver consumes; such an estimator without an entry here is reported as an error."""


def driver_batches(names: Sequence[str], batch: StepBatch) -> dict[str, StepBatch]:
    """Per estimator with a rollout driver, its batch built from ``batch`` (once per batch,
    outside the timings, as the trainer's driver builds it during the rollout)."""
    out = {}
    for name in names:
        if get_estimator(name).driver is not None and name in DRIVER_BATCHES:
            out[name] = DRIVER_BATCHES[name](batch)
    return out


def _run_one(
    name: str, batch, graph, scorer, views: dict[str, StepBatch], state: Any = None
) -> np.ndarray:
    return _advantages(name, batch, graph, scorer, views, state).step


def _advantages(name: str, batch, graph, scorer, views: dict[str, StepBatch], state: Any = None):
    """:func:`compute_advantages` with the benchmark's inputs for ``name`` (default config)."""
    spec = get_estimator(name)
    if spec.driver is not None:
        if name not in views:
            raise ValueError(
                f"{name} rolls out with its own driver ({spec.driver}) and the credit benchmark "
                "has no synthetic batch for it (add one to DRIVER_BATCHES)"
            )
        batch, graph = views[name], None  # a graph, if needed, is built from its own batch
    return compute_advantages(
        name,
        batch,
        estimator_config(name),
        graph=graph if spec.needs_graph else None,
        scorer=scorer if spec.needs_scorer else None,
        state=state if spec.stateful else None,
    )


def warm_state(name: str, batches: Sequence[StepBatch], scorer: Any) -> Any:
    """The state of stateful estimator ``name`` after it has seen ``batches`` in turn."""
    state = None
    for b in batches:
        graph = build_graph(b) if get_estimator(name).needs_graph else None
        state = _advantages(name, b, graph, scorer, driver_batches([name], b), state).state
    return state


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def measure_quality(
    names: Sequence[str],
    n_mdps: int,
    n_groups: int,
    group_sizes: Sequence[int],
    log: Callable[[str], Any],
) -> Quality:
    """Run every estimator on ``n_mdps`` random MDPs (seeds 0..) × ``group_sizes``."""
    q = Quality(scores={n: {g: [] for g in group_sizes} for n in names})
    q.data = {g: [] for g in group_sizes}
    for seed in range(n_mdps):
        mdp = random_mdp(np.random.default_rng(seed))
        scorer = SyntheticScorer(mdp)
        for g in group_sizes:
            rng = np.random.default_rng([seed, g])
            batch, truth = sample_groups(mdp, rng, n_groups, g, beta=BETA, with_texts=True)
            counts = np.bincount(batch.step_anchor)
            q.data[g].append(
                [
                    batch.n_steps,
                    float(batch.traj_won.mean()),
                    float((counts[batch.step_anchor] > 1).mean()),
                    float(batch.step_truncated.sum() / batch.n_trajs),
                ]
            )
            graph = build_graph(batch)
            views = driver_batches(names, batch)
            stateful = [n for n in names if get_estimator(n).stateful]
            warmup = [
                sample_groups(
                    mdp, np.random.default_rng([seed, g, 1 + k]), n_groups, g, BETA, True
                )[0]
                for k in range(WARMUP_BATCHES if stateful else 0)
            ]
            for name in names:
                if name in q.errors:
                    continue
                try:
                    state = warm_state(name, warmup, scorer) if name in stateful else None
                    pred = _run_one(name, batch, graph, scorer, views, state)
                except Exception as exc:  # one broken estimator must not stop the others
                    q.errors[name] = _error(exc)
                    log(f"[credit] {name} failed: {traceback.format_exc()}")
                    continue
                # Trajectory-level estimators give all steps of a rollout one value; say so.
                first = np.zeros(batch.n_trajs)
                first[batch.step_traj] = pred
                varies = bool(np.any(np.abs(pred - first[batch.step_traj]) > 1e-12))
                q.per_step[name] = q.per_step.get(name, False) or varies
                m = credit_metrics(pred, truth)
                q.scores[name][g].append([m[k] for k in METRICS])
        if (seed + 1) % 10 == 0 or seed + 1 == n_mdps:
            log(f"[credit] quality: MDP {seed + 1}/{n_mdps} done")
    return q


def _fastest(call: Callable[[], Any]) -> float:
    """The fastest of :data:`CALLS` calls in a row (:data:`CLOCK` seconds); one call when it
    took over :data:`SLOW_S`."""
    best = math.inf
    for _ in range(CALLS):
        t0 = CLOCK()
        call()
        best = min(best, CLOCK() - t0)
        if best > SLOW_S:
            break
    return best


def measure_speed(
    names: Sequence[str],
    sizes: Sequence[int],
    repeats: Sequence[int],
    log: Callable[[str], Any],
) -> Timing:
    """Median CPU time (:data:`CLOCK`) per batch of about ``sizes[k]`` steps, over
    ``repeats[k]`` rounds.

    A round times the graph build and then every estimator, each :data:`CALLS` times in a row
    with the fastest call counting, so that a change of the machine's load hits all of them
    alike (``--check`` compares times within a round). An estimator stops being called at a
    size once one call took over :data:`SLOW_S`, and is not timed at larger sizes when its
    median did.
    """
    mdp = random_mdp(np.random.default_rng(12345))
    per_group = TIME_GROUP_SIZE * expected_length(mdp)
    scorer = _TimedScorer(SyntheticScorer(mdp))
    out = Timing(est_s={n: [] for n in names}, scoring_s={n: [] for n in names})
    too_slow: set[str] = set()
    for size, reps in zip(sizes, repeats):
        n_groups = max(1, round(size / per_group))
        t0 = time.perf_counter()
        batch, _ = sample_groups(
            mdp, np.random.default_rng(size), n_groups, TIME_GROUP_SIZE, beta=BETA, with_texts=True
        )
        out.sample_s.append(time.perf_counter() - t0)
        out.sizes.append(batch.n_steps)
        out.groups.append(n_groups)
        graph = build_graph(batch)
        views = driver_batches(names, batch)
        states: dict[str, Any] = {}
        for name in names:  # a warm state, outside the timings (see the module)
            if get_estimator(name).stateful and name not in too_slow and name not in out.errors:
                try:
                    states[name] = warm_state(name, [batch], scorer)
                except Exception as exc:
                    out.errors[name] = _error(exc)
                    log(f"[credit] {name} failed: {traceback.format_exc()}")
        calls: dict[str, list[float]] = {GRAPH_ROW: [], **{n: [] for n in names}}
        scoring: dict[str, float] = dict.fromkeys(names, 0.0)
        timed = [n for n in names if n not in too_slow and n not in out.errors]
        for _ in range(reps):
            calls[GRAPH_ROW].append(_fastest(partial(build_graph, batch)))
            for name in timed:
                if name in out.errors or (calls[name] and calls[name][-1] > SLOW_S):
                    continue
                scorer.seconds = 0.0
                try:
                    t = _fastest(
                        partial(_run_one, name, batch, graph, scorer, views, states.get(name))
                    )
                except Exception as exc:
                    out.errors[name] = _error(exc)
                    log(f"[credit] {name} failed: {traceback.format_exc()}")
                    continue
                calls[name].append(t)
                scoring[name] += scorer.seconds / CALLS
        out.calls_s.append(calls)
        out.graph_s.append(float(np.median(calls[GRAPH_ROW])))
        log(f"[credit] speed: {batch.n_steps:,} steps, graph {out.graph_s[-1]:.3f} s")
        for name in names:
            if name not in timed or name in out.errors:
                out.est_s[name].append(None)
                out.scoring_s[name].append(None)
                continue
            t = float(np.median(calls[name]))
            out.est_s[name].append(t)
            needs = get_estimator(name).needs_scorer
            out.scoring_s[name].append(scoring[name] / len(calls[name]) if needs else None)
            if t > SLOW_S:
                too_slow.add(name)
            log(f"  {name}: {t:.4f} s")
    return out


def _fmt_stat(values: np.ndarray, digits: int = 2) -> str:
    """``mean ± sd`` over MDPs, ignoring NaN; 'n/a' when all are NaN (constant output)."""
    ok = values[np.isfinite(values)]
    if ok.size == 0:
        return "n/a"
    sd = f" ± {ok.std(ddof=1):.{digits}f}" if ok.size > 1 else ""
    nan = f" ({values.size - ok.size} n/a)" if ok.size < values.size else ""
    return f"{ok.mean():.{digits}f}{sd}{nan}"


def _fmt_s(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:.1f} ms" if t < 1 else f"{t:.2f} s"


def _quality_table(q: Quality, names: Sequence[str], sizes: Sequence[int], metric: str) -> str:
    k = METRICS.index(metric)
    digits = 4 if metric in ("mse", "mse_scaled") else 2
    lines = [
        "| estimator | " + " | ".join(f"G = {g}" for g in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for name in names:
        if name in q.errors:
            cells = [f"error: {q.errors[name]}"] + [""] * (len(sizes) - 1)
        else:
            cells = [_fmt_stat(q.array(name, g)[:, k], digits) for g in sizes]
        lines.append(f"| {name}{_flags(name, q)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _flags(name: str, q: Quality) -> str:
    """Marks after an estimator's name: rescoring, and trajectory-level credit."""
    marks = []
    if get_estimator(name).needs_scorer:
        marks.append("scorer")
    if name in q.per_step and not q.per_step[name]:
        marks.append("traj")
    return f" ({', '.join(marks)})" if marks else ""


def _speed_table(t: Timing, names: Sequence[str], scored: bool) -> str:
    head = " | ".join(f"{n:,} steps" for n in t.sizes)
    big = bool(t.sizes) and t.sizes[-1] >= 500_000
    lines = [
        f"| estimator | {head} |" + (" 1M under 2 s? |" if big else ""),
        "|---|" + "---:|" * len(t.sizes) + ("---|" if big else ""),
    ]
    if not scored:
        lines.append(
            "| *graph build (shared, once per batch)* | "
            + " | ".join(_fmt_s(x) for x in t.graph_s)
            + " |"
            + (f" {'yes' if t.graph_s[-1] < 2 else 'no'} |" if big else "")
        )
    for name in names:
        if get_estimator(name).needs_scorer != scored:
            continue
        if name in t.errors and all(x is None for x in t.est_s[name]):
            lines.append(f"| {name} | error: {t.errors[name]} |")
            continue
        cells = []
        for est, sc in zip(t.est_s[name], t.scoring_s[name]):
            cell = _fmt_s(est)
            if sc is not None:
                cell += f" (scoring {_fmt_s(sc)})"
            cells.append(cell)
        row = f"| {name} | " + " | ".join(cells) + " |"
        if big:
            est = t.est_s[name][-1]
            if est is None:
                row += " skipped (too slow at a smaller size) |"
            else:
                spec = get_estimator(name)
                own = est - (t.scoring_s[name][-1] or 0.0)  # the synthetic scoring left out
                notes = []
                if spec.needs_scorer:
                    notes.append(f"{_fmt_s(own)} without scoring")
                if spec.needs_graph:
                    total = own + t.graph_s[-1]
                    notes.append(f"with graph {_fmt_s(total)}: {'yes' if total < 2 else 'no'}")
                row += f" {'yes' if own < 2 else 'no'}"
                row += f" ({'; '.join(notes)}) |" if notes else " |"
        lines.append(row)
    return "\n".join(lines)


@dataclass
class PlotData:
    """What ``credit.png`` shows, read from a written report (:func:`plot_data_from_report`): so
    the plot can be redrawn without measuring again, and always shows the report's numbers."""

    group_sizes: list[int]
    pearson: dict[str, tuple[list[float], list[float]]]
    """Estimator → (mean Pearson r, its standard error over MDPs) at each group size."""
    sizes: list[int]
    """Steps per timed batch."""
    graph_s: list[float]
    times: dict[str, list[float | None]]
    """Estimator → seconds per batch at each size (scoring included; None: not timed)."""
    scored: set[str] = field(default_factory=set)
    """Estimators whose times include rescoring (drawn dotted)."""


def plot_data_from_report(text: str) -> PlotData:
    """The plot's numbers from a credit report: its Pearson table (mean ± sd over its MDPs)
    and its timing tables."""
    setup = re.search(r"Quality: (\d+) MDPs", text)
    if setup is None:
        raise CheckError("no 'Quality: <n> MDPs' line in the report")
    n_mdps = int(setup.group(1))
    stats = _quality_stats(text, CHECK_METRICS[0][1])
    group_sizes = sorted({g for _, g in stats})
    pearson = {}
    for name in dict.fromkeys(n for n, _ in stats):
        cells = [stats[(name, g)] for g in group_sizes]
        if all(cells):  # not an estimator that failed
            pearson[name] = ([m for m, _ in cells], [sd / np.sqrt(n_mdps) for _, sd in cells])
    sizes, times, scored = _speed_columns(text)
    graph_s = [v if v is not None else float("nan") for v in times.pop(GRAPH_ROW, [])]
    return PlotData(group_sizes, pearson, sizes, graph_s, times, scored)


def replot(report_dir: str | os.PathLike) -> Path:
    """Draw ``<report_dir>/credit.png`` from ``<report_dir>/credit.md`` without measuring
    (``python -c "from agentrl.bench.credit import replot; replot('results')"``)."""
    out = Path(report_dir)
    path = out / "credit.png"
    _plot(path, plot_data_from_report((out / "credit.md").read_text()))
    return path


def _plot(path: Path, data: PlotData) -> None:
    # One colour and marker per estimator, the same in both panels: every line is told apart.
    style = styles([*data.pearson, *data.times])
    with figure(path, 2, (7.5, 5.2)) as (ax1, ax2):
        for name, (means, errs) in data.pearson.items():
            ax1.errorbar(data.group_sizes, means, yerr=errs, capsize=3, label=name, **style[name])
        ax1.set_xscale("log", base=2)
        ax1.set_xticks(data.group_sizes, [str(g) for g in data.group_sizes])
        ax1.set_xlabel("group size G")
        ax1.set_ylabel("Pearson r with Q^μ − V^μ (β = 0.98)")
        ax1.set_title("credit quality (mean ± s.e. over MDPs)")
        ax2.plot(data.sizes, data.graph_s, "k--", marker="s", label="graph build (shared)")
        for name, ys in data.times.items():
            pts = [(n, y) for n, y in zip(data.sizes, ys) if y is not None]
            scored = name in data.scored
            if pts:
                ax2.plot(*zip(*pts), **style[name], linestyle=":" if scored else "-",
                         label=name + (" (incl. scoring)" if scored else ""))  # fmt: skip
        ax2.axhline(2.0, color="grey", linewidth=0.8)
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        ax2.set_xlabel("steps per batch")
        ax2.set_ylabel("CPU seconds per batch (median)")
        ax2.set_title("compute time")
        for ax in (ax1, ax2):
            ax.grid(alpha=0.3, which="both")
            # Beside the panel, not over the lines: with many estimators a legend hides points.
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def run(
    out_dir: str | os.PathLike = SCRATCH,
    quick: bool = False,
    log: Callable[[str], Any] = print,
    n_mdps: int = 100,
    n_groups: int = 16,
) -> tuple[Quality, Timing]:
    """Run the benchmark and write ``<out_dir>/credit.md`` and ``<out_dir>/credit.png``.

    Args:
        out_dir: folder of the report.
        quick: a smoke run (2 MDPs of 4 groups; timing at about 1k and 3k steps, once each).
        log: where progress lines go.
        n_mdps: random MDPs (seeds 0..n_mdps − 1) per group size for the quality tables.
        n_groups: groups per quality batch (16, CRBC's ALFWorld setting).

    Returns:
        The raw :class:`Quality` and :class:`Timing` measurements.
    """
    sizes: Sequence[int] = SIZES
    repeats: Sequence[int] = (7, 5, 5)
    if quick:
        n_mdps, n_groups, sizes, repeats = 2, 4, (1_000, 3_000), (1, 1)
    names, left_out = benchmarked()
    log(f"[credit] estimators: {', '.join(names)}")
    # Timings on a shared machine are noisy; the load at the start says how busy it was.
    load = os.getloadavg()[0]
    t_start = time.perf_counter()
    q = measure_quality(names, n_mdps, n_groups, GROUP_SIZES, log)
    t_quality = time.perf_counter() - t_start
    t = measure_speed(names, sizes, repeats, log)
    t_total = time.perf_counter() - t_start
    properties = property_sections(names, log)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    probe = [random_mdp(np.random.default_rng(s)) for s in range(n_mdps)]
    trunc = max(truncation_probability(m) for m in probe)
    horizons = [m.horizon for m in probe]
    data_rows = []
    for g in GROUP_SIZES:
        d = np.asarray(q.data[g], dtype=np.float64)
        data_rows.append(
            f"| {g} | {d[:, 0].mean():,.0f} | {d[:, 1].mean():.2f} "
            f"[{d[:, 1].min():.2f}, {d[:, 1].max():.2f}] | {d[:, 2].mean():.2f} "
            f"| {d[:, 3].mean():.4f} |"
        )
    mdp = {k: p.default for k, p in inspect.signature(random_mdp).parameters.items() if k != "rng"}
    head = header(("agentrl", "numpy", "scipy"), "python -m agentrl.bench credit", quick,
                  f" ({load:.1f} at the start)")  # fmt: skip
    scored = [n for n in names if get_estimator(n).needs_scorer]
    # The Setup bullets (blocks of templates/credit.md) that concern some estimators, with the
    # estimators each names; a bullet with none is left out.
    setup = {
        "scored": scored,
        "stateful": [n for n in names if get_estimator(n).stateful],
        **{n: [n] for n in ("ac2", "psppo") if n in names and get_estimator(n).driver},
    }
    errors = {**q.errors, **{k: v for k, v in t.errors.items() if k not in q.errors}}
    speed = _speed_table(t, names, scored=False)
    if scored:
        speed += "\n\n" + render("credit", "scored_times", table=_speed_table(t, names, True))
    if errors:
        bullets = "\n".join(f"- {k}: {v}" for k, v in errors.items())
        speed += "\n\n" + render("credit", "errors", errors=bullets)
    text = render(
        "credit",
        head=head,
        t_total=f"{t_total:.0f}",
        t_quality=f"{t_quality:.0f}",
        names=", ".join(names),
        left_out=" " + render("credit", "left_out", names=", ".join(left_out)) if left_out else "",
        **{k: mdp[k] for k in ("n_states", "n_actions", "branching", "success_range")},
        n_mdps=n_mdps,
        last_seed=n_mdps - 1,
        n_groups=n_groups,
        beta=BETA,
        horizons=f"{min(horizons)}-{max(horizons)}",
        trunc=f"{trunc:.1e}",
        setup="".join(
            "\n" + render("credit", k, names=", ".join(v), warmup=WARMUP_BATCHES)
            for k, v in setup.items()
            if v
        ),
        data_rows="\n".join(data_rows),
        quality="\n\n".join(
            f"## {title}\n\n{_quality_table(q, names, GROUP_SIZES, metric)}"
            for metric, title in QUALITY_SECTIONS
        ),
        repeats=", ".join(map(str, repeats)),
        calls=CALLS,
        group_size=TIME_GROUP_SIZE,
        groups=", ".join(f"{g:,}" for g in t.groups),
        slow=f"{SLOW_S:.0f}",
        sample_s=", ".join(_fmt_s(x) for x in t.sample_s),
        speed=speed,
        properties=properties,
    )
    path = write_markdown(out / "credit.md", text + "\n")
    replot(out)  # the plot shows what the report says
    log(f"[credit] wrote {path} and {out / 'credit.png'} in {t_total:.0f} s")
    return q, t


# --- exact properties: termination bias and identical groups (agentrl.credit.properties) ---

TERMINATION_SECTION = "Termination bias"
IDENTICAL_SECTION = "Identical groups"
TERMINATION_EXTRA: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("mtgrpo", {"norm_by_std": False}, "separate"),
    ("mtgrpo", {"baseline": "return_to_go", "norm_by_std": False}, "separate"),
    (
        "mtgrpo",
        {"baseline": "return_to_go", "leave_one_out": True, "norm_by_std": False},
        "separate",
    ),
    ("mtgrpo", {"baseline": "zero_padded", "norm_by_std": False}, "separate"),
)
"""Rows beyond every estimator's own: MT-GRPO as verl #7244 states it (mean only, the outcome
as a separate term) and its two fixes."""
IDENTICAL_EXTRA: tuple[tuple[str, dict[str, Any]], ...] = tuple(
    (n, {"zero_identical_groups": True}) for n in ("gigpo", "gagpo", "gaca")
)


def _label(name: str, overrides: dict[str, Any], outcome: str = "folded") -> str:
    """``gigpo (gamma=1)``, ``mtgrpo (baseline=return_to_go, separate outcome)``, ``grpo``."""

    def text(v: Any) -> str:
        return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else v

    opts = [f"{k}={text(v)}" for k, v in overrides.items()]
    opts += ["separate outcome"] if outcome == "separate" else []
    return f"{name} ({', '.join(opts)})" if opts else name


def termination_rows(names: Sequence[str]) -> dict[str, tuple[list[float], list[float], Any]]:
    """Row label → (E[ĝ] in variant A and in B over the (c, p) grid, c-major; max |E[ĝ]| in A at
    the default discount, or None for an estimator without one). Every estimator of ``names``
    that can be measured, undiscounted with the outcome folded, then :data:`TERMINATION_EXTRA`."""
    rows = [(n, undiscounted(n), "folded") for n in names if skip_reason(n) is None]
    rows += [r for r in TERMINATION_EXTRA if r[0] in names]
    out = {}
    for name, overrides, outcome in rows:
        cfg = estimator_config(name, overrides)
        grids = [termination_grid(name, cfg, v, outcome) for v in ("A", "B")]
        default = None
        if overrides and overrides == undiscounted(name):
            default = max(map(abs, termination_grid(name, None, "A", outcome)))
        out[_label(name, overrides, outcome)] = (*grids, default)
    return out


def identical_rows(names: Sequence[str]) -> dict[str, float]:
    """Row label → max |A| over a group of identical rollouts (default config, then
    :data:`IDENTICAL_EXTRA`)."""
    rows = [(n, {}) for n in names if skip_reason(n) is None]
    rows += [r for r in IDENTICAL_EXTRA if r[0] in names]
    return {
        _label(n, o): identical_group_magnitude(n, estimator_config(n, o) if o else None)
        for n, o in rows
    }


def _g(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None else "0" if x == 0 else format(x, fmt)


def property_sections(names: Sequence[str], log: Callable[[str], Any] = print) -> str:
    """The report's "Termination bias" and "Identical groups" sections (exact, no sampling)."""
    t0 = time.perf_counter()
    lines, mid = [], P_VALUES.index(0.5)
    at = [k * len(P_VALUES) + mid for k in range(len(C_VALUES))]  # p = 0.5 at each c
    for label, (a, b, default) in termination_rows(names).items():
        right = sum(np.sign(v) == 1 for v in b)
        lines.append(
            f"| {label} | {_g(max(map(abs, a)))} | {' / '.join(_g(a[k], '+.6f') for k in at)} | "
            f"{' / '.join(_g(b[k], '+.6f') for k in at)} | {right}/{len(b)} | "
            f"{'pass' if passes(a, b) else 'fail'} | {_g(default)} |"
        )
    same = [
        f"| {k} | {_g(v)} | {'yes' if v == 0 else 'no'} |" for k, v in identical_rows(names).items()
    ]
    log(f"[credit] termination bias and identical groups: {time.perf_counter() - t0:.0f} s")
    return (
        render("credit", "termination", rows="\n".join(lines))
        + "\n\n"
        + render("credit", "identical", rows="\n".join(same))
    )


def property_figures(text: str, path: Path, names: Sequence[str]) -> list[Figure]:
    """``--check`` of the two property sections, re-measured for the estimators ``names``: each
    row's verdict (1 pass, 0 fail: a pass turned fail is a regression) and identical-group
    magnitude (lower is better). A committed report without a section gives one skipped figure
    for it (nothing measured), never a failure."""

    def verdicts() -> dict[str, float]:
        return {k: float(passes(a, b)) for k, (a, b, _) in termination_rows(names).items()}

    sections = {
        TERMINATION_SECTION: ("verdict", verdicts),
        IDENTICAL_SECTION: ("max abs(A)", lambda: identical_rows(names)),
    }
    figures: list[Figure] = []
    for section, (column, measure) in sections.items():
        higher = section == TERMINATION_SECTION  # a verdict, else a magnitude
        if section_text(text, section) is None:
            why = f"{path} has no '## {section}' section (written by `credit --update`)"
            figures.append(Figure(f"credit: {section.lower()}", None, None, higher, skip=why))
            continue
        table = tables_in(text, section)[0]
        col = table.column(column)
        committed = {
            r[0]: float(r[col] == "pass") if higher else parse_number(r[col]) for r in table.rows
        }
        measured = measure()
        for label in sorted(set(committed) | set(measured)):
            fig = f"credit: {section.lower()} of {label}"
            if label not in committed or label not in measured:
                where = "the committed report" if label not in committed else "this tree"
                figures.append(Figure(fig, None, None, higher, skip=f"no such row in {where}"))
            else:
                figures.append(Figure(fig, committed[label], measured[label], higher))
    return figures


# --- --check ---

SPEED_SECTION = "Compute time per batch"
REFERENCE = "grpo"
"""Times are compared relative to this estimator's in the same run (cheap and simple, so its
time tracks the machine, not the estimators' code)."""


def _row_name(cell: str) -> str:
    """``"grpo (traj)"`` → ``"grpo"``; ``"*graph build (shared, once per batch)*"`` → ``"graph
    build"``."""
    return cell.replace("*", "").split(" (", 1)[0].strip()


def _quality_stats(text: str, section: str) -> dict[tuple[str, int], tuple[float, float] | None]:
    """(estimator, G) → (mean, sd) of the table under ``## section`` of a credit report (None
    for a cell without a number: an error or n/a)."""
    (table,) = tables_in(text, section)[:1]
    out = {}
    for header_cell in table.headers[1:]:
        g, col = int(header_cell.removeprefix("G = ")), table.column(header_cell)
        for row in table.rows:
            m = re.match(r"\s*(-?[\d.]+)(?: ± ([\d.]+))?", row[col] if col < len(row) else "")
            out[(_row_name(row[0]), g)] = (float(m[1]), float(m[2] or 0.0)) if m else None
    return out


def committed_quality(text: str, section: str) -> dict[tuple[str, int], float | None]:
    """(estimator, G) → the mean in the table under ``## section`` of a credit report."""
    return {k: v[0] if v else None for k, v in _quality_stats(text, section).items()}


def _speed_columns(text: str) -> tuple[list[int], dict[str, list[float | None]], set[str]]:
    """The timing tables of a credit report: the batch sizes, name → seconds at each (the
    estimator's total, scoring included; :data:`GRAPH_ROW` for the shared graph), and the names
    whose times include scoring."""
    tables = tables_in(text, SPEED_SECTION)
    columns = [h for h in tables[0].headers if h.endswith(" steps")]
    if not columns:
        raise CheckError(f"no '<N> steps' column under '## {SPEED_SECTION}'")
    times: dict[str, list[float | None]] = {}
    scored: set[str] = set()
    for tab in tables:
        for row in tab.rows:
            cells = [row[tab.column(h)] if tab.column(h) < len(row) else "" for h in columns]
            times[_row_name(row[0])] = [parse_number(c) for c in cells]
            if any("(scoring" in c for c in cells):
                scored.add(_row_name(row[0]))
    return [int(h.split()[0].replace(",", "")) for h in columns], times, scored


def committed_times(text: str) -> tuple[int, dict[str, float | None]]:
    """The largest timed batch of a credit report: its step count and name → seconds."""
    sizes, times, _ = _speed_columns(text)
    k = int(np.argmax(sizes))
    return sizes[k], {name: values[k] for name, values in times.items()}


def check(
    results_dir: str | os.PathLike = "results",
    log: Callable[[str], Any] = print,
    tolerance: float = TOLERANCE,
    repeats: int = 9,
) -> list[Figure]:
    """Re-measure and compare with ``<results_dir>/credit.md`` (``credit --check``).

    Accuracy: the Pearson and Spearman tables are recomputed at the committed report's size
    (its number of MDPs and groups; seeded, so the numbers are deterministic). Speed:
    :func:`measure_speed` at the largest size only (the same seeded batch of ≈ 1M steps,
    ``repeats`` rounds); each time is compared as a ratio to GRPO's (measured: the median over
    rounds of the ratio within a round; committed: the ratio of the committed medians), which
    cancels the machine's speed and much of its load; a ratio beyond ``tolerance`` is measured
    again (:func:`~agentrl.bench._check.confirmed`).

    Only the estimators the committed report holds (its Pearson table's rows) are measured: one
    registered here without a row there (a plugin, or one added since the report) is a skipped
    figure, and one the report holds that is no longer registered is skipped too. A held
    estimator whose figure is missing from one of the committed tables fails.
    """
    path, text = committed_report(results_dir, "credit.md", "credit")
    setup = re.search(r"Quality: (\d+) MDPs.*? with (\d+) groups of G rollouts", text)
    if setup is None:
        raise CheckError(f"{path}: no 'Quality: <n> MDPs ... <n> groups of G rollouts' line")
    n_mdps, n_groups = int(setup.group(1)), int(setup.group(2))
    registered, left_out = benchmarked()
    for name in left_out:
        log(f"[credit --check] {name} is left out (it needs a learned critic)")
    held = {n for n, _ in committed_quality(text, CHECK_METRICS[0][1])}
    names = [n for n in registered if n in held]
    not_held = [n for n in registered if n not in held]
    if not_held:
        log(
            f"[credit --check] skipped, registered here but without a row in {path}: "
            f"{', '.join(not_held)}"
        )
    why = f"registered here, but {path} has no row for it; not measured"
    figures = [Figure(f"credit: {name}", None, None, True, skip=why) for name in not_held]

    t0 = time.perf_counter()
    q = measure_quality(names, n_mdps, n_groups, GROUP_SIZES, log)
    took = time.perf_counter() - t0
    log(f"[credit --check] quality ({n_mdps} MDPs × {n_groups} groups): {took:.0f} s")
    for metric, section in CHECK_METRICS:
        committed = committed_quality(text, section)
        k, label = METRICS.index(metric), section.split(" with ")[0]
        for name in sorted(set(names) | {n for n, _ in committed}):
            for g in GROUP_SIZES:
                fig = f"credit: {label} of {name} at G = {g}"
                if name not in names:
                    figures.append(Figure(fig, None, None, True, skip="no longer registered"))
                    continue
                v = q.array(name, g)[:, k]
                v = v[np.isfinite(v)]
                measured = float(v.mean()) if v.size and name not in q.errors else None
                figures.append(Figure(fig, committed.get((name, g)), measured, True))
    figures += property_figures(text, path, names)

    size, times = committed_times(text)
    if abs(size - SIZES[-1]) > 0.05 * SIZES[-1]:
        raise CheckError(f"{path} timed {size:,} steps at most, not about {SIZES[-1]:,}")
    ref = times.get(REFERENCE)
    if not ref or REFERENCE not in names:
        raise CheckError(f"{path} has no {REFERENCE} time at {size:,} steps to compare against")

    def speed_figures() -> list[Figure]:
        t0 = time.perf_counter()
        timing = measure_speed(names, (SIZES[-1],), (repeats,), lambda _: None)
        log(
            f"[credit --check] speed ({timing.sizes[0]:,} steps × {repeats} rounds): "
            f"{time.perf_counter() - t0:.0f} s"
        )
        for name, msg in timing.errors.items():
            log(f"[credit --check] {name} failed: {msg}")
        calls = timing.calls_s[0]
        out = []
        for name in [GRAPH_ROW, *(n for n in names if n != REFERENCE)]:
            c, m = times.get(name), None
            if name not in timing.errors and len(calls[name]) == len(calls[REFERENCE]) > 0:
                # Per round, then the median: the two calls of a round saw the same load.
                m = float(np.median(np.divide(calls[name], calls[REFERENCE])))
            fig = f"credit: time of {name} / time of {REFERENCE} at {size:,} steps"
            out.append(Figure(fig, c / ref if c is not None else None, m, False, unit="×"))
        return out

    return figures + confirmed(speed_figures, tolerance, log, "credit --check")
