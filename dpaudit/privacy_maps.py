"""Pure privacy maps: from an event's public noise parameters to the privacy it provides.

These are the functions that both the session (to calibrate noise) and ``dpaudit verify`` (to re-check a charge)
use, so a charge recorded in the ledger can be recomputed from the event alone.

Grid rounding. Every additive-noise release first rounds the true value to the grid γ·Z (coordinate-wise, to
the nearest point) and then adds integer noise times γ (Canonne, Kamath & Steinke 2020, Sec. 5; this avoids the
floating-point attack of Mironov 2012). Rounding can increase the distance between neighbouring values: per
coordinate, |round(a) − round(b)| ≤ ⌊|a − b|⌋ + 1 (in grid units). Hence, for a sensitivity Δ (value units),

* L1: ‖r(x) − r(x')‖₁ ≤ Σ_i (⌊d_i⌋ + 1) ≤ ⌊Δ/γ⌋ + d,
* L2: ‖r(x) − r(x')‖₂ ≤ ‖d‖₂ + √d ≤ Δ/γ + √d (triangle inequality), and ⌊Δ/γ⌋ + 1 when d = 1,

which :func:`grid_sensitivity` returns. With γ = Δ/2¹⁰ (the session default) the inflation is under 0.1 %.
"""

from __future__ import annotations

import math

from dpaudit.events import AboveThresholdEvent, GaussianEvent, LaplaceEvent
from dpaudit.sensitivity import Norm
from dpaudit.validation import check_count, check_positive


def grid_sensitivity(sensitivity: float, grid: float, dimension: int, norm: Norm | str) -> float:
    """Sensitivity in grid units after rounding to ``grid``·Z (see the module docstring for the derivation).

    Args:
        sensitivity: Δ in value units.
        grid: spacing γ of the grid.
        dimension: number of coordinates d.
        norm: ``l1`` or ``l2``.

    Returns:
        An upper bound on the distance between the rounded neighbouring values, in grid units.
    """
    check_positive("sensitivity", sensitivity)
    check_positive("grid", grid)
    check_count("dimension", dimension)
    ratio = sensitivity / grid
    norm = Norm(norm)
    if norm is Norm.L1 or dimension == 1:
        # The next float above the ratio guards against ⌊·⌋ of a ratio rounded down by division.
        return float(math.floor(math.nextafter(ratio, math.inf)) + dimension)
    return math.nextafter(ratio + math.sqrt(dimension), math.inf)


def laplace_epsilon(event: LaplaceEvent) -> float:
    """ε of discrete Laplace noise with scale t = b/γ grid units and L1 grid sensitivity Δ_γ: ε = Δ_γ / t.

    Canonne, Kamath & Steinke 2020, Sec. 5 (the discrete Laplace is ε-DP for integer-valued queries of L1
    sensitivity Δ_γ with P(z) ∝ exp(−|z|/t), t = Δ_γ/ε).
    """
    delta_grid = grid_sensitivity(event.sensitivity.value, event.grid, event.dimension, Norm.L1)
    return delta_grid / (event.scale / event.grid)


def gaussian_grid_parameters(event: GaussianEvent) -> tuple[float, float]:
    """(σ in grid units, L2 sensitivity in grid units) of a discrete-Gaussian release."""
    delta_grid = grid_sensitivity(event.sensitivity.value, event.grid, event.dimension, Norm.L2)
    return event.sigma / event.grid, delta_grid


def gaussian_noise_multiplier(event: GaussianEvent) -> float:
    """σ/Δ in grid units: the discrete Gaussian is (Δ²/2σ²)-zCDP (Canonne, Kamath & Steinke 2020, Thm. 14)."""
    sigma_grid, delta_grid = gaussian_grid_parameters(event)
    return sigma_grid / delta_grid


def above_threshold_epsilon(event: AboveThresholdEvent) -> float:
    """ε of AboveThreshold with threshold noise scale t₁ and query noise scale t₂ (grid units).

    Lyu, Su & Li 2017, Alg. 1 with c = 1: ρ ~ Lap(Δ/ε₁), ν_i ~ Lap(2Δ/ε₂) is (ε₁ + ε₂)-DP, so
    ε = Δ_γ/t₁ + 2Δ_γ/t₂. With t₁ = 2Δ/ε and t₂ = 4Δ/ε this is ε (Dwork & Roth 2014, Alg. 1). The proof shifts
    the threshold noise by Δ_γ, an integer, so it holds for the discrete Laplace on the grid as for the continuous.
    """
    delta_grid = grid_sensitivity(event.sensitivity.value, event.grid, 1, Norm.L1)
    return delta_grid / (event.threshold_scale / event.grid) + 2.0 * delta_grid / (event.query_scale / event.grid)
