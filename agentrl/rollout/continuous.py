"""Continuous rollout (``rollout.mode=continuous``): every episode advances on its own.

Lock-step collection (:func:`agentrl.rollout.loop.collect`) plays a batch turn by turn: one
``generate`` call for every live episode, then every environment steps, then the next turn.
Generation waits for the slowest environment step of each turn, and the environments wait for
the whole batch to be generated. Here there is no turn barrier: an episode's next prompt joins
the generation queue the moment its environment step returns, and its action goes to the
environment pool the moment its response is generated. The pool steps in the background
(:meth:`~agentrl.rollout.env_pool.EnvPool.submit`/``poll``: worker processes, Ray actors, or
threads for environments that declare ``step_concurrency > 1``), so a slow step (a judge, a
web page) holds up its own episode only. Generation runs over whatever is ready:

- a backend with a batch ``generate`` (HF, or any :class:`~agentrl.rollout.backends.Backend`):
  each round generates the waiting prompts, at most ``rollout.max_batch_size`` per call; when
  more wait, they are sorted by length and split into equal calls (less padding), and the call
  holding the longest-waiting prompt goes first;
- a backend with a request queue (vLLM: ``submit``/``advance``, one engine step of continuous
  batching at a time): prompts are added as they become ready, and responses come back as
  they finish.

What stays as in lock-step: prompts, projection, the step records
(:func:`~agentrl.rollout.loop.record_step`, :func:`~agentrl.rollout.loop.end_trajectory`), lost
episodes of failed workers, and the output: ``len(seeds)`` groups in seed order, returned when
every episode has ended (a group is complete when all its members end; credit runs on whole
groups only). :class:`ContinuousRollout` also plays an open-ended stream of groups
(:meth:`~ContinuousRollout.start_group` whenever slots are free, :meth:`~ContinuousRollout.run`
until some groups end), for producers that refill environments as groups finish.

Determinism: each (episode, turn) samples from its own random stream, seeded from one draw of
torch's global generator per collection (:func:`turn_seed`), when the backend takes per-prompt
seeds (:func:`~agentrl.rollout.backends.accepts_seeds`; HF: Gumbel-max per row; vLLM: a seed per
request). Which prompts share a call then does not change which random numbers a response
uses, so with a fixed seed the transcripts do not depend on timing. The one residue is
floating point: a prompt's logits differ in the last bits between batch compositions
(padding, kernel blocking), which decides a token only when two are within that rounding; the
same holds for lock-step across batch sizes. Under greedy decoding the transcripts equal
lock-step's (tests/rollout/test_continuous.py). The random streams differ from lock-step's
(which draws from torch's global generator in batch order), so sampled transcripts are equal
to lock-step's in distribution, not one for one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentrl.credit.batch import Trajectory, TrajectoryGroup
from agentrl.model import encode_prompt
from agentrl.rollout.backends import Backend, Generation, Sampling, accepts_seeds
from agentrl.rollout.env_pool import EnvPool, StepResult
from agentrl.rollout.prompting import build_prompt, project_action

log = logging.getLogger("agentrl")

GATHER = 0.5
"""Batched generation: before a call, while fewer prompts wait than env steps are in flight,
wait up to this fraction of a call's (running mean) duration for more to become ready. A call's
cost hardly depends on how many prompts it holds (small models, and the longest response sets
its length), so a prompt due a moment later is cheaper to wait for than to give its own call;
without this, steps returning a few milliseconds apart split every turn into many calls."""
SEED_BITS = 31
"""Per-turn seeds are below 2**31: what every backend's seed argument accepts."""


def turn_seed(base: int, episode: int, turn: int) -> int:
    """The seed of ``episode``'s response at ``turn`` in a collection whose draw is ``base``:
    a hash of the three (numpy's SeedSequence), so streams of different episodes and turns are
    independent and none depends on the order in which they are generated."""
    state = np.random.SeedSequence((base, episode, turn)).generate_state(1, np.uint32)[0]
    return int(state) & ((1 << SEED_BITS) - 1)


