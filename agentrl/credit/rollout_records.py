"""Rollout record files: a run's episodes as per-turn records, in the schema of :func:`assign`.

The trainer writes the episodes of an iteration (and of its evaluations) as one gzipped JSON
Lines file each, ``<out_dir>/rollouts/iter-NNNNNN.jsonl.gz`` and
``<out_dir>/rollouts/eval-NNNNNN.jsonl.gz``, where ``NNNNNN`` is the iteration of
``metrics.jsonl`` the episodes belong to (training: the iteration that played and learned from
them; evaluation: the number of updates the evaluated policy had). One line is one
environment turn; its fields are those of :mod:`agentrl.credit.records` (so a file read with
:func:`read_records` feeds :func:`~agentrl.credit.assign` directly and gives back the
trainer's advantages) plus:

- ``observation`` (str): the observation the policy acted on;
- ``advantage`` (float or None): the step advantage the learner used (None for evaluation
  episodes, which nobody learns from);
- ``value`` (float, only with a critic): V(s_t) the estimator used;
- ``split`` (``"train"`` or ``"eval"``), ``iteration`` (the file's number), ``seed`` (the
  group's environment seed), ``env`` (the environment's registered name).

Ids: ``group_id`` and ``trajectory_id`` are integers numbering the file's groups and episodes
in batch order (across every rank), so :func:`assign`'s id ordering is the trainer's order.
``policy_version`` is the number of updates the sampling policy had. ``state_key`` and
``next_state_key`` are the environment's anchors as JSON (:func:`json_key`: tuples become
lists, which ``assign`` turns back into tuples; objects JSON cannot hold become their
``repr``); ``next_state_key`` is None on an episode's last turn.

**Size bound.** Each text field (``observation``, ``prompt``, ``response``,
``final_observation``, ``final_prompt``, ``task``) longer than ``max_chars`` characters keeps
its first and last ``max_chars // 2`` characters around the marker :data:`CUT_MARKER`
(``…[N characters cut]…``, N the number of characters removed), so a file grows with the
number of turns, not with the length of what the model wrote. Estimators that read texts
(``tigpo``; rescoring methods) see the cut texts, so only they can differ from the trainer's
numbers when a text was cut; every other field is kept exactly.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.credit.batch import Step, Trajectory, TrajectoryGroup

ROLLOUTS_DIR = "rollouts"
"""The folder of a run's record files."""
CUT_MARKER = "…[{n} characters cut]…"
"""What replaces the middle of a text longer than the limit (``n``: characters removed)."""
TEXT_FIELDS = ("observation", "prompt", "response", "final_observation", "final_prompt", "task")
"""The record fields the size bound applies to."""
SPLITS = ("train", "eval")
_FILE = re.compile(r"^(iter|eval)-(\d{6,})\.jsonl\.gz$")
_PREFIX = {"train": "iter", "eval": "eval"}


def cut_text(text: str, max_chars: int) -> str:
    """``text`` itself if it has at most ``max_chars`` characters, else its first and last
    ``max_chars // 2`` characters around :data:`CUT_MARKER`."""
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    removed = len(text) - 2 * half
    return text[:half] + CUT_MARKER.format(n=removed) + (text[-half:] if half else "")


def json_key(key: Hashable) -> Any:
    """An anchor as JSON: numbers, strings, bools and None as they are, tuples (and lists,
    frozensets, sorted) recursively as lists, anything else as its ``repr``.

    Equal anchors give equal JSON; :func:`~agentrl.credit.assign` turns lists back into
    tuples, so the states of a group are the same after the round trip.
    """
    if key is None or isinstance(key, (bool, int, str)):
        return key
    if isinstance(key, float):
        return key if math.isfinite(key) else repr(key)
    if isinstance(key, np.generic):
        return json_key(key.item())
    if isinstance(key, (tuple, list)):
        return [json_key(k) for k in key]
    if isinstance(key, frozenset):
        return sorted((json_key(k) for k in key), key=repr)
    return repr(key)


