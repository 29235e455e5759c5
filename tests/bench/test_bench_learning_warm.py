"""The warm-start learning benchmark's method resolution and report (no training runs)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agentrl.bench import experiment as ex
from agentrl.bench import learning_warm as lw


def test_method_args_resolve_core_extra_objective_and_estimator():
    assert lw.method_args("grpo") == ["algo=grpo"]
    # Learner hints of the estimator are added unless the method sets them itself.
    gagpo = lw.method_args("gagpo")
    assert gagpo[0] == "algo=gagpo" and "learner.ratio_level=step" in gagpo
    assert lw.method_args("gae_pretrained") == ["algo=gae", "algo.critic_init=pretrained"]
    assert "learner.loss=klpo" in lw.method_args("klpo")
    assert lw.method_args("bv_blend") == ["algo=bv_blend"]
    # PS-PPO drives its own rollouts: its episodes are not on the same env-step axis.
    assert lw.method_args("psppo") is None
    assert lw.method_args("no_such_method") is None
    assert "no_such_method" not in lw.known_methods() and "hcapo" in lw.known_methods()


def test_unknown_method_names_the_valid_ones(tmp_path):
    with pytest.raises(SystemExit, match=r"unknown methods.*valid:.*grpo"):
        lw.run(str(tmp_path), argv=["--methods", "grpo,nope"])


def _results(method: str, finals: list[float], start: float = 0.3) -> list[dict]:
    return [
        {
            "method": method,
            "seed": s,
            "x": [0.0, 100.0, 200.0],
            "y": [start, (start + f) / 2, f],
            "train": [start, f],
        }
        for s, f in enumerate(finals)
    ]


def test_report_gives_core_verdicts_and_extras_against_grpo():
    rng = np.random.default_rng(0)
    base = list(0.3 + 0.05 * rng.random(5))
    results = (
        _results("grpo", base)
        # Better on every seed (by 0.2 on average, with some spread: identical differences
        # would have no spread and be judged by the sign test alone).
        + _results("crbc", [b + 0.2 + 0.01 * (s - 2) for s, b in enumerate(base)])
        + _results("gigpo", [b + 0.02 * (-1) ** s for s, b in enumerate(base)])  # a wash
        + _results("cispo", [b - 0.2 + 0.01 * (s - 1) for s, b in enumerate(base[:3])])  # worse
        + _results("rloo", base[:2])  # 2 seeds so far: pairs with rloo use 2, the others 5
    )
    lines = lw.build_report(
        results, ["grpo", "gigpo", "crbc", "rloo"], ["cispo", "absent"], ["head"]
    )
    text = "\n".join(lines)
    row = next(line for line in lines if line.startswith("| grpo | crbc |"))
    assert row.endswith("| worse |") and "| 5 |" in row
    row = next(line for line in lines if line.startswith("| gigpo | crbc |"))
    assert row.endswith("| worse |")
    row = next(line for line in lines if line.startswith("| grpo | gigpo |"))
    assert row.endswith("| not resolved |")
    assert "| grpo | rloo | 2 |" in text
    # The extra method is paired with grpo on the 3 seeds both have.
    row = next(line for line in lines if line.startswith("| cispo | grpo |"))
    assert "| 3 |" in row and row.endswith("| worse |")
    assert "absent" not in text and "Start: eval success 0.300 over 5 seeds" in text
    final_row = next(line for line in lines if line.startswith("| crbc | 5 |"))
    cells = final_row.split("|")
    assert cells[3].strip().startswith(f"{0.3 + (np.mean(base) + 0.2 - 0.3) / 2:.3f}")  # training
    assert cells[5].strip().startswith(f"{np.mean(base) + 0.2:.3f}")  # final eval
    assert "- crbc: final − start eval success" in text and "improved on the warm start" in text
    assert "- cispo: final − start eval success" in text and "fell below the warm start" in text
    # _results gives every method the same first training success: the pairing holds.
    assert "the same training success in 5 of 5 seeds" in text
    assert "resolved on training success (both intervals exclude 0): " in text
    assert text.count("## Core pairs:") == 3 and text.count("## Against grpo:") == 3


def test_cfp_pretrained_critic_is_compared_with_the_fresh_one():
    results = _results("grpo", [0.3, 0.3, 0.3]) + _results("gae", [0.2, 0.25, 0.3])
    results += _results("gae_pretrained", [0.4, 0.45, 0.5])
    lines = lw.build_report(results, ["grpo"], ["gae", "gae_pretrained"], ["head"])
    assert "## Against their own baseline: training success" in lines
    row = next(line for line in lines if line.startswith("| gae_pretrained | gae |"))
    assert (
        "| 3 | +0.100 |" in row
    )  # training: mean of start and final and row.endswith("| better |")


def _fake_bench(tmp_path, monkeypatch, weights: bytes = b"w0"):
    """run() with the warm start and the training runs replaced by stubs; returns the list of
    (method, seed) runs actually trained."""
    init = tmp_path / "init"
    init.mkdir(exist_ok=True)
    (init / "config.json").write_text("{}")
    (init / "model.safetensors").write_bytes(weights)
    trained: list[tuple[str, int]] = []

    def fake_train(spec, out):
        trained.append((spec.method, spec.seed))
        final = 0.3 + 0.01 * spec.seed + (0.05 if spec.method == "crbc" else 0.0)
        rows = [{"iteration": 0, "eval/success": 0.3}]
        rows.append({"iteration": 1, "env/length": 100 / lw.BATCH, "env/success": final,
                     "eval/success": final})  # fmt: skip
        (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
        (out / "wall_s").write_text("1.0")

    monkeypatch.setattr(lw, "warm_start", lambda work, noise, log=print: init)
    monkeypatch.setattr(lw, "_train", fake_train)
    monkeypatch.setattr(lw, "_plot", lambda *a, **k: None)
    # The committed store is read by every run: here an empty folder, not the real results/.
    monkeypatch.setattr(lw, "committed_dir", lambda: tmp_path / "committed")
    return trained


def test_finished_runs_are_stored_and_reused_across_clones(tmp_path, monkeypatch):
    out = tmp_path / "results"
    argv = ["--methods", "grpo,crbc", "--seeds", "2", "--jobs", "1"]
    trained = _fake_bench(tmp_path, monkeypatch)
    lw.run(str(out), log=lambda *a: None, argv=argv)
    assert sorted(trained) == [("crbc", 0), ("crbc", 1), ("grpo", 0), ("grpo", 1)]
    lines = (out / lw.STORE).read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(x)["init"] for x in lines)
    # A fresh clone (no run folders) with the same warm start trains nothing again.
    trained.clear()
    lw.run(str(out), log=lambda *a: None, argv=[*argv[:3], "3", "--jobs", "1"])
    assert trained == [("grpo", 2), ("crbc", 2)]
    assert "| crbc | 3 |" in (out / "learning_warm.md").read_text()
    # Another budget (iterations) or another warm start never reuses them.
    trained.clear()
    lw.run(str(out), log=lambda *a: None, argv=[*argv, "--iterations", "6"])
    assert len(trained) == 4
    trained = _fake_bench(tmp_path, monkeypatch, weights=b"w1")
    lw.run(str(out), log=lambda *a: None, argv=argv)
    assert len(trained) == 4


def test_report_only_without_the_warm_start_reads_the_store(tmp_path, monkeypatch):
    out = tmp_path / "results"
    argv = ["--methods", "grpo,crbc", "--seeds", "2", "--jobs", "1"]
    _fake_bench(tmp_path, monkeypatch)
    lw.run(str(out), log=lambda *a: None, argv=argv)
    (out / "learning_warm.md").unlink()
    # A fresh clone: no .learning_warm_runs, the checkpoint is not here.
    lw.run(str(out), log=lambda *a: None, argv=[*argv, "--report-only"])
    text = (out / "learning_warm.md").read_text()
    assert "| grpo | 2 |" in text and "| crbc | 2 |" in text


def test_a_scratch_run_reuses_the_committed_runs_and_leaves_them_alone(tmp_path, monkeypatch):
    """The report goes to the scratch folder, the committed store is read (its runs are not
    trained again) and not written; new runs go to the scratch folder's store."""
    argv = ["--methods", "grpo,crbc", "--seeds", "2", "--jobs", "1"]
    trained = _fake_bench(tmp_path, monkeypatch)
    committed = tmp_path / "committed"
    lw.run(str(committed), log=lambda *a: None, argv=argv)  # as `--update` once did
    before = (committed / lw.STORE).read_text()
    trained.clear()
    scratch = tmp_path / "bench-out"
    lw.run(str(scratch), log=lambda *a: None, argv=[*argv[:3], "3", "--jobs", "1"])
    assert trained == [("grpo", 2), ("crbc", 2)]  # seeds 0-1 came from the committed store
    assert (committed / lw.STORE).read_text() == before
    assert len((scratch / lw.STORE).read_text().splitlines()) == 2
    assert "| crbc | 3 |" in (scratch / "learning_warm.md").read_text()
    # --report-only into a fresh scratch folder: the committed runs alone.
    fresh = tmp_path / "fresh"
    lw.run(str(fresh), log=lambda *a: None, argv=[*argv, "--report-only"])
    assert "| grpo | 2 |" in (fresh / "learning_warm.md").read_text()
    assert not (fresh / lw.STORE).exists()


