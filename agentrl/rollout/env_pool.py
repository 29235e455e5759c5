"""Environments of a batch, stepped together: in this process or in a pool of worker processes.

The rollout loop talks to an :class:`EnvPool` instead of a list of environments:
``reset(jobs)`` and ``step(jobs)`` take one entry per environment index and return the results
in the same order. Two implementations:

- :class:`InlinePool`: the environments live in this process and step one after another. Right
  for cheap environments (Sokoban and WebShop step in microseconds to milliseconds; a process
  hop would cost more). Environments whose steps wait on I/O declare it with
  ``step_concurrency > 1`` (:attr:`agentrl.env_api.TextEnv.step_concurrency`; the proof env
  with an LLM judge): the pool then steps up to that many of them at once in threads, so a
  batch's requests overlap, and still returns the results in job order.
- :class:`ProcessPool`: ``W`` worker processes (``multiprocessing``, spawn context) each own the
  environments ``j`` with ``j % W == w``; a batch step sends every worker its share at once and
  gathers the answers, so slow environments (ALFWorld's text engine) step in parallel. A worker
  steps its own share the way the inline pool does (threads for ``step_concurrency > 1``).

:class:`~agentrl.rollout.ray_pool.RayPool` (``rollout.env_pool=ray``) is the process pool with
Ray actors as workers (on this machine or a Ray cluster): :class:`ShardedPool` holds what the two
share, and both workers run :func:`build_share` and :func:`serve_share`.

A worker that dies (crash, ``os._exit``, out of memory) or stops answering within
``step_timeout_s`` is replaced by a fresh process that rebuilds its environments; every episode
that was running on it is reported as *truncated* (reward 0, ``info["worker_error"]`` says why)
and the run goes on. Those environments are reset normally at the next episode.

:func:`agentrl.rollout.pools.make_pool` picks the pool from :class:`PoolConfig`
(``rollout.env_pool`` / ``rollout.env_workers``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
"""Least time a worker gets to start (a fresh interpreter, imports, building its envs): start-up
on a busy machine takes far longer than a step, so the step timeout would kill healthy workers."""

StepResult = tuple[str, float, bool, bool, dict[str, Any]]
"""``(obs, reward, terminated, truncated, info)`` as ``gymnasium.Env.step`` returns it."""


@dataclass(frozen=True)
class PoolConfig:
    """Where the environments of a batch run."""

    kind: Literal["auto", "inline", "process", "ray"] = "auto"
    """``inline``: in this process; ``process``: worker processes; ``ray``: Ray actors
    (:mod:`agentrl.rollout.ray_pool`, on this machine or a Ray cluster); ``auto``: processes
    for environments registered with ``parallel=True`` (ALFWorld), inline otherwise."""
    workers: int = 0
    """Worker processes (or Ray actors); 0 = one per CPU core (of the Ray cluster for ``ray``;
    at most one per environment)."""
    step_timeout_s: float = 300.0
    """A worker silent for this long is presumed hung: it is killed and replaced."""
    ray_num_cpus: float = 1.0
    """CPUs Ray reserves for each actor (``ray``)."""
    ray_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each actor needs (``ray``), e.g. ``{"alfworld_node": 1}``."""
    start_timeout_s: float | None = None
    """How long a worker process may take to start; None = ``max(START_TIMEOUT_S,
    step_timeout_s)`` (Ray actors always get ``max(ray_pool.START_TIMEOUT_S, step_timeout_s)``)."""


