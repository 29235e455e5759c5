"""docs/methods.md: a section for every registered method, and every link to it resolves.

(a) every registered estimator, policy loss and token-weight transform has its anchor
``<a id="NAME"></a>`` in docs/methods.md; (b) no file of the repository cites the private design
notes the document replaced (the name is built below so that this file does not cite it
either); (c) every ``docs/methods.md#anchor`` link found in the repository names an anchor of
the document.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from agentrl.credit import list_estimators
from agentrl.learn.policy_loss import list_policy_losses, list_token_weights

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "methods.md"
OLD_NAME = "ALG" + "OS.md"  # split, so that a search for the name misses this file
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
LINK = re.compile(r"docs/methods\.md#([A-Za-z0-9_\-]*)")
# What the repository's own text lives in: the README and docs, the packages, the tests, the
# configs, the scripts and the committed result reports.
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg"}
TREES = ("agentrl", "algos", "envs", "tests", "configs", "scripts", "results", "docs")
TOP_FILES = ("README.md", "pyproject.toml")


def anchors(text: str) -> set[str]:
    """The explicit anchors ``<a id="..."></a>`` of a Markdown text."""
    return set(ANCHOR.findall(text))


def missing_sections(names: list[str], text: str) -> list[str]:
    """The names among ``names`` without an anchor in ``text``."""
    have = anchors(text)
    return [n for n in names if n not in have]


def repository_files() -> list[Path]:
    """Text files of the repository (hidden folders, caches and build outputs left out)."""
    out = [ROOT / f for f in TOP_FILES if (ROOT / f).is_file()]
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            rel = path.relative_to(ROOT).parts
            if any(p.startswith(".") or p == "__pycache__" for p in rel):
                continue
            if path.is_file() and path.suffix in TEXT_SUFFIXES:
                out.append(path)
    return out


def broken_links(files: list[Path], known: set[str]) -> list[str]:
    """``path:line: #anchor`` for every ``docs/methods.md#anchor`` whose anchor is unknown."""
    bad = []
    for path in files:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for k, line in enumerate(lines, 1):
            for anchor in LINK.findall(line):
                if anchor not in known:
                    bad.append(f"{path.relative_to(ROOT)}:{k}: #{anchor}")
    return bad


@pytest.fixture(scope="module")
def doc_text() -> str:
    assert DOC.is_file(), "docs/methods.md is missing"
    return DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("kind", "names"),
    [
        ("estimator", list_estimators),
        ("policy loss", list_policy_losses),
        ("token weight", list_token_weights),
    ],
)
def test_every_registered_method_has_a_section(doc_text, kind, names):
    registered = names()
    assert registered, f"no {kind} is registered"
    missing = missing_sections(registered, doc_text)
    assert not missing, f"docs/methods.md has no section (<a id=...>) for the {kind}s {missing}"


def test_a_missing_section_is_reported():
    text = '<a id="grpo"></a>\n## grpo\n<a id="rloo"></a>\n'
    assert missing_sections(["grpo", "rloo", "gigpo"], text) == ["gigpo"]
    assert missing_sections(["grpo"], text.replace('id="grpo"', 'id="grpo2"')) == ["grpo"]


def test_anchors_are_unique(doc_text):
    found = ANCHOR.findall(doc_text)
    dupes = sorted({a for a in found if found.count(a) > 1})
    assert not dupes, f"anchors defined twice in docs/methods.md: {dupes}"


def test_no_file_cites_the_old_design_notes():
    files = repository_files()
    assert any(p.name == "README.md" for p in files) and len(files) > 50
    hits = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        if OLD_NAME in text:
            hits.append(str(path.relative_to(ROOT)))
    assert not hits, f"{OLD_NAME} is cited in {hits}: link the section of docs/methods.md"


def test_every_methods_link_resolves(doc_text):
    # This file's own examples of broken links are left out.
    files = [p for p in repository_files() if p.resolve() != Path(__file__).resolve()]
    known = anchors(doc_text)
    # The repository does link into the document (README, docstrings).
    assert sum(bool(LINK.search(p.read_text(errors="replace"))) for p in files) > 10
    bad = broken_links(files, known)
    assert not bad, "links to missing anchors of docs/methods.md:\n" + "\n".join(bad)


def test_a_broken_link_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    good, bad = tmp_path / "a.md", tmp_path / "b.py"
    good.write_text("see docs/methods.md#grpo and [x](docs/methods.md#rloo)\n")
    bad.write_text("# docs/methods.md#nope\n")
    assert broken_links([good, bad], {"grpo", "rloo"}) == ["b.py:1: #nope"]


def test_internal_links_of_the_document_resolve(doc_text):
    known = anchors(doc_text)
    internal = re.findall(r"\]\(#([^)]+)\)", doc_text)
    assert internal
    assert sorted(set(internal) - known) == []
