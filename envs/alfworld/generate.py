"""Offline ALFWorld games: ALFRED-style PDDL problems built from the tables in the alfworld wheel.

Each game is a directory with the two files alfworld's stock loader (``AlfredTWEnv``) reads:

* ``traj_data.json``: ``task_type``, ``pddl_params`` (``object_target``, ``parent_target``,
  ``toggle_target``, ``mrecep_target``, ``object_sliced``), ``scene`` (floor plan),
  ``turk_annotations`` (one templated goal sentence, so alfworld's human-goal option still works)
  and a ``generator`` record that says the game is generated.
* ``game.tw-pddl``: JSON with ``pddl_domain`` (``alfworld/data/alfred.pddl``), ``grammar``
  (``alfworld/data/alfred.twl2`` with the goal sentence in place of ``UNKNOWN GOAL``, as
  ``alfworld.agents.utils.misc.add_task_to_grammar`` does), ``pddl_problem``, ``solvable`` and
  ``walkthrough``.

A problem puts the static receptacles of a real ALFRED floor plan (:mod:`.scenes`) in the room,
scatters 1-3 instances of each pickable object type of that room into receptacles that may hold
them (ALFRED's valid pairs), closes everything openable, and asks for one of the six ALFWorld task
types with the goal formula of ``alfworld/gen/goal_library.py`` (pick-two rooms hold 2-4
targets). textworld's PDDL engine then solves it with its Fast Downward planner, on the part of
the room a plan can use (:func:`relevant_part`; the planner is a blind search that whole rooms
make slow), and replays the plan on the whole game until it reports ``won``; the replayed
commands, in the stock loader's names ("take apple 1 from countertop 2"), become the
walkthrough. A draw whose plan fails is thrown away and drawn again from the same generator, so
the output depends on the seed only.

These are NOT the official ALFWorld splits: object coordinates are made up (the wheel has no
object poses), some receptacles (stove burners, coffee machines, ...) are invented where the
floor-plan table lacks them, goals are drawn here rather than taken from ALFRED's annotated
trajectories, and floor lamps stand on a table because the domain can only switch on a lamp that
is inside a receptacle. Results on these games must be reported as results on generated games.

Usage::

    python -m agentrl.envs.alfworld.generate --out DIR --n 60 --seed 0 \\
        [--task-types 1 2 ...] [--scenes 1 2 301 ...] [--workers 4]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import alfworld
import alfworld.gen.goal_library as goal_library
import numpy as np

from agentrl.envs.alfworld.scenes import (
    CAN_CONTAIN,
    CLEANABLE,
    COOLABLE,
    HEATABLE,
    LAMP_HOSTS,
    LAMPS,
    MOVABLE,
    OBJECT_TYPES,
    OPENABLE,
    RECEPTACLE_TYPES,
    Location,
    Receptacle,
    Scene,
    available_scenes,
    load_scene,
    location_name,
    make_id,
    mangle,
)

from .data import GENERATOR_VERSION, TASK_TYPES

MAX_TRIES = 20  # draws per game before giving up; a failed plan is rare, so hitting this is a bug

# The appliance a state-change task needs; the domain hard-codes these receptacle types.
_APPLIANCE: dict[str, str] = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
_NEEDS_PROPERTY: dict[str, frozenset[str]] = {
    "pick_clean_then_place_in_recep": CLEANABLE,
    "pick_heat_then_place_in_recep": HEATABLE,
    "pick_cool_then_place_in_recep": COOLABLE,
}
_DATA_DIR = Path(alfworld.__file__).parent / "data"
# Substrings that make alfworld's loader skip a trial directory.
_SKIPPED_BY_LOADER = ("movable", "Sliced")


@dataclass(frozen=True)
class TaskSpec:
    """What a game asks for: ALFRED class names, ``""`` where a slot does not apply."""

    task_type: str
    scene: int
    object_target: str
    parent_target: str = ""
    toggle_target: str = ""


@dataclass(frozen=True)
class Placed:
    """An object instance: ALFRED id, type, and the receptacle id it starts in."""

    id: str
    type: str
    receptacle: str


# --------------------------------------------------------------------------------------------
# Choosing a task


def _sources(scene: Scene, spec: TaskSpec) -> tuple[Receptacle, ...]:
    """Receptacles a target instance may start in: never where the goal already holds."""
    banned = {spec.parent_target, _APPLIANCE.get(spec.task_type, "")}
    return tuple(
        r
        for r in scene.receptacles
        if spec.object_target in CAN_CONTAIN[r.type] and r.type not in banned
    )


def task_specs(scene: Scene, task_type: str) -> list[TaskSpec]:
    """Every task of ``task_type`` that ``scene`` supports, sorted."""
    rtypes = scene.receptacle_types
    appliance = _APPLIANCE.get(task_type)
    if appliance and appliance not in rtypes:
        return []
    needs = _NEEDS_PROPERTY.get(task_type)
    objs = [o for o in scene.pickupable_types if needs is None or o in needs]
    specs: list[TaskSpec] = []
    for obj in objs:
        if task_type == "look_at_obj_in_light":
            candidates = [
                TaskSpec(task_type, scene.number, obj, toggle_target=lamp)
                for lamp in scene.lamp_types
            ]
        else:
            candidates = [
                TaskSpec(task_type, scene.number, obj, parent_target=r)
                for r in sorted(rtypes)
                if obj in CAN_CONTAIN[r] and r != appliance
            ]
        specs.extend(s for s in candidates if _sources(scene, s))
    return specs


@cache
def _eligible(task_type: str, scenes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(s for s in scenes if task_specs(load_scene(s), task_type))


def sample_spec(
    rng: np.random.Generator, task_type: str, scenes: Sequence[int] | None = None
) -> TaskSpec:
    """A uniform floor plan among those that support ``task_type``, then an object type, then a
    receptacle (or lamp) for it; drawing the object first keeps types with many possible
    receptacles from crowding out the rest."""
    pool = tuple(sorted({int(s) for s in scenes})) if scenes is not None else available_scenes()
    unknown = sorted(set(pool) - set(available_scenes()))
    if unknown:
        raise ValueError(f"no scene tables for floor plans {unknown} in the alfworld wheel")
    eligible = _eligible(task_type, pool)
    if not eligible:
        raise ValueError(
            f"no floor plan among {list(pool)} supports {task_type!r}; "
            "widen `scenes` (see scenes.available_scenes())"
        )
    scene = load_scene(eligible[rng.integers(len(eligible))])
    specs = task_specs(scene, task_type)
    objs = sorted({s.object_target for s in specs})
    obj = objs[rng.integers(len(objs))]
    mine = [s for s in specs if s.object_target == obj]
    return mine[rng.integers(len(mine))]


# --------------------------------------------------------------------------------------------
# Filling the room


def _new_id(rng: np.random.Generator, otype: str, rec: Receptacle, used: set[str]) -> str:
    """A made-up position near the receptacle's own, unique within the game."""
    x, y, z = rec.position
    while True:
        xyz = (
            x + float(rng.uniform(-0.3, 0.3)),
            y + float(rng.uniform(0.0, 0.3)),
            z + float(rng.uniform(-0.3, 0.3)),
        )
        oid = make_id(otype, xyz)
        if mangle(oid) not in used:
            used.add(mangle(oid))
            return oid


