"""``python -m agentrl.bench <name> --check``: the comparison with the committed reports.

The comparison logic runs on fake committed tables and fake measurements (no benchmark is
timed here); the committed reports in ``results/`` are parsed for real, so a report that lacks an
estimator or changes its table headers fails here first.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agentrl.bench import credit, learner_speed
from agentrl.bench.__main__ import CHECKS, main
from agentrl.bench._check import Figure, evaluate, parse_number, read_tables, tables_in

RESULTS = Path(__file__).resolve().parents[2] / "results"


# --- the comparison ---


@pytest.mark.parametrize(
    ("committed", "measured", "higher_is_better", "verdict"),
    [
        (1.5, 1.5, True, "pass"),
        (1.5, 1.06, True, "pass"),  # -29 %
        (1.5, 1.04, True, "fail"),  # -31 %
        (1.5, 9.0, True, "pass"),  # better is never a failure
        (10.0, 12.9, False, "pass"),  # +29 %
        (10.0, 13.1, False, "fail"),  # +31 %
        (10.0, 1.0, False, "pass"),
        (-0.2, -0.25, True, "pass"),  # relative to |committed|: -25 %
        (-0.2, -0.27, True, "fail"),
        (0.5, None, True, "fail"),  # the measurement failed
        (0.5, math.nan, True, "fail"),
        (None, 0.5, True, "fail"),  # the committed report lacks it
    ],
)
def test_a_figure_fails_only_beyond_thirty_percent_in_its_bad_direction(
    committed, measured, higher_is_better, verdict
):
    assert Figure("x", committed, measured, higher_is_better).verdict() == verdict


def test_messages_name_the_figure_and_both_values():
    fig = Figure("credit: time of gigpo / time of grpo", 9.5, 14.0, False, unit="×")
    msg = fig.message()
    assert msg.startswith("FAIL credit: time of gigpo / time of grpo")
    assert "committed 9.5×" in msg and "measured 14×" in msg and "+47%" in msg
    assert Figure("r", 0.5, 0.45, True).message().startswith("ok   r: committed 0.5")
    assert "not in the committed report" in Figure("r", None, 0.5, True).message()
    assert Figure("r", 0.5, None, True, skip="TRL missing").message() == "SKIP r: TRL missing"


def test_evaluate_gives_the_exit_code_and_names_the_failures():
    lines: list[str] = []
    good, bad = Figure("good", 1.0, 0.9, True), Figure("bad", 1.0, 0.5, True)
    assert evaluate("t", [good], log=lines.append) == 0 and "PASSED" in lines[-1]
    assert evaluate("t", [good, bad], log=lines.append) == 1
    assert "FAILED" in lines[-1] and "bad" in lines[-1] and "good" not in lines[-1]
    skipped = [Figure("s", 1.0, None, True, skip="why")]
    assert evaluate("t", skipped, log=lines.append) == 0
    assert "SKIPPED" in lines[-1] and "nothing was compared" in lines[-1]
    assert evaluate("t", [good, *skipped], log=lines.append) == 0
    assert "PASSED" in lines[-1] and "1 skipped" in lines[-1]
    assert evaluate("t", [good], tolerance=0.05, log=lines.append) == 1  # -10 % > 5 %


# --- reading markdown ---


def test_tables_are_read_by_section_and_header():
    text = "\n".join(
        [
            "# Title",
            "| not | a table |",
            "## Speed",
            "",
            "| estimator | 1,000 steps | 1M under 2 s? |",
            "|---|---:|---|",
            "| *graph build (shared)* | 1.5 ms | yes |",
            "| relace | 1.19 s (scoring 488.0 ms) | yes |",
            "",
            "## Quality",
            "| estimator | G = 4 |",
            "|---|---:|",
            "| grpo (traj) | 0.20 ± 0.05 |",
        ]
    )
    tables = read_tables(text)
    assert [(t.section, t.headers[1]) for t in tables] == [
        ("Speed", "1,000 steps"),
        ("Quality", "G = 4"),
    ]
    (speed,) = tables_in(text, "Speed")
    col = speed.column("1,000 steps")
    assert [parse_number(r[col]) for r in speed.rows] == [0.0015, 1.19]
    with pytest.raises(KeyError, match="no column"):
        speed.column("G = 8")
    with pytest.raises(KeyError, match="Errors"):
        tables_in(text, "Errors")


@pytest.mark.parametrize(
    ("cell", "value"),
    [
        ("0.54 ± 0.09", 0.54),
        ("-0.05 ± 0.01 (2 n/a)", -0.05),
        ("18,923", 18923.0),
        ("164.1 ms", 0.1641),
        ("2.95 s", 2.95),
        ("**1.56×**", 1.56),
        ("-", None),
        ("n/a", None),
        ("error: ValueError: x 3", None),
    ],
)
def test_numbers_are_parsed_from_cells(cell, value):
    assert parse_number(cell) == value


# --- the committed reports parse, and are complete ---


def test_committed_credit_report_has_every_estimator():
    text = (RESULTS / "credit.md").read_text()
    for _, section in credit.CHECK_METRICS:
        table = credit.committed_quality(text, section)
        for name in credit.benchmarked()[0]:
            for g in credit.GROUP_SIZES:
                assert table.get((name, g)) is not None, (section, name, g)
    size, times = credit.committed_times(text)
    assert abs(size - credit.SIZES[-1]) < 0.05 * credit.SIZES[-1]
    for name in [credit.GRAPH_ROW, *credit.benchmarked()[0]]:
        assert times.get(name), name


def test_committed_learner_speed_report_parses():
    ratios = learner_speed.committed_ratios((RESULTS / "learner_speed.md").read_text())
    for s in learner_speed.SETTINGS:
        for column, _ in learner_speed.CHECK_COLUMNS:
            assert ratios[(s.name, column)] > 0, (s.name, column)


# --- credit --check with fake measurements ---

FAKE_CREDIT = """# Credit estimators on synthetic MDPs

