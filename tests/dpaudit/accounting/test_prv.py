"""PRV accountant: golden value, upper estimate only, support."""

from __future__ import annotations

import pytest
from opacus.accountants import PRVAccountant as OpacusPrv

from dpaudit.accounting import PldAccountant, PrvAccountant
from dpaudit.accounting.charges import tally
from dpaudit.accounting.pld import fold
from dpaudit.accounting.prv import add_direction_epsilon, history_of, prv_bounds

from ._events import MNIST_DELTA, MNIST_Q, MNIST_SIGMA, MNIST_STEPS, dpsgd, laplace


def test_mnist_golden_value_is_opacus_upper_bound():
    eps = PrvAccountant().epsilon(dpsgd(MNIST_Q, MNIST_SIGMA, MNIST_STEPS), MNIST_DELTA)
    assert eps == pytest.approx(2.3897012068826, rel=1e-9)
    ref = OpacusPrv()
    ref.history = [(MNIST_SIGMA, MNIST_Q, MNIST_STEPS)]
    # the same formula as Opacus's DiscretePRV.compute_epsilon, summed without its overflow (prv.discrete_epsilons)
    assert eps == pytest.approx(ref.get_epsilon(MNIST_DELTA), rel=1e-12)
    lower, estimate, upper = prv_bounds(((MNIST_Q, MNIST_SIGMA, MNIST_STEPS),), MNIST_DELTA)
    assert lower < estimate < upper == eps


@pytest.mark.parametrize(("q", "sigma", "steps"), [(0.01, 0.8, 500), (0.1, 2.0, 200), (0.001, 1.0, 3000)])
def test_remove_direction_prv_dominates_pld_lower_bound(q, sigma, steps):
    """Opacus's PRV models the remove direction; its upper bound must still exceed dp_accounting's optimistic
    (lower) PLD estimate, which takes the worse of add and remove."""
    counts = tally(dpsgd(q, sigma, steps))[1]
    optimistic = fold(None, list(counts.items()), False, 1e-4).get_epsilon_for_delta(1e-5)
    upper = prv_bounds(history_of(counts), 1e-5)[2]
    assert optimistic <= upper
    assert upper == pytest.approx(PldAccountant().epsilon(dpsgd(q, sigma, steps), 1e-5), abs=0.025)


@pytest.mark.parametrize(("q", "sigma", "steps"), [(MNIST_Q, MNIST_SIGMA, 2000), (0.5, 0.7, 20)])
def test_prv_accountant_bounds_both_directions(q, sigma, steps):
    """The accountant's value is the max of the remove-direction PRV upper bound and the add-direction PLD bound,
    so it is an upper bound for add/remove neighbours even where the add direction were to dominate."""
    counts = tally(dpsgd(q, sigma, steps))[1]
    eps = PrvAccountant().epsilon(dpsgd(q, sigma, steps), 1e-5)
    assert eps == max(prv_bounds(history_of(counts), 1e-5)[2], add_direction_epsilon(counts, 1e-5))
    assert eps >= add_direction_epsilon(counts, 1e-5) > 0


def test_supports_poisson_subsampled_gaussian_only():
    assert PrvAccountant().supports(dpsgd(0.01, 1.0, 10))
    assert not PrvAccountant().supports(laplace(0.1))
