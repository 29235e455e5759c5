"""Proof writing graded 0-7 (``env=proof``, ``agentrl/Proof-v0``).

Two task sources: ``derivations`` (default, offline) generates algebra problems whose answers
(chains of formulas) are checked mechanically by a safe parser and sympy; ``file`` reads
problems in the FineProofs-RL / IMO-ProofBench layout and grades proofs with an LLM judge
through an OpenAI-compatible endpoint.

- :mod:`.env`: :class:`ProofEnv`; :mod:`.config`: :class:`ProofConfig`.
- :mod:`.grading`: :func:`grade` (usable without the env), :class:`Grade`, the rubric.
- :mod:`.tasks`: :class:`ProofTask`, :func:`load_tasks`, :func:`load_task_file`.
- :mod:`.judge`: :class:`JudgeClient`, :class:`Judgement`; :mod:`.safe_math`: the parser;
  :mod:`.derivations`: the problem generator.

Registering imports only :mod:`.config` (no sympy, no httpx); the names below load their
modules on first access.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from agentrl.registry import register_env

from .config import ProofConfig

register_env(
    "proof",
    "agentrl/Proof-v0",
    entry_point="agentrl.envs.proof.env:ProofEnv",
    config_cls=ProofConfig,
)

_LAZY: dict[str, str] = {
    "ProofEnv": ".env",
    "Grade": ".grading",
    "grade": ".grading",
    "grade_many": ".grading",
    "extract_answer": ".grading",
    "ProofTask": ".tasks",
    "load_tasks": ".tasks",
    "load_task_file": ".tasks",
    "JudgeClient": ".judge",
    "Judgement": ".judge",
    "JudgeSettings": ".judge",
    "settings_from_config": ".judge",
    "MathSyntaxError": ".safe_math",
    "parse_expression": ".safe_math",
}

__all__ = ["ProofConfig", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
