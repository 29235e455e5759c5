"""Can the learning benchmark tell credit methods apart? ``python -m agentrl.bench learning-warm``.

The from-scratch benchmark (:mod:`agentrl.bench.learning`) shows that every estimator learns,
but the tiny model then plateaus near a random valid mover and no ordering is resolvable. This
one starts where credit matters:

- **Warm start**: one supervised checkpoint (``python -m agentrl.sft``) cloned from solver
  plans of which a fraction ``--noise`` of the moves were replaced by random ones, so the policy
  starts with some but far from full success.
- **A longer horizon where one early push decides**: 7×7 Sokoban with two boxes and a
  30-step limit.
- **Paired design**: every method runs with the same seeds; a seed fixes the task stream (task
  seeds come from their own random stream) and the evaluation episodes, and every method starts
  from the same weights. Methods are compared seed by seed (:mod:`agentrl.bench.stats`):
  area under the success curve over environment steps (AUC) and final success, with bootstrap
  and paired-t intervals, and a verdict per pair: better, worse, or not resolved at this budget.

Options: ``--methods grpo,gigpo,crbc`` (names of :data:`METHODS`), ``--seeds 5``,
``--iterations 20``, ``--eval-every 4``, ``--jobs 2``, ``--noise 0.5``, ``--report-only``.
The warm start and run folders live in ``<out>/.learning_warm_runs`` (not committed). Each
finished run's summary is appended to ``<out>/learning_warm_runs.jsonl`` (committed), keyed by
everything that determines the run (budget, method overrides, seed, iterations and a hash of the
warm-start weights): the full benchmark takes longer than one working session on 2 cores, so
runs accumulate across sessions and fresh clones, and a changed budget or warm start is never
mixed with the old runs.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from agentrl.bench._report import header, read_metrics, run_agentrl
from agentrl.bench.stats import (
    PairVerdict,
    auc,
    compare_pair,
    holm,
    pairs_table,
    t_interval,
)

TASK = ["env=sokoban", "env.dim_room=[7,7]", "env.num_boxes=2", "env.max_steps=30"]
# The default tiny model (64 wide, 2 layers) only learns to answer with a valid move from
# demonstrations (greedy success 0.11-0.17 on 6x6); 128 wide and 4 layers learns the board
# (0.48 after 1,500 SFT steps). The RL runs load this architecture from the checkpoint.
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
    # Sampled evaluation: the warm start's greedy policy loops (0.06 greedy against 0.22
    # sampled on this task), and sampling is what RL trains.
    "rollout.eval_temperature=1.0",
    # 3e-4: the first update's approximate KL is ~0.01 (the usual PPO target). At 1e-3 it was
    # 0.155, entropy fell 0.83 -> 0.65 over 12 iterations and no method moved from the warm
    # start (5 seeds each of grpo, gigpo, crbc; 2026-12-01).
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
MECHANISMS: dict[str, str] = {
    "rloo": "RLOO's advantage is the return minus the mean of the other returns, in return "
    "units (ALGOS.md 7.3: no division by the group's spread); Sokoban's returns here span about "
    "−3 to +11, so at the same learning rate each update is larger than GRPO's z-scored one "
    "(the Signal table: approximate KL per iteration about 3 times GRPO's), and the policy "
    "drifts (invalid actions and entropy rise).",
    "klpo": "KLPO's per-token signal h = R − β·ℓ has no baseline (ALGOS.md 7.5: no group, no "
    "whitening); most Sokoban returns here are negative (−0.1 per step), so the sampled tokens "
    "of most episodes are pushed down, and with no ratio clip or length normalisation the "
    "first updates are large (approximate KL 0.3 in seed 0's first iteration).",
    "vimpo": "VIMPO regresses Σ_t β·(log π/π_ref − KL) onto R − mean_group R with β = 5e-4 "
    "(ALGOS.md 7.10): fitting Sokoban's episode returns (about −3 for 30 steps at −0.1, about "
    "+11 when solved) asks for log-ratios of order |A|/β, so the policy is pulled far from the "
    "warm start (the logged per-state KL to it, loss/vimpo_kl, reached 3–4 by iteration 8 in "
    "seed 0).",
}
"""What the method's equations imply for this task, shown beside its results when they run:
the mechanism behind a method that comes apart here (a reading of the spec, not a measurement)."""
BATCH = 8 * 8


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

    args = METHODS.get(name) or EXTRA.get(name) or OBJECTIVES.get(name)
    if args is None:
        args = [f"algo={name}"]
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
    out = work / f"sft_noise{noise:g}"
    if (out / "config.json").exists():
        return out
    log(f"[learning-warm] supervised warm start (noise {noise}) -> {out}")
    cmd = [sys.executable, "-m", "agentrl.sft", *TASK, *SFT, f"sft.noise={noise}"]
    # One thread: the weights are then bitwise the same on every build (the thread count
    # changes the order of floating-point sums), so stored runs stay paired with a rebuild.
    cmd.append("trainer.num_threads=1")
    cmd.append(f"sft.out_dir={out}")
    cmd.append(f"hydra.run.dir={work}/sft_hydra")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"agentrl.sft failed:\n{proc.stderr[-3000:]}")
    return out


STORE = "learning_warm_runs.jsonl"
"""The committed run summaries (one JSON object per line), next to the report."""


def weights_hash(init: Path) -> str:
    """A short hash of the warm start's weights: runs from different warm starts never pair."""
    digest = hashlib.sha256()
    for name in ("model.safetensors", "value_head.safetensors"):
        if (init / name).exists():
            digest.update((init / name).read_bytes())
    return digest.hexdigest()[:16]


