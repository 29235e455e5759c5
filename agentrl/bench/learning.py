"""Does training improve the agent? ``python -m agentrl.bench learning``.

Trains the tiny model on small Sokoban with each credit estimator (every registered one without
a rollout driver unless ``--algos`` narrows the list) and each policy objective of
:data:`OBJECTIVES`, on the same budget and seeds, one process per run (estimators with
``learner_hints`` run with those learner settings). The untrained policy of each seed and every
final policy are re-evaluated on ``--reeval-episodes`` held-out episodes; the report compares
them per method (mean over seeds with a 95% t-interval, none for one seed; disjoint intervals
and seed ranges; runs improved) and plots the in-training evaluations against environment
steps. Writes ``<out>/learning_sokoban.md`` and ``.png``; run folders are in
``<out>/.learning_runs``, summaries in ``<out>/learning_sokoban_runs.jsonl``
(:mod:`agentrl.bench.experiment`: ``--report-only``, ``--code-version``, ``--jobs``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from agentrl.bench import experiment as ex
from agentrl.bench._report import (
    SCRATCH,
    committed_dir,
    figure,
    header,
    render,
    run_agentrl,
    spans,
    styles,
    write_markdown,
)
from agentrl.bench.stats import bounds, interval_cell, t_interval
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
    "trainer.eval_temperature=1.0",
    "learner.lr=5e-3",
    "learner.ppo_epochs=2",
    "learner.mini_batch_steps=256",
    "trainer.eval_episodes=64",
    "trainer.save_every=0",
    "trainer.progress=false",
]
BATCH = 8 * 8
STORE = "learning_sokoban_runs.jsonl"
UNTRAINED = "untrained"
"""The method name of a seed's untrained policy (an evaluation-only run)."""


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


def _eval_args(seed: int, episodes: int) -> list[str]:
    """An evaluation-only run (``trainer.steps=0``) of ``seed``'s policy on ``episodes``
    held-out episodes."""
    budget = [b for b in BUDGET if not b.startswith("trainer.eval_episodes=")]
    return [*budget, f"trainer.seed={seed}", "trainer.steps=0", "trainer.eval_every=1",
            f"trainer.eval_episodes={episodes}"]  # fmt: skip


def specs(algos: list[str], seeds: list[int], iterations: int, eval_every: int, n_re: int):
    """The grid: every (method, seed), then each seed's untrained policy (its re-evaluation on
    ``n_re`` episodes; the precise final one is part of a method's run)."""
    out = []
    for s in seeds:
        for a in algos:
            args = [*BUDGET, f"trainer.seed={s}", f"trainer.steps={iterations}",
                    f"trainer.eval_every={eval_every}", *_method_args(a)]  # fmt: skip
            key = ex.spec_key(BUDGET, _method_args(a), s, iterations, eval_every, n_re)
            out.append(ex.Spec(a, s, tuple(args), key))
    for s in seeds:
        out.append(ex.Spec(UNTRAINED, s, tuple(_eval_args(s, n_re)), ex.spec_key(BUDGET, s, n_re)))
    return out


def _train(spec: ex.Spec, out: Path) -> None:
    run_agentrl(list(spec.args), out)


def _summarise(spec: ex.Spec, out: Path, n_re: int) -> dict:
    """A run's summary (:func:`agentrl.bench.experiment.summarise`) with its final policy's
    success on ``n_re`` held-out episodes (``final_precise``: an evaluation-only run of the last
    checkpoint, into ``<out>/eval<n_re>``); an untrained policy's is its ``y``."""
    if spec.method == UNTRAINED:
        return {"x": [0.0], "y": [_first_eval(out)]}
    record = ex.summarise(out, BATCH, {"train": "env/success", "invalid": "env/invalid_rate"})
    ckpt = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    reeval = out / f"eval{n_re}"
    if not (reeval / "wall_s").exists():
        run_agentrl([*_eval_args(spec.seed, n_re), f"model.name_or_path={ckpt}"], reeval)
    record["final_precise"] = _first_eval(reeval)
    record["hints"] = [a for a in _method_args(spec.method) if a != f"algo={spec.method}"]
    return record


def _first_eval(out: Path) -> float:
    return float(json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["eval/success"])


