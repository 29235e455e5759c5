"""Supervised warm start: behaviour cloning of the environments' own demonstrations.

``python -m agentrl.sft env=<name> [sft.steps=300 sft.noise=0.2 ...] [model.* rollout.* ...]``
plays ``sft.episodes`` training episodes (seeds below the evaluation seeds) following the
environment's :meth:`~agentrl.env_api.TextEnv.demonstration` (Sokoban's solver plan from the
current position, ALFWorld's walkthrough, WebShop's path to the goal product, the proof
reference solution), replacing each demonstrated action by a random admissible action with
probability ``sft.noise``. Every action taken that way is a training pair: the prompt exactly as
the rollout builds it (:func:`~agentrl.rollout.prompting.build_prompt` with the run's
``rollout.history_length``, ``action_format`` and prompt style, chat-formatted and truncated by
:func:`~agentrl.rollout.encode_prompt`) and the response the rollout would have to produce (the
bare action, or ``<action>…</action>`` with ``rollout.action_format=tag``) followed by EOS. When
the environment knows no demonstration from the current state (a Sokoban box pushed into a
corner by a noisy move) the episode goes on with random admissible actions that are not cloned,
so the episode's returns stay whole for the optional value head.

Training minimises the token-mean cross-entropy of the response tokens (AdamW, ``sft.steps``
steps of ``sft.batch_size`` pairs); with ``sft.value_coef > 0`` a value head over the hidden state
at each prompt's end (:mod:`agentrl.learn.value`) is fitted jointly to the discounted return-to-go
(``sft.gamma``) of the demonstration episodes, the "pretrained" critic of ``algo=gae
algo.critic_init=pretrained``. The model starts as the run would (the tiny model with its locally
trained tokenizer, or ``model.name_or_path``) and is saved in Hugging Face format with its
tokenizer, so ``python -m agentrl.run model.name_or_path=<out_dir> ...`` trains from it.
``metrics.jsonl`` logs the loss and the token accuracy every ``sft.log_every`` steps.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from agentrl.configuration import ConfigError, check, from_mapping, to_dict
from agentrl.learn.value import new_value_head, prompt_hidden, save_value_head
from agentrl.model import banned_token_ids, encode_prompt, save_model
from agentrl.model.forward import Sample, forward_chunk, micro_batches
from agentrl.registry import make
from agentrl.rollout.prompting import build_prompt
from agentrl.run.config import RunConfig
from agentrl.run.setup import build_policy, resolve_device, set_threads, with_prompt_style

log = logging.getLogger("agentrl")


@dataclass(frozen=True)
class SFTConfig:
    """The supervised warm start (``sft.*`` keys)."""

    steps: int = 300
    """Optimiser steps."""
    lr: float = 1e-3
    """AdamW learning rate (1e-3 suits the tiny model; real models use ~1e-5)."""
    batch_size: int = 32
    """Training pairs (turns) per optimiser step, drawn epoch by epoch without replacement."""
    episodes: int = 256
    """Demonstration episodes to play (each gives one pair per cloned turn)."""
    noise: float = 0.0
    """Probability that a demonstrated action is replaced by a random admissible action (which
    is cloned too): imperfect demonstrations, e.g. for a warm start of middling success."""
    seed: int = 0
    """Seeds the model initialisation, the episodes, the noise and the batch order."""
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables."""
    micro_batch_tokens: int = 8192
    """Token budget of one forward/backward pass (gradient accumulation within a step)."""
    value_coef: float = 0.0
    """Weight of a jointly fitted value head's squared error (0 = no value head); the head is
    saved next to the model for ``algo=gae algo.critic_init=pretrained``."""
    gamma: float = 0.95
    """Discount of the value head's targets (the return-to-go of the demonstration episodes);
    match ``algo.gamma`` of the run that uses it."""
    log_every: int = 25
    """Log the loss every N steps (and at the last)."""
    out_dir: str = ""
    """Where the checkpoint goes; "" = ``runs/sft/<date>_<time>_<env>``."""

    def __post_init__(self) -> None:
        check(self.steps >= 1, "sft.steps", self.steps, ">= 1")
        check(math.isfinite(self.lr) and self.lr > 0, "sft.lr", self.lr, "finite and > 0")
        check(self.batch_size >= 1, "sft.batch_size", self.batch_size, ">= 1")
        check(self.episodes >= 1, "sft.episodes", self.episodes, ">= 1")
        check(0.0 <= self.noise <= 1.0, "sft.noise", self.noise, "in [0, 1]")
        check(self.weight_decay >= 0, "sft.weight_decay", self.weight_decay, ">= 0")
        check(self.max_grad_norm >= 0, "sft.max_grad_norm", self.max_grad_norm, ">= 0")
        check(self.micro_batch_tokens >= 1, "sft.micro_batch_tokens", self.micro_batch_tokens,
              ">= 1")  # fmt: skip
        check(self.value_coef >= 0, "sft.value_coef", self.value_coef, ">= 0")
        check(0.0 <= self.gamma <= 1.0, "sft.gamma", self.gamma, "in [0, 1]")
        check(self.log_every >= 1, "sft.log_every", self.log_every, ">= 1")


