"""Checkpoint IO of a run: the run folder's lock, writing and finding checkpoints, reading them
back safely.

A checkpoint ``<out_dir>/checkpoints/iter-NNNNNN/`` holds the policy in Hugging Face format
(rank 0), ``agentrl_config.json``, and the run's state: ``trainer_state.pt`` with one process,
``trainer_state_rank<r>.pt`` per rank under torchrun (with the optimizer sharded by
``torch.distributed.checkpoint`` under ``optimizer/``). The state is a plain dict: the
iteration, the world size, ``stages`` (each stage's ``state_dict()``: sampler, credit, update),
``rng`` (torch, CUDA, the numpy streams) and ``schedule`` (counters that outlive an
iteration). ``checkpoints/latest`` names the newest complete checkpoint; it is written last,
by rename, so a kill mid-save never leaves a checkpoint that looks complete.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from agentrl.configuration import ConfigError
from agentrl.model import save_model


class RunDirInUse(RuntimeError):
    """Another live process holds the run directory's lock."""


@contextmanager
def exclusive_run_dir(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out_dir`` for the duration of a run.

    Two processes writing checkpoints and ``metrics.jsonl`` into one folder corrupt each other
    silently; the second one gets :class:`RunDirInUse` instead. The lock is an ``flock`` on
    ``<out_dir>/.agentrl.lock``: the kernel releases it when the process exits, however it
    exits (a crash or ``kill -9`` included), so a killed run never leaves a stale lock.
    """
    import fcntl

    path = out_dir / ".agentrl.lock"
    fh = path.open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "unknown"
        fh.close()
        raise RunDirInUse(
            f"{out_dir} is in use by another agentrl run (pid {holder}); wait for it to end or "
            "choose another trainer.out_dir"
        ) from None
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def checkpoint_dir(out_dir: Path, iteration: int) -> Path:
    return out_dir / "checkpoints" / f"iter-{iteration:06d}"


def latest_checkpoint(out_dir: Path) -> Path | None:
    """The checkpoint ``checkpoints/latest`` names, if it is complete; else None."""
    marker = out_dir / "checkpoints" / "latest"
    if not marker.exists():
        return None
    path = out_dir / "checkpoints" / marker.read_text().strip()
    # One process writes trainer_state.pt, several ranks trainer_state_rank<r>.pt each.
    done = (path / "trainer_state.pt").exists() or (path / "trainer_state_rank0.pt").exists()
    return path if done else None


def point_latest(out_dir: Path, path: Path) -> None:
    """Make ``checkpoints/latest`` name ``path`` (atomically, by rename)."""
    tmp = out_dir / "checkpoints" / "latest.tmp"
    tmp.write_text(path.name)
    tmp.replace(out_dir / "checkpoints" / "latest")


def write_state(path: Path, name: str, state: dict) -> None:
    """Write ``state`` to ``path/name.pt`` (through a temporary file and a rename)."""
    torch.save(state, path / f"{name}.tmp")
    (path / f"{name}.tmp").replace(path / f"{name}.pt")


def write_model(path: Path, model, tokenizer, cfg, extra: Callable[[Path], None] | None) -> None:
    """The policy in Hugging Face format, the run's config, and ``extra(path)`` (a critic's
    value head) into ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    save_model(model, tokenizer, path, cfg.model)
    if extra is not None:
        extra(path)
    (path / "agentrl_config.json").write_text(json.dumps(cfg.to_dict(), indent=2))


def save_checkpoint(
    out_dir: Path,
    iteration: int,
    state: dict,
    *,
    dist,
    policy,
    tokenizer,
    cfg,
    learner,
    extra: Callable[[Path], None] | None = None,
) -> Path:
    """Write checkpoint ``iteration``: the HF model and config (rank 0, with ``extra``), the
    optimizer (sharded with ``torch.distributed.checkpoint`` on several ranks), each rank's
    ``state``; then point ``latest`` at it, last, so a checkpoint it names is complete."""
    path = checkpoint_dir(out_dir, iteration)
    if dist.is_main:
        write_model(path, policy, tokenizer, cfg, extra)
    if dist.enabled:
        from agentrl.learn.parallel import save_optimizer

        dist.barrier()
        # torch initialises an empty optimizer's state for saving by taking a step with lr 0,
        # which counts as a step in Adam's bias correction: before the first update
        # (trainer.save_initial) there is nothing to save, so nothing is touched. The ranks
        # decide together, since saving is a collective.
        if dist.max([float(bool(learner.optimizer.state))])[0] > 0:
            save_optimizer(learner.model, learner.optimizer, path / "optimizer")
        write_state(path, f"trainer_state_rank{dist.rank}", state)
        dist.barrier()
    else:
        write_state(path, "trainer_state", state)
    if dist.is_main:
        point_latest(out_dir, path)
    return path