def run_key(method: str, seed: int, iterations: int, eval_every: int, init_hash: str) -> str:
    """Everything that determines a run, hashed: a stored summary is reused only under it."""
    what = [BUDGET, method_args(method), seed, iterations, eval_every, init_hash]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]


def load_store(path: Path) -> dict[str, dict]:
    """Stored summaries by key (a later line wins); unreadable lines are skipped."""
    out: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
                out[rec["key"]] = rec
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return out


SIGNAL = (
    ("mixed", "diag/mixed_groups", "groups with both a solved and an unsolved episode"),
    ("grad_cos", "diag/grad_cos", "cosine between the gradients of two half mini-batches"),
    ("grad_snr", "diag/grad_snr", "gradient signal-to-noise ratio of a half mini-batch"),
    ("approx_kl", "loss/approx_kl", "approximate KL of one iteration's update"),
)
"""How much signal each update carries (name in the stored summary, metric, meaning): the
fraction of groups whose success varies (only they carry an outcome signal), and whether two
halves of a mini-batch agree on the gradient (cosine and SNR near 0: the update is mostly
sampling noise); the approximate KL says how far each iteration moved the policy."""


def summarise(method: str, seed: int, out: Path) -> dict:
    """A finished run's summary from its ``metrics.jsonl``: environment steps and eval success
    at each evaluation (``x``, ``y``; the first at iteration 0) and training success per
    iteration (``train``), with the invalid-action rate and policy entropy per iteration
    (``invalid``, ``entropy``: the signs of a policy that has come apart), and the signal in
    each update (``signal``: the :data:`SIGNAL` diagnostics per iteration)."""
    rows = read_metrics(out)
    total, xs, ys, train, invalid, entropy = 0.0, [], [], [], [], []
    signal: dict[str, list[float]] = {name: [] for name, _, _ in SIGNAL}
    for r in rows:
        if r["iteration"] > 0:
            total += r["env/length"] * BATCH
            train.append(r["env/success"])
            invalid.append(r.get("env/invalid_rate", float("nan")))
            entropy.append(r.get("loss/entropy", float("nan")))
            for name, metric, _ in SIGNAL:
                signal[name].append(r.get(metric, float("nan")))
        if "eval/success" in r:
            xs.append(total)
            ys.append(r["eval/success"])
    wall = float((out / "wall_s").read_text()) if (out / "wall_s").exists() else None
    return {
        "method": method,
        "seed": seed,
        "x": xs,
        "y": ys,
        "train": train,
        "invalid": invalid,
        "entropy": entropy,
        "signal": signal,
        "env_steps": total,
        "wall_s": wall,
    }


def _run(method: str, seed: int, init: Path, iterations: int, eval_every: int, out: Path, key: str):
    if not _finished(out, key):
        if out.exists() and _stamp(out) != key:
            # A run of another budget, method or warm start (or of an older benchmark that did
            # not stamp its runs): resuming it would report it under this key.
            shutil.rmtree(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "run_key").write_text(key)
        run_agentrl(
            [
                *BUDGET,
                *method_args(method),
                # One thread each: runs go side by side (--jobs) on a small machine.
                "trainer.num_threads=1",
                f"model.name_or_path={init}",
                f"trainer.seed={seed}",
                f"trainer.steps={iterations}",
                f"trainer.eval_every={eval_every}",
            ],
            out,
        )
    return summarise(method, seed, out)


