"""A 2-iteration run with rollout records and every logger: the records give the trainer's
advantages back through ``assign``, each logger holds the same scalars, a resume leaves no
duplicate or missing record file, and the report builds from the run folder."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers import read_metrics, run_agentrl

from agentrl.credit import assign
from agentrl.credit.rollout_records import read_records, record_files

pytestmark = pytest.mark.slow

ARGS = [
    "trainer.steps=2",
    "trainer.save_every=1",
    "trainer.eval_every=1",
    "trainer.eval_episodes=2",
    "trainer.rollouts_every=1",
    "trainer.progress=false",
    "algo=gigpo",  # a step-level method: the anchors must survive the round trip
    "rollout.n_tasks=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=3",
    "env.max_steps=5",
    "model.tokenizer_episodes=4",
]
OPTIONAL = [name for name in ("wandb", "mlflow") if importlib.util.find_spec(name)]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("records") / "run"
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "MLFLOW_TRACKING_URI": (out / "mlruns").as_uri(),
        "MLFLOW_ALLOW_FILE_STORE": "true",  # MLflow >= 3.7 asks before using a file store
    }
    loggers = ",".join(["tensorboard", "jsonl", *OPTIONAL])
    run_agentrl([*ARGS, f"trainer.loggers=[{loggers}]"], out, env=env, cwd=out.parent)
    return out


def test_records_reproduce_the_trainers_advantages(run):
    files = record_files(run)
    assert sorted(files["train"]) == [1, 2] and sorted(files["eval"]) == [0, 1, 2]
    rows = {r["iteration"]: r for r in read_metrics(run)}
    for it, path in files["train"].items():
        recs = read_records(path)
        used = np.array([r["advantage"] for r in recs])
        assert len(recs) == sum(1 for r in recs if r["split"] == "train" and r["iteration"] == it)
        assert {r["policy_version"] for r in recs} == {it - 1}
        # What the trainer logged about the advantages it used...
        assert used.mean() == pytest.approx(rows[it]["credit/adv_mean"], abs=1e-12)
        assert used.std() == pytest.approx(rows[it]["credit/adv_std"], abs=1e-12)
        # ...and the records fed back through assign give exactly those advantages.
        again = assign(recs, "gigpo")
        assert np.array_equal(again.advantages, used)
    ev = read_records(files["eval"][2])
    assert all(r["advantage"] is None and r["observation"] for r in ev)


def tensorboard_scalars(run: Path) -> dict[tuple[int, str], float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {(e.step, k): e.value for k in acc.Tags()["scalars"] for e in acc.Scalars(k)}


def jsonl_scalars(run: Path) -> dict[tuple[int, str], float]:
    return {
        (r["iteration"], k): v for r in read_metrics(run) for k, v in r.items() if k != "iteration"
    }


def wandb_scalars(run: Path) -> dict[tuple[int, str], float]:
    """The history of the offline run's ``.wandb`` file (a LevelDB-style log of protobuf
    records: 32 KiB blocks of chunks with a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run.glob("wandb/offline-run-*/run-*.wandb")
    data, pos, buf, out = path.read_bytes(), 7, b"", {}
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind not in (1, 4):
            continue
        rec = pb.Record()
        rec.ParseFromString(buf)
        if rec.WhichOneof("record_type") == "history":
            items = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item
            }
            step = int(items["_step"])
            out.update({(step, k): v for k, v in items.items() if not k.startswith("_")})
    return out


def mlflow_scalars(run: Path) -> dict[tuple[int, str], float]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run / "mlruns").as_uri())
    run_id = (run / "mlflow_run_id").read_text().strip()
    keys = client.get_run(run_id).data.metrics
    return {(m.step, k): m.value for k in keys for m in client.get_metric_history(run_id, k)}


def test_every_logger_holds_the_same_scalars(run, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # to read the file store back
    expected = jsonl_scalars(run)
    assert len(expected) > 50
    tb = tensorboard_scalars(run)
    assert tb.keys() == expected.keys()
    for key, v in expected.items():  # TensorBoard stores float32
        assert tb[key] == pytest.approx(v, rel=1e-6, abs=1e-6), key
    readers = {"wandb": wandb_scalars, "mlflow": mlflow_scalars}
    if len(OPTIONAL) < 2:
        pytest.skip(f"not installed: {sorted(set(readers) - set(OPTIONAL))} (extras wandb, mlflow)")
    for name in OPTIONAL:
        got = readers[name](run)
        assert got.keys() == expected.keys(), name
        for key, v in expected.items():
            assert got[key] == pytest.approx(v, rel=1e-12, abs=1e-12), (name, key)


def test_a_resume_rewrites_the_files_past_its_checkpoint_once(run, tmp_path):
    """As after a kill between checkpoint 1 and 2 that had written iteration 2's records and
    half of a later file: the resumed run deletes them and writes iteration 2 again, equal to
    the uninterrupted run's."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("wandb", "mlruns", "mlflow_run_id"))
    (copy / "checkpoints" / "latest").write_text("iter-000001")
    shutil.rmtree(copy / "checkpoints" / "iter-000002")
    rollouts = copy / "rollouts"
    (rollouts / "iter-000002.jsonl.gz").write_bytes(b"written before the kill")
    (rollouts / "iter-000003.jsonl.gz.tmp").write_bytes(b"half a file")
    run_agentrl([*ARGS, "trainer.resume=true"], copy, cwd=tmp_path)
    assert sorted(p.name for p in rollouts.iterdir()) == sorted(
        p.name for p in (run / "rollouts").iterdir()
    )
    for name in ("iter-000001.jsonl.gz", "iter-000002.jsonl.gz", "eval-000002.jsonl.gz"):
        assert read_records(rollouts / name) == read_records(run / "rollouts" / name), name


def test_the_report_builds_from_the_run(run, tmp_path):
    from agentrl.report import build_report

    out = build_report(run, tmp_path / "report.html")
    text = out.read_text()
    assert "equal the trainer" in text  # the recomputed gigpo advantages are the recorded ones
    assert text.count('class="traj-graph"') == 2 * 2  # 2 recorded iterations x 2 groups
    assert "Evaluation after 2 updates" in text and "python" in text
