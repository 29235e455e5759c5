"""OpenEnv both ways, step for step: an agentrl environment served by openenv-core's server
and played through openenv-core's client as ``env=openenv`` equals the environment used
directly (observations, rewards, flags, anchors and the whole ``info``), for every bundled
environment and 20 seeds of random play. Also the in-process variant, the mapping of a
foreign environment's metadata, and the config errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ENV_TEST_KWARGS, make_env

pytest.importorskip("openenv.core", reason="the openenv extra is not installed")

import agentrl
from agentrl.configuration import ConfigError
from agentrl.interop.openenv import hashable, text_anchor
from agentrl.interop.openenv_server import (
    ServeConfig,
    build_app,
    jsonable,
    running,
)

BUNDLED = ["sokoban", "webshop", "alfworld", "proof"]
SEEDS = range(20)
# Shorter ALFWorld episodes keep the file fast; truncation is still reached and compared.
SHORTER = {"alfworld": {"max_steps": 10}}
OFF_GRAMMAR = ["", "look", "jump around", "<action>up</action>", "\\boxed{42}", "qz" * 300]


def random_action(info: dict, rng: np.random.Generator) -> str:
    """Mostly an admissible action (so episodes get somewhere), sometimes anything."""
    adm = info["admissible_actions"]
    if adm and rng.random() < 0.8:
        return adm[int(rng.integers(len(adm)))]
    return OFF_GRAMMAR[int(rng.integers(len(OFF_GRAMMAR)))]


def assert_same_step(direct: tuple, served: tuple) -> None:
    assert served[:4] == direct[:4]  # obs, reward, terminated, truncated
    assert served[4]["anchor"] == direct[4]["anchor"]
    assert hash(served[4]["anchor"]) == hash(direct[4]["anchor"])
    assert jsonable(served[4]) == jsonable(direct[4])  # every info key, costs included


def play_twin(direct, served, seed: int) -> int:
    """One random episode in both environments, compared at every step; its length."""
    d_obs, d_info = direct.reset(seed=seed)
    s_obs, s_info = served.reset(seed=seed)
    assert s_obs == d_obs and s_info["anchor"] == d_info["anchor"]
    assert jsonable(s_info) == jsonable(d_info)
    rng = np.random.default_rng(seed)
    info, steps, done = d_info, 0, False
    while not done:
        action = random_action(info, rng)
        d = direct.step(action)
        assert_same_step(d, served.step(action))
        info, done, steps = d[4], d[2] or d[3], steps + 1
    return steps


@pytest.fixture(scope="module", params=BUNDLED)
def served_env(request):
    """(name, direct env, base URL of that env served by openenv-core)."""
    name = request.param
    kwargs = {**ENV_TEST_KWARGS.get(name, {}), **SHORTER.get(name, {})}
    direct = make_env(name, **kwargs)  # skips alfworld without its extra
    app, server = build_app(ServeConfig(env=name, env_kwargs=kwargs))
    with running(app) as url:
        yield name, direct, url, server
    direct.close()


def test_round_trip_through_the_server_equals_the_direct_env(served_env):
    _, direct, url, server = served_env
    served = agentrl.make("openenv", base_url=url)
    try:
        lengths = [play_twin(direct, served, seed) for seed in SEEDS]
        assert sum(lengths) >= len(SEEDS)
        assert server.get_capacity_status().active_sessions == 1  # one session for 20 episodes
    finally:
        served.close()


def test_in_process_variant_equals_the_direct_env():
    direct = make_env("sokoban")
    local = agentrl.make("openenv", local="sokoban", local_kwargs={"max_steps": 6})
    direct6 = make_env("sokoban", max_steps=6)
    for seed in range(5):
        play_twin(direct6, local, seed)
    # the same tasks as the default env: options pass through, the seed picks the level
    assert local.reset(seed=7)[0] == direct.reset(seed=7)[0]


def test_eval_split_options_reach_the_server():
    name = "webshop"
    kwargs = ENV_TEST_KWARGS[name]
    direct = make_env(name)
    local = agentrl.make("openenv", local=name, local_kwargs=kwargs)
    opts = {"split": "eval"}
    assert local.reset(seed=3, options=opts)[0] == direct.reset(seed=3, options=opts)[0]
    assert local.reset(seed=3)[0] != direct.reset(seed=3, options=opts)[0]


# -- a foreign environment: only text, reward and done -------------------------------------
class FakeSession:
    """Stands in for a server that sends what a plain OpenEnv environment sends."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.sent = []

    def reset(self, data):
        self.sent.append(("reset", data))
        return self.answers.pop(0)

    def step(self, action):
        self.sent.append(("step", action))
        return self.answers.pop(0)

    def close(self):
        pass


