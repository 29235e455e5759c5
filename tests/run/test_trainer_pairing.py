"""Paired comparisons need every method to sample its first rollouts from the same random state:
whatever an estimator builds at start-up (a value head, a scorer) must not shift the stream."""

from __future__ import annotations

import pytest
import torch

from agentrl.run import compose
from agentrl.run.distributed import Dist
from agentrl.run.trainer import Trainer


def _state_after_setup(tmp_path, algo: str, seed: int = 7) -> torch.Tensor:
    cfg = compose(
        [
            "env=guess",
            f"algo={algo}",
            "rollout.n_tasks=2",
            "rollout.group_size=2",
            "trainer.eval_every=0",
            "trainer.progress=false",
            "model.tokenizer_episodes=2",
            f"trainer.seed={seed}",
        ]
    )
    out = tmp_path / f"{algo}_{seed}"
    out.mkdir()
    Trainer(cfg, out, Dist(), torch.device("cpu"))
    return torch.get_rng_state()


@pytest.mark.parametrize("algo", ["gae", "hcapo", "crbc"])
def test_sampling_stream_is_the_same_for_every_method(tmp_path, algo):
    # gae builds an nn.Linear (random init, then zeroed) after the model: before the re-seed its
    # first rollouts were sampled from a different state than grpo's.
    assert torch.equal(_state_after_setup(tmp_path, algo), _state_after_setup(tmp_path, "grpo"))


def test_the_stream_depends_on_the_seed(tmp_path):
    assert not torch.equal(
        _state_after_setup(tmp_path, "grpo"), _state_after_setup(tmp_path, "grpo", 8)
    )
