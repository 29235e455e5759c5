"""Statistics that can decide between methods: paired intervals over seeds and verdicts.

A learning benchmark runs every method with the same seeds (and so the same task streams and
initial weights), so method A and method B are compared seed by seed: the per-seed differences
d_s = x_A(s) − x_B(s) remove the seed-to-seed variation that both share. For each pair the mean
difference gets a 95% interval, by a paired t-interval and by a bootstrap over seeds (the
percentile interval of the mean of resampled d); the verdict is **better** when both
intervals lie above 0, **worse** when both lie below, and **not resolved** otherwise. With 5
seeds the percentile bootstrap is too narrow (it ignores the t correction and resamples only 5
values), so it alone would call differences that the t-interval does not support; requiring
both keeps the verdict conservative. The report says how many seeds stand behind each verdict.

A table of many pairs is many tests: with 28 pairs and no true difference anywhere, about 1.4
of them would still be called at the 95% level. So each table is also read as one family:
the paired-t p-values are adjusted by Holm's step-down method (which controls the chance of
any false call in the family at 5%), and the family-wise verdict keeps a pair's verdict only
when its adjusted p is below 0.05.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from agentrl.bench._report import table


def auc(steps: Sequence[float], values: Sequence[float]) -> float:
    """Area under ``values`` over ``steps`` (trapezoids) divided by the step range: the mean
    value over the run, in the units of ``values`` (a success rate stays in [0, 1]).

    Args:
        steps: (T,) increasing x positions (environment steps).
        values: (T,) the curve (e.g. evaluation success).
    """
    x, y = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError("auc needs two equal-length 1-D sequences of at least 2 points")
    if np.any(np.diff(x) <= 0):
        raise ValueError("steps must increase")
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0 / (x[-1] - x[0]))


def t_interval(x: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided t-interval of ``x``; a single value has no interval: (−inf, inf), so
    nothing is ever resolved from one seed."""
    from scipy import stats

    x = np.asarray(x, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return m, -math.inf, math.inf
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return m, m - half, m + half


def interval_cell(x: Sequence[float], fmt: str = ".3f") -> str:
    """``mean [lo, hi]`` with the 95% t-interval of ``x``; ``mean [n/a]`` for a single value
    (one seed has no interval, and a zero-width one would read as certainty)."""
    m, lo, hi = t_interval(x)
    return f"{m:{fmt}} {bounds(lo, hi, fmt)}"


def bounds(lo: float, hi: float, fmt: str = ".3f") -> str:
    """``[lo, hi]``, or ``[n/a]`` when the interval is unbounded (one seed)."""
    return f"[{lo:{fmt}}, {hi:{fmt}}]" if np.isfinite([lo, hi]).all() else "[n/a]"


def bootstrap_interval(
    x: Sequence[float], level: float = 0.95, n_boot: int = 20_000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean and percentile bootstrap interval of the mean of ``x`` (resampling its entries)."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:  # resampling one value gives it back: no interval, as for the t-interval
        return float(x.mean()), -math.inf, math.inf
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    lo, hi = np.quantile(means, [0.5 - level / 2, 0.5 + level / 2])
    return float(x.mean()), float(lo), float(hi)


@dataclass(frozen=True)
class PairVerdict:
    """A − B over paired seeds."""

    a: str
    b: str
    n: int
    mean_diff: float
    boot: tuple[float, float]
    t: tuple[float, float]
    verdict: str
    """``better`` (A > B), ``worse`` (A < B) or ``not resolved``."""
    p: float = math.nan
    """Two-sided p-value of a zero mean difference (:func:`t_p`: the paired t-test, or the
    exact sign test when the differences have no spread)."""
    p_holm: float = math.nan
    """``p`` adjusted over the pair's family by :func:`holm` (NaN until adjusted)."""

    @property
    def verdict_holm(self) -> str:
        """The verdict kept only when the Holm-adjusted p is below 0.05."""
        return self.verdict if self.p_holm < 0.05 else "not resolved"


def verdict(lo: float, hi: float) -> str:
    """``better`` if the interval is above 0, ``worse`` if below, else ``not resolved``."""
    if lo > 0:
        return "better"
    if hi < 0:
        return "worse"
    return "not resolved"


def compare_pair(a: str, b: str, xa: Sequence[float], xb: Sequence[float]) -> PairVerdict:
    """Paired comparison of two methods' per-seed figures (same seed order)."""
    xa, xb = np.asarray(xa, dtype=float), np.asarray(xb, dtype=float)
    if xa.shape != xb.shape:
        raise ValueError(f"{a} and {b} need the same seeds ({len(xa)} vs {len(xb)} values)")
    d = xa - xb
    m, blo, bhi = bootstrap_interval(d)
    _, tlo, thi = t_interval(d)
    p = t_p(d)
    # Both intervals must exclude 0 (see the module docstring). Differences without spread
    # have zero-width intervals, which would read as certainty: their verdict is the sign
    # test's (t_p).
    call = verdict(min(blo, tlo), max(bhi, thi))
    if len(d) > 1 and no_spread(d) and p >= 0.05:
        call = "not resolved"
    return PairVerdict(a, b, len(d), m, (blo, bhi), (tlo, thi), call, p)


def no_spread(d: np.ndarray) -> bool:
    """Whether the differences are one value up to rounding (e.g. 0.3 − 0.2 against 0.1)."""
    return bool(np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())))


