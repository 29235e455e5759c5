"""The stateful-estimator contract: plain-data state, purity, lost episodes, the trainer keeping
the state between iterations and in checkpoints (resume is exact). Two training iterations with
each advantage method of issue 16 are cases of tests/run/test_e2e_matrix.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import make_batch, read_metrics

from agentrl.credit import check_state, compute_advantages, get_estimator
from agentrl.credit.batch import StepBatch
from agentrl.run import compose
from agentrl.run.checkpoint import load_trainer_state
from agentrl.run.trainer import train

SMALL = [
    "rollout.n_tasks=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=3",  # short answers: some moves are valid, so returns differ
    "env.max_steps=5",
    "model.tokenizer_episodes=4",
    "trainer.eval_every=0",
    "trainer.progress=false",
]
STATEFUL = ("bv_blend", "basis", "constrained_grpo")


def test_check_state_accepts_plain_data_only():
    check_state(None)
    check_state({"a": [1, 2.5, "x", None, True, (1, 2)], "b": {"c": {"d": 0.1}}})
    for bad, where in [
        ({"a": np.float64(1.0)}, "state['a']"),
        ({"a": [np.zeros(2)]}, "state['a'][0]"),
        ({1: 2.0}, "key 1"),
        (torch.zeros(1), "torch.Tensor"),
    ]:
        with pytest.raises(TypeError, match=f"{where}".replace("[", r"\[")):
            check_state(bad)


def test_registration_and_state_passing():
    assert all(get_estimator(n).stateful for n in STATEFUL)
    assert not get_estimator("grpo").stateful
    batch = make_batch([[[("s", "a", 1.0)], [("s", "a", 0.0)]]])
    with pytest.raises(ValueError, match="keeps no state"):
        compute_advantages("grpo", batch, state={"x": 1})
    assert compute_advantages("grpo", batch).state is None


@pytest.mark.parametrize("name", STATEFUL)
def test_state_survives_a_weights_only_checkpoint(name, tmp_path):
    batch = make_batch([[[("s", "a", 1.0)], [("s", "a", 0.0)]], [[("t", "b", 0.5)]] * 2])
    first = compute_advantages(name, batch)
    second = compute_advantages(name, batch, state=first.state)
    path = tmp_path / "state.pt"
    torch.save({"stages": {"credit": {"credit_state": second.state}}}, path)
    loaded = load_trainer_state(path)["stages"]["credit"]["credit_state"]
    assert loaded == second.state
    # The reloaded state gives bit-identical advantages and the same next state.
    a = compute_advantages(name, batch, state=second.state)
    b = compute_advantages(name, batch, state=loaded)
    np.testing.assert_array_equal(a.step, b.step)
    assert a.state == b.state


@pytest.mark.parametrize("name", STATEFUL)
def test_lost_episodes_leave_the_state_alone(name):
    batch = make_batch([[[("s", "a", 1.0)], [("s", "a", 0.0)]]])
    state = compute_advantages(name, batch).state
    import dataclasses

    lost = dataclasses.replace(batch, traj_lost=np.array([True, True]))
    out = compute_advantages(name, lost, state=state)
    assert out.state == state and out.step.tolist() == [0.0, 0.0]
    # A lost episode enters no statistic: the state equals the one without it.
    half = dataclasses.replace(batch, traj_lost=np.array([False, True]))
    kept = batch.select_trajs(np.array([True, False]))
    assert compute_advantages(name, half).state == compute_advantages(name, kept).state


def _rows(out: Path) -> dict[int, dict]:
    rows = read_metrics(out)
    skip = ("credit/solve_time_s",)
    return {
        r["iteration"]: {k: v for k, v in r.items() if not k.startswith("perf/") and k not in skip}
        for r in rows
    }


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["constrained_grpo", "bv_blend"])
def test_resume_restores_the_estimator_state_exactly(algo, tmp_path):
    """Uninterrupted 3 iterations vs the same run resumed from its iteration-2 checkpoint."""
    args = [f"algo={algo}", "trainer.steps=3", "trainer.save_every=1", *SMALL]
    if algo == "constrained_grpo":  # a fast dual step, so λ differs from 0 by iteration 3
        args += ["algo.thresholds={steps: 1}", "algo.dual_lr=0.5"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    train(compose(args), full)
    # The same run killed after its checkpoint at iteration 2: drop what came later.
    shutil.copytree(full, resumed)
    shutil.rmtree(resumed / "checkpoints" / "iter-000003")
    (resumed / "checkpoints" / "latest").write_text("iter-000002")
    saved = load_trainer_state(resumed / "checkpoints" / "iter-000002" / "trainer_state.pt")
    assert saved["stages"]["credit"]["credit_state"]["updates"] == 2
    train(compose([*args, "trainer.resume=true"]), resumed)
    a, b = _rows(full), _rows(resumed)
    assert a == b
    if algo == "constrained_grpo":
        assert a[3]["credit/lambda_steps"] > 0
    else:
        assert a[3]["credit/lambda_mean"] > 0
    end = "checkpoints/iter-000003/trainer_state.pt"
    assert (
        load_trainer_state(full / end)["stages"]["credit"]["credit_state"]
        == load_trainer_state(resumed / end)["stages"]["credit"]["credit_state"]
    )


def test_batches_from_rollouts_carry_env_costs_and_clusters():
    """A real rollout on Sokoban: every step's env costs reach the batch, and the group's
    cluster is the hash of the (constant) Sokoban task text."""
    import agentrl
    from agentrl.credit import cluster_key
    from agentrl.model import build_tokenizer
    from agentrl.rollout import Generation, RolloutConfig, Sampling, collect

    class Alternating:  # answers "up" (valid) and "zz" (invalid) in turn
        k = 0

        def generate(self, prompts, sampling):
            out = []
            for _ in prompts:
                self.k += 1
                out.append(Generation([7], [-1.0], "up" if self.k % 2 else "zz"))
            return out

    envs = [agentrl.make("sokoban", max_steps=3) for _ in range(2)]
    tok = build_tokenizer(["push the boxes up down left right"] * 5, 300)
    cfg = RolloutConfig(n_tasks=1, group_size=2, history_length=0)
    groups = collect(envs, [0], Alternating(), tok, cfg, Sampling(max_new_tokens=2))
    batch = StepBatch.from_groups(groups)
    assert batch.cost_names == ("invalid", "steps") and batch.n_steps == 6
    np.testing.assert_array_equal(batch.step_cost[:, 1], np.ones(6))
    np.testing.assert_array_equal(batch.step_cost[:, 0], (~batch.step_valid).astype(float))
    assert 0 < batch.step_cost[:, 0].sum() < 6
    assert batch.group_cluster == (cluster_key(groups[0].task, None),)
