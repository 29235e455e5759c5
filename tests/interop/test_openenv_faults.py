"""Faults on the way to an OpenEnv server never crash a run: a server that dies mid-episode,
one that is down, a step that hangs past the timeout and an environment that raises all end
their episodes as lost (truncated, reward 0, ``worker_error``, flagged in the batch), and the
rollout goes on; when the server is back, episodes play normally again.

The server runs in a forked process (it has the test's imports already, so it starts at once)
serving the test suite's ``crashy`` environment, whose "die" action kills the server process.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal

import pytest

pytest.importorskip("openenv.core", reason="the openenv extra is not installed")

import crashy_env  # noqa: F401 - registers 'crashy' (also in the forked server)
from helpers import ScriptedBackend

import agentrl
import agentrl.interop.openenv
from agentrl.credit.batch import StepBatch
from agentrl.interop.openenv_server import ServeConfig, build_app, running
from agentrl.model import build_tokenizer
from agentrl.rollout import RolloutConfig, Sampling, collect
from agentrl.rollout.env_pool import InlinePool


def _serve(port: int, conn) -> None:
    app, _ = build_app(ServeConfig(env="crashy", port=port, max_sessions=16))
    with running(app, ServeConfig(env="crashy", port=port)) as url:
        conn.send(url)
        signal.pause()  # until the test kills this process (or "die" does)


class Server:
    """A served ``crashy`` env in a forked process, restartable on the same port."""

    def __init__(self, port: int = 0):
        self.port, self.proc, self.url = port, None, ""

    def start(self) -> str:
        parent, child = mp.Pipe()
        self.proc = mp.get_context("fork").Process(target=_serve, args=(self.port, child))
        self.proc.start()
        assert parent.poll(60), "server did not start"
        self.url = parent.recv()
        self.port = int(self.url.rsplit(":", 1)[1])
        return self.url

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.join(10)


@pytest.fixture
def server():
    srv = Server()
    srv.start()
    yield srv
    srv.kill()


def make_pool(url: str, n: int = 4, **kwargs) -> InlinePool:
    kw = {"base_url": url, "connect_timeout_s": 2.0, "timeout_s": 5.0, "reset_retries": 0}
    return InlinePool([agentrl.make("openenv", **{**kw, **kwargs}) for _ in range(n)])


TOK = build_tokenizer(["tick away", "Tick three times.", "tick die hang raise"] * 5, 300)
CFG = RolloutConfig(n_tasks=2, group_size=2, invalid_penalty=0.5)


def test_server_killed_mid_episode_loses_the_episodes_and_the_rollout_goes_on(server):
    # One env at a time (concurrency=1), so which steps happen before the kill is fixed:
    # env 0 ticks, env 1's "die" kills the server, envs 2 and 3 find it gone.
    pool = make_pool(server.url, concurrency=1)
    backend = ScriptedBackend(["tick", "die", "tick", "tick"] + ["tick"] * 20)
    groups = collect(pool, [0, 1], backend, TOK, CFG, Sampling(max_new_tokens=2))
    trajs = [t for g in groups for t in g.trajectories]
    assert trajs[0].steps[0].reward == 1.0 and trajs[0].steps[0].valid  # before the kill
    for t in trajs[1:]:
        assert len(t.steps) == 1 and t.steps[0].truncated and t.steps[0].reward == 0.0
        assert t.lost and not t.won
    # env 0's next step meets the dead server too: every episode ends lost, none is penalised
    assert trajs[0].lost and trajs[0].steps[-1].truncated and trajs[0].steps[-1].reward == 0.0
    assert StepBatch.from_groups(groups).traj_lost.tolist() == [True] * 4

    # The server stays down: the next batch's resets fail, its episodes are lost, no crash.
    server.kill()
    ticks = ScriptedBackend(["tick"] * 12)
    down = collect(pool, [2, 3], ticks, TOK, CFG, Sampling(max_new_tokens=2))
    assert all(t.lost and len(t.steps) == 1 for g in down for t in g.trajectories)
    assert "OpenEnv reset failed" in pool.envs[0].unwrapped._lost

    # Back on the same port: the same environments play normally again.
    server.start()
    ticks = ScriptedBackend(["tick"] * 12)
    again = collect(pool, [4, 5], ticks, TOK, CFG, Sampling(max_new_tokens=2))
    assert all(t.won and not t.lost for g in again for t in g.trajectories)
    assert StepBatch.from_groups(again).n_steps == 12
    pool.close()


def test_a_hung_step_times_out_and_an_env_error_loses_only_its_episode(server):
    env = agentrl.make("openenv", base_url=server.url, timeout_s=1.0, reset_retries=0)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("hang")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "TimeoutError" in info["worker_error"] and obs == "tick away"
    # The next episode opens a new session: the hung one is abandoned, not waited for.
    env.reset(seed=1)
    assert env.step("tick")[1] == 1.0
    *_, truncated, info = env.step("raise")
    assert truncated and "environment bug" in info["worker_error"]
    assert "EXECUTION_ERROR" in info["worker_error"]
    env.reset(seed=2)
    assert env.step("tick")[:2] == ("ticks=1", 1.0)
    env.close()


def test_nothing_listening_is_a_lost_episode_not_an_error():
    srv = Server()
    srv.start()
    url = srv.url
    srv.kill()  # a port nobody listens on now
    env = agentrl.make("openenv", base_url=url, reset_retries=1, connect_timeout_s=2.0)
    obs, info = env.reset(seed=0)
    assert "OpenEnv reset failed 2 times" in obs and info["won"] is False
    *_, truncated, info = env.step("tick")
    assert truncated and "ConnectionError" in info["worker_error"]
    # the lost episode is over like any other
    assert env.step("tick")[3] is True
    env.close()


def test_an_in_thread_server_stops_cleanly():
    app, _ = build_app(ServeConfig(env="crashy"))
    with running(app) as url:
        env = agentrl.make("openenv", base_url=url)
        env.reset(seed=0)
        assert env.step("tick")[0] == "ticks=1"
        env.close()
