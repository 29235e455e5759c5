"""Grading an answer: 0-7 points, by the mechanical rubric (derivations) or the judge (files).

**What is graded.** :func:`extract_answer` keeps the text after the last ``</think>`` (nothing,
if reasoning was opened and never closed) and, when ``<action>...</action>`` tags are present,
the content of the last pair. The answer is *gradable* when it is non-empty, at most
``max_answer_chars`` long (30,000 by default: a 100k-character answer is not graded) and its
*legible* lines hold at least half of its non-space characters. A legible line is made of
printable ASCII (plus common math symbols such as ‐ − × ≤ √ π ² ∈), holds a letter or digit, and
has no run of more than 400 characters without a space. Anything else (empty text, control
characters, random bytes, mojibake, one endless word, text mostly in other scripts) is not an
answer: :func:`grade` returns ``valid=False`` and no points, and the environment reports an
invalid action. Prose without a single formula is gradable: it earns 0, and so does anything
addressed to the grader ("SCORE: 7", "award full marks"): words are never read as claims.

**Reading a derivation.** The answer is split into lines (a LaTeX ``\\\\`` also ends a line;
``\\begin{...}``, ``\\end{...}`` and ``&`` are dropped). Each line is read on its own:

1. Notation becomes plain ASCII. Unicode: minus signs and dashes (U+2010-U+2015, U+2212,
   fullwidth and small hyphen-minus) are ``-``; ``× · ⋅ ∙ ✕`` are ``*``; ``÷ ∕ ⁄`` are ``/``;
   superscripts are powers (``x²``, ``x⁻¹``); subscript indices are dropped (``x₁``, ``x_1``,
   ``x_{2}``); other compatibility characters are folded (NFKC: fullwidth digits, ``½``).
   LaTeX: ``\\frac{a}{b}`` (``\\dfrac``, ``\\tfrac``) is ``((a)/(b))``; ``\\sqrt{a}`` and ``√a``
   are ``sqrt(a)``; ``\\cdot``, ``\\times`` are ``*``; ``\\pm`` is ``±``; ``\\left``,
   ``\\right``, spacing commands, ``$``, ``\\( \\)``, ``\\[ \\]`` and backticks are dropped;
   ``\\text{...}`` and ``\\boxed{...}`` keep their content; other braces and square
   brackets are parentheses (``x^{2}``, ``[x + 1]^2``); arrows (``⇒``, ``\\implies``,
   ``=>``) separate formulas like words. Then everything is lowercased (``X`` is ``x``), and
   a leading list marker (``1.``, ``2)``, ``(3)``, ``-``, ``*``, ``•``) and trailing ``. , ; !
   ?`` are dropped. Lines longer than 2,000 characters, or 400 after this, are skipped.
2. Words (names that are not symbols or ``sqrt``) and characters no formula uses (``:``,
   ``.`` after a number, ...) split the line into segments: "Subtract 5 to get 3x = 15, so x
   = 5" gives ``3x = 15`` and ``x = 5``. On a line with words only segments holding ``=``
   count; a line without words may also be a bare formula.
3. ``A = B = C`` gives the formulas A, B, C; a segment starting with ``=`` continues from the
   formula before it. Parts separated by ``,`` ``;`` or ``and`` are read in order.
   In equation tasks each ``=`` after the first rewrites the right side (``x = 15/3 = 5`` is
   ``x = 15/3`` then ``x = 5``), ``= B`` keeps the previous left side, and ``or`` joins
   clauses into one equation (``x - 2 = 0 or x - 3 = 0``; so do ``,`` and ``and`` when every
   clause is ``variable = number``: ``x = 2, x = 3``; a bare number continues such a list:
   ``x = 2 or 3``). A set is a list of solutions: ``x ∈ {2, 3}``, ``x \\in \\{2, 3\\}`` and a
   bare ``{2, 3}`` are ``x = 2 or x = 3``. A clause with one ``±`` is two clauses (``x = (5 ±
   1)/2``).
4. Formulas are parsed by :mod:`.safe_math` (no ``eval``: a hand-written parser with bounds on
   size, nesting, exponents and digits) into a *value*, which sympy evaluates as it is built,
   and a *written form*, the formula as written up to notation: the order of terms and
   factors, parentheses, ``+ 0``, ``* 1`` and where a minus sign sits do not count, arithmetic
   does (:data:`~agentrl.envs.proof.safe_math.Form`). A segment that does not parse is
   *unreadable*: it is reported in the details and skipped (it neither earns nor breaks
   anything). A segment without a variable that does not start with ``=`` is a numeric check
   ("3*5 + 5 = 20"): skipped. At most 60 formulas are read.
5. *Asides* are reported and skipped like unreadable segments. In an identity or a
   simplification: a line ``A = B ...`` whose sides equal each other but not the expression
   being transformed (``x = x``, a side computation ``x(x + 3) = x^2 + 3x``, ``(a + b)^2 = a^2 +
   2ab + b^2``). In an equation task: an equation that holds for every value (``x = x``,
   ``2x = x + x``; ``0 = 0`` is a numeric check).

**The chain** is the task's start S (the given expression or equation) followed by the formulas
read. A step from formula a to formula b is *wrong* when b is not equal to a as a rational
function (identities, simplifications: ``cancel(a - b) != 0``) or, for equations, not
equivalent to it: the products of (left - right) over their clauses must differ by a nonzero
constant factor (moving terms, scaling both sides by a nonzero number, factoring and splitting
a product into ``or`` clauses are valid; dividing by ``x`` or dropping a solution is not). The
*valid prefix* is the chain before the first wrong step. An identity proved from right to left
(the first formula read is the target) is read reversed.

**The target** T is the right side of an identity, the expanded polynomial of a ``simplify``
task, or the solution ``x = v`` / ``x = a or x = b`` of an equation. A formula *is the target*
when it states T in final form:

- identities, simplifications: its value has T's shape after sympy's evaluation and moving
  numbers out of brackets, and multiplied out it has exactly T's terms (like terms collected,
  nothing left to cancel), with no bracket left to multiply out when T is expanded: ``6 + 5x +
  x^2`` is ``x^2 + 5x + 6``; ``x^2 + 3x + 2x + 6`` is not (yet), and ``8(x - 1)`` is not ``8x
  - 8``;
- equations: its value is T's and each clause is ``variable = number``, the number written as an
  integer, a decimal or a fraction in lowest terms: ``5 = x`` is the answer ``x = 5``, ``x =
  15/3`` is one step before it.

**Progress.** Every formula has a *distance* to the target, and a valid formula that is not the
target is a *progress step* when its distance is below that of S and of every formula before it
(the target itself has the smallest distance). A step that goes back, sideways or nowhere
(restating, reordering, padding, scaling an equation) is valid but earns nothing.

- Identities and simplifications: the distance is (B, N), compared by B first: B counts the
  brackets left to multiply out in the evaluated formula (``(x + 2)(x + 3)``: 2, ``x(x + 3) +
  2(x + 3)``, which sympy reads as ``x(x + 3) + 2x + 6``: 1, ``(x + 1)^2``: 2), N the number of
  terms once every bracket is multiplied out *without* collecting like terms (``(x + 2)(x +
  3)``, ``x(x + 3) + 2(x + 3)`` and ``x^2 + 3x + 2x + 6``: 4; ``x^2 + 5x + 6``: 3). A formula
  counts only if it is S partly multiplied out, not the target rewritten: its multiset of
  monomials (``x^2 + 3x + 2x + 6``: x², 3x, 2x, 6) must be one that S's monomials give by
  adding some of them up, and each bracket it keeps must be (a number times) a product of S's
  brackets. So the term-by-term expansion ``x^2 + 3x + 2x + 6``, both squares expanded ``(x^2 +
  2x + 1) - (x^2 - 6x + 9)`` and ``(x^2 - 25)(x + 2)`` from ``(x + 5)(x - 5)(x + 2)`` count;
  ``x^2 + 4x + x + 6`` and ``x^2 + 5x + 6 + x - x`` (terms S does not give) and ``x(x + 5) +
  6`` (a bracket S does not have), which anyone can write from the target an identity prints,
  do not. When the target is the factored side
  (``Show that x^2 + 5x + 6 = (x + 2)(x + 3)``) the same measure runs from the target's side:
  ``x^2 + 2x + 3x + 6`` and ``x(x + 2) + 3(x + 2)`` are progress towards the factors.
- Equations: the distance is the number of solving moves left, read from the evaluated
  equation and summed over its clauses, then 1 if the formula is not the target. A linear
  clause costs (terms on both sides - 2) + 1 unless the variable stands alone with coefficient
  1 + 1 if a coefficient of the variable is a fraction (``3x + 5 = 20``: 2, ``3x = 15``: 1,
  ``x + 5/3 = 20/3``: 1, ``(x + 4)/3 = x - 2``: 4, ``x + 4 = 3x - 6``: 3, ``x = 5``: 0). A
  clause of degree d >= 2 costs 2d + 1, plus 0 for a product of linear factors equal to 0 or a
  power of a binomial equal to a number, 1 for a polynomial equal to 0, 2 otherwise
  (``x^2 - 5x = -6``: 7, ``x^2 - 5x + 6 = 0``: 6, ``(x - 2)(x - 3) = 0``: 5, ``x - 2 = 0 or x
  - 3 = 0``: 2). Scaling both sides, swapping them, or adding the same number to both without
  simplifying changes nothing; ``x = 15/3`` and ``x = (5 + 1)/2 or x = (5 - 1)/2`` are one
  step before the answer.

**The rubric.** With P the number of progress steps in the valid prefix:

- **7 points**: no wrong step, the chain reaches the target, and P >= ``min_intermediates``
  (0 at difficulty 1, else 1);
- **otherwise** ``min(P, 3) + R`` points, R = 1 if the valid prefix reaches the target; for an
  identity, whose target is printed in the problem, only when P >= 1. At most 4 points without
  a complete chain.

So the bare final answer earns 7 at difficulty 1 (the one step is the answer); above that it
earns 1 for an equation or a simplification (the answer is new information) and 0 for an
identity (restating the claim). Lines after the target are checked (a wrong one still breaks
the chain) but cannot earn anything.

Known limit: a route that never multiplies out S's brackets, such as the difference of squares
``(x + 1)^2 - (x - 3)^2 = ((x + 1) - (x - 3))((x + 1) + (x - 3)) = 4(2x - 2) = 8x - 8``, shows
no progress step by this measure (its lines are valid, so nothing is wrong) and earns what the
bare answer earns; writing the squares out is the route this rubric credits.

Golden examples, for "Show that (x + 2)(x + 3) = x^2 + 5x + 6" at difficulty 2 and "Solve 3x +
5 = 20 for x" at difficulty 2 (``tests/test_proof_grading_corpus.py`` holds many more):

====================================================================  ======
answer                                                                points
====================================================================  ======
``(x + 2)(x + 3) = x(x + 3) + 2(x + 3) = x^2 + 5x + 6``              7
``(x + 2)(x + 3) = x^2 + 3x + 2x + 6 = x^2 + 5x + 6`` (term by term) 7
``x^2 + 5x + 6 = x(x + 3) + 2(x + 3) = (x + 2)(x + 3)`` (reversed)   7
``(x + 2)(x + 3) = x(x + 3) + 2(x + 3)`` (stops early)               1
``(x + 2)(x + 3) = x^2 + 5x + 6`` (restates the claim)               0
``(x + 2)(x + 3) = x^2 + 4x + x + 6 = x^2 + 5x + 6`` (no real step)  0
``(x + 2)(x + 3) = x(x + 3) + 2(x + 3) = x^2 + 6x + 6``              1
``... = x^2 + 5x + 6 = 7x`` (reaches T, then a wrong step)           2
``I think this is true.`` (prose only)                               0
``3x = 15``, ``x = 5``                                               7
``x = 5`` (the answer alone)                                         1
``6x + 10 = 40``, ``9x + 15 = 60``, ``12x + 20 = 80`` (no progress)  0
====================================================================  ======
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

import sympy

from .config import MAX_ANSWER_CHARS, MAX_POINTS
from .safe_math import (
    DEFAULT_SYMBOLS,
    FUNCTIONS,
    MAX_DEPTH,
    Form,
    MathSyntaxError,
    Token,
    as_polynomial,
    is_identically_zero,
    parse_written,
    tokenize,
)

if TYPE_CHECKING:
    from .derivations import Derivation
    from .judge import JudgeClient
    from .tasks import ProofTask

MAX_FORMULAS = 60
MAX_INTERMEDIATE_POINTS = 3
MAX_LINE_CHARS = 400
MAX_RAW_LINE_CHARS = 2000
MAX_WORD_CHARS = 400
MAX_MONOMIALS = 64
"""Formulas with more terms than this once multiplied out are not measured for progress."""
_MATH_UNICODE = frozenset(
    "‐‑‒–—―−﹣－×·⋅∙✕÷∕⁄≤≥≠≈±∓→⇒⇔⟹∴∈∉⊂⊆∪∩∨∧∀∃√∞∑∏∫πθαβγδελμσφω°′…ℝℕℤℚℂ∠△∅∎□■✓"
) | frozenset("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻₀₁₂₃₄₅₆₇₈₉½⅓⅔¼¾")
_ACTION_OPEN = re.compile("<action>", re.IGNORECASE)
_ACTION_CLOSE = re.compile("</action>", re.IGNORECASE)
_BULLET = re.compile(r"^(?:[-*•]+\s+|\(?[0-9]{1,3}[.)]\s+)")


# -- the result --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grade:
    """The grade of one answer."""

    points: int | None
    """0-7, or None when the answer was not graded (not gradable, or the judge failed)."""
    valid: bool
    """The answer is gradable text (see the module docstring); False = an invalid action."""
    error: str | None = None
    """Why there are no points: what is wrong with the answer, or why the judgement failed."""
    method: Literal["mechanical", "judge", "none"] = "mechanical"
    details: Mapping[str, Any] = field(default_factory=dict)
    """Mechanical: steps, intermediates, reached_target, complete, first_error, formulas.
    Judge: judge_reply, judge_attempts, judge_latency_s."""

    @property
    def graded(self) -> bool:
        """Points were awarded (False for invalid answers and failed judgements)."""
        return self.points is not None

    @property
    def reward(self) -> float:
        """``points / 7``; 0.0 when not graded (check :attr:`graded` before averaging)."""
        return self.points / MAX_POINTS if self.points is not None else 0.0

    def to_info(self) -> dict[str, Any]:
        """A plain dict for ``info["grade"]``."""
        return {
            "points": self.points,
            "valid": self.valid,
            "error": self.error,
            "method": self.method,
            **self.details,
        }


# -- what is graded ----------------------------------------------------------------------------


def extract_answer(text: Any) -> str:
    """The part of a response that is graded (see the module docstring); "" for non-text."""
    if not isinstance(text, str):
        return ""
    if "<think>" in text or "</think>" in text:
        end = text.rfind("</think>")
        text = text[end + len("</think>") :] if end >= 0 else ""
    # The last </action> and the last <action> before it, found with literal searches: a
    # lazy regex over text full of unclosed tags would take quadratic time.
    closes = [m.start() for m in _ACTION_CLOSE.finditer(text)]
    if closes:
        opens = [m.end() for m in _ACTION_OPEN.finditer(text, 0, closes[-1])]
        if opens:
            text = text[opens[-1] : closes[-1]]
    return text.strip()


def _legible(line: str) -> bool:
    s = line.strip()
    if not s:
        return False
    for c in s:
        if not ((c.isascii() and (c.isprintable() or c == "\t")) or c in _MATH_UNICODE):
            return False
    if not any(c.isascii() and c.isalnum() for c in s):
        return False
    return all(len(w) <= MAX_WORD_CHARS for w in s.split())


def ungradable_reason(answer: str, max_answer_chars: int = MAX_ANSWER_CHARS) -> str | None:
    """Why ``answer`` (already extracted) cannot be graded, or None if it can."""
    if not answer.strip():
        return "the answer is empty"
    if len(answer) > max_answer_chars:
        return f"the answer is longer than {max_answer_chars} characters"
    # Legible lines must carry at least half of the text, so that noise with a stray
    # readable fragment (random bytes often hold one) is not an answer.
    total = legible = 0
    for line in answer.splitlines():
        n = len("".join(line.split()))
        total += n
        legible += n if _legible(line) else 0
    if legible == 0:
        return "the answer has no legible line (text or formulas in ASCII characters)"
    if 2 * legible < total:
        return "most of the answer is not legible text (ASCII letters, digits, math symbols)"
    return None


def canonical_answer(answer: str) -> str:
    """The executed action of a graded answer: lowercased, each line's whitespace collapsed,
    blank lines dropped, so responses that differ only in case or spacing share statistics."""
    lines = (" ".join(line.split()) for line in answer.lower().splitlines())
    return "\n".join(line for line in lines if line)


# -- notation ----------------------------------------------------------------------------------

_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")
_SUPERSCRIPT_RUN = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻]+")
_INDEX = re.compile(
    r"(?<=[A-Za-z])(?:_\{[0-9]{1,3}(?:, ?[0-9]{1,3})?\}|_[0-9]{1,3}|[₀₁₂₃₄₅₆₇₈₉]{1,3})"
)
"""Subscript indices after a letter (``x_1``, ``x_{2}``, ``x_{1,2}``, ``x₁``): dropped."""
_CHARS = str.maketrans(
    {
        **dict.fromkeys("‐‑‒–—―−﹣－", "-"),
        **dict.fromkeys("×·⋅∙✕⨯∗", "*"),
        **dict.fromkeys("÷∕⁄", "/"),
        "∨": " or ",
        "∧": " and ",
    }
)
_ARROW = re.compile(r"<=>|<->|==>|=>|-->|->|<=|>=|!=|[⟹⟸⟺⇒⇔→↔∴∵]")
"""Arrows, and the relations no formula here uses, become ``⇒``: a word between formulas."""
_SQRT_ATOM = re.compile(r"√\s*([0-9]+(?:\.[0-9]+)?|[A-Za-z])")
_LATEX_BREAK = re.compile(r"\\\\(?:\[[^\]\n]{0,20}\])?|\\(?:begin|end)\{[A-Za-z*]{0,20}\}")
_FRACTIONS = frozenset({"frac", "dfrac", "tfrac", "cfrac"})
_WRAPPERS = frozenset(
    {"text", "textbf", "textit", "textrm", "mathrm", "mathbf", "mathit", "mathsf", "mbox",
     "boxed", "operatorname", "underline", "hbox"}
)  # fmt: skip
_DROPPED = frozenset(
    {"left", "right", "big", "Big", "bigl", "bigr", "Bigl", "Bigr", "bigg", "Bigg", "biggl",
     "biggr", "Biggl", "Biggr", "displaystyle", "textstyle", "limits", "nonumber", "notag",
     "quad", "qquad", "enspace", ",", ";", ":", "!", " ", "(", ")", "[", "]", "\\"}
)  # fmt: skip
_SYMBOL_COMMANDS: Mapping[str, str] = {
    "cdot": "*", "times": "*", "ast": "*", "div": "/", "pm": "±", "mp": "∓", "in": "∈",
    "{": "⦃", "}": "⦄", "lbrace": "⦃", "rbrace": "⦄", "Rightarrow": " ⇒ ",
    "Longrightarrow": " ⇒ ", "implies": " ⇒ ", "iff": " ⇒ ", "Leftrightarrow": " ⇒ ",
    "Longleftrightarrow": " ⇒ ", "rightarrow": " ⇒ ", "to": " ⇒ ", "therefore": " ⇒ ",
    "because": " ⇒ ", "lor": " or ", "vee": " or ", "land": " and ", "wedge": " and ",
}  # fmt: skip
_SET_OPEN, _SET_CLOSE = "⦃", "⦄"
_SET = re.compile(r"(?:(?<![A-Za-z])([A-Za-z])\s*(∈|=)\s*)?⦃([^⦃⦄]*)⦄")


class _TooDeep(ValueError):
    """LaTeX nested deeper than the parser would accept anyway."""


def _latex(s: str, depth: int = 0) -> str:
    """``s`` with LaTeX commands and braces rewritten as plain formula text (module docstring).

    One left-to-right scan; each brace group is scanned once more per level of nesting, and
    nesting deeper than :data:`~agentrl.envs.proof.safe_math.MAX_DEPTH` raises ``_TooDeep``.
    """
    if depth > MAX_DEPTH:
        raise _TooDeep
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            name, i = _command(s, i)
            if name in _FRACTIONS:
                a, i = _argument(s, i)
                b, i = _argument(s, i)
                out.append(f"(({_latex(a, depth + 1)})/({_latex(b, depth + 1)}))")
            elif name == "sqrt":
                if i < n and s[i] == "[":  # an n-th root: no formula here has one
                    out.append(" root ")
                    continue
                a, i = _argument(s, i)
                out.append(f"sqrt({_latex(a, depth + 1)})")
            elif name in _WRAPPERS:
                a, i = _argument(s, i)
                out.append(f" {_latex(a, depth + 1)} ")
            elif name in _DROPPED:
                if name in ("left", "right") and i < n and s[i] == ".":
                    i += 1  # \left. and \right. are invisible delimiters
                out.append(" " if name not in ("left", "right") else "")
            elif name in _SYMBOL_COMMANDS:
                out.append(_SYMBOL_COMMANDS[name])
            else:
                out.append(f" {name} ")  # \alpha, \le, ...: a word, which splits formulas
        elif c == "{":
            end = _closing_brace(s, i)
            inner = s[i + 1 : end if end >= 0 else n]
            i = end + 1 if end >= 0 else n
            body = _latex(inner, depth + 1)
            if _last_visible(out) == "∈" or _top_level_comma(inner):
                out.append(f"{_SET_OPEN}{body}{_SET_CLOSE}")
            else:
                out.append(f"({body})")
        elif c == "}":
            out.append(")")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _last_visible(out: Sequence[str]) -> str:
    """The last character of ``out`` that is not a space ("" if none)."""
    for piece in reversed(out):
        stripped = piece.rstrip()
        if stripped:
            return stripped[-1]
    return ""


def _command(s: str, i: int) -> tuple[str, int]:
    """The name of the LaTeX command at ``s[i] == '\\'`` and the index after it."""
    j = i + 1
    while j < len(s) and s[j].isascii() and s[j].isalpha():
        j += 1
    if j == i + 1:  # a one-character command: \{ \, \( ...
        return s[i + 1 : i + 2], min(i + 2, len(s))
    return s[i + 1 : j], j


def _argument(s: str, i: int) -> tuple[str, int]:
    """A command's argument at ``s[i:]``: a brace group's content, a command, or one char."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return "", i
    if s[i] == "{":
        end = _closing_brace(s, i)
        return (s[i + 1 : end], end + 1) if end >= 0 else (s[i + 1 :], len(s))
    if s[i] == "\\":
        _, j = _command(s, i)
        return s[i:j], j
    return s[i], i + 1


