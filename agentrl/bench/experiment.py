"""A method × seed grid of training runs: what ``learning``, ``learning-warm`` and ``ac2`` share.

A benchmark describes each run as a :class:`Spec`: its method, its seed, the ``agentrl.run``
overrides and a spec key (:func:`spec_key`, a hash of everything that determines the run).
:func:`collect` gives one summary per spec: from the :class:`RunStore` (run summaries, one JSON
object per line, next to the report), from a finished run folder, or by training it (one
process per run, ``--jobs`` at a time). A summary is stored as soon as its run ends: a benchmark
longer than a working session accumulates its runs across sessions and fresh clones.

Code versions: a run is also determined by the code that trained it. :func:`code_version` is
``agentrl.__version__`` with a short hash of the sources of the trainer, learner, rollout,
model, credit and algorithm packages; the run key (:meth:`Spec.run_key`) joins the spec key and
the code version, so a stored run is reused only by the same code. A report uses the runs of
one code version (:func:`pick_version`: the current one when it trains; with ``--report-only``
the newest stored, or ``--code-version``) and names it (:func:`version_line`). Runs stored
before summaries carried a code version are one group, :data:`PRE_VERSION`.

The summary helpers (:func:`summarise`, :func:`by_method`, :func:`paired`,
:func:`method_table`, :func:`plot_curves`, ...) read the summaries' ``x`` (steps or tokens at
each evaluation) and ``y`` (the evaluation's score there; the first at iteration 0).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import importlib.util
import json
import math
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agentrl.bench._report import read_metrics, run_agentrl, table
from agentrl.bench.stats import PairVerdict, compare_pair

PRE_VERSION = "pre-0.2.x"
"""The code version of stored runs that carry none (stored before runs were versioned)."""
CODE = (
    "agentrl.run",
    "agentrl.learn",
    "agentrl.rollout",
    "agentrl.model",
    "agentrl.credit",
    "agentrl.algos",
)
"""The packages whose sources make a run's code version (every ``.py`` file below them)."""


@functools.cache
def code_version() -> str:
    """``<agentrl version>+<12 hex digits>``: the sha256 of the :data:`CODE` packages' sources
    (relative paths and bytes, in path order)."""
    import agentrl

    digest = hashlib.sha256()
    for name in CODE:
        for root in importlib.util.find_spec(name).submodule_search_locations:
            for path in sorted(Path(root).rglob("*.py")):
                digest.update(f"{name}/{path.relative_to(root).as_posix()}\n".encode())
                digest.update(path.read_bytes())
    return f"{agentrl.__version__}+{digest.hexdigest()[:12]}"


RENAMED = {"trainer.eval_temperature=": "rollout.eval_temperature="}
"""Settings renamed since runs were first stored: keys hash their first spelling, so a rename
alone does not orphan stored runs (the code version still separates old code from new)."""


def spec_key(*parts) -> str:
    """A short hash of ``parts`` (JSON-encodable): everything that determines a run."""
    text = json.dumps(list(parts))
    for new, old in RENAMED.items():
        text = text.replace(new, old)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Spec:
    """One run of the grid: ``args`` are its ``python -m agentrl.run`` overrides, ``key`` its
    :func:`spec_key`."""

    method: str
    seed: int
    args: tuple[str, ...]
    key: str

    def run_key(self, code: str) -> str:
        """The spec key with the code version: a run folder or stored run counts only under
        it."""
        return f"{self.key}@{code}"


def version_of(record: Mapping) -> str:
    return record.get("code", PRE_VERSION)


class RunStore:
    """Stored run summaries: ``path`` (read and appended to) and, read only, ``committed`` (the
    committed store beside the committed report, when it is another file). A summary is found
    by its spec key and code version; the later of two lines wins."""

    def __init__(self, path: str | Path, committed: str | Path | None = None):
        self.path = Path(path)
        self.records: list[dict] = []
        sources = [Path(committed)] if committed is not None else []
        for source in [*(s for s in sources if s.resolve() != self.path.resolve()), self.path]:
            if source.exists():
                self.records += _read_store(source)
        self._lock = threading.Lock()

    def get(self, spec: Spec, code: str) -> dict | None:
        found = [r for r in self.records if r["key"] == spec.key and version_of(r) == code]
        return found[-1] if found else None

    def versions(self, specs: Sequence[Spec]) -> list[str]:
        """The code versions of the stored runs of ``specs``, the latest stored first."""
        keys = {s.key for s in specs}
        seen = [version_of(r) for r in self.records if r["key"] in keys]
        return list(dict.fromkeys(reversed(seen)))

    def add(self, record: dict) -> None:
        # One line per finished run, so a benchmark cut short keeps what it did.
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            self.records.append(record)


def _read_store(path: Path) -> list[dict]:
    """The records of a store file; unreadable lines are skipped."""
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "key" in record:
            out.append(record)
    return out


