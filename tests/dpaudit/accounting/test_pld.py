"""PLD accountant: golden value, upper-bound direction, leaves, caching that does not change results."""

from __future__ import annotations

import dp_accounting
import pytest

from dpaudit.accounting import BasicComposition, PldAccountant, RdpAccountant
from dpaudit.accounting.pld import self_composed
from dpaudit.errors import UnsupportedEvent
from dpaudit.events import ComposedEvent, SelfComposedEvent

from ._events import (
    MNIST_DELTA,
    MNIST_Q,
    MNIST_SIGMA,
    MNIST_STEPS,
    dpsgd,
    dpsgd_without_replacement,
    exponential,
    gaussian,
    laplace,
)


def test_mnist_golden_value_and_cross_check():
    """ε = 2.37991 with interval 2e-4; dp_accounting's own PLDAccountant (interval 1e-4) gives 2.37964."""
    eps = PldAccountant().epsilon(dpsgd(MNIST_Q, MNIST_SIGMA, MNIST_STEPS), MNIST_DELTA)
    assert eps == pytest.approx(2.379910821066, rel=1e-9)
    ref = dp_accounting.pld.PLDAccountant()
    ref.compose(dp_accounting.PoissonSampledDpEvent(MNIST_Q, dp_accounting.GaussianDpEvent(MNIST_SIGMA)), MNIST_STEPS)
    assert ref.get_epsilon(MNIST_DELTA) <= eps <= ref.get_epsilon(MNIST_DELTA) * 1.001
    assert eps < RdpAccountant().epsilon(dpsgd(MNIST_Q, MNIST_SIGMA, MNIST_STEPS), MNIST_DELTA)


def test_discrete_laplace_is_exact():
    """One 1-D discrete Laplace release: ε(δ) reaches the privacy map ε as δ → 0 and never exceeds it."""
    eps = PldAccountant().epsilon(laplace(0.5), 1e-12)
    assert 0.5 * 0.999 <= eps <= 0.5 + 2e-4


def test_pure_leaves_beat_basic_composition():
    event = ComposedEvent(events=(laplace(0.1),) * 50 + (exponential(0.2), laplace(0.3, dimension=3)))
    assert PldAccountant().epsilon(event, 1e-6) < BasicComposition().epsilon(event, 1e-6)


def test_discrete_gaussian_one_dimensional_only():
    assert PldAccountant().supports(gaussian(5.0))
    assert PldAccountant().epsilon(gaussian(5.0), 1e-6) <= RdpAccountant().epsilon(gaussian(5.0), 1e-6)
    assert not PldAccountant().supports(gaussian(5.0, dimension=3))


def test_sampling_without_replacement_unsupported():
    with pytest.raises(UnsupportedEvent, match="without replacement"):
        PldAccountant().epsilon(dpsgd_without_replacement(256, 60000, 1.1, 10), 1e-5)


def test_prefix_cache_gives_the_same_value_as_a_fresh_computation():
    released = [laplace(0.1), laplace(0.2), exponential(0.1)]
    cached = PldAccountant()
    for i in range(1, len(released) + 1):
        value = cached.epsilon(ComposedEvent(events=tuple(released[:i])), 1e-6)
    self_composed.cache_clear()
    assert value == PldAccountant().epsilon(ComposedEvent(events=tuple(released)), 1e-6)
    # a tally that is not an extension of the last one is folded from scratch
    assert cached.epsilon(SelfComposedEvent(event=laplace(0.2), count=2), 1e-6) == PldAccountant().epsilon(
        SelfComposedEvent(event=laplace(0.2), count=2), 1e-6)
