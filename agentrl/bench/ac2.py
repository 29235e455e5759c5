"""AC2 vs GRPO on proof derivations with the tiny model: ``python -m agentrl.bench ac2``.

Both methods train the tiny model on ``env=proof`` (generated derivation problems, graded 0–7
by the mechanical checker) from the same seeds, each run in its own process through
``python -m agentrl.run``. GRPO samples ``n_tasks × group_size`` full attempts per iteration;
AC2 refills its buffer with ``n_refill`` attempts and continues ``n_batch`` prefixes
``group_size`` times, in chunks once a problem is ready. Every run evaluates on the validation
problems every ``eval_every`` iterations (mean reward = points / 7, and the fraction of full
marks).

The report gives, per method, the peak validation score (mean over seeds) and the decoding
tokens each method had spent when it first reached GRPO's peak (the paper's compute measure is
decoding FLOPs = 2 × parameters × generated tokens; with one model both give the same ratio).
Writes ``results/ac2.md`` and ``results/ac2.png`` (validation score vs decoding tokens).
Options: ``--seeds 2 --iterations 20 --eval-every 5 --report-only``.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import date
from pathlib import Path

import numpy as np

from agentrl.bench._report import cpu_name, run_agentrl, version

COMMON = [
    "env=proof",
    "model=tiny",
    "rollout.max_new_tokens=48",
    "rollout.history_length=0",
    "rollout.eval_temperature=1.0",
    "rollout.invalid_penalty=0",  # the validation score is then exactly mean points / 7
    "learner.lr=1e-3",
    "trainer.eval_episodes=32",
    "trainer.save_every=0",
    "trainer.progress=false",
]
METHODS: dict[str, list[str]] = {
    # Same number of trained continuations per iteration: 8 x 4 = 32.
    "grpo": ["algo=grpo", "algo.norm_by_std=false", "rollout.n_tasks=8", "rollout.group_size=4"],
    "ac2": [
        "algo=ac2",
        "algo.n_refill=8",
        "algo.n_batch=8",
        "algo.group_size=4",
        "algo.chunk_tokens=16",
        "algo.budget_tokens=48",
    ],
}
# The tiny model never writes a >= 6/7 attempt, so with the paper's rule no problem ever becomes
# ready; banking each task's own reference removes that obstacle (readiness still needs a
# nonzero critic prediction, which near-zero rewards rarely give).
METHODS["ac2_given_ref"] = [*METHODS["ac2"], "algo.bank_given_reference=true"]


def warm_start(out: Path, steps: int, seed: int = 0) -> Path:
    """A tiny model fine-tuned on reference derivations (both methods start from it).

    From scratch, the tiny model writes byte soup that the grader cannot read, so neither
    method gets a reward signal. ``steps`` AdamW steps of next-token cross-entropy on
    (problem prompt → reference solution) pairs of the training split give a policy that
    writes legible, partly correct chains; RL then has something to improve.
    """
    path = out / "sft"
    if (path / "config.json").exists():
        return path
    import torch

    from agentrl.learn.model import save_model
    from agentrl.registry import make
    from agentrl.rollout import encode_prompt
    from agentrl.rollout.prompting import build_prompt
    from agentrl.run import compose
    from agentrl.run.trainer import _build_model

    cfg = compose([*COMMON, f"trainer.seed={seed}"])
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model, tok = _build_model(cfg, rng, None)
    env = make("proof")
    pairs = []
    for task_seed in range(256):
        obs, info = env.reset(seed=task_seed)
        prompt = build_prompt(info["task"], [], obs, None, 0, "plain", "generic")
        p_ids = encode_prompt(tok, prompt, cfg.rollout.max_prompt_tokens)
        r_ids = tok(info["reference_solution"], add_special_tokens=False)["input_ids"]
        pairs.append((p_ids, [*r_ids, tok.eos_token_id]))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        batch = [pairs[int(k)] for k in rng.integers(len(pairs), size=16)]
        width = max(len(p) + len(r) for p, r in batch)
        ids = [p + r + [tok.pad_token_id] * (width - len(p) - len(r)) for p, r in batch]
        lab = [[-100] * len(p) + r + [-100] * (width - len(p) - len(r)) for p, r in batch]
        mask = [[1] * (len(p) + len(r)) + [0] * (width - len(p) - len(r)) for p, r in batch]
        loss = model(
            input_ids=torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            labels=torch.tensor(lab),
        ).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    save_model(model, tok, path, cfg.model)
    (out / "sft_loss").write_text(f"{float(loss.detach()):.4f}")
    return path


def _run(
    method: str, seed: int, iterations: int, eval_every: int, out: Path, init: Path
) -> list[dict]:
    run_agentrl(
        [
            *COMMON,
            *METHODS[method],
            f"trainer.seed={seed}",
            f"trainer.steps={iterations}",
            f"trainer.eval_every={eval_every}",
            f"model.name_or_path={init}",
        ],
        out,
    )
    return _load(out)


def _sft_loss(work: Path) -> str:
    f = work / "sft_loss"
    return f.read_text().strip() if f.exists() else "n/a"


def _load(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def curve(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(decoding tokens so far, validation score) at every evaluation (iteration 0 first)."""
    xs, ys, total = [], [], 0.0
    for r in rows:
        total = r.get("perf/decode_tokens_total", total)
        if "eval/return" in r:
            xs.append(total)
            ys.append(r["eval/return"])
    return np.array(xs), np.array(ys)


def tokens_to_reach(xs: np.ndarray, ys: np.ndarray, target: float) -> float | None:
    """Decoding tokens at the first evaluation scoring at least ``target`` (None: never)."""
    hit = np.flatnonzero(ys >= target - 1e-12)
    return float(xs[hit[0]]) if len(hit) else None


