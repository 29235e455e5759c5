"""agentrl.credit.assign: another trainer's per-turn records give the trainer's own advantages.

Episodes are played on Sokoban with random actions (now and then an invalid one, and one episode
lost to a failing worker), recorded with the rollout's own ``record_step`` / ``end_trajectory``
as the credit-learning benchmark's ``play`` does. The trainer's Credit stage assigns credit to
those groups; the same episodes as records, in shuffled row order, must give exactly the same
advantages, metrics and state, for every estimator that records can feed.
"""

from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest

import agentrl
from agentrl.configuration import ConfigError
from agentrl.credit import (
    Assigned,
    RecordError,
    assign,
    estimator_config,
    get_estimator,
    list_estimators,
)
from agentrl.credit.batch import Trajectory, TrajectoryGroup
from agentrl.credit.stage import CreditStage
from agentrl.rollout.loop import end_trajectory, record_step

G, MAX_STEPS, PENALTY = 4, 8, 0.1
LOST = {(1, 2): 2}  # (group, member) -> the step at which its environment fails


def usable() -> list[str]:
    """Estimators records can feed: no scorer, no learned critic, no rollout driver."""
    out = []
    for name in list_estimators():
        spec = get_estimator(name)
        if not (spec.needs_scorer or spec.critic or spec.driver):
            out.append(name)
    return out


METHODS = usable()


def play(env, seed: int, rng: random.Random, lose_at: int | None = None) -> Trajectory:
    """One episode of random actions (15% of them invalid), recorded as the trainer records."""
    obs, info = env.reset(seed=seed)
    traj = Trajectory()
    while True:
        actions = list(info["admissible_actions"])
        action = "jump" if rng.random() < 0.15 else rng.choice(actions)
        logp = rng.uniform(-3.0, -0.01)
        if lose_at == len(traj.steps):  # the worker died: truncated, reward 0, flagged
            result = (obs, 0.0, False, True, {"worker_error": "EOFError: worker died"})
        else:
            result = env.step(action)
        step = record_step(
            result,
            anchor=info.get("anchor"),
            observation=obs,
            parsed=True,
            invalid_penalty=PENALTY,
            prompt_text=obs,
            response_text=action,
            logprobs=[logp],
        )
        traj.steps.append(step)
        if step.terminated or step.truncated:
            end_trajectory(traj, result)
            return traj
        obs, info = result[0], result[4]


def episodes(
    seed: int, n_groups: int = 3, rubric: bool = False, lost: dict | None = None
) -> list[TrajectoryGroup]:
    """``n_groups`` groups of G episodes on Sokoban levels of ``seed``; ``lost`` (default
    :data:`LOST`) maps (group, member) to the step at which that episode's environment fails."""
    lost = LOST if lost is None else lost
    rng = random.Random(seed)
    env = agentrl.make("sokoban", dim_room=(5, 5), num_boxes=1, max_steps=MAX_STEPS)
    groups = []
    for g in range(n_groups):
        level = 1000 * seed + g
        trajs = [play(env, level, rng, lost.get((g, i))) for i in range(G)]
        if rubric:  # a process reward on every step, so that trca has something to read
            for tr in trajs:
                for s in tr.steps:
                    s.rubric_reward = round(rng.uniform(-1, 1), 3)
        _, info = env.reset(seed=level)
        groups.append(TrajectoryGroup(str(info["task"]), level, trajs, env="sokoban"))
    return groups


