"""Proof env: episodes, info keys, splits and options, config errors, task files.

The contract suite (``tests/test_env_contract.py -k proof``) covers the generic rules; these
tests pin down what is specific to one-turn graded answers. Deterministic, CPU only.
"""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium
import pytest

import agentrl
from agentrl.configuration import ConfigError, to_dict
from agentrl.envs.proof import ProofConfig, ProofEnv, load_task_file, load_tasks
from agentrl.envs.proof.env import instructions

SMALL = {"n_train_tasks": 30, "n_eval_tasks": 10}


def _env(**kwargs) -> ProofEnv:
    return ProofEnv(**{**SMALL, **kwargs})


# -- registration and config --------------------------------------------------------------------


def test_registered_and_made_by_name():
    assert "proof" in agentrl.list_envs()
    env = agentrl.make("proof", **SMALL)
    assert isinstance(env.unwrapped, ProofEnv)
    assert gymnasium.spec("agentrl/Proof-v0").entry_point == "agentrl.envs.proof.env:ProofEnv"
    assert to_dict(ProofConfig())["source"] == "derivations"  # Hydra schema of the defaults


def test_registering_does_not_load_the_grader():
    code = (
        "import sys, agentrl; agentrl.list_envs(); "
        "print(any(m in sys.modules for m in "
        "('agentrl.envs.proof.grading', 'agentrl.envs.proof.judge')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"source": "web"}, "env.source"),
        ({"difficulty": [4]}, "env.difficulty"),
        ({"difficulty": []}, "env.difficulty"),
        ({"kinds": ["limits"]}, "env.kinds"),
        ({"max_steps": 0}, "env.max_steps"),
        ({"n_train_tasks": 0}, "env.n_train_tasks"),
        ({"judge_timeout_s": 0}, "env.judge_timeout_s"),
        ({"judge_retries": -1}, "env.judge_retries"),
        ({"judge_base_url": "localhost:8000"}, "env.judge_base_url"),
        ({"judge_concurrency": 0}, "env.judge_concurrency"),
        ({"colour": 1}, "env.colour"),
    ],
)
def test_bad_config_names_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        agentrl.make("proof", **kwargs)


def test_file_source_needs_an_existing_path_and_a_judge_model(tmp_path):
    with pytest.raises(ConfigError, match=r"env\.path=''.*JSONL or parquet"):
        ProofConfig(source="file", judge_model="m")
    with pytest.raises(ConfigError, match=r"env\.path=.*no file is there"):
        ProofConfig(source="file", path=str(tmp_path / "nope.jsonl"), judge_model="m")
    bad = tmp_path / "tasks.csv"
    bad.write_text("problem\nx\n")
    with pytest.raises(ConfigError, match=r"env\.path=.*\.jsonl"):
        ProofConfig(source="file", path=str(bad), judge_model="m")
    good = tmp_path / "tasks.jsonl"
    good.write_text('{"problem": "Prove it."}\n')
    with pytest.raises(ConfigError, match=r"env\.judge_model"):
        ProofConfig(source="file", path=str(good))
    ProofConfig(source="file", path=str(good), judge_model="m")


# -- episodes -----------------------------------------------------------------------------------


def test_reset_poses_a_problem_with_instructions():
    env = _env()
    obs, info = env.reset(seed=0)
    task = env.task
    assert info["task"] == task.problem and obs.startswith(task.problem)
    assert instructions(task) in obs
    assert info["task_id"] == task.id and info["reference_solution"] == task.reference_solution
    assert info["anchor"] == (task.id, 0)
    assert info["won"] is False and info["admissible_actions"] is None
    assert info["source"] == "derivations"


def test_reference_answer_wins_and_ends_the_episode():
    env = _env()
    _, info = env.reset(seed=1)
    obs, reward, term, trunc, info = env.step(info["reference_solution"])
    assert (reward, term, trunc) == (1.0, True, False)
    assert info["won"] is True and info["points"] == 7 and info["graded"] is True
    assert info["judge_error"] is None and info["grade"]["complete"] is True
    assert info["anchor"] == (env.task.id, 1)
    assert info["action_valid"] is True
    assert info["executed_action"] == info["reference_solution"].lower()
    assert obs == "Points: 7/7."


def test_wrong_answer_is_graded_zero_not_invalid():
    env = _env()
    env.reset(seed=2)
    _, reward, term, _, info = env.step("I am not sure, but it is probably true.")
    assert (reward, term, info["won"], info["points"], info["graded"]) == (
        0.0,
        True,
        False,
        0,
        True,
    )
    assert info["action_valid"] is True


def test_invalid_answer_changes_nothing_and_can_be_retried():
    env = _env(max_steps=2)
    _, info = env.reset(seed=3)
    obs, reward, term, trunc, info2 = env.step("\x00\x01")
    assert (reward, term, trunc, info2["action_valid"]) == (0.0, False, False, False)
    assert info2["anchor"] == info["anchor"] and info2["points"] is None
    assert info2["graded"] is False and info2["judge_error"] is None
    assert "could not be graded" in obs and instructions(env.task) in obs
    _, reward, term, trunc, info3 = env.step(info["reference_solution"])
    assert info3["anchor"] == (env.task.id, 1)
    assert (reward, term, trunc) == (1.0, True, False)


