"""Smoke test of the credit benchmark: every registered estimator appears in the report."""

from __future__ import annotations

import re

from agentrl.bench.__main__ import COMMANDS
from agentrl.credit import list_estimators


def test_credit_benchmark_quick(tmp_path):
    from agentrl.bench.credit import run

    quality, timing = run(out_dir=tmp_path, quick=True, log=lambda _: None)
    md = (tmp_path / "credit.md").read_text()
    assert (tmp_path / "credit.png").stat().st_size > 0
    assert COMMANDS["credit"] == "agentrl.bench.credit:run"
    pearson = md.split("## Pearson r with the true advantage", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| (\w+)", pearson, flags=re.MULTILINE)) - {"estimator"}
    assert listed == set(list_estimators())
    assert not quality.errors and not timing.errors, (quality.errors, timing.errors)
    for name in list_estimators():  # every estimator was timed at every size
        assert all(t is not None and t >= 0 for t in timing.est_s[name])


def test_credit_metrics_hand_computed():
    import numpy as np

    from agentrl.bench.credit import credit_metrics

    truth = np.array([-1.0, 0.0, 1.0, 2.0])
    m = credit_metrics(2.0 * truth, truth)  # right shape, wrong scale
    assert m["pearson"] == 1.0 and m["spearman"] == 1.0
    assert m["mse"] == np.mean(truth**2) and m["mse_scaled"] == 0.0
    m = credit_metrics(np.zeros(4), truth)  # constant output: no correlation, scale 0
    assert np.isnan(m["pearson"]) and m["rel_mse_scaled"] == 1.0
    # Ties share the mean rank: ranks (2.5, 2.5, 1, 4) against (1, 2, 3, 4).
    m = credit_metrics(np.array([1.0, 1.0, 0.0, 3.0]), truth)
    assert abs(m["spearman"] - 1.5 / np.sqrt(4.5 * 5.0)) < 1e-12
