"""The benchmarks' reports: where they go, what they keep from the committed ones, no empty
tables, and plots whose lines all differ in colour (no benchmark is measured here)."""

from __future__ import annotations

import ast
import inspect
import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest

from agentrl.bench import _report, credit, env_speed, learner_speed
from agentrl.bench import learning_warm as lw
from agentrl.bench.__main__ import COMMANDS, main, output_dir
from agentrl.bench._check import read_tables
from agentrl.bench.scale import pools_section
from agentrl.bench.stats import compare_pair, pairs_table

RESULTS = Path(__file__).resolve().parents[2] / "results"
BENCH = Path(_report.__file__).resolve().parent
GYM_ERROR = "ModuleNotFoundError: No module named 'gym_sokoban'"


def _header_only(text: str) -> list[str]:
    """Sections of ``text`` holding a table with a header and no rows."""
    return [t.section or "(top)" for t in read_tables(text) if not t.rows]


@pytest.fixture
def committed(tmp_path) -> Path:
    """A copy of the committed reports this test reads (a folder of its own)."""
    out = tmp_path / "committed"
    out.mkdir()
    for name in ("env_speed.md", "learner_speed.md", "scale.md"):
        shutil.copy(RESULTS / name, out / name)
    return out


# --- where reports go ---


def test_the_default_output_folder_is_a_scratch_folder_not_results(monkeypatch, tmp_path):
    assert output_dir(None, update=False) == _report.SCRATCH == "bench-out"
    assert output_dir(None, update=True) == "results"
    assert output_dir("elsewhere", update=False) == "elsewhere"
    # Every benchmark's own default is the scratch folder too.
    for target in COMMANDS.values():
        module, func = target.split(":")
        fn = getattr(__import__(module, fromlist=[func]), func)
        default = inspect.signature(fn).parameters["out_dir"].default
        assert default == _report.SCRATCH, (target, default)
    # The command line: scratch by default, results/ only with --update (or --out results).
    seen: list[str] = []
    monkeypatch.setattr(credit, "run", lambda out_dir, quick: seen.append(out_dir))
    monkeypatch.chdir(tmp_path)
    assert main(["credit"]) == 0 and main(["credit", "--update"]) == 0
    assert main(["credit", "--out", "results/"]) == 0
    assert seen == ["bench-out", "results", "results/"]
    with pytest.raises(SystemExit):
        main(["credit", "--update", "--out", "somewhere"])
    with pytest.raises(SystemExit):
        main(["credit", "--check", "--update"])
    assert "bench-out/" in (Path(__file__).resolve().parents[2] / ".gitignore").read_text()


def test_committed_dir_is_the_source_trees_results():
    assert _report.committed_dir().resolve() == RESULTS
    assert _report.is_committed(RESULTS) and not _report.is_committed(RESULTS / "x")


# --- a comparison whose peer is missing is kept from the committed report ---


def _timing(name: str, reset_ms: float, steps_per_s: float) -> env_speed.Timing:
    return env_speed.Timing(name, np.full(5, reset_ms / 1e3), steps_per_s, np.array([3, 4, 5]))


def test_env_speed_without_gym_sokoban_keeps_the_committed_comparison(committed, tmp_path):
    results = {
        "7x7/2": {
            "agentrl": _timing("", 0.5, 70_000.0),
            "agentrl, min_boxes_off_target=2": _timing("", 0.6, 80_000.0),
        },
        "6x6/1": {"agentrl": _timing("", 0.4, 60_000.0)},
    }
    text = (committed / "env_speed.md").read_text()
    kept, date = env_speed.committed_gym_rows(committed)
    assert set(kept) == {"7x7/2", "6x6/1"} and date == "2026-11-29"
    body = env_speed.sokoban_section(results, GYM_ERROR, 10, False, committed=committed)
    note = "from the committed run of 2026-11-29, gym-sokoban not installed here"
    for key, (line, _, _) in kept.items():
        numbers = line.split("|", 2)[2]  # the committed figures, unchanged
        assert numbers in text and f"| {key} gym-sokoban 0.0.6 ({note}) |{numbers}" in body
    assert GYM_ERROR in body and "speed-ups marked † compare this run with that one" in body
    # Speed-ups against the committed figures (7x7/2: 61.803 ms per level, 226 steps/s).
    assert f"| {61.803 / 0.5:,.0f}x / {70_000 / 226:,.0f}x † |" in body
    assert not _header_only(body)
    # Written into the scratch folder, then kept again from that report: marked once.
    env_speed.write_env_speed_section(tmp_path / "out", env_speed.SECTION, body)
    again = env_speed.sokoban_section(results, GYM_ERROR, 10, False, committed=tmp_path / "out")
    assert again.count(note) == 2 and "not installed here) (from" not in again
    # Nothing committed to keep: said so, no rows invented.
    bare = env_speed.sokoban_section(results, GYM_ERROR, 10, False, committed=tmp_path / "none")
    assert "no comparison is shown" in bare and "gym-sokoban 0.0.6" not in bare