@dataclass(frozen=True)
class Turn:
    """One turn of a demonstration episode."""

    prompt: str
    """The user message, built as the rollout builds it."""
    action: str
    """The action taken."""
    cloned: bool
    """Whether the action is a training target (demonstrated or a noisy replacement); turns
    played at random after the demonstration ran out are not."""
    noisy: bool
    """The action replaced a demonstrated one."""
    return_to_go: float = 0.0
    """Σ_{k≥t} γ^{k−t} r_k of the episode from this turn (``sft.gamma``)."""


def play_demonstrations(
    env, seeds: Sequence[int], run_cfg: RunConfig, noise: float, gamma: float, rng
) -> tuple[list[Turn], dict[str, float]]:
    """Play one episode per seed following ``env``'s demonstrations (see the module docstring).

    Args:
        env: an environment with ``demonstration()`` on its unwrapped env.
        seeds: the reset seed of each episode.
        run_cfg: its ``rollout`` node fixes the prompts (prompt style already resolved).
        noise: probability of replacing a demonstrated action by a random admissible one.
        gamma: discount of ``Turn.return_to_go``.
        rng: numpy generator for the noise.
    Returns:
        The turns of every episode in order, and statistics (``sft/demo_success``: fraction of
        episodes won; ``sft/noisy_frac``: fraction of cloned actions that are noise;
        ``sft/off_demo_frac``: fraction of episodes that left every demonstration).
    """
    demo = getattr(env.unwrapped, "demonstration", None)
    if demo is None:
        raise ConfigError(
            f"environment {run_cfg.env_name!r} offers no demonstrations (no demonstration() "
            "method; see agentrl.env_api.TextEnv.demonstration)"
        )
    rc = run_cfg.rollout
    turns: list[Turn] = []
    won = left = 0
    for seed in seeds:
        obs, info = env.reset(seed=int(seed))
        history: list[tuple[str, str]] = []
        episode: list[Turn] = []
        rewards: list[float] = []
        done = False
        on_demo = True
        while not done:
            plan = demo() if on_demo else None
            if plan == []:
                break  # the environment says nothing is left to do
            admissible = info.get("admissible_actions") or []
            if plan is None:
                if on_demo:  # left every demonstration: play on at random, without cloning
                    on_demo = False
                    left += 1
                if not admissible:
                    break  # an open action space: no random action to play
                action, cloned, noisy = str(admissible[int(rng.integers(len(admissible)))]), 0, 0
            elif admissible and rng.random() < noise:
                action, cloned, noisy = str(admissible[int(rng.integers(len(admissible)))]), 1, 1
            else:
                action, cloned, noisy = str(plan[0]), 1, 0
            prompt = build_prompt(
                info["task"],
                history[-rc.history_length :] if rc.history_length else [],
                obs,
                info["admissible_actions"],
                len(history),
                rc.action_format,
                rc.prompt_style,
            )
            episode.append(Turn(prompt, action, bool(cloned), bool(noisy)))
            history.append((obs, action))
            obs, reward, terminated, truncated, info = env.step(action)
            rewards.append(float(reward))
            done = terminated or truncated
        won += bool(info.get("won", False))
        ret = 0.0
        for k in range(len(episode) - 1, -1, -1):
            ret = rewards[k] + gamma * ret
            episode[k] = replace(episode[k], return_to_go=ret)
        turns.extend(episode)
    cloned = [t for t in turns if t.cloned]
    stats = {
        "sft/demo_success": won / max(len(seeds), 1),
        "sft/noisy_frac": sum(t.noisy for t in cloned) / max(len(cloned), 1),
        "sft/off_demo_frac": left / max(len(seeds), 1),
        "sft/pairs": float(len(cloned)),
    }
    return turns, stats


