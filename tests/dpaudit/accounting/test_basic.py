"""Basic composition on hand-computed numbers."""

from __future__ import annotations

import pytest

from dpaudit.accounting import BasicComposition, DeltaUnreachable
from dpaudit.errors import UnsupportedEvent
from dpaudit.events import ComposedEvent, SelfComposedEvent

from ._events import above_threshold, dpsgd, exponential, gaussian, laplace


def test_sums_pure_and_declared_gaussian_charges():
    event = ComposedEvent(events=(laplace(0.5), above_threshold(0.25), exponential(0.125),
                                  gaussian(5.0, epsilon=1.0, delta=1e-7)))
    assert BasicComposition().epsilon(event, 1e-7) == pytest.approx(1.875, rel=1e-12)


def test_self_composition_multiplies():
    assert BasicComposition().epsilon(SelfComposedEvent(event=laplace(0.1), count=30), 0.0) == pytest.approx(3.0)


def test_delta_budget_that_cannot_be_met_raises():
    event = SelfComposedEvent(event=gaussian(5.0, epsilon=1.0, delta=1e-6), count=3)
    assert BasicComposition().epsilon(event, 3e-6) == pytest.approx(3.0)
    with pytest.raises(DeltaUnreachable, match="delta"):
        BasicComposition().epsilon(event, 2.9e-6)


def test_refuses_subsampled_gaussian():
    assert not BasicComposition().supports(dpsgd(0.01, 1.0, 10))
    with pytest.raises(UnsupportedEvent, match="basic"):
        BasicComposition().epsilon(dpsgd(0.01, 1.0, 10), 1e-5)


def test_sums_are_rounded_upward_never_below_the_exact_sum():
    """10⁴ charges of ε = 1e-4 sum to 1.0 in nearest-rounded floats, but the float 1e-4 is above 10⁻⁴, so the exact
    sum is 1 + 4.8·10⁻¹⁷: a bound of 1.0 would be below the truth (and admit a charge past a budget of 1.0)."""
    import math
    from fractions import Fraction

    from dpaudit.accounting.basic import sum_rounded_up

    assert math.fsum([1e-4] * 10**4) == 1.0 < Fraction(1e-4) * 10**4  # the drift the nearest rounding hides
    assert sum_rounded_up([(1e-4, 10**4)]) == math.nextafter(1.0, math.inf)
    assert sum_rounded_up([(0.1, 10)]) == math.nextafter(1.0, math.inf)
    assert sum_rounded_up([(0.5, 2), (0.25, 4)]) == 2.0  # exact sums stay exact
    assert sum_rounded_up([(0.1, 1), (0.2, 1)]) == 0.30000000000000004 >= Fraction(0.1) + Fraction(0.2)
    assert sum_rounded_up([]) == 0.0
    assert BasicComposition().epsilon(SelfComposedEvent(event=laplace(1e-4), count=10**4), 0.0) > 1.0