def to_records(groups: list[TrajectoryGroup], version=7) -> list[dict]:
    """The groups as records, with every optional field the batch can use."""
    rows, m = [], 0
    for g, group in enumerate(groups):
        for traj in group.trajectories:
            for t, s in enumerate(traj.steps):
                nxt = traj.steps[t + 1].anchor if t + 1 < len(traj.steps) else None
                rows.append(
                    {
                        "group_id": g,
                        "trajectory_id": m,
                        "turn_index": t,
                        "state_key": s.anchor,
                        "next_state_key": nxt,
                        "action": s.action,
                        "valid": s.valid,
                        "terminated": s.terminated,
                        "truncated": s.truncated,
                        "success": traj.won,
                        "reward": s.reward,
                        "episode_return": traj.ret,
                        "policy_version": version,
                        "costs": s.costs,
                        "rubric_reward": s.rubric_reward,
                        "logprob": float(np.mean(s.logprobs)),
                        "prompt": s.prompt_text,
                        "response": s.response_text,
                        "lost": s.lost,
                        "task": group.task,
                        "task_type": traj.task_type,
                        "score": traj.score,
                        "final_observation": traj.final_obs,
                        "final_prompt": traj.final_prompt,
                        "row_id": f"r{len(rows)}",  # the other trainer's own field: ignored
                    }
                )
            m += 1
    return rows


def to_columns(rows: list[dict]) -> dict:
    """Records as columns: numpy arrays where the values are numbers or flags, else lists."""
    keys = dict.fromkeys(k for r in rows for k in r)
    cols = {k: [r.get(k) for r in rows] for k in keys}
    types = {"group_id": np.int64, "trajectory_id": np.int64, "turn_index": np.int64}
    types |= {"policy_version": np.int64, "reward": np.float64, "episode_return": np.float64}
    types |= {"logprob": np.float64} | dict.fromkeys(
        ("valid", "terminated", "truncated", "success", "lost"), bool
    )
    for k, dtype in types.items():
        if k in cols:
            cols[k] = np.asarray(cols[k], dtype=dtype)
    return cols


class FakeArrowTable:
    """What assign reads of a pyarrow Table: ``to_pydict`` (nested values come back as lists)."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def to_pydict(self) -> dict:
        def listed(v):
            return [listed(x) for x in v] if isinstance(v, tuple) else v

        return {k: [listed(r[k]) for r in self.rows] for k in self.rows[0]}


def shuffled(rows: list[dict], seed: int) -> tuple[list[dict], np.ndarray]:
    perm = np.random.default_rng(seed).permutation(len(rows))
    return [rows[i] for i in perm], perm


def unshuffle(values: np.ndarray, perm: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    out[perm] = values
    return out


def assert_same_metrics(got: dict, want: dict) -> None:
    """Equal metrics, but for timings (``..._s``: seconds)."""
    got = {k: v for k, v in got.items() if not k.endswith("_s")}
    want = {k: v for k, v in want.items() if not k.endswith("_s")}
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == want[k] or (math.isnan(got[k]) and math.isnan(want[k])), k


@pytest.fixture(scope="module")
def batches():
    first, second = episodes(1), episodes(2, rubric=True)
    assert any(tr.won for g in first for tr in g.trajectories)  # both outcomes are present
    assert not all(tr.won for g in first for tr in g.trajectories)
    assert any(not s.valid for g in first for tr in g.trajectories for s in tr.steps)
    assert first[1].trajectories[2].lost
    return first, second


def test_every_usable_estimator_is_tested():
    assert {"grpo", "gigpo", "graphgpo", "crbc", "bv_blend", "tigpo", "trca"} <= set(METHODS)
    assert not {"gae", "ac2", "psppo", "relace", "hcapo"} & set(METHODS)


@pytest.mark.parametrize("form", ["dicts", "columns", "arrow"])
@pytest.mark.parametrize("name", METHODS)
def test_assign_equals_the_credit_stage(batches, name, form):
    """Two iterations (so stateful estimators carry their state): exactly the stage's numbers."""
    stage = CreditStage(name, estimator_config(name))
    state = None
    for it, groups in enumerate(batches):
        want = stage.assign(groups)
        assert np.any(want.advantages.step != 0)  # something to compare
        rows, perm = shuffled(to_records(groups), seed=it)
        if form == "columns":
            records = to_columns(rows)
        elif form == "arrow":
            records = FakeArrowTable(rows)
        else:
            records = rows
        got = assign(records, name, state=state)
        assert isinstance(got, Assigned) and got.advantages.dtype == np.float64
        np.testing.assert_array_equal(unshuffle(got.advantages, perm), want.advantages.step)
        assert_same_metrics(got.metrics, want.metrics)
        assert got.state == stage.state
        state = got.state