def response_text(action: str, action_format: str) -> str:
    """What the rollout must generate for ``action``: the bare action or the tagged one."""
    return f"<action>{action}</action>" if action_format == "tag" else action


def training_samples(
    turns: Sequence[Turn], tokenizer, run_cfg: RunConfig
) -> tuple[list[Sample], np.ndarray]:
    """The cloned turns as learner samples (prompt ids as the rollout encodes them; response
    ids of the response text plus EOS) and their return-to-go, (S,) float64."""
    rc = run_cfg.rollout
    eos = tokenizer.eos_token_id
    samples, returns = [], []
    for t in turns:
        if not t.cloned:
            continue
        prompt = encode_prompt(tokenizer, t.prompt, rc.max_prompt_tokens)
        resp = tokenizer(response_text(t.action, rc.action_format), add_special_tokens=False)
        ids = list(resp["input_ids"]) + ([eos] if eos is not None else [])
        samples.append(Sample(prompt, ids, [0.0] * len(ids), 0.0))
        returns.append(t.return_to_go)
    return samples, np.asarray(returns, dtype=np.float64)


def _batches(n: int, size: int, rng: np.random.Generator):
    """Index batches of ``size``, epoch after epoch, each epoch in a fresh random order."""
    while True:
        order = rng.permutation(n)
        for k in range(0, n - size + 1, size):  # the remainder waits for the next epoch
            yield order[k : k + size]


def sft_step(
    model,
    head,
    batch: Sequence[Sample],
    returns: np.ndarray,
    pad_id: int,
    cfg: SFTConfig,
    banned: Sequence[int] = (),
) -> dict[str, float]:
    """Gradients of one step (not applied): token-mean cross-entropy of the response tokens
    over the batch (+ ``value_coef`` × mean ½(V − G)² when ``head`` is given); its metrics.
    ``banned``: token ids generation never emits, masked as the learner masks them, so the
    cloned distribution is the one sampled from and the token accuracy is greedy decoding's."""
    device = next(model.parameters()).device
    n_tokens = sum(len(s.response_ids) for s in batch)
    index = {id(s): i for i, s in enumerate(batch)}
    loss_sum = correct = value_sum = 0.0
    for chunk in micro_batches(batch, cfg.micro_batch_tokens):
        logits, t = forward_chunk(model, chunk, pad_id, device, False, banned)
        mask = t["mask"]
        b, w, v = logits.shape
        nll = F.cross_entropy(logits.reshape(b * w, v), t["targets"].reshape(-1), reduction="none")
        nll = nll.view(b, w) * mask
        loss = nll.sum() / n_tokens
        if head is not None:
            h = prompt_hidden(model, [s.prompt_ids for s in chunk], pad_id)
            target = torch.tensor([returns[index[id(s)]] for s in chunk], device=device)
            v_err = 0.5 * (head(h).squeeze(-1) - target.float()) ** 2
            loss = loss + cfg.value_coef * v_err.sum() / len(batch)
            value_sum += float(v_err.detach().sum())
        loss.backward()
        with torch.no_grad():
            loss_sum += float(nll.sum())
            correct += float(((logits.argmax(-1) == t["targets"]).float() * mask).sum())
    out = {"sft/loss": loss_sum / n_tokens, "sft/token_acc": correct / n_tokens}
    if head is not None:
        out["sft/value_loss"] = value_sum / len(batch)
    return out