def _closing_brace(s: str, i: int) -> int:
    """The index of the ``}`` closing the ``{`` at ``s[i]`` (``\\{`` and ``\\}`` are not
    braces), or -1."""
    level, j = 0, i
    while j < len(s):
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "{":
            level += 1
        elif c == "}":
            level -= 1
            if level == 0:
                return j
        j += 1
    return -1


def _top_level_comma(s: str) -> bool:
    level = 0
    for c in s:
        if c in "({[":
            level += 1
        elif c in ")}]":
            level -= 1
        elif c in ",;" and level == 0:
            return True
    return False


def _answer_lines(answer: str) -> list[str]:
    """The lines of an answer; a LaTeX line break ``\\\\`` also ends a line, and alignment
    (``&``, ``\\begin{align}``) is dropped."""
    return _LATEX_BREAK.sub("\n", answer).replace("&", " ").splitlines()


def _normalize(raw: str, kind: str = "identity", variable: str = "x") -> str:
    """One answer line as plain lowercase formula text (step 1 of the module docstring)."""
    s = _SUPERSCRIPT_RUN.sub(lambda m: "^(" + m.group().translate(_SUPERSCRIPTS) + ")", raw)
    s = _INDEX.sub("", s)
    s = unicodedata.normalize("NFKC", s).translate(_CHARS)
    s = _ARROW.sub(" ⇒ ", s)
    try:
        s = _latex(s)
    except _TooDeep:
        return ""
    s = _SQRT_ATOM.sub(r"sqrt(\1)", s).replace("√", "sqrt").replace("[", "(").replace("]", ")")
    s = s.replace("+/-", "±").replace("$", "").replace("`", "")
    s = _sets(s, kind, variable)
    s = _BULLET.sub("", s.lower().strip())
    return s.rstrip(" \t.,;!?")


