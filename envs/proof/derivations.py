"""Generated algebra problems whose solutions are checked mechanically (``source=derivations``).

Three kinds, each at difficulty 1-3 (the number of steps of the reference solution):

- ``identity``: "Show that (x + 2)(x + 3) = x^2 + 5x + 6." The answer is a chain of equal
  expressions from the left side to the right side.
- ``equation``: "Solve 3x + 5 = 20 for x." The answer is a chain of equivalent equations ending
  with ``x = 5`` (or ``x = a or x = b`` for a quadratic).
- ``simplify``: "Expand and simplify (x + 2)(x - 5)." Like an identity whose right side (the
  expanded polynomial) is not given.

Every reference step is a progress step for the grader (it brings the formula closer to the
target by the measure in :mod:`~agentrl.envs.proof.grading`: a bracket multiplied out, like terms
collected, a solving move made), so difficulty 3 means three counted steps. Other routes earn
full marks too; the reference is one correct derivation, not the expected wording.

Problems come from templates with small random integer coefficients; :func:`generate` is
deterministic for a seed (numpy's ``default_rng``) and never repeats a problem within a split or
across the splits it is told to avoid. This module does no
algebra itself (no sympy): the tests grade every reference solution and expect 7 points.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from .config import DIFFICULTIES, KINDS

VARIABLES: tuple[str, ...] = ("x", "y", "t", "z")


@dataclass(frozen=True)
class Derivation:
    """What the mechanical grader needs to know about a generated problem.

    ``start`` and ``target`` are written in the answer syntax (an expression, or an equation
    ``L = R``; a quadratic's target is ``x = a or x = b``).
    """

    kind: str
    difficulty: int
    variable: str
    start: str
    target: str
    min_intermediates: int
    """Distinct intermediate formulas a complete answer must show (0 at difficulty 1)."""


@dataclass(frozen=True)
class Generated:
    """One generated problem: statement, reference solution lines and grading data."""

    problem: str
    reference: tuple[str, ...]
    derivation: Derivation


# -- formatting in the answer syntax -----------------------------------------------------------


def poly(coeffs: Iterable[int], v: str) -> str:
    """A polynomial from its coefficients, highest degree first (``[1, -5, 6]``: x^2 - 5x + 6)."""
    coeffs = list(coeffs)
    deg = len(coeffs) - 1
    parts: list[str] = []
    for i, c in enumerate(coeffs):
        if c == 0:
            continue
        k = deg - i
        mono = "" if k == 0 else v if k == 1 else f"{v}^{k}"
        mag = abs(c)
        body = f"{mag}" if not mono else (mono if mag == 1 else f"{mag}{mono}")
        if not parts:
            parts.append(f"-{body}" if c < 0 else body)
        else:
            parts.append(f"- {body}" if c < 0 else f"+ {body}")
    return " ".join(parts) if parts else "0"


def lin(v: str, c: int) -> str:
    """``v + c`` without ``+ -``: ``lin("x", -3)`` -> ``x - 3``."""
    return poly([1, c], v)


def scaled(k: int, inner: str) -> str:
    """``k(inner)`` with ``k`` = 1 / -1 written as ``(inner)`` / ``-(inner)``."""
    return f"({inner})" if k == 1 else f"-({inner})" if k == -1 else f"{k}({inner})"


def _mul(p: list[int], q: list[int]) -> list[int]:
    """Product of two coefficient lists (highest degree first)."""
    out = [0] * (len(p) + len(q) - 1)
    for i, a in enumerate(p):
        for j, b in enumerate(q):
            out[i + j] += a * b
    return out


def _sub(p: list[int], q: list[int]) -> list[int]:
    n = max(len(p), len(q))
    p = [0] * (n - len(p)) + p
    q = [0] * (n - len(q)) + q
    out = [a - b for a, b in zip(p, q)]
    while len(out) > 1 and out[0] == 0:
        out.pop(0)
    return out


# -- random draws --------------------------------------------------------------------------------


def _nz(rng: np.random.Generator, lo: int, hi: int) -> int:
    """A nonzero integer in [lo, hi]."""
    while True:
        k = int(rng.integers(lo, hi + 1))
        if k:
            return k


def _distinct(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[int]:
    """``n`` distinct nonzero integers in [lo, hi]."""
    out: list[int] = []
    while len(out) < n:
        k = _nz(rng, lo, hi)
        if k not in out:
            out.append(k)
    return out


# -- templates: (rng, variable) -> (start, reference chain after start, target) -------------------
# Expression templates return expressions; the kinds decide how the problem is stated.

Chain = tuple[str, list[str], str]


def _product_1(rng: np.random.Generator, v: str) -> Chain:
    p, q = _nz(rng, -9, 9), _nz(rng, -9, 9)
    t = poly(_mul([1, p], [1, q]), v)
    return f"({lin(v, p)})({lin(v, q)})", [t], t


def _monomial_1(rng: np.random.Generator, v: str) -> Chain:
    k, p = _nz(rng, -6, 6), _nz(rng, -9, 9)
    k_text = "" if k == 1 else "-" if k == -1 else str(k)
    t = poly([k, k * p, 0], v)
    return f"{k_text}{v}({lin(v, p)})", [t], t


def _cancel_1(rng: np.random.Generator, v: str) -> Chain:
    p = _nz(rng, -9, 9)
    t = lin(v, p)
    return f"({poly([1, 0, -p * p], v)})/({lin(v, -p)})", [t], t


def _product_2(rng: np.random.Generator, v: str) -> Chain:
    p, q = _nz(rng, -9, 9), _nz(rng, -9, 9)
    mid = f"{v}({lin(v, q)}) {'+' if p > 0 else '-'} {scaled(abs(p), lin(v, q))}"
    t = poly(_mul([1, p], [1, q]), v)
    return f"({lin(v, p)})({lin(v, q)})", [mid, t], t


def _squares_2(rng: np.random.Generator, v: str) -> Chain:
    p, q = _distinct(rng, 2, 1, 9)
    first = poly([1, 2 * p, p * p], v)
    t = poly(_sub(_mul([1, p], [1, p]), _mul([1, -q], [1, -q])), v)
    return f"({lin(v, p)})^2 - ({lin(v, -q)})^2", [f"{first} - ({lin(v, -q)})^2", t], t


def _factor_2(rng: np.random.Generator, v: str) -> Chain:
    p, q = _nz(rng, -9, 9), _nz(rng, -9, 9)
    start = poly(_mul([1, p], [1, q]), v)
    mid = f"{v}({lin(v, p)}) {'+' if q > 0 else '-'} {scaled(abs(q), lin(v, p))}"
    t = f"({lin(v, p)})({lin(v, q)})"
    return start, [mid, t], t


def _cubic_3(rng: np.random.Generator, v: str) -> Chain:
    p, q, r = _nz(rng, -5, 5), _nz(rng, -5, 5), _nz(rng, -5, 5)
    quad = poly(_mul([1, p], [1, q]), v)
    mid1 = f"({quad})({lin(v, r)})"
    mid2 = f"{v}({quad}) {'+' if r > 0 else '-'} {scaled(abs(r), quad)}"
    t = poly(_mul(_mul([1, p], [1, q]), [1, r]), v)
    return f"({lin(v, p)})({lin(v, q)})({lin(v, r)})", [mid1, mid2, t], t


def _quartic_3(rng: np.random.Generator, v: str) -> Chain:
    p = int(rng.integers(1, 6))
    sq = p * p
    mid1 = f"({poly([1, 0, -sq], v)})({poly([1, 0, sq], v)})"
    mid2 = f"{v}^2({poly([1, 0, sq], v)}) - {scaled(sq, poly([1, 0, sq], v))}"
    t = poly([1, 0, 0, 0, -sq * sq], v)
    return f"({lin(v, p)})({lin(v, -p)})({poly([1, 0, sq], v)})", [mid1, mid2, t], t


# Expanding templates only: their target is the expanded polynomial, which ``simplify`` needs.
_EXPAND: dict[int, tuple[Callable[[np.random.Generator, str], Chain], ...]] = {
    1: (_product_1, _monomial_1),
    2: (_product_2, _squares_2),
    3: (_cubic_3, _quartic_3),
}
_IDENTITY: dict[int, tuple[Callable[[np.random.Generator, str], Chain], ...]] = {
    1: (*_EXPAND[1], _cancel_1),
    2: (*_EXPAND[2], _factor_2),
    3: _EXPAND[3],
}


# -- equations: (rng, variable) -> (start equation, reference chain, target) ----------------------


def _eq_shift_1(rng: np.random.Generator, v: str) -> Chain:
    p, sol = _nz(rng, -20, 20), int(rng.integers(-9, 10))
    return f"{lin(v, p)} = {sol + p}", [f"{v} = {sol}"], f"{v} = {sol}"


def _eq_scale_1(rng: np.random.Generator, v: str) -> Chain:
    a, sol = int(rng.integers(2, 10)), _nz(rng, -9, 9)
    return f"{a}{v} = {a * sol}", [f"{v} = {sol}"], f"{v} = {sol}"


def _eq_linear_2(rng: np.random.Generator, v: str) -> Chain:
    a, b, sol = int(rng.integers(2, 10)), _nz(rng, -20, 20), int(rng.integers(-9, 10))
    steps = [f"{a}{v} = {a * sol}", f"{v} = {sol}"]
    return f"{poly([a, b], v)} = {a * sol + b}", steps, f"{v} = {sol}"


def _roots(rng: np.random.Generator, v: str) -> tuple[int, int, list[int], str, str]:
    r1, r2 = sorted(_distinct(rng, 2, -9, 9))
    coeffs = _mul([1, -r1], [1, -r2])
    factored = f"({lin(v, -r1)})({lin(v, -r2)}) = 0"
    return r1, r2, coeffs, factored, f"{v} = {r1} or {v} = {r2}"


def _eq_quadratic_2(rng: np.random.Generator, v: str) -> Chain:
    _, _, coeffs, factored, target = _roots(rng, v)
    return f"{poly(coeffs, v)} = 0", [factored, target], target


def _eq_fraction_3(rng: np.random.Generator, v: str) -> Chain:
    # (x + p)/k = x - q  ->  x + p = k(x - q)  ->  (1 - k)x = -kq - p  ->  x = sol
    k, q, sol = int(rng.integers(2, 7)), _nz(rng, -9, 9), int(rng.integers(-9, 10))
    p = sol * (k - 1) - k * q
    if p == 0:
        p, q = p + k, q - 1  # keeps sol = (kq + p)/(k - 1) and avoids a bare "x/k"
    steps = [
        f"{lin(v, p)} = {scaled(k, lin(v, -q))}",
        f"{poly([1 - k, 0], v)} = {-k * q - p}",
        f"{v} = {sol}",
    ]
    return f"({lin(v, p)})/{k} = {lin(v, -q)}", steps, f"{v} = {sol}"


def _eq_quadratic_3(rng: np.random.Generator, v: str) -> Chain:
    _, _, coeffs, factored, target = _roots(rng, v)
    a, b, c = coeffs
    start = f"{poly([a, b, 0], v)} = {-c}"
    return start, [f"{poly(coeffs, v)} = 0", factored, target], target


_EQUATION: dict[int, tuple[Callable[[np.random.Generator, str], Chain], ...]] = {
    1: (_eq_shift_1, _eq_scale_1),
    2: (_eq_linear_2, _eq_quadratic_2),
    3: (_eq_fraction_3, _eq_quadratic_3),
}


def generate_one(rng: np.random.Generator, kind: str, difficulty: int) -> Generated:
    """One problem of ``kind`` (see :data:`~agentrl.envs.proof.config.KINDS`) and
    ``difficulty`` (1-3) drawn with ``rng``."""
    if kind not in KINDS or difficulty not in DIFFICULTIES:
        raise ValueError(f"no template for kind={kind!r}, difficulty={difficulty!r}")
    table = {"identity": _IDENTITY, "simplify": _EXPAND, "equation": _EQUATION}[kind]
    templates = table[difficulty]
    make = templates[int(rng.integers(len(templates)))]
    v = VARIABLES[int(rng.integers(len(VARIABLES)))]
    start, steps, target = make(rng, v)
    if kind == "identity":
        problem = f"Show that {start} = {target}."
    elif kind == "simplify":
        problem = f"Expand and simplify {start}."
    else:
        problem = f"Solve {start} for {v}."
    # Equations are written one per line; expression chains continue with "= ...".
    reference = (start, *steps) if kind == "equation" else (start, *(f"= {s}" for s in steps))
    derivation = Derivation(
        kind=kind,
        difficulty=difficulty,
        variable=v,
        start=start,
        target=target,
        min_intermediates=0 if difficulty == 1 else 1,
    )
    return Generated(problem, reference, derivation)


def generate(
    n: int,
    seed: int,
    stream: int,
    kinds: Iterable[str] = KINDS,
    difficulties: Iterable[int] = DIFFICULTIES,
    avoid: Iterable[str] = (),
) -> list[Generated]:
    """``n`` distinct problems, deterministic for ``(seed, stream)``.

    Args:
        n: how many problems.
        seed: the generator seed (``env.seed``).
        stream: a separate random stream per split (train 0, eval 1).
        kinds: kinds to draw from, uniformly.
        difficulties: difficulties to draw from, uniformly.
        avoid: problem statements that must not be generated (e.g. the train split's, when
            making the eval split).

    Raises:
        ValueError: if the templates cannot give ``n`` new distinct problems.
    """
    kinds, difficulties = tuple(kinds), tuple(difficulties)
    rng = np.random.default_rng([seed, stream])
    seen = set(avoid)
    out: list[Generated] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(
                f"could not generate {n} distinct problems of kinds {kinds} and difficulties "
                f"{difficulties} (got {len(out)}); ask for fewer"
            )
        kind = kinds[int(rng.integers(len(kinds)))]
        difficulty = difficulties[int(rng.integers(len(difficulties)))]
        g = generate_one(rng, kind, difficulty)
        if g.problem in seen:
            continue
        seen.add(g.problem)
        out.append(g)
    return out
