"""agentrl.credit.relax: Relax's custom-advantage hook gives agentrl.credit.assign's numbers.

No Relax install: the hook is called with ``metadata_by_slot`` of exactly the shape Relax
passes in its GraphGPO example (one export ``turn_NNN`` per environment turn, its metadata the
per-turn fields), built from Sokoban episodes played as in test_assign.py.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from test_assign import episodes

from agentrl.configuration import ConfigError
from agentrl.credit import RecordError, assign
from agentrl.credit import relax as relax_module
from agentrl.credit.batch import TrajectoryGroup
from agentrl.credit.relax import make_relax_advantage, relax_advantage

SUCCESS, PENALTY = 10.0, 0.1


def relax_slots(group: TrajectoryGroup, g: int, cost: bool = False) -> list[dict[str, dict]]:
    """One group as Relax hands it to the hook. Trajectory ids count down, so sorting them
    would reverse the slots; returns follow the example's 10·success − 0.1·#invalid."""
    slots = []
    for i, tr in enumerate(group.trajectories):
        ret = SUCCESS * tr.won - PENALTY * sum(not s.valid for s in tr.steps)
        slot = {}
        for t, s in enumerate(tr.steps):
            nxt = tr.steps[t + 1].anchor if t + 1 < len(tr.steps) else "after-the-end"
            meta = {
                "row_id": f"g{g}-slot{i}-turn{t}",
                "rollout_group_id": f"rollout-{g}",
                "policy_version": 3,
                "task_id": f"sokoban-{group.seed}",
                "trajectory_id": f"session-{9 - i}",
                "turn_index": t,
                "state_key": s.anchor,
                "next_state_key": nxt,
                "action": s.action or "",
                "is_action_valid": s.valid,
                "success": tr.won,
                "terminal": s.terminated,
                "truncated": s.truncated,
                "episode_return": ret,
            }
            if cost:
                meta["cost"] = 1.0 + (t % 3)
            slot[f"turn_{t:03d}"] = meta
        slots.append(slot)
    return slots


def as_records(slots: list[dict[str, dict]]) -> list[dict]:
    """The same turns as assign's records, by hand: the renames, and each turn's reward as the
    example defines the return (−0.1 per invalid turn, +10 at the end of a success)."""
    rows = []
    for slot in slots:
        names = sorted(slot)
        for name in names:
            m = slot[name]
            last = name == names[-1]
            reward = (0.0 if m["is_action_valid"] else -PENALTY) + SUCCESS * (m["success"] and last)
            row = {
                "group_id": m["task_id"],
                "trajectory_id": m["trajectory_id"],
                "turn_index": m["turn_index"],
                "state_key": m["state_key"],
                "next_state_key": m["next_state_key"],
                "action": m["action"],
                "valid": m["is_action_valid"],
                "terminated": m["terminal"],
                "truncated": m["truncated"],
                "success": m["success"],
                "reward": reward,
                "policy_version": m["policy_version"],
            }
            if "cost" in m:
                row["costs"] = {"cost": m["cost"]}
            rows.append(row)
    return rows


def flat(out: list[dict[str, float]], slots: list[dict[str, dict]]) -> np.ndarray:
    """The hook's answer in as_records' order (slot by slot, turns in order)."""
    assert [set(o) for o in out] == [set(s) for s in slots]
    assert all(type(v) is float for o in out for v in o.values())
    return np.array([o[name] for o, s in zip(out, slots) for name in sorted(s)])


@pytest.fixture(scope="module")
def groups():
    gs = episodes(4, n_groups=3, lost={})
    assert any(tr.won for g in gs for tr in g.trajectories)
    return gs


@pytest.mark.parametrize("method", ["grpo", "rloo", "gigpo", "graphgpo", "crbc", "g2po", "hgpo"])
def test_hook_equals_assign(groups, method):
    hook = make_relax_advantage(method, group_size=4)
    for g, group in enumerate(groups):
        slots = relax_slots(group, g)
        want = assign(as_records(slots), method, sort_ids=False).advantages
        np.testing.assert_array_equal(flat(hook(slots), slots), want)
        assert hook.metrics["diag/success"] == np.mean([tr.won for tr in group.trajectories])