def _sets(s: str, kind: str, variable: str) -> str:
    """Equations: a set of solutions ``x ∈ {2, 3}`` (or a bare ``{2, 3}``) as ``x = 2 or x =
    3``. Other kinds have no sets: the braces are brackets."""
    if _SET_OPEN not in s:
        return s
    if kind != "equation":
        return s.replace(_SET_OPEN, "(").replace(_SET_CLOSE, ")")

    def clauses(m: re.Match[str]) -> str:
        letter, relation, body = m.group(1), m.group(2), m.group(3)
        v = letter.lower() if letter and (relation == "∈" or letter.lower() == variable) else None
        elements = [e.strip() for e in re.split(r"[,;]", body)]
        if not all(elements):
            return f" {_SET_OPEN}{body}{_SET_CLOSE} "  # an empty element: left unreadable
        return " or ".join(f"{v or variable} = {e}" for e in elements)

    return _SET.sub(clauses, s)


# -- reading formulas --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Side:
    expr: sympy.Expr | None
    """None for the empty first side of a ``= B`` line."""
    text: str
    form: Form | None = None
    """The written form (:data:`~agentrl.envs.proof.safe_math.Form`)."""


@dataclass(frozen=True)
class Formula:
    """One formula of the chain: an expression, or an equation (a disjunction of clauses)."""

    line: int
    """1-based line of the answer (0 for the task's own start and target)."""
    key: Hashable
    """The shape (see :func:`_shape`): of the expression, or the set of unordered clause sides.
    Two formulas with one shape need no step check between them."""
    value: sympy.Expr
    """The expression, or the product of (left - right) over the clauses."""
    left: sympy.Expr | None = None
    """Equations: the left side of the first clause (``= B`` lines continue from it)."""
    text: str = ""
    """The formula as written (normalized, at most 120 characters), for the grade details."""
    form: Form | None = None
    """Expressions: the written form."""
    clauses: tuple[tuple[_Side, _Side], ...] = ()
    """Equations: the clauses (left side, right side)."""