def test_env_speed_without_alfworld_keeps_the_committed_section(committed, tmp_path):
    out = tmp_path / "bench-out"
    note = env_speed.keep_section(out, "ALFWorld", "ImportError: no alfworld", committed)
    assert note == (
        "from the committed run of 2026-11-29, alfworld (the stock engine) not installed here"
    )
    text = (out / "env_speed.md").read_text()
    alf = _report.section_text(text, "ALFWorld")
    assert alf.startswith(f"\n*Kept: {note} (ImportError: no alfworld); not re-measured.*")
    assert "| stock (textworld PddlEnv + alfworld wrappers) | 600 | 7.2 |" in alf
    # Into the committed folder itself: the section is that run's already, left as it is.
    before = (committed / "env_speed.md").read_text()
    assert env_speed.keep_section(committed, "ALFWorld", "x", committed) == note
    assert (committed / "env_speed.md").read_text() == before


def _learner_result(setting) -> learner_speed.Result:
    t = learner_speed.Timings(total=[0.5] * 3, generate=[0.3] * 3, update=[0.2] * 3)
    return learner_speed.Result(setting, t, None)


def test_learner_speed_without_trl_keeps_the_committed_trl_rows(committed, tmp_path):
    results = [_learner_result(s) for s in learner_speed.SETTINGS]
    path = tmp_path / "learner_speed.md"
    loads = ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0))
    learner_speed.write_report(
        path, results, "ModuleNotFoundError: no trl", False, loads, 3, 1e-3, 1, committed
    )
    text = path.read_text()
    # The committed TRL rows and ratio lines, copied with their figures and marked.
    committed_text = (committed / "learner_speed.md").read_text()
    date = _report.run_date(committed_text)
    note = f"from the committed run of {date}, TRL not installed here"
    assert text.count(f"| TRL GRPOTrainer ({note}) |") == len(learner_speed.SETTINGS)
    for line in committed_text.splitlines():
        if "| TRL GRPOTrainer |" in line:
            setting, figures = line.split("| TRL GRPOTrainer |")
            assert f"{setting}| TRL GRPOTrainer ({note}) |{figures}" in text
        if ": agentrl / TRL tokens/s = **" in line:
            assert f"{line} ({note})" in text
    assert "TRL was not measured (ModuleNotFoundError: no trl)" in text
    assert not _header_only(text)


def test_learner_speed_update_without_trl_refuses_and_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(learner_speed, "_import_trl", lambda: "ModuleNotFoundError: no trl")
    monkeypatch.setattr(learner_speed, "is_committed", lambda out: True)

    def no_measuring(*args, **kwargs):
        raise AssertionError("must refuse before measuring")

    monkeypatch.setattr(learner_speed, "_measure", no_measuring)
    with pytest.raises(SystemExit, match=r"TRL is not installed here.*Nothing was written"):
        learner_speed.run(out_dir=tmp_path, log=lambda _: None)
    assert not list(tmp_path.iterdir())


def test_scale_without_ray_or_alfworld_keeps_the_committed_pools(committed):
    rows = [
        {"pool": p, "workers": w, "envs": 8, "steps": 1600, "steps_per_s": sps, "start_s": 0.1,
         "load": 1.0, "same": True}
        for p, w, sps in (("inline", 0, 600.0), ("process", 2, 800.0))
    ]  # fmt: skip
    text = pools_section(rows, committed)
    assert "| ray (from the committed run of" in text and "Ray not installed here) | 2 |" in text
    assert "| process | 2 | 8 | 1600 | 800.0 | 1.33x |" in text
    whole = pools_section([], committed)
    assert whole.startswith("*Kept: from the committed run of")
    assert "alfworld not installed here" in whole and "| inline | - | 8 |" in whole


