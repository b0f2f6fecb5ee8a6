"""The discrete Gaussian mechanism on the grid γ·Z: event, privacy map, calibration, coverage, release.

Each coordinate is rounded exactly to the grid and γ times an exact discrete Gaussian N_Z(0, (σ/γ)²) is added
(Canonne, Kamath & Steinke 2020, Alg. 3). The privacy map is :func:`gaussian_event_delta`, an upper bound on the
δ the recorded noise achieves at the recorded ε; the calibration, every accountant, the budget filter and
``dpaudit verify`` evaluate it. Every value returned is conservative for the privacy claim it serves:

* a δ is an UPPER bound on the true δ(ε) (floating-point error is bounded explicitly and added,
  :mod:`dpaudit.mechanisms.numerics`; tail sums that are cut off are bounded by integrals and added; the last
  exponential is rounded up);
* a calibrated σ is one for which the δ, re-evaluated by the very function that ``dpaudit verify`` uses, meets the
  target (root-finding keeps the end of the bracket that passes).

References:
    Balle & Wang, "Improving the Gaussian Mechanism for Differential Privacy", ICML 2018 (Thm. 8, Alg. 1).
    Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020 (CKS; Thm. 7,
    Prop. 12 / Cor. 13, Thm. 14).
    Asoodeh, Liao, Calmon, Kosut & Sankar, "Three Variants of Differential Privacy: Lossless Conversion and
    Applications", IEEE JSAIT 2021 (the same RDP → (ε, δ) conversion).
See docs/mechanisms/gaussian.md.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.events import GaussianEvent
from dpaudit.mechanisms.discrete_bulk import MAX_SCALE_NUMERATOR, DiscreteGaussianSampler
from dpaudit.mechanisms.grid import add_grid_noise, default_grid, grid_sensitivity, scale_in_grid_units
from dpaudit.mechanisms.numerics import U, allowance, exp_up, smallest_passing
from dpaudit.mechanisms.outputs import Coverage, VectorOutput
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.mechanisms.registry import register_mechanism
from dpaudit.sensitivity import Neighbouring, Norm, Sensitivity
from dpaudit.validation import check_count, check_delta, check_epsilon, check_nonnegative, check_positive

#: above this many summed terms CKS Thm. 7 is replaced by the zCDP bound (memory; the bound stays valid)
_MAX_EXACT_TERMS = 2**22
#: the exact discrete tail is summed over 12σ past its start; the rest (< e⁻⁷² of the head) is bounded by an integral
_TAIL_SIGMAS = 12
#: Rényi orders α tried by the zCDP conversion (α − 1 log-spaced; any α > 1 gives a valid bound); the orders beyond
#: 10⁸ serve a tiny ε at a tiny ρ, whose best order is about ε/(2ρ)
_ORDERS = 1.0 + np.concatenate([np.logspace(-8, 8, 4001), np.logspace(8, 20, 3001)[1:]])
#: below this σ in grid units the privacy map returns the trivial bound δ ≤ 1 (σ² ≥ 2⁻¹⁰⁰⁰ stays a normal float)
_MIN_SIGMA_GRID = 2.0**-500
#: the largest σ, in grid units, that the release's sampler draws (DiscreteGaussianSampler: ⌊σ⌋ + 1 < 2⁵¹)
_SAMPLER_LIMIT = float(MAX_SCALE_NUMERATOR // 2 - 2)


def gaussian_grid_parameters(event: GaussianEvent) -> tuple[float, float]:
    """(σ in grid units, L2 sensitivity in grid units) of a discrete-Gaussian release."""
    delta_grid = grid_sensitivity(event.sensitivity.value, event.grid, event.dimension, Norm.L2)
    return event.sigma / event.grid, delta_grid


# --- continuous (analytic) Gaussian ---------------------------------------------------------------------------


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """Upper bound on the exact δ(ε) of the Gaussian mechanism N(0, σ²) with L2 sensitivity Δ.

    Balle & Wang 2018, Thm. 8: δ(ε) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ). Evaluated as
    Φ(a)·(1 − exp(ε + log Φ(b) − log Φ(a))) with ``scipy.special.log_ndtr`` and ``expm1``, so there is neither
    underflow for large ε nor catastrophic cancellation; the floating-point allowance of
    :mod:`dpaudit.mechanisms.numerics` is added before the final (upward-rounded) exponential.

    Args:
        sigma: noise standard deviation σ > 0.
        epsilon: ε ≥ 0.
        sensitivity: L2 sensitivity Δ > 0 (same units as σ).

    Returns:
        δ̄ ≥ δ(ε), in (0, 1].
    """
    sigma = check_positive("sigma", sigma)
    epsilon = check_nonnegative("epsilon", epsilon)
    sensitivity = check_positive("sensitivity", sensitivity)
    r = sensitivity / sigma
    s = epsilon * sigma / sensitivity
    a, b = 0.5 * r - s, -0.5 * r - s
    from scipy.special import log_ndtr  # here: `dpaudit report` imports this module, and needs no scipy

    log_p, log_q = float(log_ndtr(a)), float(log_ndtr(b))
    slack = allowance(epsilon, log_p, log_q, (1.0 + abs(a) + abs(b)) * (r + s))
    if math.isinf(log_p):  # Φ(a) underflows even in the log domain; δ ≤ Φ(a)
        return exp_up(log_p)
    exponent = min(epsilon + log_q - log_p - slack, 0.0)  # exactly < 0, as Φ(a) > e^ε Φ(b)
    if exponent == 0.0:  # only if rounding exceeded the allowance: fall back on δ ≤ Φ(a)
        return exp_up(log_p + slack)
    return exp_up(log_p + math.log(-math.expm1(exponent)) + slack)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest σ (to relative 10⁻¹²) with :func:`analytic_gaussian_delta`(σ, ε, Δ) ≤ δ.

    Balle & Wang 2018, Alg. 1 calibrates σ by solving δ(σ) = δ, which is decreasing in σ. Here the same equation
    is solved by bisection on σ that keeps the upper (passing) end, starting from the classical
    σ = Δ·√(2 ln(1.25/δ))/ε, so the result satisfies the re-evaluated bound by construction.

    Args:
        epsilon: target ε > 0.
        delta: target δ in (0, 1).
        sensitivity: L2 sensitivity Δ > 0.

    Returns:
        σ in the units of ``sensitivity``.

    Raises:
        InvalidParameter: a parameter out of its domain, or a starting σ that is not a positive finite float.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    sensitivity = check_positive("sensitivity", sensitivity)
    start = sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    if not 0.0 < start < math.inf:
        raise InvalidParameter(f"the Gaussian sigma for epsilon {epsilon!r}, delta {delta!r} and sensitivity "
                               f"{sensitivity!r} is not a positive finite float")
    return smallest_passing(lambda s: analytic_gaussian_delta(s, epsilon, sensitivity) <= delta, start)


# --- zCDP to (ε, δ) -------------------------------------------------------------------------------------------


def _log_delta_at_order(alpha: np.ndarray, rho: float, epsilon: float) -> np.ndarray:
    """log of the CKS Cor. 13 bound at order α (α − 1 is exact in floating point for α ≥ 1)."""
    return (alpha - 1.0) * (alpha * rho - epsilon + np.log1p(-1.0 / alpha)) - np.log(alpha)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """Upper bound on δ(ε) for a ρ-zCDP mechanism.

    CKS 2020, Prop. 12 / Cor. 13 (equivalently Asoodeh et al. 2021): for every α > 1,
    δ ≤ exp((α−1)(αρ − ε)) · (1 − 1/α)^(α−1) / α, i.e.
    log δ ≤ (α−1)(αρ − ε + log(1 − 1/α)) − log α. Every α gives a valid bound, so the minimum over a log-spaced
    grid of 4001 orders with α − 1 ∈ [10⁻⁸, 10⁸] and 3000 more up to 10²⁰ (a tiny ε at a tiny ρ is best served
    near α ≈ ε/(2ρ)), refined by a bounded scalar search, is sound; the floating-point allowance is added at the
    minimising α.

    Args:
        rho: ρ ≥ 0.
        epsilon: ε ≥ 0.

    Returns:
        δ̄ ≥ δ(ε), in (0, 1].
    """
    rho = check_nonnegative("rho", rho)
    epsilon = check_nonnegative("epsilon", epsilon)
    with np.errstate(over="ignore", invalid="ignore"):
        values = _log_delta_at_order(_ORDERS, rho, epsilon)
    values = np.where(np.isfinite(values), values, np.inf)  # an order whose bound overflows (either way) is unused
    best = int(np.argmin(values))
    from scipy.optimize import minimize_scalar  # here: scipy.optimize takes most of a second to import

    with np.errstate(over="ignore", invalid="ignore"):  # an order whose bound overflows is just not the minimum
        refined = minimize_scalar(lambda a: float(_log_delta_at_order(np.asarray(a), rho, epsilon)),
                                  bounds=(_ORDERS[max(best - 1, 0)], _ORDERS[min(best + 1, len(_ORDERS) - 1)]),
                                  method="bounded")
        alpha = float(refined.x) if math.isfinite(refined.fun) and refined.fun < values[best] else float(_ORDERS[best])
        log_delta = float(_log_delta_at_order(np.asarray(alpha), rho, epsilon))
    if not math.isfinite(log_delta):
        return 1.0
    slack = allowance((alpha - 1.0) * alpha * rho, (alpha - 1.0) * epsilon,
                   (alpha - 1.0) * math.log1p(-1.0 / alpha), math.log(alpha))
    return exp_up(log_delta + slack)


# --- discrete Gaussian ----------------------------------------------------------------------------------------


def _log_normaliser_lower(sigma: float) -> float:
    """log of a lower bound on Z = Σ_{y∈Z} exp(−y²/(2σ²)).

    Two lower bounds, the larger taken: Poisson summation gives Z = √(2π)σ·Σ_k exp(−2π²σ²k²) ≥ √(2π)σ (tight to
    10⁻⁸ for σ ≥ 1), and the partial sum over |y| ≤ 64 (exact to float precision for σ ≤ 5).
    """
    from scipy.special import logsumexp  # here: `dpaudit report` imports this module, and needs no scipy

    poisson = math.log(math.sqrt(2.0 * math.pi) * sigma)
    y = np.arange(1, 65, dtype=np.float64)
    partial = float(np.logaddexp(0.0, math.log(2.0) + logsumexp(-(y * y) / (2.0 * sigma * sigma))))
    return max(poisson, partial) - allowance(poisson, partial, terms=64)


def _discrete_gaussian_delta_thm7(sigma: float, shift: int, epsilon: float) -> float:
    """CKS 2020 Thm. 7 for N_Z(0, σ²) and integer sensitivity Δ, as a sum of non-negative terms.

    δ = P[Y > t₁] − e^ε P[Y > t₁ + Δ] with t₁ = εσ²/Δ − Δ/2, Y ~ N_Z(0, σ²). Substituting y ↦ y + Δ in the second
    sum gives δ = (1/Z) Σ_{y > t₁} w(y)·(1 − exp(ε − (2yΔ + Δ²)/(2σ²))), w(y) = exp(−y²/(2σ²)), where every term is
    ≥ 0 (so nothing cancels). The first index ⌊t₁⌋ + 1 is computed in exact rational arithmetic. The sum is taken
    over y₀ ≤ y ≤ y₁ = max(y₀, 0) + ⌈12σ⌉; the remaining terms are each ≤ w(y) and w decreases on [0, ∞), so they
    add at most ∫_{y₁}^∞ w = √(2π)σ·Φ(−y₁/σ), which is added. Z is replaced by a lower bound
    (:func:`_log_normaliser_lower`), each factor and the sum by upper bounds (floating-point allowance).
    """
    from scipy.special import log_ndtr, logsumexp  # here: `dpaudit report` imports this module, and needs no scipy

    t1 = Fraction(epsilon) * Fraction(sigma) ** 2 / shift - Fraction(shift, 2)
    y0 = math.floor(t1) + 1
    y1 = max(y0, 0) + math.ceil(_TAIL_SIGMAS * sigma)
    y = np.arange(y0, y1 + 1, dtype=np.float64)
    two_var = 2.0 * sigma * sigma
    log_w = -(y * y) / two_var
    loss = (2.0 * shift * y + float(shift) ** 2) / two_var
    loss_slack = 16.0 * U * (1.0 + epsilon + np.abs(loss))
    with np.errstate(divide="ignore"):  # a factor that is exactly 0 contributes log 0 = −inf
        log_factor = np.log(-np.expm1(np.minimum(epsilon - loss - loss_slack, 0.0)))
    log_head = float(logsumexp(log_w + log_factor))
    log_tail = math.log(math.sqrt(2.0 * math.pi) * sigma) + float(log_ndtr(-y1 / sigma))
    head_magnitude = float(np.max(np.abs(log_w))) + float(np.max(np.abs(log_factor[np.isfinite(log_factor)]),
                                                                  initial=0.0))
    log_numerator = float(np.logaddexp(log_head, log_tail))
    slack = allowance(head_magnitude, log_tail, log_numerator, y1 / sigma, terms=len(y))
    return exp_up(log_numerator - _log_normaliser_lower(sigma) + slack)


def discrete_gaussian_delta(sigma_grid: float, sensitivity_grid: float, epsilon: float, dimension: int) -> float:
    """Upper bound on δ(ε) of discrete Gaussian noise N_Z(0, σ²) per coordinate, L2 sensitivity Δ (grid units).

    * ``dimension == 1`` and integer Δ: CKS 2020 Thm. 7, which is exact for a scalar integer-valued query whose
      values on neighbours differ by at most Δ; summed as in :func:`_discrete_gaussian_delta_thm7` with every
      truncation and rounding error bounded and added. (If that sum would need more than 2²² terms, i.e. σ above
      about 3.5·10⁵ grid units, the zCDP bound below is used instead; it is valid, only looser.) Below 2⁻⁵⁰⁰ grid
      units, where σ² would leave the normal float range, the trivial bound δ ≤ 1 is returned.
    * otherwise: the multivariate discrete Gaussian with L2 sensitivity Δ is ρ-zCDP with ρ = Δ²/(2σ²)
      (CKS 2020, Thm. 14), converted with :func:`zcdp_delta`. The rounded-value difference is an integer vector,
      so the Rényi bound of CKS Prop. 5 applies coordinate-wise.

    Args:
        sigma_grid: σ in grid units, > 0.
        sensitivity_grid: L2 sensitivity Δ in grid units (from :func:`~dpaudit.mechanisms.grid.grid_sensitivity`).
        epsilon: ε ≥ 0.
        dimension: number of coordinates d ≥ 1.

    Returns:
        δ̄ ≥ δ(ε), in (0, 1].
    """
    sigma_grid = check_positive("sigma_grid", sigma_grid)
    sensitivity_grid = check_positive("sensitivity_grid", sensitivity_grid)
    epsilon = check_nonnegative("epsilon", epsilon)
    dimension = check_count("dimension", dimension)
    if sigma_grid < _MIN_SIGMA_GRID:  # σ² would leave the normal float range in the sums below; δ ≤ 1 always holds
        return 1.0
    if dimension == 1 and sensitivity_grid.is_integer():
        shift = int(sensitivity_grid)
        t1 = epsilon * (sigma_grid * sigma_grid) / shift - shift / 2  # a float product overflows to inf, not an error
        terms = max(0.0, -t1) + _TAIL_SIGMAS * sigma_grid
        if terms <= _MAX_EXACT_TERMS and t1 + terms < 2.0**52:  # indices stay exact in float64
            return _discrete_gaussian_delta_thm7(sigma_grid, shift, epsilon)
    rho = sensitivity_grid * sensitivity_grid / (2.0 * sigma_grid * sigma_grid) * (1.0 + 8.0 * U)
    return zcdp_delta(rho, epsilon)


def calibrate_discrete_gaussian(epsilon: float, delta: float, sensitivity: float, grid: float,
                                dimension: int) -> float:
    """σ in value units such that discrete Gaussian noise on ``grid``·Z is (ε, δ)-DP after grid rounding.

    Solves :func:`discrete_gaussian_delta`(σ/γ, grid_sensitivity(Δ, γ, d, 'l2'), ε, d) ≤ δ by bisection from the
    analytic Gaussian σ for the rounded sensitivity (capped at the sampler's range, 2⁵¹ grid units), keeping the
    passing end. σ/γ is computed exactly as :func:`gaussian_grid_parameters` computes it, so
    :func:`gaussian_event_delta` of the resulting event is ≤ δ.

    Args:
        epsilon: target ε > 0.
        delta: target δ in (0, 1).
        sensitivity: L2 sensitivity Δ in value units.
        grid: grid spacing γ > 0.
        dimension: number of coordinates d ≥ 1.

    Returns:
        σ in value units.

    Raises:
        InvalidParameter: a parameter out of its domain, or no σ in the sampler's range meets (ε, δ) (checked
            first, so a tiny ε or δ fails at once instead of searching up to the float range).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    grid = check_positive("grid", grid)
    delta_grid = grid_sensitivity(sensitivity, grid, dimension, Norm.L2)

    def passes(sigma: float) -> bool:
        return discrete_gaussian_delta(sigma / grid, delta_grid, epsilon, dimension) <= delta

    largest = _SAMPLER_LIMIT * grid
    if math.isfinite(largest) and not passes(largest):
        raise InvalidParameter(f"no sigma below 2**51 grid units of {grid!r} (the sampler's range) makes the release "
                               f"({epsilon!r}, {delta!r})-DP for sensitivity {sensitivity!r}: use a coarser grid or "
                               "a larger epsilon or delta")
    return smallest_passing(passes, min(analytic_gaussian_sigma(epsilon, delta, delta_grid * grid), largest))


