"""GEM both ways: agentrl environments through ``gem.make``/``gem.make_vec`` equal the
environments used directly, and ``env=gem`` plays GEM's own games (Guess the Number, 2048).

Skipped with the reason when GEM (``gem-llm``) does not import, unless ``AGENTRL_REQUIRE_GEM=1``
(set by CI), which turns that skip into a failure.
"""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ENV_TEST_KWARGS, product_envs, read_metrics

import agentrl
from agentrl.configuration import ConfigError

REQUIRE = os.environ.get("AGENTRL_REQUIRE_GEM") == "1"
INSTALL = "pip install -e '.[gem]' && pip install --no-deps 'gem-llm==0.1.0' (README, GEM)"
if importlib.util.find_spec("gem") is None and not REQUIRE:
    pytest.skip(f"gem-llm is not installed: {INSTALL}", allow_module_level=True)

import gem  # noqa: E402

from agentrl.interop.gem import PREFIX, AgentrlGemEnv, is_adapter, register_gem_envs  # noqa: E402
from agentrl.interop.gem_env import GemConfig, GemEnv, text_anchor  # noqa: E402

GUESS = "game:GuessTheNumber-v0-easy"
BOXED = "\\boxed{{action}}"
SEEDS = range(20)
MAX_TURNS = 12  # per random episode of the round trip; enough to reach most ends
WORDS = ["look", "up", "x = 1", "search[red shoes]", "click[buy now]", "", "go to desk 1"]


def _native_names() -> list[str]:
    return [n for n in agentrl.list_envs() if not is_adapter(n)]


def _tested_names() -> list[str]:
    """The native environments the round trips play: not the fixtures of benchmarks and tests."""
    return [n for n in product_envs() if not is_adapter(n)]


def _kwargs(name: str) -> dict:
    if name == "alfworld":
        pytest.importorskip("alfworld", reason="the alfworld extra is not installed")
    return dict(ENV_TEST_KWARGS.get(name, {}))


def _action(info: dict, rng: np.random.Generator) -> str:
    adm = info["admissible_actions"]
    if adm and rng.random() < 0.9:
        return adm[int(rng.integers(len(adm)))]
    return WORDS[int(rng.integers(len(WORDS)))]  # open action spaces, and invalid text