def test_pairing_check_leaves_out_single_rollout_methods_and_states_eval_noise():
    results = _results("grpo", [0.3, 0.3, 0.3]) + _results("cispo", [0.2, 0.3, 0.4])
    klpo = _results("klpo", [0.2, 0.3, 0.4], start=0.1)  # 64 tasks x 1: another first batch
    text = "\n".join(lw.build_report(results + klpo, ["grpo"], ["cispo", "klpo"], ["head"]))
    assert "the same training success in 3 of 3 seeds" in text and "klpo roll out 64" in text
    # sqrt(0.3 * 0.7 / 128) = 0.0405, at the core methods' start
    assert "at success 0.30 has a binomial standard error of 0.041" in text
    shifted = _results("cispo", [0.2, 0.3, 0.4], start=0.1)
    text = "\n".join(
        lw.build_report(_results("grpo", [0.3] * 3) + shifted, ["grpo"], ["cispo"], [])
    )
    assert "the same training success in 0 of 3 seeds" in text


def test_report_shows_a_policy_that_came_apart():
    results = _results("grpo", [0.3, 0.3, 0.3]) + _results("klpo", [0.0, 0.0, 0.0])
    for r in results:
        broken = r["method"] == "klpo"
        r["invalid"] = [0.01, 0.5, 0.9, 0.99, 0.98] if broken else [0.01] * 5
        r["entropy"] = [0.7, 1.0, 1.4, 1.4, 1.5] if broken else [0.7] * 5
    text = "\n".join(lw.build_report(results, ["grpo"], ["klpo"], []))
    # mean of the last 3: (0.9 + 0.99 + 0.98) / 3 = 0.957; entropy (1.4 + 1.4 + 1.5) / 3 = 1.433
    assert "| 0.01 → 0.96 | 0.70 → 1.43 |" in text
    assert "invalid actions rose from 0.01 to 0.96" in text
    assert text.count("invalid actions rose") == 1
    # Summaries stored before these series existed still report (a dash).
    old = _results("grpo", [0.3, 0.3, 0.3])
    assert "| — | — |" in "\n".join(lw.build_report(old, ["grpo"], [], []))