def _shape(e: sympy.Expr) -> sympy.Expr:
    """What a formula looks like, up to rewriting that takes no algebra.

    sympy's automatic evaluation already reorders, combines like terms and numbers, multiplies
    a number into a lone bracket and cancels equal factors. In a product of several factors
    it keeps a number inside a bracket, so this also moves each bracket's numeric content and
    sign into the product's coefficient: ``2(x + 2)(x + 3)/2``, read as ``(2x + 4)(x + 3)/2``,
    has the shape of ``(x + 2)(x + 3)``, while ``3t(t - 3)`` and ``3t^2 - 9t`` stay apart.
    """
    if not e.args:
        return e
    args = [_shape(a) for a in e.args]
    if not e.is_Mul:
        return e.func(*args)
    coeff: sympy.Expr = sympy.Integer(1)
    factors = []
    for a in args:
        base, exp = a.as_base_exp()
        if base.is_Add and exp.is_Integer:
            content, prim = base.primitive()
            if prim.could_extract_minus_sign():
                content, prim = -content, -prim
            coeff *= content**exp
            factors.append(prim**exp)
        else:
            factors.append(a)
    return sympy.Mul(coeff, *factors)


def _shorten(text: str) -> str:
    return text if len(text) <= 120 else text[:117] + "..."


def _equation(clauses: Sequence[tuple[_Side, _Side]], line: int) -> Formula:
    value = sympy.Integer(1)
    for left, right in clauses:
        value = value * (left.expr - right.expr)
    key = frozenset(frozenset((_shape(left.expr), _shape(right.expr))) for left, right in clauses)
    text = " or ".join(f"{left.text} = {right.text}" for left, right in clauses)
    return Formula(line, key, value, clauses[0][0].expr, _shorten(text), clauses=tuple(clauses))


def _split(tokens: Sequence[Token], is_sep: Callable[[Token], bool]) -> list[list[Token]]:
    parts: list[list[Token]] = [[]]
    for tok in tokens:
        if is_sep(tok):
            parts.append([])
        else:
            parts[-1].append(tok)
    return parts


def _is_sep(tok: Token, words: Iterable[str]) -> bool:
    return tok.kind == "sep" or (tok.kind == "name" and tok.text in words)


class UnreadableLine(ValueError):
    """A line that looks like a formula but cannot be read (the message says why)."""


