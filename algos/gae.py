"""GAE with a learned critic (``algo=gae``): PPO's classic advantage over environment steps.

For trajectory i with turns t = 0..T−1 (prompts s_t, rewards r_t) and a critic V:

    δ_t = r_t + γ·V(s_{t+1}) − V(s_t),      A_t = δ_t + γλ·A_{t+1}   (A_T = 0),
    R_t = A_t + V(s_t)                       (the λ-return: the critic's target),

where V(s_T), the value after the last turn, is 0 when the episode terminated. When it was
truncated (the step limit) it is 0 too by default (``algo.truncation=zero``): the step limit is
part of these tasks (every prompt shows the turn number, and nothing more can be earned after
it), so the true value there is 0, as every other estimator here assumes.
``algo.truncation=bootstrap`` instead uses V of the prompt the policy would have seen next
(:attr:`~agentrl.credit.Trajectory.final_prompt`), for environments whose limit cuts a task
that could go on; episodes without a recorded final prompt fall back to 0. Lost episodes
(failed env workers) never reach the estimator. Advantages are one per step (broadcast to the
response tokens as for every estimator), whitened over the batch unless ``algo.norm_adv=false``.

This is turn-level GAE as Turn-PPO (Li et al., arXiv 2512.17008) and AReaL's
``gae_timestep_unit="turn"`` compute it: one value per turn read before the turn's response, the
turn's reward summed into one step reward, γλ once per turn, and the next value 0 after a normal
end (docs/methods.md#gae lists the correspondence point by point; the one difference is the
learner's per-token ratio, where Turn-PPO pools the log-ratio over a turn).

The critic (:class:`GAECritic`, the estimator's registered ``critic``) reads V(s) from the last
hidden state at the end of the turn's prompt through a linear head (:mod:`agentrl.learn.value`):

- ``algo.critic=head``: the head sits on the policy itself (a shared trunk, as PPO's shared
  actor-critic networks). The value loss trains the head at ``critic_lr`` and the shared trunk at
  ``vf_coef × critic_lr``: the critic takes its own AdamW step after the policy's, and since
  Adam ignores a constant factor on a loss, PPO's value-loss coefficient c_v acts through the
  trunk's learning rate. ``vf_coef=0`` leaves the policy untouched (a probe of its features).
- ``algo.critic=model``: a separate critic, a copy of the policy (architecture and weights when
  the run starts) with its own head, all trained at ``critic_lr`` (``vf_coef`` is unused).

After each policy update the critic makes ``critic_epochs`` passes over the batch's steps in
mini-batches of ``critic_mini_batch_steps`` (0 = all), minimising PPO's clipped value loss
½·max((V − R)², (V_clip − R)²), V_clip = V_old + clip(V − V_old, ±``vf_clip``), V_old being the
values the targets were made with (:func:`agentrl.learn.value.clipped_value_loss`).

CFP (critic-free pretraining, then a freshly initialised critic online; seed 001) is
``algo.critic_init``: ``fresh`` starts the value head at zero (V ≡ 0, so the first advantages
are discounted λ-returns) on an actor warm-started by ``model.name_or_path`` (e.g. the output
of ``python -m agentrl.sft``); ``pretrained`` loads the value head saved in that checkpoint
folder (``value_head.safetensors``: fitted on the warm-start demonstrations by
``python -m agentrl.sft sft.value_coef=...``, or exported by an earlier ``algo=gae`` run) and
fails at start-up when there is none. A ``model`` critic's trunk always starts from the policy's
weights. The critic's weights and optimizer are saved in ``trainer_state.pt`` (exact resume) and
its head as ``value_head.safetensors`` in every checkpoint folder. One process only (the critic
is not sharded): under torchrun the trainer stops with a clear error.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from agentrl.configuration import ConfigError, check
from agentrl.credit import Advantages, discounted_returns, register_estimator, steps_from_end
from agentrl.credit.batch import StepBatch
from agentrl.learn.value import (
    VALUE_HEAD_FILE,
    clipped_value_loss,
    explained_variance,
    load_value_head,
    new_value_head,
    prompt_hidden,
    prompt_values,
    save_value_head,
    token_chunks,
)
from agentrl.model import encode_prompt

log = logging.getLogger("agentrl")


@dataclass(frozen=True)
class GAEConfig:
    """Options of GAE and its critic (see the module docstring)."""

    gamma: float = 0.95
    """Discount γ over environment steps (GiGPO's and GAGPO's 0.95 here)."""
    lam: float = 0.95
    """GAE λ: 0 = one-step TD advantages, 1 = Monte-Carlo returns minus V."""
    norm_adv: bool = True
    """Whiten the advantages over the batch (zero mean, unit std), as PPO does."""
    truncation: Literal["zero", "bootstrap"] = "zero"
    """Value after a step-limit cut: 0 (the limit is part of the task) or V of the next prompt."""
    critic: Literal["head", "model"] = "head"
    """``head``: a value head on the policy (shared trunk); ``model``: a separate critic model."""
    critic_init: Literal["fresh", "pretrained"] = "fresh"
    """``fresh``: the value head starts at zero (CFP); ``pretrained``: load the value head saved
    in the ``model.name_or_path`` checkpoint."""
    critic_lr: float = 1e-3
    """AdamW learning rate of the critic (1e-3 suits the tiny model; real models ~1e-5)."""
    vf_coef: float = 0.5
    """Value-loss weight on the shared trunk (``critic=head``): the trunk learns at
    ``vf_coef × critic_lr``; 0 trains the head alone."""
    vf_clip: float = 0.5
    """PPO value clip ε_v (in return units, as verl's ``cliprange_value``); 0 disables."""
    critic_epochs: int = 2
    """Passes of the critic over each batch."""
    critic_mini_batch_steps: int = 0
    """Steps per critic optimiser step; 0 = the whole batch."""
    critic_max_grad_norm: float = 1.0
    """Gradient clipping of the critic by global norm; 0 disables."""
    critic_token_budget: int = 8192
    """Largest padded size (rows × width) of one critic forward pass."""

    def __post_init__(self) -> None:
        check(0.0 <= self.gamma <= 1.0, "algo.gamma", self.gamma, "in [0, 1]")
        check(0.0 <= self.lam <= 1.0, "algo.lam", self.lam, "in [0, 1]")
        check(self.critic_lr > 0, "algo.critic_lr", self.critic_lr, "> 0")
        check(self.vf_coef >= 0, "algo.vf_coef", self.vf_coef, ">= 0")
        check(self.vf_clip >= 0, "algo.vf_clip", self.vf_clip, ">= 0")
        check(self.critic_epochs >= 1, "algo.critic_epochs", self.critic_epochs, ">= 1")
        check(self.critic_mini_batch_steps >= 0, "algo.critic_mini_batch_steps",
              self.critic_mini_batch_steps, ">= 0")  # fmt: skip
        check(self.critic_max_grad_norm >= 0, "algo.critic_max_grad_norm",
              self.critic_max_grad_norm, ">= 0")  # fmt: skip
        check(self.critic_token_budget >= 1, "algo.critic_token_budget",
              self.critic_token_budget, ">= 1")  # fmt: skip


def gae_advantages(
    step_reward: np.ndarray,
    step_traj: np.ndarray,
    values: np.ndarray,
    last_value: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimates and λ-returns over environment steps.

    δ_t = r_t + γ V_{t+1} − V_t (V_T = ``last_value`` of the trajectory after its last step),
    A_t = Σ_{k≥0} (γλ)^k δ_{t+k} within the trajectory, R_t = A_t + V_t.

    Args:
        step_reward: (N,) r_t.
        step_traj: (N,) trajectory index; steps of a trajectory contiguous, in turn order.
        values: (N,) V(s_t) of each step's prompt.
        last_value: (M,) the value after each trajectory's last step (0 = terminal).
        gamma, lam: γ and λ in [0, 1].
    Returns:
        (A (N,), R (N,)), float64.
    """
    reward = np.asarray(step_reward, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    step_traj = np.asarray(step_traj, dtype=np.int64)
    n = reward.shape[0]
    if n == 0:
        return np.zeros(0), np.zeros(0)
    last = steps_from_end(step_traj) == 0
    following = np.empty(n, dtype=np.float64)
    following[:-1] = values[1:]
    following = np.where(last, np.asarray(last_value, dtype=np.float64)[step_traj], following)
    delta = reward + gamma * following - values
    adv = discounted_returns(delta, step_traj, gamma * lam)
    return adv, adv + values


def _last_steps(batch: StepBatch) -> np.ndarray:
    """(M,) index of each trajectory's last step."""
    return np.flatnonzero(steps_from_end(batch.step_traj) == 0)


@register_estimator(
    "gae", config=GAEConfig, group_based=False, critic="agentrl.algos.gae:GAECritic"
)
def gae(batch: StepBatch, graph: object, cfg: GAEConfig, critic) -> Advantages:
    """GAE advantages (N,) from the critic's values of the steps' prompts (module docstring)."""
    if batch.texts is None:
        raise ValueError("algo=gae needs the batch's prompt texts (a batch built from rollouts)")
    values = np.asarray(critic.values(batch.texts.prompts), dtype=np.float64)
    last_value = np.zeros(batch.n_trajs, dtype=np.float64)
    ends = _last_steps(batch)
    cut = batch.step_truncated[ends] & ~batch.step_terminated[ends]
    boot = np.zeros(0, dtype=np.int64)
    finals = batch.texts.final_prompts
    if cfg.truncation == "bootstrap" and len(finals) == batch.n_trajs:
        boot = np.flatnonzero(cut & np.array([bool(p) for p in finals], dtype=bool))
        if boot.size:
            last_value[boot] = critic.values([finals[i] for i in boot])
    adv, returns = gae_advantages(
        batch.step_reward, batch.step_traj, values, last_value, cfg.gamma, cfg.lam
    )
    step = adv
    if cfg.norm_adv and adv.size:
        step = (adv - adv.mean()) / (adv.std() + 1e-8)
    metrics = {
        "value_mean": float(values.mean()) if values.size else 0.0,
        "return_mean": float(returns.mean()) if returns.size else 0.0,
        "gae_raw_std": float(adv.std()) if adv.size else 0.0,
        "value_explained_var": explained_variance(values, returns),
        "bootstrapped": float(boot.size),
    }
    return Advantages(step=step, metrics=metrics, values=values, returns=returns)


class GAECritic:
    """The learned value function of ``algo=gae`` (see the module docstring).

    Args:
        run_cfg: the run's :class:`~agentrl.run.config.RunConfig` (``algo`` is a
            :class:`GAEConfig`).
        policy: the policy model (the trunk of ``critic=head``; copied for ``critic=model``).
        tokenizer: the policy's tokenizer (prompts are encoded as the rollout encodes them).
    """

    def __init__(self, run_cfg, policy, tokenizer):
        cfg: GAEConfig = run_cfg.algo
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.max_prompt_tokens = run_cfg.rollout.max_prompt_tokens
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)
        if cfg.critic == "model":
            # Its own copy of the policy's architecture and current weights (the warm start).
            self.model = copy.deepcopy(policy).train()
        else:
            self.model = policy
        self.head = new_value_head(self.model)
        if cfg.critic_init == "pretrained":
            self._load_pretrained(run_cfg.model.name_or_path)
        trunk = [p for p in self.model.parameters() if p.requires_grad]
        trunk_lr = cfg.critic_lr * (cfg.vf_coef if cfg.critic == "head" else 1.0)
        groups = [{"params": list(self.head.parameters()), "lr": cfg.critic_lr}]
        if trunk_lr > 0 and trunk:
            groups.append({"params": trunk, "lr": trunk_lr})
        self.params = [p for g in groups for p in g["params"]]
        self.optimizer = torch.optim.AdamW(groups, lr=cfg.critic_lr, weight_decay=0.0)

    def _load_pretrained(self, source: str | None) -> None:
        if not source:
            raise ConfigError(
                "algo.critic_init=pretrained loads the value head saved with a warm-start "
                "checkpoint: set model.name_or_path=<checkpoint folder> (e.g. the output of "
                "python -m agentrl.sft ... sft.value_coef=0.5), or use algo.critic_init=fresh"
            )
        loaded = load_value_head(source) if Path(source).is_dir() else None
        if loaded is None:
            raise ConfigError(
                f"algo.critic_init=pretrained: model.name_or_path={source!r} holds no value head "
                f"({VALUE_HEAD_FILE}); write one with python -m agentrl.sft ... "
                "sft.value_coef=0.5 (or take a checkpoint of an algo=gae run), or use "
                "algo.critic_init=fresh"
            )
        state, meta = loaded
        try:
            self.head.load_state_dict({k: v.to(self.head.weight.device) for k, v in state.items()})
        except RuntimeError as exc:
            raise ConfigError(
                f"the value head in {source} does not fit this model ({exc})"
            ) from None
        gamma = meta.get("gamma")
        if isinstance(gamma, int | float) and not math.isclose(gamma, self.cfg.gamma):
            log.warning(
                "the pretrained value head was fitted with gamma=%s, this run has "
                "algo.gamma=%s: its values start biased",
                gamma,
                self.cfg.gamma,
            )
        log.info("critic: value head loaded from %s", source)

    # -- values ------------------------------------------------------------------------------

    def _encode(self, prompts: Sequence[str]) -> list[list[int]]:
        out = []
        for text in prompts:
            ids = encode_prompt(self.tokenizer, text, self.max_prompt_tokens)
            out.append(ids or [self.pad_id])  # the value of an empty prompt: read at a pad
        return out

    def values(self, prompts: Sequence[str]) -> np.ndarray:
        """V of each user message: (n,) float64."""
        if not len(prompts):
            return np.zeros(0, dtype=np.float64)
        ids = self._encode(prompts)
        return prompt_values(self.model, self.head, ids, self.pad_id, self.cfg.critic_token_budget)

    # -- training ----------------------------------------------------------------------------

    def after_update(
        self, batch: StepBatch, adv: Advantages, rng: np.random.Generator
    ) -> dict[str, float]:
        """``critic_epochs`` passes of clipped value-loss steps on the batch's kept steps."""
        cfg = self.cfg
        if adv.values is None or adv.returns is None or batch.texts is None:
            raise ValueError("the critic needs the estimator's values and returns")
        idx = np.flatnonzero(~batch.step_lost)
        if idx.size == 0:
            return {}
        prompts = self._encode([batch.texts.prompts[i] for i in idx])
        device = self.head.weight.device
        v_old = torch.tensor(adv.values[idx], dtype=torch.float32, device=device)
        target = torch.tensor(adv.returns[idx], dtype=torch.float32, device=device)
        size = cfg.critic_mini_batch_steps or idx.size
        sums = {"loss": 0.0, "clipfrac": 0.0, "grad_norm": 0.0}
        n_updates = skipped = 0
        for _ in range(cfg.critic_epochs):
            order = rng.permutation(idx.size)
            for k in range(0, idx.size, size):
                mini = order[k : k + size]
                self.optimizer.zero_grad(set_to_none=True)
                loss_sum = clip_sum = 0.0
                lengths = [len(prompts[i]) for i in mini]
                for chunk in token_chunks(lengths, cfg.critic_token_budget):
                    rows = torch.as_tensor(mini[chunk], device=device)
                    h = prompt_hidden(self.model, [prompts[i] for i in mini[chunk]], self.pad_id)
                    value = self.head(h).squeeze(-1)
                    loss, clipped = clipped_value_loss(
                        value, v_old[rows], target[rows], cfg.vf_clip
                    )
                    (loss.sum() / len(mini)).backward()
                    loss_sum += float(loss.detach().sum())
                    clip_sum += float(clipped.float().sum())
                norm = self._grad_norm()
                if math.isfinite(loss_sum) and math.isfinite(norm):
                    self.optimizer.step()
                else:  # a non-finite step would poison the weights: drop it
                    self.optimizer.zero_grad(set_to_none=True)
                    skipped += 1
                sums["loss"] += loss_sum / len(mini)
                sums["clipfrac"] += clip_sum / len(mini)
                sums["grad_norm"] += norm
                n_updates += 1
        self.optimizer.zero_grad(set_to_none=True)
        out = {f"critic/{k}": v / n_updates for k, v in sums.items()}
        out["critic/skipped_steps"] = float(skipped)
        return out

    def _grad_norm(self) -> float:
        if self.cfg.critic_max_grad_norm > 0:
            return float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.critic_max_grad_norm))
        grads = [p.grad.norm() ** 2 for p in self.params if p.grad is not None]
        return float(torch.sqrt(sum(grads))) if grads else 0.0

    # -- checkpoints -------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Head, optimizer and (``critic=model``) the critic model's weights."""
        return {
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "model": self.model.state_dict() if self.cfg.critic == "model" else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        if self.cfg.critic == "model" and state.get("model") is not None:
            self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def save(self, path) -> None:
        """Export the value head next to a checkpoint's weights (``critic_init=pretrained``
        of a later run loads it)."""
        meta = {"gamma": self.cfg.gamma, "lam": self.cfg.lam, "critic": self.cfg.critic}
        save_value_head(self.head, path, meta)