def _episode(env, seed: int) -> list:
    """A random-action episode (actions drawn from what the env shows), as a list of records."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    trace = [("reset", obs, info)]
    for _ in range(MAX_TURNS):
        action = _action(info, rng)
        obs, reward, terminated, truncated, info = env.step(action)
        trace.append((action, obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return trace


# -- outward: agentrl environments in GEM's registry ------------------------------------------


def test_every_native_env_is_registered_in_gem_and_adapters_are_not():
    # Environments other tests registered after this module imported GEM join here, as a
    # user's late registrations do; the import itself registered the rest.
    register_gem_envs()
    ids = set(gem.envs.registration.ENV_REGISTRY)
    for name in _native_names():
        assert PREFIX + name in ids
    assert "sokoban" in _native_names() and "gem" not in _native_names()
    assert PREFIX + "gem" not in ids
    assert register_gem_envs() == []  # idempotent


def test_an_env_registered_later_joins_with_register_gem_envs():
    from toy_env import GuessConfig, GuessEnv

    register_gem_envs()  # whatever other tests registered since the import
    agentrl.register_env("gem-late", "test/GemLate-v0", GuessEnv, config_cls=GuessConfig)
    assert register_gem_envs() == [PREFIX + "gem-late"]
    env = gem.make(PREFIX + "gem-late", max_steps=2)
    obs, info = env.reset(seed=0)
    assert obs == "Guess a number from 1 to 3." and info["admissible_actions"] == ["1", "2", "3"]


# ALFWorld's games load in ~0.5 s each: 2 x 20 of them make that case slow.
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "alfworld" else n for n in _tested_names()],
)
def test_gem_make_equals_the_direct_env_step_for_step(name):
    """20 seeds of random play: observations, rewards, flags and the whole ``info`` (anchor,
    won, admissible actions, task, costs ...) are those of ``agentrl.make`` at every step."""
    kwargs = _kwargs(name)
    through_gem = gem.make(PREFIX + name, **kwargs)
    direct = agentrl.make(name, **kwargs)
    assert isinstance(through_gem, AgentrlGemEnv) and isinstance(through_gem, gem.Env)
    ended = 0
    for seed in SEEDS:
        a, b = _episode(through_gem, seed), _episode(direct, seed)
        assert a == b, f"{name} seed {seed} differs"
        ended += a[-1][3] or a[-1][4]
    assert len(a) > 1
    if name == "sokoban":  # 15-step limit: some random episodes end within MAX_TURNS
        assert ended > 0


def test_gem_options_are_the_env_options_with_their_errors():
    env = gem.make(PREFIX + "sokoban", dim_room=[7, 7], max_steps=3)
    obs, _ = env.reset(seed=0)
    assert len(obs.splitlines()) == 8  # 7 rows and the legend
    for _ in range(3):
        *_, truncated, _ = env.step("up")
    assert truncated
    with pytest.raises(ConfigError, match=r"env\.num_boxs is not a valid key.*num_boxes"):
        gem.make(PREFIX + "sokoban", num_boxs=2)


@pytest.mark.parametrize("async_mode", [False, True])
def test_make_vec_equals_direct_envs_seeded_seed_plus_index(async_mode):
    n, seed = 3, 7
    vec = gem.make_vec([PREFIX + "sokoban"] * n, seed=seed, async_mode=async_mode)
    direct = [agentrl.make("sokoban") for _ in range(n)]
    obs, infos = vec.reset()  # no seed: each env's first reset uses seed + index
    expected = [e.reset(seed=seed + i) for i, e in enumerate(direct)]
    assert list(obs) == [o for o, _ in expected]
    assert [i["anchor"] for i in infos] == [i["anchor"] for _, i in expected]
    rng = np.random.default_rng(0)
    for _ in range(5):
        actions = [str(rng.choice(["up", "down", "left", "right"])) for _ in range(n)]
        obs, rewards, terminated, truncated, infos = vec.step(actions)
        for i, (e, a) in enumerate(zip(direct, actions)):
            o, r, term, trunc, info = e.step(a)
            assert (obs[i], rewards[i], terminated[i], truncated[i]) == (o, r, term, trunc)
            assert infos[i] == info
            if term or trunc:
                break


def test_sample_random_action_leaves_the_episode_alone():
    env = gem.make(PREFIX + "sokoban", seed=3)
    env.reset()
    moves = {env.sample_random_action() for _ in range(40)}
    assert moves == {"up", "down", "left", "right"}
    twin = gem.make(PREFIX + "sokoban", seed=3)
    twin.reset()
    assert env.step("up") == twin.step("up")


# -- inward: env=gem -------------------------------------------------------------------------


def _guess(**kwargs) -> GemEnv:
    return agentrl.make("gem", id=GUESS, action_template=BOXED, **kwargs).unwrapped


def test_gem_env_plays_the_gem_game_with_the_same_seed():
    """Observations and rewards are GEM's own for the same seed and the templated action."""
    for seed in range(5):
        ours, raw = _guess(), gem.make(GUESS)
        obs, info = ours.reset(seed=seed)
        raw_obs, _ = raw.reset(seed=seed)
        assert obs == raw_obs == info["task"]
        assert info["anchor"] == text_anchor(obs) and info["admissible_actions"] is None
        for guess in ("5", "3", "8", "1"):
            o, r, term, trunc, info = ours.step(guess)
            ro, rr, rterm, rtrunc, rinfo = raw.step(f"\\boxed{{{guess}}}")
            assert (o, r) == (ro, rr)
            assert info["executed_action"] == guess and info["action_valid"]
            assert info["gem_info"] == rinfo and info["anchor"] == text_anchor(o)
            assert term == (rterm and not rtrunc) and trunc == rtrunc
            assert info["won"] == (o.startswith("Congratulations") and r == 1.0)
            if term or trunc:
                break


