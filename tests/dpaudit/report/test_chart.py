"""The burn-down chart: axes with ticks and units, a rising step function, budget and certified-claim lines, legend."""

from __future__ import annotations

import re

from dpaudit.report.chart import _LEFT, _PLOT_H, _PLOT_W, _TOP, burn_down_svg, nice_ticks


def _levels(svg: str) -> list[tuple[float, float]]:
    """(x, y) after each ``V`` (a level's height) ``H`` (its right end) pair of the step path."""
    path = re.search(r'<path d="([^"]+)"', svg).group(1)
    return [(float(x), float(y)) for y, x in re.findall(r"V([\d.]+)H([\d.]+)", path)]


def test_nice_ticks():
    assert nice_ticks(5.4) == [0, 1, 2, 3, 4, 5]
    assert [round(t, 9) for t in nice_ticks(0.27)] == [0, 0.05, 0.1, 0.15, 0.2, 0.25]
    assert nice_ticks(12, 10) == [0, 2, 4, 6, 8, 10, 12]


def test_the_step_function_rises_at_each_charge_and_ends_at_the_last_bound():
    bounds = [1.3, 1.3, 4.8]
    svg = burn_down_svg(bounds, budget=5.0, claim=4.59, claim_text="4.59", delta="1e-05")
    levels = _levels(svg)
    assert [x for x, _ in levels] == [round(_LEFT + i / 3 * _PLOT_W, 1) for i in (1, 2, 3)]
    top = 5.0 * 1.08
    assert [y for _, y in levels] == [round(_TOP + _PLOT_H - b / top * _PLOT_H, 1) for b in bounds]
    for label in ("charge number", "ε at δ = 1e-05", "budget ε = 5", "certified claim ε = 4.59",
                  ">0<", ">1<", ">2<", ">3<", ">4<", ">5<"):
        assert label in svg, label
    assert svg.count("stroke-dasharray=\"8,4\"") == 2 and svg.count("stroke-dasharray=\"3,3\"") == 2  # line + legend


def test_an_open_run_has_no_claim_line_and_an_empty_run_draws_axes():
    assert "certified claim" not in burn_down_svg([0.5], budget=1.0, claim=None, claim_text="", delta="1e-06")
    assert "charge number" in burn_down_svg([], budget=1.0, claim=None, claim_text="", delta="1e-06")


def test_many_charges_are_drawn_at_pixel_resolution_without_losing_the_top():
    bounds = [i / 100_000 for i in range(1, 100_001)]
    svg = burn_down_svg(bounds, budget=2.0, claim=0.9, claim_text="0.9", delta="1e-06")
    levels = _levels(svg)
    assert len(levels) <= _PLOT_W and levels[-1][0] == _LEFT + _PLOT_W
    assert levels[-1][1] == round(_TOP + _PLOT_H - 1.0 / 2.16 * _PLOT_H, 1)
    ys = [y for _, y in levels]
    assert ys == sorted(ys, reverse=True)  # a rising curve (SVG y grows downwards)
