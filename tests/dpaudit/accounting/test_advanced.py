"""Advanced composition (Kairouz, Oh & Viswanath 2015, Thm. 3.5) on hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from dpaudit.accounting import AdvancedComposition, BasicComposition, DeltaUnreachable
from dpaudit.accounting.advanced import advanced_epsilon
from dpaudit.events import ComposedEvent, SelfComposedEvent

from ._events import dpsgd, gaussian, laplace


def test_homogeneous_hand_computed():
    """k = 100, ε = 0.1, δ' = 1e-6: 100·0.1·tanh(0.05) + sqrt(2 ln(1e6)·100·0.01) = 0.499584 + 5.256521."""
    expected = 10 * math.tanh(0.05) + math.sqrt(2 * math.log(1e6))
    assert expected == pytest.approx(5.756105, abs=1e-6)
    eps = AdvancedComposition().epsilon(SelfComposedEvent(event=laplace(0.1), count=100), 1e-6)
    assert eps == pytest.approx(expected, rel=1e-12)


def test_tighter_than_dwork_rothblum_vadhan():
    k, e, d = 100, 0.1, 1e-6
    drv = math.sqrt(2 * k * math.log(1 / d)) * e + k * e * math.expm1(e)
    assert advanced_epsilon([(e, k)], d) < drv


def test_falls_back_to_basic_when_smaller():
    event = ComposedEvent(events=(laplace(1.0), laplace(0.5)))
    assert AdvancedComposition().epsilon(event, 1e-6) == pytest.approx(BasicComposition().epsilon(event, 1e-6))


def test_delta_split_and_unreachable():
    event = ComposedEvent(events=(gaussian(5.0, epsilon=0.1, delta=1e-6),) * 50)
    charges = [(0.1, 50)]
    assert AdvancedComposition().epsilon(event, 1e-4) == pytest.approx(advanced_epsilon(charges, 1e-4 - 5e-5))
    assert AdvancedComposition().epsilon(event, 5e-5) == pytest.approx(5.0)  # δ' = 0: basic only
    with pytest.raises(DeltaUnreachable):
        AdvancedComposition().epsilon(event, 4e-5)


def test_refuses_subsampled_gaussian():
    assert not AdvancedComposition().supports(dpsgd(0.01, 1.0, 10))
