"""The last-iterate heuristic (dpaudit.audit.last_iterate) against closed forms and dp_accounting.

Every check runs the honest function and a deliberately broken variant (q ignored, one direction dropped or the
directions swapped) and asserts that the check tells them apart.
"""

from __future__ import annotations

import math

import pytest
from dp_accounting.pld import privacy_loss_distribution

from dpaudit.audit import last_iterate
from dpaudit.audit.last_iterate import hockey_sticks, last_iterate_epsilon
from dpaudit.audit.tradeoff import SubsampledGaussianFamily, gaussian_delta
from dpaudit.errors import InvalidParameter

DELTA = 1e-5


def _ignores_q(sample_rate: float, steps: int, noise_multiplier: float, delta: float) -> float:
    """Broken: the heuristic of full-batch training, whatever q is."""
    return last_iterate_epsilon(1.0, steps, noise_multiplier, delta)


@pytest.mark.parametrize(("steps", "sigma"), [(1, 1.0), (10, 2.0), (100, 5.0), (4, 0.8)])
def test_full_batch_is_the_gaussian_mechanism_with_mu_sqrt_n_over_sigma(steps, sigma):
    """q = 1: K = N always, so Q = N(N, Nσ²) against P = N(0, Nσ²): μ-GDP with μ = √N/σ, whose exact profile is
    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su 2022, Cor. 2.13)."""
    eps = last_iterate_epsilon(1.0, steps, sigma, DELTA)
    mu = math.sqrt(steps) / sigma
    assert gaussian_delta(mu, eps) <= DELTA * (1 + 1e-9)                 # the reported end satisfies δ(ε) ≤ δ
    assert gaussian_delta(mu, eps * (1 - 1e-8)) > DELTA                  # and is the smallest such ε
    for eps_ in (0.0, 0.5, 2.0):
        assert max(hockey_sticks(eps_, 1.0, steps, sigma)) == pytest.approx(gaussian_delta(mu, eps_), rel=1e-9,
                                                                           abs=1e-15)


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.5, 1.0), (0.1, 0.7), (0.3, 3.0)])
def test_one_step_is_the_subsampled_gaussian_in_each_direction(q, sigma):
    """N = 1: the pair is one step of the Poisson-subsampled Gaussian. Each direction matches dp_accounting's PLD
    (pessimistic, default discretisation; measured agreement ~1e-14) to 1e-9 absolute; ignoring q or swapping the
    two directions would not, and the add direction (dropping it) is checked on its own."""
    pld = privacy_loss_distribution.from_gaussian_mechanism(sigma, sampling_prob=q)
    for epsilon in (0.0, 0.05, 0.3, 1.0):
        ours = hockey_sticks(epsilon, q, 1, sigma)
        theirs = (float(pld._pmf_remove.get_delta_for_epsilon(epsilon)),  # noqa: SLF001 - each direction alone
                  float(pld._pmf_add.get_delta_for_epsilon(epsilon)))     # noqa: SLF001
        assert ours == pytest.approx(theirs, abs=1e-9)
        assert hockey_sticks(epsilon, 1.0, 1, sigma) != pytest.approx(theirs, abs=1e-9)     # q ignored
        if abs(theirs[0] - theirs[1]) > 1e-9:                                                # swapped
            assert ours[::-1] != pytest.approx(theirs, abs=1e-9)
    assert hockey_sticks(0.0, q, 1, sigma)[1] > 1e-3  # the add direction is not zero: dropping it is caught above
    assert last_iterate_epsilon(q, 1, sigma, DELTA) == pytest.approx(pld.get_epsilon_for_delta(DELTA), abs=2e-4)


@pytest.mark.parametrize(("q", "steps", "sigma"), [(0.01, 1000, 1.0), (0.1, 100, 1.5), (0.4997, 10, 1.984)])
def test_the_last_iterate_never_exceeds_the_full_transcript(q, steps, sigma):
    """For linear losses the last iterate is a post-processing of the transcript, so its ε is at most the composed
    subsampled Gaussian's (here its optimistic PLD, a lower estimate of the transcript's ε); at small q it is much
    smaller (the last-iterate advantage: measured 1.28 against 1.73 at q = 0.01, 3.13 against 3.53 at q = 0.1).
    Ignoring q makes it exceed the transcript's (634 and 50)."""
    heuristic = last_iterate_epsilon(q, steps, sigma, DELTA)
    transcript = SubsampledGaussianFamily(q, steps).epsilon(1.0 / sigma, DELTA)
    assert 0 < heuristic <= transcript * (1 + 1e-3)
    if q <= 0.1:
        assert heuristic < 0.9 * transcript
        assert _ignores_q(q, steps, sigma, DELTA) > transcript


def test_delta_is_monotone_and_tiny_noise_or_rate_behave():
    deltas = [last_iterate.last_iterate_delta(e, 0.05, 200, 1.0) for e in (0.0, 0.1, 0.5, 1.0, 2.0, 4.0)]
    assert all(a >= b for a, b in zip(deltas, deltas[1:], strict=False)) and deltas[-1] < 1e-6
    assert last_iterate_epsilon(1e-6, 10, 10.0, DELTA) == 0.0            # δ(0) ≤ δ already
    assert last_iterate_epsilon(1.0, 1, 0.05, DELTA) > 50                # little noise: large ε, still finite


@pytest.mark.parametrize(("args", "message"), [
    ((0.0, 10, 1.0, DELTA), "sample_rate"), ((1.5, 10, 1.0, DELTA), "sample_rate"), ((0.1, 0, 1.0, DELTA), "steps"),
    ((0.1, 10, 0.0, DELTA), "noise_multiplier"), ((0.1, 10, 1.0, 0.0), "delta"),
])
def test_bad_parameters_are_refused(args, message):
    with pytest.raises(InvalidParameter, match=message):
        last_iterate_epsilon(*args)
