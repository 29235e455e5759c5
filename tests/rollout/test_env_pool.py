"""Environment pools: the process pool steps like the inline one, and survives dying workers."""

from __future__ import annotations

import threading
import time

import crashy_env  # registers "crashy"
import pytest

from agentrl.registry import make
from agentrl.rollout.env_pool import InlinePool, ProcessPool, WorkerDied
from agentrl.rollout.pools import make_pool


def _play(pool, seeds, actions_per_step):
    out = [pool.reset([(j, s, None) for j, s in enumerate(seeds)])]
    for actions in actions_per_step:
        out.append(pool.step(list(enumerate(actions))))
    return out


def test_process_pool_matches_inline_pool_on_sokoban():
    seeds = [3, 3, 4, 5, 6]
    moves = [["up", "left", "down", "right", "bogus"], ["left"] * 5, ["down", "up"] * 2 + ["x"]]
    inline = InlinePool([make("sokoban") for _ in seeds])
    with ProcessPool("sokoban", {}, len(seeds), workers=2) as pool:
        assert pool.w == 2
        got = _play(pool, seeds, moves)
    want = _play(inline, seeds, moves)
    assert got == want


def test_auto_pool_choice_follows_registration():
    assert isinstance(make_pool("sokoban", {}, 2), InlinePool)
    pool = make_pool("crashy", {}, 2)
    try:
        assert isinstance(pool, ProcessPool)
    finally:
        pool.close()


def test_dead_worker_is_replaced_and_its_episodes_truncated():
    with ProcessPool("crashy", {}, 4, workers=2) as pool:
        first = pool.reset([(j, j, None) for j in range(4)])
        pids = {j: info["pid"] for j, (_, info) in enumerate(first)}
        assert pids[0] == pids[2] != pids[1] == pids[3]  # env j lives on worker j % 2
        res = pool.step([(0, "tick"), (1, "die"), (2, "tick"), (3, "tick")])
        # Worker 0 carried on; worker 1 died: both its episodes (1 and 3) end truncated.
        assert [r[0] for r in res] == ["ticks=1", "tick away", "ticks=1", "tick away"]
        assert [r[3] for r in res] == [False, True, False, True]
        assert res[1][1] == 0.0 and "exit code 3" in res[1][4]["worker_error"]
        assert res[3][4]["won"] is False and "worker_error" in res[3][4]
        assert pool.restarts == 1
        # The run goes on: the replacement worker plays new episodes.
        again = pool.reset([(1, 7, None), (3, 8, None)])
        assert again[0][1]["pid"] != pids[1]
        res = pool.step([(0, "tick"), (1, "tick"), (2, "tick"), (3, "tick")])
        assert [r[0] for r in res] == ["ticks=2", "ticks=1", "ticks=2", "ticks=1"]


def test_hung_worker_is_killed_after_the_timeout():
    with ProcessPool("crashy", {}, 2, workers=2, step_timeout_s=1.0) as pool:
        pool.reset([(0, 0, None), (1, 1, None)])
        res = pool.step([(0, "hang"), (1, "tick")])
        assert res[0][3] is True and "did not answer" in res[0][4]["worker_error"]
        assert res[1][0] == "ticks=1" and res[1][3] is False
        assert pool.restarts == 1
        assert pool.reset([(0, 2, None)])[0][0] == "tick away"


def test_start_up_has_its_own_timeout_longer_than_a_step():
    # Building the env takes 2 s, twice the step timeout: start-up must not count against it.
    with ProcessPool("slow-start", {}, 2, workers=2, step_timeout_s=1.0) as pool:
        assert [w.start_timeout for w in pool.workers] == [60.0, 60.0]
        pool.reset([(0, 0, None), (1, 1, None)])
        res = pool.step([(0, "tick"), (1, "hang")])
        assert res[0][0] == "ticks=1" and "did not answer" in res[1][4]["worker_error"]
        # The replacement worker also starts in 2 s, within its start-up timeout.
        assert pool.restarts == 1 and pool.reset([(1, 2, None)])[0][0] == "tick away"
    with pytest.raises(WorkerDied, match="did not answer in 1 s"):
        ProcessPool("slow-start", {}, 1, workers=1, step_timeout_s=30.0, start_timeout_s=1.0)