class EnvPool:
    """Common interface: ``len(pool)`` environments addressed by index."""

    def __len__(self) -> int:
        raise NotImplementedError

    def reset(
        self, jobs: Sequence[tuple[int, int | None, dict | None]]
    ) -> list[tuple[str, dict[str, Any]]]:
        """Reset environment ``j`` with ``seed`` and ``options`` for each ``(j, seed, options)``."""
        raise NotImplementedError

    def step(self, jobs: Sequence[tuple[int, str]]) -> list[StepResult]:
        """Step environment ``j`` with ``action`` for each ``(j, action)``."""
        raise NotImplementedError

    # Asynchronous stepping (continuous rollout): ``submit`` starts steps and returns, ``poll``
    # hands back the finished ones. This default steps at once, so any pool supports it; the
    # pools below override it where stepping can overlap generation. A pool is driven either
    # by ``step`` or by ``submit``/``poll``, not both at once; an environment has at most one
    # step in flight.
    def submit(self, jobs: Sequence[tuple[int, str]]) -> None:
        """Start stepping environment ``j`` with ``action`` for each ``(j, action)``; the
        results come back from :meth:`poll`."""
        self._finished().extend(zip([j for j, _ in jobs], self.step(jobs)))

    def poll(self, timeout: float | None = None) -> list[tuple[int, StepResult]]:
        """``(j, result)`` for the submitted steps that have finished since the last call. When
        none has yet and some are in flight, waits up to ``timeout`` seconds (None: until one
        finishes); ``[]`` when nothing is in flight."""
        done = self._finished()
        out, done[:] = list(done), []
        return out

    def in_flight(self) -> int:
        """Submitted steps not yet handed back by :meth:`poll`."""
        return len(self._finished())

    def _finished(self) -> list[tuple[int, StepResult]]:
        # Created on first use: subclasses need not call a base __init__.
        if "_done" not in self.__dict__:
            self._done: list[tuple[int, StepResult]] = []
        return self._done

    def close(self) -> None:
        pass

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def lost_episode(last: tuple[str, dict[str, Any]] | None, why: str) -> StepResult:
    """What a step reports when its environment (or worker) failed: the episode is truncated
    with reward 0 at the last observation, and ``info["worker_error"]`` says why."""
    obs, info = last or ("", {})
    info = {**info, "won": False, "action_valid": False, "executed_action": None}
    info["worker_error"] = why
    return obs, 0.0, False, True, info


def step_concurrency(envs: Sequence[Any]) -> int:
    """How many of ``envs`` may step at once: the least ``step_concurrency`` they declare
    (:attr:`agentrl.env_api.TextEnv.step_concurrency`; 1 when absent or not a positive int)."""
    least = None
    for env in envs:
        n = getattr(getattr(env, "unwrapped", env), "step_concurrency", 1)
        n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
        least = n if least is None else min(least, n)
    return least or 1


def _concurrency_for(indices: Sequence[int], envs: Sequence[Any]) -> int:
    """The threads for stepping ``envs[j]`` for ``j`` in ``indices``: their
    :func:`step_concurrency`, or 1 when an index repeats (an env is never stepped by two
    threads at once; its steps then run in order, as before)."""
    if len(set(indices)) < len(indices):
        return 1
    return step_concurrency([envs[j] for j in indices])


def _run_all(calls: Sequence[Callable[[], Any]], concurrency: int) -> list[Any]:
    """``[call() for call in calls]``, up to ``concurrency`` calls at a time in threads (the
    results in the order of ``calls``). The calls must not raise."""
    if concurrency <= 1 or len(calls) <= 1:
        return [call() for call in calls]
    # A pool per batch step: thread start-up (~0.1 ms) is nothing next to an I/O-bound step,
    # and no thread outlives the step (nothing to shut down when a pool is dropped unclosed).
    with ThreadPoolExecutor(min(concurrency, len(calls)), thread_name_prefix="agentrl-env") as ex:
        return list(ex.map(lambda call: call(), calls))


_ANNOUNCED: set[str] = set()


def data_notices(envs: Sequence[Any]) -> list[str]:
    """The distinct ``data_notice`` sentences of ``envs`` (:class:`~agentrl.env_api.TextEnv`)."""
    notes = (getattr(getattr(env, "unwrapped", env), "data_notice", None) for env in envs)
    return sorted({n for n in notes if n})


def announce(notices: Sequence[str]) -> None:
    """Log each data notice once per process: a run's pools (training and evaluation, every
    worker) report the same sentence, and a user needs to read it once."""
    for note in notices:
        if note not in _ANNOUNCED:
            _ANNOUNCED.add(note)
            log.warning("%s", note)


