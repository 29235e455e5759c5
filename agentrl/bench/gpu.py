"""GPU check: vLLM tests on CUDA, a bf16 training iteration of a small real architecture, and
rollout tokens/s, learner tokens/s and MFU, written to ``<out>/gpu.md``.

``python -m agentrl.bench gpu`` (or ``bash scripts/gpu_check.sh``) on a machine with a CUDA
device, a CUDA build of torch and vLLM (``pip install -e ".[dev,vllm]"``). Four stages, each
with its own time limit (at most about 13 minutes in all); a failed stage is reported in the
file and makes the exit code 1, the others still run:

1. ``pytest -m "vllm or gpu" tests/`` with ``AGENTRL_REQUIRE_VLLM=1`` (a vLLM that does not
   import fails instead of skipping): HF/vLLM agreement, weight sync (full, merged LoRA,
   adapter-only LoRA), stop strings, truncation, and a train + resume run, all on CUDA.
2. ``python -m agentrl.run`` for two iterations (the second is the warm one) with a Qwen2.5-0.5B
   shaped model built from a config (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864;
   the vocabulary is the locally trained tokenizer's, so no hub), bf16, ``rollout.backend=vllm``
   (sleep mode on): its rollout tokens/s (``perf/gen_tokens_per_s``, the whole rollout phase).
3. In process, the learner on the same architecture: PPO updates of 64 samples × 512 tokens;
   learner tokens/s (all tokens through forward and backward) and MFU = 6 · parameters ·
   tokens/s / the GPU's dense bf16 peak (attention FLOPs left out, so MFU is a lower bound).
4. Rollout modes on the same architecture with vLLM (:func:`rollout_mode_rows`): the job of
   stage 2 for 3 iterations with ``rollout.mode=lockstep``, ``rollout.mode=continuous``, and
   continuous with ``rollout.max_staleness=1``; episodes/s over iterations 2-3 and its ratio
   over lock-step, the learner's idle share, the staleness.

Without a CUDA device it stops at once with exit code 1 and says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from agentrl.bench._report import (
    SCRATCH,
    header,
    read_metrics,
    render,
    run_agentrl,
    write_markdown,
)

ARCH = {
    "model.arch": "qwen2",
    "model.hidden_size": 896,
    "model.num_layers": 24,
    "model.num_heads": 14,
    "model.num_kv_heads": 2,
    "model.intermediate_size": 4864,
    "model.dtype": "bfloat16",
}
PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "L4": 121.0}
"""Dense bf16 peaks (SXM parts; NVIDIA data sheets) by a substring of the device name."""
TEST_TIMEOUT_S, TRAIN_TIMEOUT_S, MODES_TIMEOUT_S = 240, 150, 120
MODES = (
    ("lock-step", ("rollout.mode=lockstep",)),
    ("continuous", ("rollout.mode=continuous",)),
    ("continuous, async k=1", ("rollout.mode=continuous", "rollout.max_staleness=1")),
)
"""Stage 4's rows: (label, overrides)."""


def _peak_tflops(name: str) -> float | None:
    for key, peak in PEAK_BF16_TFLOPS.items():
        if key in name:
            return peak
    return None


def _stage_tests() -> tuple[bool, str]:
    env = {**os.environ, "AGENTRL_REQUIRE_VLLM": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "vllm or gpu"]
    try:
        proc = subprocess.run(
            [*cmd, "tests/"], capture_output=True, text=True, timeout=TEST_TIMEOUT_S, env=env
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TEST_TIMEOUT_S} s"
    lines = [x for x in proc.stdout.splitlines() if x.strip()]
    summary = lines[-1] if lines else proc.stderr[-500:]
    return proc.returncode == 0, summary


def _train_overrides() -> list[str]:
    return [f"{k}={v}" for k, v in ARCH.items()] + [
        "rollout.backend=vllm",
        "rollout.vllm_gpu_memory_utilization=0.3",
        "rollout.max_new_tokens=32",
        "learner.lr=1e-5",
        "trainer.eval_every=0",
        "trainer.save_every=0",
        "trainer.progress=false",
    ]


