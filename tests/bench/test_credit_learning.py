"""The credit-learning benchmark: cheap policies, exact updates, the trainer's batches, pairing,
the memo, the report and ``--check``."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ENV_TEST_KWARGS, ScriptedBackend, alfworld_games

import agentrl
from agentrl.bench import credit_learning as cl
from agentrl.bench.cheap_policy import Choice, LinearPolicy, TabularPolicy, policy_gradient_step
from agentrl.bench.cheap_policy import text_grid as cl_text_grid
from agentrl.bench.credit_levels import (
    MemoLevel,
    SyntheticEnv,
    check_deterministic,
    optimal_success,
    policy_success,
)
from agentrl.credit.batch import StepBatch
from agentrl.credit.estimators import estimator_config
from agentrl.credit.stage import CreditStage
from agentrl.credit.synthetic import exact_values, random_mdp, state_chain
from agentrl.model import build_tokenizer
from agentrl.rollout import RolloutConfig, Sampling, collect

SOKOBAN = {"dim_room": (7, 7), "num_boxes": 2, "max_steps": 30}


# ------------------------------------------------------------------------- policies


def test_tabular_gradient_equals_the_hand_computed_one_on_two_states():
    policy = TabularPolicy()
    policy.logits("s", "", ("a", "b"))  # uniform: p = (1/2, 1/2)
    policy.logits("t", "", ("a", "b", "c"), prior=lambda: np.array([0.5, 0.25, 0.25]))
    choices = [
        Choice("s", "", ("a", "b"), 0, math.log(0.5)),
        Choice("t", "", ("a", "b", "c"), 2, math.log(0.25)),
        Choice("s", "", ("a", "b"), 1, math.log(0.5)),
    ]
    adv = np.array([1.0, -2.0, 0.5])
    before = {k: v.copy() for k, v in policy.table.items()}
    policy_gradient_step(policy, choices, adv, lr=0.3)
    # Ascent on (1/N) sum_i A_i log pi(a_i | s_i): d/d theta_s = (1/N) sum A_i (e_{a_i} - p_s).
    ps, pt = np.array([0.5, 0.5]), np.array([0.5, 0.25, 0.25])
    grad_s = (1.0 * (np.array([1, 0]) - ps) + 0.5 * (np.array([0, 1]) - ps)) / 3
    grad_t = -2.0 * (np.array([0, 0, 1]) - pt) / 3
    np.testing.assert_allclose(policy.table["s"], before["s"] + 0.3 * grad_s, atol=1e-12)
    np.testing.assert_allclose(policy.table["t"], before["t"] + 0.3 * grad_t, atol=1e-12)
    # The prior became the logits: log p.
    np.testing.assert_allclose(before["t"], np.log(pt))


def test_exact_policy_gradient_raises_the_success_probability_every_step():
    """REINFORCE with the exact advantage Q^π − V^π, in expectation (no sampling), on a
    synthetic MDP: with a small step the success probability never goes down."""
    mdp = random_mdp(np.random.default_rng(3), n_states=8, n_actions=3)
    S, A = mdp.n_states, mdp.n_actions
    policy = TabularPolicy()
    for s in range(S):
        policy.logits(s, "", mdp.action_names)
    successes = []
    for _ in range(25):
        pi = cl.policy_matrix(policy, mdp)
        current = replace(mdp, mu=pi)
        V, Q = exact_values(current, beta=1.0)
        successes.append(float(mdp.initial @ V))
        M, _ = state_chain(current)
        visits = np.linalg.solve(np.eye(S) - M.T, mdp.initial)  # expected visits per state
        # One decision per (s, a) whose advantage weight makes the mean surrogate's gradient
        # the exact policy gradient sum_s d(s) sum_a grad pi(a|s) Q(s, a).
        choices, weights = [], []
        for s in range(S):
            for a in range(A):
                choices.append(Choice(s, "", mdp.action_names, a, math.log(pi[s, a])))
                weights.append(visits[s] * pi[s, a] * (Q[s, a] - V[s]))
        policy_gradient_step(policy, choices, np.array(weights) * len(choices), lr=0.5)
    assert all(b > a for a, b in itertools.pairwise(successes)), successes
    assert successes[-1] > successes[0] + 0.05


def test_linear_policy_generalises_to_an_unseen_observation():
    # Text without a grid: tokens by position and the bag of words.
    policy = LinearPolicy(buckets=1 << 12)
    seen, unseen = "# _ P X O", "# _ P X O _"  # the same cells, one more at the end
    choice = Choice(None, seen, ("up", "down"), 0, math.log(0.5))
    policy_gradient_step(policy, [choice], np.array([1.0]), lr=1.0)
    for obs in (seen, unseen):
        logits = policy.logits(None, obs, ("up", "down"))
        assert logits[0] > logits[1]


def small(name: str, levels: int, tasks: int, group: int) -> cl.Setting:
    """Setting ``name`` cut down to 2 iterations, evaluated after each, on ``levels`` levels."""
    return replace(
        cl.SETTINGS[name],
        iterations=2,
        eval_every=1,
        levels=levels,
        tasks=tasks,
        group=group,
        eval_levels=levels,
    )


LEGEND = "Legend: # wall, _ floor, O target, X box, P you"
ROOM_A = "# # # # #\n# _ O _ #\n# _ X _ #\n# _ P _ #\n# # # # #\n" + LEGEND
ROOM_B = "# # # # # #\n# _ O _ _ #\n# _ X _ X #\n# _ P _ O #\n# # # # # #\n" + LEGEND


def test_text_grid_finds_the_room_and_not_the_legend():
    grid = cl_text_grid(ROOM_A)
    assert len(grid) == 5 and grid[3] == ["#", "_", "P", "_", "#"]
    assert cl_text_grid("search[red shoes]\nclick[x]") == []
    assert cl_text_grid("a b c\nd e f") == []  # two rows are not a grid


def test_grid_features_are_relative_to_the_one_of_a_kind_symbol():
    from agentrl.bench.cheap_policy import grid_features

    feats = grid_features(cl_text_grid(ROOM_A), radius=1)
    # P at (3, 2): its 8 neighbours, what a move meets in each direction, and the direction to
    # the nearest floor, target and box (walls, 16 of the 25 cells, fill more than a quarter
    # of the room; of the two nearest floor cells the first in reading order).
    assert [f for f in feats if f.startswith("P")] == [
        "P(-1,-1)=_", "P(-1,0)=X", "P(-1,1)=_",
        "P(0,-1)=_", "P(0,1)=_",
        "P(1,-1)=#", "P(1,0)=#", "P(1,1)=#",
        "P>n=XO", "P>s=#|", "P>w=_#", "P>e=_#",
        "P~_=(0,-1)", "P~O=(-1,0)", "P~X=(-1,0)",
    ]  # fmt: skip
    # O and X are one of a kind in this room too; # and _ are not.
    assert {f[0] for f in feats} == {"P", "O", "X"}
    assert "O>s=XP" in feats and "X~P=(1,0)" in feats and "O(-1,0)=#" in feats


def test_linear_policy_carries_a_neighbourhood_over_to_a_room_it_never_saw():
    # Room B is larger, has a second box and target: the player's neighbourhood and the
    # directions to the nearest box and target are room A's.
    actions = ("up", "down", "left", "right")
    policy = LinearPolicy(buckets=1 << 14)
    before = policy.logits(None, ROOM_B, actions)
    choice = Choice(None, ROOM_A, actions, 0, math.log(0.25))
    policy_gradient_step(policy, [choice], np.array([1.0]), lr=1.0)
    after = policy.logits(None, ROOM_B, actions)
    assert np.all(before == 0) and int(np.argmax(after)) == 0
    # More than the bias and the bag of words carried over: the grid features did.
    shared = set(policy.features(ROOM_A)) & set(policy.features(ROOM_B))
    assert len(shared) > 20


def test_linear_setting_trains_on_its_levels_and_evaluates_on_held_out_ones():
    setting = small("sokoban-7x7-linear", levels=4, tasks=2, group=3)
    world = cl.World(setting, seed=0)
    train = {lv.reset().obs for lv in world.train}
    held = {lv.reset().obs for lv in world.eval}
    assert len(held) == 4 and not train & held
    runs = [cl.train_run(world, m, "rms", setting.lr) for m in ("grpo", "crbc")]
    assert runs[0].initial == runs[1].initial and runs[0].tasks == runs[1].tasks
    assert all(len(r.curve.greedy) == 3 for r in runs)


def test_actions_of_turns_the_open_search_box_into_two_queries():
    info = {"admissible_actions": ["search[<your query>]", "click[x]"], "task": "red shoes size 9"}
    assert cl.actions_of(info) == (
        "search[red shoes size 9]",
        "search[red shoes size]",
        "click[x]",
    )


# ------------------------------------------------------------------------- levels


@pytest.mark.parametrize("restore", [None, cl.sokoban_restore], ids=["history", "state"])
def test_sokoban_memo_equals_the_environment(restore):
    rng = np.random.default_rng(0)
    moves = ["up", "down", "left", "right", "jump"]  # an invalid one too
    histories = [list(rng.choice(moves, size=34)) for _ in range(40)]
    histories.append(["up"] * 40)  # truncation at max_steps
    assert (
        check_deterministic(
            lambda: agentrl.make("sokoban", **SOKOBAN), 7, histories, restore=restore
        )
        == []
    )


def test_webshop_memo_equals_the_environment():
    env = agentrl.make("webshop")
    _, info = env.reset(seed=3)
    rng = np.random.default_rng(1)
    histories = []
    for _ in range(6):  # random admissible walks, replayed by both sides
        env.reset(seed=3)
        acts, info = [], env.reset(seed=3)[1]
        for _ in range(8):
            choices = cl.actions_of(info)
            a = choices[int(rng.integers(len(choices)))]
            acts.append(a)
            _, _, term, trunc, info = env.step(a)
            if term or trunc:
                break
        histories.append(acts)
    assert check_deterministic(lambda: agentrl.make("webshop"), 3, histories) == []


def _alfworld_histories(env, game: str, rng, n: int, length: int) -> list[list[str]]:
    """``n`` random walks on ``game``: most continue a prefix of an earlier one (so the memo
    branches where its environment is elsewhere), with an invalid action now and then; the
    game's walkthrough (a win) first."""
    walkthrough = json.loads(Path(game).read_text())["walkthrough"]
    histories = [list(walkthrough)]
    while len(histories) < n:
        acts = []
        if rng.random() < 0.8:
            prev = histories[int(rng.integers(len(histories)))]
            acts = list(prev[: int(rng.integers(len(prev) + 1))])
        _, info = env.reset(seed=0, options={"gamefile": game})
        done = False
        for a in acts:
            _, _, term, trunc, info = env.step(a)
            done = term or trunc
        while len(acts) < length and not done:
            choices = info["admissible_actions"]
            a = "jump" if rng.random() < 0.1 else choices[int(rng.integers(len(choices)))]
            acts.append(a)
            _, _, term, trunc, info = env.step(a)
            done = term or trunc
        histories.append(acts)
    return histories