# --- no header-only tables ---


def test_empty_tables_are_replaced_by_a_sentence():
    text = "\n".join(
        [
            "## A",
            "",
            "| a | b |",
            "|---|---:|",
            "",
            "## B",
            "| x | y |",
            "|---|---|",
            "| 1 | 2 |",
            "",
            "## C",
            "| only | header |",
            "|---|---|",
        ]
    )
    out = _report.drop_empty_tables(text)
    assert _header_only(text) == ["A", "C"] and _header_only(out) == []
    assert out.count(_report.EMPTY_TABLE) == 2 and "| 1 | 2 |" in out and "| x | y |" in out
    assert _report.drop_empty_tables(out) == out
    assert _report.table(["| a |", "|---|"], [], "None.") == ["None."]
    assert _report.table(["| a |", "|---|"], ["| 1 |"], "None.") == ["| a |", "|---|", "| 1 |"]


def test_report_writers_emit_no_header_only_table(tmp_path):
    path = _report.write_markdown(tmp_path / "r.md", "# R\n\n| a |\n|---|\n\ntext\n")
    assert _header_only(path.read_text()) == [] and "text" in path.read_text()
    assert pairs_table([], "eval AUC", family=True) == ["No pairs to compare on eval AUC."]
    pair = compare_pair("a", "b", [0.1, 0.2, 0.3], [0.1, 0.1, 0.1])
    assert len(pairs_table([pair], "x", family=True)) == 3
    # learning-warm with one method and a joined one that has no baseline: no empty tables.
    runs = [
        {"method": m, "seed": s, "x": [0.0, 50.0, 100.0], "y": [0.3, 0.3, y], "train": [0.3, y]}
        for m, y in (("gae_pretrained", 0.2), ("crbc", 0.4))
        for s in range(3)
    ]
    assert _header_only("\n".join(lw.build_report(runs, ["crbc"], ["gae_pretrained"], []))) == []


def test_no_committed_report_has_a_header_only_table():
    reports = sorted(RESULTS.glob("*.md"))
    assert reports
    for path in reports:
        assert _header_only(path.read_text()) == [], path.name