def test_the_lost_episode_gets_zero(batches):
    rows = to_records(batches[0])
    adv, _ = assign(rows, "grpo")
    lost = np.array([r["trajectory_id"] == 6 for r in rows])  # group 1, member 2
    assert lost.any() and np.all(adv[lost] == 0.0) and np.any(adv[~lost] != 0.0)


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("graphgpo", {"edge_cost": "steps", "omega": 0.5, "episode_stats": "trajectory"}),
        ("gigpo", {"similarity": 0.9, "gamma": 0.9}),
        ("constrained_grpo", {"thresholds": {"invalid": 0.5}}),
    ],
)
def test_options_reach_the_estimator(batches, name, config):
    groups = batches[0]
    want = CreditStage(name, estimator_config(name, config)).assign(groups)
    got, _ = assign(to_records(groups), name, **config)
    np.testing.assert_array_equal(got, want.advantages.step)
    if name != "constrained_grpo":  # its multipliers start at 0: the options act from the 2nd
        assert not np.array_equal(got, assign(to_records(groups), name).advantages)


def test_episode_return_alone_is_the_last_turns_reward(batches):
    """Records with an episode return and no per-turn reward: the return sits on the last step."""
    groups = copy.deepcopy(batches[0])
    rows = to_records(groups)
    for r in rows:
        del r["reward"]
    for g in groups:
        for tr in g.trajectories:
            ret = tr.ret
            for s in tr.steps:
                s.reward = 0.0
            tr.steps[-1].reward = ret
    for name in ("grpo", "gigpo", "crbc"):
        want = CreditStage(name, estimator_config(name)).assign(groups).advantages.step
        np.testing.assert_array_equal(assign(rows, name).advantages, want)


def test_golden_grpo_and_rloo():
    """One group by hand: A wins in two turns (return 1), B fails once (0), C fails twice (0)."""

    def turn(traj, t, state, reward, end, success):
        return {
            "group_id": "level-1",
            "trajectory_id": traj,
            "turn_index": t,
            "state_key": state,
            "action": "push",
            "valid": True,
            "terminated": end and success,
            "truncated": end and not success,
            "success": success,
            "reward": reward,
        }

    rows = [
        turn("B", 0, "s0", 0.0, True, False),
        turn("A", 1, "s1", 1.0, True, True),
        turn("C", 0, "s0", 0.0, False, False),
        turn("A", 0, "s0", 0.0, False, True),
        turn("C", 1, "s2", 0.0, True, False),
    ]
    # GRPO: returns (1, 0, 0), mean 1/3, unbiased std sqrt(1/3); A_i = (R_i − mean)/(std + 1e-6).
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    a_win, a_fail = (2 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6)
    adv, metrics = assign(rows, "grpo")
    np.testing.assert_allclose(adv, [a_fail, a_win, a_fail, a_win, a_fail], rtol=1e-12)
    assert metrics["diag/success"] == pytest.approx(1 / 3)
    # RLOO: R_i minus the mean of the other two.
    adv, _ = assign(rows, "rloo")
    np.testing.assert_allclose(adv, [-0.5, 1.0, -0.5, 1.0, -0.5], rtol=1e-12)
    # The same with the return only.
    for r in rows:
        r["episode_return"] = 1.0 if r["trajectory_id"] == "A" else 0.0
        del r["reward"]
    np.testing.assert_allclose(assign(rows, "rloo").advantages, [-0.5, 1, -0.5, 1, -0.5])


def test_empty_records_give_nothing():
    got = assign([], "grpo")
    assert got.advantages.shape == (0,) and got.metrics == {} and got.state is None


