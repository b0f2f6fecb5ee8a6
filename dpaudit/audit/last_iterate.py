"""The last-iterate heuristic of Steinke et al. 2024: a HEURISTIC ε for DP-SGD that releases only its final model.

Steinke, Nasr, Ganesh, Balle, Choquette-Choo, Jagielski, Hayes, Thakurta, Smith & Terzis 2024, "The Last Iterate
Advantage: Empirical Auditing and Principled Heuristic Analysis of Differentially Private SGD" (arXiv 2410.06186),
analyse DP-SGD whose losses are *linear*: then the last iterate is θ_0 minus the learning rate times the sum of all
noisy clipped gradients, and a canary's total contribution is C·K with K ~ Bin(N, q) (N steps, Poisson rate q),
beside Gaussian noise N(0, N σ² C²). In units of C, the heuristic ε(δ) is the ε at δ of the pair (their Thm. 1 /
Eq. (2))

    P = N(0, N σ²)        and        Q = Σ_k Bin(N, q)(k) · N(k, N σ²),

in both directions (add and remove: H_ε(Q‖P) and H_ε(P‖Q)), the larger.

**It is a heuristic, not a bound in either direction**: the full-transcript analysis (ε_cert) is an upper bound
for every loss; the heuristic is exact for linear losses only, can lie below the true ε of a run with other losses
(Steinke et al. 2024, Sec. 5, give counterexamples), and is no lower bound either (it is not measured). Reports label
it so and never compare it with the claim.

Computation (exact up to root finding, no discretisation): the likelihood ratio L(x) = q(x)/p(x) = Σ_k w_k
exp((k x − k²/2)/s²), s² = N σ², is increasing in x, so each hockey-stick divergence is a difference of Gaussian
tails at the one threshold where L crosses e^{±ε}:

    H_ε(Q‖P) = Σ_k w_k Φ̄((t − k)/s) − e^ε Φ̄(t/s),      log L(t) = ε;
    H_ε(P‖Q) = Φ(t'/s) − e^ε Σ_k w_k Φ((t' − k)/s),       log L(t') = −ε  (0 when e^{−ε} ≤ w_0 = (1 − q)^N).

ε(δ) is bisected on the non-increasing δ(ε) = max of both, and the upper end (δ(ε) ≤ δ verified) is reported.
The result is deterministic but not bit-for-bit portable (scipy's root finder and special functions); ``verify``
recomputes it within a relative tolerance (:data:`dpaudit.audit.evidence.TOLERANCE`).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, special, stats

from dpaudit.validation import check_count, check_delta, check_positive, check_probability

#: bisection width of ε(δ), relative to max(1, ε); the upper end is reported
_EPS_TOLERANCE = 1e-10
#: a Binomial weight below this (relative to 1) cannot move δ at the precision of float64
_NEGLIGIBLE = 1e-300


@functools.lru_cache(maxsize=32)
def _weights(sample_rate: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(k, Bin(N, q)(k)) for the k with non-negligible weight."""
    k = np.arange(steps + 1, dtype=float)
    w = stats.binom.pmf(k, steps, sample_rate)
    keep = w > _NEGLIGIBLE
    return k[keep], w[keep]


def _log_ratio(x: float, k: np.ndarray, log_w: np.ndarray, s2: float) -> float:
    """log L(x) = log Σ_k w_k exp((k x − k²/2)/s²) (module docstring)."""
    return float(special.logsumexp(log_w + (k * x - 0.5 * k * k) / s2))


def _threshold(level: float, k: np.ndarray, log_w: np.ndarray, s2: float) -> float:
    """The x with log L(x) = ``level`` (L is increasing; the caller ensures the level is attained)."""
    lo, hi = -1.0, 1.0
    while _log_ratio(lo, k, log_w, s2) > level:
        lo *= 2.0
    while _log_ratio(hi, k, log_w, s2) < level:
        hi *= 2.0
    return float(optimize.brentq(lambda x: _log_ratio(x, k, log_w, s2) - level, lo, hi, xtol=1e-14, rtol=1e-15,
                                 maxiter=500))


def hockey_sticks(epsilon: float, sample_rate: float, steps: int, noise_multiplier: float) -> tuple[float, float]:
    """(H_ε(Q‖P), H_ε(P‖Q)) of the last-iterate pair (module docstring), each clipped to [0, 1].

    Args:
        epsilon: ε ≥ 0.
        sample_rate: Poisson rate q in (0, 1].
        steps: N ≥ 1.
        noise_multiplier: σ > 0.
    """
    k, w = _weights(sample_rate, steps)
    log_w = np.log(w)
    s = math.sqrt(steps) * noise_multiplier
    s2 = s * s
    t = _threshold(epsilon, k, log_w, s2)
    remove = float(np.sum(w * special.ndtr((k - t) / s)) - math.exp(epsilon + special.log_ndtr(-t / s)))
    w0 = w[0] if k[0] == 0 else 0.0
    if w0 > 0 and -epsilon <= math.log(w0):
        add = 0.0
    else:
        t_add = _threshold(-epsilon, k, log_w, s2)
        add = float(special.ndtr(t_add / s)
                    - math.exp(epsilon + special.logsumexp(log_w + special.log_ndtr((t_add - k) / s))))
    return min(1.0, max(0.0, remove)), min(1.0, max(0.0, add))


def last_iterate_delta(epsilon: float, sample_rate: float, steps: int, noise_multiplier: float) -> float:
    """δ(ε) of the last-iterate heuristic: the larger hockey-stick divergence of the two directions."""
    return max(hockey_sticks(epsilon, sample_rate, steps, noise_multiplier))


@functools.lru_cache(maxsize=64)
def last_iterate_epsilon(sample_rate: float, steps: int, noise_multiplier: float, delta: float) -> float:
    """The last-iterate heuristic ε at δ of N DP-SGD steps at Poisson rate q and noise multiplier σ.

    A HEURISTIC (Steinke et al. 2024, Thm. 1; module docstring): exact for linear losses, neither an upper nor a
    lower bound on the ε of a DP-SGD run in general.

    Args:
        sample_rate: q in (0, 1].
        steps: N ≥ 1.
        noise_multiplier: σ > 0 (noise σ·C on the clipped gradient sum).
        delta: δ in (0, 1).

    Returns:
        The smallest ε (within a relative 1e-10, upper end) with δ(ε) ≤ δ.

    Raises:
        InvalidParameter: a parameter out of range.
    """
    check_probability("sample_rate", sample_rate)
    check_positive("sample_rate", sample_rate)
    check_count("steps", steps)
    check_positive("noise_multiplier", noise_multiplier)
    check_delta(delta, allow_zero=False)
    if last_iterate_delta(0.0, sample_rate, steps, noise_multiplier) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while last_iterate_delta(hi, sample_rate, steps, noise_multiplier) > delta:
        lo, hi = hi, 2.0 * hi
    while hi - lo > _EPS_TOLERANCE * max(1.0, lo):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if last_iterate_delta(mid, sample_rate, steps, noise_multiplier) > delta else (lo, mid)
    return hi