def test_turn_limit_is_truncation_and_a_win_terminates():
    env = _guess()
    env.reset(seed=0)
    secret = env.gem_env.game_number
    wrong = [g for g in range(1, 11) if g != secret][:4]
    for g in wrong:
        _, _, term, trunc, info = env.step(str(g))
    # GEM flags both terminated and truncated at its turn limit: a truncation here.
    assert env.gem_env.turn_count == 4 and trunc and not term and not info["won"]
    _, _, term, trunc, info = env.step("5")  # a finished episode stays finished
    assert trunc and info["error"] == "episode is over"
    env.reset(seed=0)
    _, reward, term, trunc, info = env.step(f" {secret}\n")
    assert term and not trunc and info["won"] and reward == 1.0
    assert info["executed_action"] == str(secret)


def test_every_text_goes_to_gem_which_judges_it():
    """GEM's games end on text they cannot parse (their format-error reward): empty text is
    reported invalid, other text valid (GEM does not say what it parsed)."""
    env = _guess()
    for bad, valid in (("", False), ("  \n", False), (None, False), ("five", True)):
        env.reset(seed=1)
        _, reward, term, trunc, info = env.step(bad)  # type: ignore[arg-type]
        assert term and not trunc and reward == -0.1 and not info["won"]
        assert info["action_valid"] is valid
        assert info["executed_action"] == ("five" if valid else None)
        assert env.gem_env.turn_count == 1


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "alfworld" else n for n in _tested_names()],
)
def test_env_gem_of_an_agentrl_env_in_gem_is_that_env(name):
    """The round trip agentrl -> GEM -> ``env=gem``: 20 seeds of random play give the direct
    environment's observations, rewards, flags, anchors, validity, won, task and costs."""
    kwargs = _kwargs(name)
    back = agentrl.make("gem", id=PREFIX + name, options=kwargs, max_steps=1000)
    direct = agentrl.make(name, **kwargs)
    keys = ("anchor", "won", "admissible_actions", "task", "action_valid", "executed_action")
    for seed in SEEDS:
        a, b = _episode(back, seed), _episode(direct, seed)
        assert len(a) == len(b)
        for got, want in zip(a, b):
            assert got[:-1] == want[:-1], f"{name} seed {seed}"  # action, obs, reward, flags
            assert {k: got[-1].get(k) for k in (*keys, "costs")} == {
                k: want[-1].get(k) for k in (*keys, "costs")
            }


def test_each_env_owns_its_global_rng_and_leaves_the_process_alone():
    """2048 draws new tiles from Python's global ``random`` at every step: two twins stepped
    in turn, with draws from the global generator in between, still agree, and the process's
    generator state is what it would be without them."""
    twins = [agentrl.make("gem", id="game:Game2048-v0-easy").unwrapped for _ in range(2)]
    alone = agentrl.make("gem", id="game:Game2048-v0-easy").unwrapped
    traces: list[list] = [[], [], []]
    random.seed(123)
    np.random.seed(123)
    for i, env in enumerate([*twins, alone]):
        traces[i].append(env.reset(seed=5)[0])
    for t in range(12):
        move = ["\\boxed{up}", "\\boxed{left}", "\\boxed{down}", "\\boxed{right}"][t % 4]
        for i in (0, 1):
            traces[i].append(twins[i].step(move)[:4])
            random.random()  # the process keeps using its generator in between
    expected_py, expected_np = random.random(), np.random.random()
    for t in range(12):
        move = ["\\boxed{up}", "\\boxed{left}", "\\boxed{down}", "\\boxed{right}"][t % 4]
        traces[2].append(alone.step(move)[:4])
    assert traces[0] == traces[1] == traces[2]
    assert len({o for o, *_ in traces[0][1:]}) > 3  # the board changes (new tiles)
    random.seed(123)
    np.random.seed(123)
    for _ in range(24):
        random.random()
    assert (random.random(), np.random.random()) == (expected_py, expected_np)


def test_twin_gem_envs_agree_across_resets_without_seeds():
    def play(env):
        out = [env.reset(seed=9)]
        for _ in range(3):
            out += [env.step("4"), env.reset()]  # the env's own RNG picks the next GEM seed
        return out

    assert play(_guess()) == play(_guess())