def grid_parser(prog: str, seeds: int, iterations: int, eval_every: int, jobs: int = 1):
    """The options every grid benchmark takes (add its own to the returned parser)."""
    p = argparse.ArgumentParser(prog=f"python -m agentrl.bench {prog}")
    p.add_argument("--seeds", type=int, default=seeds)
    p.add_argument("--iterations", type=int, default=iterations)
    p.add_argument("--eval-every", type=int, default=eval_every)
    p.add_argument("--jobs", type=int, default=jobs, help="runs side by side")
    p.add_argument("--report-only", action="store_true", help="report the stored runs only")
    p.add_argument(
        "--code-version",
        default=None,
        help="with --report-only: report the runs of this code version (default: the newest "
        "stored)",
    )
    return p


def pick_version(store: RunStore, specs: Sequence[Spec], opts: argparse.Namespace) -> str:
    """The code version the report is about: the current code's when the benchmark trains;
    with ``--report-only`` ``--code-version`` or the newest stored for ``specs``."""
    if not opts.report_only:
        if opts.code_version:
            raise SystemExit("--code-version goes with --report-only (new runs are the code's)")
        return code_version()
    return opts.code_version or next(iter(store.versions(specs)), code_version())


def version_line(store: RunStore, specs: Sequence[Spec], code: str) -> str:
    """The report's sentence on the code version of its runs (and the others stored)."""
    others = [v for v in store.versions(specs) if v != code]
    whose = "this report's code" if code == code_version() else "not this report's code"
    return (
        f"Runs: code version `{code}` ({whose}; a code version is agentrl's version and a hash "
        f"of the sources of {', '.join(CODE)}, and runs of different versions are never pooled)."
        + (f" Also stored, not shown: {', '.join(f'`{v}`' for v in others)}." if others else "")
    )


def _stamp(out: Path) -> str | None:
    """The run key a run folder was started under (None when unstamped)."""
    path = out / "run_key"
    return path.read_text().strip() if path.exists() else None


def finished(out: Path, key: str) -> bool:
    """Whether ``out`` holds a finished run (its wall time written) started under ``key``."""
    return _stamp(out) == key and (out / "wall_s").exists()


def collect(
    specs: Sequence[Spec],
    store: RunStore,
    code: str,
    work: Path,
    train: Callable[[Spec, Path], object],
    summarise: Callable[[Spec, Path], dict],
    report_only: bool = False,
    jobs: int = 1,
    meta: Mapping | None = None,
    log: Callable[[str], object] = print,
) -> list[dict]:
    """The summary of every spec under code version ``code``, in order: stored, else read from
    a finished run folder ``<work>/<method>_seed<seed>``, else (unless ``report_only``) trained
    there with ``train(spec, folder)``; ``summarise(spec, folder)`` reads a finished folder.
    New summaries get the spec key, ``code``, the date and ``meta`` and go to the store. Specs
    with no summary under ``report_only`` are left out."""

    def one(spec: Spec) -> dict | None:
        stored = store.get(spec, code)
        if stored is not None:
            return stored
        out, key = work / f"{spec.method}_seed{spec.seed}", spec.run_key(code)
        if not finished(out, key):
            if report_only:
                return None
            if out.exists() and _stamp(out) != key:
                # A run of another spec or code (or unstamped): continuing it would report it
                # under this key. A folder of this key that did not finish is resumed.
                shutil.rmtree(out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "run_key").write_text(key)
            train(spec, out)
        record = {**summarise(spec, out), "method": spec.method, "seed": spec.seed}
        record.update(key=spec.key, code=code, date=datetime.date.today().isoformat(), **meta or {})
        store.add(record)
        tag = work.name.strip(".").removesuffix("_runs").replace("_", "-")
        log(f"[{tag}] {spec.method} seed {spec.seed}: final {record['y'][-1]:.3f}")
        return record

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return [r for r in pool.map(one, specs) if r is not None]


def warm_start(out: Path, args: Sequence[str], log: Callable[[str], object] = print) -> Path:
    """The supervised checkpoint of ``python -m agentrl.sft <args>`` in ``out`` (built once,
    reused), which every run of a grid starts from."""
    if not (out / "config.json").exists():
        log(f"[bench] supervised warm start -> {out}")
        # One thread: the weights are then bitwise the same on every build (the thread count
        # changes the order of floating-point sums), so stored runs stay paired with a rebuild.
        args = [*args, "trainer.num_threads=1"]
        run_agentrl(args, out, module="agentrl.sft", out_key="sft.out_dir")
    return out


def weights_hash(init: Path) -> str:
    """A short hash of a warm start's weights: runs from different warm starts never pair."""
    digest = hashlib.sha256()
    for name in ("model.safetensors", "value_head.safetensors"):
        if (init / name).exists():
            digest.update((init / name).read_bytes())
    return digest.hexdigest()[:16]


def init_hash(store: RunStore, init: Path) -> str:
    """:func:`weights_hash` of the warm start ``init``; without it (a fresh clone reporting
    stored runs) the one most of the stored runs share."""
    if (init / "config.json").exists():
        return weights_hash(init)
    hashes = [r["init"] for r in store.records if "init" in r]
    return max(set(hashes), key=hashes.count, default="")