class BatchedGeneration:
    """Generation over whatever is ready, for a backend with a batch ``generate``."""

    def __init__(self, backend: Backend, sampling: Sampling, max_batch_size: int):
        self.backend, self.sampling, self.max_batch = backend, sampling, max_batch_size
        self.seeded = accepts_seeds(backend)
        self.waiting: dict[Any, tuple[list[int], int | None]] = {}  # in arrival order
        self.call_s: float | None = None  # running mean of a call's duration

    def submit(self, key, prompt: list[int], seed: int | None) -> None:
        self.waiting[key] = (prompt, seed)

    def busy(self) -> bool:
        return bool(self.waiting)

    def keys(self) -> list:
        return list(self.waiting)

    def advance(self) -> list[tuple[Any, Generation]]:
        """Generate one call's worth of the waiting prompts; returns ``(key, response)``."""
        keys = list(self.waiting)
        if len(keys) > self.max_batch:
            calls = -(-len(keys) // self.max_batch)
            size = -(-len(keys) // calls)  # equal calls, not max_batch + a small rest
            by_len = sorted(keys, key=lambda k: len(self.waiting[k][0]))
            at = by_len.index(keys[0]) // size  # the call holding the oldest prompt
            keys = by_len[at * size : (at + 1) * size]
        prompts = [self.waiting[k][0] for k in keys]
        seeds = [self.waiting.pop(k)[1] for k in keys]
        t0 = time.perf_counter()
        if self.seeded:
            gens = self.backend.generate(prompts, self.sampling, seeds=seeds)
        else:
            gens = self.backend.generate(prompts, self.sampling)
        spent = time.perf_counter() - t0
        self.call_s = spent if self.call_s is None else 0.8 * self.call_s + 0.2 * spent
        return list(zip(keys, gens))

    def gather_s(self) -> float:
        """How long a round may wait for more ready prompts (see :class:`ContinuousRollout`)."""
        return GATHER * (self.call_s or 0.0)


class QueuedGeneration:
    """Generation through a backend's own request queue (``submit(key, prompt, sampling,
    seed)`` and ``advance() -> [(key, Generation)]``, as :class:`VLLMBackend` has)."""

    def __init__(self, backend, sampling: Sampling):
        self.backend, self.sampling = backend, sampling
        self.pending: set = set()

    def submit(self, key, prompt: list[int], seed: int | None) -> None:
        self.backend.submit(key, prompt, self.sampling, seed)
        self.pending.add(key)

    def busy(self) -> bool:
        return bool(self.pending)

    def keys(self) -> list:
        return sorted(self.pending)

    def gather_s(self) -> float:
        # An engine step is one token: a prompt added later joins the next step at no cost.
        return 0.0

    def advance(self) -> list[tuple[Any, Generation]]:
        out = self.backend.advance()
        for key, _ in out:
            self.pending.discard(key)
        return out


def generation_queue(backend: Backend, sampling: Sampling, max_batch_size: int):
    """The generation queue continuous rollout uses for ``backend``: its own request queue
    when it has one, else batched ``generate`` calls over the ready prompts."""
    if callable(getattr(backend, "submit", None)) and callable(getattr(backend, "advance", None)):
        return QueuedGeneration(backend, sampling)
    return BatchedGeneration(backend, sampling, max_batch_size)


@dataclass
class _Episode:
    """One environment slot's running episode."""

    group: int
    obs: str
    info: dict
    traj: Trajectory = field(default_factory=Trajectory)
    history: list[tuple[str, str]] = field(default_factory=list)
    # The turn in flight: (prompt text, prompt ids, response, projected action, parsed).
    turn: tuple | None = None


class ContinuousRollout:
    """Episodes over the environments of ``pool``, each advancing on its own (see the module
    docstring). Start groups with :meth:`start_group` (on free environment slots), then
    :meth:`run` until groups end; :func:`collect_continuous` does both for one batch.

    Args:
        on_event: called with ``("generate", keys)`` before each generation round and
            ``("step", j)`` when environment ``j``'s step result arrives (tests, tracing).
    """

    def __init__(
        self,
        pool: EnvPool,
        backend: Backend,
        tokenizer,
        cfg,
        sampling: Sampling,
        on_event: Callable[[str, Any], None] | None = None,
    ):
        from agentrl.rollout.loop import pool_env_name

        self.pool, self.tokenizer, self.cfg = pool, tokenizer, cfg
        self.queue = generation_queue(backend, sampling, cfg.max_batch_size)
        # One draw of torch's global generator per rollout: seeded runs stay reproducible.
        self.base = int(torch.randint(0, 2**62, (1,)).item())
        self.on_event = on_event or (lambda kind, what: None)
        self.episodes: dict[int, _Episode] = {}
        self.groups: dict[int, tuple[TrajectoryGroup, list[int], int]] = {}
        self.env_name = pool_env_name(pool)
        self._next_group = 0

    def free_slots(self) -> list[int]:
        """Environment indices with no running episode."""
        return [j for j in range(len(self.pool)) if j not in self.episodes]

    def start_group(self, slots: Sequence[int], seed: int, options: dict | None = None) -> int:
        """Reset the environments ``slots`` with ``seed`` (one group: same task) and queue
        their first prompts; returns the group's id (0, 1, ... in start order)."""
        busy = [j for j in slots if j in self.episodes]
        if busy:
            raise ValueError(f"environments {busy} are still playing an episode")
        gid = self._next_group
        self._next_group += 1
        resets = self.pool.reset([(j, int(seed), options) for j in slots])
        for j, (obs, info) in zip(slots, resets):
            self.episodes[j] = _Episode(gid, obs, info)
        task = str(resets[0][1]["task"]) if resets else ""
        group = TrajectoryGroup(task=task, seed=int(seed), env=self.env_name)
        group.trajectories = [self.episodes[j].traj for j in slots]
        self.groups[gid] = (group, list(slots), len(slots))
        for j in slots:
            self._queue_prompt(j)
        return gid

    def _prompt_text(self, ep: _Episode, info: dict) -> str:
        cfg = self.cfg
        return build_prompt(
            str(info.get("task", "")),  # a lost step's info may lack the keys
            ep.history[-cfg.history_length :] if cfg.history_length else [],
            ep.obs,
            info.get("admissible_actions"),
            len(ep.traj.steps),
            cfg.action_format,
            cfg.prompt_style,
        )

    def _queue_prompt(self, j: int) -> None:
        ep = self.episodes[j]
        text = self._prompt_text(ep, ep.info)
        ids = encode_prompt(self.tokenizer, text, self.cfg.max_prompt_tokens)
        ep.turn = (text, ids)
        self.queue.submit(j, ids, turn_seed(self.base, self._key(j), len(ep.traj.steps)))

    def _key(self, j: int) -> int:
        # The random stream belongs to the episode (its group's start order and its place in
        # the group), not to the slot it happens to run in.
        ep = self.episodes[j]
        _, slots, _ = self.groups[ep.group]
        return ep.group * len(self.pool) + slots.index(j)

    def _generated(self, results: list[tuple[int, Generation]]) -> None:
        jobs = []
        for j, gen in results:
            ep = self.episodes[j]
            action, ok = project_action(gen.text, self.cfg.action_format)
            ep.turn = (*ep.turn, gen, action, ok)
            jobs.append((j, action if ok else ""))
        self.pool.submit(jobs)

    def _stepped(self, j: int, result: StepResult) -> TrajectoryGroup | None:
        """Record ``j``'s step; returns its group when this step ended the group's last
        episode."""
        from agentrl.rollout.loop import end_trajectory, record_step

        self.on_event("step", j)
        ep = self.episodes[j]
        text, ids, gen, action, ok = ep.turn
        ep.turn = None
        step = record_step(
            result,
            anchor=ep.info["anchor"],
            observation=ep.obs,
            parsed=ok,
            invalid_penalty=self.cfg.invalid_penalty,
            prompt_text=text,
            prompt_ids=ids,
            response_text=gen.text,
            response_ids=gen.token_ids,
            logprobs=gen.logprobs,
            policy_version=gen.policy_version,
        )
        ep.traj.steps.append(step)
        ep.history.append((ep.obs, action if ok else gen.text.strip()[:80]))
        ep.obs, ep.info = result[0], result[4]
        if not (step.terminated or step.truncated):
            self._queue_prompt(j)
            return None
        end_trajectory(ep.traj, result, self._prompt_text(ep, ep.info))
        del self.episodes[j]
        group, slots, left = self.groups[ep.group]
        if left > 1:
            self.groups[ep.group] = (group, slots, left - 1)
            return None
        del self.groups[ep.group]
        return group

    def running(self) -> bool:
        return bool(self.episodes)

    def run(self, until: Callable[[list[tuple[int, TrajectoryGroup]]], bool]) -> list:
        """Advance the episodes until ``until(ended)`` holds for the ``(group id, group)``
        pairs ended so far in this call (or nothing runs any more); returns those pairs."""
        ended: list[tuple[int, TrajectoryGroup]] = []
        while self.episodes and not until(ended):
            # Env results first: without generation to do, wait for one.
            block = not self.queue.busy()
            if block and not self.pool.in_flight():  # pragma: no cover - a bookkeeping bug
                raise RuntimeError("continuous rollout: episodes running but nothing pending")
            results = self.pool.poll(timeout=None if block else 0.0)
            deadline = time.perf_counter() + self.queue.gather_s()
            room = self.cfg.max_batch_size - len(self.queue.keys())
            while self.pool.in_flight() and len(results) < room:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                results += self.pool.poll(timeout=left)
            for j, result in results:
                gid = self.episodes[j].group
                group = self._stepped(j, result)
                if group is not None:
                    ended.append((gid, group))
            if self.queue.busy():
                self.on_event("generate", self.queue.keys())
                finished = self.queue.advance()
                if finished:
                    self._generated(finished)
        return ended


def collect_continuous(
    pool: EnvPool,
    seeds: Sequence[int],
    backend: Backend,
    tokenizer,
    cfg,
    sampling: Sampling,
    options: dict | None = None,
    on_event: Callable[[str, Any], None] | None = None,
) -> list[TrajectoryGroup]:
    """:func:`~agentrl.rollout.loop.collect` with continuous rollout: environment ``j``
    belongs to group ``j // G``; returns ``len(seeds)`` groups in seed order."""
    g_size = len(pool) // len(seeds)
    roll = ContinuousRollout(pool, backend, tokenizer, cfg, sampling, on_event)
    for g, seed in enumerate(seeds):
        roll.start_group(range(g * g_size, (g + 1) * g_size), int(seed), options)
    ended = dict(roll.run(lambda done: False))
    return [ended[g] for g in range(len(seeds))]
