"""AC2's pieces: critic parsing, prefix cuts, advantages, readiness, LR ladder, buffer."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_groups, python_lines

from agentrl.algos.ac2.core import (
    Attempt,
    LRLadder,
    Readiness,
    ReplayBuffer,
    ac2_advantages,
    cut_points,
    decode_flops,
    grid_round,
    group_targets,
    parse_value,
    value_prompt,
)
from agentrl.credit import compute_advantages, get_estimator
from agentrl.credit.batch import StepBatch


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0.3", 0.3),
        (" 1.0 \n", 1.0),
        (".5", 0.5),
        ("0.30", 0.3),
        ("0", 0.0),
        ("1", 1.0),
        ("0.7 because", 0.7),  # the first word decides
        ("0.35", None),  # off-grid: invalid, never rounded
        ("2", None),
        ("-0.1", None),
        ("1.1", None),
        ("abc", None),
        ("", None),
        ("0.3xyz", None),
        ("nan", None),
        ("1e-1", None),
    ],
)
def test_critic_answers_parse_strictly_onto_the_grid(text, value):
    assert parse_value(text) == value


def test_grid_round():
    assert [grid_round(x) for x in (0.0, 0.04, 0.06, 0.33, 0.96, 1.7, -0.2)] == [
        0.0,
        0.0,
        0.1,
        0.3,
        1.0,
        1.0,
        0.0,
    ]


def test_prefixes_are_cut_at_chunk_multiples_up_to_ninety_percent():
    assert cut_points(100, 10) == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert cut_points(25, 10) == [0, 10, 20]  # 0.9 * 25 = 22.5
    assert cut_points(5, 10) == [0]
    assert cut_points(0, 10) == [0]
    assert cut_points(40, 16, max_frac=0.5) == [0, 16]


def test_advantages_golden_values():
    values = np.array([0.2, 0.6, 1.0, 0.5, 0.3, 0.9])
    valid = np.array([True, True, True, True, True, False])
    group = np.array([0, 0, 0, 1, 2, 2])
    # group 0: mean 0.6; group 1: a single row, mean 0; group 2: one valid row (mean 0), the
    # off-grid row gets 0.
    np.testing.assert_allclose(
        ac2_advantages(values, valid, group), [-0.4, 0.0, 0.4, 0.5, 0.3, 0.0]
    )


def _ac2_reference(values, valid, group) -> list[float]:
    """AC2's advantage as a plain Python loop: one pass over the rows of each group."""
    out = [0.0] * len(values)
    for g in set(group.tolist()):
        rows = [i for i in range(len(values)) if group[i] == g and valid[i]]
        mean = sum(float(values[i]) for i in rows) / len(rows) if len(rows) > 1 else 0.0
        for i in rows:
            out[i] = float(values[i]) - mean
    return out