Reproduce: `python -m agentrl.bench credit`.

- Batches come from random MDPs. Quality: 2 MDPs (seeds 0-1), each sampled at every G with 3 \
groups of G rollouts; each group ...

## Pearson r with the true advantage

| estimator | G = 4 | G = 8 | G = 16 |
|---|---:|---:|---:|
{pearson}

## Spearman ρ with the true advantage

| estimator | G = 4 | G = 8 | G = 16 |
|---|---:|---:|---:|
{spearman}

## Compute time per batch

| estimator | 6,506 steps | 1,003,953 steps | 1M under 2 s? |
|---|---:|---:|---|
| *graph build (shared, once per batch)* | 1.6 ms | 200.0 ms | yes |
{times}
"""


def _fake_credit(
    monkeypatch, tmp_path, slow: str | None = None, worse: str | None = None, slow_runs: int = 9
):
    """A committed report where every estimator has r = ρ = 0.5 and takes 100 ms (GRPO 10 ms),
    and measurements equal to it except ``slow`` (2× the time in the first ``slow_runs``
    timings) and ``worse`` (r = 0.3)."""
    names = credit.benchmarked()[0]
    rows = "\n".join(f"| {n} | 0.50 ± 0.1 | 0.50 ± 0.1 | 0.50 ± 0.1 |" for n in names)
    times = "\n".join(
        f"| {n} | 1.0 ms | {'10.0 ms' if n == 'grpo' else '100.0 ms'} | yes |" for n in names
    )
    (tmp_path / "credit.md").write_text(
        FAKE_CREDIT.format(pearson=rows, spearman=rows, times=times)
    )
    seen = {}

    def fake_quality(names_, n_mdps, n_groups, group_sizes, log):
        seen["quality"] = (n_mdps, n_groups)
        q = credit.Quality()
        for n in names_:
            r = 0.3 if n == worse else 0.5
            q.scores[n] = {g: [[r, r, 0.0, 0.0, 0.0]] * n_mdps for g in group_sizes}
        return q

    def fake_speed(names_, sizes, repeats, log):
        seen["speed"] = (tuple(sizes), tuple(repeats))
        seen["timings"] = seen.get("timings", 0) + 1
        calls = {credit.GRAPH_ROW: [0.2] * 3}
        for n in names_:
            base = 0.01 if n == "grpo" else 0.1
            calls[n] = [base * (2 if n == slow and seen["timings"] <= slow_runs else 1)] * 3
        return credit.Timing(sizes=[1_003_953], graph_s=[0.2], calls_s=[calls])

    monkeypatch.setattr(credit, "measure_quality", fake_quality)
    monkeypatch.setattr(credit, "measure_speed", fake_speed)
    return seen


def test_credit_check_passes_on_equal_figures(monkeypatch, tmp_path, capsys):
    seen = _fake_credit(monkeypatch, tmp_path)
    assert main(["credit", "--check", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "credit --check: PASSED" in out
    assert seen["quality"] == (2, 3)  # the committed report's size, parsed from its text
    assert seen["speed"][0] == (credit.SIZES[-1],)  # only the largest size is timed
    assert seen["timings"] == 1
    n = len(credit.benchmarked()[0])
    assert (
        out.count("\nok   ") + out.startswith("ok   ") == 2 * 3 * n + n
    )  # 2 metrics × 3 G + times


def test_credit_check_fails_on_a_slower_estimator_and_names_it(monkeypatch, tmp_path, capsys):
    _fake_credit(monkeypatch, tmp_path, slow="gigpo")
    assert main(["credit", "--check", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL credit: time of gigpo / time of grpo at 1,003,953 steps: committed 10×, "
        "measured 20× (+100%" in out
    )
    assert "credit --check: FAILED — 1 of" in out and out.count("FAIL credit") == 1
    assert "measuring again to confirm" in out  # a failing time is measured twice


def test_credit_check_confirms_a_slow_time_before_failing(monkeypatch, tmp_path, capsys):
    seen = _fake_credit(monkeypatch, tmp_path, slow="gigpo", slow_runs=1)
    assert main(["credit", "--check", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert seen["timings"] == 2 and "measuring again to confirm" in out
    assert "ok   credit: time of gigpo / time of grpo" in out and "PASSED" in out


def test_credit_check_fails_on_worse_accuracy(monkeypatch, tmp_path, capsys):
    _fake_credit(monkeypatch, tmp_path, worse="crbc")
    assert main(["credit", "--check", "--out", str(tmp_path), "--tolerance", "0.3"]) == 1
    out = capsys.readouterr().out
    assert "FAIL credit: Pearson r of crbc at G = 8: committed 0.5, measured 0.3 (-40%" in out
    assert out.count("FAIL credit") == 6  # Pearson and Spearman at three group sizes
    _fake_credit(monkeypatch, tmp_path, worse="crbc")
    assert main(["credit", "--check", "--out", str(tmp_path), "--tolerance", "0.5"]) == 0


def test_credit_check_skips_an_estimator_the_report_has_no_row_for(monkeypatch, tmp_path, capsys):
    """Only the report's rows are compared; a registered estimator without one is named as
    skipped (the committed report's coverage of the built-ins is its own test, above)."""
    _fake_credit(monkeypatch, tmp_path)
    path = tmp_path / "credit.md"
    path.write_text("\n".join(ln for ln in path.read_text().splitlines() if "| ac2 |" not in ln))
    assert main(["credit", "--check", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "SKIP credit: ac2: registered here, but" in out and "has no row for it" in out
    assert "of ac2" not in out  # not measured, not compared
    # + the two property sections, which this report predates (skipped, not failed)
    assert "SKIP credit: termination bias: " in out and "no '## Identical groups' section" in out
    assert "credit --check: PASSED" in out and "3 skipped" in out


def test_credit_check_fails_when_a_held_estimator_lacks_a_time(monkeypatch, tmp_path, capsys):
    _fake_credit(monkeypatch, tmp_path)
    path = tmp_path / "credit.md"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(ln for ln in lines if not ln.startswith("| ac2 | 1.0 ms")))
    assert main(["credit", "--check", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL credit: time of ac2 / time of grpo at 1,003,953 steps: not in the committed" in out
    assert "ok   credit: Pearson r of ac2 at G = 4" in out


def test_credit_check_with_a_plugin_estimator_checks_only_the_committed_rows(
    monkeypatch, tmp_path, capsys
):
    """Regression (issue 23): an estimator registered from outside the package (a plugin of
    the ``agentrl.algos`` entry point, or a test's ``register_estimator``) made ``credit
    --check`` fail with "not in the committed report". It is now skipped and named, not
    measured, and the committed rows still pass."""
    from agentrl.credit import estimators, list_estimators, register_estimator

    list_estimators()  # the built-ins and entry points are loaded first
    # The registry has no unregister: the plugin goes into a copy, restored after the test.
    monkeypatch.setattr(estimators, "_ESTIMATORS", dict(estimators._ESTIMATORS))

    @register_estimator("zz_plugin_credit")
    def _plugin(batch, cfg, **kwargs):
        raise AssertionError("a plugin without a row in the committed report is not measured")

    seen = _fake_credit(monkeypatch, tmp_path)
    measured: list[str] = []
    fake_quality = credit.measure_quality

    def quality(names_, *args):
        measured.extend(names_)
        return fake_quality(names_, *args)

    monkeypatch.setattr(credit, "measure_quality", quality)
    # The committed report is written without the plugin (as results/credit.md is).
    path = tmp_path / "credit.md"
    path.write_text(
        "\n".join(ln for ln in path.read_text().splitlines() if "zz_plugin_credit" not in ln)
    )
    assert "zz_plugin_credit" in list_estimators()
    assert main(["credit", "--check", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "not in the committed report" not in out and "FAIL" not in out
    assert "skipped, registered here but without a row in" in out
    assert "SKIP credit: zz_plugin_credit: registered here, but" in out
    # 1 + the two property sections the report predates
    assert "credit --check: PASSED" in out and "3 skipped (see above)" in out
    assert "zz_plugin_credit" not in measured and "grpo" in measured
    assert seen["timings"] == 1
    monkeypatch.undo()
    assert "zz_plugin_credit" not in list_estimators()  # unregistered again


def test_check_refuses_reports_it_cannot_compare(tmp_path, capsys):
    assert main(["credit", "--check", "--out", str(tmp_path)]) == 1  # no report at all
    assert "credit.md does not exist" in capsys.readouterr().out
    (tmp_path / "credit.md").write_text("Reproduce: (this was a `--quick` smoke run).")
    assert main(["credit", "--check", "--out", str(tmp_path)]) == 1
    assert "--quick smoke run" in capsys.readouterr().out
    assert main(["env-speed", "--check"]) == 2
    assert "checks exist for credit, credit-learning, learner-speed" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["credit", "--check", "--quick"])
    with pytest.raises(SystemExit):
        main(["credit", "--check", "--tolerance", "-1"])
    with pytest.raises(SystemExit):
        main(["credit", "--tolerance", "0.5"])  # only with --check
    assert set(CHECKS) >= {"credit", "credit-learning", "learner-speed"}


# --- learner-speed --check ---


def _committed_learner_speed(tmp_path) -> None:
    (tmp_path / "learner_speed.md").write_text((RESULTS / "learner_speed.md").read_text())


def test_learner_speed_check_without_trl_says_so_and_measures_nothing(
    monkeypatch, tmp_path, capsys
):
    _committed_learner_speed(tmp_path)
    monkeypatch.setattr(learner_speed, "_import_trl", lambda: "ModuleNotFoundError: no trl")

    def no_measuring(*args, **kwargs):
        raise AssertionError("nothing to compare with: must not measure")

    monkeypatch.setattr(learner_speed, "_measure", no_measuring)
    assert main(["learner-speed", "--check", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    n = len(learner_speed.SETTINGS) * len(learner_speed.CHECK_COLUMNS)
    assert out.count("SKIP learner-speed: agentrl / TRL") == n
    assert "TRL is not installed here (ModuleNotFoundError: no trl)" in out
    assert "pip install trl==" in out
    assert "learner-speed --check: SKIPPED — nothing was compared" in out
    assert "PASSED" not in out


def _fake_result(setting, trl_s: float, trl_update_s: float):
    """agentrl: 1 s per iteration, 0.5 s of it the update; TRL: as given."""
    t = learner_speed.Timings
    return learner_speed.Result(
        setting,
        t(total=[1.0] * 3, generate=[0.5] * 3, update=[0.5] * 3),
        t(total=[trl_s] * 3, generate=[0.5] * 3, update=[trl_update_s] * 3),
    )


@pytest.mark.parametrize(("factor", "code"), [(0.75, 0), (0.6, 1)])
def test_learner_speed_check_compares_the_trl_ratio(monkeypatch, tmp_path, capsys, factor, code):
    """Measured ratios at ``factor`` × the committed ones: 25 % worse passes, 40 % fails."""
    _committed_learner_speed(tmp_path)
    committed = learner_speed.committed_ratios((tmp_path / "learner_speed.md").read_text())
    monkeypatch.setattr(learner_speed, "_import_trl", lambda: None)

    def fake_measure(settings, repeats, lr, with_trl, threads, profile, log):
        assert with_trl and not profile and repeats == learner_speed.CHECK_REPEATS
        results = []
        for s in settings:
            total = committed[(s.name, "tokens/s")] * factor
            update = committed[(s.name, "update tokens/s")] * factor * 0.5
            results.append(_fake_result(s, total, update))
        return results, ((0.0,), (0.0,))

    monkeypatch.setattr(learner_speed, "_measure", fake_measure)
    assert main(["learner-speed", "--check", "--out", str(tmp_path)]) == code
    out = capsys.readouterr().out
    name = learner_speed.SETTINGS[0].name
    expected = committed[(name, "tokens/s")]
    prefix = "ok  " if code == 0 else "FAIL"
    assert (
        f"{prefix} learner-speed: agentrl / TRL tokens/s (whole iteration) at {name}: "
        f"committed {expected:.3g}×, measured {expected * factor:.3g}×"
    ) in out


def test_credit_figures_from_a_real_quick_measurement_are_finite(monkeypatch, tmp_path):
    """The check's own measuring path on tiny sizes (the report's committed numbers are not
    used): every estimator gets a finite accuracy and time."""
    _fake_credit(monkeypatch, tmp_path)
    monkeypatch.undo()
    real_speed = credit.measure_speed
    monkeypatch.setattr(credit, "SIZES", (1_000,))
    monkeypatch.setattr(
        credit,
        "measure_speed",
        lambda names, sizes, repeats, log: real_speed(names, sizes, (2,), log),
    )
    path = tmp_path / "credit.md"
    md = path.read_text().replace("1,003,953 steps", "1,000 steps")
    path.write_text(md.replace("6,506 steps", "500 steps"))
    figures = credit.check(results_dir=tmp_path, log=lambda _: None)
    # The fake report has no property sections: those two figures are skipped.
    measured = [f for f in figures if f.skip is None]
    assert len(figures) - len(measured) == 2
    assert measured and all(f.measured is not None and np.isfinite(f.measured) for f in measured)
