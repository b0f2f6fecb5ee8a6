"""The standard budget split of the naive baseline: one common noise factor for every candidate.

When the composed cost of training every candidate of the grid exceeds the session budget (ε_B, δ_B), the naive
method multiplies every candidate's noise multiplier σ by one common factor f ≥ 1 so that the composition fits.
f is computed from public quantities only (the grid, the public training-set size n, the budget), before any data
is used, by bisection on f: ε(f) = ε at δ_B of the composition of the candidates' DP-SGD events with noise
multipliers f·σ_i, bounded by the tightest accountant. ε(f) is non-increasing in f (a larger σ is post-processing
by extra Gaussian noise, docs/accounting.md "Envelope charges"), so bisection applies; the factor returned is the
upper end of the final bracket, which satisfies ε(f) ≤ ε_B by construction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dpaudit.accounting import get_accountant
from dpaudit.errors import InvalidParameter
from dpaudit.events import PoissonSubsampledGaussianEvent, compose
from dpaudit.validation import check_delta, check_epsilon, check_positive

#: the factor search gives up beyond this (the grid could not be afforded with any sensible noise)
MAX_FACTOR = 2.0**20


def composed_epsilon(events: Sequence[PoissonSubsampledGaussianEvent], factor: float, delta: float) -> float:
    """ε at ``delta`` (tightest accountant) of the composition of ``events`` with every σ multiplied by ``factor``."""
    scaled = [dataclasses.replace(e, noise_multiplier=e.noise_multiplier * factor) for e in events]
    return get_accountant("tightest").epsilon(compose(scaled), delta)


def noise_factor(events: Sequence[PoissonSubsampledGaussianEvent], epsilon: float, delta: float, *,
                 rel_tol: float = 0.01) -> float:
    """The smallest common noise factor f ≥ 1 (to relative precision ``rel_tol``) whose composition fits.

    Args:
        events: the candidates' DP-SGD events (public: built from the grid and n).
        epsilon, delta: the budget the composition must fit.
        rel_tol: bisection stops once the bracket [lo, hi] has hi ≤ lo·(1 + rel_tol).

    Returns:
        1.0 if the unscaled grid fits; otherwise f with ε(f) ≤ ``epsilon`` and ε(f / (1 + rel_tol)) > ``epsilon``.

    Raises:
        InvalidParameter: no event, bad budget, or no factor up to :data:`MAX_FACTOR` fits.
    """
    if not events:
        raise InvalidParameter("noise_factor needs at least one event")
    check_epsilon(epsilon, "epsilon")
    check_delta(delta, "delta", allow_zero=False)
    check_positive("rel_tol", rel_tol)
    if composed_epsilon(events, 1.0, delta) <= epsilon:
        return 1.0
    lo, hi = 1.0, 2.0
    while composed_epsilon(events, hi, delta) > epsilon:
        lo, hi = hi, 2.0 * hi
        if hi > MAX_FACTOR:
            raise InvalidParameter(f"no noise factor up to {MAX_FACTOR} fits the grid into epsilon={epsilon}")
    while hi > lo * (1.0 + rel_tol):
        mid = (lo * hi) ** 0.5
        if composed_epsilon(events, mid, delta) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi
