"""The dependency rule of the layout (DESIGN.md): envs -> core <- algos, bench above all.

Imports are read with ``ast`` from every module, so a new file cannot slip past: no core module
(``agentrl/`` outside ``agentrl/bench/``) imports ``agentrl.algos`` or ``agentrl.envs``, no
method imports an environment, no environment imports a method. Loading a plugin group by name
(``load_plugins("agentrl.algos")``) is a string, not an import, and stays allowed.
"""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path, package: str) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def modules_under(folder: Path, package: str) -> list[tuple[Path, str]]:
    out = []
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).with_suffix("")
        parts = [package, *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        # the package a relative import is resolved against
        pkg = ".".join(parts if path.name == "__init__.py" else parts[:-1])
        out.append((path, pkg))
    return out


def offenders(folder: Path, package: str, forbidden: tuple[str, ...], skip: str = "") -> list:
    bad = []
    for path, pkg in modules_under(folder, package):
        if skip and skip in path.relative_to(ROOT).parts:
            continue
        for name in imported_modules(path, pkg):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    return bad


def test_imported_modules_resolves_relative_and_from_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import agentrl.envs.sokoban\nfrom . import x\nfrom ..algos import grpo\n")
    names = imported_modules(f, "agentrl.credit")
    assert {"agentrl.envs.sokoban", "agentrl.credit.x", "agentrl.algos.grpo"} <= names


def test_core_imports_no_method_and_no_environment():
    assert offenders(ROOT / "agentrl", "agentrl", ("agentrl.algos", "agentrl.envs"), "bench") == []


def test_methods_import_no_environment():
    assert offenders(ROOT / "algos", "agentrl.algos", ("agentrl.envs",)) == []


def test_environments_import_no_method():
    assert offenders(ROOT / "envs", "agentrl.envs", ("agentrl.algos",)) == []


def test_the_rule_catches_a_violation(tmp_path):
    core = tmp_path / "core"
    core.mkdir()
    (core / "bad.py").write_text("from agentrl.algos.grpo import grpo\n")
    (core / "ok.py").write_text("from agentrl.credit import StepBatch\n")
    bad = []
    for path, pkg in modules_under(core, "agentrl"):
        bad += [n for n in imported_modules(path, pkg) if n.startswith("agentrl.algos")]
    assert set(bad) == {"agentrl.algos.grpo", "agentrl.algos.grpo.grpo"}


def test_top_level_is_small():
    modules = [p.name for p in (ROOT / "agentrl").glob("*.py")]
    assert len(modules) <= 8, modules
    assert not list((ROOT / "agentrl").glob("ac2*.py"))


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("agentrl.batch", "agentrl.credit.batch", "StepBatch"),
        ("agentrl.learner", "agentrl.learn.learner", "Learner"),
        ("agentrl.trainer", "agentrl.run.trainer", "train"),
        ("agentrl.runconfig", "agentrl.run.config", "RunConfig"),
        ("agentrl.ac2", "agentrl.algos.ac2.core", "AC2Config"),
        ("agentrl.env_pool", "agentrl.rollout.env_pool", "InlinePool"),
        ("agentrl.learn.model", "agentrl.model.build", "ModelConfig"),
        ("agentrl.learn.scoring", "agentrl.model.scoring", "PolicyScorer"),
    ],
)
def test_old_import_paths_still_work_with_a_warning(old, new, name):
    import sys

    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)
    assert getattr(mod, name) is getattr(importlib.import_module(new), name)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)


def test_public_api_is_where_it_was():
    import agentrl
    from agentrl.credit import StepBatch, TrajectoryGraph, compute_advantages, register_estimator
    from agentrl.run import main

    assert callable(agentrl.make) and callable(agentrl.register_env)
    assert callable(register_estimator) and callable(compute_advantages) and callable(main)
    assert StepBatch.__module__ == "agentrl.credit.batch"
    assert TrajectoryGraph.__module__ == "agentrl.credit.graph"