def run(out_dir: str = "results", quick: bool = False, log=print, argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog="python -m agentrl.bench ac2")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--sft-steps", type=int, default=1500)
    opts = parser.parse_args(argv or [])
    seeds = list(range(opts.seeds))
    iterations, eval_every = opts.iterations, opts.eval_every
    if quick:
        seeds, iterations, eval_every = seeds[:1], 2, 1
    out_dir = Path(out_dir)
    work = out_dir / ".ac2_runs"
    log(f"[ac2] warm start: {opts.sft_steps} SFT steps on reference derivations")
    init = warm_start(work, 20 if quick else opts.sft_steps)
    runs: dict[str, list[list[dict]]] = {m: [] for m in METHODS}
    for seed in seeds:
        for m in METHODS:
            path = work / f"{m}_seed{seed}"
            log(f"[ac2] {m} seed {seed}")
            # A finished run (its wall time written) is reused: delete its folder to redo it.
            done = opts.report_only or (path / "wall_s").exists()
            rows = _load(path) if done else _run(m, seed, iterations, eval_every, path, init)
            runs[m].append(rows)
    # Mean curve over seeds (same evaluation iterations for every run).
    mean: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for m, rs in runs.items():
        cs = [curve(r) for r in rs]
        n = min(len(c[1]) for c in cs)
        mean[m] = (np.mean([c[0][:n] for c in cs], 0), np.mean([c[1][:n] for c in cs], 0))
    grpo_peak = float(mean["grpo"][1].max())
    wall = sum(
        float((work / f"{m}_seed{s}" / "wall_s").read_text())
        for m in METHODS
        for s in seeds
        if (work / f"{m}_seed{s}" / "wall_s").exists()
    )
    lines = [
        "# AC2 vs GRPO on proof derivations (tiny model)",
        "",
        f"Machine: {os.cpu_count()} CPU cores ({cpu_name()}), no GPU. Date: {date.today()}. "
        f"Versions: agentrl {version('agentrl')}, torch {version('torch')}. "
        f"Wall time {wall / 60:.1f} min for the {sum(len(r) for r in runs.values())} runs.",
        f"Reproduce: `python -m agentrl.bench ac2 --seeds {len(seeds)} --iterations "
        f"{iterations} --eval-every {eval_every}`"
        + (" (this was a `--quick` smoke run)." if quick else "."),
        "",
        f"Both start from the same warm start: the tiny model after {opts.sft_steps} SFT steps "
        f"on reference derivations (`warm_start`, final SFT loss {_sft_loss(work)}; from "
        "scratch the tiny model writes bytes the grader cannot read, so no method gets a "
        "reward). Settings shared by both: "
        + " ".join(f"`{c}`" for c in COMMON)
        + ". GRPO: "
        + " ".join(f"`{c}`" for c in METHODS["grpo"])
        + ". AC2: "
        + " ".join(f"`{c}`" for c in METHODS["ac2"])
        + "; ac2_given_ref adds `algo.bank_given_reference=true`"
        + ". Validation score: mean reward "
        "(points / 7) on the validation problems, sampled at temperature 1.0; decoding tokens "
        "count every generated token (AC2's refill attempts and critic answers included).",
        "",
        "| method | peak validation score | at decoding tokens | tokens to reach GRPO's peak "
        "| ready fraction (last) | critic error (last) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m, (xs, ys) in mean.items():
        k = int(np.argmax(ys))
        reach = tokens_to_reach(xs, ys, grpo_peak)
        last = [r[-1] for r in runs[m]]
        ready = np.mean([x.get("ac2/ready_frac", np.nan) for x in last])
        err = np.mean([x.get("ac2/critic_error", np.nan) for x in last])
        lines.append(
            f"| {m} | {ys[k]:.3f} | {xs[k]:,.0f} | "
            + (f"{reach:,.0f}" if reach is not None else "not reached")
            + f" | {ready:.2f} | {err:.2f} |"
        )
    reach_grpo = tokens_to_reach(*mean["grpo"], grpo_peak)
    reach_ac2 = tokens_to_reach(*mean["ac2"], grpo_peak)
    if reach_ac2 is None:
        lines += ["", "AC2 did not reach GRPO's peak validation score in this budget."]
    elif reach_grpo == 0:
        lines += [
            "",
            "GRPO's peak is its starting score (it did not improve in this budget), so the "
            "tokens-to-GRPO's-peak ratio is undefined; compare the peaks instead.",
        ]
    else:
        lines += ["", f"Decoding tokens to GRPO's peak, GRPO / AC2: {reach_grpo / reach_ac2:.2f}x."]
    lines += ["", "Per seed (validation score at each evaluation, iteration 0 first):", ""]
    for m, rs in runs.items():
        for seed, rows in zip(seeds, rs):
            lines.append(f"- {m} seed {seed}: " + ", ".join(f"{y:.3f}" for y in curve(rows)[1]))
    lines += ["", "![validation score vs decoding tokens](ac2.png)", ""]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ac2.md").write_text("\n".join(lines))
    _plot(mean, out_dir / "ac2.png")
    log(f"[ac2] wrote {out_dir / 'ac2.md'}")
    return mean


def _plot(mean: dict[str, tuple[np.ndarray, np.ndarray]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for m, (xs, ys) in mean.items():
        ax.plot(xs, ys, marker="o", label=m)
    ax.set_xlabel("decoding tokens (cumulative)")
    ax.set_ylabel("validation score (mean points / 7)")
    ax.set_title("proof derivations, tiny model (mean over seeds)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
