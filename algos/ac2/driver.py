"""The AC2 rollout driver: refill, prefixes, chunked continuations, critic and readiness.

See :mod:`agentrl.algos.ac2.core` for the algorithm; this module runs it against a model, a rollout
backend and a single-turn environment whose reward is points / 7 (``env=proof``). The trainer
uses it in place of the episode rollout when ``algo=ac2`` (the estimator registers it as its
``driver``):

- ``collect(rng)`` returns the iteration's groups (one per prefix, one single-step trajectory
  per continuation whose reward is the endpoint value) and metrics;
- ``after_update(rng)`` trains the critic on the shared weights and updates readiness;
- ``state_dict()`` / ``load_state_dict()`` carry the buffers, readiness and the critic's
  optimizer and LR ladder through checkpoints.

Problems, generation with per-prompt limits, grading through the env and the continuation
steps come from :class:`agentrl.algos._prefix.PrefixSampler`, which PS-PPO shares.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import torch

from agentrl.algos._prefix import PrefixSampler
from agentrl.algos.ac2.core import (
    GRID,
    AC2Config,
    Attempt,
    LRLadder,
    Readiness,
    ReplayBuffer,
    grid_round,
    group_targets,
    parse_value,
    value_prompt,
)
from agentrl.credit.batch import Trajectory, TrajectoryGroup
from agentrl.env_api import EVAL_SEED_BASE
from agentrl.model import encode_prompt
from agentrl.rollout.sampler import Collected

__all__ = ["AC2Driver"]


class AC2Driver(PrefixSampler):
    """Runs AC2's sampling and critic around the shared learner (see the module docstring)."""

    def __init__(self, run_cfg, model, tokenizer, backend):
        super().__init__(run_cfg, tokenizer, backend)
        self.cfg: AC2Config = run_cfg.algo
        self.model = model
        self.buffer = ReplayBuffer(self.cfg.buffer_capacity)
        self.readiness = Readiness(self.cfg.tau_global, self.cfg.tau_local, self.cfg.error_window)
        self.bank: dict[int, str] = {}
        self.pairs: deque[tuple[str, float]] = deque(maxlen=self.cfg.critic_buffer)
        self.ladder = LRLadder(
            self.cfg.critic_lr,
            self.cfg.critic_lr_floor,
            self.cfg.critic_ladder_ratio,
            self.cfg.critic_ladder_patience,
        )
        params = [p for p in model.parameters() if p.requires_grad]
        self.head: torch.nn.Linear | None = None
        if self.cfg.critic == "head":
            # 11 logits, one per grid value, over the last hidden state of the value prompt.
            hidden = model.get_input_embeddings().weight.shape[1]
            device = next(model.parameters()).device
            self.head = torch.nn.Linear(hidden, len(GRID)).to(device)
            params += list(self.head.parameters())
        self.critic_opt = torch.optim.AdamW(params, lr=self.ladder.lr, weight_decay=0.0)
        self._snapshot: torch.Tensor | None = None

    # -- the critic ----------------------------------------------------------------------------
    def critic_values(self, items: list[tuple[int, str, bool]]) -> list[float | None]:
        """Greedy critic answers for (seed, attempt text, with reference?) items."""
        if not items:
            return []
        prompts = []
        for seed, attempt, with_ref in items:
            problem, _, _ = self.problem(seed)
            ref = self.bank.get(seed) if with_ref else None
            prompts.append(
                encode_prompt(
                    self.tokenizer, value_prompt(problem, attempt, ref), self.rc.max_prompt_tokens
                )
            )
        if self.head is not None:
            with torch.no_grad():
                logits = self._head_logits(prompts)
            return [GRID[int(k)] for k in logits.argmax(-1).tolist()]
        gens = self.generate(prompts, [self.cfg.critic_value_tokens] * len(prompts), True)
        return [parse_value(g.text) for g in gens]

    def _head_logits(self, prompts: list[list[int]]) -> torch.Tensor:
        """(n, 11) grid logits of the value head at the last token of each prompt."""
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        device = next(self.model.parameters()).device
        ids = torch.tensor([p + [pad] * (width - len(p)) for p in prompts], device=device)
        mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts], device=device)
        out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        last = torch.tensor([len(p) - 1 for p in prompts], device=device)
        hidden = out.hidden_states[-1][torch.arange(len(prompts), device=device), last]
        return self.head(hidden.float())

    # -- one iteration ------------------------------------------------------------------------
    def collect(self, rng: np.random.Generator) -> Collected:
        cfg = self.cfg
        self.decode_tokens = 0
        # 1. Refill: fresh problems, one full attempt each, into the buffer (not trained on).
        seeds = [int(s) for s in rng.integers(0, EVAL_SEED_BASE - 1, size=cfg.n_refill)]
        gens = self.generate([self.problem(s)[1] for s in seeds], [cfg.budget_tokens] * len(seeds))
        for s, gen in zip(seeds, gens):
            reward = self.grade(s, gen.text)
            self.buffer.push(Attempt(s, list(gen.token_ids), reward or 0.0))
            self._maybe_bank(s, gen.text, reward)
        if cfg.bank_given_reference:
            for s in seeds:
                if self.problem(s)[2]:
                    self.bank.setdefault(s, self.problem(s)[2])
                    self.readiness.bank_reference(s)
        # 2. Prefixes, and which of them are continued in full.
        prefixes = self.buffer.sample_prefixes(rng, cfg.n_batch, cfg.chunk_tokens, cfg.max_cut_frac)
        ready = [self.readiness.is_ready(a.problem) for a, _ in prefixes]
        ready_idx = [i for i, r in enumerate(ready) if r]
        n_audit = math.ceil(cfg.audit_frac * len(ready_idx))
        audited = (
            set(rng.choice(ready_idx, size=n_audit, replace=False).tolist()) if n_audit else set()
        )
        full = [not r or i in audited for i, r in enumerate(ready)]
        # 3. G continuations per prefix.
        prompts, limits, owner = [], [], []
        for k, (a, cut) in enumerate(prefixes):
            base = self.problem(a.problem)[1] + a.response_ids[:cut]
            left = cfg.budget_tokens - cut
            limit = left if full[k] else min(cfg.chunk_tokens, left)
            for _ in range(cfg.group_size):
                prompts.append(base)
                limits.append(limit)
                owner.append(k)
        gens = self.generate(prompts, limits)
        values: list[float | None] = [None] * len(gens)
        graded: list[list[float | None]] = [[] for _ in prefixes]
        needs_critic: list[tuple[int, tuple[int, str, bool]]] = []
        for i, (gen, k) in enumerate(zip(gens, owner)):
            a, cut = prefixes[k]
            text = self.decode(a.response_ids[:cut] + list(gen.token_ids))
            finished = (
                len(gen.token_ids) < limits[i] or cut + len(gen.token_ids) >= cfg.budget_tokens
            )
            if full[k] or finished:
                values[i] = self.grade(a.problem, text)
                self._maybe_bank(a.problem, text, values[i])
                if full[k]:
                    graded[k].append(values[i])
            else:
                needs_critic.append((i, (a.problem, text, True)))
        for (i, _), v in zip(needs_critic, self.critic_values([x for _, x in needs_critic])):
            values[i] = v
        # 4. One group per prefix, one single-step trajectory per continuation.
        groups = []
        for k, (a, cut) in enumerate(prefixes):
            group = TrajectoryGroup(task=self.problem(a.problem)[0], seed=a.problem)
            for i in (i for i, o in enumerate(owner) if o == k):
                v = values[i]
                step = self.continuation_step(
                    a.problem,
                    a.response_ids[:cut],
                    gens[i].token_ids,
                    gens[i].logprobs,
                    v,
                    anchor=(a.problem, cut),
                    text=gens[i].text,
                )
                group.trajectories.append(Trajectory(steps=[step], won=v == 1.0))
            groups.append(group)
        # Critic targets from the fully continued groups; errors of the current critic on them.
        targets = group_targets(graded, cfg.critic_min_valid)
        target_items = [(k, z) for k, z in enumerate(targets) if z is not None and full[k]]
        query = []
        for k, _ in target_items:
            a, cut = prefixes[k]
            query.append((a.problem, self.decode(a.response_ids[:cut]), a.problem in self.bank))
        preds = self.critic_values(query)
        errors: dict[int, float] = {}
        latest: dict[int, float] = {}
        for (_, z), (seed, attempt, with_ref), p in zip(target_items, query, preds):
            errors[seed] = abs(p - z) if p is not None else 1.0  # an invalid answer: max error
            latest[seed] = p if p is not None else 0.0
            problem = self.problem(seed)[0]
            self.pairs.append((value_prompt(problem, attempt, None), z))
            if with_ref:
                self.pairs.append((value_prompt(problem, attempt, self.bank[seed]), z))
        self.readiness.record_step(errors, latest)
        self._pending = {
            "ac2/ready_frac": float(np.mean(ready)) if ready else 0.0,
            "ac2/audited": float(len(audited)),
            "ac2/critic_error": self.readiness.global_error()
            if math.isfinite(self.readiness.global_error())
            else 1.0,
            "ac2/critic_invalid_frac": float(np.mean([p is None for p in preds])) if preds else 0.0,
            "ac2/buffer_size": float(len(self.buffer)),
            "ac2/bank_size": float(len(self.bank)),
            "ac2/ready_problems": float(len(self.readiness.ready)),
        }
        self._snapshot = self._flat_params()
        # Decoding work: refills, continuations and critic answers, not only the groups' tokens.
        return Collected(groups, None, float(self.decode_tokens), dict(self._pending))

    def _maybe_bank(self, seed: int, text: str, reward: float | None) -> None:
        if reward is not None and reward * 7 >= self.cfg.reference_points - 1e-9:
            self.bank.setdefault(seed, text)
            self.readiness.bank_reference(seed)

    def _flat_params(self) -> torch.Tensor:
        return torch.cat(
            [
                p.detach().reshape(-1).float().cpu()
                for p in self.model.parameters()
                if p.requires_grad
            ]
        )

    # -- critic update ------------------------------------------------------------------------
    def after_update(self, rng: np.random.Generator) -> dict[str, float]:
        """Train the critic on the shared weights; adjust its LR by the ladder."""
        if not self.pairs:
            return {"ac2/critic_lr": self.ladder.lr}
        after_actor = self._flat_params()
        d_ppo = (
            float(torch.linalg.vector_norm(after_actor - self._snapshot))
            if self._snapshot is not None
            else 0.0
        )
        n = min(self.cfg.critic_pairs, len(self.pairs))
        pick = rng.choice(len(self.pairs), size=n, replace=False)
        loss = self.critic_loss([self.pairs[int(i)] for i in pick])
        for group in self.critic_opt.param_groups:
            group["lr"] = self.ladder.lr
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for group in self.critic_opt.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, self.cfg.critic_grad_clip)
        self.critic_opt.step()
        self.critic_opt.zero_grad(set_to_none=True)
        d_q = float(torch.linalg.vector_norm(self._flat_params() - after_actor))
        ratio = d_q / d_ppo if d_ppo > 0 else 0.0
        self.ladder.step(ratio)
        return {
            "ac2/critic_loss": float(loss.detach()),
            "ac2/critic_lr": self.ladder.lr,
            "ac2/critic_update_ratio": ratio,
        }

    def critic_loss(self, pairs: list[tuple[str, float]]) -> torch.Tensor:
        """Mean next-token cross-entropy of the grid answers after their value prompts (or,
        with ``critic=head``, the cross-entropy of the head's grid classification)."""
        tok = self.tokenizer
        if self.head is not None:
            prompts = [encode_prompt(tok, p, self.rc.max_prompt_tokens) for p, _ in pairs]
            target = torch.tensor([GRID.index(grid_round(z)) for _, z in pairs])
            logits = self._head_logits(prompts)
            return torch.nn.functional.cross_entropy(logits, target.to(logits.device))
        rows, labels = [], []
        for prompt, z in pairs:
            p_ids = encode_prompt(tok, prompt, self.rc.max_prompt_tokens)
            t_ids = tok(f"{z:.1f}", add_special_tokens=False)["input_ids"]
            if tok.eos_token_id is not None:
                t_ids = [*t_ids, tok.eos_token_id]
            rows.append(p_ids + t_ids)
            labels.append([-100] * len(p_ids) + t_ids)
        width = max(len(r) for r in rows)
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        device = next(self.model.parameters()).device
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
        lab = torch.tensor([x + [-100] * (width - len(x)) for x in labels], device=device)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
        return self.model(input_ids=ids, attention_mask=mask, labels=lab).loss

    # -- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "buffer": self.buffer.state_dict(),
            "readiness": self.readiness.state_dict(),
            "bank": dict(self.bank),
            "pairs": list(self.pairs),
            "ladder": self.ladder.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "head": self.head.state_dict() if self.head is not None else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.readiness.load_state_dict(state["readiness"])
        self.bank = dict(state["bank"])
        self.pairs = deque(state["pairs"], maxlen=self.cfg.critic_buffer)
        self.ladder.load_state_dict(state["ladder"])
        if self.head is not None and state.get("head") is not None:
            self.head.load_state_dict(state["head"])
        self.critic_opt.load_state_dict(state["critic_opt"])
