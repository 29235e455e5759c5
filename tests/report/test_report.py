"""The run report from a small synthetic run folder: the graphs' nodes and edges match the
trajectory graph, the cap hides what it says it hides, every comparable estimator's advantages
are embedded, the comparison page shares axes; and, in a real headless browser, the page's
script runs without errors and switching the estimator (URL fragment) relabels the edges."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import make_groups

from agentrl.credit import StepBatch, build_graph, compute_advantages
from agentrl.credit.rollout_records import episode_records, record_path, write_records
from agentrl.report import ReportConfig, ReportError, build_compare, build_report
from agentrl.report.page import ERROR_TRAP
from agentrl.report.run_data import comparable_estimators

# Group 0: a small graph with a self-loop, a fork and both outcomes. Group 1: a chain of 12
# states (the cap test). Group 2: one episode.
SPEC = [
    [
        [("s0", "right", 0.0), ("s1", "up", 1.0)],
        [("s0", "right", 0.0), ("s1", "down", 0.0)],
        [("s0", None, -0.1), ("s0", "right", 0.0), ("s1", "up", 1.0)],
        [("s0", "left", 0.0), ("s2", "up", 0.0)],
    ],
    [
        [(f"c{k}", "next", 0.0) for k in range(12)] + [("c12", "stop", 1.0)],
        [("c0", "next", 0.0), ("c1", "stop", 0.0)],
    ],
    [[("x", "go", 1.0)]],
]


def make_run(root: Path, name: str = "run", shift: float = 0.0) -> Path:
    """A run folder as the trainer writes it: config, metrics, one training and one
    evaluation record file (advantages: GRPO's, as a run with algo=grpo records them)."""
    out = root / name
    out.mkdir(parents=True)
    groups = make_groups(SPEC)
    for g in groups:
        for tr in g.trajectories:
            for t, s in enumerate(tr.steps):
                s.observation = f"board at turn {t}\n{s.anchor}"
                s.response_text = s.action or "???"
    adv = compute_advantages("grpo", StepBatch.from_groups(groups)).step
    write_records(
        record_path(out, "train", 2),
        episode_records(groups, split="train", iteration=2, policy_version=1, advantages=adv),
    )
    write_records(
        record_path(out, "eval", 2),
        episode_records(groups[:1], split="eval", iteration=2, policy_version=2),
    )
    (out / "run_config.yaml").write_text(
        yaml.safe_dump({"env": {"name": "guess"}, "algo": {"name": "grpo"}, "trainer": {"seed": 0}})
    )
    rows = [{"iteration": 0, "eval/success": 0.0}]
    rows += [
        {"iteration": i, "env/success": 0.1 * i + shift, "loss/kl": 0.01 * i, "perf/x": 1.0}
        for i in (1, 2)
    ]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def expected_counts(group: int) -> tuple[int, int]:
    """Nodes and edges of the group's trajectory graph, straight from TrajectoryGraph."""
    graph = build_graph(StepBatch.from_groups(make_groups(SPEC)))
    g = graph.to_networkx(group)
    absorbing = [n for n in ("success", "failure") if g.in_degree(n) > 0]
    states = [n for n in g if isinstance(n, int)]
    return len(states) + len(absorbing), g.number_of_edges()


class Svgs(HTMLParser):
    """Counts nodes and edges and collects edge labels per ``svg.traj-graph``."""

    def __init__(self):
        super().__init__()
        self.graphs: dict[str, dict] = {}
        self.current: str | None = None
        self.in_label = False
        self.html_attrs: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "html":
            self.html_attrs = {k: v or "" for k, v in attrs}
        if tag == "svg" and "traj-graph" in cls:
            self.current = a["id"]
            self.graphs[self.current] = {"nodes": 0, "edges": 0, "labels": []}
        elif self.current and tag == "g" and "node" in cls:
            self.graphs[self.current]["nodes"] += 1
        elif self.current and tag == "g" and "edge" in cls:
            self.graphs[self.current]["edges"] += 1
        elif self.current and tag == "text" and "edge-label" in cls:
            self.in_label = True
            self.graphs[self.current]["labels"].append("")

    def handle_endtag(self, tag):
        if tag == "svg":
            self.current = None
        if tag == "text":
            self.in_label = False

    def handle_data(self, data):
        if self.in_label and self.current:
            self.graphs[self.current]["labels"][-1] += data


def parse(html_text: str) -> Svgs:
    p = Svgs()
    p.feed(html_text)
    return p


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    run = make_run(tmp_path_factory.mktemp("report"))
    return build_report(run, run / "report.html", ReportConfig(max_nodes=5))


def test_graph_nodes_and_edges_match_the_trajectory_graph(report):
    svgs = parse(report.read_text()).graphs
    for g in (0, 2):
        nodes, edges = expected_counts(g)
        assert (svgs[f"g2-{g}"]["nodes"], svgs[f"g2-{g}"]["edges"]) == (nodes, edges)
    # Group 0 by hand: states s0, s1, s2 and both outcomes; edges s0-right->s1, s0-invalid->s0,
    # s0-left->s2, s1-up->success, s1-down->failure, s2-up->failure.
    assert expected_counts(0) == (5, 6)


def test_the_cap_keeps_the_most_visited_states_and_says_what_it_hid(report):
    text = report.read_text()
    g1 = parse(text).graphs["g2-1"]
    # 13 states, the 5 most visited drawn (c0, c1 twice; then the chain from c2 in order), and
    # the success and failure nodes that drawn edges reach.
    assert g1["nodes"] == 5 + 1  # c1 -stop-> failure; c12 -stop-> success is hidden
    assert g1["edges"] == 5  # c0 -> c1 -> ... -> c4, and c1 -stop-> failure
    # Hidden: c5..c12 (8 states), the 8 edges into or out of them plus c12 -stop-> success.
    assert "5 of 13 states drawn (the 5 most visited; 8 states, 9 edges and 9 steps hidden)" in text


def test_every_comparable_estimator_is_embedded_and_the_recorded_ones_match(report):
    text = report.read_text()
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', text, re.S).group(1))
    methods = set(data["methods"])
    assert {"grpo", "gigpo", "crbc", "recorded"} <= methods
    assert methods - {"recorded"} <= set(comparable_estimators())
    it = data["iterations"]["2"]
    assert it["adv"]["recorded"] == it["adv"]["grpo"]  # the report shows the trainer's numbers
    assert it["adv"]["gigpo"] != it["adv"]["grpo"]
    assert "equal the trainer" in text
    # No network: nothing is loaded from elsewhere.
    assert not re.search(r'(src|href)="(https?:)?//', text)
    assert "<svg" in text and "Evaluation after 2 updates" in text


def test_compare_puts_runs_on_shared_axes(tmp_path):
    a, b = make_run(tmp_path, "a"), make_run(tmp_path, "b", shift=0.5)
    out = build_compare([a, b], tmp_path / "compare.html")
    text = out.read_text()
    chart = re.search(r'<svg class="chart" data-metric="env/success".*?</svg>', text, re.S).group(0)
    assert chart.count("<path") == 2  # one line per run, one chart
    assert "a (grpo)" in text and "b (grpo)" in text
    assert "The runs' configs are identical." in text


def test_a_folder_without_metrics_is_refused_with_a_reason(tmp_path):
    with pytest.raises(ReportError, match=r"no metrics\.jsonl"):
        build_report(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "agentrl.report", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "no metrics.jsonl" in proc.stderr


# -- in a real browser ---------------------------------------------------------------------


def chromium() -> str:
    exe = next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
        None,
    )
    if exe is None:
        if os.environ.get("AGENTRL_REQUIRE_CHROMIUM") == "1":
            pytest.fail("AGENTRL_REQUIRE_CHROMIUM=1 but no chromium on PATH")
        pytest.skip("no headless browser: apt-get install -y chromium (Debian) to run this test")
    return exe


def dump_dom(url: str) -> tuple[str, str]:
    """The DOM after the page's scripts ran, and the browser's log (console included)."""
    proc = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def test_in_a_browser_the_script_runs_and_the_estimator_switches_the_labels(report):
    doms = {m: dump_dom(f"{report.as_uri()}#method={m}") for m in ("grpo", "gigpo")}
    labels = {}
    for m, (dom, log) in doms.items():
        page = parse(dom)
        assert page.html_attrs.get("data-ready") == "1", "the page's script did not finish"
        assert "data-errors" not in page.html_attrs, page.html_attrs.get("data-errors")
        assert "Uncaught" not in log, log[-2000:]
        nodes, edges = expected_counts(0)
        assert (page.graphs["g2-0"]["nodes"], page.graphs["g2-0"]["edges"]) == (nodes, edges)
        labels[m] = page.graphs["g2-0"]["labels"]
    assert labels["grpo"] != labels["gigpo"]
    # The labels are the estimators' mean advantages along each edge, as the script wrote them.
    assert all(re.fullmatch(r"[+\u2212]\d+\.\d\d", x) for x in labels["gigpo"])
    both, _ = dump_dom(f"{report.as_uri()}#method=gigpo&vs=grpo")
    paired = parse(both).graphs["g2-0"]["labels"]
    assert [x.split(" | ") for x in paired] == [
        list(p) for p in zip(labels["gigpo"], labels["grpo"])
    ]


def test_the_browser_check_sees_a_script_error(tmp_path):
    """The error trap works: a page whose script throws is caught by the same checks."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        f"<html><head><script>{ERROR_TRAP}</script></head><body>"
        "<script>undefinedFunction();</script></body></html>"
    )
    dom, log = dump_dom(bad.as_uri())
    assert "undefinedFunction" in parse(dom).html_attrs.get("data-errors", "")
    assert "Uncaught" in log


def test_adv_colour_matches_the_scripts_ramp():
    from agentrl.report.graph_view import adv_colour

    assert adv_colour(0.0, 1.0) == "#bbbbbb"
    assert adv_colour(1.0, 1.0) == "#1a9850" and adv_colour(-2.0, 1.0) == "#d73027"
    assert np.isclose(int(adv_colour(0.5, 1.0)[1:3], 16), round(187 + (26 - 187) * 0.5))
