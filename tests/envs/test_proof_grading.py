"""Proof env, mechanical side: the safe formula parser, the derivation rubric, the generator.

Golden values are written by hand from the rubric in :mod:`agentrl.envs.proof.grading`; the
parser is checked to reject code and oversized input with a reason; every generated reference
solution must earn 7 points with exactly ``difficulty`` counted steps. Deterministic, CPU only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import sympy

from agentrl.envs.proof.derivations import Derivation, generate, generate_one, lin, poly
from agentrl.envs.proof.grading import (
    _clause_moves,
    _normalize,
    brackets,
    canonical_answer,
    coarsens,
    extract_answer,
    grade,
    grade_many,
    multiplied_out,
    ungradable_reason,
)
from agentrl.envs.proof.safe_math import MathSyntaxError, parse_expression, parse_written, tokenize
from agentrl.envs.proof.tasks import ProofTask

x, y = sympy.Symbol("x"), sympy.Symbol("y")


def _task(kind: str, difficulty: int, start: str, target: str) -> ProofTask:
    d = Derivation(kind, difficulty, "x", start, target, 0 if difficulty == 1 else 1)
    return ProofTask("t", f"problem {start}", "", "", "derivations", d)


IDENTITY = _task("identity", 2, "(x + 2)(x + 3)", "x^2 + 5x + 6")
LINEAR = _task("equation", 2, "3x + 5 = 20", "x = 5")
QUADRATIC = _task("equation", 2, "x^2 - 5x + 6 = 0", "x = 2 or x = 3")
EXPAND_1 = _task("simplify", 1, "(x + 1)(x - 4)", "x^2 - 3x - 4")


# -- safe parser ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2x^2 - 3(x + 1)", 2 * x**2 - 3 * x - 3),
        ("(x + 1)(x - 1)", (x + 1) * (x - 1)),
        ("x(x + 1)", x * (x + 1)),
        ("x y", x * y),
        ("-x^2", -(x**2)),
        ("2^3^2", sympy.Integer(512)),
        ("2**3", sympy.Integer(8)),
        ("1/2x", x / 2),
        ("2.5x", sympy.Rational(5, 2) * x),
        ("x^-1", 1 / x),
        ("sqrt(8)", 2 * sympy.sqrt(2)),
        ("(x^2 - 9)/(x - 3)", (x**2 - 9) / (x - 3)),
        ("  X + 1 ", x + 1),  # case-insensitive names
    ],
)
def test_parser_accepts_formulas(text, expected):
    assert parse_expression(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("__import__('os')", "unexpected character"),
        ("__import__(os)", "function call"),
        ("x.__class__", "unexpected character '.'"),
        ("lambda: 1", "unexpected character ':'"),
        ("2**10**10", "too large"),
        ("10^17", "too large"),
        ("(10^15)^16", "number too large"),
        ("9" * 16, "more than 15 digits"),
        ("sin(x)", "function call"),
        ("exp(1)", "function call"),
        ("print(x)", "function call"),
        ("f(x)", "function call"),
        ("xy", "unknown name 'xy'"),
        ("e", "unknown name"),
        ("x 2", "right after a factor"),
        ("3 4", "right after a factor"),
        ("1/(x - x)", "division by zero"),
        ("1/((x + 1)^2 - x^2 - 2x - 1)", "division by zero"),
        ("0^-1", "division by zero"),
        ("((x + 1)^16)^16", "degree too high"),
        ("x + y + z + a", "more than 3 different symbols"),
        ("2^0.5", "not a whole number"),
        ("x^y", "not a whole number"),
        ("(" * 45 + "x" + ")" * 45, "nested"),
        ("x + " * 120 + "x", "longer than 400"),
        ("[x]", "unexpected character '['"),
        ("'x'", "unexpected character"),
        ("x = 1", "'='"),
        ("", "empty"),
        ("(x + 1", "missing ')'"),
        ("x +", "ends too early"),
    ],
)
def test_parser_rejects_code_and_oversized_input(text, reason):
    with pytest.raises(MathSyntaxError, match=None) as err:
        parse_expression(text)
    assert reason in str(err.value)


def test_parser_rejects_non_text():
    with pytest.raises(MathSyntaxError):
        parse_expression(b"x")  # type: ignore[arg-type]


def test_no_module_evaluates_text():
    """No call to eval/exec/sympify/parse_expr/S anywhere in the package (docstrings may name
    them): model text only ever meets the hand-written tokenizer."""
    banned = {"eval", "exec", "compile", "__import__", "sympify", "parse_expr", "S"}
    root = Path(__file__).resolve().parents[2] / "envs" / "proof"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name):
                name = f.id
            elif isinstance(f, ast.Attribute) and not (
                isinstance(f.value, ast.Name) and f.value.id == "re"  # re.compile is fine
            ):
                name = f.attr
            else:
                continue
            assert name not in banned, f"{path.name}:{node.lineno} calls {name}"


def _form(text: str):
    return parse_written(tokenize(text)).form


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("x^2 + 5x + 6", "6 + 5*x + x**2", True),  # order, * and ** are notation
        ("(x + 2)(x + 3)", "((x+3))*(x+2) + 0", True),
        ("-(3x)", "(-3)x", True),  # where the sign sits
        ("x/2", "0.5x", True),
        ("1x^1", "x", True),
        ("x^2 + 3x + 2x + 6", "x^2 + 5x + 6", False),  # collecting like terms is arithmetic
        ("15/3", "5", False),
        ("2*3x", "6x", False),
        ("x(x + 3)", "x^2 + 3x", False),
    ],
)
def test_written_form_forgets_notation_only(a, b, same):
    assert sympy.expand(parse_expression(a) - parse_expression(b)) == 0
    assert (_form(a) == _form(b)) is same


@pytest.mark.parametrize(
    ("raw", "plain"),
    [
        ("$x^{2} + \\frac{1}{2}x$", "x^(2) + ((1)/(2))x"),
        ("\\left(x + 1\\right) \\cdot 3 \\times y", "(x + 1) * 3 * y"),
        ("\\sqrt{x + 1} + √2", "sqrt(x + 1) + sqrt(2)"),
        ("x\u00b2 \u2212 x\u00b3 \u2010 x\u207b\u00b9", "x^(2) - x^(3) - x^(-1)"),
        ("a \u2011 b \u2012 c \u2013 d \u00b7 e \u00d7 f", "a - b - c - d * e * f"),
        ("x \u2208 {2, 3}", "x = 2 or x = 3"),
        ("$x \\in \\{2,3\\}$", "x = 2 or x = 3"),
        ("The solutions are {2, -3}.", "the solutions are x = 2 or x = -3"),
        ("x_1 = 2, x_{2} = 3", "x = 2, x = 3"),
        ("\\boxed{x = \\dfrac{5 \\pm 1}{2}}", "x = ((5 \u00b1 1)/(2))"),
        ("3x = 15 \\implies x = 5", "3x = 15  \u21d2  x = 5"),
        ("1. **X = 5**.", "**x = 5**"),
    ],
)
def test_notation_becomes_plain_formula_text(raw, plain):
    assert " ".join(_normalize(raw, "equation", "x").split()) == " ".join(plain.split())


def test_latex_nested_beyond_the_parser_bound_is_dropped():
    assert _normalize("\\frac{" * 60 + "1" + "}{2}" * 60) == ""


def test_progress_measures_match_the_docstring():
    x = sympy.Symbol("x")

    def moves(eq: str) -> int:
        left, right = (parse_expression(side) for side in eq.split("="))
        return _clause_moves(left, right, x)

    linear = ["3x + 5 = 20", "3x = 15", "x + 5/3 = 20/3", "(x + 4)/3 = x - 2", "x + 4 = 3x - 6"]
    assert [moves(e) for e in linear] == [2, 1, 1, 4, 3]
    assert moves("x = 5") == 0 and moves("6x + 10 = 40") == moves("3x + 5 = 20")
    quadratic = ["x^2 - 5x = -6", "x^2 - 5x + 6 = 0", "(x - 2)(x - 3) = 0", "(x - 5/2)^2 = 1/4"]
    assert [moves(e) for e in quadratic] == [7, 6, 5, 5]
    assert moves("x - 2 = 0") + moves("x - 3 = 0") == 2
    assert [brackets(parse_expression(e)) for e in ["(x + 2)(x + 3)", "x(x + 3) + 2(x + 3)"]] == [
        2,
        1,
    ]
    assert brackets(parse_expression("(x + 1)^2 - (x - 3)^2")) == 4
    start = multiplied_out(_form("(x + 2)(x + 3)"))
    assert start == multiplied_out(_form("x(x + 3) + 2(x + 3)"))
    assert sum(map(len, start.values())) == 4
    assert coarsens(start, multiplied_out(_form("x^2 + 5x + 6")))
    assert not coarsens(start, multiplied_out(_form("x^2 + 4x + x + 6")))
    assert not coarsens(start, multiplied_out(_form("x^2 + 5x + 6 + x - x")))
    assert multiplied_out(_form("(x + 1)^7")) is None  # 128 terms: over MAX_MONOMIALS
    assert multiplied_out(_form("sqrt(x) + 1")) is None


# -- the rubric: golden values ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "points"),
    [
        ("(x + 2)(x + 3) = x(x + 3) + 2(x + 3) = x^2 + 5x + 6", 7),
        ("(x + 2)(x + 3)\n= x(x + 3) + 2(x + 3)\n= x^2 + 5x + 6", 7),
        ("x^2 + 5x + 6 = x(x + 3) + 2(x + 3) = (x + 2)(x + 3)", 7),  # right to left
        ("= x·(x + 3) + 2(x + 3)\n= x² + 5x + 6", 7),  # start implied, Unicode
        ("Step 1: (x+2)(x+3) = x(x+3) + 2(x+3)\nTherefore it equals x^2+5x+6.", 1),
        ("Step 1: (x+2)(x+3) = x(x+3) + 2(x+3)\nso (x+2)(x+3) = x^2 + 5x + 6.", 7),
        ("(x + 2)(x + 3) = x(x + 3) + 2(x + 3)", 1),  # stops early
        ("(x + 2)(x + 3) = x^2 + 5x + 6", 0),  # restates the claim: nothing shown
        ("(x + 2)(x + 3) = x(x + 3) + 2(x + 3) = x^2 + 6x + 6", 1),
        ("(x + 2)(x + 3) = x(x + 3) + 2(x + 3) = x^2 + 5x + 6 = 7x", 2),
        ("(x+2)(x+3) = x(x+3) + 2(x+3) = x^2 + 2x + 3x + 6 = x(x + 5) + 6 = x^2 + 5x + 6", 7),
        # x(x + 5) + 6 and x(x + 4) + x + 6 are written from the target, not from the start
        ("(x+2)(x+3) = x(x+3) + 2(x+3) = x(x + 5) + 6 = x(x + 4) + x + 6 = x^2 + 4x", 1),
        ("(x + 2)(x + 3) = 2(x + 2)(x + 3)/2 = x^2 + 5x + 6", 0),  # a 'same' step only
        ("(x + 2)(x + 3) = x^2 + 3x + 2x + 6 = x^2 + 5x + 6", 7),  # term by term
        ("(x + 2)(x + 3) = x^2 + 4x + x + 6 = x^2 + 5x + 6", 0),  # 5x split from the target
        ("(x + 2)(x + 3) = x^2 + 3x + 2x + 6", 1),  # like terms never collected
        ("(x + 2)(x + 3) = x^2 + 6x + 6", 0),
        ("I think this is true.", 0),
        ("look", 0),
        ("(x + 2)(x + 3) = x(x + 3) + 2(x + 3)\n= sin(x)\n= x^2 + 5x + 6", 7),  # skipped
    ],
)
def test_identity_rubric_golden(answer, points):
    assert grade(IDENTITY, answer).points == points


@pytest.mark.parametrize(
    ("task", "answer", "points"),
    [
        (LINEAR, "3x + 5 = 20\n3x = 15\nx = 5", 7),
        (LINEAR, "3x = 20 - 5\n   = 15\nx = 15/3 = 5", 7),
        (LINEAR, "Subtract 5 from both sides to get 3x = 15. Dividing by 3, x = 5.", 7),
        (LINEAR, "3x = 15\nx = 5\nCheck: 3*5 + 5 = 20", 7),  # numeric check skipped
        (LINEAR, "3x = 15, so x = 5", 7),
        (LINEAR, "x = 5", 1),  # answer without work
        (LINEAR, "3x = 15\nx = 6", 1),
        (LINEAR, "3x = 15\n0 = 0", 1),  # 0 = 0 is never a valid step
        (LINEAR, "3x = 25\nx = 25/3", 0),
        (QUADRATIC, "(x - 2)(x - 3) = 0\nx - 2 = 0 or x - 3 = 0\nx = 2 or x = 3", 7),
        (QUADRATIC, "(x-2)(x-3) = 0\nx = 3, x = 2", 7),
        (QUADRATIC, "x^2 = 5x - 6\n(x - 2)(x - 3) = 0\nThe solutions are x = 2 or x = 3.", 7),
        (QUADRATIC, "(x - 2)(x - 3) = 0\nx = 2", 1),  # drops a solution
        (QUADRATIC, "x^2 - 5x = -6\nx(x - 5) = -6\nx = -6 or x - 5 = -6", 0),  # no progress
        (QUADRATIC, "**Answer:** $x = 2$ or $x = 3$", 1),
        (EXPAND_1, "x^2 - 3x - 4", 7),  # difficulty 1: no intermediate needed
        (EXPAND_1, "= -4 - 3x + x^2", 7),  # matched after evaluation
        (EXPAND_1, "= x(x - 4) + (x - 4)", 1),  # not expanded: no target
    ],
)
def test_equation_and_simplify_rubric_golden(task, answer, points):
    assert grade(task, answer).points == points


def test_grade_details_say_what_happened():
    g = grade(IDENTITY, "(x + 2)(x + 3) = x(x + 3) + 2(x + 3)\n= x^2 + 6x + 6\n= 2(x + 3)")
    assert (g.points, g.valid, g.graded, g.method) == (1, True, True, "mechanical")
    d = g.details
    assert (d["steps"], d["intermediates"], d["reached_target"], d["complete"]) == (
        1,
        1,
        False,
        False,
    )
    assert d["first_error"].startswith("line 2: x^2 + 6x + 6 is not equal")
    assert [f["status"] for f in d["formulas"]] == ["same", "progress", "wrong", "unchecked"]
    assert g.reward == pytest.approx(1 / 7)
    info = g.to_info()
    assert info["points"] == 1 and info["first_error"] == d["first_error"]


# -- what is graded ---------------------------------------------------------------------------


def test_extract_answer_drops_reasoning_and_tags():
    assert extract_answer("<think>scratch = 4x</think>\n x = 5 ") == "x = 5"
    assert extract_answer("<think>never closed x = 5") == ""
    assert extract_answer("blah <action>one</action> <action> two </action>") == "two"
    assert extract_answer(None) == ""


@pytest.mark.parametrize(
    "garbage",
    ["", "  \n\t", "qz" * 5000, "↑↓←→ 上へ移動 🚀", "\x00\x01\x02", "<action></action>"],
)
def test_garbage_is_not_gradable(garbage):
    g = grade(IDENTITY, garbage)
    assert not g.valid and g.points is None and not g.graded and g.error
    assert g.reward == 0.0


def test_random_bytes_are_never_gradable():
    for seed in range(300):
        raw = np.random.default_rng(seed).integers(0, 256, size=300, dtype=np.uint8).tobytes()
        assert ungradable_reason(raw.decode("utf-8", errors="replace")) is not None


def test_length_limit_and_canonical_answer():
    assert grade(IDENTITY, "x = 1\n" * 10, max_answer_chars=20).valid is False
    assert canonical_answer("  LOOK \n\n  A   b\t") == "look\na b"


def test_grade_many_matches_grade():
    items = [(IDENTITY, "(x + 2)(x + 3) = x^2 + 5x + 6"), (LINEAR, "3x = 15\nx = 5"), (LINEAR, "")]
    assert [g.points for g in grade_many(items)] == [0, 7, None]


def test_adversarial_answers_finish_quickly():
    import time

    heavy = "\n".join(["= (x + 1)^16 - (x - 1)^16 + 2^16"] * 200 + ["x" * 399] * 50)
    t0 = time.perf_counter()
    g = grade(IDENTITY, heavy)
    assert g.valid and g.points == 0
    assert time.perf_counter() - t0 < 5.0


# -- the generator ----------------------------------------------------------------------------


def test_formatting_helpers():
    assert poly([1, -5, 6], "x") == "x^2 - 5x + 6"
    assert poly([-1, 0, 1], "t") == "-t^2 + 1"
    assert poly([2, 0, 0], "x") == "2x^2"
    assert poly([0, 0], "x") == "0"
    assert lin("y", -3) == "y - 3" and lin("y", 0) == "y"


def test_generator_is_deterministic_and_distinct():
    a = generate(60, seed=3, stream=0)
    assert a == generate(60, seed=3, stream=0)
    assert [g.problem for g in a] != [g.problem for g in generate(60, seed=4, stream=0)]
    assert len({g.problem for g in a}) == 60
    b = generate(40, seed=3, stream=1, avoid=[g.problem for g in a])
    assert not {g.problem for g in a} & {g.problem for g in b}


def test_generator_rejects_unknown_kinds():
    with pytest.raises(ValueError, match="no template"):
        generate_one(np.random.default_rng(0), "limits", 1)


@pytest.mark.parametrize("kind", ["identity", "equation", "simplify"])
@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_every_reference_solution_earns_7(kind, difficulty):
    for g in generate(12, seed=difficulty, stream=7, kinds=[kind], difficulties=[difficulty]):
        task = ProofTask("t", g.problem, "\n".join(g.reference), "", "derivations", g.derivation)
        result = grade(task, task.reference_solution)
        assert result.points == 7, (g.problem, task.reference_solution, result.details)
        # Difficulty is the number of counted steps of the reference solution.
        assert result.details["steps"] == difficulty, (g.problem, result.details)
        # Without the work, the bare target never earns full marks above difficulty 1; for an
        # identity it restates the problem and earns nothing.
        bare = grade(task, g.derivation.target).points
        assert bare == (7 if difficulty == 1 else 0 if kind == "identity" else 1), g.problem