def test_foreign_metadata_mapping_and_text_anchor():
    env = agentrl.make(
        "openenv", base_url="http://127.0.0.1:9", action_field="message", text_field="echo",
        max_steps=3, task="Say hi.",
    )  # fmt: skip
    fake = FakeSession(
        [
            {"observation": {"echo": "hello"}, "reward": None, "done": False},
            {"observation": {"echo": "hi"}, "reward": 1, "done": True},
        ]
    )
    env.unwrapped._session = fake
    obs, info = env.reset(seed=5)
    assert obs == "hello" and info["task"] == "Say hi." and info["admissible_actions"] is None
    assert info["anchor"] == text_anchor("hello")
    obs, reward, terminated, truncated, info = env.step("hi")
    assert fake.sent == [("reset", {"seed": 5}), ("step", {"message": "hi"})]
    assert (obs, reward, terminated, truncated) == ("hi", 1.0, True, False)
    assert info["won"] is True and info["action_valid"] is True
    assert info["executed_action"] == "hi" and info["anchor"] == text_anchor("hi")
    assert info["costs"] == {"invalid": 0.0, "steps": 1.0}


def test_top_level_metadata_wins_and_server_truncation_is_kept():
    env = agentrl.make("openenv", base_url="http://127.0.0.1:9", anchor_key="state")
    env.unwrapped._session = FakeSession(
        [
            {"observation": {"text": "a"}, "metadata": {"state": [1, [2, 3]], "task": "t"}},
            {
                "observation": {"text": "b"},
                "reward": 0.5,
                "done": True,
                "metadata": {"state": [4], "truncated": True, "score": 7},
            },
        ]
    )
    assert env.reset(seed=0)[1]["anchor"] == (1, (2, 3))
    _, reward, terminated, truncated, info = env.step("x")
    assert (reward, terminated, truncated, info["won"]) == (0.5, False, True, False)
    assert info["anchor"] == (4,) and info["score"] == 7 and info["task"] == "t"


def test_hashable_reads_json_anchors_back():
    anchor = ((1, 2), (("a", (3,)),), None, "x")
    assert hashable(jsonable(anchor)) == anchor
    assert hash(hashable({"b": [1], "a": 2})) == hash((("a", 2), ("b", (1,))))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs exactly one of env.base_url"),
        ({"base_url": "http://h:1", "local": "sokoban"}, "needs exactly one of env.base_url"),
        ({"base_url": "localhost:8000"}, "env.base_url='localhost:8000' is invalid"),
        ({"base_url": "http://h:1", "timeout_s": 0}, "env.timeout_s=0.0 is invalid"),
        ({"base_url": "http://h:1", "basse_url": "x"}, "Did you mean 'base_url'"),
        ({"local": "openenv"}, "an environment other than openenv"),
    ],
)
def test_config_errors_name_the_key(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        agentrl.make("openenv", **kwargs)


def test_serve_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"env\.num_boxs is not a valid key"):
        build_app(ServeConfig(env="sokoban", env_kwargs={"num_boxs": 2}))
    with pytest.raises(ConfigError, match="unknown environment 'sokobn'"):
        build_app(ServeConfig(env="sokobn"))
    with pytest.raises(ConfigError, match="--max-sessions=0 is invalid"):
        ServeConfig(max_sessions=0)


def test_serve_command_line(capsys):
    from agentrl.interop.openenv_server import main, parse_args

    cfg, _ = parse_args(["env=sokoban", "env.dim_room=[7,7]", "--port", "0", "--max-sessions", "3"])
    assert (cfg.env, cfg.env_kwargs, cfg.port, cfg.max_sessions) == (
        "sokoban", {"dim_room": [7, 7]}, 0, 3,
    )  # fmt: skip
    for argv, message in (
        (["env=sokoban", "env.num_boxs=2"], "env.num_boxs is not a valid key"),
        (["sokoban"], "use env=NAME or env.KEY=VALUE"),
        (["env=sokobn"], "unknown environment 'sokobn'"),
        (["env=sokoban", "--port", "70000"], "--port=70000 is invalid"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2 and message in capsys.readouterr().err
