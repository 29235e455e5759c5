"""ALFRED floor plans as the alfworld wheel ships them, as receptacle lists for the generator.

The wheel holds two tables per floor plan under ``alfworld/gen/layouts``:
``FloorPlan<N>-objects.json`` (the object *types* present in the room) and
``FloorPlan<N>-openable.json`` (receptacle ids such as ``Cabinet|+00.68|+00.50|-02.20`` with the
pose ``[x, z, rotation, horizon]`` from which the agent interacts with them). It holds no object
poses. :func:`load_scene` keeps the real receptacle ids and interaction poses and adds the static
receptacles that ``objects.json`` lists but ``openable.json`` lacks (coffee machines, stove
burners, toasters, towel holders, ...) with made-up ids and poses drawn from a generator seeded by
the floor-plan number, so a floor plan always looks the same. Which object goes where is
compatibility data from ``alfworld/gen/constants.py`` (ALFRED's valid receptacle/object pairs and
heatable / coolable / cleanable / toggleable sets), exposed here as small tables.

Ids are written the ALFRED way and then mangled for PDDL by :func:`mangle`
(``|`` → ``_bar_``, ``+`` → ``_plus_``, ``-`` → ``_minus_``, ``.`` → ``_dot_``), which is what
alfworld's ``Demangler`` undoes to show "cabinet 3" or "sinkbasin 1".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import alfworld.gen
import alfworld.gen.constants as C
import numpy as np

LAYOUT_DIR = Path(alfworld.gen.__file__).parent / "layouts"

# The six PDDL-typed kinds of thing; receptacles that can be carried (bowl, mug, ...) are objects
# in ALFWorld's text games, as in ALFRED's problem files.
STATIC_RECEPTACLES: frozenset[str] = frozenset(C.RECEPTACLES) - C.MOVABLE_RECEPTACLES_SET
OBJECT_TYPES: tuple[str, ...] = tuple(sorted(C.OBJECTS_SET - STATIC_RECEPTACLES))
RECEPTACLE_TYPES: tuple[str, ...] = tuple(sorted(STATIC_RECEPTACLES))

# What each static receptacle type may hold (ALFRED's valid pairs; sliced variants dropped because
# generated games never slice).
CAN_CONTAIN: dict[str, frozenset[str]] = {
    r: frozenset(o for o in objs if o in OBJECT_TYPES)
    for r, objs in sorted(C.VAL_RECEPTACLE_OBJECTS.items())
    if r in STATIC_RECEPTACLES
}
CLEANABLE: frozenset[str] = frozenset(C.VAL_ACTION_OBJECTS["Cleanable"]) & set(OBJECT_TYPES)
HEATABLE: frozenset[str] = frozenset(C.VAL_ACTION_OBJECTS["Heatable"]) & set(OBJECT_TYPES)
COOLABLE: frozenset[str] = frozenset(C.VAL_ACTION_OBJECTS["Coolable"]) & set(OBJECT_TYPES)
LAMPS: tuple[str, ...] = tuple(sorted(C.VAL_ACTION_OBJECTS["Toggleable"]))  # DeskLamp, FloorLamp
MOVABLE: frozenset[str] = C.MOVABLE_RECEPTACLES_SET  # carried receptacles: bowl, mug, pan, ...
OPENABLE: frozenset[str] = frozenset(C.OPENABLE_CLASS_LIST) & STATIC_RECEPTACLES
# Anything some static receptacle may hold can be picked up (ALFRED has no other pickup list).
PICKUPABLE: frozenset[str] = frozenset().union(*CAN_CONTAIN.values())
# Lamps are not in ALFRED's receptacle table, but ToggleObject needs the lamp inside a receptacle
# the agent stands at; tables and dressers are where ALFRED's desk lamps stand.
LAMP_HOSTS: tuple[str, ...] = ("CoffeeTable", "Desk", "DiningTable", "Dresser", "SideTable")

# How many instances to invent for a static receptacle type missing from openable.json
# (kitchens have four burners; everything else one).
_SYNTH_COUNT: dict[str, int] = {"StoveBurner": 4}
# Receptacle ids that carry a suffix naming the basin (``Sink|x|y|z|SinkBasin``); the Demangler
# keys on "basin" to name them "sinkbasin" / "bathtubbasin".
_BASIN_PARENT: dict[str, str] = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}

_MANGLE = str.maketrans({"|": "_bar_", "+": "_plus_", "-": "_minus_", ".": "_dot_", ",": "_comma_"})

Location = tuple[int, int, int, int]  # (x, z) in 0.25 m grid steps, rotation / 90, camera horizon


@dataclass(frozen=True)
class Receptacle:
    """A static receptacle: ALFRED id (unmangled), type, and the pose the agent uses it from."""

    id: str
    type: str
    location: Location

    @property
    def position(self) -> tuple[float, float, float]:
        """The (x, y, z) written in the id, in metres."""
        x, y, z = self.id.split("|")[1:4]
        return float(x), float(y), float(z)


@dataclass(frozen=True)
class Scene:
    """One floor plan: its receptacles (sorted by id) and the object types the room contains."""

    number: int
    receptacles: tuple[Receptacle, ...]
    object_types: tuple[str, ...]

    @property
    def receptacle_types(self) -> frozenset[str]:
        return frozenset(r.type for r in self.receptacles)

    def receptacles_of(self, rtype: str) -> tuple[Receptacle, ...]:
        return tuple(r for r in self.receptacles if r.type == rtype)

    @property
    def pickupable_types(self) -> tuple[str, ...]:
        """Object types of this room that some receptacle of this room may hold."""
        types = self.receptacle_types
        return tuple(
            o
            for o in self.object_types
            if o in PICKUPABLE and any(o in CAN_CONTAIN[r] for r in types)
        )

    @property
    def lamp_types(self) -> tuple[str, ...]:
        """Lamp types of this room, when a table-like receptacle exists to stand them on."""
        if not self.receptacle_types & set(LAMP_HOSTS):
            return ()
        return tuple(t for t in LAMPS if t in self.object_types)


def mangle(alfred_id: str) -> str:
    """ALFRED id → PDDL name: ``Apple|+01.23|00.00|-01.20`` → ``Apple_bar__plus_01_dot_23_...``."""
    return alfred_id.translate(_MANGLE)


def format_coord(v: float) -> str:
    """A coordinate as ALFRED writes it: sign, two integer digits, two decimals; zero unsigned."""
    body = f"{abs(v):05.2f}"
    if body == "00.00":
        return body
    return ("+" if v > 0 else "-") + body


def make_id(otype: str, xyz: tuple[float, float, float], basin: str = "") -> str:
    """ALFRED-style id ``Type|x|y|z`` (``Sink|x|y|z|SinkBasin`` for basins)."""
    parts = [_BASIN_PARENT.get(basin, otype), *(format_coord(c) for c in xyz)]
    if basin:
        parts.append(basin)
    return "|".join(parts)


def location_name(loc: Location) -> str:
    """ALFRED's location id ``loc|x|z|rotation|horizon``."""
    return "loc|{}|{}|{}|{}".format(*loc)


