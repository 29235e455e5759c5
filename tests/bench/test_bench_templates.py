"""The reports' templates (``agentrl/bench/templates``): every placeholder gets a value, every
block the code renders exists, and the templates ship with the package."""

from __future__ import annotations

import ast
import contextlib
import re
from pathlib import Path
from string import Template

import numpy as np
import pytest

from agentrl.bench import _report, env_speed, gpu, learner_speed, scale
from agentrl.bench import learning_warm as lw
from agentrl.bench._report import TEMPLATES, render, template_blocks

BENCH = Path(_report.__file__).resolve().parent
ROOT = BENCH.parents[1]
UNFILLED = re.compile(r"\$\{?[A-Za-z_]")


def assert_filled(text: str) -> None:
    """No ``$name`` or ``${name}`` of a template is left in a rendered report."""
    left = [m.group(0) for m in UNFILLED.finditer(text)]
    assert not left, f"unfilled placeholders: {left}"


def identifiers(text: str) -> set[str]:
    """The placeholder names of a template (``$$`` is a literal dollar, not one)."""
    found = set()
    for m in Template.pattern.finditer(text):
        if m.group("invalid") is not None:
            raise ValueError(
                f"invalid placeholder at {m.start()}: {text[m.start() : m.start() + 20]}"
            )
        name = m.group("named") or m.group("braced")
        if name:
            found.add(name)
    return found


def render_calls() -> list[tuple[str, str, str, set[str] | None]]:
    """Every ``render(<template>, <block>, **values)`` in the benchmark modules whose template
    and block are string constants: (module, template, block, the keyword names, or None when
    it also passes ``**values``)."""
    calls = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "render"):
                continue
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if len(args) != len(node.args) or not args:
                continue  # a block chosen at run time
            names = {k.arg for k in node.keywords}
            spread = None in names
            calls.append(
                (path.name, args[0], args[1] if len(args) > 1 else "", None if spread else names)
            )
    return calls


def test_every_template_block_parses_and_renders_when_filled():
    templates = sorted(TEMPLATES.glob("*.md"))
    assert {t.stem for t in templates} >= {"credit", "learner_speed", "env_speed", "scale"}
    for path in templates:
        for block, text in template_blocks(path.stem).items():
            names = identifiers(text)
            out = render(path.stem, block, **dict.fromkeys(names, "X"))
            assert_filled(out)
            # A value left out is an error, never a "$name" in a report.
            with pytest.raises(KeyError) if names else contextlib.nullcontext():
                render(path.stem, block)


def test_the_code_fills_every_placeholder_of_the_blocks_it_renders():
    calls = render_calls()
    assert {c[1] for c in calls} >= {"credit", "vllm", "gpu", "ac2", "learner_speed", "scale"}
    for module, name, block, given in calls:
        blocks = template_blocks(name)
        assert block in blocks, f"{module}: no block {block!r} in templates/{name}.md"
        if given is not None:
            missing = identifiers(blocks[block]) - given
            assert not missing, f"{module}: render({name!r}, {block!r}) lacks {missing}"


def test_the_templates_ship_with_the_package():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = config["tool"]["setuptools"]["package-data"]["agentrl.bench"]
    assert "templates/*.md" in data
    assert sorted(TEMPLATES.glob("*.md")) == sorted(BENCH.glob("templates/*.md"))


def test_rendered_reports_leave_no_placeholder(tmp_path):
    s = learner_speed.SETTINGS[0]
    t = learner_speed.Timings(total=[0.5, 0.4], generate=[0.3, 0.2], update=[0.2, 0.2])
    result = learner_speed.Result(s, t, learner_speed.Timings([0.9, 0.8], [0.5, 0.4], [0.4, 0.4]))
    result.profile = "ncalls tottime"
    path = tmp_path / "learner_speed.md"
    learner_speed.write_report(path, [result], None, False, ((1.0,), (1.0,)), 2, 1e-3, 1)
    assert_filled(path.read_text())
    rows = [{"pool": "inline", "workers": 0, "envs": 4, "steps": 40, "steps_per_s": 50.0,
             "start_s": 0.1, "load": 1.0, "same": True}]  # fmt: skip
    assert_filled(scale.pools_section(rows))
    train = {"iterations": [{"perf/gen_tokens_per_s": 1e3, "perf/rollout_s": 1.0,
                             "perf/learn_s": 2.0}], "wall_s": 30.0}  # fmt: skip
    learn = {"params": 10, "tokens_per_update": 100, "update_s": 1.0, "tokens_per_s": 100.0,
             "tflops": 1.0, "mfu": None, "peak_memory_gib": 1.0}  # fmt: skip
    text = gpu._train_section(train) + gpu._learner_section(learn)
    assert "| 1 | 1,000 | 1.00 | 2.00 |" in text and "MFU n/a (unknown peak)" in text
    assert_filled(text)
    timing = env_speed.Timing("", np.full(3, 1e-3), 1e4, np.array([3, 4]))
    assert_filled(env_speed.sokoban_section({"6x6/1": {"agentrl": timing}}, "no gym", 2, True))
    runs = [{"method": m, "seed": k, "x": [0.0, 10.0], "y": [0.2, y], "train": [0.2, y]}
            for m, y in (("grpo", 0.3), ("crbc", 0.4)) for k in range(2)]  # fmt: skip
    assert_filled("\n".join(lw.build_report(runs, ["grpo", "crbc"], [], ["head"])))
