"""``env=alfworld``: games from official-format data or generated games, rewards, info, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import ALFWORLD_TEST_CACHE, ENV_TEST_KWARGS, alfworld_games, make_env

pytest.importorskip("alfworld")

from agentrl.configuration import ConfigError
from agentrl.envs.alfworld.data import UNSEEN_SCENES, ALFWorldDataError


def _json(path) -> dict:
    return json.loads(Path(path).read_text())


@pytest.fixture(scope="module")
def games():
    return alfworld_games(6)


def test_walkthroughs_win_through_make(games):
    env = make_env("alfworld")
    for game in games:
        obs, info = env.reset(seed=0, options={"gamefile": game})
        traj = _json(Path(game).parent / "traj_data.json")
        assert info["task_type"] == traj["task_type"]
        assert info["gamefile"] == game
        assert info["task"].startswith("Your task is to: ") and info["task"] in obs
        total = 0.0
        for cmd in _json(game)["walkthrough"]:
            assert cmd in info["admissible_actions"]
            obs, reward, term, trunc, info = env.step(cmd)
            total += reward
            assert info["action_valid"] and info["executed_action"] == cmd
            assert not trunc
        assert term and info["won"] and total == 10.0, game


def test_actions_match_ignoring_case_spaces_and_final_period(games):
    env = make_env("alfworld")
    _, info = env.reset(seed=0, options={"gamefile": games[0]})
    cmd = _json(games[0])["walkthrough"][0]  # e.g. "go to cabinet 3"
    _, _, _, _, info = env.step("  " + cmd.upper().replace(" ", "   ") + ".")
    assert info["action_valid"] and info["executed_action"] == cmd


def test_invalid_action_says_nothing_happens_and_keeps_the_state(games):
    env = make_env("alfworld")
    _, info0 = env.reset(seed=0, options={"gamefile": games[0]})
    obs, reward, term, trunc, info = env.step("fly to the moon")
    assert obs == "Nothing happens." and reward == 0.0 and not term and not trunc
    assert info["action_valid"] is False and info["executed_action"] is None
    assert info["admissible_actions"] == info0["admissible_actions"]


def test_anchor_tells_apart_states_with_the_same_text(games):
    """ "inventory" at two places: the same text, different states, different anchors; an
    invalid action keeps the anchor (the state did not change)."""
    env = make_env("alfworld")
    env.reset(seed=0, options={"gamefile": games[0]})
    obs_a, _, _, _, a = env.step("inventory")
    env.step(_json(games[0])["walkthrough"][0])  # go somewhere
    obs_b, _, _, _, b = env.step("inventory")
    assert obs_a == obs_b == "You are not carrying anything."
    assert a["anchor"][0] == b["anchor"][0] and a["anchor"] != b["anchor"]
    _, _, _, _, c = env.step("xyzzy")
    assert c["anchor"] == b["anchor"]
    env.reset(seed=0, options={"gamefile": games[0]})
    _, _, _, _, d = env.step("inventory")
    assert d["anchor"] == a["anchor"]  # same state, same key


def test_seed_picks_the_game_and_eval_uses_its_own_split():
    env = make_env("alfworld")
    _, train = env.reset(seed=1)
    _, train_again = env.reset(seed=1)
    assert train["gamefile"] == train_again["gamefile"]
    assert train["generated"] is True
    _, ev = env.reset(seed=1, options={"split": "eval"})
    assert "/valid_seen/" in ev["gamefile"] and "/train/" in train["gamefile"]
    for seed in range(4):
        _, unseen = env.reset(seed=seed, options={"split": "valid_unseen"})
        scene = _json(Path(unseen["gamefile"]).parent / "traj_data.json")["scene"]["scene_num"]
        assert scene in UNSEEN_SCENES
    for seed in range(4):
        _, seen = env.reset(seed=seed, options={"split": "eval"})
        scene = _json(Path(seen["gamefile"]).parent / "traj_data.json")["scene"]["scene_num"]
        assert scene not in UNSEEN_SCENES


def _official_tree(root: Path, games: list[str]) -> Path:
    """An official-format ``json_2.1.1`` tree holding copies of generated games."""
    for split in ("train", "valid_seen", "valid_unseen"):
        for g in games:
            trial = Path(g).parent
            dest = root / "json_2.1.1" / split / trial.parent.name / trial.name
            shutil.copytree(trial, dest)
    return root


def test_official_data_loads_with_task_type_filter(tmp_path, games):
    root = _official_tree(tmp_path / "alfworld", games)
    env = make_env("alfworld", data_dir=str(root), task_types=(1,))
    seen = set()
    for seed in range(6):
        _, info = env.reset(seed=seed, options={"split": "eval"})
        assert info["generated"] is False
        assert str(root / "json_2.1.1" / "valid_seen") in info["gamefile"]
        seen.add(info["task_type"])
    assert seen == {"pick_and_place_simple"}


def test_official_data_from_the_environment_variable(tmp_path, games, monkeypatch):
    root = _official_tree(tmp_path / "data", games[:2])
    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    env = make_env("alfworld", cache_dir=str(tmp_path / "unused"))
    _, info = env.reset(seed=0)
    assert info["generated"] is False and str(root) in info["gamefile"]
    assert not (tmp_path / "unused").exists()  # nothing was generated


def test_missing_or_partial_data_gives_one_clear_error(tmp_path, games):
    with pytest.raises(ALFWorldDataError, match="alfworld-download") as err:
        make_env("alfworld", data_dir=str(tmp_path / "nowhere")).reset(seed=0)
    assert "json_2.1.1" in str(err.value)
    partial = tmp_path / "partial" / "json_2.1.1"
    for split in ("train", "valid_seen"):
        (partial / split).mkdir(parents=True)
    with pytest.raises(ALFWorldDataError, match="valid_unseen"):
        make_env("alfworld", data_dir=str(tmp_path / "partial")).reset(seed=0)
    (partial / "valid_unseen").mkdir()
    trial = partial / "train" / "task" / "trial_1"
    trial.mkdir(parents=True)
    shutil.copy(Path(games[0]).parent / "traj_data.json", trial)  # json without game.tw-pddl
    with pytest.raises(ALFWorldDataError, match="no playable game"):
        make_env("alfworld", data_dir=str(tmp_path / "partial")).reset(seed=0)


def test_bad_config_names_the_key():
    with pytest.raises(ConfigError, match=r"env\.task_types"):
        make_env("alfworld", task_types=(7,))
    with pytest.raises(ConfigError, match=r"env\.eval_split"):
        make_env("alfworld", eval_split="test")
    with pytest.raises(ConfigError, match="generated_gamez"):
        make_env("alfworld", generated_gamez=3)


def test_generated_cache_is_reused():
    """The contract-suite settings generate once; the cache lists the same files again."""
    make_env("alfworld").reset(seed=0)
    marker = list(Path(ALFWORLD_TEST_CACHE).glob("*/train/complete.json"))
    assert marker
    listed = json.loads(marker[0].read_text())["games"]
    assert all((marker[0].parent / p).exists() for p in listed)


def test_process_pool_plays_alfworld_like_the_inline_pool():
    from agentrl.rollout.env_pool import InlinePool, ProcessPool

    kwargs = ENV_TEST_KWARGS["alfworld"]
    seeds = [0, 0, 1]

    def play(pool):
        out = [pool.reset([(j, s, None) for j, s in enumerate(seeds)])]
        infos = [info for _, info in out[0]]
        for t in range(4):
            jobs = [(j, info["admissible_actions"][t % len(info["admissible_actions"])])
                    for j, info in enumerate(infos)]  # fmt: skip
            if t == 2:
                jobs[0] = (0, "dance")
            res = pool.step(jobs)
            infos = [r[4] for r in res]
            out.append(res)
        return out

    with ProcessPool("alfworld", kwargs, 3, workers=2) as pool:
        got = play(pool)
    want = play(InlinePool([make_env("alfworld") for _ in seeds]))
    assert got == want


def test_process_pool_prepares_games_once_before_its_workers_start(tmp_path):
    """Fresh cache: the pool generates train and eval games in this process, then the workers
    (daemons, which may not start generator processes) only read them."""
    from agentrl.rollout.env_pool import PoolConfig, ProcessPool
    from agentrl.rollout.pools import make_pool

    kwargs = {"generated_games": 1, "cache_dir": str(tmp_path), "progress": False}
    pool = make_pool("alfworld", kwargs, 2, PoolConfig(kind="process", workers=2))
    try:
        assert isinstance(pool, ProcessPool)
        made = sorted(p.parent.name for p in tmp_path.glob("*/*/complete.json"))
        assert made == ["train", "valid_seen"]
        out = pool.reset([(0, 3, None), (1, 4, {"split": "eval"})])
        assert "/train/" in out[0][1]["gamefile"] and "/valid_seen/" in out[1][1]["gamefile"]
    finally:
        pool.close()