def _number(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def episode_records(
    groups: Sequence[TrajectoryGroup],
    *,
    split: str,
    iteration: int,
    policy_version: int,
    advantages: np.ndarray | None = None,
    values: np.ndarray | None = None,
    max_chars: int = 2000,
) -> list[dict[str, Any]]:
    """One record per step of ``groups`` (in :class:`~agentrl.credit.StepBatch` order).

    Args:
        groups: the episodes; ids number them from 0 (see :func:`renumber` to join parts).
        split: ``"train"`` or ``"eval"``.
        iteration: the file's iteration (written into every record).
        policy_version: updates the sampling policy had (a step that records its own
            version, ``Step.policy_version``, keeps it).
        advantages: (N,) the step advantages the learner used, N = steps of ``groups``; None
            for evaluation episodes.
        values: (N,) V(s_t) of a critic-based estimator, or None.
        max_chars: the size bound of each text field (module docstring).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    n_steps = sum(len(tr.steps) for g in groups for tr in g.trajectories)
    for name, arr in (("advantages", advantages), ("values", values)):
        if arr is not None and len(arr) != n_steps:
            raise ValueError(f"{len(arr)} {name} for {n_steps} steps")
    out: list[dict[str, Any]] = []
    n = m = 0
    for g, group in enumerate(groups):
        for tr in group.trajectories:
            last = len(tr.steps) - 1
            for t, s in enumerate(tr.steps):
                rec: dict[str, Any] = {
                    "split": split,
                    "iteration": iteration,
                    "group_id": g,
                    "trajectory_id": m,
                    "turn_index": t,
                    "state_key": json_key(s.anchor),
                    "next_state_key": json_key(tr.steps[t + 1].anchor) if t < last else None,
                    "observation": s.observation,
                    "prompt": s.prompt_text,
                    "response": s.response_text,
                    "action": s.action if s.valid else None,
                    "valid": bool(s.valid),
                    "reward": float(s.reward),
                    "terminated": bool(s.terminated),
                    "truncated": bool(s.truncated),
                    "success": bool(tr.won),
                    "logprob": float(np.mean(s.logprobs)) if s.logprobs else None,
                    "advantage": None if advantages is None else float(advantages[n]),
                    # The asynchronous producer stamps each step with the weights that
                    # sampled it; otherwise the caller's version holds for every step.
                    "policy_version": policy_version
                    if getattr(s, "policy_version", None) is None
                    else int(s.policy_version),
                    "lost": bool(s.lost),
                    "task": group.task,
                    "seed": int(group.seed),
                    "env": group.env,
                }
                if values is not None:
                    rec["value"] = float(values[n])
                if s.costs is not None:
                    rec["costs"] = {k: float(v) for k, v in s.costs.items()}
                if s.rubric_reward is not None:
                    rec["rubric_reward"] = float(s.rubric_reward)
                if t == last:
                    rec["final_observation"] = tr.final_obs
                    rec["final_prompt"] = tr.final_prompt
                    rec["task_type"] = tr.task_type
                    rec["score"] = _number(tr.score)
                for name in TEXT_FIELDS:
                    if isinstance(rec.get(name), str):
                        rec[name] = cut_text(rec[name], max_chars)
                out.append(rec)
                n += 1
            m += 1
    return out


def renumber(parts: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Join record lists numbered from 0 each (one per rank, in rank order) into one list with
    ids numbering every group and episode in order."""
    out: list[dict[str, Any]] = []
    g0 = m0 = 0
    for part in parts:
        for rec in part:
            out.append(
                {
                    **rec,
                    "group_id": rec["group_id"] + g0,
                    "trajectory_id": rec["trajectory_id"] + m0,
                }
            )
        if part:
            g0 += max(r["group_id"] for r in part) + 1
            m0 += max(r["trajectory_id"] for r in part) + 1
    return out


def record_path(out_dir: str | Path, split: str, iteration: int) -> Path:
    """``<out_dir>/rollouts/{iter|eval}-NNNNNN.jsonl.gz``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return Path(out_dir) / ROLLOUTS_DIR / f"{_PREFIX[split]}-{iteration:06d}.jsonl.gz"


def record_files(out_dir: str | Path) -> dict[str, dict[int, Path]]:
    """The record files of a run: ``{"train": {iteration: path}, "eval": {...}}``, sorted."""
    found: dict[str, dict[int, Path]] = {s: {} for s in SPLITS}
    folder = Path(out_dir) / ROLLOUTS_DIR
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            match = _FILE.match(path.name)
            if match:
                split = "train" if match.group(1) == "iter" else "eval"
                found[split][int(match.group(2))] = path
    return found


def write_records(path: str | Path, records: Sequence[dict[str, Any]]) -> Path:
    """Write ``records`` as gzipped JSON Lines, through a temporary file and a rename: a run
    killed while writing leaves no half file under the final name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    # mtime=0: the same records give the same bytes (a replayed iteration rewrites its file
    # identically).
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as fh:
        for rec in records:
            fh.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))
    os.replace(tmp, path)
    return path


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of one file, in order."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def prune_records(out_dir: str | Path, keep_through: int) -> list[Path]:
    """Delete record files past iteration ``keep_through`` and unfinished temporary files;
    return what was deleted.

    A resumed run replays the iterations after its checkpoint and writes their files again, so
    files a killed run wrote past the checkpoint go first (a run from scratch passes 0 for
    training files: everything goes but the untrained evaluation, which is rewritten anyway).
    """
    gone = []
    folder = Path(out_dir) / ROLLOUTS_DIR
    if not folder.is_dir():
        return gone
    for path in sorted(folder.iterdir()):
        match = _FILE.match(path.name)
        stale = path.name.endswith(".jsonl.gz.tmp")
        if stale or (match and int(match.group(2)) > keep_through):
            path.unlink()
            gone.append(path)
    return gone


