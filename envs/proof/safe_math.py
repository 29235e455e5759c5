"""A whitelist parser from formula text to sympy expressions, for text written by a model.

Model text never reaches ``eval``, ``exec``, ``sympify`` or ``parse_expr``: those run Python
(``sympify("__import__('os').system('...')")`` does). This module tokenizes the text itself and
builds sympy objects with sympy's own arithmetic, so a formula can only contain:

- numbers: integers and decimals (``2``, ``2.5`` read exactly as 5/2), at most 15 digits each;
- symbols: single letters from a small set (default: a b c d k m n p q r s t u v w x y z);
- ``+ - * /``, ``^`` or ``**`` for powers, parentheses, and ``sqrt(...)``;
- implicit products: a number, symbol or ``)`` followed by a symbol, ``sqrt`` or ``(``
  (``2x``, ``3(x + 1)``, ``(x + 1)(x - 1)``, ``x y``). A number right after a factor is
  rejected as ambiguous (``x 2``, ``(x + 1)2``), and so are multi-letter names (``xy``: write
  ``x*y``).

Precedence is the usual one: ``^`` binds tightest and groups to the right (``2^3^2`` = 2^9),
then unary minus (``-x^2`` = -(x^2)), then ``*``, ``/`` and implicit products from left to
right (``1/2x`` = x/2), then ``+`` and ``-``.

Bounds keep every formula cheap to compare: exponents are whole numbers in [-16, 16]; the
polynomial degree of a formula (a bound computed while parsing; a quotient counts numerator
plus denominator) is at most 16; a formula uses at most 3 distinct symbols; a numeric value has
at most 60 digits; nesting is at most 40 deep; a formula has at most 400 characters. Division
by an expression that is identically zero is rejected. Everything else (other names, function
calls, attribute access, strings, brackets other than parentheses, ``lambda``) is rejected
with a :class:`MathSyntaxError` whose message says why.

sympy evaluates as it builds (``2*(x + 3)`` becomes ``2*x + 6``, ``x + x`` becomes ``2*x``,
``(x + 1)/(x + 1)`` becomes ``1``). The grader also needs the formula *as written*: a term-by-term
expansion ``x^2 + 3x + 2x + 6`` is a step of its own even though sympy turns it into ``x^2 + 5x
+ 6``. :func:`parse_written` therefore returns, next to the sympy value, the *written form*: a
hashable tree of nested tuples that keeps every term and factor the text has and forgets only
notation (the :data:`Form` docstring lists what it forgets). Both are built in one pass by the
same parser; nothing is evaluated from text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import sympy

MAX_FORMULA_CHARS = 400
MAX_LITERAL_DIGITS = 15
MAX_NUMBER_DIGITS = 60
MAX_EXPONENT = 16
MAX_DEGREE = 16
MAX_SYMBOLS = 3
MAX_DEPTH = 40
DEFAULT_SYMBOLS: frozenset[str] = frozenset("abcdkmnpqrstuvwxyz")
"""Letters read as symbols. e, i, j, o, l are left out (constants or look-alikes) and so are
f, g, h (function names: ``f(x)`` is rejected, not read as f*x)."""
FUNCTIONS: tuple[str, ...] = ("sqrt",)


Form = tuple
"""A formula as written, up to notation (see :func:`form_add` and friends). One of:

- ``("n", p, q)``: the rational p/q (q > 0); literals, decimals (``2.5`` is ``("n", 5, 2)``) and
  the reciprocal of a literal divisor (``x/2`` holds ``("n", 1, 2)``);
- ``("s", name)``: a symbol;
- ``("+", terms)``: a sum of two or more terms, flattened and sorted (``a + (b + c)`` and
  ``c + b + a`` have one form); zero terms are dropped;
- ``("*", factors)``: a product of two or more factors, flattened and sorted; factors 1 are
  dropped, a factor 0 makes the product 0, and the signs of all numeric factors are moved onto
  the first numeric factor (``-(3x)``, ``(-3)x`` and ``-3x`` have one form), but numeric factors
  are never multiplied together (``2*3x`` is not ``6x``, ``15/3`` is not ``5``);
- ``("^", base, k)``: an integer power k != 1 (``x^1`` is ``x``); dividing by a non-number b is
  the factor ``("^", b, -1)``;
- ``("sqrt", arg)``.