# -- the stage order (DESIGN: envs -> core <- algos; inside the core, one direction) ---------
# Each room may import the ground floor (agentrl/*.py) and the rooms listed for it, no others.
ROOMS = ("model", "credit", "rollout", "learn", "run", "interop", "report", "bench")
ALLOWED = {
    "model": set(),
    "credit": set(),
    "rollout": {"model", "credit"},
    "learn": {"model", "credit"},
    "run": {"model", "credit", "rollout", "learn"},
    "interop": {"model", "credit", "rollout", "learn", "run"},
    "report": {"credit"},
    "bench": set(ROOMS) - {"bench"},
}


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "agentrl" and parts[1] in ROOMS else None


def stage_offenders(root: Path) -> list[str]:
    bad = []
    for room in ROOMS:
        folder = root / "agentrl" / room
        if not folder.exists():
            continue
        for path, pkg in modules_under(folder, f"agentrl.{room}"):
            for name in imported_modules(path, pkg):
                other = room_of(name)
                if other and other != room and other not in ALLOWED[room]:
                    bad.append(f"{path.relative_to(root)} imports {name}")
    return bad


def test_rooms_import_in_stage_order():
    assert stage_offenders(ROOT) == []


def test_nothing_outside_bench_imports_bench():
    folders = [(ROOT / "algos", "agentrl.algos"), (ROOT / "envs", "agentrl.envs")]
    folders += [
        (p, f"agentrl.{p.name}")
        for p in (ROOT / "agentrl").iterdir()
        if p.is_dir() and p.name != "bench" and not p.name.startswith("_")
    ]
    bad = []
    for folder, pkg in folders:
        bad += offenders(folder, pkg, ("agentrl.bench",))
    assert bad == []


def private_imports(folder: Path, package: str) -> list[str]:
    """``from agentrl.x import _name`` where ``_name`` is private to another module: a name
    with a leading underscore is its module's own, so only that module (and, for a private
    submodule, its package) may use it."""
    bad = []
    for path, pkg in modules_under(folder, package):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module and not node.level):
                continue
            if not node.module.startswith("agentrl") or node.module == pkg:
                continue  # third-party internals are their business; a package's own modules
            for alias in node.names:
                if alias.name.startswith("_") and alias.name != "__version__":
                    bad.append(f"{path.relative_to(ROOT)} imports {node.module}.{alias.name}")
    return bad


def test_no_private_name_crosses_a_module_boundary():
    bad = private_imports(ROOT / "agentrl", "agentrl")
    bad += private_imports(ROOT / "algos", "agentrl.algos")
    bad += private_imports(ROOT / "envs", "agentrl.envs")
    assert bad == []


def test_the_stage_rule_catches_a_violation(tmp_path):
    (tmp_path / "agentrl" / "credit").mkdir(parents=True)
    (tmp_path / "agentrl" / "credit" / "bad.py").write_text("from agentrl.learn import Learner\n")
    (tmp_path / "agentrl" / "rollout").mkdir()
    (tmp_path / "agentrl" / "rollout" / "bad.py").write_text("import agentrl.learn.learner\n")
    (tmp_path / "agentrl" / "learn").mkdir()
    (tmp_path / "agentrl" / "learn" / "ok.py").write_text("from agentrl.model import forward\n")
    found = stage_offenders(tmp_path)
    assert len(found) == 3  # learn, learn.Learner from credit; learn.learner from rollout
    assert not any("ok.py" in f for f in found)


def test_the_old_import_paths_go_away_in_0_3():
    """_moved.py keeps 0.1's and 0.2.0's module paths working "until the next release": at 0.3
    it must be gone (and this test with it)."""
    from packaging.version import Version

    import agentrl

    if Version(agentrl.__version__) >= Version("0.3"):
        assert not (ROOT / "agentrl" / "_moved.py").exists(), "remove agentrl/_moved.py in 0.3"
