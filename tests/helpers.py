"""Small builders shared by tests."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import agentrl
from agentrl.credit.batch import Step, StepBatch, Trajectory, TrajectoryGroup
from agentrl.rollout import Generation

# Gym namespaces of the environments that benchmarks and tests define as fixtures. They register
# when their module is imported, so whether a loop over the registry meets them would depend on
# which tests pytest collected first, and they break the contract on purpose (workers that die,
# judges that sleep seconds).
FIXTURE_NAMESPACES = ("agentrl-bench/", "agentrl-test/")


def product_envs() -> list[str]:
    """The registered environments a suite that loops over the registry checks: the bundled
    ones, the adapters and plugins, not the fixtures (:data:`FIXTURE_NAMESPACES`)."""
    from agentrl.registry import env_spec

    return [n for n in agentrl.list_envs() if not env_spec(n).env_id.startswith(FIXTURE_NAMESPACES)]


# Generated ALFWorld games for tests: few per split, cached across runs (generation is
# deterministic for a seed, so a stale cache cannot differ from a fresh one).
ALFWORLD_TEST_CACHE = str(Path(tempfile.gettempdir()) / "agentrl-test-alfworld")
# A small generated WebShop catalogue, cached the same way.
WEBSHOP_TEST_CACHE = str(Path(tempfile.gettempdir()) / "agentrl-test-webshop")
ENV_TEST_KWARGS: dict[str, dict] = {
    "alfworld": {"generated_games": 2, "cache_dir": ALFWORLD_TEST_CACHE, "progress": False},
    "webshop": {"num_products": 200, "eval_goals": 50, "cache_dir": WEBSHOP_TEST_CACHE},
    "openenv": {"local": "sokoban"},
    # Sokoban offered to GEM and back (agentrl.interop.gem), with Sokoban's own step limit.
    "gem": {"id": "agentrl/sokoban", "max_steps": 15},
}


def make_env(name: str, **kwargs):
    """``agentrl.make(name)`` with the small test settings of environments that need them."""
    if name in ("alfworld", "gem"):
        import pytest

        pytest.importorskip(name, reason=f"the {name} extra is not installed")  # its package
    return agentrl.make(name, **{**ENV_TEST_KWARGS.get(name, {}), **kwargs})


def make_groups(spec: list[list[list[tuple]]]) -> list[TrajectoryGroup]:
    """Groups from ``spec[g][i] = [(anchor, action, reward), ...]``; the last step terminates."""
    groups = []
    for g, trajs in enumerate(spec):
        group = TrajectoryGroup(task=f"task {g}", seed=g)
        for steps in trajs:
            tr = Trajectory()
            for t, (anchor, action, reward) in enumerate(steps):
                last = t == len(steps) - 1
                tr.steps.append(
                    Step(
                        prompt_ids=[1],
                        response_ids=[2],
                        logprobs=[-0.5],
                        reward=float(reward),
                        terminated=last,
                        truncated=False,
                        anchor=anchor,
                        action=action,
                        valid=action is not None,
                    )
                )
            tr.won = steps[-1][2] > 0
            group.trajectories.append(tr)
        groups.append(group)
    return groups


def make_batch(spec) -> StepBatch:
    return StepBatch.from_groups(make_groups(spec))


def alfworld_games(n: int = 6, split: str = "train") -> list[str]:
    """``n`` generated ALFWorld games (task types cycled, so 6 cover all six), cached."""
    import pytest

    pytest.importorskip("alfworld", reason="the alfworld extra is not installed")
    from agentrl.envs.alfworld.data import generated_games

    return generated_games(ALFWORLD_TEST_CACHE, split, n, 0, (1, 2, 3, 4, 5, 6), progress=False)


def python_lines(fn):
    """``(fn(), lines)``: the result of ``fn()`` and how many Python lines it executed.

    A deterministic measure of work for tests that must not time (numpy's compiled loops
    count as one line each): the same inputs always give the same count.
    """
    lines = 0

    def local(frame, event, arg):
        nonlocal lines
        if event == "line":
            lines += 1
        return local

    old = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local)
    try:
        result = fn()
    finally:
        sys.settrace(old)
    return result, lines


def read_metrics(out_dir: Path) -> list[dict]:
    """The rows of a run's ``out_dir / "metrics.jsonl"``, one dict per line, in order."""
    return [json.loads(x) for x in (Path(out_dir) / "metrics.jsonl").read_text().splitlines()]


def run_agentrl(
    args: list[str],
    out_dir: Path,
    *,
    hydra_dir: Path | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    launcher: list[str] | None = None,
) -> list[dict]:
    """Run ``python -m agentrl.run *args`` in a subprocess writing to ``out_dir``; its metrics.

    Appends ``trainer.out_dir=<out_dir>`` and ``hydra.run.dir=<hydra_dir>`` (default
    ``<out_dir>/hydra``) to ``args``. ``launcher`` replaces the ``python`` in front of
    ``-m agentrl.run`` (e.g. ``[sys.executable, "-m", "torch.distributed.run", ...]``).
    Asserts the run exits with 0 (the message is the tail of its output) and returns
    :func:`read_metrics` of ``out_dir``.
    """
    hydra_dir = Path(out_dir) / "hydra" if hydra_dir is None else hydra_dir
    cmd = [*(launcher or [sys.executable]), "-m", "agentrl.run", *args]
    cmd += [f"trainer.out_dir={out_dir}", f"hydra.run.dir={hydra_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return read_metrics(out_dir)


class ScriptedBackend:
    """Answers every prompt with the next scripted text (a stand-in for a model)."""

    def __init__(self, answers):
        self.answers = iter(answers)
        self.calls = []

    def generate(self, prompts, sampling):
        self.calls.append(len(prompts))
        out = []
        for _ in prompts:
            text = next(self.answers)
            out.append(
                Generation(token_ids=[7] * len(text), logprobs=[-1.0] * len(text), text=text)
            )
        return out


def _random_bytes_text(seed: int) -> str:
    raw = np.random.default_rng(seed).integers(0, 256, size=300, dtype=np.uint8).tobytes()
    return raw.decode("utf-8", errors="replace")


# Inputs that are no action in any environment's grammar.
GARBAGE = [
    "",
    "   \n\t ",
    "qz" * 5000,  # 10k characters
    "↑↓←→ 上へ移動 🚀 ∀x∃y",
    _random_bytes_text(0),
    _random_bytes_text(1),
    "<action></action>",
    "\x00\x01\x02",
]


def check_info(info: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        assert key in info, f"info lacks {key!r}"
    hash(info["anchor"])
    assert isinstance(info["won"], bool)
    adm = info["admissible_actions"]
    assert adm is None or (isinstance(adm, list) and all(isinstance(a, str) for a in adm))
    assert isinstance(info["task"], str) and info["task"]
