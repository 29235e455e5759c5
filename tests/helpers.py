"""Small builders shared by tests."""

from __future__ import annotations

import tempfile
from pathlib import Path

import agentrl
from agentrl.credit.batch import Step, StepBatch, Trajectory, TrajectoryGroup

# Generated ALFWorld games for tests: few per split, cached across runs (generation is
# deterministic for a seed, so a stale cache cannot differ from a fresh one).
ALFWORLD_TEST_CACHE = str(Path(tempfile.gettempdir()) / "agentrl-test-alfworld")
# A small generated WebShop catalogue, cached the same way.
WEBSHOP_TEST_CACHE = str(Path(tempfile.gettempdir()) / "agentrl-test-webshop")
ENV_TEST_KWARGS: dict[str, dict] = {
    "alfworld": {"generated_games": 2, "cache_dir": ALFWORLD_TEST_CACHE, "progress": False},
    "webshop": {"num_products": 200, "eval_goals": 50, "cache_dir": WEBSHOP_TEST_CACHE},
}


def make_env(name: str, **kwargs):
    """``agentrl.make(name)`` with the small test settings of environments that need them."""
    if name == "alfworld":
        import pytest

        pytest.importorskip("alfworld", reason="the alfworld extra is not installed")
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
