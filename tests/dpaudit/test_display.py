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