def load_optimizer_shards(path: Path, learner) -> dict:
    """The optimizer state of a several-rank checkpoint, loaded into ``learner`` from its
    shards; none (saved before the first step, trainer.save_initial): it starts fresh, as it
    did then. Returns the optimizer's state dict."""
    if (path / "optimizer").exists():
        from agentrl.learn.parallel import load_optimizer

        load_optimizer(learner.model, learner.optimizer, path / "optimizer")
    return learner.optimizer.state_dict()


def load_trainer_state(path: Path) -> dict:
    """Read a checkpoint's state file with ``weights_only=True``.

    The state holds tensors, numbers, strings and containers only; the restricted unpickler
    refuses anything else, so resuming from a run folder of unknown origin cannot execute code.
    Checkpoints of agentrl 0.2.0 (the state's parts at the top level) are read into the layout
    of :mod:`this module <agentrl.run.checkpoint>`.
    """
    try:
        state = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise RuntimeError(
            f"{path} holds objects other than tensors, numbers and containers; refusing to load "
            f"it (it may execute code). Details: {exc}"
        ) from None
    return state if "stages" in state else _from_0_2_0(state)


def _from_0_2_0(old: dict) -> dict:
    sampler = {"driver": old["driver"]} if "driver" in old else {}
    credit = {k: old[k] for k in ("credit_state", "critic") if k in old}
    rng = {"torch": old["torch_rng"], "cuda": old["cuda_rng"], "numpy": old["numpy_rng"]}
    rng["task"] = old["task_rng"]
    if "local_numpy_rng" in old:
        rng["local"] = old["local_numpy_rng"]
    return {
        "iteration": old["iteration"],
        "world_size": old.get("world_size", 1),
        "stages": {"sampler": sampler, "credit": credit, "update": old["learner"]},
        "rng": rng,
        "schedule": {"decode_tokens_total": old.get("decode_tokens_total", 0.0)},
    }


def state_file(path: Path, rank: int, world: int) -> Path:
    """The state file of ``rank`` in checkpoint ``path`` (one written by another world size is
    read from what is there)."""
    name = f"trainer_state_rank{rank}.pt" if world > 1 else "trainer_state.pt"
    if not (path / name).exists():
        name = next(
            n for n in ("trainer_state.pt", "trainer_state_rank0.pt") if (path / n).exists()
        )
    return path / name


def check_resume_world(path: Path, world: int) -> None:
    """Refuse to resume checkpoint ``path`` with another world size than the one that wrote it
    (the optimizer shards and per-rank states would not match the ranks)."""
    # One process writes trainer_state.pt (with the optimizer: large, so not read here);
    # several ranks write small trainer_state_rank<r>.pt files that record the world size.
    if (path / "trainer_state.pt").exists():
        saved = 1
    else:
        saved = int(load_trainer_state(path / "trainer_state_rank0.pt").get("world_size", 1))
    if saved != world:
        raise ConfigError(
            f"{path} was written by {saved} rank(s) and this run has {world}: resume with the "
            "same world size (torchrun --nproc_per_node x --nnodes), or start a new run from "
            f"its weights with model.name_or_path={path} (optimizer state is then not carried "
            "over)"
        )


def metrics_rows_kept(path: Path, start: int) -> None:
    """On resume, drop ``metrics.jsonl`` rows past the checkpoint: those iterations are replayed.

    From scratch (``start == 0``) nothing is kept: iteration 0 (the untrained evaluation) is
    written again, and keeping the old row would leave two of them.
    """
    if not path.exists():
        return
    rows = path.read_text().splitlines()
    kept = [ln for ln in rows if ln and start and json.loads(ln)["iteration"] <= start]
    path.write_text("".join(k + "\n" for k in kept))
