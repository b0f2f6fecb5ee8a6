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
