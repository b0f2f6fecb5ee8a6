"""The grid γ·Z that every discrete-noise release lives on: exact rounding, its sensitivity cost, grid units.

Every discrete-noise release rounds its input to the nearest grid point before adding integer noise (Canonne,
Kamath & Steinke 2020, Sec. 5; this avoids the floating-point attack of Mironov 2012). The rounding is done on
:class:`fractions.Fraction` (a float is an exact rational), so it never depends on floating-point error.

Sensitivity after rounding. For any deterministic nearest-point rule, |round(a) − round(b)| ≤ ⌊|a − b|/γ⌋ + 1
grid units per coordinate. Hence, for a sensitivity Δ (value units) over d coordinates,

* L1: ‖r(x) − r(x')‖₁ ≤ Σ_i (⌊d_i⌋ + 1) ≤ ⌊Δ/γ⌋ + d,
* L2: ‖r(x) − r(x')‖₂ ≤ ‖d‖₂ + √d ≤ Δ/γ + √d (triangle inequality), and ⌊Δ/γ⌋ + 1 when d = 1,

which :func:`grid_sensitivity` returns and the privacy maps charge. With γ = Δ/2¹⁰ (:func:`default_grid`) the
inflation is under 0.1 % for a scalar.

Noise scale in grid units. The privacy maps read a noise scale b in grid units as the float quotient b/γ; the exact
quotient of the two floats may differ from it in the last bit. :func:`scale_in_grid_units` takes the larger of the
two for the noise actually drawn, so the noise released is never smaller than what any reading of a recorded event
assumes (and the calibrations guarantee the target for the smaller one,
:func:`~dpaudit.mechanisms.numerics.grid_units_lower`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import Norm
from dpaudit.validation import check_count, check_positive

#: default grid: γ = Δ / 2¹⁰
_GRID_DIVISOR = 2**10


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


def grid_sensitivity(sensitivity: float, grid: float, dimension: int, norm: Norm | str) -> float:
    """Sensitivity in grid units after rounding to ``grid``·Z (see the module docstring for the derivation).

    Args:
        sensitivity: Δ in value units.
        grid: spacing γ of the grid.
        dimension: number of coordinates d.
        norm: ``l1`` or ``l2``.

    Returns:
        An upper bound on the distance between the rounded neighbouring values, in grid units.

    Raises:
        InvalidParameter: a parameter out of its domain, or a bound in grid units that overflows a float.
    """
    check_positive("sensitivity", sensitivity)
    check_positive("grid", grid)
    check_count("dimension", dimension)
    ratio = sensitivity / grid
    norm = Norm(norm)
    try:
        if norm is Norm.L1 or dimension == 1:
            # The next float above the ratio guards against ⌊·⌋ of a ratio rounded down by division.
            units = float(math.floor(math.nextafter(ratio, math.inf)) + dimension)
        else:
            units = math.nextafter(ratio + math.sqrt(dimension), math.inf)
    except OverflowError:  # Δ/γ is infinite, or the dimension beyond the float range
        units = math.inf
    if math.isinf(units):
        raise InvalidParameter(f"the sensitivity {sensitivity!r} over {dimension} coordinate(s) is too many grid "
                               f"units of {grid!r} for a float: use a coarser grid")
    return units


def default_grid(sensitivity: float) -> float:
    """The session's default grid γ = Δ/2¹⁰ (exact: division by a power of two).

    Rounding to γ·Z inflates a scalar sensitivity from Δ/γ = 1024 to ⌊1024⌋ + 1 = 1025 grid units, i.e. by
    1/1024 < 0.1 %. For d coordinates the inflation is d/1024 in L1 and √d/1024 in L2 (:func:`grid_sensitivity`);
    callers releasing many coordinates may pass a finer grid.
    """
    grid = check_positive("sensitivity", sensitivity) / _GRID_DIVISOR
    if grid == 0.0:
        raise InvalidParameter(f"the default grid sensitivity/2**10 underflows to 0 for sensitivity {sensitivity!r}: "
                               "pass a grid")
    return grid


#: a coordinate whose quotient value/γ is this large, or within this of a rounding tie, is rounded exactly
_FAST_QUOTIENT_LIMIT = 2.0**40
_TIE_MARGIN = 2.0**-12
#: chunk of coordinates processed at once by :func:`add_grid_noise` (bounds its temporary memory)
_CHUNK = 2**18


def round_to_grid_array(values: np.ndarray, grid: float) -> np.ndarray:
    """:func:`round_to_grid` of every entry of a 1-d numeric array, exactly, as int64 (object if too large).

    The float quotient q = fl(v/γ) is within |q|·2⁻⁵³ of v/γ. Where |q| < 2⁴⁰ and q is more than 2⁻¹² from a
    rounding tie, that error (< 2⁻¹³) cannot move v/γ across the tie, so the nearest integer of q is the exact
    one; every other entry (and every integer entry of 2⁵³ or more) is rounded by :func:`round_to_grid` on
    Fractions.
    """
    quotient = values.astype(np.float64) / grid
    nearest = np.rint(quotient)
    safe = (np.abs(quotient) < _FAST_QUOTIENT_LIMIT) & (np.abs(np.abs(quotient - nearest) - 0.5) > _TIE_MARGIN)
    if values.dtype.kind in "iu":
        safe &= np.abs(values.astype(np.float64)) < 2.0**53
    rounded = np.where(safe, nearest, 0.0).astype(np.int64)
    exact = np.flatnonzero(~safe)
    if exact.size == 0:
        return rounded
    wide = [round_to_grid(values[i].item(), grid) for i in exact]
    if all(abs(k) < 2**62 for k in wide):
        rounded[exact] = wide
        return rounded
    rounded = rounded.astype(object)
    rounded[exact] = wide
    return rounded


def _grid_values(units: np.ndarray, grid: float) -> np.ndarray:
    """The float nearest to k·γ for every integer k in ``units`` (exact products where k fits in 53 bits)."""
    if units.dtype != object and np.all(np.abs(units) < 2**53):
        return units.astype(np.float64) * grid  # k and γ exact floats: one correctly rounded product
    exact_grid = Fraction(grid)
    return np.array([float(int(k) * exact_grid) for k in units], dtype=np.float64)


def add_grid_noise(value: float | np.ndarray, grid: float,
                   draw: Callable[[int], np.ndarray]) -> float | np.ndarray:
    """Round every coordinate of ``value`` to the grid, add ``draw(n)`` grid units to its n coordinates, return floats.

    The output, an integer k per coordinate, is returned as the float nearest to k·γ: a post-processing of k, so it
    does not affect privacy. Coordinates are processed in chunks of 2¹⁸, so the temporary memory stays a few times
    the chunk whatever the array's size.

    Args:
        value: a real number or a numeric array (any shape).
        grid: the spacing γ > 0.
        draw: ``draw(n)`` returns n independent noise values in grid units (an integer array, int64 or object).

    Raises:
        InvalidParameter: a NaN or infinite coordinate, or a non-numeric value.
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iuf":
            raise InvalidParameter(f"value must be a numeric array, got dtype {value.dtype}")
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise InvalidParameter("value must be finite in every coordinate (got NaN or infinity)")
        check_positive("grid", grid)
        flat = value.reshape(-1)
        out = np.empty(flat.size, dtype=np.float64)
        for start in range(0, flat.size, _CHUNK):
            chunk = flat[start:start + _CHUNK]
            rounded, noise = round_to_grid_array(chunk, grid), draw(chunk.size)
            if rounded.dtype == object or noise.dtype == object:
                units = rounded.astype(object) + noise.astype(object)
            else:
                units = rounded + noise  # both below 2⁶² in magnitude: no int64 overflow
            out[start:start + chunk.size] = _grid_values(units, grid)
        return out.reshape(value.shape)
    if isinstance(value, np.generic):
        value = value.item()
    return float((round_to_grid(value, grid) + int(draw(1)[0])) * Fraction(grid))