def state_key(value: Any) -> Hashable:
    """A record's JSON ``state_key`` as a hashable anchor (lists become tuples)."""
    if isinstance(value, list):
        return tuple(state_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), state_key(v)) for k, v in value.items()))
    return value


def groups_from_records(records: Sequence[dict[str, Any]]) -> list[TrajectoryGroup]:
    """The episodes of a record file as groups (for graphs and transcripts), in the order of
    ``(group_id, trajectory_id, turn_index)``: :class:`~agentrl.credit.StepBatch` order, so
    :func:`~agentrl.credit.assign` of the records sorted the same way lines up with the batch.

    Meant for files :func:`episode_records` wrote (whole episodes, checked when written);
    :func:`~agentrl.credit.assign` is the checked entry point for records from elsewhere.
    Token ids are not recorded (empty); ``logprobs`` holds the one mean log-prob.
    """
    ordered = sorted(records, key=lambda r: (r["group_id"], r["trajectory_id"], r["turn_index"]))
    groups: dict[Any, TrajectoryGroup] = {}
    trajs: dict[Any, Trajectory] = {}
    for r in ordered:
        group = groups.get(r["group_id"])
        if group is None:
            group = groups[r["group_id"]] = TrajectoryGroup(
                task=r.get("task") or str(r["group_id"]),
                seed=int(r.get("seed") or 0),
                env=r.get("env") or "",
            )
        tr = trajs.get(r["trajectory_id"])
        if tr is None:
            tr = trajs[r["trajectory_id"]] = Trajectory(won=bool(r["success"]))
            group.trajectories.append(tr)
        lp = r.get("logprob")
        tr.steps.append(
            Step(
                prompt_ids=[],
                response_ids=[],
                logprobs=[] if lp is None else [float(lp)],
                reward=float(r["reward"]),
                terminated=bool(r["terminated"]),
                truncated=bool(r["truncated"]),
                anchor=state_key(r["state_key"]),
                action=r.get("action"),
                valid=bool(r["valid"]),
                response_text=r.get("response") or "",
                observation=r.get("observation") or "",
                prompt_text=r.get("prompt") or "",
                lost=bool(r.get("lost", False)),
                costs=r.get("costs"),
                rubric_reward=r.get("rubric_reward"),
            )
        )
        if "final_observation" in r:
            tr.final_obs = r.get("final_observation") or ""
            tr.final_prompt = r.get("final_prompt") or ""
            tr.task_type = r.get("task_type")
            tr.score = r.get("score")
    return list(groups.values())