def available_scenes() -> tuple[int, ...]:
    """Floor-plan numbers with both scene tables in the installed wheel."""
    nums = []
    for p in LAYOUT_DIR.glob("FloorPlan*-objects.json"):
        n = int(p.name.removeprefix("FloorPlan").removesuffix("-objects.json"))
        if (LAYOUT_DIR / f"FloorPlan{n}-openable.json").exists():
            nums.append(n)
    return tuple(sorted(nums))


def _receptacle_type(alfred_id: str) -> str:
    parts = alfred_id.split("|")
    return parts[4] if len(parts) > 4 else parts[0]


def _to_location(pose: list[float]) -> Location:
    x, z, rotation, horizon = pose
    return (round(x / 0.25), round(z / 0.25), round(rotation / 90) % 4, round(horizon))


def _synthesize(
    rng: np.random.Generator, rtype: str, taken: set[Location], box: tuple[int, int, int, int]
) -> Receptacle:
    """A made-up receptacle at a free grid pose inside the room's bounding box."""
    x0, x1, z0, z1 = box
    while True:
        x, z = int(rng.integers(x0, x1 + 1)), int(rng.integers(z0, z1 + 1))
        loc = (x, z, int(rng.integers(4)), 30)
        if loc not in taken:
            break
    taken.add(loc)
    xyz = (
        loc[0] * 0.25 + float(rng.uniform(-0.5, 0.5)),
        float(rng.uniform(0.0, 1.5)),
        loc[1] * 0.25 + float(rng.uniform(-0.5, 0.5)),
    )
    basin = rtype if rtype in _BASIN_PARENT else ""
    return Receptacle(make_id(rtype, xyz, basin), rtype, loc)


@cache
def load_scene(number: int) -> Scene:
    """Receptacles and object types of ``FloorPlan<number>`` (same result on every call)."""
    objects = json.loads((LAYOUT_DIR / f"FloorPlan{number}-objects.json").read_text())
    poses = json.loads((LAYOUT_DIR / f"FloorPlan{number}-openable.json").read_text())
    recs = [
        Receptacle(rid, _receptacle_type(rid), _to_location(pose))
        for rid, pose in sorted(poses.items())
        if _receptacle_type(rid) in STATIC_RECEPTACLES
    ]
    taken = {r.location for r in recs}
    xs = [loc[0] for loc in taken] or [0]
    zs = [loc[1] for loc in taken] or [0]
    box = (min(xs), max(xs), min(zs), max(zs))
    # Seeded by the floor plan alone, so the invented receptacles do not depend on the game seed.
    rng = np.random.default_rng(number)
    present = {r.type for r in recs}
    for rtype in sorted((set(objects) & STATIC_RECEPTACLES) - present):
        for _ in range(_SYNTH_COUNT.get(rtype, 1)):
            recs.append(_synthesize(rng, rtype, taken, box))
    if len({mangle(r.id) for r in recs}) != len(recs):  # pragma: no cover - made-up ids clashed
        raise RuntimeError(f"FloorPlan{number}: duplicate receptacle ids")
    return Scene(
        number=number,
        receptacles=tuple(sorted(recs, key=lambda r: r.id)),
        object_types=tuple(sorted(set(objects) - STATIC_RECEPTACLES)),
    )