def train_sft(run_cfg: RunConfig, cfg: SFTConfig, out_dir: str | Path) -> dict[str, float]:
    """Clone ``run_cfg.env_name``'s demonstrations into the run's model; save it to
    ``out_dir`` (Hugging Face format, tokenizer, ``sft_config.json``, ``metrics.jsonl``, and
    ``value_head.safetensors`` with ``sft.value_coef > 0``). Returns the last logged metrics."""
    from agentrl.env_api import EVAL_SEED_BASE

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run_cfg = with_prompt_style(run_cfg)  # the environment's own layout, as the trainer
    device = resolve_device(run_cfg.trainer.device)
    set_threads(run_cfg.trainer.num_threads)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model, tokenizer = build_policy(run_cfg, rng)
    model.to(device)

    t0 = time.perf_counter()
    env = make(run_cfg.env_name, **run_cfg.env_kwargs)
    seeds = rng.integers(0, EVAL_SEED_BASE - 1, size=cfg.episodes)
    turns, stats = play_demonstrations(env, seeds, run_cfg, cfg.noise, cfg.gamma, rng)
    env.close()
    samples, returns = training_samples(turns, tokenizer, run_cfg)
    if not samples:
        raise ConfigError(
            f"env={run_cfg.env_name} gave no demonstrated actions in {cfg.episodes} episodes "
            "(its demonstration() returned None from every start)"
        )
    too_long = float(np.mean([len(s.response_ids) > run_cfg.rollout.max_new_tokens
                              for s in samples]))  # fmt: skip
    stats["sft/too_long_frac"] = too_long
    log.info(
        "demonstrations: %d episodes (%.0f%% won), %d training pairs, %.0f%% noisy (%.1fs)",
        cfg.episodes,
        100 * stats["sft/demo_success"],
        len(samples),
        100 * stats["sft/noisy_frac"],
        time.perf_counter() - t0,
    )
    if too_long:
        log.warning(
            "%.0f%% of the responses are longer than rollout.max_new_tokens=%d (EOS included): "
            "the rollout cuts them; raise rollout.max_new_tokens",
            100 * too_long,
            run_cfg.rollout.max_new_tokens,
        )

    head = new_value_head(model) if cfg.value_coef > 0 else None
    params = [p for p in model.parameters() if p.requires_grad]
    if head is not None:
        params += list(head.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    banned = banned_token_ids(tokenizer)
    batches = _batches(len(samples), min(cfg.batch_size, len(samples)), rng)
    metrics: dict[str, float] = {}
    window: dict[str, list[float]] = {}
    model.train()
    with (out_dir / "metrics.jsonl").open("w") as fh:
        fh.write(json.dumps({"step": 0, **stats}) + "\n")
        for step in range(1, cfg.steps + 1):
            idx = next(batches)
            opt.zero_grad(set_to_none=True)
            batch = [samples[i] for i in idx]
            stepped = sft_step(model, head, batch, returns[idx], pad_id, cfg, banned)
            if cfg.max_grad_norm > 0:
                norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                stepped["sft/grad_norm"] = float(norm)
            opt.step()
            for k, v in stepped.items():
                window.setdefault(k, []).append(v)
            if step % cfg.log_every == 0 or step == cfg.steps:
                metrics = {k: float(np.mean(v)) for k, v in window.items()}
                window = {}
                fh.write(json.dumps({"step": step, **metrics}) + "\n")
                fh.flush()
                log.info(
                    "sft step %d/%d  loss %.4f  token acc %.3f%s",
                    step,
                    cfg.steps,
                    metrics["sft/loss"],
                    metrics["sft/token_acc"],
                    f"  value loss {metrics['sft/value_loss']:.4f}" if head is not None else "",
                )
    model.eval()
    save_model(model, tokenizer, out_dir, run_cfg.model)
    if head is not None:
        save_value_head(head, out_dir, {"gamma": cfg.gamma, "source": "sft"})
    (out_dir / "sft_config.json").write_text(
        json.dumps({"sft": to_dict(cfg), "run": run_cfg.to_dict()}, indent=2)
    )
    log.info("saved the warm-started model to %s (model.name_or_path=%s)", out_dir, out_dir)
    return {**stats, **metrics}


def compose_sft(overrides: Sequence[str] = ()) -> tuple[RunConfig, SFTConfig]:
    """The run config (env, model, rollout, trainer nodes as for ``agentrl.run``) and the
    ``sft`` node of a command line, validated."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from agentrl.run.config import build_run_config, register_schemas

    register_schemas()
    ConfigStore.instance().store(group="sft", name="default", node=to_dict(SFTConfig()))
    with initialize_config_module("agentrl.configs", version_base="1.3"):
        cfg = hydra_compose("config", overrides=["+sft=default", *overrides])
    data = OmegaConf.to_container(cfg, resolve=True)
    sft = from_mapping(SFTConfig, data.pop("sft", None), "sft")
    return build_run_config(data), sft


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m agentrl.sft [key=value ...]`` (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        run_cfg, cfg = compose_sft(argv)
    except (ConfigError, HydraException, OmegaConfBaseException) as exc:
        log.error("invalid config: %s", exc)
        sys.exit(2)
    out = cfg.out_dir or f"runs/sft/{time.strftime('%Y-%m-%d_%H-%M-%S')}_{run_cfg.env_name}"
    try:
        train_sft(run_cfg, cfg, out)
    except ConfigError as exc:
        log.error("invalid config: %s", exc)
        sys.exit(2)