def test_pandas_dataframe_when_installed(batches):
    pd = pytest.importorskip("pandas")
    rows = to_records(batches[0])
    want = assign(rows, "gigpo").advantages
    np.testing.assert_array_equal(assign(pd.DataFrame(rows), "gigpo").advantages, want)


def test_pyarrow_table_when_installed(batches):
    pa = pytest.importorskip("pyarrow")
    rows = to_records(batches[0])
    for r in rows:  # Arrow needs one type per column: Sokoban's nested tuples as text
        r["state_key"] = str(r["state_key"])
        r["next_state_key"] = None if r["next_state_key"] is None else str(r["next_state_key"])
    want = assign(rows, "gigpo").advantages
    np.testing.assert_array_equal(assign(pa.Table.from_pylist(rows), "gigpo").advantages, want)


class FakeDataFrame:
    """What assign reads of a pandas DataFrame: ``columns`` and ``to_dict(orient="list")``."""

    def __init__(self, rows: list[dict]):
        self.columns = list(rows[0])
        self.rows = rows

    def to_dict(self, orient: str) -> dict:
        assert orient == "list"
        # A dataframe fills gaps with NaN: an optional number that is NaN counts as absent.
        return {
            k: [math.nan if r[k] is None and k == "score" else r[k] for r in self.rows]
            for k in self.columns
        }


def test_dataframe_like_input(batches):
    rows = to_records(batches[0])
    want = assign(rows, "crbc").advantages
    np.testing.assert_array_equal(assign(FakeDataFrame(rows), "crbc").advantages, want)


# ------------------------------------------------------------------------------ errors


def small() -> list[dict]:
    """Two episodes of one group: (0: s0 → s1, won), (1: s0, truncated)."""
    base = {"group_id": 0, "action": "a", "valid": True, "policy_version": 1}
    return [
        {**base, "trajectory_id": 0, "turn_index": 0, "state_key": "s0", "next_state_key": "s1"}
        | {"terminated": False, "truncated": False, "success": True, "reward": 0.0},
        {**base, "trajectory_id": 0, "turn_index": 1, "state_key": "s1"}
        | {"terminated": True, "truncated": False, "success": True, "reward": 1.0},
        {**base, "trajectory_id": 1, "turn_index": 0, "state_key": "s0"}
        | {"terminated": False, "truncated": True, "success": False, "reward": 0.0},
    ]


def broken(change) -> list[dict]:
    rows = small()
    change(rows)
    return rows


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r[1].pop("success"), r"record 1 lacks the required fields \['success'\]"),
        (lambda r: r[2].update(sucess=r[2].pop("success")), "'sucess' a misspelling of 'success'"),
        (lambda r: r[0].update(next_state_key="s9"), "record 0 .*next_state_key.*'s9'.*broken"),
        (lambda r: r[1].update(turn_index=2), r"turn indices \[0, 2\].*turn 1 is missing"),
        (lambda r: r[1].update(turn_index=0), "records 0 and 1 are both turn 0 of trajectory 0"),
        (lambda r: r[1].update(policy_version=2), "mix policy versions.*allow_mixed_versions"),
        (lambda r: r[1].update(group_id=5), "trajectory 0 is in group 0 .* but in group 5"),
        (lambda r: r[1].update(success=False), "record 1 .*'success'.*same on every turn"),
        (lambda r: r[1].update(terminated=False), "record 1 .*neither terminated nor truncated"),
        (lambda r: r[0].update(truncated=True), "record 0 .*ends the episode.*turn 1 follows"),
        (lambda r: r[1].pop("reward"), "record 1 .*has no 'reward'"),
        (lambda r: r[0].update(episode_return=3.0), "'episode_return'.*must be the same"),
        (lambda r: r[2].update(reward=math.inf), "record 2 .*'reward' must be finite"),
        (lambda r: r[2].update(reward="1"), "record 2 .*'reward' must be a number"),
        (lambda r: r[2].update(valid="yes"), "record 2 .*'valid' must be true or false"),
        (lambda r: r[2].update(turn_index=-1), "record 2: field 'turn_index' must be an integer"),
        (lambda r: r[2].update(costs={"steps": -1.0}), "record 2 .*'costs'.*'steps'"),
        (lambda r: r[2].update(action=3), "record 2 .*'action' must be a string"),
        (lambda r: r.append("not a mapping"), "record 3 is a str, not a mapping"),
    ],
)
def test_bad_records_are_named(change, message):
    rows = broken(change)
    with pytest.raises(RecordError, match=message):
        assign(rows, "grpo")


