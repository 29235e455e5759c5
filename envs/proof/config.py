"""The proof environment's settings (``env.*`` keys) and the constants other modules share.

This module imports neither sympy nor httpx, so registering the environment (which every
``agentrl.list_envs()`` does) stays cheap; the grader and the judge load them on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentrl.configuration import check, check_choice

SOURCES: tuple[str, ...] = ("derivations", "file")
KINDS: tuple[str, ...] = ("identity", "equation", "simplify")
"""Derivation problems: prove an identity, solve an equation, expand and simplify."""
DIFFICULTIES: tuple[int, ...] = (1, 2, 3)
"""Steps of a derivation's reference solution."""
SPLITS: tuple[str, ...] = ("train", "eval")
REWARDS: tuple[str, ...] = ("points", "binary")
TASK_FILE_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".parquet")
MAX_POINTS = 7
MAX_ANSWER_CHARS = 30_000
"""Longer answers are not graded (an invalid action): a bound on grading time and judge cost."""


@dataclass(frozen=True)
class ProofConfig:
    """Every setting of the proof environment with its default (``env.*`` keys)."""

    source: Literal["derivations", "file"] = "derivations"
    """``derivations``: generated problems graded mechanically (offline); ``file``: problems
    from ``path`` graded by an LLM judge."""
    path: str = ""
    """``source=file``: a JSONL or parquet file of problems (train split); see
    :func:`agentrl.envs.proof.tasks.load_task_file` for the accepted columns."""
    eval_path: str = ""
    """``source=file``: the file of the ``eval`` split; "" = the same problems as ``path``."""
    n_train_tasks: int = 1000
    """``source=derivations``: distinct problems in the train split."""
    n_eval_tasks: int = 100
    """``source=derivations``: distinct problems in the eval split (none of them in train)."""
    seed: int = 0
    """Seed of the derivation generator (the task lists; episodes draw from ``np_random``)."""
    difficulty: tuple[int, ...] = DIFFICULTIES
    """Derivation difficulties to mix: the number of steps of the reference solution (1-3)."""
    kinds: tuple[str, ...] = KINDS
    """Derivation kinds to mix: ``identity``, ``equation``, ``simplify``."""
    reward: Literal["points", "binary"] = "points"
    """``points``: reward = points / 7 (partial credit, a pass rate); ``binary``: 1 for full
    marks (7 points) and 0 otherwise. ``info["points"]`` and ``info["score"]`` carry the points
    either way."""
    max_steps: int = 1
    """Turns per episode. A graded answer always ends the episode, so more turns only let a
    policy retry after an answer that could not be graded."""
    max_answer_chars: int = MAX_ANSWER_CHARS
    """Longest gradable answer (after removing ``<think>`` reasoning and ``<action>`` tags)."""
    judge_base_url: str = "http://localhost:8000/v1"
    """OpenAI-compatible endpoint of the judge (``source=file``), e.g. a local vLLM server."""
    judge_model: str = ""
    """Model name sent to the judge endpoint; required with ``source=file``."""
    judge_api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the judge's API key (unset: no Authorization header)."""
    judge_timeout_s: float = 300.0
    """Seconds one judge request may take before it is abandoned (and retried)."""
    judge_retries: int = 3
    """Extra attempts after a timeout, connection error, HTTP 429 or 5xx."""
    judge_backoff_s: float = 2.0
    """Wait before retry k (k = 1, 2, ...) is ``judge_backoff_s * 2**(k-1)`` seconds."""
    judge_max_tokens: int = 4096
    """Longest judge reply (its assessment and the final ``SCORE:`` line)."""
    judge_temperature: float = 0.0
    judge_with_reference: bool = True
    """Show the judge the reference solution (AC2 trains with a judge that does not see it)."""
    judge_concurrency: int = 8
    """Judge requests in flight at once (``source=file``): the inline env pool steps up to this
    many proof envs of a batch in threads, so a batch's answers are judged together rather
    than one after another. 1 = one at a time."""

    def __post_init__(self) -> None:
        # YAML gives lists; the dataclass holds tuples (hashable, like every frozen default).
        object.__setattr__(self, "difficulty", tuple(self.difficulty))
        object.__setattr__(self, "kinds", tuple(self.kinds))
        check_choice("env.source", self.source, SOURCES)
        check_choice("env.reward", self.reward, REWARDS)
        if self.source == "file":
            _check_task_file("env.path", self.path, required=True)
            _check_task_file("env.eval_path", self.eval_path, required=False)
            check(
                bool(self.judge_model.strip()),
                "env.judge_model",
                self.judge_model,
                "the judge model's name (as the endpoint serves it) when env.source=file",
            )
        check(self.n_train_tasks >= 1, "env.n_train_tasks", self.n_train_tasks, ">= 1")
        check(self.n_eval_tasks >= 1, "env.n_eval_tasks", self.n_eval_tasks, ">= 1")
        check(len(self.difficulty) > 0, "env.difficulty", self.difficulty, "non-empty")
        for d in self.difficulty:
            check_choice("env.difficulty", d, DIFFICULTIES)
        check(len(self.kinds) > 0, "env.kinds", self.kinds, "non-empty")
        for kind in self.kinds:
            check_choice("env.kinds", kind, KINDS)
        check(self.max_steps >= 1, "env.max_steps", self.max_steps, ">= 1")
        check(self.max_answer_chars >= 1, "env.max_answer_chars", self.max_answer_chars, ">= 1")
        check(
            self.judge_base_url.startswith(("http://", "https://")),
            "env.judge_base_url",
            self.judge_base_url,
            "an http:// or https:// URL (e.g. http://localhost:8000/v1)",
        )
        check(self.judge_timeout_s > 0, "env.judge_timeout_s", self.judge_timeout_s, "> 0")
        check(self.judge_retries >= 0, "env.judge_retries", self.judge_retries, ">= 0")
        check(self.judge_backoff_s >= 0, "env.judge_backoff_s", self.judge_backoff_s, ">= 0")
        check(self.judge_max_tokens >= 1, "env.judge_max_tokens", self.judge_max_tokens, ">= 1")
        check(self.judge_concurrency >= 1, "env.judge_concurrency", self.judge_concurrency, ">= 1")
        check(
            0.0 <= self.judge_temperature <= 2.0,
            "env.judge_temperature",
            self.judge_temperature,
            "in [0, 2]",
        )


def _check_task_file(key: str, path: str, required: bool) -> None:
    """One clear error for a task file that is missing, absent or of an unknown format."""
    if not path and not required:
        return
    what = "a JSONL or parquet file of proof problems when env.source=file"
    check(bool(path), key, path, what)
    p = Path(path).expanduser()
    check(p.is_file(), key, path, f"an existing file ({what}); no file is there")
    check(
        p.suffix.lower() in TASK_FILE_SUFFIXES,
        key,
        path,
        f"a file ending in one of {list(TASK_FILE_SUFFIXES)}",
    )
