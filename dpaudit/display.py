"""Numbers and counts as a reader sees them: every ε rounded *up*, every δ exact, nouns in the right number.

Every ε shown to a reader is an upper bound (the guide's first rule), so ε values are rounded *up* to a few
significant digits (:func:`round_up`), never to nearest: 4.6031849 is shown as 4.60319, not 4.60318. A δ or a
budget is a parameter and is shown exactly (:func:`show_delta`). The report, the certificate's one-line guarantee,
the CLI, the demo and the MLflow run page all format through here.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

#: significant digits of a certified ε (the claim) and of a component's ε
CLAIM_DIGITS = 6
COMPONENT_DIGITS = 4


def round_up(value: float, digits: int) -> float:
    """``value`` rounded up (towards +∞) to ``digits`` significant digits, so the result is never below it.

    A float that already is the nearest double to a ``digits``-digit decimal (a value rounded up before, as the
    model stores them) is returned unchanged, so rounding twice does not raise the last digit again.

    Args:
        value: a finite or infinite float.
        digits: significant digits kept (≥ 1).
    """
    if value == 0 or not math.isfinite(value):
        return value
    exact = Decimal(value)  # the float's exact binary value
    quantum = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    if float(exact.quantize(quantum)) == value:
        return value
    rounded = float(exact.quantize(quantum, rounding=ROUND_CEILING))
    return rounded if rounded >= value else math.nextafter(rounded, math.inf)


def show(value: float | None, digits: int = CLAIM_DIGITS) -> str:
    """An upper bound for display: rounded up to ``digits`` significant digits ("n/a" for None, "∞" for inf)."""
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "∞"
    # the nearest ``digits``-digit decimal D (of the float's exact value), when its double is not below the value,
    # is what rounding up shows: its double is the value itself (then :func:`round_up` keeps the value, whose text
    # is D), or above it, so D is above the exact value and, as the nearest, the smallest such decimal (the text
    # of that decimal's double is D again); for a positive value rounded down to nearest, the smallest decimal above
    # it is D plus one unit of D's last digit (the value lies between the two, so has D's decimal exponent); a
    # negative value, or one rounded up beyond the largest double, takes the exact rounding up
    if type(value) is not float:  # an int beyond 2⁵³ would be compared as its nearest double, maybe below it
        return f"{round_up(value, digits):.{digits}g}"
    nearest = f"{value:.{digits}g}"
    if value <= float(nearest) < math.inf:
        return nearest
    if value > 0:
        below = Decimal(nearest)
        above = float(below + Decimal(1).scaleb(below.adjusted() - digits + 1))
        if above < math.inf:
            return f"{above:.{digits}g}"
    return f"{round_up(value, digits):.{digits}g}"


def show_lower(value: float, decimals: int = 3) -> str:
    """A lower bound for display (an audit's ε_lb): rounded *down* to ``decimals`` decimals, exactly (the float's
    binary value, so the result is never above it); "∞" for inf."""
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{Decimal(value).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_FLOOR):.{decimals}f}"


def show_delta(delta: float) -> str:
    """A parameter (δ, a budget, a noise parameter) exactly, in its shortest form: ``1e-05``, never rounded (a δ
    shown smaller than it is would understate the failure probability)."""
    short = f"{delta:g}"
    return short if float(short) == delta else repr(delta)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``"1 charge"``, ``"2 charges"``: the count with the noun in the right number."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"