def test_bench_modules_write_markdown_only_through_write_markdown():
    """A ``.write_text`` in a benchmark module writes a named non-markdown file (a run key, a
    loss); reports go through :func:`_report.write_markdown`, which drops empty tables."""
    for path in sorted(BENCH.glob("*.py")):
        if path.name == "_report.py":
            continue
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "write_text":
                target = ast.get_source_segment(source, node.func.value)
                consts = [
                    c.value
                    for c in ast.walk(node.func.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                ]
                assert consts and not any(c.endswith(".md") for c in consts), (path.name, target)


# --- plots: one distinct colour per line ---


@pytest.mark.parametrize("n", [1, 2, 10, 11, 16, 17, 20, 21, 25, 30, 61, 100])
def test_palette_gives_n_distinct_colours(n):
    colours = _report.palette(n)
    assert len(colours) == n and len(set(colours)) == n
    assert all(len(c) == 3 and all(0 <= x <= 1 for x in c) for c in colours)
    if n <= 60:  # the named palettes: clearly apart, not just unequal
        gaps = [np.linalg.norm(np.subtract(a, b)) for a, b in itertools.combinations(colours, 2)]
        assert min(gaps, default=1.0) > 0.05
    assert _report.palette(n)[: min(n, 10)] == _report.palette(10)[: min(n, 10)]
    assert len(_report.markers(n)) == n


def _capture_figure(monkeypatch) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures: list = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    return figures


def _line_colours(ax) -> dict[str, tuple]:
    from matplotlib.colors import to_rgb

    handles, labels = ax.get_legend_handles_labels()
    out = {}
    for h, label in zip(handles, labels):
        line = h.lines[0] if hasattr(h, "lines") else h  # errorbar containers hold the line
        out[label] = to_rgb(line.get_color())
    return out


def test_credit_plot_is_drawn_from_the_report_with_a_colour_per_line(monkeypatch, tmp_path):
    """``credit.png`` is drawn from ``credit.md`` alone (no measuring), every line its own
    colour."""
    text = (RESULTS / "credit.md").read_text()
    data = credit.plot_data_from_report(text)
    pearson = credit.committed_quality(text, credit.CHECK_METRICS[0][1])
    assert set(data.pearson) == {name for name, _ in pearson}
    for name, (means, errs) in data.pearson.items():
        assert means == [pearson[(name, g)] for g in data.group_sizes]
        assert all(0 <= e < 0.05 for e in errs)  # sd / sqrt(100 MDPs)
    size, times = credit.committed_times(text)
    assert data.sizes[-1] == size and data.graph_s[-1] == times[credit.GRAPH_ROW]
    assert all(data.times[n][-1] == t for n, t in times.items() if n != credit.GRAPH_ROW)
    assert data.scored == {"hcapo", "relace"}
    shutil.copy(RESULTS / "credit.md", tmp_path / "credit.md")
    figures = _capture_figure(monkeypatch)
    assert credit.replot(tmp_path).stat().st_size > 0
    quality, speed = figures[-1].axes
    by_name, timing = _line_colours(quality), _line_colours(speed)
    assert len(by_name) == len(set(by_name.values())) == len(data.pearson)
    assert len(timing) == len(set(timing.values())) == len(data.times) + 1  # and the graph
    for label, colour in timing.items():  # the same colour for an estimator in both panels
        name = label.split(" (")[0]
        assert name not in by_name or by_name[name] == colour
    assert by_name["crbc"] != by_name["relace"]  # the pair the issue saw share one colour


def test_learning_warm_plot_gives_every_method_its_own_colour(monkeypatch, tmp_path):
    core = list(lw.METHODS)
    extra = [f"extra{k}" for k in range(14)]
    runs = [
        {"method": m, "seed": s, "x": [0.0, 10.0], "y": [0.2, 0.3]}
        for m in core + extra
        for s in range(2)
    ]
    figures = _capture_figure(monkeypatch)
    lw._plot(runs, core, extra, tmp_path / "p.png")
    left, right = (_line_colours(ax) for ax in figures[-1].axes)
    assert len(left) == len(core) and len(set(left.values())) == len(core)
    assert len(right) == len(extra) + 1 and len(set(right.values())) == len(extra) + 1
    assert left["grpo (2)"] == right["grpo (2)"]  # the reference looks the same in both


def test_scale_report_from_fake_runs(monkeypatch, tmp_path, committed):
    """The scale report's writer, its runs stubbed: one process against two ranks, and the
    pools section kept from the committed report when ALFWorld is missing."""
    from agentrl.bench import scale

    figures = {1: {"env_steps_per_s": 100.0, "gen_tokens_per_s": 50.0}, 2: {}}
    figures[1] |= {"learn_tokens_per_s": 1000.0, "iteration_s": 2.0}
    figures[2] = {k: v * 1.5 for k, v in figures[1].items()} | {"iteration_s": 1.6}
    launched: list[int] = []
    monkeypatch.setattr(
        scale, "_run", lambda world, steps, out: launched.append(world) or figures[world]
    )
    monkeypatch.setattr(scale, "measure_pools", lambda quick, log: [])
    monkeypatch.setattr(_report, "committed_dir", lambda: committed)
    scale.run(tmp_path, quick=True, log=lambda *a: None)
    text = (tmp_path / "scale.md").read_text()
    assert launched == [1, 2] and "| env steps/s (rollout) | 100.0 | 150.0 | 1.50x | 75% |" in text
    assert "| s / iteration | 2.0 | 1.6 | 1.25x | 62% |" in text
    assert "*Kept: from the committed run of" in text and not _header_only(text)
    assert "$" not in text  # every template placeholder filled


def test_threads_report_from_fake_runs(monkeypatch, tmp_path):
    """``threads`` (in :mod:`agentrl.bench.scale`): a row per busy level and thread count, each
    against one thread; its runs and busy-loop processes stubbed."""
    from agentrl.bench import scale

    class NoProcess:
        def __init__(self, **kwargs):
            pass

        start = terminate = lambda self: None

    monkeypatch.setattr(scale.mp, "Process", NoProcess)
    monkeypatch.setattr(scale, "_iteration_seconds", lambda n, steps, out: [1.0 + 0.5 * (n > 1)])
    medians = scale.run_threads(tmp_path, quick=True, log=lambda *a: None)
    text = (tmp_path / "threads.md").read_text()
    assert COMMANDS["threads"] == "agentrl.bench.scale:run_threads"
    assert medians[(0, 1)] == 1.0 and "| 0 | " in text and "| 2 | 1.50 | 1.50x |" in text
    assert "$" not in text and not _header_only(text)
