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
    titles = [t for t, _ in new]
    assert ar.STALENESS in titles  # in the report's order of sections
    assert titles == [h for h in ar.SECTIONS.values() if h in titles]
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


def test_vllm_rows_get_their_own_base_and_verdict():
    table = "\n".join(
        [
            "## judge",
            "",
            "| mode | episodes | wall s | episodes/s | gen tokens/s | ratio |",
            "|---|---:|---:|---:|---:|---:|",
            "| lock-step | 8 | 4.0 | 2.00 | 10 | 1.00 |",
            "| continuous | 8 | 2.0 | 4.00 | 20 | 2.00 |",
            "| lock-step (vLLM) | 8 | 4.0 | 2.00 | 10 | 1.00 |",
            "| continuous (vLLM) | 8 | 3.0 | 2.67 | 13 | 1.33 |",
            "| continuous (vLLM, stream) | 8 | 2.5 | 3.20 | 16 | 1.60 |",
        ]
    )
    assert ar._verdicts({"judge": table}) == "judge: 2.00× HF, 1.60× vLLM"
    assert ar._stream_label("continuous") == "continuous (stream)"
    assert ar._stream_label("continuous (vLLM)") == "continuous (vLLM, stream)"


def test_long_tail_lengths_differ_within_a_group_and_follow_the_tail():
    """One task seed, many episodes with different actions: the lengths differ (agents'
    episodes do), a transcript fixes its length, and P(length > t) = (t + 1)^-1.1."""
    import numpy as np

    def play(seed: int, actions) -> int:
        env = ar.WaitEnv(delay="fixed", length="pareto", step_s=0.0)
        env.reset(seed=seed)
        for t, a in enumerate(actions, start=1):
            if env.step(a)[2]:
                return t
        raise AssertionError("no episode passes 40 steps")

    rng = np.random.default_rng(0)
    episodes = [[f"a{x}" for x in rng.integers(1000, size=40)] for _ in range(3000)]
    lengths = np.array([play(7, e) for e in episodes])
    assert play(7, episodes[0]) == lengths[0]  # the same transcript, the same length
    assert len(set(lengths[:8].tolist())) > 1  # one group's episodes differ
    assert lengths.max() <= 40
    for t in (1, 3, 10):
        expected = (t + 1) ** -1.1
        assert abs((lengths > t).mean() - expected) < 4 * np.sqrt(expected / len(lengths))


def test_curves_section_reads_cached_runs_and_reports_overlap(tmp_path, monkeypatch):
    def rows(k, seed, n=20):
        base = 0.1 + 0.02 * seed  # seeds differ, every k learns alike
        return [{"iteration": 0}] + [
            {"iteration": i, "env/success": base + 0.01 * i, "env/return": base + 0.01 * i}
            for i in range(1, n + 1)
        ]

    runs = []

    def training(overrides, out_dir):
        k = int(next(o for o in overrides if o.startswith("rollout.max_staleness="))[-1])
        seed = int(next(o for o in overrides if o.startswith("trainer.seed="))[-1])
        runs.append((k, seed, tuple(overrides)))
        return rows(k, seed)

    monkeypatch.setattr(st, "train_rows", training)
    ar.curves_section("HEAD", quick=False, cache=tmp_path)
    assert len(runs) == 15 and len(list(tmp_path.glob("k*-s*-*.json"))) == 15
    # k >= 1 trains with the loss for stale samples; k = 0 is the default job itself.
    assert all(("learner.loss=decoupled_ppo" in o) is (k > 0) for k, _, o in runs)

    def no_training(*a, **kw):
        raise AssertionError("a cached run was run again")

    monkeypatch.setattr(st, "train_rows", no_training)
    text = ar.curves_section("HEAD", quick=False, cache=tmp_path)
    assert text.startswith("## learning with bounded staleness\n\nHEAD")
    assert "success: overlap; return: overlap" in text
    assert "| it 1 | it 5 | it 10 | it 15 | it 20 |" in text
    row0 = next(line for line in text.splitlines() if line.startswith("| 0 |"))
    # Success over the last 5 iterations, mean over seeds: 0.14 + 0.18 = 0.32.
    assert "0.320 [" in row0 and row0.endswith("| 0.15 | 0.19 | 0.24 | 0.29 | 0.34 |")


@pytest.mark.slow
def test_gpu_rollout_mode_rows_run_on_cpu_with_the_tiny_model(tmp_path):
    """Stage 4 of the GPU check, on CPU with the tiny model and HF: every mode trains and
    gives a row; the async row is within its bound."""
    from agentrl.bench import gpu

    base = ["rollout.n_tasks=2", "rollout.group_size=2", "rollout.max_new_tokens=3",
            "env.max_steps=3", "model.tokenizer_episodes=2", "trainer.eval_every=0",
            "trainer.save_every=0", "trainer.progress=false"]  # fmt: skip
    rows = gpu.rollout_mode_rows(base, tmp_path, iters=3, timeout=300)
    assert [r["mode"] for r in rows] == [m for m, _ in gpu.MODES]
    assert all("error" not in r and r["episodes_per_s"] > 0 for r in rows), rows
    assert rows[0]["staleness"] == 0.0 and 0.0 < rows[2]["staleness"] <= 1.0
    table = gpu.modes_markdown(rows)
    assert "| lock-step |" in table and "1.00×" in table


def test_curves_section_without_a_cache_trains_each_run_once(monkeypatch):
    calls = []

    def training(overrides, out_dir):
        calls.append(tuple(overrides))
        return [{"iteration": i, "env/success": 0.1, "env/return": 0.1} for i in range(1, 3)]

    monkeypatch.setattr(st, "train_rows", training)
    ar.curves_section("HEAD", quick=True, cache=None)
    assert len(calls) == len(set(calls)) == 4  # quick: k in {0, 1} × 2 seeds, one run each
