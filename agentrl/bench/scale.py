"""Scale-out benchmark: one process vs two torchrun ranks, and the env pools (``scale.md``).

Part 1 runs the default job (Sokoban, GRPO, tiny model) with the same global batch once as a
plain process and once as ``torchrun --nproc_per_node=2`` (gloo, DDP, one thread per rank),
and reports per iteration: environment steps/s and generated tokens/s of the rollout, learner
tokens/s, and seconds per iteration, with the scaling efficiency (speed-up / 2). On a 2-core
machine the ceiling is 2x and anything else running eats into it; the load is recorded.
Part 2 is :mod:`agentrl.bench.scale_pools`: ALFWorld stepped inline, in worker processes and in
Ray actors, same games and commands.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.bench._report import SCRATCH, header, read_metrics, run_agentrl, write_markdown

SETTINGS = [
    "trainer.eval_every=0",
    "trainer.progress=false",
    "rollout.n_tasks=8",
    "rollout.group_size=8",
]


def _run(world: int, steps: int, out: Path) -> dict[str, float]:
    """Median per-iteration figures (iteration 1, the warm-up, left out) of one run."""
    launcher = []
    if world > 1:
        launcher = ["torch.distributed.run", "--standalone", f"--nproc_per_node={world}", "-m"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run_agentrl([*SETTINGS, f"trainer.steps={steps}"], out, launcher=launcher, env=env)
    rows = read_metrics(out)[1:]
    n_eps = 8 * 8

    def med(fn) -> float:
        return statistics.median(fn(r) for r in rows)

    return {
        "env_steps_per_s": med(lambda r: r["env/length"] * n_eps / r["perf/rollout_s"]),
        "gen_tokens_per_s": med(lambda r: r["perf/gen_tokens_per_s"]),
        "learn_tokens_per_s": med(lambda r: r["perf/learn_tokens_per_s"]),
        "iteration_s": med(lambda r: r["perf/iteration_s"]),
    }


def run(
    out_dir: str | os.PathLike = SCRATCH,
    quick: bool = False,
    log: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """Measure both parts and write ``<out_dir>/scale.md``."""
    from agentrl.bench.scale_pools import SECTION, measure_pools, pools_section

    steps = 3 if quick else 6
    tmp = Path(tempfile.mkdtemp(prefix="agentrl-scale-"))
    figures: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    loads = []
    for r in range(1 if quick else 2):  # alternate, so a drift of the load hits both
        for world in (1, 2):
            t0 = time.perf_counter()
            figures[world].append(_run(world, steps, tmp / f"w{world}-r{r}"))
            loads.append(os.getloadavg()[0])
            log(f"[scale] world {world} run {r}: {time.perf_counter() - t0:.0f} s")
    keys = ("env_steps_per_s", "gen_tokens_per_s", "learn_tokens_per_s", "iteration_s")
    med = {w: {k: statistics.median(f[k] for f in figures[w]) for k in keys} for w in (1, 2)}
    lines = [
        "# Scale-out",
        "",
        *header(("torch", "ray"), "python -m agentrl.bench scale", quick),
        "",
        "## One process vs two torchrun ranks (CPU, gloo, DDP)",
        "",
        f"The default job (Sokoban 6x6, GRPO, tiny model) with the same global batch: 8 tasks x "
        f"8 rollouts per iteration, {steps} iterations, the first left out; one torch thread per "
        "process. Two ranks each roll out 4 tasks and train on their steps; credit is computed "
        "on the gathered batch. Medians over iterations and runs; load average during the runs "
        f"{min(loads):.1f}-{max(loads):.1f}.",
        "",
        "| figure | 1 process | 2 ranks | speed-up | efficiency |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {
        "env_steps_per_s": "env steps/s (rollout)",
        "gen_tokens_per_s": "generated tokens/s",
        "learn_tokens_per_s": "learner tokens/s",
        "iteration_s": "s / iteration",
    }
    for k in keys:
        one, two = med[1][k], med[2][k]
        speed = one / two if k == "iteration_s" else two / one
        lines.append(f"| {names[k]} | {one:,.1f} | {two:,.1f} | {speed:.2f}x | {speed / 2:.0%} |")
    lines += [
        "",
        "Two ranks on two cores can at best halve the time; the rollout loop's Python work, "
        "the gather of the credit inputs and the gradient all-reduce are the overhead, and any "
        "other process on the machine takes its share of the same two cores. Multi-GPU figures "
        "need a GPU machine (`python -m agentrl.bench gpu` covers one GPU).",
        "",
        f"## {SECTION}",
        "",
    ]
    rows = measure_pools(quick, log)
    lines.append(pools_section(rows))
    path = write_markdown(Path(out_dir) / "scale.md", "\n".join(lines).rstrip() + "\n")
    log(f"[scale] wrote {path}")
    return {"world": med, "pools": rows}