def test_missing_runs_are_named_and_mechanisms_shown_for_methods_that_ran():
    results = _results("grpo", [0.3, 0.3, 0.3]) + _results("vimpo", [0.0, 0.0])
    lines = ex.coverage(results, [("grpo", [0, 1, 2]), ("gigpo", [0, 1, 2]), ("vimpo", [0, 1, 2])])
    assert lines[-1].endswith("gigpo (0/3 seeds), vimpo (2/3 seeds).")
    assert ex.coverage(results, [("grpo", [0, 1, 2])]) == []
    text = "\n".join(lw.build_report(results, ["grpo"], ["vimpo"], []))
    assert "- Mechanism (vimpo):" in text and "Mechanism (klpo)" not in text


def test_report_states_the_smallest_resolvable_difference():
    """'Not resolved' comes with a size: the median paired-t half-width over the core pairs."""
    from scipy import stats

    base = [0.30, 0.32, 0.35, 0.31, 0.33]
    noise = [0.02, -0.01, 0.03, -0.02, 0.0]
    results = _results("grpo", base) + _results("gigpo", [b + e for b, e in zip(base, noise)])
    text = "\n".join(lw.build_report(results, ["grpo", "gigpo"], [], ["head"]))
    # One pair: final eval difference d = -noise; half-width t(0.975, 4) * sd(d) / sqrt(5).
    half = stats.t.ppf(0.975, 4) * np.std(noise, ddof=1) / np.sqrt(5)
    assert (
        f"Resolution on final eval success: the paired 95% t half-width has median {half:.3f}"
        in text
    )
    assert "over 1 pairs at 5 seeds" in text
    # One seed gives no interval, so no resolution line either.
    one = _results("grpo", base[:1]) + _results("gigpo", base[:1])
    assert "Resolution on" not in "\n".join(lw.build_report(one, ["grpo", "gigpo"], [], ["h"]))


