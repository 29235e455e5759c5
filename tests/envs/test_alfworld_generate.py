"""Offline ALFWorld game generator: solvable games the stock alfworld loader accepts unchanged.

One module-scoped run writes one game of each of the six task types (seed 0) on three small
floor plans (the smallest kitchen, a bedroom with a desk lamp, a bathroom) to keep the file fast;
the other tests reuse it. Checks: every stored walkthrough replayed through textworld's engine on
the file wins (and not earlier); alfworld's ``AlfredTWEnv`` collects the folders and plays a
walkthrough to a win with ALFWorld's own text; the same seed gives byte-identical files through
the command line (with two worker processes), a different seed different games; the room
generator keeps its promises (targets never start where the goal already holds, pick-two has two
targets). Skipped when the ``alfworld`` extra is not installed.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

alfworld = pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from agentrl.envs.alfworld import generate as gen  # noqa: E402
from agentrl.envs.alfworld import scenes  # noqa: E402

# Small rooms that together support all six task types (kitchen 14: heat/cool/clean;
# bedroom 316: a desk lamp; bathroom 420: clean in a bathroom).
SCENES = (14, 316, 420)
FILES = ("traj_data.json", "game.tw-pddl")
DOMAIN = (Path(alfworld.__file__).parent / "data" / "alfred.pddl").read_text()
# The receptacle a state-change task uses; a target must not start in it.
APPLIANCE = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("alfworld_games")
    return out, gen.generate_games(out, 6, seed=0, scenes=SCENES, progress=False)


@pytest.fixture
def keep_argv(monkeypatch):
    """Fast Downward rewrites sys.argv whenever a game loads; give pytest its own back."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))


def _load(path: Path) -> tuple[dict, dict]:
    traj = json.loads((path.parent / "traj_data.json").read_text())
    return traj, json.loads(path.read_text())