@pytest.mark.parametrize("seed", range(20))
def test_advantages_agree_with_a_plain_python_loop(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    values = rng.choice(np.round(np.linspace(0, 1, 11), 1), size=n)
    valid = rng.random(n) < rng.uniform(0.3, 1.0)  # invalid rows, some groups all invalid
    values[~valid & (rng.random(n) < 0.3)] = np.nan  # an invalid row's value is never read
    # Small ids (many groups of one), then ids that are negative or far apart (remapped).
    group = rng.integers(0, max(1, n // int(rng.integers(1, 6))), size=n)
    if seed % 2:
        group = rng.choice([-7, 0, 3, 10**12, -(10**9)], size=n)
    got = ac2_advantages(values, valid, group)
    np.testing.assert_allclose(got, _ac2_reference(values, valid, group), rtol=0, atol=1e-12)
    assert np.all(got[~valid] == 0.0)


def test_advantages_cost_linear_time():
    """Many groups: no pass over the batch per group (the old per-group loop did one, 100s of
    times slower at 10,000 groups). Counted, not timed: the Python lines run do not grow with
    the number of groups, and the memory in use is a few words per row and per group, not a
    row x group mask. ``python -m agentrl.bench credit`` times ac2 against the other
    estimators."""
    import tracemalloc

    rng = np.random.default_rng(0)
    n = 100_000
    values, valid = rng.random(n), rng.random(n) < 0.9
    # The counter sees a loop over groups: the plain reference costs more with more groups.
    few, many = (rng.integers(0, g, size=50) for g in (2, 8))
    _, loop_few = python_lines(lambda: _ac2_reference(values[:50], valid[:50], few))
    _, loop_many = python_lines(lambda: _ac2_reference(values[:50], valid[:50], many))
    assert loop_many > loop_few
    for remap in (False, True):  # small ids (bincount bins as they are), or remapped ids
        lines, peaks = [], []
        for n_groups in (10, 10_000):
            group = rng.integers(0, n_groups, size=n)
            if remap:
                group = group * 10**7 - 5  # far apart and negative: np.unique remaps them
            tracemalloc.start()
            try:
                got, count = python_lines(lambda g=group: ac2_advantages(values, valid, g))
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert got.shape == (n,)
            lines.append(count)
            peaks.append(peak)
            # Measured: 24-42 bytes per row; a row x group mask would be 10,000 per row.
            assert peak <= 64 * (n + n_groups), (remap, n_groups, peak / n)
        assert lines[0] == lines[1], (remap, lines)


def test_advantages_of_an_empty_batch_and_bad_shapes():
    assert ac2_advantages(np.zeros(0), np.zeros(0, bool), np.zeros(0, int)).shape == (0,)
    with pytest.raises(ValueError, match="alike"):
        ac2_advantages(np.zeros(3), np.ones(2, bool), np.zeros(3, int))


def test_registered_estimator_uses_step_rewards_and_validity():
    # Each trajectory is one continuation (one step); an action of None marks an invalid row.
    groups = make_groups(
        [
            [[("p0", "a", 0.2)], [("p0", "a", 0.6)], [("p0", "a", 1.0)]],
            [[("p1", "a", 0.7)], [("p1", None, 0.0)]],
        ]
    )
    batch = StepBatch.from_groups(groups)
    adv = compute_advantages("ac2", batch)
    np.testing.assert_allclose(adv.step, [-0.4, 0.0, 0.4, 0.7, 0.0])
    assert get_estimator("ac2").driver == "agentrl.algos.ac2.driver:AC2Driver"
    assert get_estimator("grpo").driver is None


def test_critic_targets_need_enough_graded_rewards():
    assert group_targets([[1.0, 0.0, None], [None, None, 1.0], [0.33, 0.33]], 2) == [
        0.5,
        None,
        0.3,
    ]


def test_readiness_needs_every_condition_and_is_one_way():
    r = Readiness(tau_global=0.2, tau_local=0.18, window=2)
    assert not r.is_ready("A")
    r.record_step({"A": 0.1, "B": 0.5}, {"A": 0.4, "B": 0.0})  # global 0.3: too high
    r.bank_reference("A")
    assert not r.is_ready("A")
    r.record_step({"A": 0.05, "B": 0.05}, {"A": 0.4, "B": 0.0})  # global (0.3 + 0.05) / 2
    assert r.global_error() == pytest.approx(0.175)
    assert r.is_ready("A")
    assert not r.is_ready("B")  # zero prediction and no reference
    r.bank_reference("B")
    assert not r.is_ready("B")  # still a zero prediction
    r.record_step({"A": 0.9}, {"A": 0.0})  # the critic gets worse on A ...
    assert r.is_ready("A")  # ... but readiness never goes back
    state = r.state_dict()
    fresh = Readiness()
    fresh.load_state_dict(state)
    assert fresh.ready == {"A"} and fresh.global_error() == r.global_error()


def test_lr_ladder_halves_after_two_high_ratios_down_to_the_floor():
    ladder = LRLadder(lr=1.0, floor=0.3, threshold=1.4, patience=2)
    assert [ladder.step(x) for x in (2.0, 0.5, 2.0, 2.0)] == [1.0, 1.0, 1.0, 0.5]
    assert [ladder.step(x) for x in (2.0, 2.0)] == [0.5, 0.3]
    assert [ladder.step(x) for x in (3.0, 3.0)] == [0.3, 0.3]


def test_buffer_is_fifo_and_samples_problems_uniformly():
    buf = ReplayBuffer(capacity=10)
    for k in range(12):
        buf.push(Attempt(problem=0 if k < 11 else 1, response_ids=list(range(40)), reward=0.0))
    assert len(buf) == 10  # the two oldest fell out
    rng = np.random.default_rng(0)
    picks = buf.sample_prefixes(rng, 2000, chunk=16, max_frac=0.9)
    share_b = np.mean([a.problem == 1 for a, _ in picks])
    assert 0.45 < share_b < 0.55  # one attempt of problem 1 vs nine of problem 0
    assert {cut for _, cut in picks} == {0, 16, 32}


def test_value_prompt_and_flops():
    with_ref = value_prompt("Solve x+1=2.", "x = 1", "x + 1 = 2, so x = 1.")
    without = value_prompt("Solve x+1=2.", "", None)
    assert "reference" in with_ref and "reference" not in without
    assert with_ref.endswith("Q value: ") and "(nothing yet)" in without
    assert decode_flops(1000, 50) == 100_000.0
