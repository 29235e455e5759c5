"""Assemble a run's report (or a comparison of runs) from its files.

:func:`build_report` writes one self-contained HTML file with the run's config and software
versions, its learning curves, the trajectory graph of every task group of the recorded
iterations (with every comparable estimator's advantages, see
:mod:`agentrl.report.run_data`), and its latest evaluation episodes as transcripts.
:func:`build_compare` writes the learning curves of several runs on shared axes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agentrl.credit import StepBatch, build_graph
from agentrl.credit.rollout_records import groups_from_records
from agentrl.report import charts
from agentrl.report.graph_view import group_view
from agentrl.report.page import esc, kv_table, page, selectors
from agentrl.report.run_data import (
    Run,
    load_records,
    pick_iterations,
    read_run,
    recompute,
    run_options,
)


@dataclass(frozen=True)
class ReportConfig:
    """What a report draws (``python -m agentrl.report --help`` names the same options)."""

    max_nodes: int = 40
    """States drawn per group graph: the most visited ones (0 = all)."""
    max_groups: int = 8
    """Task groups drawn per recorded iteration, in batch order (0 = all)."""
    max_iterations: int = 4
    """Recorded training iterations shown, spread evenly, first and last included (0 = all)."""
    eval_samples: int = 6
    """Evaluation episodes shown as transcripts (from the latest evaluation file)."""
    max_transcripts: int = 8
    """Episodes listed when an edge or state is clicked."""

    def __post_init__(self) -> None:
        for name in ("max_nodes", "max_groups", "max_iterations", "eval_samples"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_transcripts < 1:
            raise ValueError(f"max_transcripts must be >= 1, got {self.max_transcripts}")


def curves_section(runs: list[Run]) -> str:
    colours = [charts.PALETTE[i % len(charts.PALETTE)] for i in range(len(runs))]
    first, rest = charts.ordered_keys([r.metrics for r in runs])

    def block(keys: list[str]) -> str:
        out = []
        for key in keys:
            series = [(r.label, charts.metric_series(r.metrics, key)) for r in runs]
            out.append(charts.line_chart(key, series, colours))
        return '<div class="charts">' + "".join(out) + "</div>"

    text = charts.legend([r.label for r in runs], colours) + block(first)
    if rest:
        text += f"<details><summary>all {len(rest)} other metrics</summary>{block(rest)}</details>"
    return text


def _versions_html(run: Run) -> str:
    if not run.versions:
        return '<p class="muted">This run wrote no versions.json (older agentrl).</p>'
    flat = {}
    for k, v in run.versions.items():
        if isinstance(v, dict):
            flat.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            flat[k] = v
    return kv_table(flat)


def _transcript(traj_steps: list[dict[str, Any]]) -> str:
    parts = []
    for r in traj_steps:
        action = "&lt;invalid&gt;" if r.get("action") is None else esc(r["action"])
        parts.append(
            f'<div class="turn">turn {r["turn_index"]}: action {action}, reward '
            f"{r['reward']:+.2f}<pre>{esc(r.get('observation', ''))}</pre>"
            f'<div class="muted">response: {esc(repr(r.get("response", "")))}</div></div>'
        )
    last = traj_steps[-1]
    if last.get("final_observation"):
        parts.append(
            f'<div class="turn">final observation<pre>{esc(last["final_observation"])}</pre></div>'
        )
    return "".join(parts)


def eval_section(run: Run, cfg: ReportConfig) -> str:
    if not run.eval_files:
        return (
            '<p class="muted">No evaluation records (trainer.rollouts_every=0, or no '
            "evaluation).</p>"
        )
    it = max(run.eval_files)
    rows = load_records(run.eval_files[it])
    by_traj: dict[int, list[dict]] = {}
    for r in rows:
        by_traj.setdefault(r["trajectory_id"], []).append(r)
    trajs = list(by_traj.values())
    won = sum(t[0]["success"] for t in trajs)
    out = [
        f"<p>Evaluation after {it} updates (<code>{esc(run.eval_files[it].name)}</code>): "
        f"{won} of {len(trajs)} episodes solved; the first {min(cfg.eval_samples, len(trajs))} "
        f"shown. Earlier evaluations: {sorted(run.eval_files)[:-1] or 'none'}.</p>"
    ]
    for steps in trajs[: cfg.eval_samples]:
        head = steps[0]
        ret = sum(s["reward"] for s in steps)
        status = "solved" if head["success"] else "not solved"
        out.append(
            f'<details class="traj {"won" if head["success"] else "lost"}"><summary>episode '
            f"{head['trajectory_id']} (seed {head.get('seed')}): {status}, return {ret:+.2f}, "
            f'{len(steps)} turns</summary><div class="muted">task: {esc(head.get("task", ""))}'
            f"</div>{_transcript(steps)}</details>"
        )
    return "".join(out)


def iteration_section(
    run: Run, it: int, cfg: ReportConfig, data: dict[str, Any], notes: list[str]
) -> str:
    """One recorded iteration: its groups' graphs; fills ``data`` for the script."""
    rows = load_records(run.train_files[it])
    method, options = run_options(run)
    adv = recompute(rows, method, options)
    for name, why in adv.failed.items():
        notes.append(f"iteration {it}: {name} could not run on the records ({why})")
    recorded = [r.get("advantage") for r in rows]
    per_step = {m: a for m, a in adv.by_method.items()}
    if all(a is not None for a in recorded):
        per_step["recorded"] = np.asarray(recorded, dtype=np.float64)
    groups = groups_from_records(rows)
    batch = StepBatch.from_groups(groups)
    kept = batch.without_lost()
    graph = build_graph(kept)
    kept_steps = np.flatnonzero(~batch.step_lost)
    first = np.concatenate(([0], np.cumsum(batch.traj_len)[:-1])) if batch.n_trajs else []
    data["iterations"][str(it)] = {
        "obs": [r.get("observation", "") for r in rows],
        "resp": [r.get("response", "") for r in rows],
        "action": [r.get("action") for r in rows],
        "reward": [round(float(r["reward"]), 6) for r in rows],
        "step_t": [int(r["turn_index"]) for r in rows],
        "step_traj": batch.step_traj.tolist(),
        "trajs": [
            {
                "success": bool(batch.traj_won[m]),
                "ret": round(float(batch.traj_return[m]), 6),
                "first": int(first[m]),
                "n": int(batch.traj_len[m]),
            }
            for m in range(batch.n_trajs)
        ],
        "adv": {m: np.round(a, 4).tolist() for m, a in per_step.items()},
    }
    match = (
        "recomputed advantages of the run's estimator equal the trainer's"
        if adv.recorded_match == 0
        else "recomputed advantages of the run's estimator differ from the trainer's by up "
        f"to {adv.recorded_match:.3g}"
        if adv.recorded_match is not None
        else "the run's estimator keeps state across iterations: recomputed without its history"
    )
    n_groups = batch.n_groups
    shown = range(n_groups if cfg.max_groups == 0 else min(cfg.max_groups, n_groups))
    out = [
        f'<h3 id="iter-{it}">Iteration {it}</h3><p class="caption">{n_groups} groups, '
        f"{batch.n_trajs} episodes, {batch.n_steps} steps, success "
        f"{float(batch.traj_won.mean()) if batch.n_trajs else 0:.3f}; {esc(match)}."
        + (
            f" Groups 0–{len(shown) - 1} of {n_groups} drawn (--max-groups)."
            if len(shown) < n_groups
            else ""
        )
        + "</p>"
    ]
    for g in shown:
        uid = f"g{it}-{g}"
        view = group_view(g, batch, graph, kept_steps, per_step, method, cfg.max_nodes, uid)
        data["graphs"][uid] = {**view.data, "iteration": str(it)}
        task = groups[g].task
        out.append(
            f'<h4>group {g} <span class="muted">seed {groups[g].seed}; '
            f"{sum(t.won for t in groups[g].trajectories)}/{len(groups[g].trajectories)} solved; "
            f'advantages: <span class="method-name">{esc(method)}</span></span></h4>'
            f'<div class="muted" title="{esc(task)}">task: {esc(task[:200])}</div>'
            f'<div class="graph-box">{view.svg}</div><div class="caption">{esc(view.caption)}</div>'
            f'<div class="transcripts" id="{uid}-tx"></div>'
        )
    return "".join(out)