def _stage_train(work: Path) -> tuple[bool, dict]:
    overrides = [*_train_overrides(), "trainer.steps=2"]
    out = work / "train"
    try:
        wall = run_agentrl(overrides, out, timeout=TRAIN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, {"error": f"timed out after {TRAIN_TIMEOUT_S} s"}
    except RuntimeError as exc:
        return False, {"error": str(exc)[-1500:]}
    rows = read_metrics(out)
    last = rows[-1]
    return True, {
        "wall_s": wall,
        "iterations": [
            {k: r[k] for k in ("perf/gen_tokens_per_s", "perf/rollout_s", "perf/learn_s")}
            for r in rows
            if "perf/rollout_s" in r
        ],
        "learn_response_tokens_per_s": last.get("perf/learn_tokens_per_s", float("nan")),
    }


def rollout_mode_rows(
    base: list[str], work: Path, iters: int = 3, timeout: float | None = MODES_TIMEOUT_S
) -> list[dict]:
    """One training run of ``base`` per row of :data:`MODES`; per run, over iterations 2..
    ``iters`` (the first holds the engine's warm-up): episodes/s (episodes over the summed
    iteration time), the learner's idle share (time waiting for the batch over the iteration
    time) and the mean staleness. A failed run gives a row with ``error``."""
    from agentrl.bench.async_staleness import episodes_per_iter

    per_iter = episodes_per_iter(base)
    rows = []
    for label, extra in MODES:
        out = work / label.replace(" ", "_").replace(",", "").replace("=", "")
        try:
            run_agentrl([*base, f"trainer.steps={iters}", *extra], out, timeout=timeout)
        except (subprocess.TimeoutExpired, RuntimeError) as exc:
            rows.append({"mode": label, "error": str(exc).strip().splitlines()[-1][:300]})
            continue
        metrics = [r for r in read_metrics(out) if r.get("iteration", 0) >= 2]
        wall = sum(r["perf/iteration_s"] for r in metrics)
        episodes = per_iter * len(metrics)
        rows.append(
            {
                "mode": label,
                "episodes_per_s": episodes / wall,
                "gen_tokens_per_s": sum(r["perf/decode_tokens"] for r in metrics) / wall,
                "learner_idle": sum(r["perf/rollout_s"] for r in metrics) / wall,
                "staleness": max(r.get("rollout/staleness_mean", 0.0) for r in metrics),
            }
        )
    return rows


def modes_markdown(rows: list[dict]) -> str:
    """Stage 4's table: ratios over the lock-step row."""
    base = next((r for r in rows if r["mode"] == "lock-step" and "error" not in r), None)
    lines = [
        "| mode | episodes/s | gen tokens/s | vs lock-step | learner idle | staleness |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['mode']} | FAILED: {r['error']} | | | | |")
            continue
        ratio = f"{r['episodes_per_s'] / base['episodes_per_s']:.2f}×" if base else "n/a"
        lines.append(
            f"| {r['mode']} | {r['episodes_per_s']:.2f} | {r['gen_tokens_per_s']:,.0f} | "
            f"{ratio} | {r['learner_idle']:.2f} | {r['staleness']:.2f} |"
        )
    return "\n".join(lines)


def _stage_learner() -> dict:
    import numpy as np

    from agentrl.learn.learner import Learner, LearnerConfig
    from agentrl.model import ModelConfig, banned_token_ids, build_tiny_model, build_tokenizer
    from agentrl.model.forward import Sample

    cfg = ModelConfig(**{k.removeprefix("model."): v for k, v in ARCH.items()})
    tok = build_tokenizer(["push the box up down left right # _ O X P"] * 50, cfg.vocab_size)
    torch.manual_seed(0)
    model = build_tiny_model(cfg, tok).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    rng = np.random.default_rng(0)
    vocab = len(tok)
    samples = [
        Sample(
            rng.integers(5, vocab, 448).tolist(),
            rng.integers(5, vocab, 64).tolist(),
            [-1.0] * 64,
            float(rng.choice([-1.0, 1.0])),
            group=k // 8,
        )
        for k in range(64)
    ]
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    learner = Learner(
        model,
        LearnerConfig(lr=1e-6, micro_batch_tokens=16384),
        tok.pad_token_id,
        banned_ids=banned_token_ids(tok),
    )
    learner.update(samples, rng)  # warm-up (allocator, kernels)
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        learner.update(samples, rng)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    per_s = tokens / float(np.median(times))
    name = torch.cuda.get_device_name()
    peak = _peak_tflops(name)
    achieved = 6.0 * n_params * per_s / 1e12
    return {
        "params": n_params,
        "tokens_per_update": tokens,
        "update_s": float(np.median(times)),
        "tokens_per_s": per_s,
        "tflops": achieved,
        "mfu": achieved / peak if peak else None,
        "peak_tflops": peak,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def _train_section(train: dict) -> str:
    rows = "\n".join(
        f"| {k} | {r['perf/gen_tokens_per_s']:,.0f} | {r['perf/rollout_s']:.2f} | "
        f"{r['perf/learn_s']:.2f} |"
        for k, r in enumerate(train["iterations"], start=1)
    )
    return render("gpu", "train", rows=rows, wall=f"{train['wall_s']:.0f}")


def _learner_section(learn: dict) -> str:
    mfu = "n/a (unknown peak)" if learn["mfu"] is None else f"{100 * learn['mfu']:.1f} %"
    return render(
        "gpu", "learner", params=f"{learn['params']:,}", tokens=f"{learn['tokens_per_update']:,}",
        update_s=f"{learn['update_s']:.2f}", tokens_per_s=f"{learn['tokens_per_s']:,.0f}",
        tflops=f"{learn['tflops']:.1f}", mfu=mfu, memory=f"{learn['peak_memory_gib']:.1f}",
    )  # fmt: skip


def run(out_dir: str = SCRATCH, quick: bool = False) -> Path:
    if not torch.cuda.is_available():
        raise SystemExit(
            "python -m agentrl.bench gpu: no CUDA device (torch.cuda.is_available() is False, "
            f"torch {torch.__version__}). Run it on a GPU machine with a CUDA build of torch "
            'and vLLM: pip install -e ".[dev,vllm]". Nothing was written.'
        )
    out = Path(out_dir)
    work = out / ".gpu_runs"
    t_all = time.perf_counter()
    ok_tests, tests = _stage_tests()
    print(f"1. tests: {'ok' if ok_tests else 'FAILED'}: {tests}", flush=True)
    ok_train, train = _stage_train(work)
    print(f"2. training: {'ok' if ok_train else 'FAILED'}", flush=True)
    try:
        learn, ok_learn = _stage_learner(), True
    except Exception as exc:
        learn, ok_learn = {"error": f"{type(exc).__name__}: {exc}"}, False
    print(f"3. learner: {'ok' if ok_learn else 'FAILED'}", flush=True)
    modes = rollout_mode_rows(_train_overrides(), work / "modes")
    ok_modes = all("error" not in r for r in modes)
    print(f"4. rollout modes: {'ok' if ok_modes else 'FAILED'}", flush=True)

    device = f"GPU: {torch.cuda.get_device_name()}"
    head = header(
        ("torch", "transformers", "vllm"), "python -m agentrl.bench gpu", quick, "", device
    )
    text = render(
        "gpu",
        head=head,
        wall=f"{time.perf_counter() - t_all:.0f}",
        tests=f"{'passed' if ok_tests else 'FAILED'}: `{tests}`",
        train=_train_section(train) if ok_train else f"FAILED: ```{train['error']}```",
        learner=_learner_section(learn) if ok_learn else f"FAILED: {learn['error']}",
        modes=modes_markdown(modes),
    )
    path = write_markdown(out / "gpu.md", text + "\n")
    print(f"wrote {path}")
    if not (ok_tests and ok_train and ok_learn and ok_modes):
        raise SystemExit(1)
    return path
