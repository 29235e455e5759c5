"""Which environment pool a run gets: :func:`make_pool`.

The pools themselves live in :mod:`agentrl.rollout.env_pool` (inline, worker processes) and
:mod:`agentrl.rollout.ray_pool` (Ray actors), which builds on the first; this module chooses
between them, so neither has to import the other's choice. ``auto`` uses processes for
environments registered with ``parallel=True`` (of the bundled ones only ALFWorld) and the
inline pool otherwise.
"""

from __future__ import annotations

from agentrl.registry import env_spec, make
from agentrl.rollout.env_pool import EnvPool, InlinePool, PoolConfig, ProcessPool
from agentrl.rollout.ray_pool import RayPool, require_ray


def make_pool(name: str, kwargs: dict | None, n: int, cfg: PoolConfig | None = None) -> EnvPool:
    """``n`` environments registered as ``name`` in the pool ``cfg`` asks for."""
    cfg = cfg or PoolConfig()
    kind = cfg.kind
    if kind == "auto":
        kind = "process" if env_spec(name).parallel else "inline"
    if kind == "ray":  # an optional extra: fail before any work if it is missing
        require_ray()
    if kind in ("process", "ray"):
        # An environment may need one-off work (finding or generating its data) that should
        # happen once here rather than in every worker: it offers ``prepare()``.
        probe = make(name, **(kwargs or {}))
        prepare = getattr(probe.unwrapped, "prepare", None)
        if callable(prepare):
            prepare()
        probe.close()
    if kind == "ray":
        return RayPool(
            name, kwargs, n, cfg.workers, cfg.step_timeout_s, cfg.ray_num_cpus, cfg.ray_resources
        )
    if kind == "process":
        return ProcessPool(name, kwargs, n, cfg.workers, cfg.step_timeout_s, cfg.start_timeout_s)
    return InlinePool([make(name, **(kwargs or {})) for _ in range(n)])
