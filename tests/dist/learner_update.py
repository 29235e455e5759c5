"""torchrun worker: one learner update on this rank's shard of a fixed global batch.

Run as ``torchrun --nproc_per_node=N tests/dist/learner_update.py OUT``; for each (strategy,
loss aggregation, mini-batch size) case every rank updates a fresh tiny model on its contiguous
shard of the same samples, and rank 0 writes the updated parameters to ``OUT/<case>.pt`` (the
test compares them, and the gradients, with a one-process update on the whole batch).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from agentrl.learn.learner import Learner, LearnerConfig
from agentrl.learn.parallel import full_state_dict
from agentrl.run.distributed import init_distributed, shard, shutdown

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dist_cases import CASES, make_model, make_samples


def main(out: Path) -> None:
    dist = init_distributed(timeout_s=120, use_cuda=False)
    torch.set_num_threads(1)
    for name, case in CASES.items():
        model, pad = make_model(name)
        samples = make_samples()
        lo, hi = shard(len(samples), dist.world, dist.rank)
        learner = Learner(model, LearnerConfig(**case), pad, max_response_tokens=6, dist=dist)
        metrics = learner.update(samples[lo:hi], np.random.default_rng(0))
        rank_metrics = dist.gather(metrics)  # global figures are equal on every rank
        state = full_state_dict(learner.model)
        grads = {}  # the clipped, reduced gradient the optimiser stepped with
        for n, p in learner.model.named_parameters():
            if p.grad is None:  # frozen (LoRA base weights)
                continue
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            grads[n.removeprefix("module.")] = g.detach().clone()
        if dist.is_main:
            torch.save(
                {"params": state, "grads": grads, "metrics": metrics, "ranks": rank_metrics},
                out / f"{name}.pt",
            )
    shutdown(dist)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