def build_report(
    run_dir: str | Path, out: str | Path | None = None, cfg: ReportConfig | None = None
) -> Path:
    """Write the report of run folder ``run_dir`` to ``out`` (default
    ``<run_dir>/report.html``); return its path."""
    cfg = cfg or ReportConfig()
    t0 = time.perf_counter()
    run = read_run(run_dir)
    method, _ = run_options(run)
    notes: list[str] = []
    data: dict[str, Any] = {"iterations": {}, "graphs": {}, "max_transcripts": cfg.max_transcripts}
    iterations = pick_iterations(sorted(run.train_files), cfg.max_iterations)
    sections = [iteration_section(run, it, cfg, data, notes) for it in iterations]
    methods = sorted({m for v in data["iterations"].values() for m in v["adv"]})
    data["methods"] = methods
    env = run.config.get("env", {}).get("name", "?")
    body = [
        "<h2>Learning curves</h2>",
        curves_section([run]),
        "<h2>Trajectory graphs</h2>",
    ]
    if sections:
        skipped = sorted(set(run.train_files) - set(iterations))
        body.append(
            "<p>Per recorded iteration and task group: states (anchors) sized by visits and "
            "coloured by value (mean return-to-go), edges = executed actions coloured and "
            "labelled by their mean advantage. <b>recorded</b> = the advantages the trainer "
            "used; every other entry is recomputed from the records with that estimator "
            "(defaults; the run's own with its options)."
            + (f" Recorded iterations not shown (--max-iterations): {skipped}." if skipped else "")
            + "</p>"
        )
        body.append(selectors(methods, method if method in methods else methods[0]))
        body += sections
    else:
        body.append(
            '<p class="muted">No rollout records in this run (trainer.rollouts_every=0, or '
            "no iteration was due): nothing to draw.</p>"
        )
    if notes:
        body.append(
            '<details><summary class="warn">notes ('
            + str(len(notes))
            + ")</summary><ul>"
            + "".join(f"<li>{esc(n)}</li>" for n in notes)
            + "</ul></details>"
        )
    body += ["<h2>Evaluation episodes</h2>", eval_section(run, cfg)]
    body += [
        "<h2>Configuration</h2>",
        f"<pre>{esc(yaml.safe_dump(run.config, sort_keys=False))}</pre>",
        "<h2>Software</h2>",
        _versions_html(run),
    ]
    built = time.perf_counter() - t0
    body.append(f'<p class="muted">Built from {esc(run.path)} in {built:.1f} s.</p>')
    title = f"agentrl run {run.name}"
    sub = (
        f"env={env} algo={method} · {len(run.metrics)} metric rows · "
        f"{len(run.train_files)} recorded iterations"
    )
    text = page(title, sub, "".join(body), data if sections else None)
    out = Path(out) if out is not None else run.path / "report.html"
    out.write_text(text, encoding="utf-8")
    return out


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def build_compare(run_dirs: list[str | Path], out: str | Path) -> Path:
    """Write the learning curves of ``run_dirs`` on shared axes, and the config keys in which
    they differ, to ``out``."""
    runs = [read_run(p) for p in run_dirs]
    flats = [_flat(r.config) for r in runs]
    keys = sorted(set().union(*flats))
    differ = [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1]
    head = "".join(f"<th>{esc(r.label)}</th>" for r in runs)
    rows = "".join(
        f"<tr><td>{esc(k)}</td>"
        + "".join(f"<td>{esc(f.get(k, '—'))}</td>" for f in flats)
        + "</tr>"
        for k in differ
    )
    body = [
        "<h2>Learning curves</h2>",
        curves_section(runs),
        "<h2>Config differences</h2>",
        f'<table class="kv"><tr><th>key</th>{head}</tr>{rows}</table>'
        if differ
        else "<p>The runs' configs are identical.</p>",
        "<h2>Runs</h2><ul>"
        + "".join(f"<li>{esc(r.label)}: {esc(r.path)}</li>" for r in runs)
        + "</ul>",
    ]
    title = f"agentrl: {len(runs)} runs compared"
    sub = " · ".join(r.label for r in runs)
    out = Path(out)
    out.write_text(page(title, sub, "".join(body)), encoding="utf-8")
    return out
