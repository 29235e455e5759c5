"""Pass-rate vs binary rewards on proofs (``env.reward``) and the partial-credit conflict metric."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.configuration import ConfigError
from agentrl.credit import StepBatch, Trajectory, TrajectoryGroup, compute_advantages
from agentrl.credit.batch import Step
from agentrl.credit.diagnostics import batch_diagnostics, partial_credit_conflict
from agentrl.envs.proof.env import ProofEnv

SMALL = {"n_train_tasks": 20, "n_eval_tasks": 5, "kinds": ("identity",), "difficulty": (2, 3)}


def _answers(env: ProofEnv, seed: int) -> list[str]:
    """A full answer (the reference), a partial one (its first lines) and a wrong one."""
    _, info = env.reset(seed=seed)
    ref = info["reference_solution"]
    lines = ref.splitlines()
    partial = "\n".join(lines[: max(1, len(lines) - 1)]) if len(lines) > 1 else ref.split("=")[0]
    return [ref, partial, "It is true."]


def test_binary_reward_pays_full_marks_only_and_info_keeps_the_points():
    points_env, binary_env = ProofEnv(**SMALL), ProofEnv(**SMALL, reward="binary")
    seen_partial = False
    for seed in range(8):
        for answer in _answers(points_env, seed):
            points_env.reset(seed=seed)
            binary_env.reset(seed=seed)
            _, r_points, _, _, a = points_env.step(answer)
            _, r_binary, _, _, b = binary_env.step(answer)
            assert a["points"] == b["points"] == a["score"] == b["score"]
            assert a["won"] == b["won"] == (a["points"] == 7)
            assert r_points == pytest.approx(a["points"] / 7)
            assert r_binary == (1.0 if a["points"] == 7 else 0.0)
            seen_partial |= 0 < a["points"] < 7
    assert seen_partial  # the comparison covered partial credit


def test_an_invalid_answer_scores_zero_points_it_was_not_graded_for():
    env = ProofEnv(**SMALL, reward="binary")
    env.reset(seed=0)
    _, reward, _, _, info = env.step("")
    assert (reward, info["action_valid"], info["points"], info["score"]) == (0.0, False, None, 0)


def test_reward_option_is_validated():
    with pytest.raises(ConfigError, match=r"env\.reward"):
        ProofEnv(**SMALL, reward="pass_rate")


def test_conflict_by_hand():
    # group 0: full (7), partial 6 with A > 0 -> conflict; group 1: full, partial 2 with A < 0;
    # group 2: partials only (no full answer: not counted); group 3: full + zero score.
    score = np.array([7, 6, 0, 7, 2, 0, 3, 1, 7, 0], dtype=float)
    won = score == 7
    group = np.array([0, 0, 0, 1, 1, 1, 2, 2, 3, 3])
    adv = np.array([1.0, 0.5, -1.5, 1.0, -0.2, -0.8, 0.4, -0.4, 1.0, -1.0])
    out = partial_credit_conflict(score, won, group, adv)
    assert out == {"credit/partial_credit_conflict": 0.5, "credit/partial_credit_groups": 2.0}
    # Lost trajectories are left out; no score at all: nothing to report.
    keep = np.ones(10, dtype=bool)
    keep[1] = False
    assert partial_credit_conflict(score, won, group, adv, keep)[
        "credit/partial_credit_conflict"
    ] == (0.0)
    assert partial_credit_conflict(np.full(10, np.nan), won, group, adv) == {}


def _group(seed: int, points: list[int], reward: str) -> TrajectoryGroup:
    g = TrajectoryGroup(task=f"t{seed}", seed=seed)
    for p in points:
        r = p / 7 if reward == "points" else float(p == 7)
        step = Step([1], [2], [-0.1], r, True, False, ("a", 0), f"x{p}", True)
        g.trajectories.append(Trajectory(steps=[step], won=p == 7, score=float(p)))
    return g


@pytest.mark.parametrize(("reward", "conflict"), [("points", 1.0), ("binary", 0.0)])
def test_grpo_pushes_partial_answers_up_only_with_pass_rate_rewards(reward, conflict):
    """The paper's observation on a hand-made batch: with points/7 a 6-point answer beats the
    group mean next to a 7-point one; with binary rewards it never gets a positive advantage."""
    groups = [_group(0, [7, 6, 0, 0], reward), _group(1, [7, 5, 1, 0], reward)]
    batch = StepBatch.from_groups(groups)
    adv = compute_advantages("grpo", batch)
    out = batch_diagnostics(batch, groups, adv.step)
    assert out["credit/partial_credit_conflict"] == conflict
    assert out["credit/partial_credit_groups"] == 2.0