def place_objects(rng: np.random.Generator, scene: Scene, spec: TaskSpec) -> list[Placed]:
    """Instances of every pickable type of the room, plus the room's lamps, in receptacles.

    Target instances avoid receptacles where the goal would already hold (the parent type, the
    task's appliance); pick-two gets 2-4 of them so there are always two to move.
    """
    used = {mangle(r.id) for r in scene.receptacles}
    placed: list[Placed] = []
    for otype in scene.pickupable_types:
        if otype == spec.object_target:
            low = 2 if spec.task_type == "pick_two_obj_and_place" else 1
            count = int(rng.integers(low, low + 3))
            hosts = _sources(scene, spec)
        else:
            count = int(rng.integers(1, 4))
            hosts = tuple(r for r in scene.receptacles if otype in CAN_CONTAIN[r.type])
        for _ in range(count):
            rec = hosts[rng.integers(len(hosts))]
            placed.append(Placed(_new_id(rng, otype, rec, used), otype, rec.id))
    tables = tuple(r for r in scene.receptacles if r.type in LAMP_HOSTS)
    for lamp in scene.lamp_types:
        rec = tables[rng.integers(len(tables))]
        placed.append(Placed(_new_id(rng, lamp, rec, used), lamp, rec.id))
    return placed


def agent_start(rng: np.random.Generator, scene: Scene) -> Location:
    """A made-up standing pose away from every receptacle, so the game opens with ALFWorld's
    "You are in the middle of a room"."""
    taken = {r.location for r in scene.receptacles}
    xs = [loc[0] for loc in taken]
    zs = [loc[1] for loc in taken]
    while True:
        loc = (
            int(rng.integers(min(xs), max(xs) + 1)),
            int(rng.integers(min(zs), max(zs) + 1)),
            int(rng.integers(4)),
            30,
        )
        if loc not in taken:
            return loc


