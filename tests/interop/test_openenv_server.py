"""The served environment under load and abuse (``python -m agentrl.serve``'s app, on a
loopback port of this process): 100 concurrent sessions with no cross-talk and a clear refusal
past the limit, dropped sessions cleaned up, and malformed requests (wrong types, missing
fields, huge payloads, unknown session ids, random JSON) answered with OpenEnv's errors while
the server and the other sessions carry on.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("openenv.core", reason="the openenv extra is not installed")

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import agentrl
import agentrl.interop.openenv
from agentrl.interop.openenv_server import (
    MAX_ACTION_CHARS,
    ServeConfig,
    build_app,
    jsonable,
    running,
)

MOVES = ["up", "down", "left", "right", "jump"]
SESSIONS = 100


def wait_for(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def direct_transcript(seed: int, moves_seed: int) -> list:
    env = agentrl.make("sokoban")
    return play(env, seed, moves_seed)


def play(env, seed: int, moves_seed: int, barrier: threading.Barrier | None = None) -> list:
    """A random episode as a list of JSON-comparable entries."""
    rng = np.random.default_rng(moves_seed)
    obs, info = env.reset(seed=seed)
    if barrier is not None:
        barrier.wait(timeout=120)  # every session is open before any steps
    out, done = [(obs, jsonable(info))], False
    while not done:
        move = MOVES[int(rng.integers(len(MOVES)))]
        o, r, te, tr, info = env.step(move)
        out.append((move, o, r, te, tr, jsonable(info)))
        done = te or tr
    return out


def test_100_concurrent_sessions_without_cross_talk_and_a_clear_refusal_past_the_limit():
    app, server = build_app(ServeConfig(env="sokoban", max_sessions=SESSIONS))
    with running(app) as url:
        envs = [agentrl.make("openenv", base_url=url, reset_retries=0) for _ in range(SESSIONS)]
        barrier = threading.Barrier(SESSIONS)
        try:
            with ThreadPoolExecutor(SESSIONS) as ex:
                got = list(ex.map(lambda k: play(envs[k], 500 + k, k, barrier), range(SESSIONS)))
            assert server.get_capacity_status().active_sessions == SESSIONS
            # Session 101 is refused with OpenEnv's CAPACITY_REACHED: its episode is lost.
            extra = agentrl.make("openenv", base_url=url, reset_retries=0)
            extra.reset(seed=1)
            *_, truncated, info = extra.step("up")
            assert truncated and "CAPACITY_REACHED" in info["worker_error"]
            assert "100/100 sessions active" in info["worker_error"]
            extra.close()
            status = httpx.get(f"{url}/capacity").json()
            assert status == {"active_sessions": SESSIONS, "max_sessions": SESSIONS}
        finally:
            for env in envs:
                env.close()
        assert wait_for(lambda: server.get_capacity_status().active_sessions == 0)
    # Each session's transcript is its own episode, replayed directly.
    for k in range(SESSIONS):
        assert got[k] == direct_transcript(500 + k, k), f"session {k} differs"


@pytest.fixture(scope="module")
def served():
    app, server = build_app(ServeConfig(env="sokoban", max_sessions=8, max_message_mb=4.0))
    with running(app) as url:
        yield url, server


def ws(url: str):
    return connect(url.replace("http://", "ws://") + "/ws", max_size=None, open_timeout=10)


def ask(conn, message) -> dict:
    conn.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(conn.recv(timeout=20))


def test_a_dropped_connection_frees_its_session(served):
    url, server = served
    with ws(url) as conn:
        assert ask(conn, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        assert wait_for(lambda: server.get_capacity_status().active_sessions == 1)
        # No close message, no closing handshake: the client vanished.
        conn.socket.shutdown(socket.SHUT_RDWR)
    assert wait_for(lambda: server.get_capacity_status().active_sessions == 0)


BAD_MESSAGES = [
    ("not json {", "INVALID_JSON"),
    ({"type": "bogus"}, "UNKNOWN_TYPE"),
    ({"data": {"text": "up"}}, "UNKNOWN_TYPE"),
    ({"type": "step"}, "VALIDATION_ERROR"),
    ({"type": "step", "data": {}}, "VALIDATION_ERROR"),
    ({"type": "step", "data": {"text": 5}}, "VALIDATION_ERROR"),
    ({"type": "step", "data": {"text": ["up"]}}, "VALIDATION_ERROR"),
    ({"type": "step", "data": {"text": "up", "oops": 1}}, "VALIDATION_ERROR"),
    ({"type": "step", "data": "up"}, "VALIDATION_ERROR"),
    ({"type": "step", "data": {"text": "u" * (MAX_ACTION_CHARS + 1)}}, "VALIDATION_ERROR"),
    ({"type": "step", "data": {"text": "x" * 3_000_000}}, "VALIDATION_ERROR"),  # 3 MB
    ({"type": "reset", "data": "seed=1"}, "VALIDATION_ERROR"),
    ({"type": "reset", "data": {"seed": "abc"}}, "EXECUTION_ERROR"),
    ({"type": "reset", "data": {"seed": -1}}, "EXECUTION_ERROR"),
    ({"type": "reset", "data": {"seed": True}}, "EXECUTION_ERROR"),
    ({"type": "reset", "data": {"seed": 1.5}}, "EXECUTION_ERROR"),
    ({"type": "reset", "data": {"options": [1]}}, "EXECUTION_ERROR"),
    ({"type": "reset", "data": {"episode_id": 7}}, "EXECUTION_ERROR"),
]


def test_malformed_messages_get_openenv_errors_and_the_session_carries_on(served):
    url, _ = served
    direct = direct_transcript(9, 9)
    with ws(url) as victim, ws(url) as other:
        # Before any reset, a step is refused with a message that says what to do.
        err = ask(victim, {"type": "step", "data": {"text": "up"}})
        assert err["type"] == "error" and err["data"]["code"] == "EXECUTION_ERROR"
        assert "send a reset first" in err["data"]["message"]
        got = ask(other, {"type": "reset", "data": {"seed": 9}})
        moves = [e[0] for e in direct[1:]]
        assert got["data"]["observation"]["text"] == direct[0][0]
        for k, (message, code) in enumerate(BAD_MESSAGES):
            err = ask(victim, message)
            assert err["type"] == "error", message
            assert err["data"]["code"] == code, (message, err)
            assert err["data"]["message"]
            if k < len(moves):  # the other session plays on in between
                step = ask(other, {"type": "step", "data": {"text": moves[k]}})
                assert step["data"]["observation"]["text"] == direct[k + 1][1]
                info = dict(step["data"]["observation"]["info"])
                assert (info.pop("terminated"), info.pop("truncated")) == direct[k + 1][3:5]
                assert info == direct[k + 1][5]
        # The abused session still works: its episode is the direct one.
        got = ask(victim, {"type": "reset", "data": {"seed": 9}})
        assert got["data"]["observation"]["text"] == direct[0][0]
        assert got["data"]["observation"]["info"]["anchor"] == direct[0][1]["anchor"]
        step = ask(victim, {"type": "step", "data": {"text": moves[0]}})
        assert step["data"]["reward"] == direct[1][2]
        assert ask(victim, {"type": "state"})["data"]["step_count"] == 1


@pytest.mark.parametrize("message", ["[1, 2]", "42", "null", '"reset"'])
def test_a_message_that_is_no_object_ends_only_its_session(served, message):
    url, server = served
    with ws(url) as conn:
        err = ask(conn, message)
        assert err["type"] == "error" and err["data"]["code"] == "SESSION_ERROR"
        with pytest.raises(ConnectionClosed):
            conn.recv(timeout=10)
    assert wait_for(lambda: server.get_capacity_status().active_sessions == 0)
    with ws(url) as conn:  # the server is up
        assert ask(conn, {"type": "reset", "data": {"seed": 2}})["type"] == "observation"


def test_a_message_over_the_size_limit_closes_that_connection_only(served):
    url, _ = served
    with ws(url) as conn:
        conn.send(json.dumps({"type": "step", "data": {"text": "x" * 5_000_000}}))  # > 4 MB
        with pytest.raises(ConnectionClosed) as exc:
            conn.recv(timeout=20)
        assert exc.value.rcvd is not None and exc.value.rcvd.code == 1009  # message too big
    assert httpx.get(f"{url}/health").json() == {"status": "healthy"}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(["seed", "options", "episode_id", "text", "action", "timeout_s"])


@settings(
    max_examples=40, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(
    kind=st.sampled_from(["reset", "step", "state", "close ", "", "mcp"]),
    data=st.dictionaries(FIELDS | st.text(max_size=8), JSON, max_size=4) | JSON,
)
def test_random_json_is_always_answered(served, kind, data):
    url, _ = served
    with ws(url) as conn:
        answer = ask(conn, {"type": kind, "data": data})
        assert answer["type"] in {"observation", "error", "state", "mcp"}
        # the session is still alive and answers a well-formed request
        assert ask(conn, {"type": "reset", "data": {"seed": 4}})["type"] == "observation"


def test_http_requests_get_clear_errors(served):
    url, _ = served
    reset_obs = agentrl.make("sokoban").reset(seed=3)[0]
    with httpx.Client(base_url=url, timeout=30) as http:
        # OpenEnv's HTTP reset is stateless but real: a fresh environment, seeded.
        ok = http.post("/reset", json={"seed": 3})
        assert ok.status_code == 200 and ok.json()["observation"]["text"] == reset_obs
        for body in ({"seed": "x"}, {"seed": -3}, {"episode_id": "e" * 300}):
            assert http.post("/reset", json=body).status_code == 422, body
        bad = http.post("/reset", json={"seed": 3, "options": [1]})
        assert bad.status_code == 409 and "options=[1] is invalid" in bad.json()["detail"]
        not_json = http.post(
            "/reset", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert not_json.status_code == 422
        # A step has no episode over stateless HTTP: the answer says where episodes are.
        step = http.post("/step", json={"action": {"text": "up"}})
        assert step.status_code == 409 and "WebSocket session at /ws" in step.json()["detail"]
        for body in (
            {},
            {"action": "up"},
            {"action": {"text": 1}},
            {"action": {}},
            {"action": {"text": "x" * 3_000_000}},
            {"action": {"text": "up"}, "timeout_s": -1},
        ):
            assert http.post("/step", json=body).status_code == 422, str(body)[:80]
        # Unknown session ids (OpenEnv's session methods) are named in the error.
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/close",
               "params": {"session_id": "no-such-session"}}  # fmt: skip
        answer = http.post("/mcp", json=rpc).json()
        assert "Unknown session_id: no-such-session" in answer["error"]["message"]
        rpc.update(method="tools/list", params={"session_id": "no-such-session"})
        assert "Unknown session_id" in http.post("/mcp", json=rpc).json()["error"]["message"]
        assert http.get("/no-such-route").status_code == 404
        # Discovery endpoints describe the served environment.
        assert http.get("/health").json() == {"status": "healthy"}
        assert http.get("/metadata").json()["name"] == "agentrl/Sokoban-v0"
        schema = http.get("/schema").json()
        assert "text" in schema["action"]["properties"]
        assert {"text", "info"} <= set(schema["observation"]["properties"])
        assert http.get("/state").status_code == 200
