"""Asynchronous training with bounded staleness: a producer thread plays ahead of the learner.

With ``rollout.max_staleness=k`` (k >= 1) the Sampler stage is an :class:`AsyncSampler`. A
producer thread beside the learner keeps playing the batches of the coming iterations with the
newest weights it has, over the plain sampler's :func:`~agentrl.rollout.loop.collect` (lock-step
or continuous, whatever ``rollout.mode`` says), while the learner updates on the batch before.
Every step records the version of the weights that sampled it (``Step.policy_version``: the
number of learner updates those weights had seen).

**The staleness bound.** The learner trains the batch of iteration i with weights of version i;
the producer starts that batch only once the learner has published version i − k (admission is
*paced*), and samples it with the newest version it holds, so every trained step is at most k
versions behind. Nothing is thrown away for staleness: a group whose oldest step is more than k
versions behind would be dropped and counted (``rollout/groups_dropped``), and pacing keeps that
count at 0. k = 0 is not this class at all: the trainer keeps its synchronous path.

**Weights.** The learner's module is never touched by the producer. After each update the
trainer calls :meth:`AsyncSampler.publish` (the Update stage's last hook, in place of the
backend's ``sync``), which clones the weights; the producer loads the newest clone into its own
copy of the policy between batches and passes it to its engine's ``sync`` (a no-op for ``hf``,
whose engine *is* that copy; ``reload_weights`` for vLLM). Torch on the CPU runs the two threads'
operations on distinct tensors, so no lock is held while either computes.

**Determinism.** The task seeds of every batch are the trainer's (the producer draws them from a
copy of the task stream, and :meth:`AsyncSampler.collect` checks they match), so the *tasks* of
iteration i do not depend on timing; which version (between i − k and i) sampled them does, and
the producer's sampling shares torch's random generator with the main thread, so runs with
k >= 1 are not bit-reproducible.

**Checkpoints.** In-flight batches (played or being played, not yet trained) are not saved: the
checkpoint after iteration i holds the weights and streams as the synchronous trainer's does,
and a resumed run plays the batches from iteration i on again, on the same task seeds, with the
restored weights. Their number is logged once as ``rollout/in_flight_replayed``. A batch is
trained exactly once whichever way a run is killed, since it only counts as trained in a
checkpoint written after its update.

Not supported yet: partial rollouts (``rollout.partial``: an episode never spans two weight
versions here, since the producer plays whole batches), DAPO's dynamic sampling and methods
with their own rollout driver (both refused at start-up).
"""

from __future__ import annotations

import copy
import inspect
import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from agentrl.configuration import ConfigError
from agentrl.credit.batch import TrajectoryGroup
from agentrl.env_api import EVAL_SEED_BASE
from agentrl.rollout.backends import HFBackend
from agentrl.rollout.sampler import Alone, Collected, Reducer, Sampler

log = logging.getLogger("agentrl")

__all__ = ["AsyncSampler", "draw_task_seeds", "staleness_metrics"]


def draw_task_seeds(task_rng: np.random.Generator, n_tasks: int) -> np.ndarray:
    """One iteration's task seeds, drawn exactly as the trainer draws them."""
    return task_rng.integers(0, EVAL_SEED_BASE - 1, size=n_tasks)


def staleness_metrics(
    groups: Sequence[TrajectoryGroup],
    version: int,
    max_staleness: int,
    reducer: Reducer,
) -> tuple[list[TrajectoryGroup], dict[str, float], int]:
    """Admit the groups whose oldest step is at most ``max_staleness`` versions behind.

    Returns the admitted groups, the metrics (over every rank: ``rollout/staleness_mean`` and
    ``_max`` over the admitted steps, ``rollout/staleness_<j>`` = share of admitted steps j
    versions behind, j = 0..k: the histogram) and the number of groups dropped on this rank.
    """
    kept, dropped = [], 0
    hist = np.zeros(max_staleness + 1)
    worst = 0
    for g in groups:
        ages = [version - s.policy_version for t in g.trajectories for s in t.steps]
        if ages and max(ages) > max_staleness:
            dropped += 1
            continue
        kept.append(g)
        for a in ages:
            hist[a] += 1
            worst = max(worst, a)
    total = reducer.sum([*hist.tolist(), float(dropped)])
    hist, n_dropped = np.asarray(total[:-1]), total[-1]
    n = max(hist.sum(), 1.0)
    metrics = {
        "rollout/staleness_mean": float((hist * np.arange(len(hist))).sum() / n),
        "rollout/staleness_max": float(reducer.max([float(worst)])[0]),
        **{f"rollout/staleness_{j}": float(hist[j] / n) for j in range(len(hist))},
        "rollout/groups_dropped_now": float(n_dropped),
    }
    return kept, metrics, dropped


