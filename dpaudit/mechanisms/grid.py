"""Exact rounding of a real value to the grid γ·Z.

Every discrete-noise release rounds its input to the nearest grid point before adding integer noise (Canonne,
Kamath & Steinke 2020, Sec. 5). The rounding is done on :class:`fractions.Fraction` (a float is an exact
rational), so it never depends on floating-point error. For any deterministic nearest-point rule,
|round(a) − round(b)| ≤ ⌊|a − b|/γ⌋ + 1 grid units, the bound that :func:`dpaudit.privacy_maps.grid_sensitivity`
charges for.

A noise scale b is turned into grid units by :func:`scale_in_grid_units`, the larger of the two readings of b/γ
(the float quotient that :mod:`dpaudit.privacy_maps` uses and the exact quotient of the two floats), so the noise
drawn is never smaller than what any reading of a recorded event assumes.
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_positive


def round_to_grid(value: float, grid: float) -> int:
    """The nearest grid point to ``value``, in grid units (ties go to the even integer, as :func:`round`).

    Args:
        value: a finite real number (int or float; converted to a Fraction exactly).
        grid: the spacing γ > 0.

    Returns:
        The integer k minimising |value − k·γ|.

    Raises:
        InvalidParameter: ``value`` is not a finite number, or ``grid`` is not a finite number > 0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidParameter(f"value must be a real number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameter(f"value must be finite, got {value!r}")
    check_positive("grid", grid)
    return round(Fraction(value) / Fraction(grid))


def scale_in_grid_units(scale: float, grid: float) -> Fraction:
    """max(float(scale / grid), Fraction(scale) / Fraction(grid)), exactly: a noise scale in grid units.

    Args:
        scale: a noise scale b > 0 in value units.
        grid: the spacing γ > 0.

    Raises:
        InvalidParameter: ``scale`` or ``grid`` is not a finite number > 0.
    """
    scale = check_positive("scale", scale)
    grid = check_positive("grid", grid)
    return max(Fraction(scale / grid), Fraction(scale) / Fraction(grid))