def test_json_round_trip_gives_the_same_numbers(groups):
    """Relax's metadata travels as JSON: tuples come back as lists, keys stay equal."""
    slots = relax_slots(groups[0], 0)
    back = json.loads(json.dumps(slots))
    assert isinstance(back[0]["turn_000"]["state_key"], list)
    hook = make_relax_advantage("graphgpo")
    assert hook(back) == hook(slots)


def test_edge_cost_and_options(groups):
    slots = relax_slots(groups[0], 0, cost=True)
    options = {"edge_cost": "cost", "omega": 0.5}
    got = flat(make_relax_advantage("graphgpo", **options)(slots), slots)
    want = assign(as_records(slots), "graphgpo", sort_ids=False, **options).advantages
    np.testing.assert_array_equal(got, want)
    unit = flat(make_relax_advantage("graphgpo", omega=0.5)(slots), slots)
    assert not np.array_equal(got, unit)


def test_a_per_turn_reward_is_used_as_given(groups):
    """Metadata with a reward on every turn: used as it is (and summed against the return)."""
    slots = relax_slots(groups[0], 0)
    for slot in slots:
        for m in slot.values():
            m["reward"] = 0.25 * m["turn_index"]
        ret = sum(m["reward"] for m in slot.values())
        for m in slot.values():
            m["episode_return"] = ret
    rows = as_records(slots)
    for row, m in zip(rows, [slot[n] for slot in slots for n in sorted(slot)]):
        row["reward"] = m["reward"]
    got = flat(make_relax_advantage("gigpo")(slots), slots)
    np.testing.assert_array_equal(got, assign(rows, "gigpo", sort_ids=False).advantages)
    slots[0]["turn_000"]["reward"] = 5.0  # no longer sums to the declared return
    with pytest.raises(RecordError, match=r"'episode_return' is .* but its rewards sum to"):
        make_relax_advantage("gigpo")(slots)


def test_stateful_estimators_carry_their_state_across_groups(groups):
    hook = make_relax_advantage("bv_blend")
    state = None
    for g, group in enumerate(groups):
        slots = relax_slots(group, g)
        want = assign(as_records(slots), "bv_blend", state=state, sort_ids=False)
        np.testing.assert_array_equal(flat(hook(slots), slots), want.advantages)
        state = want.state
        assert hook.state == state and state is not None


def test_golden_two_sessions():
    """One success in two turns (return 10) and one failure with an invalid turn (−0.1)."""

    def meta(traj, t, state, nxt, valid, success, end):
        return {
            "row_id": f"{traj}{t}",
            "rollout_group_id": "rg",
            "policy_version": 0,
            "task_id": "task-7",
            "trajectory_id": traj,
            "turn_index": t,
            "state_key": state,
            "next_state_key": nxt,
            "action": "go" if valid else "??",
            "is_action_valid": valid,
            "success": success,
            "terminal": end and success,
            "truncated": end and not success,
            "episode_return": 10.0 if success else -0.1,
        }

    slots = [
        {"turn_000": meta("a", 0, "s0", "s1", True, True, False)}
        | {"turn_001": meta("a", 1, "s1", "goal", True, True, True)},
        {"turn_000": meta("b", 0, "s0", "s0", False, False, True)},
    ]
    out = make_relax_advantage("grpo", group_size=2)(slots)
    # Returns 10 and −0.1: mean 4.95, unbiased std 10.1/√2; A = ±5.05/(std + 1e-6).
    a = 5.05 / (10.1 / math.sqrt(2) + 1e-6)
    assert out[0] == {"turn_000": pytest.approx(a), "turn_001": pytest.approx(a)}
    assert out[1] == {"turn_000": pytest.approx(-a)}