# --------------------------------------------------------------------------------------------
# Writing the PDDL problem and the goal sentence


def goal_pddl(spec: TaskSpec) -> str:
    """The goal library's formula for ``spec`` (it also closes the ``define``)."""
    text = goal_library.gdict[spec.task_type]["pddl"].format(
        obj=spec.object_target, recep=spec.parent_target, toggle=spec.toggle_target, mrecep=""
    )
    return text.replace("#", "-")  # the library writes PDDL types as ``?r # receptacle``


def task_description(rng: np.random.Generator, spec: TaskSpec) -> str:
    """One of the goal library's templates, filled the way alfworld does (lower-case classes).

    alfworld's own ``get_templated_task_desc`` draws the template from the global ``random``
    module; drawing it from ``rng`` keeps generation reproducible.
    """
    templates = goal_library.gdict[spec.task_type]["templates"]
    template = templates[rng.integers(len(templates))]
    return template.format(
        obj=spec.object_target.lower(),
        recep=spec.parent_target.lower(),
        toggle=spec.toggle_target.lower(),
        mrecep="",
    )


def problem_pddl(
    name: str,
    spec: TaskSpec,
    receptacles: Sequence[Receptacle],
    objects: Sequence[Placed],
    start: Location,
) -> str:
    """An ALFRED-style PDDL problem for alfworld's ``alfred`` domain.

    Every otype and rtype constant is declared, as in ALFRED's files: the domain's actions name
    some of them (``SinkBasinType``, ``MicrowaveType``, ``FridgeType``, ``KnifeType``).
    """
    rtypes_present = sorted({r.type for r in receptacles})
    otypes_present = sorted({o.type for o in objects})
    locations = sorted({r.location for r in receptacles} | {start})
    decl = (
        ["agent1 - agent"]
        + [f"{t}Type - otype" for t in OBJECT_TYPES]
        + [f"{t}Type - rtype" for t in RECEPTACLE_TYPES]
        + [f"{mangle(o.id)} - object" for o in objects]
        + [f"{mangle(r.id)} - receptacle" for r in receptacles]
        + [f"{mangle(location_name(loc))} - location" for loc in locations]
    )
    init = [f"(atLocation agent1 {mangle(location_name(start))})"]
    init += [f"(receptacleType {mangle(r.id)} {r.type}Type)" for r in receptacles]
    init += [f"(objectType {mangle(o.id)} {o.type}Type)" for o in objects]
    init += [
        f"(canContain {rt}Type {ot}Type)"
        for rt in rtypes_present
        for ot in otypes_present
        if ot in CAN_CONTAIN[rt]
    ]
    for o in objects:
        oid = mangle(o.id)
        if o.type in LAMPS:  # lamps stay put; they are only switched on
            init.append(f"(toggleable {oid})")
            continue
        init.append(f"(pickupable {oid})")
        if o.type in MOVABLE:
            init.append(f"(isReceptacleObject {oid})")
        init += [
            f"({prop} {oid})"
            for prop, members in (
                ("cleanable", CLEANABLE),
                ("heatable", HEATABLE),
                ("coolable", COOLABLE),
            )
            if o.type in members
        ]
    init += [f"(openable {mangle(r.id)})" for r in receptacles if r.type in OPENABLE]
    init += [f"(inReceptacle {mangle(o.id)} {mangle(o.receptacle)})" for o in objects]
    init += [
        f"(receptacleAtLocation {mangle(r.id)} {mangle(location_name(r.location))})"
        for r in receptacles
    ]
    pad = "\n        "
    return (
        f"(define (problem {name})\n"
        "    (:domain alfred)\n"
        f"    (:objects{pad}{pad.join(decl)}\n    )\n"
        f"    (:init{pad}{pad.join(init)}\n    )\n"
        f"{goal_pddl(spec)}"
    )