def test_runs_of_another_code_version_are_never_pooled(tmp_path, monkeypatch):
    """A store holding the runs of an older code version: a new benchmark run trains them
    again (its key carries the code's version), and a report uses one version only, named."""
    out = tmp_path / "results"
    argv = ["--methods", "grpo,crbc", "--seeds", "2", "--jobs", "1"]
    trained = _fake_bench(tmp_path, monkeypatch)
    monkeypatch.setattr(ex, "code_version", lambda: "0.1.0+old")
    lw.run(str(out), log=lambda *a: None, argv=argv)
    monkeypatch.setattr(ex, "code_version", lambda: "0.2.0+new")
    trained.clear()
    lw.run(str(out), log=lambda *a: None, argv=argv)
    assert len(trained) == 4  # nothing reused from 0.1.0+old
    records = [json.loads(x) for x in (out / lw.STORE).read_text().splitlines()]
    assert sorted({r["code"] for r in records}) == ["0.1.0+old", "0.2.0+new"]
    text = (out / "learning_warm.md").read_text()
    assert "code version `0.2.0+new` (this report's code;" in text and "| grpo | 2 |" in text
    assert "Also stored, not shown: `0.1.0+old`" in text
    # --report-only: the newest stored by default, or the version asked for.
    lw.run(
        str(out), log=lambda *a: None, argv=[*argv, "--report-only", "--code-version", "0.1.0+old"]
    )
    text = (out / "learning_warm.md").read_text()
    assert "code version `0.1.0+old` (not this report's code;" in text
    assert "| grpo | 2 |" in text and "| grpo | 4 |" not in text
    with pytest.raises(SystemExit, match="--code-version goes with --report-only"):
        lw.run(str(out), log=lambda *a: None, argv=[*argv, "--code-version", "0.1.0+old"])


def test_the_committed_store_is_reported_as_the_pre_versioned_group(tmp_path):
    """The committed runs carry no code version: one group, ``pre-0.2.x``, still reportable."""
    committed = Path(__file__).resolve().parents[2] / "results"
    store = ex.RunStore(tmp_path / lw.STORE, committed / lw.STORE)
    assert len(store.records) == 79 and {ex.version_of(r) for r in store.records} == {
        ex.PRE_VERSION
    }
    init_hash = store.records[0]["init"]
    spec = lw.spec("grpo", 0, tmp_path, init_hash, 12, 4)
    assert store.get(spec, ex.PRE_VERSION)["key"] == spec.key
    assert store.get(spec, ex.code_version()) is None
    assert store.versions([spec]) == [ex.PRE_VERSION]


def test_signal_per_update_is_summarised_and_reported(tmp_path):
    """The runs' diagnostics (mixed groups, half-batch gradient agreement, KL) reach the store
    and the report; runs stored before them are left out of that table, not shown as 0."""
    out = tmp_path / "run"
    out.mkdir()
    rows = [{"iteration": 0, "eval/success": 0.2}]
    for i, (mixed, cos) in enumerate([(0.25, 0.1), (0.125, -0.05)], start=1):
        rows.append(
            {
                "iteration": i,
                "env/length": 20.0,
                "env/success": 0.2,
                "diag/mixed_groups": mixed,
                "diag/grad_cos": cos,
                "diag/grad_snr": 0.01,
                "loss/approx_kl": 0.004,
                "eval/success": 0.2,
            }
        )
    (out / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    r = {**lw.summarise(None, out), "method": "grpo", "seed": 0}
    assert r["signal"]["mixed"] == [0.25, 0.125] and r["signal"]["grad_cos"] == [0.1, -0.05]
    second = {**r, "seed": 1, "signal": {**r["signal"], "mixed": [0.5, 0.5]}}
    legacy = {k: v for k, v in r.items() if k != "signal"} | {"method": "gigpo"}
    text = "\n".join(lw.build_report([r, second, legacy], ["grpo", "gigpo"], [], ["h"]))
    row = next(line for line in text.splitlines() if line.startswith("| grpo | 0.")).split("|")
    # Mixed: per run means 0.1875 and 0.5, then their mean 0.34375.
    assert row[2].strip().startswith("0.344 [")
    section = text.split("## Signal per update")[1].split("\n## ")[0]
    assert "| grpo |" in section and "gigpo" not in section
    assert "- Signal (grpo): 34% of the groups" in text and "mean cosine +0.03" in text
    assert "nearly orthogonal" in text