def test_the_ready_made_hook_reads_the_environment(groups, monkeypatch):
    slots = relax_slots(groups[0], 0)
    monkeypatch.setattr(relax_module, "_DEFAULT", None)
    monkeypatch.setenv("AGENTRL_CREDIT_ALGO", "gigpo")
    monkeypatch.setenv("AGENTRL_CREDIT_CONFIG", '{"gamma": 0.9}')
    got = flat(relax_advantage(slots), slots)
    want = assign(as_records(slots), "gigpo", sort_ids=False, gamma=0.9).advantages
    np.testing.assert_array_equal(got, want)
    monkeypatch.setattr(relax_module, "_DEFAULT", None)
    monkeypatch.setenv("AGENTRL_CREDIT_CONFIG", "{gamma: 0.9}")
    with pytest.raises(ConfigError, match=r"AGENTRL_CREDIT_CONFIG=.* is not JSON"):
        relax_advantage(slots)
    monkeypatch.setattr(relax_module, "_DEFAULT", None)
    monkeypatch.delenv("AGENTRL_CREDIT_ALGO")
    monkeypatch.delenv("AGENTRL_CREDIT_CONFIG")
    got = flat(relax_advantage(slots), slots)  # graphgpo by default
    np.testing.assert_array_equal(got, flat(make_relax_advantage("graphgpo")(slots), slots))


def test_bad_methods_fail_at_start_up():
    with pytest.raises(ValueError, match="learned value function"):
        make_relax_advantage("gae")
    with pytest.raises(ConfigError, match=r"algo.omgea is not a valid key"):
        make_relax_advantage("graphgpo", omgea=0.2)
    with pytest.raises(ConfigError, match="group_size"):
        make_relax_advantage("grpo", group_size=0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda S: S.pop(), "the group has 3 slots, expected 4"),
        (lambda S: S[1].update(turn_0=S[1].pop("turn_000")), r"slot 1 export 'turn_0'"),
        (
            lambda S: S[0].update(turn_001=S[0].pop("turn_000")),
            r"slot 0 export 'turn_001' has turn_index 0: it must be named 'turn_000'",
        ),
        (lambda S: S[2]["turn_000"].pop("row_id"), r"slot 2 export 'turn_000' lacks .*row_id"),
        (lambda S: S[2]["turn_000"].update(row_id="g0-slot0-turn0"), "repeats row_id"),
        (lambda S: S[3]["turn_000"].update(rollout_group_id="x"), "rollout_group_id 'x'"),
        (lambda S: S[3]["turn_000"].update(task_id="other"), "task_id 'other'"),
        (lambda S: S[3]["turn_000"].update(policy_version=4), "policy_version 4"),
        (
            lambda S: [m.update(trajectory_id="session-9") for m in S[1].values()],
            "trajectory_id 'session-9' is in slots 0 and 1",
        ),
        (lambda S: S[0]["turn_000"].update(success="yes"), "success must be true or false"),
        (lambda S: S[0]["turn_000"].update(cost=0.0), "cost must be a finite number > 0"),
        (lambda S: S[0]["turn_000"].update(next_state_key="nowhere"), "chain of states"),
        (
            lambda S: [m.update(episode_return=3.0) for m in S[0].values()],
            r"slot 0 export 'turn_\d+': episode_return 3.0 is not 10.0·success",
        ),
    ],
)
def test_bad_groups_are_named(groups, change, message):
    slots = copy.deepcopy(relax_slots(groups[0], 0))
    assert len(slots[0]) > 1  # the chain case needs a second turn
    change(slots)
    with pytest.raises(RecordError, match=message):
        make_relax_advantage("grpo", group_size=4)(slots)


def test_errors_from_assign_name_the_slot_and_export(groups):
    slots = relax_slots(groups[0], 0)
    slots[0]["turn_000"]["next_state_key"] = "nowhere"
    with pytest.raises(RecordError, match=r"record 0 is slot 0 export 'turn_000'"):
        make_relax_advantage("grpo")(slots)


def test_mixed_versions_can_be_allowed(groups):
    slots = relax_slots(groups[0], 0)
    slots[1]["turn_000"]["policy_version"] = 4
    out = make_relax_advantage("grpo", allow_mixed_versions=True)(slots)
    assert len(out) == len(slots)
