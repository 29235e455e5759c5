"""SPMD set-up: one program, N ranks launched by ``torchrun`` (or one process without it).

``torchrun --nproc_per_node=N [--nnodes=M ...] -m agentrl.run ...`` starts N×M copies of the
trainer; each reads its rank from the environment torchrun sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``). Plain ``python -m agentrl.run`` has no such
variables and runs as world size 1 with no process group at all, exactly as before.

Every collective runs under the process group's timeout (``trainer.dist_timeout_s``): a rank
that hangs or dies makes the others fail with a timeout instead of waiting forever, and
torchrun then stops every rank. :class:`Dist` wraps the few collectives the trainer needs
(gather Python objects, sum/max numbers) so that the world-size-1 path does no communication.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger("agentrl")


@dataclass(frozen=True)
class Dist:
    """This process's place in the job."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        """Whether a process group exists (world size > 1)."""
        return self.world > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs and writes the HF model."""
        return self.rank == 0

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank (pickled: small objects only)."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of ``values`` over the ranks (float64)."""
        return self._reduce(values, torch.distributed.ReduceOp.SUM)

    def max(self, values: Sequence[float]) -> list[float]:
        """Element-wise maximum of ``values`` over the ranks."""
        return self._reduce(values, torch.distributed.ReduceOp.MAX)

    def _reduce(self, values: Sequence[float], op) -> list[float]:
        if not self.enabled:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t, op=op)
        return t.cpu().tolist()

    def barrier(self) -> None:
        if self.enabled:
            torch.distributed.barrier()

    def from_main(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled: small objects only)."""
        if not self.enabled:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    @property
    def device(self) -> torch.device:
        """Where collective buffers live: the rank's GPU under NCCL, else the CPU."""
        if self.enabled and torch.distributed.get_backend() == "nccl":
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")


def init_distributed(timeout_s: float, use_cuda: bool) -> Dist:
    """Join the job torchrun started (NCCL on GPUs, gloo on CPUs), or return world size 1."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not torch.distributed.is_initialized():
        backend = "nccl" if use_cuda else "gloo"
        if use_cuda:
            torch.cuda.set_device(local_rank)
        torch.distributed.init_process_group(
            backend=backend, timeout=datetime.timedelta(seconds=timeout_s)
        )
    log.info("rank %d of %d (local rank %d)", rank, world, local_rank)
    return Dist(rank=rank, world=world, local_rank=local_rank)


def shutdown(dist: Dist, failed: bool = False) -> None:
    """Leave the process group.

    After a normal end the barrier first lets every rank finish its last collective (without
    it a rank was seen to abort at exit although its work was done). After a failure
    (``failed``) there is no barrier: the other ranks wait in some other collective, so a
    barrier would hang this rank until ``trainer.dist_timeout_s``; leaving at once closes its
    connections, the others fail within seconds and torchrun stops the job.
    """
    if dist.enabled and torch.distributed.is_initialized():
        if not failed:
            torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def shard(n: int, world: int, rank: int) -> tuple[int, int]:
    """``[lo, hi)`` of rank ``rank``'s contiguous share of ``n`` items (sizes differ by ≤ 1).

    Contiguous blocks keep the global order: concatenating the shards in rank order gives the
    items in their original order, so a gathered batch equals the single-process batch.
    """
    base, extra = divmod(n, world)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)