def relevant_part(
    scene: Scene, spec: TaskSpec, objects: Sequence[Placed]
) -> tuple[tuple[Receptacle, ...], tuple[Placed, ...]]:
    """The receptacles and objects an optimal plan can touch: target instances (and the lamp to
    switch on), the receptacles they start in, every receptacle of the goal's type and of the
    task's appliance.

    The engine's Fast Downward build has no heuristics, so its planner is a blind search whose
    cost grows with every location and object it may wander to: on whole rooms a pick-two plan
    took 0.4-25 s here (more in bigger rooms), on this part well under a second. Nothing else
    can shorten a plan (the domain's only interactions are with the target, the lamp, the goal
    receptacle and the appliance), so the plan is as short as one for the whole room; the replay
    on the whole game then checks it.
    """
    wanted = {spec.object_target, spec.toggle_target} - {""}
    objs = tuple(o for o in objects if o.type in wanted)
    keep_types = {spec.parent_target, _APPLIANCE.get(spec.task_type, "")} - {""}
    holders = {o.receptacle for o in objs}
    recs = tuple(r for r in scene.receptacles if r.type in keep_types or r.id in holders)
    return recs, objs


@cache
def _logic_files() -> tuple[str, str]:
    return (_DATA_DIR / "alfred.pddl").read_text(), (_DATA_DIR / "alfred.twl2").read_text()


# --------------------------------------------------------------------------------------------
# Solving and replaying


@contextlib.contextmanager
def _argv_kept() -> Iterator[None]:
    """Fast Downward's translator overwrites ``sys.argv`` on every load; put it back."""
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


@cache
def _planner() -> Any:
    """A bare textworld PDDL engine (entities named by their ids) to plan with."""
    import textworld
    from textworld.envs import PddlEnv

    with _argv_kept():
        return PddlEnv(textworld.EnvInfos(policy_commands=True))


@cache
def _player() -> Any:
    """agentrl's fast engine, which plays exactly like alfworld's stock loader (same names,
    same text; tests/test_alfworld_engine.py), to replay plans with."""
    from agentrl.envs.alfworld.engine import FastEngine

    return FastEngine()


def _plan(game_json: dict, problem: str) -> list[str]:
    """Fast Downward's plan for ``problem`` (in ``game_json``'s domain), as commands over raw
    PDDL ids (the bare engine names every entity by its id)."""
    planner = _planner()
    planner.load({**game_json, "pddl_problem": problem})
    # Plan from the state ``load`` built (``reset`` would translate the problem again).
    state = planner._pddl_state
    if state.check_goal():
        return []
    return list(state.replan(planner._entity_infos) or [])


def solve_and_replay(game_json: dict, plan_problem: str | None = None) -> list[str] | None:
    """A plan for the game, replayed on the game itself until it reports ``won``; the replayed
    commands (stock ALFWorld names: "take apple 1 from countertop 2"), or ``None`` when there is
    no plan, the goal holds from the start, or the replay does not win.

    ``plan_problem`` is a smaller problem to plan on (see :func:`relevant_part`); it must use the
    game's PDDL ids. By default the planner sees the whole game, which can be very slow.
    """
    player = _player()
    with _argv_kept():
        plan = _plan(game_json, plan_problem or game_json["pddl_problem"])
        if not plan:
            return None
        player.load_data(game_json)
        state = player.reset()
        if state.won:
            return None
        # The bare engine spells entities by id; the stock loader's names replace them.
        names = player.names
        done: list[str] = []
        for raw in plan:
            command = " ".join(names.get(tok, tok) for tok in raw.split())
            if command not in state.admissible_commands:
                return None
            state = player.step(command)
            done.append(command)
            if state.won:
                return done
    return None


def _trial_name(rng: np.random.Generator) -> str:
    """``trial_T<8>_<6>_<6>`` digits, the shape of ALFRED's trial folders (not a real date)."""
    d = "".join(str(int(v)) for v in rng.integers(0, 10, size=20))
    return f"trial_T{d[:8]}_{d[8:14]}_{d[14:]}"


