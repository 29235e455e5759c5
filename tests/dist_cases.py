"""Shared cases of the distributed learner test (used by the torchrun worker and the test)."""

from __future__ import annotations

import numpy as np
import torch

from agentrl.model import (
    LoRAConfig,
    ModelConfig,
    build_tiny_model,
    build_tokenizer,
    prepare_for_training,
)
from agentrl.model.forward import Sample

BASE = dict(lr=1e-2, max_grad_norm=1.0, kl_coef=0.05, entropy_coef=0.01, micro_batch_tokens=40)
CASES = {
    "ddp-token-mean": dict(BASE, strategy="ddp", loss_agg="token-mean"),
    "ddp-seq-norm": dict(BASE, strategy="ddp", loss_agg="seq-mean-token-sum-norm"),
    "fsdp-token-mean": dict(BASE, strategy="fsdp", loss_agg="token-mean"),
    "fsdp-seq-norm": dict(BASE, strategy="fsdp", loss_agg="seq-mean-token-sum-norm"),
    "ddp-lora": dict(BASE, strategy="ddp", loss_agg="token-mean", kl_coef=0.0),
    "fsdp-lora": dict(BASE, strategy="fsdp", loss_agg="token-mean", kl_coef=0.0),
    # A no-grad pass over the policy before the update (FSDP leaves its root gathered).
    "fsdp-recompute": dict(BASE, strategy="fsdp", old_logprobs="recompute"),
    # Registered losses: BPO (seq-mean-token-mean), and VIMPO, whose reference forwards per
    # micro-batch and batch-wide whitening of the actor advantage must stay in step.
    "ddp-bpo": dict(BASE, strategy="ddp", loss="bpo", token_weights=("taco", "ntf")),
    "fsdp-vimpo": dict(
        BASE, strategy="fsdp", loss="vimpo", loss_args={"beta": 0.1, "c_a": 0.5}, kl_coef=0.0
    ),
}


def make_model(case: str = ""):
    """The tiny model (with LoRA adapters r=4 for the ``-lora`` cases), seeded."""
    tok = build_tokenizer(["up down left right push box goal wall"] * 30, 300)
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=300, lora=LoRAConfig(r=4 if case.endswith("lora") else 0))
    model = prepare_for_training(build_tiny_model(cfg, tok), cfg)
    if cfg.lora.r:  # peft starts B at 0: move it so the first step's gradient reaches A too
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.02)
    return model, tok.pad_token_id


def make_samples(n: int = 10) -> list[Sample]:
    """Varied prompts and responses: the two shards get different token counts."""
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        prompt = rng.integers(5, 250, size=int(rng.integers(3, 9))).tolist()
        resp = rng.integers(5, 250, size=int(rng.integers(1, 7))).tolist()
        old = (-rng.uniform(3.0, 7.0, size=len(resp))).tolist()
        out.append(Sample(prompt, resp, old, float(rng.normal()), group=i // 3))
    return out


def synthetic_groups(n_groups: int = 6, group_size: int = 4, seed: int = 0):
    """TrajectoryGroups (with texts and sampling log-probs) sampled from a random MDP, and the
    MDP: the input of a rollout's credit stage, without a model."""
    from agentrl.credit.batch import Step, Trajectory, TrajectoryGroup
    from agentrl.credit.synthetic import random_mdp, sample_groups

    rng = np.random.default_rng(seed)
    mdp = random_mdp(rng)
    batch, _ = sample_groups(mdp, rng, n_groups, group_size, with_texts=True)
    groups = [TrajectoryGroup(task=f"task {g}", seed=g, env="synthetic") for g in range(n_groups)]
    for m in range(batch.n_trajs):
        idx = np.flatnonzero(batch.step_traj == m)
        tr = Trajectory(won=bool(batch.traj_won[m]), final_obs=batch.texts.final_obs[m])
        for n in idx:
            tr.steps.append(
                Step(
                    prompt_ids=[1, 2],
                    response_ids=[3],
                    logprobs=[-float(batch.step_nll[n])],
                    reward=float(batch.step_reward[n]),
                    terminated=bool(batch.step_terminated[n]),
                    truncated=bool(batch.step_truncated[n]),
                    anchor=batch.anchor_keys[batch.step_anchor[n]],
                    action=batch.action_names[batch.step_action[n]],
                    valid=True,
                    response_text=batch.texts.responses[n],
                    prompt_text=batch.texts.prompts[n],
                )
            )
        groups[int(batch.traj_group[m])].trajectories.append(tr)
    return groups, mdp