def test_anchor_and_admissible_keys_read_gem_info():
    _, info = _guess().reset(seed=0)  # GEM's games report neither key
    assert info["anchor"] == text_anchor(info["task"]) and info["admissible_actions"] is None
    env = _guess(anchor_key="suffix", admissible_key="suffix")
    _, info = env.reset(seed=0)
    assert info["anchor"] == "Enter your next guess." and info["admissible_actions"] is None
    env.gem_env.step = lambda a: ("obs", 0.0, False, False, {"moves": ["a", "b"], "k": [1, 2]})
    env.cfg = GemConfig(id=GUESS, anchor_key="k", admissible_key="moves")
    _, _, _, _, info = env.step("a")
    assert info["anchor"] == "[1, 2]" and info["admissible_actions"] == ["a", "b"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "env.id is required with env=gem"),
        ({"id": "game:GuessTheNumber-v0-eassy"}, "Did you mean 'game:GuessTheNumber-v0-easy'"),
        ({"id": GUESS, "action_template": "\\boxed{}"}, r"env\.action_template=.* containing"),
        ({"id": GUESS, "max_step": 3}, r"env\.max_step is not a valid key.*max_steps"),
        ({"id": GUESS, "max_steps": 0}, r"env\.max_steps=0 is invalid"),
    ],
)
def test_bad_gem_config_names_the_key(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        agentrl.make("gem", **kwargs)


def test_without_gem_env_gem_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "gem", None)  # what a missing package looks like
    with pytest.raises(ConfigError, match=r"env=gem needs GEM.*--no-deps 'gem-llm==0\.1\.0'"):
        agentrl.make("gem", id=GUESS)


def test_command_line_config_composes():
    from agentrl.run import compose

    template = "env.action_template='\\boxed{{action}}'"
    cfg = compose(["env=gem", f"env.id={GUESS}", template, "+env.options.max_turns=3"])
    assert cfg.env_name == "gem"
    assert cfg.env_kwargs["id"] == GUESS and cfg.env_kwargs["options"] == {"max_turns": 3}
    assert cfg.env_kwargs["action_template"] == BOXED
    env = agentrl.make("gem", **cfg.env_kwargs).unwrapped
    env.reset(seed=0)
    assert env.gem_env.max_turns == 3


def _has_entry_point() -> bool:
    return any(ep.value == "agentrl.interop.gem_env" for ep in entry_points(group="agentrl.envs"))


@pytest.mark.slow
def test_two_training_iterations_on_a_gem_game(tmp_path: Path):
    """``python -m agentrl.run env=gem env.id=game:GuessTheNumber-v0-easy`` trains: metrics for
    both iterations, and every parameter moved. Until the package declares the ``agentrl.envs``
    entry point, the module is imported by hand in front of the same main()."""
    args = [
        "env=gem",
        f"env.id={GUESS}",
        "env.action_template='\\boxed{{action}}'",
        "rollout.n_tasks=2",
        "rollout.group_size=4",
        "trainer.steps=2",
        "trainer.eval_every=0",
        "trainer.progress=false",
        "trainer.save_initial=true",
        "model.tokenizer_episodes=4",
        f"trainer.out_dir={tmp_path}/run",
        f"hydra.run.dir={tmp_path}/hydra",
    ]
    if _has_entry_point():
        cmd = [sys.executable, "-m", "agentrl.run", *args]
    else:
        main = "import agentrl.interop.gem_env; from agentrl.run import main; main()"
        cmd = [sys.executable, "-c", main, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    rows = read_metrics(tmp_path / "run")
    assert [r["iteration"] for r in rows] == [1, 2]
    assert all(r["env/return"] < 0.5 for r in rows)  # the untrained model rarely guesses
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "run" / "checkpoints"
    trained = AutoModelForCausalLM.from_pretrained(ckpt / "iter-000002")
    initial = dict(AutoModelForCausalLM.from_pretrained(ckpt / "iter-000000").named_parameters())
    unchanged = [n for n, p in trained.named_parameters() if torch.equal(p, initial[n])]
    assert not unchanged