def _draw_game(
    rng: np.random.Generator, task_type: str, scenes: Sequence[int] | None
) -> tuple[dict, dict, str]:
    """One candidate game: ``(traj_data, game_json, planning problem)``, not yet solved."""
    spec = sample_spec(rng, task_type, scenes)
    scene = load_scene(spec.scene)
    objects = place_objects(rng, scene, spec)
    start = agent_start(rng, scene)
    trial = _trial_name(rng)
    desc = task_description(rng, spec)
    domain, grammar = _logic_files()
    game_json = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", desc),
        "pddl_problem": problem_pddl(f"plan_{trial}", spec, scene.receptacles, objects, start),
        "solvable": False,
        "walkthrough": [],
    }
    plan_problem = problem_pddl(f"plan_{trial}", spec, *relevant_part(scene, spec, objects), start)
    traj_data = {
        "task_id": trial,
        "task_type": spec.task_type,
        "pddl_params": {
            "object_target": spec.object_target,
            "parent_target": spec.parent_target,
            "toggle_target": spec.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"floor_plan": f"FloorPlan{spec.scene}", "scene_num": spec.scene},
        "turk_annotations": {
            "anns": [
                {"assignment_id": "generated", "task_desc": desc, "high_descs": [], "votes": []}
            ]
        },
        "repeat_idx": 0,
        "generator": {
            "name": "agentrl.envs.alfworld.generate",
            "version": GENERATOR_VERSION,
            "note": "generated game, not an official ALFWorld split; coordinates are made up",
        },
    }
    return traj_data, game_json, plan_problem


def generate_game(
    rng: np.random.Generator, task_type: str | int, scenes: Sequence[int] | None = None
) -> tuple[dict, dict]:
    """``(traj_data, game_json)`` for one game of ``task_type`` (a name or a 1-6 number),
    on one of ``scenes`` (floor-plan numbers; all of them when ``None``), already solved.

    Draws until the planner's plan wins when replayed (at most :data:`MAX_TRIES` draws);
    all randomness comes from ``rng``.
    """
    name = TASK_TYPES.get(task_type, "") if isinstance(task_type, int) else task_type
    if name not in TASK_TYPES.values():
        raise ValueError(f"unknown task type {task_type!r}; expected one of {TASK_TYPES}")
    error: Exception | None = None
    for _ in range(MAX_TRIES):
        traj_data, game_json, plan_problem = _draw_game(rng, name, scenes)
        try:
            walkthrough = solve_and_replay(game_json, plan_problem)
        except Exception as exc:  # an engine error on one draw is a failed draw, not a crash
            error, walkthrough = exc, None
        if walkthrough:
            game_json["walkthrough"] = walkthrough
            game_json["solvable"] = True
            return traj_data, game_json
    raise RuntimeError(f"no solvable {name} game in {MAX_TRIES} draws") from error


def game_dir(out: str | Path, traj_data: dict) -> Path:
    """``out/<task_type>-<Object>-<Mrecep or None>-<Parent or lamp>-<scene>/<trial>``, the layout
    of the official json_2.1.1 tree (look-at tasks put the lamp in the parent slot, as ALFRED)."""
    p = traj_data["pddl_params"]
    parent = p["parent_target"] or p["toggle_target"] or "None"
    name = "-".join(
        [
            traj_data["task_type"],
            p["object_target"],
            p["mrecep_target"] or "None",
            parent,
            str(traj_data["scene"]["scene_num"]),
        ]
    )
    path = Path(out) / name / traj_data["task_id"]
    if any(s in str(path.relative_to(out)) for s in _SKIPPED_BY_LOADER):
        raise ValueError(f"{path}: alfworld's loader would skip it")
    return path


def write_game(out: str | Path, traj_data: dict, game_json: dict) -> Path:
    """Write one game under ``out``; returns the path of its ``game.tw-pddl``."""
    folder = game_dir(out, traj_data)
    folder.mkdir(parents=True, exist_ok=True)
    for fname, data in (("traj_data.json", traj_data), ("game.tw-pddl", game_json)):
        (folder / fname).write_text(json.dumps(data, sort_keys=True, indent=2) + "\n")
    return folder / "game.tw-pddl"


def _game_job(job: tuple[int, int, str, tuple[int, ...] | None]) -> tuple[dict, dict]:
    """Game ``index`` of a run: its own generator, so it does not depend on the other games."""
    seed, index, task_type, scenes = job
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index,)))
    return generate_game(rng, task_type, scenes)