class InlinePool(EnvPool):
    """The environments in this process (a list of ``gymnasium.Env``)."""

    def __init__(self, envs: Sequence[Any]):
        self.envs = list(envs)
        self._last: dict[int, tuple[str, dict[str, Any]]] = {}
        announce(data_notices(self.envs))

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self, jobs):
        out = []
        for j, seed, options in jobs:
            out.append(self.envs[j].reset(seed=seed, options=options))
            self._last[j] = out[-1]
        return out

    def _one(self, j: int, action: str) -> StepResult:
        try:
            res = self.envs[j].step(action)
        except Exception:  # an env bug must not stop the run: truncate this episode
            log.warning("environment %d raised in step; episode truncated", j, exc_info=True)
            res = lost_episode(self._last.get(j), traceback.format_exc())
        self._last[j] = (res[0], res[4])  # threads write distinct keys (see _concurrency_for)
        return res

    def step(self, jobs):
        jobs = list(jobs)
        concurrency = _concurrency_for([j for j, _ in jobs], self.envs)
        return _run_all([lambda j=j, a=a: self._one(j, a) for j, a in jobs], concurrency)

    def submit(self, jobs):
        """Environments that declare ``step_concurrency > 1`` (their steps wait on I/O) step in
        up to that many background threads, overlapping generation; the others step here and
        now, since their steps cost less than a thread hop."""
        if "_concurrency" not in self.__dict__:
            self._concurrency = step_concurrency(self.envs)
            self._futures: dict[Future, int] = {}
            self._executor: ThreadPoolExecutor | None = None
        if self._concurrency <= 1:
            super().submit(jobs)
            return
        if self._executor is None:  # kept for the pool's life: submissions come one at a time
            self._executor = ThreadPoolExecutor(self._concurrency, thread_name_prefix="agentrl-env")
        for j, action in jobs:
            self._futures[self._executor.submit(self._one, j, action)] = j

    def poll(self, timeout=None):
        out = super().poll()
        futures = self.__dict__.get("_futures")
        if futures:
            if not out:
                wait_futures(futures, timeout=timeout, return_when=FIRST_COMPLETED)
            for fut in [f for f in futures if f.done()]:
                out.append((futures.pop(fut), fut.result()))  # _one never raises
        return out

    def in_flight(self) -> int:
        return super().in_flight() + len(self.__dict__.get("_futures", ()))

    def close(self) -> None:
        executor = self.__dict__.get("_executor")
        if executor is not None:
            executor.shutdown(wait=True)
            self._executor = None
        for env in self.envs:
            env.close()


def build_share(name: str, kwargs: dict, count: int, module: str) -> list[Any]:
    """The ``count`` environments a worker owns (a worker process or a Ray actor)."""
    import importlib

    from agentrl.registry import make

    if module:  # registers environments defined outside agentrl (e.g. a user's module)
        importlib.import_module(module)
    return [make(name, **kwargs) for _ in range(count)]


def serve_share(envs: Sequence[Any], cmd: str, payload: Sequence[tuple]) -> list[tuple[str, Any]]:
    """Run ``cmd`` (``"reset"`` or ``"step"``) on a worker's environments: ``payload`` holds
    ``(k, seed, options)`` or ``(k, action)`` per job, ``k`` the worker-local index. Returns
    ``("ok", result)`` or ``("error", traceback)`` per job, in order: an environment that raises
    fails only its own job."""

    def run(k: int, args: list) -> tuple[str, Any]:
        try:
            if cmd == "reset":
                return ("ok", envs[k].reset(seed=args[0], options=args[1]))
            return ("ok", envs[k].step(args[0]))
        except Exception:  # an env bug: report it for this env, keep the others going
            return ("error", traceback.format_exc())

    calls = [lambda k=k, args=args: run(k, args) for k, *args in payload]
    keys = [k for k, *_ in payload]
    concurrency = _concurrency_for(keys, envs) if cmd == "step" else 1
    return _run_all(calls, concurrency)


def _worker_main(conn: Connection, name: str, kwargs: dict, count: int, module: str) -> None:
    """A worker's loop: build ``count`` environments, then answer commands until ``close``."""
    envs = build_share(name, kwargs, count, module)
    conn.send(("ready", data_notices(envs)))  # the parent announces them, once
    while True:
        try:
            cmd, payload = conn.recv()
        except (EOFError, OSError):
            return
        if cmd == "close":
            for env in envs:
                env.close()
            return
        conn.send(("ok", serve_share(envs, cmd, payload)))


class WorkerDied(RuntimeError):
    """A worker process exited or hung; the pool has already replaced it."""


