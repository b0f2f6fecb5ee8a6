"""Floating-point helpers shared by the privacy maps and calibrations of the mechanism modules.

Every helper rounds in the direction that keeps a privacy claim an upper bound: bounds are raised by an explicit
floating-point allowance and rounded up, and calibration searches return only values on which the privacy map,
re-evaluated exactly as ``dpaudit verify`` evaluates it, meets the target.

Floating-point allowance. Quantities evaluated in the log domain are shifted by :func:`allowance` =
16·u·(1 + Σ|intermediate magnitudes| + number of summed terms), with u = 2⁻⁵³ the unit roundoff. Each
elementary operation contributes a relative error of at most u (a few ulp for ``exp``, ``log``, ``log_ndtr``),
and an error of relative size r in a quantity of magnitude m shifts a log-domain sum by at most r·m, so the
allowance exceeds the accumulated error by a wide margin while staying below 10⁻⁹ relative in δ in every case
met in practice.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from dpaudit.errors import AccountingError, InvalidParameter

#: unit roundoff of IEEE-754 binary64
U = 2.0**-53
#: relative width at which bisection stops (the returned end always passes the check)
_BISECTION_REL_WIDTH = 1e-12
#: bound on bracketing / bisection / nudging steps (2¹⁰²⁴ spans the float range)
_MAX_STEPS = 2200


def allowance(*magnitudes: float, terms: int = 0) -> float:
    """Floating-point allowance for a log-domain quantity built from ``magnitudes`` (see the module docstring)."""
    return 16.0 * U * (1.0 + terms + float(sum(abs(m) for m in magnitudes)))


def exp_up(log_value: float) -> float:
    """exp(log_value) rounded up (to the next float, so an underflow gives the least positive float), capped at 1.

    Raises:
        AccountingError: ``log_value`` is NaN (a bound that cannot be evaluated is never silently accepted).
    """
    if math.isnan(log_value):
        raise AccountingError("a privacy bound evaluated to NaN")
    return min(1.0, math.nextafter(math.exp(min(log_value, 0.0)), math.inf))


def smallest_passing(passes: Callable[[float], bool], start: float) -> float:
    """Approximately the smallest x > 0 with ``passes(x)``, for a check that holds for all large enough x.

    Bisection keeps the passing end: the value returned is always one on which ``passes`` returned True.

    Raises:
        AccountingError: no passing (or no failing) value was found within the float range.
    """
    lo = hi = start
    if passes(start):
        for _ in range(_MAX_STEPS):
            lo /= 2.0
            if not passes(lo):
                break
            hi = lo
        else:
            raise AccountingError(f"calibration found no failing point below {start!r}")
    else:
        for _ in range(_MAX_STEPS):
            lo, hi = hi, hi * 2.0
            if math.isinf(hi):
                raise AccountingError(f"calibration found no passing point above {start!r}")
            if passes(hi):
                break
        else:
            raise AccountingError(f"calibration found no passing point above {start!r}")
    for _ in range(_MAX_STEPS):
        if hi - lo <= _BISECTION_REL_WIDTH * hi:
            break
        mid = 0.5 * (lo + hi)
        if passes(mid):
            hi = mid
        else:
            lo = mid
    return hi


def nudged_up(value: float, fits: Callable[[float], bool], what: str) -> float:
    """The first of value, nextafter(value), ... that ``fits`` (float rounding only ever needs a few steps).

    Raises:
        InvalidParameter: ``value`` is not finite (e.g. a noise scale that overflows: ε too small for Δ).
        AccountingError: no value within 64 ulp fits.
    """
    if not math.isfinite(value):
        raise InvalidParameter(f"{what} is not a finite number ({value!r}): epsilon too small for the sensitivity")
    for _ in range(64):
        if fits(value):
            return value
        value = math.nextafter(value, math.inf)
    raise AccountingError(f"could not round {what} up to a value that meets the target")


def grid_units_lower(scale: float, grid: float) -> Fraction:
    """The smaller of the two readings of scale/γ: the float quotient (used by the privacy maps) and the exact one.

    A calibration that holds for this value holds whichever reading a release or a verifier uses.

    Raises:
        InvalidParameter: the float quotient underflows to 0 or overflows (ε out of range for the sensitivity and
            grid), so no privacy map could read the scale.
    """
    quotient = scale / grid
    if not 0.0 < quotient < math.inf:
        raise InvalidParameter(f"a noise scale of {scale!r} is {quotient!r} grid units of {grid!r} in floating point: "
                               "epsilon out of range for the sensitivity and grid")
    return min(Fraction(quotient), Fraction(scale) / Fraction(grid))