def test_unhashable_keys_become_tuples():
    rows = small()
    for r in rows:
        r["state_key"] = [r["state_key"], [1, 2]]
        if "next_state_key" in r:
            r["next_state_key"] = ("s1", (1, 2))  # equal to the next turn's key once frozen
    np.testing.assert_array_equal(assign(rows, "gigpo").advantages, assign(small(), "gigpo")[0])
    rows[2]["state_key"] = [{1, 2}]
    assign(rows, "grpo")  # a set becomes a frozenset
    rows[2]["state_key"] = [slice(1)]
    with pytest.raises(RecordError, match=r"record 2 .*'state_key' must be hashable"):
        assign(rows, "grpo")


def test_task_must_be_one_per_group():
    rows = small()
    rows[0]["task"] = rows[1]["task"] = "push"
    rows[2]["task"] = "pull"
    with pytest.raises(RecordError, match=r"group 0 has task 'push' at record 0 .* but 'pull'"):
        assign(rows, "grpo")


def test_return_and_rewards_must_agree():
    rows = small()
    for r in rows:
        r["episode_return"] = 1.0 if r["trajectory_id"] == 0 else 0.5
    with pytest.raises(RecordError, match=r"'episode_return' is 0.5 but its rewards sum to 0.0"):
        assign(rows, "grpo")


def test_mixed_versions_can_be_allowed():
    rows = small()
    rows[2]["policy_version"] = 2
    adv, _ = assign(rows, "grpo", allow_mixed_versions=True)
    assert adv.shape == (3,)


def test_columns_must_have_one_length():
    cols = to_columns(small())
    cols["reward"] = cols["reward"][:2]
    with pytest.raises(RecordError, match="columns have different lengths"):
        assign(cols, "grpo")
    with pytest.raises(RecordError, match="a list of mappings or a mapping of columns"):
        assign("rows", "grpo")


def test_estimators_records_cannot_feed():
    rows = small()
    with pytest.raises(ValueError, match="learned value function"):
        assign(rows, "gae")
    with pytest.raises(ValueError, match="samples its own rollouts"):
        assign(rows, "ac2")
    with pytest.raises(ValueError, match="pass scorer="):
        assign(rows, "relace")
    with pytest.raises(ConfigError, match="unknown estimator"):
        assign(rows, "grpoo")
    with pytest.raises(ConfigError, match=r"algo.gama is not a valid key"):
        assign(rows, "gigpo", gama=0.9)
    with pytest.raises(ValueError, match="keeps no state"):
        assign(rows, "grpo", state={"x": 1.0})


def test_a_scorer_reaches_the_estimator():
    """relace rescores with the policy: any object with score(contexts, responses)."""

    class Uniform:
        def score(self, contexts, responses):
            return np.full(len(responses), -1.0)

    rows = small()
    for r in rows:
        r.update(prompt=f"state {r['state_key']}", response="a")
    adv, _ = assign(rows, "relace", scorer=Uniform())
    assert adv.shape == (3,) and np.all(np.isfinite(adv))


def test_row_order_does_not_matter_with_sortable_ids(batches):
    rows = to_records(batches[0])
    want = assign(rows, "graphgpo").advantages
    for seed in range(3):
        got, perm = shuffled(rows, seed)
        np.testing.assert_array_equal(unshuffle(assign(got, "graphgpo").advantages, perm), want)
