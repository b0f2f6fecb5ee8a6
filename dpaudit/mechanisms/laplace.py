"""The discrete Laplace mechanism on the grid γ·Z: event, privacy map, calibration, coverage, release.

Each coordinate of the true value is rounded exactly to the grid (:func:`~dpaudit.mechanisms.grid.round_to_grid`)
and γ times an exact discrete Laplace variable with P(z) ∝ exp(−|z|/t), t = b/γ grid units, is added (Canonne,
Kamath & Steinke 2020, Sec. 5 and Alg. 2). For L1 sensitivity Δ, rounding leaves neighbouring values at most
Δ_γ = ⌊Δ/γ⌋ + d grid units apart (:func:`~dpaudit.mechanisms.grid.grid_sensitivity`), and the release is
(Δ_γ/t)-DP: :func:`laplace_epsilon` is the privacy map that the calibration, every accountant, the budget filter
and ``dpaudit verify`` evaluate. See docs/mechanisms/laplace.md.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpaudit.events import LaplaceEvent
from dpaudit.mechanisms.discrete_bulk import bulk_scale, sample_discrete_laplace_array
from dpaudit.mechanisms.grid import add_grid_noise, default_grid, grid_sensitivity, scale_in_grid_units
from dpaudit.mechanisms.numerics import grid_units_lower, nudged_up
from dpaudit.mechanisms.outputs import Coverage, VectorOutput
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.mechanisms.registry import register_mechanism
from dpaudit.sensitivity import Neighbouring, Norm, Sensitivity
from dpaudit.validation import check_epsilon, check_positive


def laplace_epsilon(event: LaplaceEvent) -> float:
    """Privacy map: ε = Δ_γ / t of discrete Laplace noise with scale t = b/γ grid units, L1 grid sensitivity Δ_γ.

    Canonne, Kamath & Steinke 2020, Sec. 5 (the discrete Laplace is ε-DP for integer-valued queries of L1
    sensitivity Δ_γ with P(z) ∝ exp(−|z|/t), t = Δ_γ/ε). Uses only the event's public fields.
    """
    delta_grid = grid_sensitivity(event.sensitivity.value, event.grid, event.dimension, Norm.L1)
    return delta_grid / (event.scale / event.grid)


def calibrate_laplace_scale(epsilon: float, sensitivity: float, grid: float, dimension: int) -> float:
    """Scale b (value units) of discrete Laplace noise on ``grid``·Z that is ε-DP after grid rounding.

    b = γ·Δ_γ/ε with Δ_γ = grid_sensitivity(Δ, γ, d, 'l1') (CKS 2020, Sec. 5), then raised ulp by ulp until
    Δ_γ / (b/γ) ≤ ε holds in exact rational arithmetic for both readings of b/γ (float quotient and exact
    quotient). Then :func:`laplace_epsilon`, one correctly rounded division of those numbers, is also ≤ ε.

    Args:
        epsilon: target ε > 0.
        sensitivity: L1 sensitivity Δ in value units.
        grid: grid spacing γ > 0.
        dimension: number of coordinates d ≥ 1.

    Returns:
        b in value units.

    Raises:
        InvalidParameter: a parameter out of its domain, or a scale b (or b/γ) that overflows or underflows a float.
    """
    epsilon = check_epsilon(epsilon)
    grid = check_positive("grid", grid)
    delta_grid = Fraction(grid_sensitivity(sensitivity, grid, dimension, Norm.L1))
    target = Fraction(epsilon)
    return nudged_up(grid * float(delta_grid) / epsilon,
                     lambda b: delta_grid / grid_units_lower(b, grid) <= target, "the Laplace scale")


def laplace_event(neighbouring: Neighbouring, sensitivity: Sensitivity, epsilon: float, *, dimension: int = 1,
                  label: str = "", grid: float | None = None) -> LaplaceEvent:
    """The calibrated event of an ε-DP release of ``dimension`` coordinates (grid γ = Δ/2¹⁰ unless given).

    Raises:
        InvalidParameter: ε, the grid or the dimension out of range, a sensitivity of the wrong norm, or a scale the
            sampler cannot draw (2⁵¹ grid units or more): refused here, before anything is charged.
    """
    epsilon = check_epsilon(epsilon)
    grid = grid if grid is not None else default_grid(sensitivity.value)
    scale = calibrate_laplace_scale(epsilon, sensitivity.value, grid, dimension)
    bulk_scale(scale_in_grid_units(scale, grid))  # the release's range check
    return LaplaceEvent(neighbouring=neighbouring, sensitivity=sensitivity, label=label, epsilon=epsilon,
                        scale=scale, grid=grid, dimension=dimension)


def coverage(event: LaplaceEvent) -> Coverage:
    """One charge covers one output of exactly ``dimension`` numbers."""
    return Coverage(VectorOutput(event.dimension), 1)


def release_laplace(value: float | np.ndarray, scale: float, grid: float, rng: RandomSource) -> float | np.ndarray:
    """value + γ·L per coordinate, L ~ discrete Laplace with P(L = z) ∝ exp(−|z|/t), t = scale/γ grid units.

    ε-DP for L1 sensitivity Δ when scale comes from :func:`calibrate_laplace_scale` (CKS 2020, Sec. 5). The noise
    is drawn by the vectorised exact sampler (:mod:`dpaudit.mechanisms.discrete_bulk`), whose scale is t or
    at most 2⁻⁵¹·t above it (:func:`~dpaudit.mechanisms.discrete_bulk.bulk_scale`): never less noise.

    Args:
        value: the true value, a real number or a numeric array (any shape).
        scale: noise scale b > 0 in value units.
        grid: grid spacing γ > 0.
        rng: source of uniform integers (:class:`~dpaudit.mechanisms.randomness.SecureRandom` for releases).

    Returns:
        A float (for a scalar ``value``) or a float64 array of the same shape, every entry a multiple of γ
        (up to the final float rounding of k·γ).

    Raises:
        InvalidParameter: a NaN or infinite coordinate, a non-numeric value, a scale/grid that is not > 0, or a
            scale of 2⁵¹ grid units or more.
    """
    check_positive("scale", scale)
    check_positive("grid", grid)
    units = scale_in_grid_units(scale, grid)
    return add_grid_noise(value, grid, lambda count: sample_discrete_laplace_array(units, count, rng))


def release(event: LaplaceEvent, value: float | np.ndarray, rng: RandomSource) -> float | np.ndarray:
    """The noisy ``value`` for a charged ``event`` (:func:`release_laplace` with the event's scale and grid)."""
    return release_laplace(value, event.scale, event.grid, rng)


register_mechanism(LaplaceEvent, coverage=coverage, pure_epsilon=laplace_epsilon)
