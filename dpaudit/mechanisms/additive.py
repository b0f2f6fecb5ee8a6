"""Additive-noise releases on the grid γ·Z: discrete Laplace and discrete Gaussian.

The session calls these only after the budget has been charged and the ledger written. Each coordinate is
rounded exactly to the nearest grid point (:func:`~dpaudit.mechanisms.grid.round_to_grid`; ties go to the even
multiple) and γ times exact integer noise is added (Canonne, Kamath & Steinke 2020, Sec. 5), so the output
never depends on floating-point noise generation (Mironov 2012). The output, an integer k, is returned as the
float nearest to k·γ: a post-processing of k, so it does not affect privacy.

Noise scale in grid units. The privacy maps (:mod:`dpaudit.privacy_maps`) read the grid-unit scale as the float
quotient ``scale / grid``; the exact quotient of the two floats may differ from it in the last bit. The noise
drawn here uses the larger of the two, so the noise released is never smaller than what any reading of the
recorded event assumes (and the calibrators guarantee the target for the smaller one).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.discrete import sample_discrete_gaussian, sample_discrete_laplace
from dpaudit.mechanisms.grid import round_to_grid, scale_in_grid_units
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.validation import check_positive


def _release(value: float | np.ndarray, grid: float, draw: Callable[[], int]) -> float | np.ndarray:
    """Round every coordinate of ``value`` to the grid, add ``draw()`` grid units to each, return floats."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iuf":
            raise InvalidParameter(f"value must be a numeric array, got dtype {value.dtype}")
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise InvalidParameter("value must be finite in every coordinate (got NaN or infinity)")
        out = np.empty(value.shape, dtype=np.float64)
        exact_grid = Fraction(grid)
        for index, coordinate in np.ndenumerate(value):
            out[index] = float((round_to_grid(coordinate.item(), grid) + draw()) * exact_grid)
        return out
    if isinstance(value, np.generic):
        value = value.item()
    return float((round_to_grid(value, grid) + draw()) * Fraction(grid))


def release_laplace(value: float | np.ndarray, scale: float, grid: float, rng: RandomSource) -> float | np.ndarray:
    """value + γ·L per coordinate, L ~ discrete Laplace with P(L = z) ∝ exp(−|z|/t), t = scale/γ grid units.

    ε-DP for L1 sensitivity Δ when scale comes from
    :func:`~dpaudit.mechanisms.calibration.calibrate_laplace_scale` (CKS 2020, Sec. 5; see
    docs/mechanisms/laplace.md).

    Args:
        value: the true value, a real number or a numeric array (any shape).
        scale: noise scale b > 0 in value units.
        grid: grid spacing γ > 0.
        rng: source of uniform integers (:class:`~dpaudit.mechanisms.randomness.SecureRandom` for releases).

    Returns:
        A float (for a scalar ``value``) or a float64 array of the same shape, every entry a multiple of γ
        (up to the final float rounding of k·γ).

    Raises:
        InvalidParameter: a NaN or infinite coordinate, a non-numeric value, or a scale/grid that is not > 0.
    """
    check_positive("scale", scale)
    check_positive("grid", grid)
    units = scale_in_grid_units(scale, grid)
    return _release(value, grid, lambda: sample_discrete_laplace(units, rng))


def release_gaussian(value: float | np.ndarray, sigma: float, grid: float, rng: RandomSource) -> float | np.ndarray:
    """value + γ·G per coordinate, G ~ discrete Gaussian N_Z(0, (σ/γ)²) (CKS 2020, Algorithm 3).

    (ε, δ)-DP for L2 sensitivity Δ when sigma comes from
    :func:`~dpaudit.mechanisms.calibration.calibrate_discrete_gaussian` (see docs/mechanisms/gaussian.md).

    Args:
        value: the true value, a real number or a numeric array (any shape).
        sigma: noise parameter σ > 0 in value units (the variance parameter is σ², as in CKS).
        grid: grid spacing γ > 0.
        rng: source of uniform integers (:class:`~dpaudit.mechanisms.randomness.SecureRandom` for releases).

    Returns:
        A float (for a scalar ``value``) or a float64 array of the same shape, every entry a multiple of γ
        (up to the final float rounding of k·γ).

    Raises:
        InvalidParameter: a NaN or infinite coordinate, a non-numeric value, or a sigma/grid that is not > 0.
    """
    check_positive("sigma", sigma)
    check_positive("grid", grid)
    variance = scale_in_grid_units(sigma, grid) ** 2
    return _release(value, grid, lambda: sample_discrete_gaussian(variance, rng))