def t_p(d: Sequence[float]) -> float:
    """Two-sided p-value of mean(d) = 0: the one-sample t-test; 1 for fewer than 2 values.

    Without spread the t statistic is undefined (0/0 or ±inf): then the exact two-sided sign
    test, p = min(1, 2 · 0.5^n) when every difference is the same non-zero value (n values of
    one sign), and 1 when they are all 0. Three seeds that agree give p = 0.25, not 0: no
    number of agreeing seeds below 6 resolves a pair at 5%.
    """
    from scipy import stats

    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return 1.0
    if no_spread(d):
        return min(1.0, 2.0 * 0.5 ** len(d)) if abs(d.mean()) > 1e-12 else 1.0
    return float(stats.ttest_1samp(d, 0.0).pvalue)


def holm(pairs: Sequence[PairVerdict]) -> list[PairVerdict]:
    """The pairs with ``p_holm`` set: Holm's step-down adjustment of their ``p`` over the
    family. With p sorted ascending, p_(i) becomes max_{j <= i} min(1, (m − j + 1)·p_(j))
    (1-based j, m pairs); the order of the pairs is kept."""
    order = sorted(range(len(pairs)), key=lambda i: pairs[i].p)
    adjusted = [math.nan] * len(pairs)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pairs) - rank) * pairs[i].p))
        adjusted[i] = running
    return [replace(p, p_holm=q) for p, q in zip(pairs, adjusted)]


def all_pairs(values: Mapping[str, Sequence[float]]) -> list[PairVerdict]:
    """Every unordered pair of methods (in the mapping's order), A before B."""
    names = list(values)
    return [
        compare_pair(a, b, values[a], values[b])
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    ]


def pairs_table(pairs: Sequence[PairVerdict], what: str, family: bool = False) -> list[str]:
    """Markdown rows: A − B, mean difference, bootstrap and t intervals, verdict; with
    ``family`` the pairs are one family (:func:`holm`) and the rows add the paired-t p, its
    Holm adjustment and the family-wise verdict. No pairs: a sentence, not an empty table."""
    if family:
        pairs = holm(pairs)
    head = (
        f"| A | B | seeds | mean {what} A − B | 95% bootstrap | 95% paired t | verdict (A vs B) |"
    )
    rule = "|---|---|---:|---:|---|---|---|"
    if family:
        head += " paired-t p | Holm p | verdict, family-wise |"
        rule += "---:|---:|---|"
    rows = []
    for p in pairs:
        row = (
            f"| {p.a} | {p.b} | {p.n} | {p.mean_diff:+.3f} | {bounds(*p.boot, '+.3f')} "
            f"| {bounds(*p.t, '+.3f')} | {p.verdict} |"
        )
        if family:
            row += f" {p.p:.3f} | {p.p_holm:.3f} | {p.verdict_holm} |"
        rows.append(row)
    return table([head, rule], rows, f"No pairs to compare on {what}.")