# --- summaries ---


def summarise(out: Path, batch: int, series: Mapping[str, str]) -> dict:
    """A finished run's summary from its ``metrics.jsonl``: environment steps (``x``) and eval
    success (``y``) at each evaluation, the first at iteration 0; per training iteration the
    metric of each ``series`` (name → metric; NaN where a row lacks it); ``env_steps`` and
    ``wall_s``.

    Args:
        batch: episodes per iteration (the mean episode length times this is its steps).
    """
    rows = read_metrics(out)
    steps, x, y = 0.0, [], []
    per_iteration: dict[str, list[float]] = {name: [] for name in series}
    for r in rows:
        if r["iteration"] > 0:
            steps += r["env/length"] * batch
            for name, metric in series.items():
                per_iteration[name].append(r.get(metric, math.nan))
        if "eval/success" in r:
            x.append(steps)
            y.append(r["eval/success"])
    wall = out / "wall_s"
    return {
        "x": x,
        "y": y,
        **per_iteration,
        "env_steps": steps,
        "wall_s": float(wall.read_text()) if wall.exists() else None,
    }


def by_method(results: Sequence[dict], methods: Sequence[str]) -> dict[str, list[dict]]:
    """The runs of each of ``methods`` that has any, in that order, each sorted by seed."""
    return {
        m: sorted((r for r in results if r["method"] == m), key=lambda r: r["seed"])
        for m in methods
        if any(r["method"] == m for r in results)
    }


def paired(a: str, ra: list[dict], b: str, rb: list[dict], key: Callable[[dict], float]):
    """A against B on the seeds both have (the pairing), by ``key`` of each run."""
    seeds = sorted({r["seed"] for r in ra} & {r["seed"] for r in rb})
    xa, xb = {r["seed"]: key(r) for r in ra}, {r["seed"]: key(r) for r in rb}
    return compare_pair(a, b, [xa[s] for s in seeds], [xb[s] for s in seeds])


def all_paired(by: Mapping[str, list[dict]], key: Callable[[dict], float]) -> list[PairVerdict]:
    """Every unordered pair of ``by``'s methods (A before B in ``by``'s order), paired by seed."""
    names = list(by)
    return [paired(a, by[a], b, by[b], key) for i, a in enumerate(names) for b in names[i + 1 :]]


def mean_curve(runs: Sequence[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(T,) mean ``x`` over runs and (R, T) ``y`` per run, cut to the shortest run's T."""
    n = min(len(r["y"]) for r in runs)
    return np.mean([r["x"][:n] for r in runs], axis=0), np.array([r["y"][:n] for r in runs])


def method_table(
    by: Mapping[str, list[dict]],
    columns: Sequence[tuple[str, str, Callable[[list[dict]], str]]],
    first: str = "method",
) -> list[str]:
    """A table with a row per method: each column is (header, alignment rule such as ``---:``,
    the cell of a method's runs)."""
    head = f"| {first} | " + " | ".join(h for h, _, _ in columns) + " |"
    rule = "|---|" + "".join(f"{a}|" for _, a, _ in columns)
    rows = [f"| {m} | " + " | ".join(fn(rs) for _, _, fn in columns) + " |" for m, rs in by.items()]
    return table([head, rule], rows, "No runs to show.")


def per_seed(results: Sequence[dict]) -> list[str]:
    """A line per run: its score at each evaluation, iteration 0 first."""
    return [
        f"- {r['method']} seed {r['seed']}: " + ", ".join(f"{y:.3f}" for y in r["y"])
        for r in results
    ]


def coverage(results: Sequence[dict], wanted: Sequence[tuple[str, Sequence[int]]]) -> list[str]:
    """The requested runs (method, seeds) without a result yet, as a line (the benchmark
    accumulates across sessions: a report may be partial); nothing when every run is in."""
    have = {(r["method"], r["seed"]) for r in results}
    missing = [
        f"{m} ({sum((m, s) in have for s in ss)}/{len(ss)} seeds)"
        for m, ss in wanted
        if any((m, s) not in have for s in ss)
    ]
    if not missing:
        return []
    return [
        "",
        f"Not yet run at this budget (methods absent from the tables): {', '.join(missing)}.",
    ]


def plot_curves(ax, by: Mapping[str, list[dict]], style: Mapping[str, dict], counts=False) -> None:
    """Each method's mean ``y`` over seeds against its mean ``x``, with a min–max band when it
    has more than one run; with ``counts`` the legend gives each method's number of runs."""
    for m, rs in by.items():
        x, y = mean_curve(rs)
        ax.plot(x, y.mean(axis=0), label=f"{m} ({len(rs)})" if counts else m, **style[m])
        if len(rs) > 1:
            ax.fill_between(x, y.min(axis=0), y.max(axis=0), color=style[m]["color"], alpha=0.12)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
