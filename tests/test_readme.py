"""README.md stays well-formed Markdown: fences balanced, nothing after a closing fence (which
would turn the rest of the file into code), and every relative link names a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


def fence_problems(text: str) -> list[str]:
    """Unbalanced fences and closing fences with text after them, as messages."""
    problems, opened = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if not m:
            continue
        marks, rest = m.group(2), m.group(3)
        if opened is None:
            if marks[0] == "`" and "`" in rest:
                problems.append(f"line {n}: an opening fence's info string holds a backtick")
            opened = (n, marks)
        elif marks[0] == opened[1][0] and len(marks) >= len(opened[1]):
            if rest.strip():
                problems.append(f"line {n}: text after a closing fence: {rest.strip()!r}")
            opened = None
    if opened is not None:
        problems.append(f"line {opened[0]}: a fence that is never closed")
    return problems


def test_fence_check_catches_the_mistakes():
    assert fence_problems("```bash\nx\n```\n") == []
    assert fence_problems("```\nx\n``` The contract suite\n") == [
        "line 3: text after a closing fence: 'The contract suite'"
    ]
    assert fence_problems("a\n```python\nx\n") == ["line 2: a fence that is never closed"]
    assert fence_problems("  ```bash\n  x\n  ```\n") == []  # inside a list item


@pytest.mark.parametrize("name", ["README.md", "docs/methods.md", "examples/doors/README.md"])
def test_markdown_fences_are_balanced(name):
    assert fence_problems((ROOT / name).read_text()) == []


def test_readme_relative_links_exist():
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert missing == []


def test_the_model_preset_table_matches_the_presets():
    """README's "Model presets" table: each single-setting row's first word per column equals
    the composed config's value (dataclass default, model=tiny, model=qwen2.5-1.5b-instruct)."""
    from agentrl.credit import NoConfig
    from agentrl.run import compose
    from agentrl.run.config import RunConfig

    text = (ROOT / "README.md").read_text()
    table = text[text.index("| setting | dataclass default |") :].split("\n\n")[0]
    rows = [r.strip("|").split("|") for r in table.splitlines()[2:]]
    configs = [
        RunConfig(env_name="sokoban", env_kwargs={}, algo_name="grpo", algo=NoConfig()).to_dict(),
        compose([]).to_dict(),
        compose(["model=qwen2.5-1.5b-instruct"]).to_dict(),
    ]
    checked = 0
    for key, *cells in rows:
        key = key.strip().strip("`")
        if "," in key:
            continue
        node, field = key.split(".")
        for cfg, cell in zip(configs, cells):
            want = cell.split()[0]
            got = cfg[node][field]
            assert float(want) == float(got) if want[0].isdigit() else want == str(got), (key, cell)
        checked += 1
    assert checked >= 8