def _stamp(out: Path) -> str | None:
    """The run key a run directory was started under (None when unstamped)."""
    path = out / "run_key"
    return path.read_text().strip() if path.exists() else None


def _finished(out: Path, key: str) -> bool:
    """A finished run of exactly this key (see :func:`run_key`) is in ``out``."""
    return (
        _stamp(out) == key
        and (out / "metrics.jsonl").exists()
        and (out / "checkpoints" / "latest").exists()
    )


def run(out_dir: str = "results", quick: bool = False, log=print, argv: list[str] | None = None):
    p = argparse.ArgumentParser(prog="python -m agentrl.bench learning-warm")
    p.add_argument("--methods", default="grpo,rloo,gigpo,crbc,crbc_k1,gagpo,relace,gae")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--extra-methods", default="", help="compared with grpo only")
    p.add_argument("--extra-seeds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=12)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--noise", type=float, default=0.5)
    p.add_argument("--report-only", action="store_true", help="report the finished runs only")
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
    # Seed-major, core methods first: a benchmark cut short still has every core method paired.
    jobs = [(m, s) for s in seeds for m in core] + [(m, s) for s in extra_seeds for m in extra]
    store_path = out / STORE
    store = load_store(store_path)
    if opts.report_only:
        init = work / f"sft_noise{opts.noise:g}"
        # Without the checkpoint here (a fresh clone), the warm start the stored runs share.
        hashes = [r["init"] for r in store.values() if "init" in r]
        init_hash = (
            weights_hash(init)
            if (init / "config.json").exists()
            else max(set(hashes), key=hashes.count, default="")
        )
    else:
        init = warm_start(work, opts.noise, log)
        init_hash = weights_hash(init)
    keys = {(m, s): run_key(m, s, iterations, eval_every, init_hash) for m, s in jobs}
    if opts.report_only:
        jobs = [
            j for j in jobs if keys[j] in store or _finished(work / f"{j[0]}_seed{j[1]}", keys[j])
        ]
    stored = sum(keys[j] in store for j in jobs)
    log(
        f"[learning-warm] {len(jobs)} runs ({stored} stored in {store_path}): {core} x seeds "
        f"{seeds}, {extra} x {extra_seeds}; warm start {init_hash}"
    )
    lock = threading.Lock()

    def one(job):
        m, s = job
        if keys[job] in store:
            return store[keys[job]]
        r = _run(m, s, init, iterations, eval_every, work / f"{m}_seed{s}", keys[job])
        r.update(key=keys[job], init=init_hash, date=datetime.date.today().isoformat())
        # One line per finished run, so a benchmark cut short keeps what it did.
        with lock, store_path.open("a") as f:
            f.write(json.dumps(r) + "\n")
        log(f"[learning-warm] {m} seed {s}: final {r['y'][-1]:.3f}")
        return r

    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        results = list(pool.map(one, jobs))
    wall = sum(r.get("wall_s") or 0.0 for r in results)
    command = (
        f"python -m agentrl.bench learning-warm --methods {','.join(core)} --seeds {len(seeds)}"
        + (f" --extra-methods {','.join(extra)} --extra-seeds {len(extra_seeds)}" if extra else "")
        + f" --iterations {iterations} --eval-every {eval_every} --noise {opts.noise}"
    )
    setting = (
        "Task: "
        + " ".join(f"`{b}`" for b in TASK)
        + ". Budget per run: "
        + " ".join(f"`{b}`" for b in BUDGET[len(TASK) :])
        + f", `trainer.steps={iterations}` ({iterations * BATCH} episodes), evaluation every "
        f"{eval_every} iterations on {EVAL_EPISODES} held-out levels (sampled at temperature "
        "1). Every run starts from one supervised checkpoint (solver plans with "
        f"{opts.noise:.0%} of the moves random; "
        + " ".join(f"`{a}`" for a in SFT)
        + "). Runs are single-threaded processes, "
        f"{opts.jobs} at a time; {wall / 60:.0f} min of run time in all."
    )
    head = [*header(("torch", "transformers"), command, quick), "", setting]
    lines = build_report(results, core, extra, head)
    lines += _coverage(results, core, seeds, extra, extra_seeds)
    if skipped:
        lines += ["", f"Not run (not registered here, or needs a rollout driver): {skipped}."]
    lines += ["", "![success vs environment steps](learning_warm.png)", ""]
    (out / "learning_warm.md").write_text("\n".join(lines))
    _plot(results, core, extra, out / "learning_warm.png")
    took = (time.perf_counter() - t0) / 60
    log(f"[learning-warm] wrote {out / 'learning_warm.md'} ({took:.1f} min)")
    return results


