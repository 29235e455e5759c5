"""Prefixes and continuations of single-turn attempts, shared by AC2 and PS-PPO (not a method).

Both methods cut a stored or fresh response at chunk boundaries (:func:`cut_points`), put the
problem plus the prefix in the prompt, sample continuations from it and grade the resulting
attempt through the environment. :class:`PrefixSampler` holds what that takes: the env (one
in-process instance that grades by ``reset(seed)`` then ``step(text)``), the tokenizer, the
rollout backend and the rollout settings; :meth:`PrefixSampler.problem` caches each env seed's
problem text and prompt ids, :meth:`PrefixSampler.generate` samples with a token limit per
prompt and counts every decoded token, :meth:`PrefixSampler.continuation_step` turns one
generated continuation into the single :class:`~agentrl.credit.batch.Step` the learner trains
(the prefix is part of the prompt, so only the new tokens are trained).
"""

from __future__ import annotations

from typing import Any

from agentrl.credit.batch import Step
from agentrl.model import encode_prompt
from agentrl.registry import make
from agentrl.rollout import Sampling
from agentrl.rollout.prompting import build_prompt


def cut_points(length: int, chunk: int, max_frac: float = 0.9) -> list[int]:
    """Prefix lengths at which a trajectory of ``length`` tokens may be cut.

    Multiples of ``chunk`` in ``[0, max_frac · length]``; 0 (the bare problem) is always one.
    """
    limit = max_frac * length
    return [k * chunk for k in range(int(limit // chunk) + 1) if k * chunk <= limit]


class PrefixSampler:
    """Problems, sampling from prefixes and grading through the environment.

    Args:
        run_cfg: the run's :class:`~agentrl.run.config.RunConfig` (its env and rollout nodes).
        tokenizer, backend: the policy's tokenizer and rollout backend.
    """

    def __init__(self, run_cfg, tokenizer, backend):
        self.rc = run_cfg.rollout
        self.tokenizer, self.backend = tokenizer, backend
        self.env = make(run_cfg.env_name, **run_cfg.env_kwargs)  # grades attempts, in-process
        self._problems: dict[int, tuple[str, list[int], str]] = {}
        self.decode_tokens = 0
        """Tokens decoded since the caller last reset it (every :meth:`generate` call adds)."""

    def problem(self, seed: int) -> tuple[str, list[int], str]:
        """(problem text, prompt ids, the env's reference solution or "") of an env seed."""
        if seed not in self._problems:
            obs, info = self.env.reset(seed=int(seed))
            text = build_prompt(
                info["task"], [], obs, None, 0, self.rc.action_format, self.rc.prompt_style
            )
            ids = encode_prompt(self.tokenizer, text, self.rc.max_prompt_tokens)
            self._problems[seed] = (obs, ids, str(info.get("reference_solution") or ""))
        return self._problems[seed]

    def grade_info(self, seed: int, text: str) -> tuple[float | None, dict[str, Any]]:
        """Reward in [0, 1] of a complete attempt (None when the grader could not judge it)
        and the env's ``info`` of the grading step."""
        self.env.reset(seed=int(seed))
        _, reward, _, _, info = self.env.step(text)
        if not info.get("action_valid", True):
            return 0.0, info  # nothing gradable in the attempt: no credit
        if info.get("graded") is False or info.get("judge_error"):
            return None, info  # the grader failed: unknown, not zero
        return float(reward), info

    def grade(self, seed: int, text: str) -> float | None:
        """Reward in [0, 1] of a complete attempt; None when the grader could not judge it."""
        return self.grade_info(seed, text)[0]

    def generate(self, prompts: list[list[int]], max_new: list[int], greedy: bool = False):
        """Generate with per-prompt token limits (one backend call per distinct limit)."""
        out: list[Any] = [None] * len(prompts)
        for limit in sorted(set(max_new)):
            idx = [i for i, m in enumerate(max_new) if m == limit]
            sampling = Sampling(
                max_new_tokens=int(limit),
                temperature=0.0 if greedy else self.rc.temperature,
                top_p=1.0 if greedy else self.rc.top_p,
                top_k=0 if greedy else self.rc.top_k,
            )
            for i, gen in zip(idx, self.backend.generate([prompts[i] for i in idx], sampling)):
                out[i] = gen
                self.decode_tokens += len(gen.token_ids)
        return out

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def continuation_step(
        self,
        seed: int,
        prefix: list[int],
        response: list[int],
        logprobs: list[float],
        reward: float | None,
        anchor: Any,
        terminated: bool = True,
        text: str | None = None,
    ) -> Step:
        """The learner's step for ``response`` generated after ``prefix`` of problem ``seed``.

        The prompt is the problem's prompt ids plus the prefix, so the learner trains the new
        tokens only. ``reward`` None (not graded) gives an invalid step with reward 0.
        """
        problem_text, problem_ids, _ = self.problem(seed)
        return Step(
            prompt_ids=problem_ids + list(prefix),
            response_ids=list(response),
            logprobs=list(logprobs),
            reward=float(reward) if reward is not None and terminated else 0.0,
            terminated=terminated,
            truncated=False,
            anchor=anchor,
            action=None,
            valid=reward is not None,
            response_text=self.decode(list(response)) if text is None else text,
            observation=problem_text,
        )