class _Worker:
    def __init__(
        self, ctx, name: str, kwargs: dict, count: int, module: str, timeout: float, start: float
    ):
        self.args = (name, kwargs, count, module)
        self.ctx = ctx
        self.timeout = timeout
        self.start_timeout = start
        self._start()

    def _start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(
            target=_worker_main, args=(child, *self.args), daemon=True, name="agentrl-env"
        )
        # A fixed hash seed: an engine that lists things in set order then describes a state
        # the same way in every worker (and in every run).
        saved = os.environ.get("PYTHONHASHSEED")
        os.environ["PYTHONHASHSEED"] = saved or "0"
        try:
            self.proc.start()
        finally:
            if saved is None:
                del os.environ["PYTHONHASHSEED"]
        child.close()
        self.conn = parent
        self.pending = False
        try:
            status, notices = self._recv(self.start_timeout)
        except WorkerDied:  # not left running, to write into a pipe nobody reads
            self.kill()
            raise
        if status != "ready":  # pragma: no cover - _recv raises before this
            raise WorkerDied("worker failed to start")
        announce(notices or ())

    def restart(self) -> None:
        self.kill()
        self._start()

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()

    def send(self, cmd: str, payload: Any) -> None:
        try:
            self.conn.send((cmd, payload))
            self.pending = True
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDied(f"worker pid {self.proc.pid} is gone ({exc})") from exc

    def _recv(self, timeout: float | None = None) -> tuple[str, Any]:
        timeout = self.timeout if timeout is None else timeout
        if not self.conn.poll(timeout):
            raise WorkerDied(f"worker pid {self.proc.pid} did not answer in {timeout:.0f} s")
        try:
            msg = self.conn.recv()
        except (EOFError, OSError) as exc:
            self.proc.join(timeout=5)  # reap it, so the exit code is known
            code = self.proc.exitcode
            raise WorkerDied(f"worker pid {self.proc.pid} died (exit code {code})") from exc
        self.pending = False
        return msg


