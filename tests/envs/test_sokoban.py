"""Sokoban: golden rewards on hand-made rooms, generator guarantees, solver, parsing, config.

Generated levels are checked with the BFS solver: every one must be solvable, not already
solved, and no longer to solve than the reverse play that made it. Walkthroughs replay the
solver's answer through ``agentrl.make``. Also covers the ``env-speed`` report writer and the
benchmark command line. Everything is seeded, so the file is deterministic.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from helpers import python_lines

import agentrl
from agentrl.bench.__main__ import main as bench_main
from agentrl.bench._report import update_markdown_section
from agentrl.configuration import ConfigError
from agentrl.envs.sokoban import Level, SokobanConfig, SokobanEnv, generate_level, parse_action
from agentrl.envs.sokoban.env import LEGEND
from agentrl.envs.sokoban.solver import optimal_length, solve

# Two boxes: one next to its target (a push lands it), one elsewhere, so one push is not a win.
TWO_BOXES = """
######
#PXO_#
#_XO_#
######
"""
# One push solves it.
ONE_PUSH = """
#####
#PXO#
#####
"""
# Box on target with floor beyond it: pushing right takes it off.
ON_TARGET = """
######
#P√__#
#_XO_#
######
"""
# Two boxes in a row: pushing the first into the second must fail.
BOX_ROW = """
######
#PXX_#
#_OO_#
######
"""


def _env(level_text: str, **kwargs) -> tuple[SokobanEnv, str, dict]:
    env = SokobanEnv(**{"max_steps": 50, **kwargs})
    obs, info = env.reset(seed=0, options={"level": level_text})
    return env, obs, info


# -- golden rewards ----------------------------------------------------------------------------
def test_push_onto_target_then_off_and_into_wall():
    env, _, info = _env(TWO_BOXES)
    assert info["boxes_on_target"] == 0 and not info["won"]
    _, r, term, trunc, info = env.step("right")  # box (1,2) -> target (1,3)
    assert r == pytest.approx(-0.1 + 1.0)
    assert (term, trunc) == (False, False)
    assert info["boxes_on_target"] == 1 and not info["won"]
    assert info["anchor"] == ((1, 2), ((1, 3), (2, 2)))
    _, r, term, _, info = env.step("right")  # box (1,3) -> (1,4): off target
    assert r == pytest.approx(-0.1 - 1.0)
    assert not term and info["boxes_on_target"] == 0
    anchor = info["anchor"]
    _, r, term, _, info = env.step("right")  # box (1,4) against the wall: nothing moves
    assert r == pytest.approx(-0.1)
    assert info["action_valid"] and info["executed_action"] == "right"
    assert info["anchor"] == anchor == ((1, 3), ((1, 4), (2, 2)))


def test_push_solves_gives_solved_reward_and_terminates():
    env, _, _ = _env(ONE_PUSH)
    _, r, term, trunc, info = env.step("right")
    assert r == pytest.approx(-0.1 + 1.0 + 10.0)
    assert term and not trunc
    assert info["won"] and info["boxes_on_target"] == 1


def test_push_off_target_costs_and_custom_rewards_apply():
    env, _, info = _env(ON_TARGET)
    assert info["boxes_on_target"] == 1
    _, r, _, _, info = env.step("right")
    assert r == pytest.approx(-0.1 - 1.0)
    assert info["boxes_on_target"] == 0
    env, _, _ = _env(ON_TARGET, step_reward=0.0, box_off_target_reward=-3.0)
    assert env.step("right")[1] == pytest.approx(-3.0)


def test_walls_and_box_against_box_block_without_moving():
    env, obs, info = _env(BOX_ROW)
    for action in ("up", "left", "right"):  # wall, wall, box pushed into a box
        obs2, r, term, _, info2 = env.step(action)
        assert r == pytest.approx(-0.1) and not term
        assert info2["action_valid"] and info2["executed_action"] == action
        assert info2["anchor"] == info["anchor"] and obs2 == obs
    _, _, _, _, info2 = env.step("down")  # plain move onto free floor
    assert info2["anchor"] == ((2, 1), ((1, 2), (1, 3)))


def test_invalid_action_counts_as_step_with_step_reward():
    env, obs, info = _env(ONE_PUSH)
    obs2, r, term, trunc, info2 = env.step("up or down")
    assert (obs2, r, term, trunc) == (obs, pytest.approx(-0.1), False, False)
    assert info2["action_valid"] is False and info2["executed_action"] is None
    assert info2["step"] == 1 and info2["anchor"] == info["anchor"]


def test_truncates_at_max_steps():
    env = SokobanEnv(max_steps=3)
    env.reset(seed=0, options={"level": TWO_BOXES})
    outs = [env.step("left") for _ in range(3)]
    assert [o[3] for o in outs] == [False, False, True]
    assert not any(o[2] for o in outs)


# -- observation -------------------------------------------------------------------------------
def test_observation_format_and_round_trip():
    env, obs, info = _env(TWO_BOXES)
    lines = obs.splitlines()
    assert lines[-1] == LEGEND
    assert lines[:-1] == ["# # # # # #", "# P X O _ #", "# _ X O _ #", "# # # # # #"]
    assert info["task"].startswith("Push every box (X) onto a target (O)")
    assert info["admissible_actions"] == ["up", "down", "left", "right"]
    env.step("right")
    env.step("right")  # the box leaves its target again
    obs2 = env.step("down")[0]  # the player steps onto the empty target (2,3)
    assert obs2.splitlines()[1:3] == ["# _ _ O X #", "# _ X S _ #"]
    compact = SokobanEnv(cell_separator="").reset(seed=0, options={"level": ON_TARGET})[0]
    assert compact.splitlines()[:3] == ["######", "#P√__#", "#_XO_#"]
    # The grid part of an observation parses back to the same position.
    env = SokobanEnv()
    obs, _ = env.reset(seed=4)
    assert Level.from_text("\n".join(obs.splitlines()[:-1])) == env.level


def test_anchor_is_plain_hashable_ints():
    env = SokobanEnv(dim_room=(7, 7), num_boxes=2)
    _, info = env.reset(seed=1)
    player, boxes = info["anchor"]
    hash(info["anchor"])
    assert all(type(x) is int for x in player)
    assert all(type(x) is int for b in boxes for x in b) and list(boxes) == sorted(boxes)


# -- parsing -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("up", "up"),
        ("UP", "up"),
        ("  left ", "left"),
        ("I move <action>down</action>", "down"),
        ("Right! right.", "right"),
        ("up or down", None),
        ("up-left", None),
        ("upward", None),
        ("", None),
        ("我向上 ↑", None),
        ("x" * 10_000 + " down", "down"),
    ],
)
def test_parse_action(text, expected):
    assert parse_action(text) == expected


def test_env_step_parses_tolerantly():
    for text, action in (
        ("UP", "up"),
        ("  left ", "left"),
        ("I move <action>down</action>", "down"),
    ):
        env, _, _ = _env(TWO_BOXES)
        info = env.step(text)[4]
        assert info["action_valid"] and info["executed_action"] == action
    env, _, _ = _env(TWO_BOXES)
    for bad in ("up or down", None, b"up", 3, "\udcff\x00", "q" * 10_000):
        _, r, term, _, info = env.step(bad)  # type: ignore[arg-type]
        assert not info["action_valid"] and info["executed_action"] is None
        assert r == pytest.approx(-0.1) and not term


# -- generator ---------------------------------------------------------------------------------
SIZES = [((6, 6), 1, 70), ((7, 7), 2, 70), ((5, 5), 1, 30), ((8, 8), 3, 30)]


@pytest.mark.parametrize(("dim_room", "num_boxes", "n"), SIZES)
def test_generated_levels_are_solvable_and_unsolved(dim_room, num_boxes, n):
    for seed in range(n):
        level = generate_level(np.random.default_rng(seed), dim_room, num_boxes, 30)
        assert level.shape == dim_room and level.num_boxes == num_boxes
        assert not level.solved
        assert level.player not in level.boxes
        path = solve(level)
        assert path is not None, f"seed {seed} unsolvable:\n{level.to_text()}"
        assert 1 <= len(path) <= level.solution_bound <= 30


def test_min_boxes_off_target_is_honoured():
    for seed in range(30):
        level = generate_level(np.random.default_rng(seed), (7, 7), 2, 30, min_off_target=2)
        assert not set(level.boxes) & set(level.targets)


def test_same_seed_same_level_and_seeds_vary():
    a = [generate_level(np.random.default_rng(s), (7, 7), 2) for s in range(40)]
    b = [generate_level(np.random.default_rng(s), (7, 7), 2) for s in range(40)]
    assert a == b
    assert [x.solution_bound for x in a] == [x.solution_bound for x in b]
    assert len(set(a)) >= 38
    env1, env2 = SokobanEnv(), SokobanEnv()
    assert env1.reset(seed=9) == env2.reset(seed=9)
    assert [env1.reset()[0] for _ in range(5)] == [env2.reset()[0] for _ in range(5)]
    assert len({SokobanEnv().reset(seed=s)[0] for s in range(40)}) >= 30


def test_generation_is_cheap(monkeypatch):
    """A level costs one room (retries are rare) and a few thousand lines of Python, and never
    a solver search: counted, not timed (``python -m agentrl.bench env-speed`` times it, about
    0.4 ms per 7x7 level)."""
    from agentrl.envs.sokoban import generator, solver

    rooms = 0
    carve = generator.carve_room

    def counted_carve(*args, **kwargs):
        nonlocal rooms
        rooms += 1
        return carve(*args, **kwargs)

    def no_search(*args, **kwargs):
        raise AssertionError("generation ran the solver")

    monkeypatch.setattr(generator, "carve_room", counted_carve)
    monkeypatch.setattr(solver, "solve", no_search)
    monkeypatch.setattr(solver, "optimal_length", no_search)
    rng = np.random.default_rng(0)
    levels, lines = python_lines(lambda: [generate_level(rng, (7, 7), 2) for _ in range(200)])
    assert len(set(levels)) >= 190
    # Measured: 226 rooms and about 4,900 lines per level for these 200 levels.
    assert rooms <= 1.25 * 200, rooms
    assert lines <= 10_000 * 200, lines / 200


def test_degenerate_rooms_raise_clearly():
    with pytest.raises(RuntimeError, match="no usable"):
        generate_level(np.random.default_rng(0), (5, 5), 2, 30, min_off_target=2, max_tries=3)


# -- solver ------------------------------------------------------------------------------------
def test_solver_optimal_lengths_and_unsolvable():
    assert solve(Level.from_text(ONE_PUSH)) == ["right"]
    assert optimal_length(Level.from_text(TWO_BOXES)) is not None
    # The player must first step under the box to push it up onto the target.
    around = Level.from_text("#####\n#_O_#\n#_X_#\n#P__#\n#####")
    assert solve(around) == ["right", "up"]
    assert optimal_length(around) == 2
    cornered = Level.from_text("#####\n#X__#\n#__O#\n#P__#\n#####")
    assert solve(cornered) is None
    assert solve(Level.from_text("#####\n#P√_#\n#####")) == []


def test_solver_from_mid_episode_state():
    env = SokobanEnv(dim_room=(7, 7), num_boxes=2, max_steps=100)
    env.reset(seed=7)
    total = solve(env.level)
    env.step(total[0])
    rest = solve(env.state_level())
    assert rest is not None and len(rest) == len(total) - 1


@pytest.mark.parametrize("seed", range(8))
def test_solver_walkthrough_wins_through_make(seed):
    env = agentrl.make("sokoban", dim_room=[7, 7], num_boxes=2, max_steps=100)
    _, info = env.reset(seed=seed)
    path = solve(env.unwrapped.level)
    assert path
    for t, action in enumerate(path, 1):
        _, reward, terminated, truncated, info = env.step(f"I move <action>{action}</action>")
        assert info["executed_action"] == action
        assert terminated == (t == len(path)) and not truncated
    assert terminated and info["won"] and reward >= 10.0


# -- registration and config -------------------------------------------------------------------
def test_gymnasium_make_and_make_with_yaml_lists():
    env = gymnasium.make("agentrl/Sokoban-v0")
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and info["anchor"]
    assert env.step("up")[4]["executed_action"] == "up"
    env = agentrl.make("sokoban", dim_room=[7, 7], num_boxes=2)
    assert env.unwrapped.config.dim_room == (7, 7)
    assert env.unwrapped.max_steps == 15
    cfg = SokobanConfig(num_boxes=2, dim_room=(7, 7))
    assert SokobanEnv(config=cfg, max_steps=9).config == SokobanConfig(
        num_boxes=2, dim_room=(7, 7), max_steps=9
    )


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"env\.num_boxs.*num_boxes"):
        agentrl.make("sokoban", num_boxs=2)
    with pytest.raises(ConfigError, match="dim_room"):
        agentrl.make("sokoban", dim_room=(2, 2))
    with pytest.raises(ConfigError, match="dim_room"):
        SokobanEnv(dim_room=[7])
    with pytest.raises(ConfigError, match="num_boxes"):
        SokobanConfig(num_boxes=0)
    with pytest.raises(ConfigError, match="num_boxes"):
        SokobanConfig(dim_room=(5, 5), num_boxes=3)
    with pytest.raises(ConfigError, match="min_boxes_off_target"):
        SokobanConfig(num_boxes=1, min_boxes_off_target=2)
    with pytest.raises(ConfigError, match="step_reward"):
        SokobanConfig(step_reward=float("nan"))


# -- benchmark plumbing ------------------------------------------------------------------------
def test_markdown_sections_are_replaced_and_kept(tmp_path):
    path = tmp_path / "env_speed.md"
    update_markdown_section(path, "Sokoban", "old numbers", "# Environment speed\n")
    update_markdown_section(path, "ALFWorld", "alf numbers", "# ignored\n")
    update_markdown_section(path, "Sokoban", "new numbers", "# ignored\n")
    text = path.read_text()
    assert text.startswith("# Environment speed\n")
    assert "new numbers" in text and "old numbers" not in text and "alf numbers" in text
    assert text.index("## Sokoban") < text.index("## ALFWorld")


def test_bench_cli_rejects_unknown_commands(capsys):
    assert bench_main(["no-such-bench"]) == 2
    assert "env-speed" in capsys.readouterr().err
