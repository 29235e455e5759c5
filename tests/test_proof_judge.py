"""Proof env, judge side: the OpenAI-compatible client against a local fake server.

The fake server (stdlib ``http.server`` in a thread, on 127.0.0.1) answers each request by a
script: a reply text, an HTTP status, a delay longer than the client's timeout, or a raw body.
Covered: a good reply is parsed; malformed replies and bodies are failed judgements (never 0);
timeouts and 5xx are retried with backoff, then fail; 4xx fails at once; the environment turns
a failed judgement into ``graded=False`` without raising. Nothing leaves the machine.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentrl.envs.proof import ProofConfig, ProofEnv, ProofTask, grade, grade_many
from agentrl.envs.proof.judge import (
    JudgeClient,
    build_messages,
    parse_score,
    settings_from_config,
)

TASK = ProofTask(
    id="p1",
    problem="Prove that the sum of two even numbers is even.",
    reference_solution="Write them as 2a and 2b; the sum is 2(a + b).",
    rubric="2 pts: writes the numbers as 2a, 2b. 5 pts: concludes.",
    source="file",
)
GOOD = "The proof is complete and rigorous.\nSCORE: 7"


class FakeJudge:
    """A scripted OpenAI-compatible ``/v1/chat/completions`` endpoint.

    ``script`` holds one behaviour per request (the last one repeats): ``("reply", text)``,
    ``("status", code)``, ``("sleep", seconds, text)`` or ``("raw", body)``.
    """

    def __init__(self) -> None:
        self.script: list[tuple] = [("reply", GOOD)]
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                judge.requests.append(body)
                judge.headers.append(dict(self.headers))
                step = judge.script[min(len(judge.requests), len(judge.script)) - 1]
                if step[0] == "status":
                    self._send(step[1], b'{"error": "scripted"}')
                    return
                if step[0] == "raw":
                    self._send(200, step[1].encode())
                    return
                if step[0] == "sleep":
                    time.sleep(step[1])
                text = step[-1]
                reply = {"choices": [{"message": {"role": "assistant", "content": text}}]}
                self._send(200, json.dumps(reply).encode())

            def _send(self, code: int, body: bytes) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        # A short poll interval: shutdown() waits up to one interval.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    server = FakeJudge()
    yield server
    server.close()


def _client(url: str, sleeps: list | None = None, **overrides) -> JudgeClient:
    cfg = ProofConfig(
        **{
            "judge_base_url": url,
            "judge_model": "fake-judge",
            "judge_timeout_s": 2.0,
            "judge_retries": 2,
            "judge_backoff_s": 0.5,
            **overrides,
        }
    )
    record = sleeps if sleeps is not None else []
    return JudgeClient(settings_from_config(cfg), sleep=record.append)


# -- prompt and score parsing -------------------------------------------------------------------


def test_prompt_holds_problem_reference_rubric_and_answer():
    system, user = build_messages(TASK.problem, "My proof.", TASK.reference_solution, TASK.rubric)
    assert system["role"] == "system" and user["role"] == "user"
    for part in (TASK.problem, TASK.reference_solution, TASK.rubric, "My proof.", "SCORE:"):
        assert part in user["content"]
    _, no_ref = build_messages(TASK.problem, "My proof.", "", "")
    assert "Reference solution" not in no_ref["content"]
    assert "Grading guidelines" not in no_ref["content"]


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Fine.\nSCORE: 7", 7),
        ("SCORE: 0", 0),
        ("Fine.\n  SCORE:3  \n\n", 3),
        ("SCORE: 8", None),
        ("SCORE: -1", None),
        ("Score: 5", None),
        ("**SCORE: 5**", None),
        ("SCORE: 5/7", None),
        ("SCORE: 5.0", None),
        ("SCORE: 5\nThanks!", None),
        ("The score is 5.", None),
        ("", None),
    ],
)
def test_score_parsing_is_strict(reply, score):
    assert parse_score(reply) == score


# -- the client against the fake server ---------------------------------------------------------


def test_good_reply_is_parsed(fake, monkeypatch):
    monkeypatch.setenv("PROOF_TEST_KEY", "sk-test")
    with _client(fake.url, judge_api_key_env="PROOF_TEST_KEY") as client:
        j = client.judge(TASK, "Let the numbers be 2a and 2b ...")
    assert (j.points, j.error, j.attempts) == (7, None, 1)
    assert j.reply == GOOD
    body = fake.requests[0]
    assert body["model"] == "fake-judge" and body["temperature"] == 0.0
    assert TASK.reference_solution in body["messages"][1]["content"]
    assert fake.headers[0]["Authorization"] == "Bearer sk-test"
    assert "sk-test" not in repr(j)


def test_judge_without_reference_and_without_key(fake, monkeypatch):
    monkeypatch.delenv("PROOF_TEST_KEY", raising=False)
    with _client(
        fake.url, judge_with_reference=False, judge_api_key_env="PROOF_TEST_KEY"
    ) as client:
        assert client.judge(TASK, "proof").points == 7
    assert TASK.reference_solution not in fake.requests[0]["messages"][1]["content"]
    assert "Authorization" not in fake.headers[0]


@pytest.mark.parametrize(
    "step",
    [
        ("reply", "Looks good, 7/7."),
        ("reply", "SCORE: 9"),
        ("raw", "not json"),
        ("raw", '{"choices": []}'),
        ("raw", '{"choices": [{"message": {"content": null}}]}'),
    ],
)
def test_malformed_reply_is_a_failed_judgement_not_zero(fake, step):
    fake.script = [step]
    with _client(fake.url) as client:
        j = client.judge(TASK, "proof")
    assert j.points is None and "malformed" in j.error
    assert j.attempts == 1  # a retry would get the same answer


def test_timeouts_are_retried_then_fail(fake):
    fake.script = [("sleep", 1.0, GOOD)]
    sleeps: list[float] = []
    t0 = time.monotonic()
    with _client(fake.url, sleeps, judge_timeout_s=0.2, judge_retries=2) as client:
        j = client.judge(TASK, "proof")
    assert j.points is None and "timed out" in j.error and "3 attempt" in j.error
    assert j.attempts == 3 and len(fake.requests) == 3
    assert sleeps == [0.5, 1.0]  # backoff_s * 2**(k-1)
    assert time.monotonic() - t0 < 3.0


def test_timeout_then_success(fake):
    fake.script = [("sleep", 1.0, GOOD), ("reply", "Partial progress.\nSCORE: 2")]
    with _client(fake.url, judge_timeout_s=0.2) as client:
        j = client.judge(TASK, "proof")
    assert (j.points, j.attempts, j.error) == (2, 2, None)


def test_server_errors_are_retried(fake):
    fake.script = [("status", 503), ("status", 500), ("reply", "SCORE: 4")]
    sleeps: list[float] = []
    with _client(fake.url, sleeps) as client:
        j = client.judge(TASK, "proof")
    assert (j.points, j.attempts) == (4, 3) and sleeps == [0.5, 1.0]


def test_server_errors_exhaust_retries(fake):
    fake.script = [("status", 502)]
    with _client(fake.url, judge_retries=1) as client:
        j = client.judge(TASK, "proof")
    assert j.points is None and "HTTP 502" in j.error and j.attempts == 2


def test_client_errors_fail_at_once(fake):
    fake.script = [("status", 404)]
    with _client(fake.url) as client:
        j = client.judge(TASK, "proof")
    assert j.points is None and "HTTP 404" in j.error and j.attempts == 1


def test_unreachable_endpoint_fails_without_raising():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    with _client(f"http://127.0.0.1:{port}/v1", judge_retries=1) as client:
        j = client.judge(TASK, "proof")
    assert j.points is None and "connection error" in j.error and j.attempts == 2


# -- grading and the environment with a judge ---------------------------------------------------


def test_grade_uses_the_judge_and_records_failures(fake):
    fake.script = [("reply", "SCORE: 5"), ("reply", "no score")]
    with _client(fake.url) as client:
        ok = grade(TASK, "<think>draft</think>Let the numbers be 2a and 2b.", judge=client)
        bad = grade(TASK, "Another proof.", judge=client)
        invalid = grade(TASK, "\x00\x01", judge=client)
    assert (ok.points, ok.graded, ok.method, ok.reward) == (5, True, "judge", 5 / 7)
    assert "draft" not in fake.requests[0]["messages"][1]["content"]  # reasoning is dropped
    assert (bad.points, bad.graded, bad.valid) == (None, False, True) and "malformed" in bad.error
    assert bad.reward == 0.0 and bad.details["judge_reply"] == "no score"
    assert not invalid.valid and len(fake.requests) == 2  # garbage never reaches the judge
    assert grade(TASK, "A proof.").error == "no judge configured for this task"


def test_grade_many_judges_in_parallel(fake):
    fake.script = [("sleep", 0.3, "SCORE: 6")]
    with _client(fake.url) as client:
        t0 = time.monotonic()
        grades = grade_many([(TASK, f"proof {i}") for i in range(6)], judge=client, workers=6)
    assert [g.points for g in grades] == [6] * 6
    assert time.monotonic() - t0 < 1.5  # six 0.3 s requests at once, not one after another


def _file_env(tmp_path, url: str, **overrides) -> ProofEnv:
    path = tmp_path / "tasks.jsonl"
    row = {"id": "p1", "problem": TASK.problem, "solution": TASK.reference_solution}
    path.write_text(json.dumps(row) + "\n")
    return ProofEnv(
        source="file",
        path=str(path),
        judge_base_url=url,
        judge_model="fake-judge",
        judge_retries=0,
        judge_timeout_s=0.5,
        **overrides,
    )


def test_env_failed_judgement_is_not_graded_and_does_not_raise(fake, tmp_path):
    fake.script = [("status", 500)]
    env = _file_env(tmp_path, fake.url)
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step("Let the numbers be 2a and 2b.")
    assert (reward, term, trunc) == (0.0, True, False)
    assert info["graded"] is False and info["points"] is None and info["won"] is False
    assert "HTTP 500" in info["judge_error"] and info["action_valid"] is True
    assert info["anchor"] == ("p1", 1) and "could not be graded" in obs


def test_env_judged_answer_wins(fake, tmp_path):
    env = _file_env(tmp_path, fake.url)
    env.reset(seed=0)
    _, reward, term, _, info = env.step("Let the numbers be 2a and 2b; the sum is 2(a + b).")
    assert (reward, term, info["won"], info["points"], info["graded"]) == (1.0, True, True, 7, True)
    assert info["judge_error"] is None and info["grade"]["judge_reply"] == GOOD