@functools.cache
def _player():
    """textworld's PDDL engine wrapped the way the stock loader wraps it (ALFWorld names)."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs import PddlEnv

    return AlfredDemangler(PddlEnv(textworld.EnvInfos(won=True)), shuffle=False)


def _replay(path: Path) -> list[bool]:
    """``won`` at the start and after each walkthrough command, played on the file."""
    env = _player()
    env.load(str(path))
    state = env.reset()
    won = [state["won"]]
    for command in json.loads(path.read_text())["walkthrough"]:
        state, _, _ = env.step(command)
        assert state.feedback != "Nothing happens.", command
        won.append(state["won"])
    return won


def test_every_task_type_generates_and_its_walkthrough_wins(games, keep_argv):
    out, paths = games
    assert len(paths) == 6 and all(p.name == "game.tw-pddl" for p in paths)
    seen = []
    for path in paths:
        traj, game = _load(path)
        seen.append(traj["task_type"])
        assert game["solvable"] is True and game["walkthrough"]
        assert set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
        params = traj["pddl_params"]
        assert params["object_sliced"] is False and params["mrecep_target"] == ""
        assert traj["scene"]["scene_num"] in SCENES
        # Layout of the official tree: <type>-<Object>-None-<Parent or lamp>-<scene>/trial_T...
        parent = params["parent_target"] or params["toggle_target"]
        assert path.parent.parent.name == (
            f"{traj['task_type']}-{params['object_target']}-None-{parent}-"
            f"{traj['scene']['scene_num']}"
        )
        assert path.parent.name.startswith("trial_T") and path.parent.parent.parent == out
        assert not re.search("movable|Sliced", str(path.relative_to(out)))
        # The goal sentence replaces the grammar's placeholder, and is in the annotations too.
        desc = traj["turk_annotations"]["anns"][0]["task_desc"]
        assert "UNKNOWN GOAL" not in game["grammar"]
        assert f"Your task is to: {desc}." in game["grammar"]
        assert params["object_target"].lower() in desc
        # Commands use demangled names ("countertop 2"), never PDDL ids.
        assert all("_bar_" not in c and re.search(r"[a-z] \d+$", c) for c in game["walkthrough"])
        won = _replay(path)
        assert won[-1] is True and not any(won[:-1]), (path, won)
    assert sorted(seen) == sorted(gen.TASK_TYPES.values())


def test_problem_files_are_alfred_style(games):
    _, paths = games
    for path in paths:
        traj, game = _load(path)
        problem, obj = game["pddl_problem"], traj["pddl_params"]["object_target"]
        assert problem.startswith("(define (problem plan_trial_T") and "(:domain alfred)" in problem
        for pred in (
            "receptacleType",
            "objectType",
            "canContain",
            "pickupable",
            "inReceptacle",
            "receptacleAtLocation",
            "atLocation agent1",
        ):
            assert f"({pred} " in problem, pred
        # ALFRED-mangled ids: Type_bar_<x>_bar_<y>_bar_<z>, e.g. _bar__plus_01_dot_23.
        assert re.search(rf"\b{obj}_bar__(plus|minus)_\d\d_dot_\d\d_bar_", problem)
        assert "(:goal" in problem and "#" not in problem
        targets = len(re.findall(rf"\(objectType \S+ {obj}Type\)", problem))
        assert targets >= (2 if traj["task_type"] == "pick_two_obj_and_place" else 1)
        assert game["pddl_domain"] == DOMAIN


def test_stock_loader_collects_and_plays_the_games(games, keep_argv):
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    out, paths = games
    config = {
        "dataset": {"data_path": str(out), "num_train_games": -1, "num_eval_games": -1},
        "env": {
            "task_types": [1, 2, 3, 4, 5, 6],
            "expert_type": "handcoded",
            "domain_randomization": False,
            "goal_desc_human_anns_prob": 0,
        },
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": 50}},
    }
    tw = AlfredTWEnv(config, train_eval="train")
    assert sorted(tw.game_files) == sorted(str(p) for p in paths)
    env = tw.init_env(batch_size=1)
    try:
        obs, infos = env.reset()
        path = Path(infos["extra.gamefile"][0])
        traj, game = _load(path)
        desc = traj["turk_annotations"]["anns"][0]["task_desc"]
        assert obs[0].startswith("-= Welcome to TextWorld, ALFRED! =-")
        assert "You are in the middle of a room. Looking quickly around you, you see a " in obs[0]
        assert obs[0].rstrip().endswith(f"Your task is to: {desc}.")
        assert infos["extra.expert_plan"][0]  # the handcoded expert reads our traj_data
        for i, command in enumerate(game["walkthrough"]):
            assert command in infos["admissible_commands"][0]
            obs, _, dones, infos = env.step([command])
            if command.startswith("go to "):
                assert obs[0].startswith(f"You arrive at {command[6:]}.")
            assert dones[0] == (i == len(game["walkthrough"]) - 1)
        assert infos["won"][0] is True
    finally:
        env.close()


def test_same_seed_same_bytes_through_the_cli_and_another_seed_differs(games, tmp_path, keep_argv):
    _, paths = games
    cli_out = tmp_path / "cli"
    argv = ["--out", str(cli_out), "--n", "2", "--seed", "0", "--workers", "2", "--no-progress"]
    assert gen.main([*argv, "--scenes", *map(str, SCENES)]) == 0
    written = sorted(cli_out.glob("*/*/game.tw-pddl"))
    assert len(written) == 2
    # Game i depends only on (seed, i): the CLI's two games are the fixture's first two.
    for mine, theirs in zip(written, sorted(paths[:2])):
        assert mine.relative_to(cli_out) == theirs.relative_to(theirs.parents[2])
        for name in FILES:
            assert (mine.parent / name).read_bytes() == (theirs.parent / name).read_bytes()

    other = gen.generate_games(tmp_path / "seed1", 1, seed=1, scenes=SCENES, progress=False)
    _, game0 = _load(paths[0])
    _, game1 = _load(other[0])
    assert other[0].relative_to(tmp_path / "seed1") != paths[0].relative_to(paths[0].parents[2])
    assert game1["pddl_problem"] != game0["pddl_problem"]


def test_rooms_keep_targets_away_from_the_goal():
    rng = np.random.default_rng(7)
    for task_type in gen.TASK_TYPES.values():
        for _ in range(5):
            spec = gen.sample_spec(rng, task_type)
            scene = scenes.load_scene(spec.scene)
            placed = gen.place_objects(rng, scene, spec)
            kind = {r.id: r.type for r in scene.receptacles}
            targets = [p for p in placed if p.type == spec.object_target]
            banned = {spec.parent_target, APPLIANCE.get(task_type, "")} - {""}
            assert targets and not any(kind[p.receptacle] in banned for p in targets)
            assert all(
                p.type in scenes.CAN_CONTAIN[kind[p.receptacle]]
                for p in placed
                if p.type not in scenes.LAMPS
            )
            if task_type == "pick_two_obj_and_place":
                assert len(targets) >= 2
            if task_type == "look_at_obj_in_light":
                assert spec.toggle_target in {p.type for p in placed}
            assert len({scenes.mangle(p.id) for p in placed}) == len(placed)


def test_names_and_errors():
    assert scenes.mangle("Sink|-01.90|+00.97|00.00|SinkBasin") == (
        "Sink_bar__minus_01_dot_90_bar__plus_00_dot_97_bar_00_dot_00_bar_SinkBasin"
    )
    assert [scenes.format_coord(v) for v in (1.234, -0.5, 0.001)] == ["+01.23", "-00.50", "00.00"]
    assert scenes.location_name((0, -5, 2, 30)) == "loc|0|-5|2|30"
    with pytest.raises(ValueError, match="supports 'pick_heat_then_place_in_recep'"):
        gen.generate_game(np.random.default_rng(0), 4, scenes=[316])  # a bedroom: no microwave
    with pytest.raises(ValueError, match="no scene tables"):
        gen.generate_game(np.random.default_rng(0), 1, scenes=[9999])
    with pytest.raises(ValueError, match="unknown task type"):
        gen.generate_game(np.random.default_rng(0), 7)


def test_cache_mode_fills_the_folder_a_run_reads(tmp_path, keep_argv, monkeypatch, caplog):
    """`generate --cache` writes exactly what a run would generate on first use, where the run
    looks for it: the run then finds the games and generates nothing."""
    from agentrl.envs.alfworld import data

    argv = ["--cache", "--cache-dir", str(tmp_path), "--n", "1", "--task-types", "1"]
    assert gen.main([*argv, "--splits", "train", "--no-progress"]) == 0

    def fail(*args, **kwargs):
        raise AssertionError("the run generated games the cache already had")

    monkeypatch.setattr(gen, "generate_games", fail)
    games = data.generated_games(str(tmp_path), "train", 1, 0, (1,), progress=False)
    assert len(games) == 1 and Path(games[0]).is_file()


def test_the_generated_games_notice_is_said_once_per_run(tmp_path, caplog, monkeypatch):
    """Two pools of two workers each, as a run has (training, evaluation): one warning."""
    import logging

    from agentrl.rollout import env_pool

    monkeypatch.setattr(env_pool, "_ANNOUNCED", set())
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    kwargs = {"cache_dir": str(tmp_path), "generated_games": 1, "task_types": [1]}
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            env_pool.ProcessPool("alfworld", kwargs, 2, workers=2).close()
    said = [r for r in caplog.records if "GENERATED" in r.getMessage()]
    assert len(said) == 1