def test_alfworld_memo_equals_the_environment():
    """The memo's environment resets to the initial state by its id in Fast Downward's state
    registry and a copy of the initial facts (no reload); every step result and demonstration
    equals a fresh environment's, on branching random walks (with invalid actions, wins and
    truncation at max_steps) over games of every task type."""
    pytest.importorskip("alfworld")
    kwargs = {**ENV_TEST_KWARGS["alfworld"], "max_steps": 20}
    env = agentrl.make("alfworld", **kwargs)
    rng = np.random.default_rng(0)
    for game in alfworld_games(6):
        histories = _alfworld_histories(env, game, rng, n=14, length=24)
        assert (
            check_deterministic(
                lambda: agentrl.make("alfworld", **kwargs),
                0,
                histories,
                options={"gamefile": game},
                demos=True,
            )
            == []
        ), game


def test_memo_steps_the_environment_once_per_new_history():
    level = MemoLevel(agentrl.make("sokoban", **SOKOBAN), 5)
    spot = level.reset()
    for _ in range(2):
        s = spot
        for a in ("up", "left", "up"):
            s, _ = level.step(s, a)
    assert level.misses == 3 and level.size == 3


def test_synthetic_env_success_matches_the_exact_probability():
    mdp = random_mdp(np.random.default_rng(0), n_states=6, n_actions=2)
    env = SyntheticEnv(mdp)
    rng = np.random.default_rng(0)
    wins = []
    for k in range(3000):
        obs, info = env.reset(seed=k)
        done = False
        while not done:
            s = int(obs.split()[1])
            a = mdp.action_names[int(rng.choice(2, p=mdp.mu[s]))]
            obs, _, term, trunc, info = env.step(a)
            done = term or trunc
        wins.append(info["won"])
    exact = policy_success(mdp, mdp.mu)
    assert abs(np.mean(wins) - exact) < 4 * math.sqrt(exact * (1 - exact) / len(wins))
    assert optimal_success(mdp) >= exact