def gaussian_event_delta(event: GaussianEvent) -> float:
    """Upper bound on the δ a recorded discrete-Gaussian event achieves at its recorded ε.

    ``dpaudit verify`` accepts the event's recorded δ only if it is ≥ this value.
    """
    sigma_grid, delta_grid = gaussian_grid_parameters(event)
    return discrete_gaussian_delta(sigma_grid, delta_grid, event.epsilon, event.dimension)


def gaussian_event(neighbouring: Neighbouring, sensitivity: Sensitivity, epsilon: float, delta: float, *,
                   dimension: int = 1, label: str = "", grid: float | None = None) -> GaussianEvent:
    """The calibrated event of an (ε, δ)-DP release of ``dimension`` coordinates (grid γ = Δ/2¹⁰ unless given).

    Raises:
        InvalidParameter: ε, δ, the grid or the dimension out of range, a sensitivity of the wrong norm, or a σ the
            sampler cannot draw (2⁵¹ grid units or more): refused here, before anything is charged.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    grid = grid if grid is not None else default_grid(sensitivity.value)
    sigma = calibrate_discrete_gaussian(epsilon, delta, sensitivity.value, grid, dimension)
    DiscreteGaussianSampler(scale_in_grid_units(sigma, grid) ** 2)  # the release's range check
    return GaussianEvent(neighbouring=neighbouring, sensitivity=sensitivity, label=label, epsilon=epsilon,
                         delta=delta, sigma=sigma, grid=grid, dimension=dimension)


def coverage(event: GaussianEvent) -> Coverage:
    """One charge covers one output of exactly ``dimension`` numbers."""
    return Coverage(VectorOutput(event.dimension), 1)


def release_gaussian(value: float | np.ndarray, sigma: float, grid: float, rng: RandomSource) -> float | np.ndarray:
    """value + γ·G per coordinate, G ~ discrete Gaussian N_Z(0, (σ/γ)²) (CKS 2020, Algorithm 3).

    (ε, δ)-DP for L2 sensitivity Δ when sigma comes from :func:`calibrate_discrete_gaussian`. The noise is drawn
    by the vectorised exact sampler (:class:`~dpaudit.mechanisms.discrete_bulk.DiscreteGaussianSampler`, one
    instance for the whole array) with variance (σ/γ)² exactly, where σ/γ is
    :func:`~dpaudit.mechanisms.grid.scale_in_grid_units`.

    Args:
        value: the true value, a real number or a numeric array (any shape).
        sigma: noise parameter σ > 0 in value units (the variance parameter is σ², as in CKS).
        grid: grid spacing γ > 0.
        rng: source of uniform integers (:class:`~dpaudit.mechanisms.randomness.SecureRandom` for releases).

    Returns:
        A float (for a scalar ``value``) or a float64 array of the same shape, every entry a multiple of γ
        (up to the final float rounding of k·γ).

    Raises:
        InvalidParameter: a NaN or infinite coordinate, a non-numeric value, a sigma/grid that is not > 0, or a
            sigma of 2⁵¹ grid units or more.
    """
    check_positive("sigma", sigma)
    check_positive("grid", grid)
    sampler = DiscreteGaussianSampler(scale_in_grid_units(sigma, grid) ** 2)
    return add_grid_noise(value, grid, lambda count: sampler(count, rng))


def release(event: GaussianEvent, value: float | np.ndarray, rng: RandomSource) -> float | np.ndarray:
    """The noisy ``value`` for a charged ``event`` (:func:`release_gaussian` with the event's σ and grid)."""
    return release_gaussian(value, event.sigma, event.grid, rng)


register_mechanism(GaussianEvent, coverage=coverage)