@dataclass
class _Batch:
    index: int
    """The iteration whose batch this is."""
    seeds: np.ndarray
    version: int
    """Version of the weights that sampled it."""
    collected: Collected


class AsyncSampler:
    """The Sampler stage of ``rollout.max_staleness=k >= 1`` (see the module docstring).

    Args:
        inner: the plain :class:`~agentrl.rollout.sampler.Sampler` of this rank (its pool, its
            share of the tasks); its backend is replaced by the producer's.
        policy: the module the learner updates (a full copy under FSDP): copied once for the
            producer, and read in :meth:`publish`.
        task_rng: the trainer's task stream; the producer draws the coming iterations' seeds
            from a copy of it, taken when the first batch is requested.
        max_staleness: k. The trainer builds this class for k >= 1 only; k = 0 is the
            synchronous schedule run through the producer (the tests compare it with the
            plain path, bit for bit).
        total_iters: the run's last iteration (no batch is played beyond it).
        seed: seeds the producer's own numpy stream (this rank's).
        reducer: sums and maxima over the ranks, for the metrics.
    """

    def __init__(
        self,
        inner: Sampler,
        policy: torch.nn.Module,
        task_rng: np.random.Generator,
        max_staleness: int,
        total_iters: int,
        seed: Sequence[int] = (0,),
        reducer: Reducer | None = None,
    ):
        if type(inner) is not Sampler:
            raise ConfigError(
                f"rollout.max_staleness={max_staleness} needs the plain sampler; this run "
                f"samples with {type(inner).__name__} (rollout.dynamic_sampling or a method's own "
                "rollout driver), which the asynchronous producer does not support yet. Set "
                "rollout.max_staleness=0."
            )
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, not {max_staleness}")
        self.k, self.total = int(max_staleness), int(total_iters)
        self.task_rng, self.n_tasks = task_rng, inner.cfg.n_tasks
        self.reducer: Reducer = reducer or Alone()
        self.rng = np.random.default_rng([*seed, 0xA5F7C])
        self.policy = policy
        backend = inner.backend
        if isinstance(backend, HFBackend):
            # HF generates with the module it holds: the producer gets a module of its own, so
            # the learner's in-place optimiser steps never race with a generate call. The rest
            # of the trainer (evaluation) keeps the learner's backend.
            # A plain copy: flags such as requires_grad_(False) change which CPU kernels run,
            # and the copy must generate exactly as the learner's module would (k = 0 test).
            self.model = copy.deepcopy(policy)
            engine = HFBackend(self.model, backend.tokenizer, backend.max_batch_size)
            self.backend = backend
        else:
            # An engine with weights of its own (vLLM): a host copy of the policy feeds its
            # sync, and every caller (producer, evaluation) goes through one lock.
            self.model = copy.deepcopy(policy).to("cpu")
            engine = self.backend = _Serialized(backend)
        self.inner = Sampler(
            inner.envs, engine, inner.tokenizer, inner.cfg, inner.sampling, inner.task_slice
        )
        self._cond = threading.Condition()
        self._ready: deque[_Batch] = deque()
        self._pending: tuple[int, dict[str, torch.Tensor]] | None = None
        self._error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        self.version = 0
        """The learner's version: updates published so far (= the next iteration's index)."""
        self.started = 0
        """Batches the producer has started (iteration index of the next one)."""
        self.groups_dropped = 0
        self._replayed = 0
        self._first = 0

    # -- learner side (main thread) ------------------------------------------------------------

    def collect(self, seeds: np.ndarray, rng: np.random.Generator) -> Collected:
        """The batch of the current iteration (played on ``seeds``), waiting for it if needed."""
        if self._thread is None:
            self._start(seeds)
        with self._cond:
            while not self._ready and self._error is None:
                if not self._thread.is_alive():
                    raise RuntimeError("the rollout producer stopped without a batch")
                self._cond.wait(timeout=1.0)
            if self._error is not None:
                raise RuntimeError(
                    f"the rollout producer failed: {type(self._error).__name__}: {self._error}"
                ) from self._error
            batch = self._ready.popleft()
            self._cond.notify_all()
        if batch.index != self.version or not np.array_equal(batch.seeds, seeds):
            raise RuntimeError(
                f"asynchronous rollout out of step: iteration {self.version} with seeds "
                f"{list(seeds)[:4]}… got batch {batch.index} played on {list(batch.seeds)[:4]}…"
            )
        got = batch.collected
        kept, metrics, dropped = staleness_metrics(got.groups, self.version, self.k, self.reducer)
        self.groups_dropped += dropped
        total_dropped = self.reducer.sum([float(self.groups_dropped)])[0]
        metrics["rollout/groups_dropped"] = total_dropped
        metrics["rollout/policy_version"] = float(batch.version)
        if self._replayed:
            metrics["rollout/in_flight_replayed"] = float(self._replayed)
            self._replayed = 0
        return Collected(kept, got.played, got.decoded_tokens, {**got.metrics, **metrics})

    def publish(self, model: torch.nn.Module) -> None:
        """The learner finished an update: hand its weights (cloned now, the producer loads
        them between batches) to the producer as the next version."""
        snap = {k: v.detach().clone() for k, v in model.state_dict().items()}
        with self._cond:
            self.version += 1
            self._pending = (self.version, snap)  # an older unloaded one is superseded
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        self.inner.close()

    def state_dict(self) -> dict:
        with self._cond:
            in_flight = self.started - self.version
        return {
            "version": self.version,
            "groups_dropped": self.groups_dropped,
            "in_flight": max(in_flight, 0),
            **self.inner.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume at the saved version; the in-flight batches of the saved run are played
        again (counted once in ``rollout/in_flight_replayed``)."""
        self.version = int(state.get("version", 0))
        self.groups_dropped = int(state.get("groups_dropped", 0))
        self._replayed = int(state.get("in_flight", 0))
        self.inner.load_state_dict(state)

    # -- producer side (its own thread) --------------------------------------------------------

    def _start(self, seeds: np.ndarray) -> None:
        # Taken now, in the main thread while the learner is idle: the weights are the current
        # version's (resumed or initial), and the task stream stands right after this
        # iteration's draw, so the copy yields the following iterations' seeds.
        self.model.load_state_dict(self.policy.state_dict())
        self.started = self._first = self.version
        mirror = copy.deepcopy(self.task_rng)
        self._thread = threading.Thread(
            target=self._produce, args=(np.asarray(seeds), mirror), name="agentrl-producer"
        )
        self._thread.daemon = True  # a crashed learner must not hang the process on exit
        self._thread.start()

    def _produce(self, first_seeds: np.ndarray, mirror: np.random.Generator) -> None:
        try:
            held = self.version
            self.inner.backend.sync(self.model)
            seeds = first_seeds
            while True:
                with self._cond:
                    b = self.started
                    # Pacing: batch b waits for version b − k; nothing beyond the run's end.
                    while not self._stop and b < self.total and self.version < b - self.k:
                        self._cond.wait()
                    if self._stop or b >= self.total:
                        return
                    pending, self._pending = self._pending, None
                    self.started = b + 1
                if pending is not None and pending[0] > held:
                    held = pending[0]
                    self.model.load_state_dict(pending[1])
                    self.inner.backend.sync(self.model)
                if b > self._first:
                    seeds = draw_task_seeds(mirror, self.n_tasks)
                got = self.inner.collect(seeds, self.rng)
                for g in got.groups:
                    for t in g.trajectories:
                        for s in t.steps:
                            s.policy_version = held
                with self._cond:
                    self._ready.append(_Batch(b, seeds, held, got))
                    self._cond.notify_all()
        except BaseException as exc:  # reported to the learner by collect
            log.error("rollout producer failed: %s: %s", type(exc).__name__, exc)
            with self._cond:
                self._error = exc
                self._cond.notify_all()


class _Serialized:
    """An engine shared by the producer thread and the main thread (evaluation): one call at a
    time, since a vLLM engine is not thread-safe."""

    def __init__(self, backend):
        self.inner = backend
        self.lock = threading.Lock()
        self._seeds = "seeds" in inspect.signature(backend.generate).parameters

    def generate(self, prompts, sampling, seeds=None):
        """The engine's ``generate`` (with per-prompt ``seeds`` where the engine takes them)."""
        with self.lock:
            if seeds is not None and self._seeds:
                return self.inner.generate(prompts, sampling, seeds=seeds)
            return self.inner.generate(prompts, sampling)

    def sync(self, model) -> None:
        with self.lock:
            self.inner.sync(model)

    def sleep(self) -> None:
        """Never: the engine keeps generating while the learner updates."""

    def __getattr__(self, name):
        # Everything else the engine offers (a request queue's submit/advance, scoring), under
        # the same lock.
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def locked(*args, **kwargs):
            with self.lock:
                return attr(*args, **kwargs)

        return locked
