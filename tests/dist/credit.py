"""torchrun worker: every estimator's advantages computed on the gathered batch.

Each rank holds a contiguous shard of the same synthetic task groups, gathers the credit inputs
(:func:`agentrl.run.trainer.gather_groups`), computes the advantages of the global batch and
keeps its own slice; rank 0 writes the slices of all ranks, concatenated, to ``OUT/credit.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from agentrl.credit import StepBatch, build_graph, compute_advantages, get_estimator
from agentrl.credit import estimator_config, list_estimators
from agentrl.credit.synthetic import SyntheticScorer
from agentrl.run.distributed import init_distributed, shard, shutdown
from agentrl.run.trainer import gather_groups

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dist_cases import synthetic_groups  # noqa: E402


def main(out: Path) -> None:
    dist = init_distributed(timeout_s=120, use_cuda=False)
    groups, mdp = synthetic_groups()
    lo, hi = shard(len(groups), dist.world, dist.rank)
    all_groups, mine = gather_groups(groups[lo:hi], dist)
    batch = StepBatch.from_groups(all_groups)
    result = {}
    for name in list_estimators():
        spec = get_estimator(name)
        if spec.driver:
            continue
        graph = build_graph(batch.without_lost()) if spec.needs_graph else None
        scorer = SyntheticScorer(mdp, noise=0.1) if spec.needs_scorer else None
        adv = compute_advantages(name, batch, estimator_config(name), graph=graph, scorer=scorer)
        parts = dist.gather(adv.step[mine])
        result[name] = torch.from_numpy(np.concatenate(parts))
    if dist.is_main:
        torch.save(result, out / "credit.pt")
    shutdown(dist)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
