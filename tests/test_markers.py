"""Every test that launches a training run carries the ``slow`` marker, so that
``python -m pytest -q -m "not slow"`` is a fast loop that trains nothing.

Test modules are read with ``ast`` (tests/bench included), so a new test cannot slip past. A
test launches a run when it, a module-level function it calls, or a fixture it takes (from its
module or a conftest.py above it) does one of:

- calls ``train(cfg, out_dir)``, ``run_agentrl(...)``, ``train_sft(...)`` or ``torchrun(...)``;
- builds a command list with ``"-m", "agentrl.run"`` (or ``agentrl.sft``,
  ``torch.distributed.run``), directly or through a module-level name such as ``RUN``;
- builds a ``Trainer(...)`` and calls ``.run()`` or ``.iteration()``.

A test that replaces ``subprocess.run``/``Popen`` with a fake (``monkeypatch.setattr``) launches
no process, so its command lists do not count. The marker may sit on the function, its class or
the module (``pytestmark``).
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# Entry points called by name: the least number of arguments a launching call has
# (``train(cfg, out_dir)``; ``model.train()`` puts a torch module in training mode).
LAUNCHERS = {"train": 2, "run_agentrl": 1, "train_sft": 1, "torchrun": 1}
# Launchers that start a process: a faked ``subprocess`` makes them harmless.
PROCESS_LAUNCHERS = {"run_agentrl", "torchrun"}
MODULES = {"agentrl.run", "agentrl.sft", "torch.distributed.run"}
STEPPERS = {"run", "iteration"}


@dataclass
class Facts:
    """What one function does by itself (before following its calls and fixtures)."""

    trains: bool = False  # an in-process training call: train(...), train_sft(...)
    spawns: bool = False  # a process: run_agentrl(...), torchrun(...), a "-m" command list
    builds_trainer: bool = False
    steps: bool = False
    fakes_subprocess: bool = False
    calls: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    params: list[str] = field(default_factory=list)


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_command(node: ast.AST) -> bool:
    """A list or tuple literal holding ``"-m"`` directly followed by a training module."""
    if not isinstance(node, (ast.List, ast.Tuple)):
        return False
    items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
    return any(a == "-m" and b in MODULES for a, b in itertools.pairwise(items))


def _fakes_subprocess(call: ast.Call) -> bool:
    """``monkeypatch.setattr(<...>subprocess, "run"|"Popen", ...)`` or the dotted form."""
    if _name(call.func) != "setattr" or not call.args:
        return False
    args = [a.value if isinstance(a, ast.Constant) else a for a in call.args]
    if isinstance(args[0], str):
        return args[0] in ("subprocess.run", "subprocess.Popen")
    target = _name(args[0]) if isinstance(args[0], ast.expr) else None
    return target == "subprocess" and len(args) > 1 and args[1] in ("run", "Popen")


def facts_of(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Facts:
    f = Facts(params=[a.arg for a in fn.args.args + fn.args.kwonlyargs])
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            n_args = len(node.args) + len(node.keywords)
            if name in LAUNCHERS and n_args >= LAUNCHERS[name]:
                if name in PROCESS_LAUNCHERS:
                    f.spawns = True
                else:
                    f.trains = True
            if name == "Trainer":
                f.builds_trainer = True
            if isinstance(node.func, ast.Attribute) and name in STEPPERS and n_args == 0:
                f.steps = True
            if isinstance(node.func, ast.Name):
                f.calls.add(node.func.id)
            f.fakes_subprocess |= _fakes_subprocess(node)
        elif _is_command(node):
            f.spawns = True
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            f.names.add(node.id)
    return f


def _is_slow(decorators: list[ast.expr]) -> bool:
    for d in decorators:
        d = d.func if isinstance(d, ast.Call) else d
        if isinstance(d, ast.Attribute) and d.attr == "slow":
            return True
    return False


def _module_is_slow(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            value = node.value
            marks = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
            if _is_slow(marks):
                return True
    return False


def _is_fixture(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for d in fn.decorator_list:
        d = d.func if isinstance(d, ast.Call) else d
        if _name(d) == "fixture":
            return True
    return False


def _command_names(tree: ast.Module) -> set[str]:
    """Module-level names bound to a launching command (or built from one)."""
    bound: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    bound[t.id] = node.value
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, value in bound.items():
            if name in names:
                continue
            nodes = list(ast.walk(value))
            if any(_is_command(n) for n in nodes) or any(
                isinstance(n, ast.Name) and n.id in names for n in nodes
            ):
                names.add(name)
                changed = True
    return names


class Module:
    """The functions and fixtures of one file, and which of them launch a run."""

    def __init__(self, source: str, fixtures: dict[str, bool] | None = None):
        self.tree = ast.parse(source)
        self.commands = _command_names(self.tree)
        self.functions: dict[str, Facts] = {}
        self.fixture_names: set[str] = set()
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = facts_of(node)
                if _is_fixture(node):
                    self.fixture_names.add(node.name)
        self.outer_fixtures = fixtures or {}
        self._memo: dict[str, tuple[bool, bool, bool]] = {}

    def _closure(self, name: str, facts: Facts, seen: frozenset[str]) -> tuple[bool, bool, bool]:
        """(launches, builds a Trainer, steps one) for ``facts``, following module functions."""
        spawns = facts.spawns or bool(facts.names & self.commands)
        launches = facts.trains or (spawns and not facts.fakes_subprocess)
        builds, steps = facts.builds_trainer, facts.steps
        for callee in facts.calls - seen:
            if callee in self.functions and callee not in self.fixture_names:
                a, b, c = self.closure(callee, seen | {name})
                launches, builds, steps = launches or a, builds or b, steps or c
        for param in facts.params:
            if param in self.fixture_names and param not in seen:
                launches |= self.closure(param, seen | {name})[0]
            elif param not in self.fixture_names:
                launches |= self.outer_fixtures.get(param, False)
        return launches or (builds and steps), builds, steps

    def closure(self, name: str, seen: frozenset[str] = frozenset()) -> tuple[bool, bool, bool]:
        if name not in self._memo:
            self._memo[name] = self._closure(name, self.functions[name], seen)
        return self._memo[name]

    def launching_fixtures(self) -> dict[str, bool]:
        return {name: self.closure(name)[0] for name in self.fixture_names}

    def unmarked(self) -> list[str]:
        """Names of the tests that launch a run without the slow marker."""
        if _module_is_slow(self.tree):
            return []
        bad = []
        for node in self.tree.body:
            tests: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool]] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                tests.append((node, False))
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                slow_class = _is_slow(node.decorator_list)
                tests += [
                    (m, slow_class)
                    for m in node.body
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                ]
            for fn, slow in tests:
                if not fn.name.startswith("test") or slow or _is_slow(fn.decorator_list):
                    continue
                if node is fn:  # a module-level test
                    launches = self.closure(fn.name)[0]
                else:  # a method: its own facts, module functions and fixtures
                    launches = self._closure(fn.name, facts_of(fn), frozenset())[0]
                if launches:
                    bad.append(fn.name)
        return bad


def unmarked_tests(root: Path = TESTS) -> list[str]:
    """``path::name`` of every test under ``root`` that launches a run without ``slow``."""
    conftest: dict[Path, dict[str, bool]] = {}
    for path in sorted(root.rglob("conftest.py")):
        conftest[path.parent] = Module(path.read_text()).launching_fixtures()
    bad = []
    for path in sorted(root.rglob("test_*.py")):
        fixtures: dict[str, bool] = {}
        for folder in sorted(conftest, key=lambda p: len(p.parts)):
            if folder == path.parent or folder in path.parents:
                fixtures.update(conftest[folder])
        module = Module(path.read_text(), fixtures)
        rel = path.relative_to(root.parent) if root.parent in path.parents else path
        bad += [f"{rel}::{name}" for name in module.unmarked()]
    return bad


SYNTHETIC = """
import subprocess, sys
import pytest