class ShardedPool(EnvPool):
    """Environments spread over ``w`` workers: environment ``j`` lives on worker ``j % w`` as
    its local environment ``j // w``. A subclass carries the jobs to its workers and back
    (:meth:`_run`: worker processes, Ray actors); this class turns the answers into results,
    and the episodes of a failed worker into lost ones."""

    step_timeout_s: float = 300.0
    """A worker silent for this long on a step is presumed hung (set by the subclass)."""

    def __init__(self, n: int, w: int):
        self.n = n
        self.w = w
        self._last: dict[int, tuple[str, dict[str, Any]]] = {}
        self.restarts = 0
        # Environments whose worker was replaced since their last reset, and why: the fresh
        # worker holds a new, un-reset copy, so their episodes are lost even when no step of
        # theirs was in flight (continuous rollout steps a worker's episodes at different times).
        self._stale: dict[int, str] = {}
        # Asynchronous stepping: one batch in flight per worker (its jobs, the handle of the
        # call and when it is presumed hung); steps submitted meanwhile wait in its queue and
        # go together when it answers.
        self._busy: dict[int, tuple[list[tuple[int, str]], Any, float]] = {}
        self._queued: dict[int, list[tuple[int, str]]] = {}

    def __len__(self) -> int:
        return self.n

    def _shares(self, jobs: Sequence[tuple]) -> dict[int, list[tuple[int, tuple]]]:
        """``{worker: [(position in jobs, (local index, *args)), ...]}``."""
        per: dict[int, list[tuple[int, tuple]]] = {}
        for pos, job in enumerate(jobs):
            j = job[0]
            if not 0 <= j < self.n:
                raise IndexError(f"environment index {j} out of range (pool of {self.n})")
            per.setdefault(j % self.w, []).append((pos, (j // self.w, *job[1:])))
        return per

    def _run(self, cmd: str, jobs: Sequence[tuple]) -> tuple[list[Any], dict[int, str]]:
        """Run ``cmd`` on each job's worker. Returns the :func:`serve_share` answer per job
        (``None`` for the jobs of failed workers) and ``{worker: why}`` for the workers that
        died or hung (already replaced)."""
        raise NotImplementedError

    def _send(self, wid: int, cmd: str, payload: list[tuple]) -> Any:
        """Send worker ``wid`` a command without waiting; returns a handle for
        :meth:`_answers`. Raises :class:`WorkerDied` when the worker is gone."""
        raise NotImplementedError

    def _answers(self, handles: dict[int, Any], timeout: float) -> list[tuple[int, Any]]:
        """Wait up to ``timeout`` s for answers to the calls ``{worker: handle}``; returns
        ``(worker, answer)`` for those that answered, the answer being the
        :func:`serve_share` list or a :class:`WorkerDied` when the worker died."""
        raise NotImplementedError

    def _replace(self, wid: int) -> None:
        """Replace a failed worker by a fresh one (rebuilding its environments)."""
        raise NotImplementedError

    def _mark_stale(self, wid: int, why: str) -> None:
        for j in range(wid, self.n, self.w):
            self._stale[j] = why

    def reset(self, jobs):
        jobs = list(jobs)
        results, failed = self._run("reset", jobs)
        if failed:  # retry once on the fresh workers; a second failure is an env bug
            again = [k for k, job in enumerate(jobs) if job[0] % self.w in failed]
            retry, failed2 = self._run("reset", [jobs[k] for k in again])
            if failed2:
                raise WorkerDied(f"reset failed twice: {sorted(failed2.values())}")
            for k, value in zip(again, retry):
                results[k] = value
        out = []
        for (j, _, _), (status, value) in zip(jobs, results):
            if status != "ok":  # a reset that raises is an environment bug worth stopping for
                raise RuntimeError(f"environment {j} raised in reset:\n{value}")
            self._last[j] = value
            self._stale.pop(j, None)
            out.append(value)
        return out

    def step(self, jobs):
        jobs = list(jobs)
        results, failed = self._run("step", jobs)
        for wid, why in failed.items():
            self._mark_stale(wid, why)
        out: list[StepResult] = []
        for k, (j, _) in enumerate(jobs):
            if j % self.w in failed:
                out.append(lost_episode(self._last.get(j), failed[j % self.w]))
            elif results[k][0] != "ok":
                log.warning("environment %d raised in step; episode truncated", j)
                out.append(lost_episode(self._last.get(j), results[k][1]))
            else:
                value = results[k][1]
                self._last[j] = (value[0], value[4])
                out.append(value)
        return out

    def submit(self, jobs):
        """Each worker gets its share at once when it is idle, else when it answers its
        current batch; meanwhile the other workers step theirs."""
        done = self._finished()
        for j, action in jobs:
            if not 0 <= j < self.n:
                raise IndexError(f"environment index {j} out of range (pool of {self.n})")
            if j in self._stale:  # its worker was replaced mid-episode: the episode is gone
                done.append((j, lost_episode(self._last.get(j), self._stale[j])))
            else:
                self._queued.setdefault(j % self.w, []).append((j, action))
        for wid in list(self._queued):
            if wid not in self._busy:
                self._launch(wid)

    def _launch(self, wid: int) -> None:
        jobs = self._queued.pop(wid)
        try:
            handle = self._send(wid, "step", [(j // self.w, a) for j, a in jobs])
        except WorkerDied as exc:
            self._busy[wid] = (jobs, None, 0.0)
            self._fail(wid, str(exc))
            return
        self._busy[wid] = (jobs, handle, time.monotonic() + self.step_timeout_s)

    def _fail(self, wid: int, why: str) -> None:
        """Worker ``wid`` died or hung: replace it; its batch in flight and its queued steps
        come back lost, and its other episodes are lost at their next step."""
        log.warning("env worker %d failed (%s); restarting it", wid, why)
        jobs, _, _ = self._busy.pop(wid, ([], None, 0.0))
        jobs = jobs + self._queued.pop(wid, [])
        self._mark_stale(wid, why)
        self._finished().extend((j, lost_episode(self._last.get(j), why)) for j, _ in jobs)
        self._replace(wid)
        self.restarts += 1

    def poll(self, timeout=None):
        done = self._finished()
        limit = None if timeout is None else time.monotonic() + timeout
        while self._busy:
            now = time.monotonic()
            # Nothing ready yet: wait for the first answer, the caller's limit or the first
            # worker to be presumed hung, whichever comes first.
            wait_s = 0.0 if done else min(d for _, _, d in self._busy.values()) - now
            if limit is not None:
                wait_s = min(wait_s, limit - now)
            handles = {wid: h for wid, (_, h, _) in self._busy.items()}
            for wid, answer in self._answers(handles, max(wait_s, 0.0)):
                jobs, _, _ = self._busy[wid]
                if isinstance(answer, WorkerDied):
                    self._fail(wid, str(answer))
                    continue
                del self._busy[wid]
                for (j, _), (status, value) in zip(jobs, answer):
                    if status != "ok":
                        log.warning("environment %d raised in step; episode truncated", j)
                        value = lost_episode(self._last.get(j), value)
                    else:
                        self._last[j] = (value[0], value[4])
                    done.append((j, value))
            now = time.monotonic()
            for wid, (_, _, deadline) in list(self._busy.items()):
                if now >= deadline:
                    self._fail(wid, f"worker {wid} did not answer in {self.step_timeout_s:.0f} s")
            for wid in list(self._queued):
                if wid not in self._busy:
                    self._launch(wid)
            if done or (limit is not None and time.monotonic() >= limit):
                break
        return super().poll()

    def in_flight(self) -> int:
        busy = sum(len(jobs) for jobs, _, _ in self._busy.values())
        return busy + sum(map(len, self._queued.values())) + super().in_flight()


class ProcessPool(ShardedPool):
    """``n`` environments ``make(name, **kwargs)`` spread over worker processes.

    A worker gets ``step_timeout_s`` per batch step and ``start_timeout_s`` (default
    ``max(START_TIMEOUT_S, step_timeout_s)``) to start, a restart included.
    """

    def __init__(
        self,
        name: str,
        kwargs: dict | None,
        n: int,
        workers: int = 0,
        step_timeout_s: float = 300.0,
        start_timeout_s: float | None = None,
    ):
        self.name = name
        self.kwargs = dict(kwargs or {})
        w = workers or (os.cpu_count() or 1)
        super().__init__(n, max(1, min(w, n)))
        self.step_timeout_s = step_timeout_s
        # spawn: a forked child of a process holding torch threads can deadlock.
        ctx = mp.get_context("spawn")
        sizes = [len(range(k, n, self.w)) for k in range(self.w)]
        module = defining_module(name)
        start = max(START_TIMEOUT_S, step_timeout_s) if start_timeout_s is None else start_timeout_s
        self.workers: list[_Worker] = []
        try:
            for c in sizes:
                self.workers.append(
                    _Worker(ctx, name, self.kwargs, c, module, step_timeout_s, start)
                )
        except WorkerDied:  # the workers already started go too
            self.close()
            raise

    def _run(self, cmd: str, jobs: Sequence[tuple]) -> tuple[list[Any], dict[int, str]]:
        """Send each worker its jobs, gather the answers; returns (results, failed workers)."""
        per = self._shares(jobs)
        results: list[Any] = [None] * len(jobs)
        failed: dict[int, str] = {}
        for wid, items in per.items():
            try:
                self.workers[wid].send(cmd, [payload for _, payload in items])
            except WorkerDied as exc:
                failed[wid] = str(exc)
        waiting = {self.workers[w].conn: w for w in per if w not in failed}
        while waiting:
            ready = wait(list(waiting), timeout=max(wk.timeout for wk in self.workers))
            if not ready:  # every remaining worker is silent past the timeout: presume hung
                for wid in waiting.values():
                    failed[wid] = f"worker {wid} did not answer in {self.workers[wid].timeout} s"
                break
            for conn in ready:
                wid = waiting.pop(conn)
                try:
                    _, out = self.workers[wid]._recv()
                except WorkerDied as exc:
                    failed[wid] = str(exc)
                    continue
                for (pos, _), value in zip(per[wid], out):
                    results[pos] = value
        for wid, why in failed.items():
            log.warning("env worker %d failed (%s); restarting it", wid, why)
            self.workers[wid].restart()
            self.restarts += 1
        return results, failed

    def _send(self, wid: int, cmd: str, payload: list[tuple]) -> Any:
        self.workers[wid].send(cmd, payload)
        return self.workers[wid].conn

    def _answers(self, handles: dict[int, Any], timeout: float) -> list[tuple[int, Any]]:
        by_conn = {conn: wid for wid, conn in handles.items()}
        out = []
        for conn in wait(list(by_conn), timeout=timeout):
            wid = by_conn[conn]
            try:
                out.append((wid, self.workers[wid]._recv(0)[1]))
            except WorkerDied as exc:
                out.append((wid, exc))
        return out

    def _replace(self, wid: int) -> None:
        self.workers[wid].restart()

    def close(self) -> None:
        for wk in self.workers:
            with contextlib.suppress(BrokenPipeError, OSError):
                wk.conn.send(("close", None))
        for wk in self.workers:
            wk.proc.join(timeout=5)
            if wk.proc.is_alive():
                wk.proc.kill()
            wk.conn.close()
        self.workers = []

    def __del__(self) -> None:
        if getattr(self, "workers", None):
            for wk in self.workers:
                if wk.proc.is_alive():
                    wk.proc.kill()


def defining_module(name: str) -> str:
    """The module a worker imports so that ``name`` is registered there too."""
    from agentrl.registry import env_spec

    entry = env_spec(name).entry_point
    if isinstance(entry, str):
        return entry.split(":", 1)[0]
    return getattr(entry, "__module__", "") or ""