# ------------------------------------------------------------------------- the trainer's path


class ScriptedPolicy:
    """Plays the scripted actions of each episode in turn (greedy: the scripted one wins)."""

    def __init__(self, scripts):
        self.moves = iter([a for script in scripts for a in script])

    def logits(self, key, observation, actions, prior=None):
        want = next(self.moves)
        return np.array([0.0 if a == want else -50.0 for a in actions])


def test_the_benchmarks_batches_are_the_trainers():
    """The same transcripts through the trainer's collect() and the benchmark's play(): the
    same StepBatch (rewards, anchors, actions, validity, ends) and the same advantages."""
    setting = replace(
        cl.SETTINGS["sokoban-7x7"],
        levels=1,
        env_kwargs=(("dim_room", (7, 7)), ("num_boxes", 2), ("max_steps", 6)),
    )
    world = cl.World(setting, seed=0)
    rng = np.random.default_rng(4)
    scripts = [list(rng.choice(["up", "down", "left", "right"], size=6)) for _ in range(3)]
    policy = ScriptedPolicy(scripts)
    bench = [cl.play(world, 0, world.train, policy, None)[0] for _ in scripts]
    assert all(len(t.steps) == 6 for t in bench)  # truncated at 6: lock-step turns below
    # collect(): the three episodes answer turn by turn (episode-major within a turn).
    answers = [scripts[e][t] for t in range(6) for e in range(3)]
    envs = [agentrl.make("sokoban", **dict(setting.env_kwargs)) for _ in range(3)]
    tok = build_tokenizer(["up down left right"] * 4, 300)
    cfg = RolloutConfig(n_tasks=1, group_size=3, history_length=0)
    seed = cl.TRAIN_BASE + 0
    trainer = collect(envs, [seed], ScriptedBackend(answers), tok, cfg, Sampling(max_new_tokens=2))
    group = cl.TrajectoryGroup(task=trainer[0].task, seed=seed, trajectories=bench)
    a, b = StepBatch.from_groups(trainer), StepBatch.from_groups([group])
    for field in ("step_reward", "step_anchor", "step_action", "step_valid", "step_traj"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert [t.won for t in trainer[0].trajectories] == [t.won for t in bench]
    for method in ("crbc", "gigpo", "grpo"):
        cfg_m = estimator_config(method)
        np.testing.assert_allclose(
            CreditStage(method, cfg_m).assign(trainer).advantages.step,
            CreditStage(method, cfg_m).assign([group]).advantages.step,
            atol=0,
            rtol=0,
            err_msg=method,
        )


def test_every_method_of_a_seed_sees_the_same_tasks_and_starting_policy():
    setting = small("sokoban-7x7", levels=6, tasks=3, group=4)
    world = cl.World(setting, seed=1)
    runs = [cl.train_run(world, m, "rms", setting.lr) for m in ("grpo", "crbc")]
    assert runs[0].tasks == runs[1].tasks == cl.task_draws(setting, 1)
    assert runs[0].initial == runs[1].initial
    # The first batch (same policy, same sampling stream) is the same: so is iteration 1's
    # environment-step count.
    assert runs[0].curve.steps[1] == runs[1].curve.steps[1]
    # Random transitions (synthetic MDPs) start their draws over at every run: a run repeats
    # exactly whatever ran on the same levels before it.
    syn = cl.World(
        replace(cl.SETTINGS["synthetic"], iterations=2, eval_every=1, tasks=2, group=3), seed=0
    )
    first = cl.train_run(syn, "grpo", "rms", 10.0)
    cl.train_run(syn, "crbc", "rms", 10.0)
    again = cl.train_run(syn, "grpo", "rms", 10.0)
    assert first.curve == again.curve
    other = cl.World(setting, seed=2)
    assert cl.task_draws(setting, 2) != cl.task_draws(setting, 1) or other.train != world.train


def test_alfworld_demonstration_of_a_state_does_not_depend_on_the_history_first_there():
    """ALFWorld's walkthrough holds only while every command so far followed it: reaching
    the walkthrough's first state by a detour gives no demonstration there. The memo's
    spots read the expert's path instead (``demo_by_state=False``), so a state's
    demonstration, and the warm-start prior derived from it, is the same whichever history
    (of whichever earlier run) reached it first; with per-state demonstrations shared by
    anchor the detour's None would stick."""
    pytest.importorskip("alfworld")
    kwargs = {**ENV_TEST_KWARGS["alfworld"], "max_steps": 20}
    game = alfworld_games(1)[0]

    def level(by_state: bool) -> MemoLevel:
        env = agentrl.make("alfworld", **kwargs)
        opts = {"gamefile": game}
        return MemoLevel(env, 0, opts, demos=True, demo_by_state=by_state)

    probe = level(False)
    plan = probe.reset().demo
    assert plan and plan[0].startswith("go to ")
    detour = next(
        a
        for a in probe.reset().info["admissible_actions"]
        if a.startswith("go to ") and a != plan[0]
    )

    def there(lv: MemoLevel, detour_first: bool):
        root = lv.reset()
        if detour_first:
            away, _ = lv.step(root, detour)
            back, _ = lv.step(away, plan[0])
        direct, _ = lv.step(root, plan[0])
        if detour_first:
            assert back.info["anchor"] == direct.info["anchor"]  # one state, two histories
        return direct.demo

    assert there(level(False), False) == there(level(False), True) == plan[1:]
    # What sharing each history's own demonstration by anchor does instead:
    assert there(level(True), False) == plan[1:]
    assert there(level(True), True) is None


# ------------------------------------------------------------------------- report and check

TINY = cl.Plan(
    (("sokoban-7x7", ("grpo", "crbc"), 3), ("synthetic", ("grpo", "crbc", "relace"), 3)),
    best_lr=("sokoban-7x7",),
    pilot_seeds=(1000,),
    iterations=2,
)


@pytest.fixture(scope="module")
def tiny_runs():
    torch.set_num_threads(1)
    return cl.execute(TINY, workers=1)


def test_report_has_every_section_and_the_runs_round_trip(tiny_runs, tmp_path):
    results, times = tiny_runs
    assert {r.protocol for r in results} == {"rms", "pilot", "best-lr"}
    assert {r.method for r in results if r.setting == "synthetic"} == {"grpo", "crbc", "relace"}
    path = cl.write_report(tmp_path, results, TINY, times, 1, quick=True, total=123.0)
    text = path.read_text()
    # The header's wall time is the whole command's when it was timed, not the phases' sum.
    assert "Wall time: 2.0 min for" in text
    assert "| the whole command, start to report | 2.0 min |" in text
    for heading in (
        "## sokoban-7x7",
        "## synthetic",
        "## sokoban-7x7, protocol best-lr",
        "## Accuracy and learning",
        "## Time",
    ):
        assert heading in text
    assert "relace *(oracle scorer)*" in text and "Pairing: every method drew the same" in text
    assert "$" not in text.replace("$head", "")  # no placeholder left
    assert (tmp_path / "credit_learning.png").stat().st_size > 10_000
    loaded = cl.load_runs(tmp_path / "credit_learning.json")
    assert [(r.method, r.seed, r.protocol, r.auc()) for r in loaded] == [
        (r.method, r.seed, r.protocol, r.auc()) for r in results
    ]


def test_check_passes_on_its_own_runs_and_fails_on_moved_ones(tiny_runs, tmp_path, monkeypatch):
    from agentrl.bench._check import evaluate

    results, _ = tiny_runs
    # The quick plan leaves out a committed method (relace): the verdicts are compared over the
    # quick plan's own family.
    quick = cl.Plan(
        (("sokoban-7x7", ("grpo", "crbc"), 3), ("synthetic", ("grpo", "crbc"), 3)), iterations=2
    )
    monkeypatch.setattr(cl, "quick_plan", lambda: quick)
    cl.save_runs(tmp_path / "credit_learning.json", results)
    figures = cl.check(tmp_path, log=lambda *_: None)
    assert figures and evaluate("t", figures, log=lambda *_: None) == 0
    moved = [
        replace(r, curve=replace(r.curve, greedy=[g + 0.5 for g in r.curve.greedy]))
        if r.method == "crbc" and r.setting == "sokoban-7x7"
        else r
        for r in results
    ]
    cl.save_runs(tmp_path / "credit_learning.json", moved)
    assert evaluate("t", cl.check(tmp_path, log=lambda *_: None), log=lambda *_: None) == 1


def test_methods_leave_out_drivers_and_critics_and_keep_scorers_for_synthetic():
    plain, scored = cl.methods(), cl.methods(scorer=True)
    assert {"ac2", "psppo", "gae"}.isdisjoint(scored)
    assert {"relace", "hcapo"} <= set(scored) and not {"relace", "hcapo"} & set(plain)
    assert {"grpo", "crbc", "gigpo"} <= set(plain)


def test_accuracy_reads_the_credit_reports_pearson_table():
    text = (
        "## Pearson r with the true advantage\n\n| estimator | G = 4 | G = 8 | G = 16 |\n"
        "|---|---:|---:|---:|\n| crbc | 0.54 ± 0.09 | 0.68 ± 0.07 | 0.77 ± 0.05 |\n"
        "| grpo (traj) | 0.20 ± 0.05 | 0.22 ± 0.06 | 0.23 ± 0.06 |\n"
    )
    assert cl.accuracy(text) == {"crbc": 0.68, "grpo": 0.22}
    rho, _ = cl.rank_correlation([0.68, 0.22, 0.3], [0.5, 0.1, 0.2])
    assert rho == pytest.approx(1.0)


def test_figure_gives_a_method_one_style_in_every_panel_and_a_full_legend(
    tiny_runs, tmp_path, monkeypatch
):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    results, _ = tiny_runs  # relace runs on the synthetic MDPs only
    drawn, legends = [], []
    plot, legend = Axes.plot, Axes.legend

    def record_plot(self, *args, **kwargs):
        drawn.append((self.get_title(), kwargs["label"], kwargs["color"], kwargs["marker"]))
        return plot(self, *args, **kwargs)

    def record_legend(self, *args, **kwargs):
        legends.append([h.get_label() for h in kwargs["handles"]])
        return legend(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", record_plot)
    monkeypatch.setattr(Axes, "legend", record_legend)
    cl.plot(tmp_path / "f.png", results, TINY)
    assert {label for _, label, _, _ in drawn} == {"grpo", "crbc", "relace"}
    looks = {label: {(c, m) for _, lab, c, m in drawn if lab == label} for _, label, _, _ in drawn}
    assert all(len(v) == 1 for v in looks.values()), looks
    assert len({next(iter(v)) for v in looks.values()}) == 3  # and told apart
    assert legends == [["crbc", "grpo", "relace"]]
