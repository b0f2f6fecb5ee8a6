"""Event builders shared by the accounting tests (public parameters only, calibrated like the session)."""

from __future__ import annotations

from dpaudit.events import (
    AboveThresholdEvent,
    ComposedEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSubsampledGaussianEvent,
    SampledWithoutReplacementGaussianEvent,
)
from dpaudit.mechanisms.gaussian import calibrate_discrete_gaussian
from dpaudit.mechanisms.grid import grid_sensitivity
from dpaudit.sensitivity import declared, from_formula

GRID = 1.0 / 1024


def laplace(epsilon: float, neighbouring: str = "add_remove", dimension: int = 1) -> LaplaceEvent:
    """A count released with discrete Laplace noise whose privacy map is exactly ``epsilon`` (up to rounding)."""
    sens = (from_formula("count", neighbouring) if dimension == 1
            else declared(1.0, "l1", "a histogram of disjoint counts: one record changes one count by 1"))
    delta_grid = grid_sensitivity(sens.value, GRID, dimension, "l1")
    return LaplaceEvent(neighbouring=neighbouring, sensitivity=sens, epsilon=epsilon,
                        scale=delta_grid * GRID / epsilon, grid=GRID, dimension=dimension)


def above_threshold(epsilon: float) -> AboveThresholdEvent:
    sens = from_formula("count", "add_remove")
    delta_grid = grid_sensitivity(sens.value, GRID, 1, "l1")
    return AboveThresholdEvent(neighbouring="add_remove", sensitivity=sens, epsilon=epsilon,
                               threshold_scale=2 * delta_grid * GRID / epsilon,
                               query_scale=4 * delta_grid * GRID / epsilon, grid=GRID, max_queries=50)


def exponential(epsilon: float) -> ExponentialEvent:
    return ExponentialEvent(neighbouring="add_remove", sensitivity=from_formula("count", "add_remove"),
                            epsilon=epsilon, n_candidates=10)


def gaussian(sigma: float, epsilon: float = 1.0, delta: float = 1e-6, dimension: int = 1) -> GaussianEvent:
    """A discrete-Gaussian release of noise at least ``sigma`` that really achieves its declared (ε, δ): the noise
    is raised to the calibrated σ when ``sigma`` is smaller (an event that under-charges is refused)."""
    sigma = max(sigma, calibrate_discrete_gaussian(epsilon, delta, 1.0, GRID, dimension))
    return GaussianEvent(neighbouring="add_remove", sensitivity=declared(1.0, "l2", "one bounded record"),
                         epsilon=epsilon, delta=delta, sigma=sigma, grid=GRID, dimension=dimension)


def dpsgd(sample_rate: float, noise_multiplier: float, steps: int) -> PoissonSubsampledGaussianEvent:
    return PoissonSubsampledGaussianEvent(
        neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
        sample_rate=sample_rate, noise_multiplier=noise_multiplier, steps=steps)


def dpsgd_without_replacement(batch: int, n: int, noise_multiplier: float,
                              steps: int) -> SampledWithoutReplacementGaussianEvent:
    return SampledWithoutReplacementGaussianEvent(
        neighbouring="replace_one",
        sensitivity=from_formula("clipped_gradient_sum", "replace_one", clip_norm=1.0),
        batch_size=batch, dataset_size=n, noise_multiplier=noise_multiplier, steps=steps)


#: The Opacus MNIST tutorial / TF Privacy setting: batch 256 of 60000, σ = 1.1, 60 epochs, δ = 1e-5.
MNIST_Q = 256 / 60000
MNIST_SIGMA = 1.1
MNIST_STEPS = 60 * 234  # Opacus's Poisson loader has int(1/q) = 234 batches per epoch
MNIST_DELTA = 1e-5


def pld2_event() -> ComposedEvent:
    """Seven Laplace counts, then 37 single DP-SGD steps: two runs, the second of which the ``pld/2`` fold
    self-composes in one step and the ``pld/3`` fold in three binary digits (32 + 4 + 1)."""
    return ComposedEvent(events=(laplace(0.3),) * 7 + (dpsgd(0.05, 1.5, 1),) * 37)


#: ε of :func:`pld2_event` at :data:`PLD2_DELTA` as the ``pld/2`` accountant (git 71dbb7c) computed it, frozen: a
#: claim a certificate closed under ``pld/2`` carries (the ``pld/3`` fold gives 3.3789996810883953, 5.5e-9 above)
PLD2_CLAIM = 3.37899966236281
PLD2_DELTA = 1e-8
PLD2_VERSION = "pld/2 (interval 0.0002, pessimistic, run fold; dp-accounting 0.6.0)"
