"""Learning curves as inline SVG line charts: one chart per metric, one line per run.

Axes are shared across runs (``--compare``): x is the iteration of ``metrics.jsonl``, y spans
every run's values of the metric. Each point carries a ``<title>`` (hover shows the run,
iteration and value); ticks are "nice" round numbers.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
"""Colours of runs, in order (a run keeps its colour on every chart)."""

W, H = 300, 170
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 26, 34

# The metrics shown first, in this order (when the run logged them); the rest follow under
# "all metrics".
KEY_METRICS = (
    "env/success",
    "eval/success",
    "env/return",
    "env/invalid_rate",
    "env/length",
    "loss/approx_kl",
    "loss/kl",
    "loss/entropy",
    "credit/adv_std",
    "credit/nonsingleton_frac",
    "perf/iteration_s",
    "perf/gen_tokens_per_s",
)


def nice_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi == lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step - 1e-9) * step
    out = []
    v = start
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def _tick_text(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-3:
        return f"{v:.1e}"
    return f"{v:.4g}"


def line_chart(
    key: str, series: Sequence[tuple[str, Sequence[tuple[float, float]]]], colours: Sequence[str]
) -> str:
    """One metric's chart: ``series`` = [(run label, [(iteration, value), ...]), ...]."""
    pts = [(x, y) for _, s in series for x, y in s if math.isfinite(y)]
    if not pts:
        return ""
    x_lo, x_hi = min(p[0] for p in pts), max(p[0] for p in pts)
    y_lo, y_hi = min(p[1] for p in pts), max(p[1] for p in pts)
    if y_hi == y_lo:
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x_lo) / (x_hi - x_lo) * pw

    def sy(y: float) -> float:
        return TOP + (1 - (y - y_lo) / (y_hi - y_lo)) * ph

    out = [
        f'<svg class="chart" data-metric="{html.escape(key)}" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" xmlns="http://www.w3.org/2000/svg">',
        f'<text class="chart-title" x="{LEFT}" y="16">{html.escape(key)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for v in nice_ticks(y_lo, y_hi):
        y = sy(v)
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>'
        )
        out.append(
            f'<text class="tick" x="{LEFT - 4}" y="{y + 3:.1f}" text-anchor="end">'
            f"{_tick_text(v)}</text>"
        )
    for v in nice_ticks(x_lo, x_hi, 5):
        if abs(v - round(v)) > 1e-9:
            continue  # iterations are whole numbers
        x = sx(v)
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{TOP + ph + 14}" text-anchor="middle">'
            f"{round(v)}</text>"
        )
    out.append(
        f'<text class="tick" x="{LEFT + pw / 2:.0f}" y="{H - 4}" '
        'text-anchor="middle">iteration</text>'
    )
    for (label, s), colour in zip(series, colours):
        s = [(x, y) for x, y in s if math.isfinite(y)]
        if not s:
            continue
        d = " ".join(
            f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(s)
        )
        out.append(f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
        for x, y in s:
            tip = html.escape(f"{label}\niteration {x:g}: {y:.6g}")
            out.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.6" fill="{colour}">'
                f"<title>{tip}</title></circle>"
            )
    out.append("</svg>")
    return "".join(out)


def metric_series(rows: Sequence[dict], key: str) -> list[tuple[float, float]]:
    """(iteration, value) of ``key`` in ``metrics.jsonl`` rows that have it."""
    out = []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append((float(r["iteration"]), float(v)))
    return out


def ordered_keys(runs_rows: Sequence[Sequence[dict]]) -> tuple[list[str], list[str]]:
    """(key metrics present, every other metric) over the runs' rows."""
    keys: set[str] = set()
    for rows in runs_rows:
        for r in rows:
            keys.update(k for k, v in r.items() if k != "iteration" and isinstance(v, (int, float)))
    first = [k for k in KEY_METRICS if k in keys]
    rest = sorted(keys - set(first))
    return first, rest


def legend(labels: Sequence[str], colours: Sequence[str]) -> str:
    items = "".join(
        f'<span class="legend-item"><span class="swatch" style="background:{c}"></span>'
        f"{html.escape(lbl)}</span>"
        for lbl, c in zip(labels, colours)
    )
    return f'<div class="legend">{items}</div>'
