"""Proof problems: the :class:`ProofTask` record and where task lists come from.

- ``source=derivations``: :func:`derivation_tasks` turns generated problems
  (:mod:`.derivations`) into tasks; the eval split never repeats a train problem.
- ``source=file``: :func:`load_task_file` reads a JSONL (one JSON object per line), JSON (a list
  of objects) or parquet file laid out like FineProofs-RL or IMO-ProofBench.

Accepted columns (names are matched ignoring case, spaces, hyphens and underscores, so
IMO-ProofBench's ``Problem ID`` and ``Grading guidelines`` match ``problem_id`` and
``grading_guidelines``); the first present name of each row wins:

==================  =====================================================================
field               column names
==================  =====================================================================
problem (required)  problem, question, statement
id                  id, problem_id, uid, question_id  (default: ``<file stem>-<row>``)
reference solution  reference_solution, solution, reference, proof, ground_truth_solution
rubric              rubrics, rubric, grading_guidelines, marking_scheme, grading_scheme,
                    guidelines
==================  =====================================================================

FineProofs-RL has ``problem``, ``source``, ``rubrics`` (and per-rollout scores, ignored) but no
reference solution; IMO-ProofBench has ``Problem ID``, ``Problem``, ``Solution``, ``Grading
guidelines``, ``Category``, ``Level``, ``Short Answer``, ``Source``. Other string or number
columns are kept in :attr:`ProofTask.meta`. Non-string rubrics (lists, objects) are kept as
JSON text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentrl.configuration import ConfigError, check_choice

from .config import SPLITS, ProofConfig
from .derivations import Derivation, generate

COLUMNS: dict[str, tuple[str, ...]] = {
    "problem": ("problem", "question", "statement"),
    "id": ("id", "problemid", "uid", "questionid"),
    "reference_solution": ("referencesolution", "solution", "reference", "proof",
                           "groundtruthsolution"),
    "rubric": ("rubrics", "rubric", "gradingguidelines", "markingscheme", "gradingscheme",
               "guidelines"),
}  # fmt: skip
"""Accepted column names per field, already normalized (see :func:`_norm`)."""


@dataclass(frozen=True)
class ProofTask:
    """One problem to write a proof (or derivation) for."""

    id: str
    """Stable identifier (content-based for derivations, the file's id column otherwise)."""
    problem: str
    """The problem statement (``info["task"]``)."""
    reference_solution: str
    """A correct solution ("" when the source has none)."""
    rubric: str
    """Grading guidelines shown to the judge; for derivations, the mechanical rubric."""
    source: Literal["derivations", "file"]
    derivation: Derivation | None = None
    """What the mechanical grader needs (derivations only)."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Other columns of a task file (category, level, ...)."""


def derivation_rubric(d: Derivation) -> str:
    """The rubric of a derivation task in words (:mod:`.grading` holds the exact rules)."""
    things, given = (
        ("equations", "equation") if d.kind == "equation" else ("expressions", "expression")
    )
    shown = " and shows at least one intermediate step" if d.min_intermediates else ""
    return (
        f"Checked mechanically. 7 points: a chain of {things}, each equivalent to the one "
        f"before, that starts from the given {given} and ends with the target{shown}. "
        "Otherwise 1 point per correct step that brings the chain closer to the target, before "
        "the first wrong step (at most 3), plus 1 point if correct steps reached the target "
        "(for an identity, whose target is given, only after such a step). Restating, "
        "reordering or rescaling earns nothing."
    )


def derivation_tasks(cfg: ProofConfig, split: str) -> list[ProofTask]:
    """The derivation tasks of ``split`` (``train`` or ``eval``) for ``cfg``."""
    check_choice("split", split, SPLITS)
    train = generate(cfg.n_train_tasks, cfg.seed, 0, cfg.kinds, cfg.difficulty)
    if split == "train":
        made = train
    else:
        avoid = [g.problem for g in train]
        made = generate(cfg.n_eval_tasks, cfg.seed, 1, cfg.kinds, cfg.difficulty, avoid)
    tasks = []
    for g in made:
        d = g.derivation
        digest = _digest(g.problem)
        tasks.append(
            ProofTask(
                id=f"{d.kind}-d{d.difficulty}-{digest}",
                problem=g.problem,
                reference_solution="\n".join(g.reference),
                rubric=derivation_rubric(d),
                source="derivations",
                derivation=d,
            )
        )
    return tasks


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def _norm(name: str) -> str:
    """Column-name matching key: lowercase letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def task_from_row(row: Mapping[str, Any], default_id: str) -> ProofTask:
    """A :class:`ProofTask` from one row of a task file (columns as in the module docstring).

    Raises:
        ValueError: if the row is not an object or has no non-empty problem column.
    """
    if not isinstance(row, Mapping):
        raise ValueError(
            f"a row must be an object with a 'problem' field, got {type(row).__name__}"
        )
    by_norm: dict[str, Any] = {}
    for key, value in row.items():
        by_norm.setdefault(_norm(key), value)
    found: dict[str, str] = {}
    used: set[str] = set()
    for name, aliases in COLUMNS.items():
        for alias in aliases:
            if alias in by_norm and _as_text(by_norm[alias]).strip():
                found[name] = _as_text(by_norm[alias])
                used.add(alias)
                break
    if "problem" not in found:
        raise ValueError(
            f"no problem statement: expected one of the columns {list(COLUMNS['problem'])} "
            f"(got {sorted(row)})"
        )
    meta = {
        str(k): v
        for k, v in row.items()
        if _norm(k) not in used and isinstance(v, str | int | float | bool)
    }
    return ProofTask(
        id=found.get("id", default_id).strip(),
        problem=found["problem"].strip(),
        reference_solution=found.get("reference_solution", "").strip(),
        rubric=found.get("rubric", "").strip(),
        source="file",
        meta=meta,
    )


def _read_rows(path: Path) -> list[Any]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ConfigError(
                f"reading {path} needs pyarrow: pip install 'agentrl[proof]' (or pyarrow)"
            ) from exc
        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json task file must hold a list of objects")
        return data
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not a JSON object ({exc.msg})") from exc
    return rows


def load_task_file(path: str | Path) -> list[ProofTask]:
    """Every task of a JSONL, JSON or parquet file (columns as in the module docstring).

    Raises:
        ConfigError: if the file does not exist or has no rows.
        ValueError: if a row has no problem statement or two rows share an id; the message
            names the file and the row.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"task file {str(path)!r} does not exist")
    rows = _read_rows(p)
    if not rows:
        raise ConfigError(f"task file {str(path)!r} holds no tasks")
    tasks: list[ProofTask] = []
    ids: dict[str, int] = {}
    for i, row in enumerate(rows):
        try:
            task = task_from_row(row, default_id=f"{p.stem}-{i}")
        except ValueError as exc:
            raise ValueError(f"{p}, row {i}: {exc}") from exc
        if task.id in ids:
            raise ValueError(f"{p}, rows {ids[task.id]} and {i} share the id {task.id!r}")
        ids[task.id] = i
        tasks.append(task)
    return tasks


# One task list per (config, split) per process: every env of a worker shares it.
_TASK_LISTS: dict[tuple[ProofConfig, str], tuple[ProofTask, ...]] = {}


def load_tasks(cfg: ProofConfig, split: str = "train") -> tuple[ProofTask, ...]:
    """The tasks of ``split`` (``train`` or ``eval``) for ``cfg``; cached per process.

    With ``source=file`` the eval split is ``cfg.eval_path``, or ``cfg.path`` when that is "".
    """
    check_choice("split", split, SPLITS)
    key = (cfg, split)
    if key not in _TASK_LISTS:
        if cfg.source == "derivations":
            _TASK_LISTS[key] = tuple(derivation_tasks(cfg, split))
        else:
            path = cfg.eval_path if split == "eval" and cfg.eval_path else cfg.path
            _TASK_LISTS[key] = tuple(load_task_file(path))
    return _TASK_LISTS[key]