So parentheses, spacing, ``*`` versus juxtaposition, the order of terms and factors, ``+ 0``,
``* 1`` and where a minus sign sits do not change the form; anything that takes arithmetic
(collecting like terms, multiplying numbers out, expanding a bracket) does."""


class MathSyntaxError(ValueError):
    """The text is not a formula this parser accepts; the message says why."""


class Token(NamedTuple):
    """One token: ``kind`` is num, name, pow, op, lpar, rpar, eq, sep, pm (``±``, which no
    formula holds: the grader splits it into two) or (lenient mode) bad."""

    kind: str
    text: str
    pos: int


# [0-9] and [A-Za-z], not \d and \w: those also match non-ASCII digits and letters.
_TOKEN = re.compile(
    r"(?P<ws>\s+)"
    r"|(?P<num>[0-9]+(?:\.[0-9]+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<pow>\*\*|\^)"
    r"|(?P<op>[-+*/])"
    r"|(?P<lpar>\()"
    r"|(?P<rpar>\))"
    r"|(?P<eq>=)"
    r"|(?P<sep>[,;])"
    r"|(?P<pm>±)"
)


def tokenize(text: str, *, lenient: bool = False) -> list[Token]:
    """Split ``text`` into tokens.

    Args:
        text: the formula (or, with ``lenient``, a whole line that may hold prose).
        lenient: turn characters no formula uses into ``bad`` tokens instead of raising.

    Raises:
        MathSyntaxError: on a character no formula uses (unless ``lenient``).
    """
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            if not lenient:
                raise MathSyntaxError(f"unexpected character {text[pos]!r} at position {pos}")
            tokens.append(Token("bad", text[pos], pos))
            pos += 1
            continue
        kind = m.lastgroup or ""
        if kind != "ws":
            tokens.append(Token(kind, m.group(), pos))
        pos = m.end()
    return tokens


@dataclass(frozen=True)
class _Value:
    """A parsed sub-formula, a bound on its polynomial degree and its written form."""

    expr: sympy.Expr
    degree: int
    form: Form


class Parsed(NamedTuple):
    """A formula: its sympy value and its written form (:data:`Form`)."""

    expr: sympy.Expr
    form: Form


# -- written forms ------------------------------------------------------------------------------

ZERO: Form = ("n", 0, 1)
ONE: Form = ("n", 1, 1)


def form_number(r: sympy.Rational) -> Form:
    """The form of a rational number."""
    return ("n", int(r.p), int(r.q))


def form_add(a: Form, b: Form) -> Form:
    """The form of ``a + b`` (flattened, sorted, zero terms dropped)."""
    terms = [t for f in (a, b) for t in (f[1] if f[0] == "+" else (f,)) if t != ZERO]
    if not terms:
        return ZERO
    return terms[0] if len(terms) == 1 else ("+", tuple(sorted(terms)))


def form_mul(a: Form, b: Form) -> Form:
    """The form of ``a * b`` (flattened, sorted, factors 1 dropped, signs on the numbers)."""
    factors = [t for f in (a, b) for t in (f[1] if f[0] == "*" else (f,))]
    if ZERO in factors:
        return ZERO
    negative = sum(1 for f in factors if f[0] == "n" and f[1] < 0) % 2 == 1
    numbers = sorted(("n", abs(f[1]), f[2]) for f in factors if f[0] == "n")
    numbers = [f for f in numbers if f != ONE]
    if negative:
        numbers = (
            [("n", -numbers[0][1], numbers[0][2]), *numbers[1:]] if numbers else [("n", -1, 1)]
        )
    out = numbers + sorted(f for f in factors if f[0] != "n")
    if not out:
        return ONE
    return out[0] if len(out) == 1 else ("*", tuple(out))


def form_neg(a: Form) -> Form:
    """The form of ``-a``."""
    return form_mul(("n", -1, 1), a)


def form_pow(a: Form, k: int) -> Form:
    """The form of ``a^k`` for a whole number k."""
    return a if k == 1 else ("^", a, k)


def form_reciprocal(a: Form) -> Form:
    """The form of ``1/a`` (``a`` not zero)."""
    if a[0] == "n":
        sign = -1 if a[1] < 0 else 1
        return ("n", sign * a[2], abs(a[1]))
    if a[0] == "*":
        out = ONE
        for f in a[1]:
            out = form_mul(out, form_reciprocal(f))
        return out
    if a[0] == "^":
        return form_pow(a[1], -a[2])
    return ("^", a, -1)


class _Parser:
    """Recursive descent over the grammar in the module docstring."""

    def __init__(self, tokens: Sequence[Token], symbols: frozenset[str]):
        self.tokens = tokens
        self.i = 0
        self.symbols = symbols
        self.depth = 0

    def parse(self) -> Parsed:
        if not self.tokens:
            raise MathSyntaxError("empty formula")
        value = self.expr()
        if self.i < len(self.tokens):
            raise MathSyntaxError(f"unexpected {self.tokens[self.i].text!r}")
        if len(value.expr.free_symbols) > MAX_SYMBOLS:
            raise MathSyntaxError(f"more than {MAX_SYMBOLS} different symbols")
        return Parsed(value.expr, value.form)

    # -- grammar ---------------------------------------------------------------------------
    def expr(self) -> _Value:
        value = self.term()
        while (tok := self.peek()) is not None and tok.kind == "op" and tok.text in "+-":
            self.i += 1
            right = self.term()
            if tok.text == "+":
                e, form = value.expr + right.expr, form_add(value.form, right.form)
            else:
                e, form = value.expr - right.expr, form_add(value.form, form_neg(right.form))
            value = self.checked(e, max(value.degree, right.degree), form)
        return value

    def term(self) -> _Value:
        value = self.unary()
        while (tok := self.peek()) is not None:
            if tok.kind == "op" and tok.text in "*/":
                self.i += 1
                right = self.unary()
                value = (
                    self.divide(value, right) if tok.text == "/" else self.multiply(value, right)
                )
            elif tok.kind in ("name", "lpar"):
                value = self.multiply(value, self.power())  # implicit product: 2x, x(x + 1)
            elif tok.kind == "num":
                raise MathSyntaxError(
                    f"number {tok.text!r} right after a factor: write an operator (e.g. '*')"
                )
            else:
                break
        return value

    def unary(self) -> _Value:
        tok = self.peek()
        if tok is not None and tok.kind == "op" and tok.text in "+-":
            self.i += 1
            self.enter()
            value = self.unary()
            self.depth -= 1
            if tok.text == "+":
                return value
            return self.checked(-value.expr, value.degree, form_neg(value.form))
        return self.power()

    def power(self) -> _Value:
        base = self.atom()
        tok = self.peek()
        if tok is None or tok.kind != "pow":
            return base
        self.i += 1
        self.enter()
        exponent = self.unary()  # right-associative, and signed exponents (x^-1) are fine
        self.depth -= 1
        return self.raise_to(base, exponent)

    def atom(self) -> _Value:
        tok = self.peek()
        if tok is None:
            raise MathSyntaxError("the formula ends too early")
        self.i += 1
        if tok.kind == "num":
            n = _number(tok.text)
            return _Value(n, 0, form_number(n))
        if tok.kind == "lpar":
            self.enter()
            value = self.expr()
            self.expect_rpar()
            self.depth -= 1
            return value
        if tok.kind == "name":
            name = tok.text.lower()
            if name in self.symbols:
                return _Value(sympy.Symbol(name), 1, ("s", name))
            nxt = self.peek()
            if name in FUNCTIONS and nxt is not None and nxt.kind == "lpar":
                self.i += 1
                self.enter()
                arg = self.expr()
                self.expect_rpar()
                self.depth -= 1
                return self.checked(sympy.sqrt(arg.expr), arg.degree, ("sqrt", arg.form))
            if nxt is not None and nxt.kind == "lpar":
                raise MathSyntaxError(
                    f"function call {tok.text}(...) is not allowed (only {', '.join(FUNCTIONS)})"
                )
            allowed = " ".join(sorted(self.symbols))
            raise MathSyntaxError(
                f"unknown name {tok.text!r}: symbols are single letters ({allowed}); "
                "write products with '*'"
            )
        raise MathSyntaxError(f"unexpected {tok.text!r}")

    # -- helpers ---------------------------------------------------------------------------
    def peek(self) -> Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise MathSyntaxError(f"nested more than {MAX_DEPTH} deep")

    def expect_rpar(self) -> None:
        tok = self.peek()
        if tok is None or tok.kind != "rpar":
            raise MathSyntaxError("missing ')'")
        self.i += 1

    def multiply(self, a: _Value, b: _Value) -> _Value:
        return self.checked(a.expr * b.expr, a.degree + b.degree, form_mul(a.form, b.form))

    def divide(self, a: _Value, b: _Value) -> _Value:
        if is_identically_zero(b.expr):
            raise MathSyntaxError("division by zero")
        form = form_mul(a.form, form_reciprocal(b.form))
        return self.checked(a.expr / b.expr, a.degree + b.degree, form, finite=True)

    def raise_to(self, base: _Value, exponent: _Value) -> _Value:
        k = exponent.expr
        if not k.is_Integer:
            raise MathSyntaxError(f"exponent {k} is not a whole number")
        k = int(k)
        if abs(k) > MAX_EXPONENT:
            raise MathSyntaxError(f"exponent {k} is too large (at most {MAX_EXPONENT} in size)")
        b = base.expr
        if k < 0 and is_identically_zero(b):
            raise MathSyntaxError("division by zero (0 to a negative power)")
        if b.is_Rational:
            # Bound the result's size before sympy computes it.
            digits = max(len(str(abs(b.p))), len(str(b.q)))
            if abs(k) * (digits - 1) > MAX_NUMBER_DIGITS:
                raise MathSyntaxError(f"number too large (more than {MAX_NUMBER_DIGITS} digits)")
        return self.checked(b**k, abs(k) * base.degree, form_pow(base.form, k), finite=True)

    def checked(self, e: sympy.Expr, degree: int, form: Form, finite: bool = False) -> _Value:
        if degree > MAX_DEGREE:
            raise MathSyntaxError(f"degree too high (at most {MAX_DEGREE})")
        if e.is_Rational and max(len(str(abs(e.p))), len(str(e.q))) > MAX_NUMBER_DIGITS:
            raise MathSyntaxError(f"number too large (more than {MAX_NUMBER_DIGITS} digits)")
        if finite and e.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
            raise MathSyntaxError("division by zero")
        return _Value(e, degree, form)


def _number(text: str) -> sympy.Rational:
    digits = text.replace(".", "")
    if len(digits) > MAX_LITERAL_DIGITS:
        raise MathSyntaxError(f"number {text[:20]}... has more than {MAX_LITERAL_DIGITS} digits")
    # Decimals are exact ("2.5" is 5/2, never a float), built from Python ints: no text
    # ever reaches a sympy constructor.
    whole, _, frac = text.partition(".")
    return sympy.Rational(int(whole + frac), 10 ** len(frac))


def as_polynomial(e: sympy.Expr) -> sympy.Poly | None:
    """``e`` as a polynomial over the rationals in its symbols; None if it is not one (or has
    no symbols)."""
    gens = sorted(e.free_symbols, key=str)
    if not gens:
        return None
    try:
        p = sympy.Poly(e, *gens)
    except sympy.PolynomialError:
        return None
    return p if p.domain.is_ZZ or p.domain.is_QQ else None


def is_identically_zero(e: sympy.Expr) -> bool:
    """Whether ``e`` is zero as a rational function of its symbols (``(x + 1)^2 - x^2 - 2x -
    1`` is). Polynomials, the usual case, take a fast exact path through ``Poly``; anything else
    goes through ``sympy.cancel``."""
    # Structural tests only: sympy's assumption queries (``e.is_zero``) are slow.
    if e == 0:
        return True
    if not e.free_symbols:
        return sympy.expand(e) == 0  # e.g. (1 + sqrt(2))^2 - 3 - 2 sqrt(2)
    p = as_polynomial(e)
    if p is not None:
        return p.is_zero
    return sympy.cancel(e) == 0


def parse_written(tokens: Sequence[Token], symbols: Iterable[str] = DEFAULT_SYMBOLS) -> Parsed:
    """The sympy expression and the written form (:data:`Form`) of a token list.

    Raises:
        MathSyntaxError: if the tokens are not a formula within the bounds of this module.
    """
    for tok in tokens:
        if tok.kind == "bad":
            raise MathSyntaxError(f"unexpected character {tok.text!r}")
        if tok.kind in ("eq", "sep", "pm"):
            raise MathSyntaxError(f"unexpected {tok.text!r} inside a formula")
    return _Parser(tokens, frozenset(symbols)).parse()


def parse_tokens(tokens: Sequence[Token], symbols: Iterable[str] = DEFAULT_SYMBOLS) -> sympy.Expr:
    """The sympy expression of a token list (from :func:`tokenize`).

    Raises:
        MathSyntaxError: if the tokens are not a formula within the bounds of this module.
    """
    return parse_written(tokens, symbols).expr


def parse_expression(text: str, symbols: Iterable[str] = DEFAULT_SYMBOLS) -> sympy.Expr:
    """Parse one formula, e.g. ``"(x + 1)^2 - 2x"``, into a sympy expression.

    Raises:
        MathSyntaxError: if ``text`` is not a formula of the grammar in the module docstring or
            breaks one of its bounds; the message says which.
    """
    if not isinstance(text, str):
        raise MathSyntaxError(f"a formula must be text, not {type(text).__name__}")
    if len(text) > MAX_FORMULA_CHARS:
        raise MathSyntaxError(f"formula longer than {MAX_FORMULA_CHARS} characters")
    return parse_tokens(tokenize(text), symbols)
