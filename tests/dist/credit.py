"""torchrun worker: every estimator's advantages computed on the gathered batch.

Each rank holds a contiguous shard of the same synthetic task groups, gathers the credit inputs
(:func:`agentrl.run.trainer.gather_groups`), computes the advantages of the global batch and
keeps its own slice; rank 0 writes the slices of all ranks, concatenated, to ``OUT/credit.pt``.
Stateful estimators run twice, the second time from the state of the first (a second iteration);
rank 0 writes every rank's resulting state to ``OUT/credit_states.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from agentrl.credit import (
    StepBatch,
    build_graph,
    compute_advantages,
    estimator_config,
    get_estimator,
    list_estimators,
)
from agentrl.credit.synthetic import SyntheticScorer
from agentrl.run.distributed import init_distributed, shard, shutdown
from agentrl.credit.stage import gather_groups

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dist_cases import synthetic_groups


def main(out: Path) -> None:
    dist = init_distributed(timeout_s=120, use_cuda=False)
    groups, mdp = synthetic_groups()
    lo, hi = shard(len(groups), dist.world, dist.rank)
    all_groups, mine = gather_groups(groups[lo:hi], dist)
    batch = StepBatch.from_groups(all_groups)
    result, states = {}, {}
    for name in list_estimators():
        spec = get_estimator(name)
        if spec.driver or spec.critic:  # own rollouts, or a learned model: not pure credit
            continue
        graph = build_graph(batch.without_lost()) if spec.needs_graph else None
        scorer = SyntheticScorer(mdp, noise=0.1) if spec.needs_scorer else None
        state = None
        if spec.stateful:
            cfg = estimator_config(name)
            state = compute_advantages(name, batch, cfg, graph=graph, scorer=scorer).state
        adv = compute_advantages(
            name, batch, estimator_config(name), graph=graph, scorer=scorer, state=state
        )
        parts = dist.gather(adv.step[mine])
        result[name] = torch.from_numpy(np.concatenate(parts))
        if spec.stateful:
            states[name] = dist.gather(adv.state)
    if dist.is_main:
        torch.save(result, out / "credit.pt")
        torch.save(states, out / "credit_states.pt")
    shutdown(dist)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
