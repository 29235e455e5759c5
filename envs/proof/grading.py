"""Grading an answer: 0-7 points, by the mechanical rubric (derivations) or the judge (files).

**What is graded.** :func:`extract_answer` keeps the text after the last ``</think>`` (nothing,
if reasoning was opened and never closed) and, when ``<action>...</action>`` tags are present,
the content of the last pair. The answer is *gradable* when it is non-empty, at most
``max_answer_chars`` long and its *legible* lines hold at least half of its non-space
characters. A legible line is made of printable ASCII (plus common math symbols such as − ×
≤ √ π), holds a letter or digit, and has no run of more than 400 characters without a space.
Anything else (empty text, control characters, random bytes, mojibake, one endless word,
text mostly in other scripts) is not an answer: :func:`grade` returns ``valid=False`` and no
points, and the environment reports an invalid action. Prose without a single formula is
gradable: it earns 0.

**Reading a derivation.** Each line of the answer is read on its own:

1. Common Unicode and LaTeX spellings become ASCII (− × · ÷ ² ³ ``\\cdot`` ``\\times``), ``$``
   and backticks are dropped, everything is lowercased (``X`` is ``x``), a leading list marker
   (``1.``, ``2)``, ``(3)``, ``-``, ``*``, ``•``) and trailing ``. , ; ! ?`` are dropped.
2. Words (names that are not symbols or ``sqrt``) and characters no formula uses (``:``,
   ``.`` after a number, ...) split the line into segments: "Subtract 5 to get 3x = 15, so x
   = 5" gives ``3x = 15`` and ``x = 5``. On a line with words only segments holding ``=``
   count; a line without words may also be a bare formula.
3. ``A = B = C`` gives the formulas A, B, C; a segment starting with ``=`` continues from the
   formula before it. Parts separated by ``,`` ``;`` or ``and`` are read in order.
   In equation tasks each ``=`` after the first rewrites the right side (``x = 15/3 = 5`` is
   ``x = 15/3`` then ``x = 5``), ``= B`` keeps the previous left side, and ``or`` joins
   clauses into one equation (``x - 2 = 0 or x - 3 = 0``; so do ``,`` and ``and`` when every
   clause is ``variable = number``: ``x = 2, x = 3``).
4. Formulas are parsed by :mod:`.safe_math`. A segment that does not parse is *unreadable*: it
   is reported in the details and skipped (it neither earns nor breaks anything). A segment
   without a variable that does not start with ``=`` is a numeric check ("3*5 + 5 = 20"):
   skipped. At most 60 formulas are read.

**The chain** is the task's start S (the given expression or equation) followed by the
formulas read. A step from formula a to formula b is

- *same* when b has the shape of a: equal after sympy's automatic evaluation (reordering,
  combining like terms and numbers, multiplying a number into a bracket, cancelling a common
  factor: ``2*(2x)`` is ``4x``) and after moving numbers out of the brackets of a product
  (``2(x + 2)(x + 3)/2`` is ``(x + 2)(x + 3)``); an equation with its sides swapped is the
  same equation. Same steps are allowed and count for nothing;
- *valid* otherwise when a and b are equal as rational functions (``cancel(a - b) == 0``), or,
  for equations, when the products of (left - right) over their clauses differ by a nonzero
  constant factor (so adding the same term to both sides, dividing by a nonzero number,
  factoring and splitting a product into ``or`` clauses are valid; dividing by ``x`` or
  dropping a solution is not; ``0 = 0`` is never valid);
- *wrong* otherwise. The *valid prefix* is the chain up to the first wrong step.

**The rubric.** With T the target (the right side of an identity, the expanded polynomial of a
``simplify`` task, the solved form ``x = v`` / ``x = a or x = b`` of an equation; matched by
shape, so ``6 + 5x + x^2`` matches ``x^2 + 5x + 6``, but ``x(x + 5) + 6`` does not):

- **7 points**: the whole chain is valid (no wrong step), its last formula is T, and it shows
  at least ``min_intermediates`` distinct intermediate formulas (0 at difficulty 1, else 1);
- **otherwise** ``min(I, 3) + R`` points, where I counts the distinct formulas of the valid
  prefix other than S and T (correct intermediate steps) and R is 1 if the valid prefix
  reached T. So at most 4 points without a complete chain; restating the claim earns 1.

An identity proved from right to left (the first formula read is T) is read reversed.

Golden examples, for "Show that (x + 2)(x + 3) = x^2 + 5x + 6" at difficulty 2:

====================================================================  ======
answer                                                                points
====================================================================  ======
``(x + 2)(x + 3) = x(x + 3) + 2(x + 3) = x^2 + 5x + 6``              7
``x^2 + 5x + 6 = x(x + 3) + 2(x + 3) = (x + 2)(x + 3)`` (reversed)   7
``(x + 2)(x + 3) = x(x + 3) + 2(x + 3)`` (stops early)               1
``(x + 2)(x + 3) = x^2 + 5x + 6`` (no intermediate step)             1
``(x + 2)(x + 3) = x(x + 3) + 2(x + 3) = x^2 + 6x + 6``              1
``... = x^2 + 5x + 6 = 7x`` (reaches T, then a wrong step)           2
``(x + 2)(x + 3) = x^2 + 6x + 6``                                    0
``I think this is true.`` (prose only)                               0
====================================================================  ======
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import sympy

from .config import MAX_ANSWER_CHARS, MAX_POINTS
from .safe_math import (
    DEFAULT_SYMBOLS,
    FUNCTIONS,
    MathSyntaxError,
    Token,
    as_polynomial,
    is_identically_zero,
    parse_tokens,
    tokenize,
)

if TYPE_CHECKING:
    from .judge import JudgeClient
    from .tasks import ProofTask

MAX_FORMULAS = 60
MAX_INTERMEDIATE_POINTS = 3
MAX_LINE_CHARS = 400
MAX_WORD_CHARS = 400
_MATH_UNICODE = frozenset("−–—×·⋅÷≤≥≠≈±∓→⇒⇔∈∉⊂⊆∪∩∀∃√∞∑∏∫πθαβγδελμσφω²³°′…ℝℕℤℚℂ∠△")
_ACTION_OPEN = re.compile("<action>", re.IGNORECASE)
_ACTION_CLOSE = re.compile("</action>", re.IGNORECASE)
_REPLACE: tuple[tuple[str, str], ...] = (
    ("\\cdot", "*"), ("\\times", "*"), ("\\left", ""), ("\\right", ""),
    ("\\(", ""), ("\\)", ""), ("\\[", ""), ("\\]", ""), ("$", ""), ("`", ""),
    ("−", "-"), ("–", "-"), ("×", "*"), ("·", "*"), ("⋅", "*"), ("÷", "/"),
    ("²", "^2"), ("³", "^3"),
)  # fmt: skip
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


# -- reading formulas --------------------------------------------------------------------------


@dataclass(frozen=True)
class Formula:
    """One formula of the chain: an expression, or an equation (a disjunction of clauses)."""

    line: int
    """1-based line of the answer (0 for the task's own start and target)."""
    key: Hashable
    """The shape (see :func:`_shape`): of the expression, or the set of unordered clause sides.
    Two formulas with one shape are the *same* formula for the rubric."""
    value: sympy.Expr
    """The expression, or the product of (left - right) over the clauses."""
    left: sympy.Expr | None = None
    """Equations: the left side of the first clause (``= B`` lines continue from it)."""
    text: str = ""
    """The formula as written (normalized, at most 120 characters), for the grade details."""


@dataclass(frozen=True)
class _Side:
    expr: sympy.Expr | None
    """None for the empty first side of a ``= B`` line."""
    text: str


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
    return Formula(line, key, value, clauses[0][0].expr, _shorten(text))


def _normalize(raw: str) -> str:
    s = raw
    for old, new in _REPLACE:
        s = s.replace(old, new)
    s = _BULLET.sub("", s.lower().strip())
    return s.rstrip(" \t.,;!?")


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
                out.append(_Side(parse_tokens(part, self.symbols), text))
            except MathSyntaxError as exc:
                raise UnreadableLine(f"{text[:60]!r}: {exc}") from exc
        return out

    def expressions(self, tokens: Sequence[Token], bare: bool) -> list[Formula]:
        """The formulas of ``A = B = C`` parts; parts without ``=`` only if ``bare``."""
        out = []
        for part in _split(tokens, lambda t: _is_sep(t, ("and",))):
            if not part or not (bare or any(t.kind == "eq" for t in part)):
                continue
            for side in self.sides(part):
                if side.expr is not None:
                    f = Formula(self.line, _shape(side.expr), side.expr, None, _shorten(side.text))
                    out.append(f)
        return out

    def clause(self, part: Sequence[Token]) -> tuple[_Side, _Side]:
        sides = self.sides(part)
        if len(sides) != 2 or sides[0].expr is None:
            raise UnreadableLine("each clause of a list of equations must be one 'A = B'")
        return sides[0], sides[1]

    def equations(self, tokens: Sequence[Token], prev_left: sympy.Expr | None) -> list[Formula]:
        if any(t.kind == "name" and t.text == "or" for t in tokens):
            parts = _split(tokens, lambda t: _is_sep(t, ("or", "and")))
            return [_equation([self.clause(p) for p in parts if p], self.line)]
        parts = [p for p in _split(tokens, lambda t: _is_sep(t, ("and",))) if p]
        if len(parts) >= 2:
            try:
                clauses = [self.clause(p) for p in parts]
            except UnreadableLine:
                clauses = []
            if clauses and all(_is_solved(a.expr, b.expr) for a, b in clauses):
                return [_equation(clauses, self.line)]  # a list of solutions: x = 2, x = 3
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


def read_line(
    raw: str,
    line: int,
    kind: str,
    prev_left: sympy.Expr | None,
    symbols: Iterable[str] = DEFAULT_SYMBOLS,
) -> LineRead:
    """The formulas of one answer line for a task of ``kind`` (rules in the module docstring).

    Args:
        raw: the line.
        line: its 1-based number (recorded in the formulas).
        kind: ``identity``, ``simplify`` or ``equation``.
        prev_left: equations: the left side a ``= B`` line continues from.
        symbols: letters read as symbols.
    """
    symbols = frozenset(symbols)
    s = _normalize(raw)
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
    for segment in _split(tokens, is_word):
        segment = _trim(segment, joiners)
        if not segment or (has_words and not any(t.kind == "eq" for t in segment)):
            continue  # prose, or a bare formula inside prose ("multiply by 3")
        try:
            if kind == "equation":
                got = reader.equations(segment, prev_left)
            else:
                got = reader.expressions(segment, bare=not has_words)
        except UnreadableLine as exc:
            unreadable.append(str(exc))
            continue
        if segment[0].kind != "eq" and all(not f.value.free_symbols for f in got):
            continue  # a numeric check such as "3*5 + 5 = 20"
        formulas.extend(got)
        if got and got[-1].left is not None:
            prev_left = got[-1].left
    return LineRead(formulas, unreadable)


def _trim(segment: list[Token], joiners: Sequence[str]) -> list[Token]:
    """Drop separators and operators no formula starts or ends with (Markdown ``**bold**``
    leaves ``**`` around a formula; "so, x = 5" leaves a comma)."""
    i, j = 0, len(segment)
    while i < j and (
        _is_sep(segment[i], joiners)
        or segment[i].kind == "pow"
        or (segment[i].kind == "op" and segment[i].text in "*/")
    ):
        i += 1
    while j > i and (_is_sep(segment[j - 1], joiners) or segment[j - 1].kind in ("pow", "op")):
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


def _task_formula(text: str, kind: str, symbols: frozenset[str]) -> Formula:
    formulas = read_line(text, 0, kind, None, symbols).formulas
    if len(formulas) != 1:
        raise ValueError(f"task formula {text!r} reads as {len(formulas)} formulas, not 1")
    return formulas[0]


def grade_derivation(task: ProofTask, answer: str) -> Grade:
    """Grade ``answer`` (already extracted) for a derivation task by the rubric above."""
    d = task.derivation
    if d is None:
        raise ValueError(f"task {task.id!r} has no derivation to check against")
    symbols = frozenset(DEFAULT_SYMBOLS | {d.variable})
    start = _task_formula(d.start, d.kind, symbols)
    target = _task_formula(d.target, d.kind, symbols)
    formulas: list[Formula] = []
    notes: list[dict[str, Any]] = []
    prev_left = start.left
    for n, raw in enumerate(answer.splitlines(), 1):
        if len(formulas) >= MAX_FORMULAS:
            notes.append({"line": n, "status": "unread", "note": f"after {MAX_FORMULAS} formulas"})
            break
        read = read_line(raw, n, d.kind, prev_left, symbols)
        notes.extend({"line": n, "status": "unreadable", "note": why} for why in read.unreadable)
        got = read.formulas
        formulas.extend(got[: MAX_FORMULAS - len(formulas)])
        if got and got[-1].left is not None:
            prev_left = got[-1].left
    if d.kind != "equation" and formulas and formulas[0].key == target.key != start.key:
        formulas.reverse()  # a proof from the right side to the left side
    prev, intermediates, reached, steps = start, set(), False, 0
    first_error: str | None = None
    for f in formulas:
        if first_error is not None:
            notes.append({"line": f.line, "status": "unchecked", "formula": f.text})
            continue
        if f.key == prev.key:
            notes.append({"line": f.line, "status": "same", "formula": f.text})
            continue
        why = step_check(d.kind, prev, f)
        if why is not None:
            first_error = f"line {f.line}: {f.text} is {why}"
            notes.append({"line": f.line, "status": "wrong", "formula": f.text, "note": why})
            continue
        steps += 1
        if f.key == target.key:
            reached = True
        elif f.key != start.key:
            intermediates.add(f.key)
        notes.append({"line": f.line, "status": "step", "formula": f.text})
        prev = f
    complete = (
        first_error is None
        and bool(formulas)
        and prev.key == target.key
        and len(intermediates) >= d.min_intermediates
    )
    if complete:
        points = MAX_POINTS
    else:
        points = min(len(intermediates), MAX_INTERMEDIATE_POINTS) + int(reached)
    notes.sort(key=lambda x: x["line"])
    details = {
        "kind": d.kind,
        "difficulty": d.difficulty,
        "steps": steps,
        "intermediates": len(intermediates),
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
