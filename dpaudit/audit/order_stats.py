"""The order-statistics one-run test of Xiang, Wang, Xiao, Tian & Wang 2025 ("Tight Privacy Audit in One Run",
arXiv 2509.08704), for μ-GDP channels, with a *product* assumption stated below.

Game: n canaries, bits fair and independent; the auditor releases r guesses and T of them are wrong. Their tail
bound (the formula of the authors' implementation notes, docs/IMPLEMENTATION.md of
github.com/zihangxiang/tight-privacy-audit-in-one-run, eq. (1); the paper's own text could not be read here):

    P[T ≤ u] = E_W[ BinCDF(u; r, γ̄(W)) ],   W ~ Beta(n − r, r + 1),

W the score quantile of the cut (the most confident guess *not* released) and γ̄(w) the mean error of the optimal
(MAP) decoder over the scores above quantile w, all under the canonical channel pair of the claimed curve. For the
μ-GDP pair (N(0, 1), N(μ, 1)), with s = |y − μ/2| the decoder's confidence and the mixture ½(P + Q) as the law of an
outcome (fair bits), the fraction of outcomes with confidence above s and its error mass are

    A(s) = Φ(μ/2 − s) + Φ(−μ/2 − s),   G(s) = Φ(−μ/2 − s),   γ̄ = G(s)/A(s) at A(s) = 1 − w,

and with V = 1 − W ~ Beta(r + 1, n − r) the tail is E_V[BinCDF(u; r, G/A at A = V)]. For r = n it is
BinCDF(u; n, Φ(−μ/2)).

**When it is valid (our derivation; the conservative reading).** If every canary passes through *its own
independent* channel whose trade-off curve is ≥ G_μ (a product mechanism, as in the idealised setting of
Mahloujifar et al., Algorithm 4), then (i) by Blackwell's theorem (Dong, Roth & Su 2022, Thm. 2.10) each channel
is a post-processing of (N(0, 1), N(μ, 1)), so the audit is an adversary against the canonical product; (ii) given
the outputs the bits are independent, so any r guesses have independent errors with probabilities at least the r
smallest posterior errors, and T is stochastically smallest for the MAP guesses on the r most confident canaries;
(iii) for those, given W the errors are i.i.d. Bernoulli(γ̄(W)). Hence P[T ≤ u] is at most the formula for every
product mechanism with curves ≥ G_μ and every adversary releasing r guesses (r fixed before the run).
Without the product assumption it is *not* a test of f-DP: a mechanism that includes all canaries with
probability q and none otherwise is per canary exactly as private as Poisson subsampling at rate q, yet its
error count is near 0 with probability q; a product model of the same curve calls that outcome impossible and
rejects the true claim with probability ≈ q. So this test is reported for the idealised product setting only, not
by the DP-SGD or mechanism audits (where canaries share a model and interfere).

**Arithmetic, conservative by construction.** The expectation over V is bounded above by an upper Riemann sum:
the integrand decreases in v (γ̄ increases with v, BinCDF decreases with p), so over each cell [v_j, v_{j+1}) it is
at most its value at v_j, and the cell's probability is an exact Beta-CDF difference (scipy's incomplete beta).
γ̄ at v_j is evaluated at a confidence s with A(s) ≤ v_j (bisection keeps that end), which can only lower γ̄ and
raise the integrand. The sum therefore over-states the p-value; a claim is rejected only when the p-value clears
the level by :data:`~dpaudit.audit.steinke.SLACK`, and μ_lb is bisected with the lower, rejected end kept.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import special, stats

from dpaudit.audit.fdp import largest_rejected
from dpaudit.audit.steinke import GuessCounts, check_significance, rejects
from dpaudit.audit.tradeoff import GaussianFamily
from dpaudit.errors import InvalidParameter

#: equal-probability cells of V in the upper Riemann sum (plus geometrically finer ones in V's lower tail)
CELLS = 4000
#: bisection steps for the confidence s with A(s) = v (the interval [0, μ/2 + 40] shrinks below 1e-17)
_S_STEPS = 64


@functools.lru_cache(maxsize=256)
def _cut_cells(canaries: int, guesses: int) -> tuple[np.ndarray, np.ndarray]:
    """Left ends v_j of the cells of V = 1 − W ~ Beta(r + 1, n − r) and their exact probabilities (module
    docstring); the first cell starts at v = 0."""
    a, b = guesses + 1, canaries - guesses
    levels = np.union1d(np.linspace(0.0, 1.0, CELLS + 1)[1:-1], np.geomspace(1e-15, 1.0 / CELLS, 30))
    inner = np.unique(stats.beta.ppf(levels, a, b))
    inner = inner[(inner > 0) & (inner < 1)]
    edges = np.concatenate(([0.0], inner, [1.0]))
    masses = np.diff(stats.beta.cdf(edges, a, b))
    return edges[:-1], np.maximum(masses, 0.0)


def mean_error_above(mu: float, fraction: np.ndarray) -> np.ndarray:
    """γ̄: the MAP decoder's mean error over the most confident ``fraction`` of outcomes of the μ-GDP pair, evaluated
    at a confidence s with A(s) ≤ ``fraction`` (so never above the exact value; module docstring). ``fraction`` > 0."""
    fraction = np.asarray(fraction, dtype=float)
    lo, hi = np.zeros_like(fraction), np.full_like(fraction, mu / 2 + 40.0)
    for _ in range(_S_STEPS):
        mid = 0.5 * (lo + hi)
        above = special.ndtr(mu / 2 - mid) + special.ndtr(-mu / 2 - mid) <= fraction
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    log_mass = np.logaddexp(special.log_ndtr(mu / 2 - hi), special.log_ndtr(-mu / 2 - hi))
    return np.minimum(0.5, np.exp(special.log_ndtr(-mu / 2 - hi) - log_mass))


def order_stats_p_value(mu: float, counts: GuessCounts) -> float:
    """An upper bound on P[T ≤ errors] for a product of μ-GDP channels (module docstring): the p-value of the claim.

    Args:
        mu: the claimed μ ≥ 0.
        counts: n canaries, r guesses released, c of them correct (T = r − c errors).
    """
    if not (mu >= 0 and np.isfinite(mu)):
        raise InvalidParameter(f"mu must be a finite number >= 0, got {mu!r}")
    n, r, errors = counts.canaries, counts.guesses, counts.guesses - counts.correct
    if r == 0:
        return 1.0
    if r == n:
        return min(1.0, float(stats.binom.cdf(errors, n, special.ndtr(-mu / 2))))
    starts, masses = _cut_cells(n, r)
    tail = np.ones_like(starts)
    inside = starts > 0
    tail[inside] = stats.binom.cdf(errors, r, mean_error_above(mu, starts[inside]))
    return min(1.0, float(np.dot(masses, tail)))


def order_stats_mu(counts: GuessCounts, level: float = 0.05) -> float:
    """μ_lb: the largest μ (lower end of the bisection) whose product claim is rejected at ``level``; 0 if none."""
    check_significance(level)
    return largest_rejected(lambda mu: rejects(order_stats_p_value(mu, counts), level), GaussianFamily().theta_max)


def order_stats_epsilon(counts: GuessCounts, delta: float, level: float = 0.05) -> float:
    """ε_lb of the order-statistics test: the ε at ``delta`` of μ_lb-GDP, rounded down; 0 when nothing is rejected.

    A lower bound only for product mechanisms whose channels are μ-GDP for some μ (module docstring).
    """
    mu = order_stats_mu(counts, level)
    return GaussianFamily().epsilon(mu, delta) if mu > 0 else 0.0
