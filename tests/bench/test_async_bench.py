"""``python -m agentrl.bench async``: the staleness section, and ``--section`` keeping the
report's other sections (measurements stubbed: no rollout, no training)."""

from __future__ import annotations

import shutil

import pytest

from agentrl.bench import async_rollout as ar
from agentrl.bench import async_staleness as st
from agentrl.bench._report import committed_dir, section_text, split_sections


def fake_row(k: int, iters: int = 5, seed: int = 0, job=(), out_dir=None) -> dict[str, float]:
    eps = {0: 0.8, 1: 1.1, 2: 1.2}[k]
    return {"k": float(k), "episodes_per_s": eps, "gen_tokens_per_s": 40.0 * eps,
            "learner_idle_frac": 0.4 if k == 0 else 0.05, "staleness_mean": 0.5 * k,
            "staleness_max": float(k), "groups_dropped": 0.0, "iteration_s": 16 / eps,
            "learner_s": 2.0}  # fmt: skip


@pytest.fixture
def report(tmp_path, monkeypatch):
    monkeypatch.setattr(st, "async_row", fake_row)
    src = committed_dir() / "async.md"
    if not src.is_file():
        pytest.skip("no committed async.md")
    shutil.copy(src, tmp_path / "async.md")
    return tmp_path / "async.md"


def test_staleness_section_alone_keeps_the_other_sections(report):
    before = report.read_text()
    ar.run(str(report.parent), argv=["--section", "staleness"])
    text = report.read_text()
    old_pre, old = split_sections(before)
    pre, new = split_sections(text)
    for title, part in old:
        if title != ar.STALENESS:
            assert section_text(text, title).strip() == part.split("\n", 1)[1].strip(), title
    assert [t for t, _ in new][-1] == ar.STALENESS
    # The preamble keeps the opening lines of the run that measured the workloads.
    assert pre.split("\n\n")[1] == old_pre.split("\n\n")[1]
    body = section_text(text, ar.STALENESS)
    assert "| async k=1 | 14.5 | 2.0 | 1.10 | 44.0 | 1.38× | 0.05 | 0.50 / 1 | 0 |" in body
    assert "k=1 1.38×, k=2 1.50× (goal met at k=1)" in body and "60% of the synchronous" in body
    assert "Load average at the start:" in body and "--section staleness" in body
    # Run again: the section is replaced, not repeated.
    ar.run(str(report.parent), argv=["--section", "staleness"])
    assert report.read_text().count(f"## {ar.STALENESS}") == 1


def test_verdicts_are_read_from_the_tables(report):
    pre, parts = split_sections(report.read_text())
    verdicts = ar._verdicts(dict(parts))
    assert [v.split(":")[0] for v in verdicts.split("; ")] == list(ar.WORKLOADS)
    for v in verdicts.split("; "):
        assert v in pre


def test_unknown_section_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        ar.run(str(tmp_path), argv=["--section", "nope"])
    with pytest.raises(SystemExit):
        ar.run(str(tmp_path), argv=["--only", "nope"])


def test_pool_rows_rates_over_the_summed_time():
    a, b = fake_row(1), {**fake_row(1), "episodes_per_s": 2.2, "iteration_s": 16 / 2.2}
    pooled = ar.pool_rows([a, b])
    assert pooled["episodes_per_s"] == pytest.approx(32 / (16 / 1.1 + 16 / 2.2))
    assert pooled["staleness_max"] == 1.0 and pooled["groups_dropped"] == 0.0
