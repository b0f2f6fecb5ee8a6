"""The budget burn-down as an inline SVG chart (no script, no external resource): a pure function of numbers.

x: the charge number (1 = the run's first charge, in ledger order); y: ε at the run's δ. The step function is the
budget filter's bound after each charge: the level of charge i is drawn over (i - 1, i], ending in a dot at i; the
horizontal lines are the budget ε and the certified claim (all charges composed again by the session's accountant).
A run with more charges than the plot has pixel columns is drawn at pixel resolution: the bound never decreases, so
the last value in each column is the column's top and nothing visible is lost.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from dpaudit.display import show_delta

WIDTH, HEIGHT = 760, 360
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 20, 100
_PLOT_W, _PLOT_H = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM


def nice_ticks(top: float, target: int = 5) -> list[float]:
    """Tick values 0, s, 2s, … ≤ ``top``: the smallest s of 1, 2, 2.5, 5 × 10^k giving at most ``target`` + 1."""
    if top <= 0:
        return [0.0]
    raw = top / (target + 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(top / step + 1e-9) + 1)]


def _label(value: float) -> str:
    return f"{value:.6g}"


def _line(y: float, colour: str, dash: str) -> str:
    return (f'<line x1="{_LEFT}" x2="{_LEFT + _PLOT_W}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}" '
            f'stroke-width="1.5" stroke-dasharray="{dash}"/>')


def burn_down_svg(bounds: Sequence[float], budget: float, claim: float | None, claim_text: str, delta: str) -> str:
    """The burn-down chart.

    Args:
        bounds: the budget filter's ε bound after each charge, in order.
        budget: the budget ε.
        claim: the certified ε (None while the run is open).
        claim_text: the certified ε as the report shows it (rounded up).
        delta: the run's δ as the report shows it.
    """
    n = len(bounds)
    finite = [b for b in bounds if math.isfinite(b)]
    y_top = max([budget, claim or 0.0, *finite, 1e-12]) * 1.08
    x_top = max(n, 1)

    def x(i: float) -> float:
        return _LEFT + i / x_top * _PLOT_W

    def y(v: float) -> float:
        return _TOP + _PLOT_H - min(v, y_top) / y_top * _PLOT_H

    columns = sorted({min(n, max(1, round(c * n / _PLOT_W))) for c in range(1, _PLOT_W + 1)}) if n > _PLOT_W \
        else range(1, n + 1)
    path = f"M{x(0):.1f},{y(0):.1f}" + "".join(f"V{y(bounds[i - 1]):.1f}H{x(i):.1f}" for i in columns)
    markers = "".join(f'<circle cx="{x(i):.1f}" cy="{y(bounds[i - 1]):.1f}" r="3" fill="#222"/>'
                      for i in range(1, n + 1)) if n <= 60 else ""
    x_ticks = nice_ticks(x_top, 10)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="budget burn-down: epsilon after each charge" class="chart">',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{_PLOT_W}" height="{_PLOT_H}" fill="#fff" stroke="#888"/>',
    ]
    for t in nice_ticks(y_top):
        parts.append(f'<line x1="{_LEFT - 5}" x2="{_LEFT + _PLOT_W}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#e5e5e5"/>'
                     f'<text x="{_LEFT - 8}" y="{y(t) + 4:.1f}" text-anchor="end">{_label(t)}</text>')
    for t in x_ticks:
        if t == int(t):
            parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{_TOP + _PLOT_H}" y2="{_TOP + _PLOT_H + 5}" '
                         f'stroke="#444"/><text x="{x(t):.1f}" y="{_TOP + _PLOT_H + 19}" '
                         f'text-anchor="middle">{int(t)}</text>')
    parts += [
        f'<text x="{_LEFT + _PLOT_W / 2:.1f}" y="{_TOP + _PLOT_H + 40}" text-anchor="middle">charge number '
        "(in ledger order)</text>",
        f'<text transform="translate(18,{_TOP + _PLOT_H / 2:.1f}) rotate(-90)" text-anchor="middle">'
        f"ε at δ = {html.escape(delta)}</text>",
        _line(y(budget), "#c0392b", "8,4"),
        "" if claim is None else _line(y(claim), "#2463c7", "3,3"),
        f'<path d="{path}" fill="none" stroke="#222" stroke-width="2"/>{markers}',
    ]
    legend = [("#222", "", "budget filter's bound after each charge (step)"),
              ("#c0392b", "8,4", f"budget ε = {show_delta(budget)}")]
    if claim is not None:
        legend.append(("#2463c7", "3,3", f"certified claim ε = {html.escape(claim_text)}"))
    for k, (colour, dash, text) in enumerate(legend):
        ly = _TOP + _PLOT_H + 62 + 15 * k
        parts.append(f'<line x1="{_LEFT}" x2="{_LEFT + 28}" y1="{ly - 4}" y2="{ly - 4}" stroke="{colour}" '
                     f'stroke-width="2" stroke-dasharray="{dash}"/><text x="{_LEFT + 34}" y="{ly}">{text}</text>')
    parts.append("</svg>")
    return "".join(parts)
