"""Numbers as a reader sees them: ε rounded up (never below the bound), δ exact, plurals."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import pytest

from dpaudit.display import CLAIM_DIGITS, plural, round_up, show, show_delta


def test_round_up_is_never_below_the_value_and_within_one_unit_of_the_last_digit():
    """2 000 seeded random floats over 24 decades: every shown ε is an upper bound, at most one unit above.

    Rounding to nearest (the old ``:.6g``) fails the first check for about half of them."""
    rng = random.Random(20261124)
    values = [rng.uniform(1, 10) * 10.0 ** rng.randint(-12, 12) for _ in range(2000)]
    for digits in (4, CLAIM_DIGITS):
        for v in values:
            shown = Decimal(show(v, digits))
            assert shown >= Decimal(v), (v, digits)
            unit = Decimal(1).scaleb(Decimal(v).adjusted() - digits + 1)
            assert shown - Decimal(v) <= unit
    below = sum(Decimal(f"{v:.{CLAIM_DIGITS}g}") < Decimal(v) for v in values)
    assert 800 < below < 1200  # the broken variant (round to nearest) under-states ε about half the time


def test_rounding_twice_does_not_raise_the_last_digit_again():
    once = round_up(0.9148317617580545, 4)
    assert once == 0.9149 and round_up(once, 4) == once and show(once, 4) == "0.9149"
    assert show(4.6031849) == "4.60319" and show(4.0) == "4" and show(None) == "n/a" and show(math.inf) == "∞"


@pytest.mark.parametrize(("count", "expected"), [(0, "0 charges"), (1, "1 charge"), (2, "2 charges")])
def test_plural(count, expected):
    assert plural(count, "charge") == expected


def test_parameters_are_shown_exactly():
    """δ is a parameter: a δ shown smaller than it is would understate the failure probability."""
    assert show_delta(1e-5) == "1e-05" and show_delta(5.0) == "5"
    assert show_delta(1.2345678e-5) == "1.2345678e-05"  # `:g` would show 1.23457e-05, below the true δ


def test_show_lower_rounds_a_lower_bound_down_exactly():
    from dpaudit.display import show_lower

    assert show_lower(0.99996) == "0.999"  # nearest rounding would print 1.000, above the bound
    assert show_lower(0.11699999999999999) == "0.116"  # floor(x * 1000) / 1000 gives 0.117 here, above x
    assert show_lower(1.5) == "1.500" and show_lower(-0.0001) == "-0.001" and show_lower(float("inf")) == "∞"


def _show_by_exact_rounding(value: float, digits: int) -> str:
    """``show`` as it was before its shortcut: every value through :func:`round_up`."""
    return f"{round_up(value, digits):.{digits}g}"


def _hard_values(rng: random.Random) -> list[float]:
    """Random floats, and the floats next to decimals of few digits (ties, decade edges), both signs."""
    values = [0.0, -0.0, 1.0, 9.999995, 9.9999995, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, 1e16, 1e-5]
    for _ in range(4000):
        values.append(rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30))
        decimal = rng.randint(1, 10**7) * 10.0 ** rng.randint(-12, 12)
        values += [decimal, math.nextafter(decimal, math.inf), math.nextafter(decimal, -math.inf)]
        half = (rng.randint(10**5, 10**6 - 1) + 0.5) * 10.0 ** rng.randint(-8, 8)  # a tie at 6 digits
        values += [half, math.nextafter(half, math.inf), math.nextafter(half, -math.inf)]
    return values + [-v for v in values]


@pytest.mark.parametrize("digits", [CLAIM_DIGITS, 4, 1])
def test_show_is_the_exact_rounding_up_for_every_value(digits):
    """The shortcut (the nearest decimal where it is not below the value) shows what exact rounding up shows."""
    for value in _hard_values(random.Random(digits)) + [math.nan]:
        assert show(value, digits) == _show_by_exact_rounding(value, digits), value


def test_the_show_test_catches_a_shortcut_that_takes_the_nearest_decimal_when_it_is_below():
    """Broken variant: the nearest decimal whatever its side (an ε shown below itself) fails the test above."""
    def nearest(value, digits=CLAIM_DIGITS):
        return f"{value:.{digits}g}"
    broken = [v for v in _hard_values(random.Random(0)) if nearest(v) != _show_by_exact_rounding(v, CLAIM_DIGITS)]
    assert len(broken) > 1000


def test_an_int_beyond_two_to_the_53_is_never_shown_below_itself():
    """Review of commit 07c0042: the fast path compared an int with its nearest double, so 295167000000000000001
    was shown as 2.95167e+20 (below it); ints take the exact rounding up."""
    for value in (295167000000000000001, 2**53 + 1, 10**21 + 1, 999999999999999983222785):
        assert Decimal(show(value)) >= value, value
