"""Environments as Ray actors (``rollout.env_pool=ray``), on this machine or on a Ray cluster.

:class:`RayPool` keeps the contract of :class:`~agentrl.rollout.env_pool.ProcessPool`, with Ray
actors in place of worker processes: ``W`` actors each own the environments ``j`` with
``j % W == w``, built and stepped by the code a worker process runs
(:func:`~agentrl.rollout.env_pool.build_share`, :func:`~agentrl.rollout.env_pool.serve_share`),
so they give the inline pool's results. A batch step sends every actor its share at once. An
actor that dies (crash, ``os._exit``, out of memory, its node lost, ``ray.kill``) or does not
answer within ``step_timeout_s`` is killed and replaced by a fresh one; its episodes come back
truncated with ``info["worker_error"]`` (and are flagged as lost downstream); an environment
that raises truncates only its own episode. Each actor reserves ``rollout.ray_num_cpus`` CPUs and
the custom ``rollout.ray_resources``; Ray places it on any node that has them.

Where Ray runs (:func:`init_ray`), decided once per process:

1. Ray already initialised in this process (the user called ``ray.init``): used as it is.
2. A cluster is up: ``RAY_ADDRESS`` is set, or a cluster started with ``ray start`` on this
   machine is running (its address in Ray's ``ray_current_cluster`` file *and* a raylet of that
   address alive here): ``ray.init(address="auto")`` joins it. Every node must be able to import
   agentrl and the environment's module (the same install; entries of this process's
   ``sys.path`` are appended on the actor's side, as ``multiprocessing``'s spawn does).
3. Otherwise a private local Ray: ``ray.init(num_cpus=2 * max(cores, W * ray_num_cpus),
   include_dashboard=False)`` with Ray's own logging at WARNING. It stays up for the process's
   other pool and is sized for both (training and evaluation, never stepped at once, each as
   wide as a process pool: Ray's CPUs only gate scheduling); Ray shuts it down at exit.

Plain ``ray.init()`` makes the same choice, but it refuses ``num_cpus`` when it joins a cluster,
trusts an address file left by a cluster that has since stopped, and on ``"auto"`` may join
another program's private Ray on a shared machine; the rules above avoid all three. Several
trainer ranks (``torchrun``) on one machine share one cluster only if one is up (``ray start
--head``); otherwise each rank starts its own local Ray.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.rollout.env_pool import (
    ShardedPool,
    WorkerDied,
    announce,
    build_share,
    data_notices,
    defining_module,
    serve_share,
)

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install -e ".[ray]"'
START_TIMEOUT_S = 120.0
"""Least time an actor gets to start (a new Ray worker process, imports, building its envs)."""
LOCAL_POOLS = 2
"""Pools a local Ray is sized for: the trainer's training and evaluation pools."""
_local = False  # whether this process started the Ray it uses (rule 3)


def require_ray():
    """The ``ray`` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            f"rollout.env_pool=ray needs Ray, an optional extra: {INSTALL_HINT} "
            f'(or pip install "ray>=2.30")'
        ) from exc
    return ray


def cluster_address() -> str | None:
    """The address of a running Ray cluster to join (rule 2 of the module docstring), or None."""
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env:
        return env
    try:  # Ray's own helpers; private, so a Ray that moved them just means "no cluster found"
        from ray._private.services import find_gcs_addresses
        from ray._private.utils import read_ray_address
    except ImportError:  # pragma: no cover - depends on the Ray version
        return None
    latest = read_ray_address()
    if latest and latest in find_gcs_addresses():
        return latest
    return None


def init_ray(local_cpus: float, resources: Mapping[str, float] | None = None) -> str:
    """Make sure Ray is initialised in this process (see the module docstring); returns where:
    ``"running"``, ``"cluster at <address>"`` or ``"local"`` (also when an earlier pool of
    this process started it). ``local_cpus`` and ``resources`` size a local Ray only (a cluster
    declares its own)."""
    global _local
    ray = require_ray()
    if ray.is_initialized():
        return "local" if _local else "running"
    address = cluster_address()
    if address is not None:
        ray.init(address="auto", logging_level=logging.WARNING)
        log.info("env pool: joined the Ray cluster at %s", address)
        return f"cluster at {address}"
    # No telemetry from a Ray this library starts on its own (the user's setting wins).
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        num_cpus=math.ceil(local_cpus),
        resources=dict(resources or {}) or None,
        include_dashboard=False,
        logging_level=logging.WARNING,
    )
    _local = True
    log.info("env pool: started a local Ray with %d CPUs", math.ceil(local_cpus))
    return "local"


def shutdown_local_ray() -> None:
    """Shut down the local Ray this process started (rule 3); a joined cluster or a Ray the
    user initialised is left alone. For programs that want its processes gone before they
    exit (a benchmark measuring something else next)."""
    global _local
    if _local:
        require_ray().shutdown()
        _local = False


def _summary(exc: BaseException, limit: int = 400) -> str:
    """A Ray error in one line: its sentences without the indented id/namespace details."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and ln[:1] != "\t"]
    return f"{type(exc).__name__}: {' '.join(lines)}"[:limit]


