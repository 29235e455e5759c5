"""The proof-writing environment (``env=proof``, ``agentrl/Proof-v0``): one long answer, 0-7 points.

Each episode poses one problem, drawn with the env's ``np_random`` from the split's task list
(:func:`~agentrl.envs.proof.tasks.load_tasks`). The policy answers once; the answer is graded by
:func:`~agentrl.envs.proof.grading.grade` (the mechanical rubric for ``source=derivations``, the
LLM judge for ``source=file``) and the episode ends with reward ``points / 7``.

- Observation: the problem and a short note on the answer format.
- Action: the whole answer (reasoning in ``<think>...</think>`` is dropped, ``<action>`` tags
  are unwrapped). An answer that is not gradable (empty, no legible line, too long) is an
  invalid action: nothing changes, the observation says what to write, and with the default
  ``max_steps=1`` the episode is truncated.
- ``info``: ``task`` (the problem), ``task_id``, ``reference_solution``, ``source``,
  ``anchor`` = (task_id, graded answers so far), ``won`` (7 points), ``admissible_actions``
  None. After a step also ``points`` (None if not graded), ``graded`` (points were awarded:
  False for invalid answers and failed judgements, so callers can leave those out of
  averages), ``score`` (the points again; 0 for an invalid answer, which earns nothing, and
  None for a failed judgement: the trainer logs the mean as ``env/score`` and uses it for the
  partial-credit diagnostics), ``grade`` (details: valid steps, first error, judge reply, ...)
  and ``judge_error`` (why the judgement failed, else None). A failed judgement gives reward
  0.0 and ends the episode; it never raises.
- ``env.reward=binary`` pays 1 for full marks and 0 otherwise instead of ``points / 7``
  (pass rate vs binary rewards); ``points``, ``score`` and ``won`` are the same either way.
- With ``source=file`` the env sets ``step_concurrency = env.judge_concurrency``: the inline
  env pool steps up to that many envs of a batch in threads, so their judge requests run
  concurrently (see :attr:`agentrl.env_api.TextEnv.step_concurrency`).
- ``executed_action``: the answer lowercased with whitespace collapsed (responses that differ
  only in case or spacing share statistics).
- ``reset(options={"split": "eval"})`` draws from the eval split; ``{"task_index": k}`` poses
  task k of the split. ``env.unwrapped.tasks(split)`` lists a split's tasks.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from agentrl.configuration import check, check_choice, from_mapping
from agentrl.env_api import TextEnv, Transition

from .config import MAX_POINTS, SPLITS, ProofConfig
from .grading import Grade, canonical_answer, extract_answer, grade
from .tasks import ProofTask, load_tasks

if TYPE_CHECKING:
    from .judge import JudgeClient

FORMULA_SYNTAX = "Write formulas with + - * / ^ and parentheses, e.g. 3x^2 - 2(x + 1)/5."


def instructions(task: ProofTask) -> str:
    """How to write the answer to ``task`` (the part of the observation after the problem)."""
    d = task.derivation
    if d is None:
        return "Write a complete and rigorous proof."
    extra = " Show at least one intermediate step." if d.min_intermediates else ""
    if d.kind == "equation":
        return (
            "Answer with a chain of equations, one per line, each equivalent to the one "
            f"before, ending with {d.variable} = ... (for two solutions: {d.variable} = a or "
            f"{d.variable} = b).{extra} {FORMULA_SYNTAX}"
        )
    end = "the right-hand side" if d.kind == "identity" else "the expanded result"
    return (
        "Answer with a chain of equal expressions, one per line, starting from the given "
        f"expression:\n{d.start}\n= ...\nand ending with {end}.{extra} {FORMULA_SYNTAX}"
    )


class ProofEnv(TextEnv):
    """Proof writing graded 0-7 (see the module docstring).

    Args:
        config: a ready :class:`ProofConfig`; keyword arguments override its fields.
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the observation either way).
        **kwargs: :class:`ProofConfig` fields; unknown keys raise ``ConfigError``.
    """

    def __init__(
        self, config: ProofConfig | None = None, render_mode: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__()
        if config is not None:
            kwargs = {
                **{f.name: getattr(config, f.name) for f in dataclasses.fields(config)},
                **kwargs,
            }
        self.config: ProofConfig = from_mapping(ProofConfig, kwargs, path="env")
        self.render_mode = render_mode
        self.max_steps = self.config.max_steps
        # A judged step waits on the network: a pool may step this many envs at once (the
        # judge client is thread-safe). Mechanical grading computes (sympy): one at a time.
        self.step_concurrency = self.config.judge_concurrency if self.config.source == "file" else 1
        self.task: ProofTask | None = None
        self.last_grade: Grade | None = None
        self._answers = 0
        self._judge: JudgeClient | None = None

    def tasks(self, split: str = "train") -> tuple[ProofTask, ...]:
        """The tasks of ``split`` (``train`` or ``eval``)."""
        return load_tasks(self.config, split)

    def judge_client(self) -> JudgeClient | None:
        """The judge (created on first use; None for derivations, which need none)."""
        if self._judge is None and self.config.source == "file":
            from .judge import shared_client

            self._judge = shared_client(self.config)
        return self._judge

    # -- TextEnv hooks -------------------------------------------------------------------
    def _reset(self, options: dict[str, Any] | None) -> str:
        options = options or {}
        split = options.get("split", "train")
        check_choice("options['split']", split, SPLITS)
        tasks = self.tasks(split)
        index = options.get("task_index")
        if index is None:
            index = int(self.np_random.integers(len(tasks)))
        check(
            isinstance(index, numbers.Integral)
            and not isinstance(index, bool)
            and 0 <= index < len(tasks),
            "options['task_index']",
            index,
            f"an integer in [0, {len(tasks)}) for the {split} split",
        )
        self.task = tasks[int(index)]
        self.last_grade = None
        self._answers = 0
        return f"{self.task.problem}\n\n{instructions(self.task)}"

    def _step(self, action: str) -> Transition:
        assert self.task is not None  # TextEnv only steps after a reset
        g = grade(
            self.task,
            action,
            judge=self.judge_client(),
            max_answer_chars=self.config.max_answer_chars,
        )
        extra: dict[str, Any] = {
            "points": g.points,
            "score": g.points if g.points is not None else (None if g.valid else 0),
            "graded": g.graded,
            "grade": g.to_info(),
            "judge_error": None,
        }
        if not g.valid:
            obs = f"Your answer could not be graded: {g.error}. {instructions(self.task)}"
            return Transition(obs, 0.0, False, False, None, extra)
        self._answers += 1
        self.last_grade = g
        if g.points is None:
            extra["judge_error"] = g.error
            obs = f"Your answer was received but could not be graded ({g.error})."
        else:
            obs = f"Points: {g.points}/{MAX_POINTS}."
        executed = canonical_answer(extract_answer(action))
        reward = g.reward if self.config.reward == "points" else float(g.points == MAX_POINTS)
        return Transition(obs, reward, True, True, executed, extra)

    def _anchor(self) -> Hashable:
        return (self.task.id if self.task else "", self._answers)

    def _won(self) -> bool:
        return self.last_grade is not None and self.last_grade.points == MAX_POINTS

    def _task(self) -> str:
        return self.task.problem if self.task else "Prove the statement (reset the environment)."

    def demonstration(self) -> list[str] | None:
        """The task's reference solution as the one answer (``[]`` once the episode is over);
        None when the task has no reference solution (task files without one)."""
        if self.task is None:
            return None
        if self._done:
            return []
        return [self.task.reference_solution] if self.task.reference_solution.strip() else None

    def _extra_info(self) -> dict[str, Any]:
        return {
            "task_id": self.task.id if self.task else "",
            "reference_solution": self.task.reference_solution if self.task else "",
            "source": self.config.source,
        }

    def close(self) -> None:
        # The judge client is shared by the process's envs (see judge.shared_client).
        self._judge = None
        super().close()