@pytest.mark.parametrize("kind", ["inline", "process"])
def test_env_exception_truncates_only_that_episode(kind):
    pool = (
        make_pool("crashy", {}, 2, None)
        if kind == "process"
        else InlinePool([make("crashy") for _ in range(2)])
    )
    try:
        pool.reset([(0, 0, None), (1, 1, None)])
        res = pool.step([(0, "raise"), (1, "tick")])
        assert res[0][3] is True and "environment bug" in res[0][4]["worker_error"]
        assert res[1][0] == "ticks=1"
    finally:
        pool.close()


def test_rollout_survives_a_worker_dying_mid_batch():
    """collect() over a process pool: the killed worker's episodes end truncated, unpenalised;
    the other worker's episodes play on to their wins, and the run goes on."""
    from helpers import ScriptedBackend

    from agentrl.credit.batch import StepBatch
    from agentrl.model import build_tokenizer
    from agentrl.rollout import RolloutConfig, Sampling, collect

    tok = build_tokenizer(["tick away", "Tick three times.", "tick die"] * 5, 300)
    cfg = RolloutConfig(n_tasks=2, group_size=2, invalid_penalty=0.5)
    # Turn 1: env 1 (worker 1) kills its worker; everything else ticks.
    backend = ScriptedBackend(["tick", "die", "tick", "tick"] + ["tick"] * 20)
    with ProcessPool("crashy", {}, 4, workers=2) as pool:
        groups = collect(pool, [0, 1], backend, tok, cfg, Sampling(max_new_tokens=2))
        trajs = [t for g in groups for t in g.trajectories]
        # Envs 1 and 3 lived on the dead worker: one truncated step each, reward 0.
        for j in (1, 3):
            assert len(trajs[j].steps) == 1 and trajs[j].steps[0].truncated
            assert trajs[j].steps[0].reward == 0.0 and not trajs[j].won
        for j in (0, 2):
            assert trajs[j].won and len(trajs[j].steps) == 3
        # ...and flagged as lost, so credit assignment and the learner leave them out.
        assert [t.lost for t in trajs] == [False, True, False, True]
        assert StepBatch.from_groups(groups).traj_lost.tolist() == [False, True, False, True]
        assert groups[0].env == "crashy"
        assert pool.restarts == 1
        # The next batch runs normally on the replacement worker.
        again = collect(pool, [2, 3], ScriptedBackend(["tick"] * 12), tok, cfg,
                        Sampling(max_new_tokens=2))  # fmt: skip
        assert all(t.won for g in again for t in g.trajectories)
        assert StepBatch.from_groups(again).n_steps == 12


class _SlowIOEnv(crashy_env.CrashyEnv):
    """CrashyEnv whose steps wait (like a remote call) and may run 4 at a time in threads."""

    step_concurrency = 4
    lock = None
    in_flight = 0
    max_in_flight = 0

    def _step(self, action):
        cls = type(self)
        with cls.lock:
            cls.in_flight += 1
            cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
        try:
            time.sleep(0.1)
            return super()._step(action)
        finally:
            with cls.lock:
                cls.in_flight -= 1


@pytest.mark.parametrize("declared", [4, 1])
def test_inline_pool_steps_io_bound_envs_in_threads_in_order(monkeypatch, declared):
    monkeypatch.setattr(_SlowIOEnv, "lock", threading.Lock())
    monkeypatch.setattr(_SlowIOEnv, "step_concurrency", declared)
    monkeypatch.setattr(_SlowIOEnv, "max_in_flight", 0)
    pool = InlinePool([_SlowIOEnv() for _ in range(6)])
    pool.reset([(j, j, None) for j in range(6)])
    actions = ["tick", "bogus", "raise", "tick", "tick", "bogus"]
    out = pool.step(list(enumerate(actions)))
    assert [info["action_valid"] for *_, info in out] == [True, False, False, True, True, False]
    assert [r for _, r, *_ in out] == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert "environment bug" in out[2][4]["worker_error"] and out[2][3]  # lost, truncated
    # At most `declared` at once (and more than one when allowed: the steps overlap).
    assert _SlowIOEnv.max_in_flight <= declared
    assert (_SlowIOEnv.max_in_flight > 1) == (declared > 1)
    # An env listed twice in one step is never stepped by two threads: in order, one by one.
    _SlowIOEnv.max_in_flight = 0
    out = pool.step([(0, "tick"), (0, "tick"), (1, "tick")])
    assert [o for o, *_ in out] == ["ticks=2", "ticks=3", "ticks=1"]
    assert _SlowIOEnv.max_in_flight == 1