def test_splits_and_task_index():
    env = _env()
    train, evals = env.unwrapped.tasks("train"), env.unwrapped.tasks("eval")
    assert (len(train), len(evals)) == (30, 10)
    assert not {t.problem for t in train} & {t.problem for t in evals}
    _, info = env.reset(seed=0, options={"split": "eval"})
    assert info["task_id"] in {t.id for t in evals}
    _, info = env.reset(options={"task_index": 4})
    assert info["task_id"] == train[4].id
    _, info = env.reset(options={"split": "eval", "task_index": 9})
    assert info["task_id"] == evals[9].id
    with pytest.raises(ConfigError, match="split"):
        env.reset(options={"split": "test"})
    with pytest.raises(ConfigError, match="task_index"):
        env.reset(options={"task_index": 30})


def test_seeded_resets_repeat_and_cover_the_split():
    ids = [_env().reset(seed=s)[1]["task_id"] for s in range(20)]
    assert ids == [_env().reset(seed=s)[1]["task_id"] for s in range(20)]
    assert len(set(ids)) > 10


def test_task_lists_follow_the_config():
    cfg = ProofConfig(n_train_tasks=12, n_eval_tasks=5, kinds=("equation",), difficulty=(1,))
    tasks = load_tasks(cfg, "train")
    assert len(tasks) == 12 and load_tasks(cfg, "train") is tasks  # cached per process
    assert all(t.derivation.kind == "equation" and t.derivation.difficulty == 1 for t in tasks)
    assert all(t.id.startswith("equation-d1-") for t in tasks)
    assert all(t.source == "derivations" and t.reference_solution for t in tasks)
    other = load_tasks(ProofConfig(n_train_tasks=12, seed=1, kinds=("equation",)), "train")
    assert [t.id for t in other] != [t.id for t in tasks]


# -- task files ---------------------------------------------------------------------------------

IMO_PROOFBENCH_ROW = {
    "Problem ID": "PB-Basic-001",
    "Problem": "Determine all functions f: Z -> Z with f(2x) + 2f(y) = f(f(x + y)).",
    "Solution": "Put x = 0 ...",
    "Grading guidelines": "(Partial) 1. Found f(0) ...",
    "Category": "Algebra",
    "Level": "Basic",
    "Short Answer": "f(x) = 0 or f(x) = 2x + c",
    "Source": "Novel Problem",
}
FINEPROOFS_ROW = {
    "problem": "Prove that there are infinitely many primes.",
    "source": "olympiads",
    "rubrics": "Checkpoints: (2 pts) assumes finitely many ...",
    "scores": [7, 0, 3],
    "rewards": [1.0, 0.0, 0.43],
    "num_rewards": 3,
}


def _write_jsonl(path, rows) -> str:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return str(path)


def test_file_loader_reads_both_layouts(tmp_path):
    path = _write_jsonl(tmp_path / "mixed.jsonl", [IMO_PROOFBENCH_ROW, FINEPROOFS_ROW])
    a, b = load_task_file(path)
    assert (a.id, a.problem, a.reference_solution) == (
        "PB-Basic-001",
        IMO_PROOFBENCH_ROW["Problem"],
        "Put x = 0 ...",
    )
    assert a.rubric == IMO_PROOFBENCH_ROW["Grading guidelines"] and a.source == "file"
    assert a.meta["Category"] == "Algebra" and "Problem" not in a.meta
    assert a.derivation is None
    assert (b.id, b.reference_solution, b.rubric) == ("mixed-1", "", FINEPROOFS_ROW["rubrics"])
    assert b.meta == {"source": "olympiads", "num_rewards": 3}


def test_file_loader_aliases_json_and_errors(tmp_path):
    rows = [{"question": "Q1", "proof": "P1", "marking_scheme": {"1": "step"}, "uid": 7}]
    (tmp_path / "t.json").write_text(json.dumps(rows))
    (t,) = load_task_file(tmp_path / "t.json")
    assert (t.id, t.problem, t.reference_solution, t.rubric) == ("7", "Q1", "P1", '{"1": "step"}')
    with pytest.raises(ValueError, match=r"row 1: no problem statement"):
        load_task_file(_write_jsonl(tmp_path / "a.jsonl", [{"problem": "x"}, {"solution": "y"}]))
    with pytest.raises(ValueError, match="share the id"):
        load_task_file(_write_jsonl(tmp_path / "b.jsonl", [{"id": 1, "problem": "x"}] * 2))
    (tmp_path / "c.jsonl").write_text('{"problem": "x"}\nnot json\n')
    with pytest.raises(ValueError, match=r"c\.jsonl:2"):
        load_task_file(tmp_path / "c.jsonl")
    (tmp_path / "d.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match="no tasks"):
        load_task_file(tmp_path / "d.jsonl")


def test_file_loader_reads_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [IMO_PROOFBENCH_ROW, {**IMO_PROOFBENCH_ROW, "Problem ID": "PB-Basic-002"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pb.parquet")
    tasks = load_task_file(tmp_path / "pb.parquet")
    assert [t.id for t in tasks] == ["PB-Basic-001", "PB-Basic-002"]


def test_file_source_splits(tmp_path):
    train = _write_jsonl(tmp_path / "train.jsonl", [FINEPROOFS_ROW])
    evals = _write_jsonl(tmp_path / "eval.jsonl", [IMO_PROOFBENCH_ROW])
    cfg = ProofConfig(source="file", path=train, eval_path=evals, judge_model="m")
    assert [t.id for t in load_tasks(cfg, "eval")] == ["PB-Basic-001"]
    same = ProofConfig(source="file", path=train, judge_model="m")
    assert load_tasks(same, "eval") == load_tasks(same, "train")
    env = ProofEnv(config=cfg)
    obs, info = env.reset(seed=0, options={"split": "eval"})
    assert info["task"] == IMO_PROOFBENCH_ROW["Problem"] and "rigorous proof" in obs
    assert info["source"] == "file" and info["reference_solution"] == "Put x = 0 ..."