class _LineReader:
    """Reads the formulas of one normalized line ``s`` (rules in the module docstring)."""

    def __init__(self, s: str, line: int, symbols: frozenset[str]):
        self.s, self.line, self.symbols = s, line, symbols

    def sides(self, tokens: Sequence[Token]) -> list[_Side]:
        """The sides of ``A = B = C``; an empty first side is a ``= B`` line."""
        out: list[_Side] = []
        for i, part in enumerate(_split(tokens, lambda t: t.kind == "eq")):
            if not part:
                if i == 0:
                    out.append(_Side(None, ""))
                    continue
                raise UnreadableLine("an '=' with nothing on one side")
            text = self.s[part[0].pos : part[-1].pos + len(part[-1].text)]
            try:
                parsed = parse_written(part, self.symbols)
            except MathSyntaxError as exc:
                raise UnreadableLine(f"{text[:60]!r}: {exc}") from exc
            out.append(_Side(parsed.expr, text, parsed.form))
        return out

    def expressions(
        self, tokens: Sequence[Token], bare: bool, start: sympy.Expr | None, asides: list[str]
    ) -> list[Formula]:
        """The formulas of ``A = B = C`` parts; parts without ``=`` only if ``bare``. A part
        ``A = B ...`` whose sides equal each other but not ``start`` is an aside."""
        out = []
        for part in _split(tokens, lambda t: _is_sep(t, ("and",))):
            if not part or not (bare or any(t.kind == "eq" for t in part)):
                continue
            sides = [side for side in self.sides(part) if side.expr is not None]
            if start is not None and part[0].kind != "eq" and _is_aside(sides, start):
                asides.append(_shorten(self.s[part[0].pos : part[-1].pos + len(part[-1].text)]))
                continue
            for side in sides:
                out.append(
                    Formula(
                        self.line, _shape(side.expr), side.expr, None, _shorten(side.text),
                        form=side.form,
                    )
                )  # fmt: skip
        return out

    def clause(self, part: Sequence[Token]) -> tuple[_Side, _Side]:
        sides = self.sides(part)
        if len(sides) != 2 or sides[0].expr is None:
            raise UnreadableLine("each clause of a list of equations must be one 'A = B'")
        return sides[0], sides[1]

    def clauses(
        self, part: Sequence[Token], before: Sequence[tuple[_Side, _Side]]
    ) -> list[tuple[_Side, _Side]]:
        """The clauses of one part of a list: ``A = B``, two for ``A = B ± C``, and a bare
        number after ``x = 2`` (``x = 2 or 3``)."""
        pm = [i for i, t in enumerate(part) if t.kind == "pm"]
        if len(pm) > 1:
            raise UnreadableLine("more than one '±' in a clause")
        if pm:
            i, tok = pm[0], part[pm[0]]
            return [
                self.clause([*part[:i], Token("op", sign, tok.pos), *part[i + 1 :]])
                for sign in "+-"
            ]
        if not any(t.kind == "eq" for t in part) and before:
            left, right = before[-1]
            number = self.sides(part)[0]
            if _is_solved(left.expr, right.expr) and not number.expr.free_symbols:
                return [(left if left.expr.is_Symbol else right, number)]
        return [self.clause(part)]

    def equations(self, tokens: Sequence[Token], prev_left: sympy.Expr | None) -> list[Formula]:
        if any(t.kind == "pm" or (t.kind == "name" and t.text == "or") for t in tokens):
            found: list[tuple[_Side, _Side]] = []
            for p in _split(tokens, lambda t: _is_sep(t, ("or", "and"))):
                if p:
                    found.extend(self.clauses(p, found))
            return [_equation(found, self.line)]
        parts = [p for p in _split(tokens, lambda t: _is_sep(t, ("and",))) if p]
        if len(parts) >= 2:
            found = []
            try:
                for p in parts:
                    found.extend(self.clauses(p, found))
            except UnreadableLine:
                found = []
            if found and all(_is_solved(a.expr, b.expr) for a, b in found):
                return [_equation(found, self.line)]  # a list of solutions: x = 2, x = 3
        out: list[Formula] = []
        left = _Side(prev_left, "...") if prev_left is not None else None
        for part in parts:
            sides = self.sides(part)
            if len(sides) < 2:
                continue  # a bare expression is no equation
            first = sides[0]
            if first.expr is None:
                if left is None:
                    raise UnreadableLine("a line starts with '=' but no equation comes before it")
                first = left
            out.extend(_equation([(first, right)], self.line) for right in sides[1:])
            left = first
        return out


def _is_aside(sides: Sequence[_Side], start: sympy.Expr) -> bool:
    """Whether ``A = B ...`` is worked out on the side: its sides are equal to each other
    and not to the expression being transformed (an identity's chain always equals it)."""
    if len(sides) < 2:
        return False
    try:
        if is_identically_zero(sides[0].expr - start):
            return False
        return all(is_identically_zero(sides[0].expr - s.expr) for s in sides[1:])
    except Exception:  # sympy on odd input: not an aside, the chain will judge it
        return False


def _is_solved(left: sympy.Expr, right: sympy.Expr) -> bool:
    """``variable = number`` (either way round)."""
    return (left.is_Symbol and not right.free_symbols) or (
        right.is_Symbol and not left.free_symbols
    )


@dataclass(frozen=True)
class LineRead:
    """What :func:`read_line` found on one line."""

    formulas: list[Formula]
    """The formulas in order ([] for prose and numeric checks)."""
    unreadable: list[str]
    """Why each formula-like part that did not parse was skipped."""
    asides: list[str] = field(default_factory=list)
    """Parts read as asides (module docstring, reading step 5), skipped."""


def read_line(
    raw: str,
    line: int,
    kind: str,
    prev_left: sympy.Expr | None,
    symbols: Iterable[str] = DEFAULT_SYMBOLS,
    *,
    variable: str = "x",
    start: sympy.Expr | None = None,
) -> LineRead:
    """The formulas of one answer line for a task of ``kind`` (rules in the module docstring).

    Args:
        raw: the line.
        line: its 1-based number (recorded in the formulas).
        kind: ``identity``, ``simplify`` or ``equation``.
        prev_left: equations: the left side a ``= B`` line continues from.
        symbols: letters read as symbols.
        variable: the task's variable (a bare set of solutions ``{2, 3}`` is about it).
        start: identities and simplifications: the expression being transformed; a line
            ``A = B`` not about it is an aside (None: no asides, e.g. for the task's own text).
    """
    symbols = frozenset(symbols)
    if len(raw) > MAX_RAW_LINE_CHARS:
        return LineRead([], [f"a line longer than {MAX_RAW_LINE_CHARS} characters"])
    s = _normalize(raw, kind, variable)
    if not s or len(s) > MAX_LINE_CHARS:
        return LineRead([], [])
    tokens = tokenize(s, lenient=True)
    joiners = ("and", "or") if kind == "equation" else ("and",)

    def is_word(t: Token) -> bool:
        return _is_word(t, symbols) and not _is_sep(t, joiners)

    has_words = any(is_word(t) for t in tokens)
    reader = _LineReader(s, line, symbols)
    formulas: list[Formula] = []
    unreadable: list[str] = []
    asides: list[str] = []
    for segment in _split(tokens, is_word):
        segment = _trim(segment, joiners)
        if not segment or (has_words and not any(t.kind == "eq" for t in segment)):
            continue  # prose, or a bare formula inside prose ("multiply by 3")
        try:
            if kind == "equation":
                got = reader.equations(segment, prev_left)
            else:
                got = reader.expressions(segment, not has_words, start, asides)
        except UnreadableLine as exc:
            unreadable.append(str(exc))
            continue
        if segment[0].kind != "eq" and all(not f.value.free_symbols for f in got):
            continue  # a numeric check such as "3*5 + 5 = 20"
        if kind == "equation":
            asides.extend(f.text for f in got if _holds_always(f.value))
            got = [f for f in got if not _holds_always(f.value)]
        formulas.extend(got)
        if got and got[-1].left is not None:
            prev_left = got[-1].left
    return LineRead(formulas, unreadable, asides)


def _holds_always(value: sympy.Expr) -> bool:
    """An equation whose (left - right) product is identically zero: ``x = x``."""
    try:
        return bool(value.free_symbols) and is_identically_zero(value)
    except Exception:  # sympy on odd input: not an aside, the chain will judge it
        return False