def run(out_dir: str = SCRATCH, quick: bool = False, log=print, argv: list[str] | None = None):
    """Run the benchmark (see the module); write ``<out_dir>/learning_sokoban.md`` and its
    plot."""
    parser = ex.grid_parser("learning", seeds=3, iterations=40, eval_every=10)
    parser.add_argument("--algos", default="", help="comma-separated (default: all registered)")
    parser.add_argument(
        "--reeval-episodes",
        type=int,
        default=512,
        help="episodes of the precise evaluation of the untrained and final policies",
    )
    opts = parser.parse_args(argv or [])
    # Estimators with their own rollout driver (AC2: prefixes of long single-turn attempts)
    # do not apply to multi-turn Sokoban.
    algos = [a for a in opts.algos.split(",") if a] or [
        *(a for a in list_estimators() if not get_estimator(a).driver),
        *OBJECTIVES,
    ]
    seeds = list(range(opts.seeds))
    iterations, eval_every, n_re = opts.iterations, opts.eval_every, opts.reeval_episodes
    if quick:
        algos, seeds, iterations, eval_every, n_re = algos[:2], seeds[:2], 2, 1, 16
    out = Path(out_dir)
    store = ex.RunStore(out / STORE, committed_dir() / STORE)
    grid = specs(algos, seeds, iterations, eval_every, n_re)
    code = ex.pick_version(store, grid, opts)
    log(f"[learning] {len(grid)} runs: {algos} x seeds {seeds}, {iterations} iterations each")
    results = ex.collect(
        grid, store, code, out / ".learning_runs", _train,
        lambda spec, run_dir: _summarise(spec, run_dir, n_re), opts.report_only, opts.jobs,
        log=log,
    )  # fmt: skip
    untrained = {r["seed"]: r["y"][0] for r in results if r["method"] == UNTRAINED}
    runs = [r for r in results if r["method"] != UNTRAINED and r["seed"] in untrained]
    if not runs:
        raise SystemExit(f"learning: no finished runs to report under code version {code}")
    total = sum(r.get("wall_s") or 0.0 for r in runs)
    command = (
        f"python -m agentrl.bench learning --seeds {len(seeds)} --iterations {iterations} "
        f"--eval-every {eval_every}" + (f" --algos {','.join(algos)}" if opts.algos else "")
    )
    head = {
        "head": header(("torch", "transformers"), command, quick),
        "wall": f"{total / 60:.1f}",
        "n_runs": len(runs),
        "version": ex.version_line(store, grid, code),
    }
    text = build_report(runs, untrained, algos, head, iterations, n_re)
    write_markdown(out / "learning_sokoban.md", text)
    with figure(out / "learning_sokoban.png") as (ax,):
        by = ex.by_method(runs, algos)
        ex.plot_curves(ax, by, styles(list(by)))
        ax.set_xlabel("environment steps")
        ax.set_ylabel("eval success (held-out seeds)")
        ax.set_title("Sokoban 6x6, tiny model: mean over seeds (band: min-max)")
    log(f"[learning] wrote {out / 'learning_sokoban.md'}")
    return results


def build_report(
    runs: list[dict],
    untrained: dict[int, float],
    algos: list[str],
    head: dict[str, object],
    iterations: int,
    n_re: int,
) -> str:
    """The report's text.

    Args:
        runs: one summary per trained run (``method``, ``seed``, ``x``, ``y``, ``train``,
            ``invalid``, ``final_precise``, ``hints``, ``wall_s``).
        untrained: each seed's untrained policy's success on ``n_re`` episodes.
        algos: methods in report order.
        head: the opening values of the template: ``head`` (machine, command), ``wall``,
            ``n_runs``, ``version``.
    """
    m0, lo0, hi0 = t_interval(list(untrained.values()))

    def first(rs: list[dict]) -> np.ndarray:
        return np.array([untrained[r["seed"]] for r in rs])

    def last(rs: list[dict]) -> np.ndarray:
        return np.array([r["final_precise"] for r in rs])

    def disjoint(rs: list[dict]) -> str:
        _, lo1, _ = t_interval(last(rs))
        if not np.isfinite([lo1, hi0]).all():
            return "n/a"
        return "yes" if lo1 > hi0 else "no"

    def ranges(rs: list[dict]) -> str:
        a, b = first(rs), last(rs)
        return (
            f"{'yes' if b.min() > a.max() else 'no'} ({a.min():.3f}-{a.max():.3f} vs "
            f"{b.min():.3f}-{b.max():.3f})"
        )

    def final(key: str):
        return lambda rs: f"{np.mean([r[key][-1] for r in rs]):.3f}"

    columns = [
        ("final eval success", "---:", lambda rs: interval_cell(last(rs))),
        ("gain", "---:", lambda rs: f"{last(rs).mean() - m0:+.3f}"),
        ("t-intervals disjoint?", "---", disjoint),
        ("seed ranges disjoint?", "---", ranges),
        ("runs improved", "---:", lambda rs: f"{int((last(rs) > first(rs)).sum())}/{len(rs)}"),
        ("final train success", "---:", final("train")),
        ("final invalid rate", "---:", final("invalid")),
        ("min/run", "---:", lambda rs: f"{np.mean([r['wall_s'] or np.nan for r in rs]) / 60:.1f}"),
    ]
    by = {
        m + (f" ({', '.join(rs[0]['hints'])})" if rs[0]["hints"] else ""): rs
        for m, rs in ex.by_method(runs, algos).items()
    }
    return (
        render(
            "learning_sokoban",
            **head,
            budget=spans(BUDGET),
            iterations=iterations,
            episodes=iterations * BATCH,
            n_re=n_re,
            untrained=", ".join(f"seed {s}: {v:.3f}" for s, v in untrained.items()),
            mean=f"{m0:.3f} {bounds(lo0, hi0)}",
            table="\n".join(ex.method_table(by, columns, first="estimator")),
            per_seed="\n".join(ex.per_seed(runs)),
        )
        + "\n"
    )