def _coverage(
    results: list[dict], core: list[str], seeds: list[int], extra: list[str], extra_seeds: list[int]
) -> list[str]:
    """The requested runs that have no result yet (the benchmark accumulates across sessions:
    a report may be partial), as a line; nothing when every run is in."""
    have = {(r["method"], r["seed"]) for r in results}
    want = [(m, seeds) for m in core] + [(m, extra_seeds) for m in extra]
    missing = [
        f"{m} ({sum((m, s) in have for s in ss)}/{len(ss)} seeds)"
        for m, ss in want
        if any((m, s) not in have for s in ss)
    ]
    if not missing:
        return []
    return [
        "",
        f"Not yet run at this budget (methods absent from the tables): {', '.join(missing)}.",
    ]


def _by_method(results: list[dict], methods: list[str]) -> dict[str, list[dict]]:
    return {
        m: sorted((r for r in results if r["method"] == m), key=lambda r: r["seed"])
        for m in methods
        if any(r["method"] == m for r in results)
    }


def _pair(a: str, ra: list[dict], b: str, rb: list[dict], key) -> PairVerdict:
    """A against B on the seeds both have (the pairing), by ``key`` of each run."""
    seeds = sorted({r["seed"] for r in ra} & {r["seed"] for r in rb})
    xa = {r["seed"]: key(r) for r in ra}
    xb = {r["seed"]: key(r) for r in rb}
    return compare_pair(a, b, [xa[s] for s in seeds], [xb[s] for s in seeds])


def _final(r: dict) -> float:
    return r["y"][-1]


def _train(r: dict) -> float:
    """Mean success over every training episode (each iteration has the same number): the
    area under the training curve, the figure with the most episodes behind it."""
    return float(np.mean(r["train"]))


def _gain(r: dict) -> float:
    """Final eval success minus the warm start's (iteration 0, the same for every method)."""
    return r["y"][-1] - r["y"][0]


def _drift(rs: list[dict], series: str) -> tuple[float, float]:
    """Mean over seeds of ``series`` (``invalid`` or ``entropy``) at the first iteration and
    over the last 3; NaN when the runs did not record it."""
    have = [r[series] for r in rs if r.get(series)]
    if not have:
        return float("nan"), float("nan")
    return float(np.mean([h[0] for h in have])), float(np.mean([np.mean(h[-3:]) for h in have]))


def _auc(r: dict) -> float:
    return auc(r["x"], r["y"])


METRICS = (("training success", _train), ("eval AUC", _auc), ("final eval success", _final))