def _trim(segment: list[Token], joiners: Sequence[str]) -> list[Token]:
    """Drop separators, operators and brackets no formula starts or ends with (Markdown
    ``**bold**`` leaves ``**`` around a formula; "so, x = 5" leaves a comma; "x = 5 (by
    expanding)" leaves a ``(``)."""
    i, j = 0, len(segment)
    while i < j and (
        _is_sep(segment[i], joiners)
        or segment[i].kind in ("pow", "rpar")
        or (segment[i].kind == "op" and segment[i].text in "*/")
    ):
        i += 1
    while j > i and (
        _is_sep(segment[j - 1], joiners) or segment[j - 1].kind in ("pow", "op", "lpar", "pm")
    ):
        j -= 1
    return segment[i:j]


def _is_word(tok: Token, symbols: frozenset[str]) -> bool:
    if tok.kind == "bad":
        return True
    return tok.kind == "name" and tok.text not in symbols and tok.text not in FUNCTIONS


# -- the rubric --------------------------------------------------------------------------------


def _proportional(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Whether ``a = c * b`` for a nonzero constant c (``b`` not identically zero)."""
    pa, pb = as_polynomial(a), as_polynomial(b)
    if pa is not None and pb is not None:
        gens = sorted(a.free_symbols | b.free_symbols, key=str)
        pa, pb = sympy.Poly(a, *gens), sympy.Poly(b, *gens)
        return not pa.is_zero and (pa * pb.LC() - pb * pa.LC()).is_zero
    ratio = sympy.cancel(a / b)
    return not (ratio.free_symbols or ratio == 0 or ratio.has(sympy.zoo, sympy.nan))


def step_check(kind: str, a: Formula, b: Formula) -> str | None:
    """Why the step from ``a`` to ``b`` is wrong, or None if it is valid (module docstring)."""
    try:
        if kind == "equation":
            if is_identically_zero(b.value):
                return "an equation that holds for every value (it no longer says anything)"
            return None if _proportional(a.value, b.value) else "not equivalent to the one before"
        return None if is_identically_zero(a.value - b.value) else "not equal to the formula before"
    except Exception as exc:  # sympy on odd input; a step we cannot check is not valid
        return f"could not be checked ({type(exc).__name__})"


# Multiplied out: a formula's terms when every bracket is multiplied out without collecting like
# terms, grouped by monomial type (the exponents of the symbols) as sorted coefficient tuples.
Terms = dict[tuple[tuple[str, int], ...], tuple[Fraction, ...]]


def multiplied_out(form: Form) -> Terms | None:
    """The terms of ``form`` with every bracket multiplied out and nothing collected:
    ``x(x + 3) + 2(x + 3)`` gives x^2: (1,), x: (2, 3), 1: (6,). None when that is not a
    polynomial (a root, a division by a sum) or has more than :data:`MAX_MONOMIALS` terms."""
    raw = _monomials(form)
    if raw is None:
        return None
    grouped: dict[tuple[tuple[str, int], ...], list[Fraction]] = {}
    for mono, c in raw:
        if c:
            grouped.setdefault(mono, []).append(c)
    return {mono: tuple(sorted(cs)) for mono, cs in grouped.items()}


_Monomial = tuple[tuple[tuple[str, int], ...], Fraction]


def _monomials(form: Form) -> list[_Monomial] | None:
    tag = form[0]
    if tag == "n":
        return [((), Fraction(form[1], form[2]))]
    if tag == "s":
        return [(((form[1], 1),), Fraction(1))]
    if tag == "+":
        out: list[_Monomial] = []
        for t in form[1]:
            m = _monomials(t)
            if m is None or len(out) + len(m) > MAX_MONOMIALS:
                return None
            out.extend(m)
        return out
    if tag == "*":
        out = [((), Fraction(1))]
        for f in form[1]:
            m = _monomials(f)
            if m is None:
                return None
            out = _times(out, m)
            if out is None:
                return None
        return out
    if tag == "^":
        base, k = _monomials(form[1]), form[2]
        if base is None:
            return None
        if k < 0:
            if len(base) != 1 or not base[0][1]:
                return None  # division by a sum: not a polynomial
            mono, c = base[0]
            base, k = [(tuple((s, -e) for s, e in mono), 1 / c)], -k
        out = [((), Fraction(1))]
        for _ in range(k):
            out = _times(out, base)
            if out is None:
                return None
        return out
    return None  # sqrt


def _times(a: list[_Monomial], b: list[_Monomial]) -> list[_Monomial] | None:
    if len(a) * len(b) > MAX_MONOMIALS:
        return None
    out = []
    for ma, ca in a:
        for mb, cb in b:
            exps = dict(ma)
            for s, e in mb:
                exps[s] = exps.get(s, 0) + e
            out.append((tuple(sorted((s, e) for s, e in exps.items() if e)), ca * cb))
    return out


def _count(terms: Terms) -> int:
    return sum(len(cs) for cs in terms.values())


def coarsens(fine: Terms, coarse: Terms) -> bool:
    """Whether ``coarse`` is ``fine`` with some like terms added up (a group may also add up to
    0 and vanish): ``x^2 + 5x + 6`` coarsens ``x^2 + 3x + 2x + 6``; ``x^2 + 4x + x + 6`` does
    not."""
    return all(
        _partition(fine.get(mono, ()), coarse.get(mono, ())) for mono in fine.keys() | coarse
    )


def _partition(parts: Sequence[Fraction], sums: Sequence[Fraction]) -> bool:
    """Whether ``parts`` splits into one non-empty group per element of ``sums`` (adding up to
    it) and a leftover group adding up to 0. Exact search over subsets: the finer side is the
    task's own start, a handful of terms per monomial type (more than 12 is refused)."""
    if tuple(sorted(parts)) == tuple(sorted(sums)):
        return True
    n = len(parts)
    if len(sums) > n or n > 12 or sum(parts) != sum(sums):
        return False
    subset_sum = [Fraction(0)] * (1 << n)
    for mask in range(1, 1 << n):
        low = mask & -mask
        subset_sum[mask] = subset_sum[mask ^ low] + parts[low.bit_length() - 1]
    full = (1 << n) - 1
    seen: set[tuple[int, int]] = set()

    def place(used: int, j: int) -> bool:
        if j == len(sums):
            return subset_sum[full ^ used] == 0
        if (used, j) in seen:
            return False
        seen.add((used, j))
        rest = full ^ used
        sub = rest
        while sub:
            if subset_sum[sub] == sums[j] and place(used | sub, j + 1):
                return True
            sub = (sub - 1) & rest
        return False

    return place(0, 0)


def brackets(e: sympy.Expr) -> int:
    """How many brackets are left to multiply out in the evaluated expression ``e``: each sum
    that is a factor of a product or the base of a power counts once per power (``(x + 2)(x +
    3)``: 2, ``x(x + 3) + 2x + 6``: 1, ``(x + 1)^2 - (x - 3)^2``: 4, ``x^2 + 5x + 6``: 0)."""
    if e.is_Add:
        return sum(brackets(a) for a in e.args)
    if e.is_Mul:
        return sum(_factor_brackets(a) for a in e.args)
    if e.is_Pow:
        return _factor_brackets(e)
    return sum(brackets(a) for a in e.args)


def _factor_brackets(f: sympy.Expr) -> int:
    base, k = f.as_base_exp()
    if base.is_Add:
        return (min(abs(int(k)), 64) if k.is_Integer else 1) + brackets(base)
    return brackets(base) if f.is_Pow else brackets(f)


def written_brackets(form: Form) -> int:
    """:func:`brackets` for a written form (``-(x^2 - 6x + 9)`` and ``8(x - 1)`` count 1)."""
    tag = form[0]
    if tag == "+":
        return sum(written_brackets(t) for t in form[1])
    if tag == "*":
        return sum(1 + written_brackets(f) if f[0] == "+" else written_brackets(f) for f in form[1])
    if tag == "^":
        base = form[1]
        return abs(form[2]) + written_brackets(base) if base[0] == "+" else written_brackets(base)
    if tag == "sqrt":
        return written_brackets(form[1])
    return 0


def _bracket_forms(form: Form) -> list[tuple[Form, int]]:
    """The brackets of a written form: each sum that is a factor of a product or the base of a
    power, with its power (also those inside other brackets)."""
    out: list[tuple[Form, int]] = []
    tag = form[0]
    if tag == "*":
        for f in form[1]:
            if f[0] == "+":
                out.append((f, 1))
            out.extend(_bracket_forms(f))
    elif tag == "^":
        if form[1][0] == "+":
            out.append((form[1], abs(form[2])))
        out.extend(_bracket_forms(form[1]))
    elif tag in ("+", "sqrt"):
        for f in form[1] if tag == "+" else (form[1],):
            out.extend(_bracket_forms(f))
    return out


def form_expr(form: Form) -> sympy.Expr:
    """The sympy value of a written form (built from its numbers and names, never from text)."""
    tag = form[0]
    if tag == "n":
        return sympy.Rational(form[1], form[2])
    if tag == "s":
        return sympy.Symbol(form[1])
    if tag == "+":
        return sympy.Add(*(form_expr(t) for t in form[1]))
    if tag == "*":
        return sympy.Mul(*(form_expr(f) for f in form[1]))
    if tag == "^":
        return form_expr(form[1]) ** form[2]
    return sympy.sqrt(form_expr(form[1]))


_MAX_BRACKETS = 8


class _ExpressionProgress:
    """The target test and distance of identities and simplifications (module docstring).

    The chain runs from the *bracketed* end U (more brackets to multiply out) to the
    *multiplied-out* end E: U is S and E is T when T is expanded, and the other way round when
    T is the factored side. A formula's distance is (brackets, terms multiplied out); towards
    E both go down, so when E is S (factoring) the distance is negated to go down towards T.
    A formula is measured only if it is U partly multiplied out: its terms multiplied out
    coarsen U's, and each of its brackets is (a number times) a product of U's brackets.
    """

    def __init__(self, start: Formula, target: Formula):
        self.target = target
        self.target_terms = multiplied_out(target.form)
        self.target_expanded = written_brackets(target.form) == 0
        self.expanding = brackets(target.value) <= brackets(start.value)
        bracketed = start if self.expanding else target
        self.u_terms = multiplied_out(bracketed.form)
        self.gens = sorted(start.value.free_symbols | target.value.free_symbols, key=str)
        self.atoms = [b for b, k in _bracket_forms(bracketed.form) for _ in range(min(k, 4))]
        self._products: set[Hashable] | None = None

    def _key(self, e: sympy.Expr) -> Hashable | None:
        """A polynomial in the task's symbols up to a constant factor, for comparing brackets
        (None if ``e`` is not one)."""
        if e.free_symbols - set(self.gens) or as_polynomial(e) is None:
            return None
        return tuple(sympy.Poly(e, *self.gens).monic().terms())

    def products(self) -> set[Hashable]:
        """The keys of every product of U's brackets (built on first use: most formulas are
        turned down by their terms before their brackets are looked at)."""
        if self._products is None:
            keys: set[Hashable] = set()
            polys = [form_expr(b) for b in self.atoms]
            if self.gens and len(polys) <= _MAX_BRACKETS and all(map(as_polynomial, polys)):
                polys = [sympy.Poly(p, *self.gens) for p in polys]
                for mask in range(1, 1 << len(polys)):
                    chosen = [p for i, p in enumerate(polys) if mask >> i & 1]
                    product = chosen[0]
                    for p in chosen[1:]:
                        product = product * p
                    keys.add(tuple(product.monic().terms()))
            self._products = keys
        return self._products

    def _brackets_from_u(self, form: Form) -> bool:
        for b, _ in _bracket_forms(form):
            e = form_expr(b)
            if not e.free_symbols:
                continue  # a bracket holding a number, such as (5 + 1)
            if self._key(e) not in self.products():
                return False
        return True

    def is_target(self, f: Formula) -> bool:
        if f.key != self.target.key:
            return False
        if self.target_terms is None:
            return True
        if multiplied_out(f.form) != self.target_terms:
            return False
        return not self.target_expanded or written_brackets(f.form) == 0

    def distance(self, f: Formula, *, measured: bool = False) -> tuple[int, int] | None:
        """The (signed) distance of ``f``; with ``measured``, None unless ``f`` counts as
        work on the way (S multiplied out and partly collected, not the target rewritten)."""
        terms = multiplied_out(f.form)
        if terms is None:
            return None
        if measured:
            if self.u_terms is None or not coarsens(self.u_terms, terms):
                return None  # not U's terms: written from the other end, or padded
            if not self._brackets_from_u(f.form):
                return None  # a bracket U does not have: E refactored, e.g. x(x + 5) + 6
        d = (brackets(f.value), _count(terms))
        return d if self.expanding else (-d[0], -d[1])


class _EquationProgress:
    """The target test and distance of equations (module docstring)."""

    def __init__(self, target: Formula, variable: str):
        self.target = target
        self.v = sympy.Symbol(variable)

    def is_target(self, f: Formula) -> bool:
        return f.key == self.target.key and all(
            _final_clause(left.form, right.form, self.v.name) for left, right in f.clauses
        )

    def distance(self, f: Formula, *, measured: bool = False) -> tuple[int, int] | None:
        try:
            moves = sum(_clause_moves(left.expr, right.expr, self.v) for left, right in f.clauses)
        except Exception:  # sympy on odd input: no distance, so no progress
            return None
        return (moves, 0 if self.is_target(f) else 1)


_UNMEASURED = 20
"""The moves of a clause this measure does not read (the variable in a denominator, other
symbols): more than any it does, so reaching one is never progress."""


def _clause_moves(left: sympy.Expr, right: sympy.Expr, v: sympy.Symbol) -> int:
    diff = left - right
    poly = as_polynomial(diff)  # the usual case; cancel() only for a division by a sum
    if poly is None:
        num, den = sympy.fraction(sympy.cancel(diff))
        if den.has(v):
            return _UNMEASURED
        poly = as_polynomial(num)
    if poly is None or poly.gens != (v,):
        return _UNMEASURED
    degree = poly.degree()
    if degree < 1:
        return _UNMEASURED
    if degree == 1:
        terms = len(sympy.Add.make_args(left)) + len(sympy.Add.make_args(right))
        with_v = [t for side in (left, right) for t in sympy.Add.make_args(side) if t.has(v)]
        alone = len(with_v) == 1 and with_v[0] == v
        fraction = any(not t.as_coeff_Mul()[0].is_Integer for t in with_v)
        return (terms - 2) + (0 if alone else 1) + int(fraction)
    sides = [s for s in (left, right) if s.has(v)]
    other = right if sides[0] is left else left
    if len(sides) == 2 or other.free_symbols:
        shape = 2
    elif other == 0 and _linear_factors(sides[0], v) >= 2:
        shape = 0  # (x - 2)(x - 3) = 0: split it
    elif other != 0 and _power_of_binomial(sides[0], v):
        shape = 0  # (x - 5/2)^2 = 1/4: take roots
    else:
        shape = 1 if other == 0 else 2
    return 2 * degree + 1 + shape


def _linear_factors(e: sympy.Expr, v: sympy.Symbol) -> int:
    """How many factors of degree 1 in ``v`` the product ``e`` has (0 if one has another
    degree)."""
    count = 0
    for f in sympy.Mul.make_args(e):
        base, k = f.as_base_exp()
        if not base.has(v):
            continue
        if not (k.is_Integer and k > 0 and sympy.degree(base, v) == 1):
            return 0
        count += int(k)
    return count


def _power_of_binomial(e: sympy.Expr, v: sympy.Symbol) -> bool:
    factors = [f for f in sympy.Mul.make_args(e) if f.has(v)]
    if len(factors) != 1:
        return False
    base, k = factors[0].as_base_exp()
    return base.is_Add and k.is_Integer and k >= 2 and sympy.degree(base, v) == 1


def _final_clause(left: Form | None, right: Form | None, v: str) -> bool:
    """``v = number`` with the number in final form: an integer, a decimal, or p/q in lowest
    terms (``x = 15/3`` is not final)."""
    if left == ("s", v):
        number = right
    elif right == ("s", v):
        number = left
    else:
        return False
    if number is None:
        return False
    if number[0] == "n":
        return True
    if number[0] != "*" or len(number[1]) != 2 or any(f[0] != "n" for f in number[1]):
        return False
    a, b = (Fraction(f[1], f[2]) for f in number[1])
    value = a * b
    return {abs(a), abs(b)} == {abs(Fraction(value.numerator)), Fraction(1, value.denominator)}


def _task_formula(text: str, kind: str, symbols: frozenset[str], variable: str) -> Formula:
    formulas = read_line(text, 0, kind, None, symbols, variable=variable).formulas
    if len(formulas) != 1:
        raise ValueError(f"task formula {text!r} reads as {len(formulas)} formulas, not 1")
    return formulas[0]


@functools.lru_cache(maxsize=4096)
def _setup(
    d: Derivation,
) -> tuple[frozenset[str], Formula, Formula, _ExpressionProgress | _EquationProgress]:
    """What grading needs about a task, read once per task: its symbols, start, target and
    progress measure (every episode on a task shares them)."""
    symbols = frozenset(DEFAULT_SYMBOLS | {d.variable})
    start = _task_formula(d.start, d.kind, symbols, d.variable)
    target = _task_formula(d.target, d.kind, symbols, d.variable)
    progress: _ExpressionProgress | _EquationProgress = (
        _EquationProgress(target, d.variable)
        if d.kind == "equation"
        else _ExpressionProgress(start, target)
    )
    return symbols, start, target, progress


def grade_derivation(task: ProofTask, answer: str) -> Grade:
    """Grade ``answer`` (already extracted) for a derivation task by the rubric above.

    The details hold ``steps`` (progress steps, plus 1 if the target was reached: a reference
    solution has ``difficulty`` of them), ``intermediates`` (progress steps), ``reached_target``,
    ``complete``, ``first_error`` and ``formulas``: per formula or skipped part its line and
    status (same, progress, no progress, target, wrong, unchecked, aside, unreadable, unread).
    """
    d = task.derivation
    if d is None:
        raise ValueError(f"task {task.id!r} has no derivation to check against")
    symbols, start, _, progress = _setup(d)
    about = start.value if d.kind != "equation" else None
    formulas: list[Formula] = []
    notes: list[dict[str, Any]] = []
    prev_left = start.left
    for n, raw in enumerate(_answer_lines(answer), 1):
        if len(formulas) >= MAX_FORMULAS:
            notes.append({"line": n, "status": "unread", "note": f"after {MAX_FORMULAS} formulas"})
            break
        read = read_line(raw, n, d.kind, prev_left, symbols, variable=d.variable, start=about)
        notes.extend({"line": n, "status": "unreadable", "note": why} for why in read.unreadable)
        notes.extend({"line": n, "status": "aside", "formula": text} for text in read.asides)
        got = read.formulas
        formulas.extend(got[: MAX_FORMULAS - len(formulas)])
        if got and got[-1].left is not None:
            prev_left = got[-1].left
    if (
        d.kind != "equation"
        and formulas
        and formulas[0].key != start.key
        and progress.is_target(formulas[0])
    ):
        formulas.reverse()  # a proof from the right side to the left side
    best = progress.distance(start)
    prev, reached, steps = start, False, 0
    first_error: str | None = None
    for f in formulas:
        if first_error is not None:
            notes.append({"line": f.line, "status": "unchecked", "formula": f.text})
            continue
        if f.key != prev.key:
            why = step_check(d.kind, prev, f)
            if why is not None:
                first_error = f"line {f.line}: {f.text} is {why}"
                notes.append({"line": f.line, "status": "wrong", "formula": f.text, "note": why})
                continue
        if progress.is_target(f):
            reached, status = True, "target"
            dist = progress.distance(f)
        else:
            dist = progress.distance(f, measured=True)
            if dist is not None and best is not None and dist < best:
                steps, status = steps + 1, "progress"
            else:
                status = "same" if f.key == prev.key else "no progress"
        if dist is not None and (best is None or dist < best):
            best = dist
        notes.append({"line": f.line, "status": status, "formula": f.text})
        prev = f
    complete = first_error is None and reached and steps >= d.min_intermediates
    if complete:
        points = MAX_POINTS
    else:
        credit_target = reached and (d.kind != "identity" or steps >= 1)
        points = min(steps, MAX_INTERMEDIATE_POINTS) + int(credit_target)
    notes.sort(key=lambda x: x["line"])
    details = {
        "kind": d.kind,
        "difficulty": d.difficulty,
        "steps": steps + int(reached),
        "intermediates": steps,
        "reached_target": reached,
        "complete": complete,
        "first_error": first_error,
        "formulas": notes,
    }
    return Grade(points=points, valid=True, method="mechanical", details=details)


# -- one entry point for both sources ----------------------------------------------------------


def grade(
    task: ProofTask,
    text: str,
    *,
    judge: JudgeClient | None = None,
    max_answer_chars: int = MAX_ANSWER_CHARS,
) -> Grade:
    """Grade a response to ``task``: never raises on any ``text``.

    Derivation tasks are graded by the mechanical rubric; other tasks by ``judge`` (a failed
    judgement gives ``points=None`` and the reason in ``error``, never 0). Text that is not a
    gradable answer gives ``valid=False``.

    Args:
        task: the problem.
        text: the whole response (reasoning in ``<think>`` and ``<action>`` tags are handled).
        judge: the judge client for tasks without a mechanical grader.
        max_answer_chars: longer answers are not gradable.
    """
    answer = extract_answer(text)
    reason = ungradable_reason(answer, max_answer_chars)
    if reason is not None:
        return Grade(points=None, valid=False, error=reason, method="none")
    if task.derivation is not None:
        try:
            return grade_derivation(task, answer)
        except Exception as exc:  # a grader bug must not end a run; it is recorded, not a 0
            return Grade(None, True, f"grader error: {type(exc).__name__}: {exc}", "mechanical")
    if judge is None:
        return Grade(None, True, "no judge configured for this task", "judge")
    j = judge.judge(task, answer)
    details = {
        "judge_reply": j.reply,
        "judge_attempts": j.attempts,
        "judge_latency_s": j.latency_s,
    }
    return Grade(j.points, True, j.error, "judge", details)


def grade_many(
    items: Sequence[tuple[ProofTask, str]],
    *,
    judge: JudgeClient | None = None,
    max_answer_chars: int = MAX_ANSWER_CHARS,
    workers: int = 8,
) -> list[Grade]:
    """:func:`grade` over ``(task, text)`` pairs, judge requests ``workers`` at a time."""
    if judge is None or workers <= 1:
        return [grade(t, x, judge=judge, max_answer_chars=max_answer_chars) for t, x in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(
            pool.map(
                lambda item: grade(
                    item[0], item[1], judge=judge, max_answer_chars=max_answer_chars
                ),
                items,
            )
        )
