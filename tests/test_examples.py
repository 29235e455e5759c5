"""The README's plugin example (examples/doors): the code shown is the code tested, the entry
points load it as an installed package would, it keeps the env and estimator contracts, and
the environment learns visibly with the README's command settings."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
import sys
from pathlib import Path

import pytest

from agentrl.credit import estimators as estimator_registry
from agentrl.credit.contract import check_estimator

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "doors"


def fenced_blocks(text: str) -> list[str]:
    """The contents of every fenced code block of a Markdown text."""
    return [m.group(2) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


@pytest.mark.parametrize(
    "path", ["agentrl_doors/env.py", "agentrl_doors/credit.py", "pyproject.toml"]
)
def test_the_readme_shows_the_example_files_exactly(path):
    blocks = fenced_blocks((ROOT / "README.md").read_text())
    assert (EXAMPLE / path).read_text() in blocks, f"README.md no longer shows {path} as it is"


@pytest.fixture
def win_loo():
    """The example's estimator, registered for one test only (other tests check that every
    registered estimator is documented and benchmarked)."""
    sys.modules.pop("agentrl_doors.credit", None)
    importlib.import_module("agentrl_doors.credit")
    yield "win_loo"
    estimator_registry._ESTIMATORS.pop("win_loo", None)
    sys.modules.pop("agentrl_doors.credit", None)


def test_entry_points_load_the_plugin_as_installed(monkeypatch):
    """The entry points of examples/doors/pyproject.toml, as importlib.metadata would list them
    for the installed package, register both names through agentrl's plugin loading."""
    from agentrl import registry

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    meta = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]["entry-points"]
    eps = {
        group: [importlib.metadata.EntryPoint(n, v, group) for n, v in table.items()]
        for group, table in meta.items()
    }
    assert set(eps) == {"agentrl.envs", "agentrl.algos"}
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: eps.get(group, []))
    monkeypatch.setattr(registry, "_LOADED_GROUPS", set())
    for module in ("agentrl_doors.credit", "agentrl_doors.env"):  # imported afresh
        sys.modules.pop(module, None)
    try:
        registry.load_plugins("agentrl.algos")
        registry.load_plugins("agentrl.envs")
        assert "win_loo" in estimator_registry.list_estimators()
        assert "doors" in registry.list_envs()
    finally:
        estimator_registry._ESTIMATORS.pop("win_loo", None)
        sys.modules.pop("agentrl_doors.credit", None)


def test_the_example_estimator_keeps_the_contract(win_loo):
    assert "group order" in check_estimator(win_loo)


def test_the_example_estimator_golden_values(win_loo):
    """One group of four: wins 1, 0, 0, 1; leave-one-out means 1/3, 2/3, 2/3, 1/3."""
    import numpy as np

    from agentrl.credit import StepBatch, compute_advantages

    won = np.array([True, False, False, True])
    batch = StepBatch(
        step_reward=won.astype(float),
        step_traj=np.arange(4),
        step_t=np.zeros(4, dtype=int),
        step_anchor=np.zeros(4, dtype=int),
        step_action=np.zeros(4, dtype=int),
        step_valid=np.ones(4, dtype=bool),
        step_terminated=won,
        step_truncated=~won,
        step_nll=np.zeros(4),
        traj_group=np.zeros(4, dtype=int),
        traj_won=won,
        n_groups=1,
    )
    adv = compute_advantages(win_loo, batch).step
    np.testing.assert_allclose(adv, [2 / 3, -2 / 3, -2 / 3, 2 / 3])


def test_reregistering_the_same_definition_is_harmless_and_another_is_refused():
    """Environments and estimators follow one rule: a module imported again registers the same
    definition (accepted); another definition under a taken name is refused."""
    import agentrl_doors.env as env_module

    from agentrl import register_env
    from agentrl.credit import register_estimator

    importlib.reload(env_module)  # the same definitions, new objects
    with pytest.raises(ValueError, match="already registered"):
        register_env("doors", "agentrl_doors/Doors-v0", entry_point=dict)
    import agentrl.algos.grpo as grpo_module

    importlib.reload(grpo_module)
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("grpo")(lambda batch, graph, cfg: None)


@pytest.mark.slow
def test_the_example_environment_learns_with_the_default_settings(tmp_path):
    """`python -m agentrl.run env=doors` (the README's command), in process: held-out success
    from 0 untrained (no door number) to 0.5 or more: door 2 first wins 0.6 of the time, a
    uniform guess 1/3 (two uniform tries 0.56 at most, with invalid answers much less)."""
    from agentrl.run.cli import compose
    from agentrl.run.trainer import train

    train(compose(["env=doors", "trainer.progress=false"]), tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = {r["iteration"]: r["eval/success"] for r in rows if "eval/success" in r}
    assert evals[0] < 0.1  # untrained: not even a door number
    assert evals[20] >= 0.5  # it prefers door 2