class EnvActor:
    """The body of one Ray actor: a worker's share of the environments."""

    def __init__(self, name: str, kwargs: dict, count: int, module: str, sys_path: list[str]):
        # The driver's import path, as spawn gives a worker process (tests/, a user's folder);
        # appended, so nothing shadows what the actor's node has installed.
        sys.path.extend(p for p in sys_path if p not in sys.path)
        self.envs = build_share(name, kwargs, count, module)

    def ready(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "hash_seed": os.environ.get("PYTHONHASHSEED"),
            "notices": data_notices(self.envs),
        }

    def run(self, cmd: str, payload: list[tuple]) -> list[tuple[str, Any]]:
        return serve_share(self.envs, cmd, payload)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class RayPool(ShardedPool):
    """``n`` environments ``make(name, **kwargs)`` spread over Ray actors.

    Args:
        workers: actors; 0 = one per CPU core on a local Ray (as the process pool), as many as
            the cluster's CPUs fit on a cluster (``CPU // num_cpus``); at most one per
            environment.
        step_timeout_s: an actor that does not answer within this time is presumed hung: it
            is killed and replaced (starting may take ``max(step_timeout_s,
            START_TIMEOUT_S)``).
        num_cpus: CPUs Ray reserves for each actor.
        resources: custom Ray resources each actor needs (the nodes declare them with
            ``ray start --resources``; a local Ray is given enough of them).
    """

    def __init__(
        self,
        name: str,
        kwargs: dict | None,
        n: int,
        workers: int = 0,
        step_timeout_s: float = 300.0,
        num_cpus: float = 1.0,
        resources: Mapping[str, float] | None = None,
    ):
        ray = require_ray()
        self._ray = ray
        self.name = name
        self.kwargs = dict(kwargs or {})
        self.timeout = self.step_timeout_s = step_timeout_s
        self.num_cpus = float(num_cpus)
        if not self.num_cpus > 0:
            raise ValueError(f"num_cpus={num_cpus!r} must be > 0")
        self.resources = {str(k): float(v) for k, v in (resources or {}).items()}
        cores = os.cpu_count() or 1
        want = workers or cores
        self.where = init_ray(
            LOCAL_POOLS * max(cores, want * self.num_cpus),
            {k: LOCAL_POOLS * want * v for k, v in self.resources.items()},
        )
        if not workers:
            cpus = ray.cluster_resources().get("CPU", cores)
            workers = cores if self.where == "local" else int(cpus // self.num_cpus)
        super().__init__(n, max(1, min(workers, n)))
        cpus = ray.cluster_resources().get("CPU", 0)
        if self.w * self.num_cpus > cpus:  # an autoscaler may add nodes; say why it waits
            log.warning("env pool: %d actors x %g CPUs > the %g CPUs of the Ray cluster; some "
                        "will wait for resources", self.w, self.num_cpus, cpus)  # fmt: skip
        self._sizes = [len(range(k, n, self.w)) for k in range(self.w)]
        self._module = defining_module(name)
        # The same hash seed in every actor, as for worker processes (see ProcessPool).
        env_vars = {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED") or "0"}
        self._cls = ray.remote(EnvActor).options(
            num_cpus=self.num_cpus,
            resources=self.resources or None,
            max_restarts=0,  # the pool replaces a failed actor itself, rebuilding its envs
            max_task_retries=0,
            runtime_env={"env_vars": env_vars},
        )
        self.actors: list[Any] = [None] * self.w
        self.actor_info: list[dict[str, Any]] = [{} for _ in range(self.w)]
        self._start(range(self.w))
        log.info("env pool: %d Ray actors for %d %s envs (%s)", self.w, n, name, self.where)

    def _start(self, wids: Sequence[int]) -> None:
        """(Re)start the actors ``wids`` in parallel and wait until their envs are built."""
        ray = self._ray
        for wid in wids:
            self.actors[wid] = self._cls.remote(
                self.name, self.kwargs, self._sizes[wid], self._module, list(sys.path)
            )
        refs = {self.actors[wid].ready.remote(): wid for wid in wids}
        timeout = max(self.timeout, START_TIMEOUT_S)
        done, waiting = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        errors = []
        for ref in done:
            try:
                self.actor_info[refs[ref]] = ray.get(ref)
                announce(self.actor_info[refs[ref]]["notices"])
            except ray.exceptions.RayError as exc:
                errors.append(f"env actor {refs[ref]} failed to start: {exc}")
        if waiting:
            need = {"CPU": self.num_cpus, **self.resources}
            errors.append(
                f"env actors {sorted(refs[r] for r in waiting)} did not start within "
                f"{timeout:.0f} s; each needs {need}, the Ray cluster has "
                f"{ray.cluster_resources()} in all"
            )
        if errors:
            for wid in wids:
                self._kill(wid)
            raise WorkerDied("; ".join(errors))

    def _kill(self, wid: int) -> None:
        if self.actors[wid] is not None:
            with contextlib.suppress(Exception):  # already dead is fine
                self._ray.kill(self.actors[wid], no_restart=True)
            self.actors[wid] = None

    def _run(self, cmd: str, jobs: Sequence[tuple]) -> tuple[list[Any], dict[int, str]]:
        """Send each actor its jobs at once, gather the answers; returns (results, failed)."""
        ray = self._ray
        per = self._shares(jobs)
        results: list[Any] = [None] * len(jobs)
        failed: dict[int, str] = {}
        pending = {}
        for wid, items in per.items():
            if self.actors[wid] is None:  # its last restart failed (and raised): try again
                failed[wid] = f"env actor {wid} is not running (its last start failed)"
            else:
                pending[self.actors[wid].run.remote(cmd, [job for _, job in items])] = wid
        while pending:
            # As the process pool: each answer restarts the clock of the silent ones.
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=self.timeout)
            if not ready:  # every remaining actor is silent past the timeout: presume hung
                for wid in pending.values():
                    failed[wid] = f"env actor {wid} did not answer in {self.timeout:.0f} s"
                break
            for ref in ready:
                wid = pending.pop(ref)
                try:
                    out = ray.get(ref)
                except ray.exceptions.RayError as exc:  # the actor died, or its node
                    pid = self.actor_info[wid].get("pid")
                    failed[wid] = f"env actor {wid} (pid {pid}) died: {_summary(exc)}"
                    continue
                for (pos, _), value in zip(per[wid], out):
                    results[pos] = value
        if failed:
            for wid, why in failed.items():
                log.warning("env actor %d failed (%s); restarting it", wid, why)
                self._kill(wid)
            self._start(sorted(failed))
            self.restarts += len(failed)
        return results, failed

    def _send(self, wid: int, cmd: str, payload: list[tuple]) -> Any:
        if self.actors[wid] is None:  # its last restart failed (and raised)
            raise WorkerDied(f"env actor {wid} is not running (its last start failed)")
        return self.actors[wid].run.remote(cmd, payload)

    def _answers(self, handles: dict[int, Any], timeout: float) -> list[tuple[int, Any]]:
        ray = self._ray
        by_ref = {ref: wid for wid, ref in handles.items()}
        ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        # More may be done: take every finished answer, not only the first.
        ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0) if ready else ([], 0)
        out = []
        for ref in ready:
            wid = by_ref[ref]
            try:
                out.append((wid, ray.get(ref)))
            except ray.exceptions.RayError as exc:  # the actor died, or its node
                pid = self.actor_info[wid].get("pid")
                out.append((wid, WorkerDied(f"env actor {wid} (pid {pid}) died: {_summary(exc)}")))
        return out

    def _replace(self, wid: int) -> None:
        self._kill(wid)
        self._start([wid])

    def close(self) -> None:
        ray = self._ray
        live = [a for a in self.actors if a is not None]
        if live and ray.is_initialized():
            with contextlib.suppress(Exception):
                ray.wait([a.close.remote() for a in live], num_returns=len(live), timeout=5)
            for wid in range(len(self.actors)):
                self._kill(wid)
        self.actors = []
