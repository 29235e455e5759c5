"""Rollout record files: the size bound, anchors as JSON, ids across ranks, atomic writes and
the resume pruning; records written from groups give the trainer's advantages back through
``assign``."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from helpers import make_groups

from agentrl.credit import StepBatch, assign, compute_advantages
from agentrl.credit.rollout_records import (
    CUT_MARKER,
    cut_text,
    episode_records,
    groups_from_records,
    json_key,
    prune_records,
    read_records,
    record_files,
    record_path,
    renumber,
    write_records,
)

SPEC = [
    [
        [((0, 0), "right", 0.0), ((0, 1), "up", 1.0)],
        [((0, 0), "right", 0.0), ((0, 1), "down", 0.0)],
        [((0, 0), None, -0.1), ((0, 0), "right", 0.0), ((0, 1), "up", 1.0)],
    ],
    [
        [("a", "x", 0.0), ("b", "y", 0.0)],
        [("a", "y", 1.0)],
    ],
]


def test_cut_text_keeps_both_ends_around_the_marker():
    text = "a" * 50 + "b" * 50
    assert cut_text(text, 100) == text
    cut = cut_text(text, 20)
    assert cut == "a" * 10 + CUT_MARKER.format(n=80) + "b" * 10
    assert "…[80 characters cut]…" in cut


def test_json_key_keeps_equal_anchors_equal_and_distinct_ones_distinct():
    assert json_key(((1, 2), ((3, 4),))) == [[1, 2], [[3, 4]]]
    assert json_key(np.int64(3)) == 3
    assert json_key(frozenset({2, 1})) == [1, 2]
    assert json_key(b"\x00") == repr(b"\x00")
    assert json_key((1, 2)) != json_key((2, 1))


@pytest.mark.parametrize("method", ["grpo", "gigpo", "crbc"])
def test_records_give_the_trainers_advantages_back(method):
    groups = make_groups(SPEC)
    for g in groups:
        for tr in g.trajectories:
            for s in tr.steps:
                s.observation = "obs " + "x" * 30
    batch = StepBatch.from_groups(groups)
    adv = compute_advantages(method, batch).step
    recs = episode_records(
        groups, split="train", iteration=3, policy_version=2, advantages=adv, max_chars=10
    )
    assert [r["advantage"] for r in recs] == adv.tolist()
    assert recs[0]["observation"].startswith("obs x") and "characters cut" in recs[0]["observation"]
    assert recs[0]["next_state_key"] == recs[1]["state_key"] and recs[1]["next_state_key"] is None
    again = assign(recs, method)
    assert np.array_equal(again.advantages, adv)
    rebuilt = StepBatch.from_groups(groups_from_records(list(reversed(recs))))
    assert np.array_equal(rebuilt.step_anchor, batch.step_anchor)
    assert np.array_equal(rebuilt.step_reward, batch.step_reward)


def test_eval_records_have_no_advantage_and_a_wrong_length_is_refused():
    groups = make_groups(SPEC)
    recs = episode_records(groups, split="eval", iteration=0, policy_version=0)
    assert all(r["advantage"] is None and r["split"] == "eval" for r in recs)
    with pytest.raises(ValueError, match="3 advantages for 10 steps"):
        episode_records(groups, split="train", iteration=1, policy_version=0, advantages=np.ones(3))
    with pytest.raises(ValueError, match="split must be one of"):
        episode_records(groups, split="test", iteration=1, policy_version=0)


def test_renumber_joins_rank_parts_in_order():
    groups = make_groups(SPEC)
    part = episode_records(groups, split="eval", iteration=0, policy_version=0)
    joined = renumber([part, [], part])
    ids = [(r["group_id"], r["trajectory_id"]) for r in joined]
    assert ids[: len(part)] == [(r["group_id"], r["trajectory_id"]) for r in part]
    assert ids[len(part)] == (2, 5) and ids[-1] == (3, 9)


def test_files_are_written_atomically_read_back_and_pruned_on_resume(tmp_path):
    groups = make_groups(SPEC)
    recs = episode_records(groups, split="eval", iteration=0, policy_version=0)
    for split, it in [("train", 1), ("train", 2), ("train", 3), ("eval", 0), ("eval", 2)]:
        write_records(record_path(tmp_path, split, it), recs)
    p = record_path(tmp_path, "train", 2)
    assert read_records(p) == recs
    # The same records, the same bytes (a replayed iteration rewrites its file identically).
    first = p.read_bytes()
    write_records(p, recs)
    assert p.read_bytes() == first and gzip.decompress(first).count(b"\n") == len(recs)
    (tmp_path / "rollouts" / "iter-000004.jsonl.gz.tmp").write_bytes(b"half a file")
    found = record_files(tmp_path)
    assert sorted(found["train"]) == [1, 2, 3] and sorted(found["eval"]) == [0, 2]
    gone = prune_records(tmp_path, 2)  # resumed from the checkpoint of iteration 2
    assert sorted(x.name for x in gone) == ["iter-000003.jsonl.gz", "iter-000004.jsonl.gz.tmp"]
    assert sorted(record_files(tmp_path)["train"]) == [1, 2]
    prune_records(tmp_path, -1)  # from scratch
    assert record_files(tmp_path) == {"train": {}, "eval": {}}