def build_report(
    results: list[dict], core: list[str], extra: list[str], head: list[str]
) -> list[str]:
    """The report's lines: a table per group (final success and AUC with 95% t-intervals over
    seeds), the verdicts of every pair of core methods, and each extra method against grpo.

    Args:
        results: one dict per run: ``method``, ``seed``, ``x`` (environment steps at each
            evaluation), ``y`` (eval success there; the first at iteration 0).
        core, extra: method names in report order (methods without results are left out).
        head: the report's opening lines (machine, command).
    """
    lines = ["# Learning from a warm start: can the benchmark tell credit methods apart?", ""]
    lines += [*head, ""]
    by_core, by_extra = _by_method(results, core), _by_method(results, extra)
    if by_core:
        start = [r["y"][0] for r in next(iter(by_core.values()))]
        lines += [
            f"Start: eval success {np.mean(start):.3f} over {len(start)} seeds (iteration 0: "
            "the same weights and levels for every method).",
            "",
        ]
    for title, by in (("Core methods", by_core), ("Joined with a flag", by_extra)):
        if not by:
            continue
        lines += [
            f"## {title}",
            "",
            "| method | seeds | training success, all episodes (95% t) "
            "| eval AUC over env steps (95% t) | final eval success (95% t) "
            "| final − start eval (95% t) | invalid actions, first → last 3 iterations "
            "| entropy, first → last 3 |",
            "|---|---:|---|---|---|---|---|---|",
        ]
        for m, rs in by.items():
            cells = []
            for key in (_train, _auc, _final, _gain):
                mean, lo, hi = t_interval([key(r) for r in rs])
                cells.append(f"{mean:.3f} [{lo:.3f}, {hi:.3f}]")
            for series in ("invalid", "entropy"):
                first, last = _drift(rs, series)
                cells.append(f"{first:.2f} → {last:.2f}" if np.isfinite(last) else "—")
            lines.append(f"| {m} | {len(rs)} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += _signal_table({**by_core, **by_extra})
    # Every pair of core methods per metric, once: the tables and the summary both read them.
    names = list(by_core)
    core_pairs = {
        what: holm(
            [
                _pair(a, by_core[a], b, by_core[b], key)
                for i, a in enumerate(names)
                for b in names[i + 1 :]
            ]
        )
        for what, key in METRICS
    }
    if len(by_core) > 1:
        for what, pairs in core_pairs.items():
            lines += [f"## Core pairs: {what}", ""]
            lines += [*pairs_table(pairs, what, family=True), ""]
    if by_extra and "grpo" in by_core:
        for what, key in METRICS:
            lines += [f"## Against grpo: {what}", ""]
            pairs = [_pair(m, rs, "grpo", by_core["grpo"], key) for m, rs in by_extra.items()]
            lines += [*pairs_table(pairs, what, family=True), ""]
    lines += _summary(by_core, by_extra, core_pairs)
    every = {**by_core, **by_extra}
    own = [(m, b) for m, b in VERSUS.items() if m in by_extra and b in every and b != "grpo"]
    if own:
        for what, key in METRICS:
            lines += [f"## Against their own baseline: {what}", ""]
            pairs = [_pair(m, every[m], b, every[b], key) for m, b in own]
            lines += [*pairs_table(pairs, what, family=True), ""]
    return lines


def _summary(
    by_core: dict[str, list[dict]],
    by_extra: dict[str, list[dict]],
    core_pairs: dict[str, list[PairVerdict]],
) -> list[str]:
    """Generated sentences: which methods moved from the warm start, and which core pairs are
    resolved (each statement is an interval's, nothing more).

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
    out.append(
        f"- Pairing check: before any update (iteration 1's rollouts) every method saw the same "
        f"training success in {same} of {len(firsts)} seeds (same weights, tasks and sampling)"
        + (f"; {', '.join(own_shape)} roll out 64 tasks x 1, left out." if own_shape else ".")
    )
    starts = [r["y"][0] for rs in (by_core or every).values() for r in rs]
    if starts:
        p = float(np.mean(starts))
        out.append(
            f"- Evaluation noise: one evaluation of {EVAL_EPISODES} sampled episodes at success "
            f"{p:.2f} has a binomial standard error of {np.sqrt(p * (1 - p) / EVAL_EPISODES):.3f}"
            "; training success averages all "
            f"{len(next(iter(every.values()))[0]['train']) * BATCH} training episodes of a run."
        )
    if "grpo" in every:
        mixed, cos = _signal(every["grpo"], "mixed")[0], _signal(every["grpo"], "grad_cos")[0]
        if np.isfinite(mixed) and np.isfinite(cos):
            noise = (
                ": the halves' gradients are nearly orthogonal, so most of each update is "
                "sampling noise"
                if abs(cos) < 0.2
                else ""
            )
            out.append(
                f"- Signal (grpo): {mixed:.0%} of the groups in a batch had both a solved and "
                f"an unsolved episode (the others carry no outcome contrast); the gradients of "
                f"two halves of a mini-batch had mean cosine {cos:+.2f}{noise}."
            )
    for m, rs in every.items():
        mean, lo, hi = t_interval([_gain(r) for r in rs])
        if lo > 0:
            what = "improved on the warm start"
        elif hi < 0:
            what = "fell below the warm start"
        else:
            what = "no change from the warm start is shown"
        first, last = _drift(rs, "invalid")
        # A policy that no longer answers with a move has come apart, whatever its success.
        broke = (
            f"; invalid actions rose from {first:.2f} to {last:.2f} (last 3 iterations)"
            if last - first > 0.25
            else ""
        )
        out.append(
            f"- {m}: final − start eval success {mean:+.3f} [{lo:+.3f}, {hi:+.3f}] over "
            f"{len(rs)} seeds: {what}{broke}."
        )
    out += [f"- Mechanism ({m}): {MECHANISMS[m]}" for m in every if m in MECHANISMS]
    for what, pairs in core_pairs.items():
        if not pairs:
            continue
        resolved = [p for p in pairs if p.verdict != "not resolved"]
        told = "; ".join(f"{p.a} {p.verdict} than {p.b}" for p in resolved) or "none"
        kept = [p for p in pairs if p.verdict_holm != "not resolved"]
        kept_told = "; ".join(f"{p.a} {p.verdict} than {p.b}" for p in kept) or "none"
        out.append(
            f"- Core pairs resolved on {what} (both intervals exclude 0): "
            f"{len(resolved)} of {len(pairs)} ({told}); with no true difference up to about "
            f"{0.05 * len(pairs):.1f} of {len(pairs)} would be called by chance. Family-wise "
            f"(Holm over the {len(pairs)} pairs): {len(kept)} ({kept_told})."
        )
        out += _resolution(pairs, what)
    return [*out, ""]


def _signal(rs: list[dict], name: str) -> tuple[float, float, float]:
    """Mean over seeds of a run's mean ``signal[name]`` over its iterations, with a 95%
    t-interval over seeds; NaN when no run recorded it (runs stored before it was)."""
    per_run = [
        float(np.nanmean(r["signal"][name]))
        for r in rs
        if r.get("signal", {}).get(name) and np.isfinite(r["signal"][name]).any()
    ]
    if not per_run:
        return float("nan"), float("nan"), float("nan")
    return t_interval(per_run)


def _signal_table(every: dict[str, list[dict]]) -> list[str]:
    """The signal in each update per method (:data:`SIGNAL`), averaged over iterations, with
    95% t-intervals over seeds; methods whose runs did not record it are left out."""
    rows = []
    for m, rs in every.items():
        cells = [_signal(rs, name) for name, _, _ in SIGNAL]
        if all(np.isnan(c[0]) for c in cells):
            continue
        text = [f"{c[0]:.3f} [{c[1]:.3f}, {c[2]:.3f}]" if np.isfinite(c[0]) else "—" for c in cells]
        rows.append(f"| {m} | " + " | ".join(text) + " |")
    if not rows:
        return []
    return [
        "## Signal per update",
        "",
        "Mean over the iterations of a run, then over seeds (95% t). "
        + "; ".join(f"{name}: {meaning} (`{metric}`)" for name, metric, meaning in SIGNAL)
        + ".",
        "",
        "| method | " + " | ".join(name for name, _, _ in SIGNAL) + " |",
        "|---|" + "---|" * len(SIGNAL),
        *rows,
        "",
    ]


def _resolution(pairs: list[PairVerdict], what: str) -> list[str]:
    """How large a difference the benchmark could have resolved: the median half-width of the
    core pairs' paired-t intervals. "Not resolved" is then a statement with a size: a true
    difference well below this half-width is invisible at this budget, one well above it is
    not (a pair whose mean difference equals the half-width sits on the edge)."""
    half = [(p.t[1] - p.t[0]) / 2 for p in pairs if np.isfinite(p.t[0])]
    if not half:
        return []
    seeds = sorted({p.n for p in pairs if np.isfinite(p.t[0])})
    return [
        f"  Resolution on {what}: the paired 95% t half-width has median {np.median(half):.3f} "
        f"(range {min(half):.3f}–{max(half):.3f}) over {len(half)} pairs at "
        f"{'/'.join(map(str, seeds))} seeds; differences much smaller than that cannot be "
        "told apart at this budget."
    ]


def _plot(results: list[dict], core: list[str], extra: list[str], path: Path) -> None:
    """Mean success over seeds against environment steps, with a min–max band: core methods
    on the left, the extra methods (with grpo for reference) on the right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("core methods", core)] + (
        [("joined with a flag", ["grpo", *extra])] if extra else []
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.5), squeeze=False)
    for ax, (title, methods) in zip(axes[0], panels, strict=True):
        # 20 distinct colours: the extra panel can hold more methods than the default 10.
        ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)
        for m, rs in _by_method(results, methods).items():
            n = min(len(r["y"]) for r in rs)
            x = np.mean([r["x"][:n] for r in rs], axis=0)
            y = np.array([r["y"][:n] for r in rs])
            ax.plot(x, y.mean(axis=0), label=f"{m} ({len(rs)})")
            ax.fill_between(x, y.min(axis=0), y.max(axis=0), alpha=0.12)
        ax.set_title(title)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("eval success (temperature 1)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