RUN = [sys.executable, "-m", "agentrl.run"]
ONE = [*RUN, "trainer.steps=1"]

def _cmd(out):
    return [*ONE, f"trainer.out_dir={out}"]

def _trainer(cfg):
    return Trainer(cfg, "out", None, "cpu")

@pytest.fixture
def finished_run(tmp_path):
    run_agentrl(["trainer.steps=1"], tmp_path)
    return tmp_path

def test_train_in_process(tmp_path):
    train(compose([]), tmp_path)

def test_cli_through_a_helper(tmp_path):
    subprocess.run(_cmd(tmp_path))

def test_sft_module():
    subprocess.run([sys.executable, "-m", "agentrl.sft", "sft.steps=1"])

def test_trainer_iteration():
    _trainer(None).iteration()

def test_uses_a_launching_fixture(finished_run):
    assert finished_run

def test_uses_a_conftest_fixture(full_run):
    assert full_run

class TestGrouped:
    def test_method(self, tmp_path):
        train_sft(None, None, tmp_path)

@pytest.mark.slow
def test_marked(tmp_path):
    train(compose([]), tmp_path)

def test_module_train_mode(model):
    model.train()

def test_trainer_built_only():
    _trainer(None)

def test_argv_is_no_launch(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["agentrl.run", "foo=1"])

def test_faked_subprocess(monkeypatch, tmp_path):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: None)
    run_agentrl(["a=1"], tmp_path)
"""


def test_the_guard_finds_unmarked_launches_and_only_those():
    module = Module(SYNTHETIC, fixtures={"full_run": True, "tmp_path": False})
    assert module.unmarked() == [
        "test_train_in_process",
        "test_cli_through_a_helper",
        "test_sft_module",
        "test_trainer_iteration",
        "test_uses_a_launching_fixture",
        "test_uses_a_conftest_fixture",
        "test_method",
    ]
    assert Module("import pytest\npytestmark = [pytest.mark.slow]\n" + SYNTHETIC).unmarked() == []


def test_the_guard_reads_files_and_conftest_fixtures(tmp_path):
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "conftest.py").write_text(
        "import pytest\n@pytest.fixture\ndef done(tmp_path):\n    train(cfg, tmp_path)\n"
    )
    (tmp_path / "tests" / "sub" / "test_x.py").write_text(
        "def test_a(done):\n    pass\n\ndef test_b(tmp_path):\n    pass\n"
    )
    assert unmarked_tests(tmp_path / "tests") == ["tests/sub/test_x.py::test_a"]


def test_every_test_that_launches_a_run_is_marked_slow():
    assert unmarked_tests() == []