def generate_games(
    out: str | Path,
    n: int,
    seed: int,
    task_types: Sequence[int] = (1, 2, 3, 4, 5, 6),
    scenes: Sequence[int] | None = None,
    progress: bool = True,
    workers: int = 1,
) -> list[Path]:
    """Write ``n`` solved games under ``out`` and return their ``game.tw-pddl`` paths, in order.

    Game ``i`` has task type ``task_types[i % len(task_types)]`` and its own generator
    ``SeedSequence(seed, spawn_key=(i,))``: game ``i`` is the same whatever ``n`` or ``workers``
    is. ``scenes`` restricts the floor plans (e.g. to hold some out as an unseen split).
    ``workers > 1`` solves games in that many processes; the files are the same.
    """
    from tqdm.auto import tqdm

    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    types = [int(t) for t in task_types]
    bad = [t for t in types if t not in TASK_TYPES]
    if not types or bad:
        raise ValueError(f"task_types must be a non-empty subset of {sorted(TASK_TYPES)}: {bad}")
    pool = None if scenes is None else tuple(int(s) for s in scenes)
    jobs = [(seed, i, TASK_TYPES[types[i % len(types)]], pool) for i in range(n)]
    paths: list[Path] = []
    with contextlib.ExitStack() as stack:
        if workers > 1 and n > 1:
            # spawn, not fork: each worker loads its own copy of Fast Downward's library.
            ctx = multiprocessing.get_context("spawn")
            executor = stack.enter_context(ProcessPoolExecutor(min(workers, n), mp_context=ctx))
            results = executor.map(_game_job, jobs)
        else:
            results = map(_game_job, jobs)
        bar = tqdm(results, total=n, desc="ALFWorld games", unit="game", disable=not progress)
        for i, (traj_data, game_json) in enumerate(bar):
            path = write_game(out, traj_data, game_json)
            if path in paths:  # trial ids are 20 random digits; a clash means a bug
                raise RuntimeError(f"trial folder collision at game {i}: {path.parent}")
            paths.append(path)
    return paths


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agentrl.envs.alfworld.generate",
        description="Write solvable ALFWorld-format games (generated, not the official splits).",
    )
    p.add_argument("--out", type=Path, help="folder to write game folders into")
    p.add_argument(
        "--cache",
        action="store_true",
        help="fill the cache that runs read (env.generated_games/generated_seed/task_types, "
        "the splits of --splits), instead of writing to --out",
    )
    p.add_argument(
        "--cache-dir",
        default="",
        help="with --cache: env.cache_dir (default $AGENTRL_CACHE/alfworld or "
        "~/.cache/agentrl/alfworld)",
    )
    p.add_argument(
        "--splits",
        nargs="+",
        default=["train", "valid_seen"],
        help="with --cache: the splits to generate (default: train valid_seen, what a run "
        "with the default env.eval_split plays)",
    )
    p.add_argument(
        "--n", type=int, default=None, help="number of games (per split with --cache: default 60)"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--task-types",
        type=int,
        nargs="+",
        default=sorted(TASK_TYPES),
        choices=sorted(TASK_TYPES),
        help="task types to cycle through (default all)",
    )
    p.add_argument(
        "--scenes",
        type=int,
        nargs="+",
        default=None,
        help="floor-plan numbers to use (default all in the wheel)",
    )
    p.add_argument("--workers", type=int, default=1, help="processes to solve games in (default 1)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    # Parsed before anything loads a game: Fast Downward rewrites sys.argv when it does.
    parser = _parser()
    args = parser.parse_args(argv)
    if args.cache:
        return _fill_cache(args)
    if args.out is None or args.n is None:
        parser.error("--out and --n are required (or --cache to fill the runs' cache)")
    paths = generate_games(
        args.out,
        args.n,
        args.seed,
        args.task_types,
        args.scenes,
        progress=not args.no_progress,
        workers=args.workers,
    )
    print(f"wrote {len(paths)} generated ALFWorld games under {args.out}")
    return 0


def _fill_cache(args: argparse.Namespace) -> int:
    """Generate the games a run would generate on first use, where it will look for them."""
    from .data import SPLITS, generated_games
    from .env import ALFWorldConfig

    n = ALFWorldConfig.generated_games if args.n is None else args.n
    for split in args.splits:
        if split not in SPLITS:
            raise SystemExit(f"--splits: {split!r} is not one of {list(SPLITS)}")
        games = generated_games(
            args.cache_dir, split, n, args.seed, args.task_types, progress=not args.no_progress
        )
        print(f"{split}: {len(games)} generated ALFWorld games cached")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
