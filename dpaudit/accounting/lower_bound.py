"""A cheap lower bound on the ε(δ) that any sound accountant reports, so the budget filter can refuse at once.

Every sound accountant reports an ε(δ) at least the true ε(δ) of any pair of output distributions the event
description allows, and composition never lowers ε(δ) (dropping the other outputs is post-processing). For a
discrete Laplace leaf (noise scale t grid units, L1 grid sensitivity Δ_γ; :class:`~dpaudit.events.LaplaceEvent`)
the event allows the pair P = DLap(0, t), Q = DLap(Δ_γ, t), whose privacy loss ln(P(y)/Q(y)) equals the privacy
map ε_L = Δ_γ/t on every y ≤ 0, i.e. with P-probability at least 1/2. Hence (Balle et al. 2018, hockey-stick form
of (ε, δ)-DP: δ(ε') = E_P[(1 − e^{ε'−L})₊])

    δ(ε') ≥ ½ (1 − e^{ε'−ε_L}),   so   ε(δ) ≥ ε_L + ln(1 − 2δ)   for δ < ½.

:func:`epsilon_lower_bound` returns the largest such bound over the Laplace leaves, lowered by a relative 10⁻⁹
so that floating-point rounding can only make it smaller. Other mechanisms contribute nothing: their privacy maps
need not be attained with probability ½ (the exponential mechanism's is not), and 0 is always a lower bound.

References:
    Balle, Barthe & Gaboardi, "Privacy Amplification by Subsampling", NeurIPS 2018 (hockey-stick divergence).
    Canonne, Kamath & Steinke 2020, Sec. 5 (the discrete Laplace privacy loss).
"""

from __future__ import annotations

import math

from dpaudit.events import LaplaceEvent, PrivacyEvent
from dpaudit.mechanisms.registry import entry_for

#: relative slack taken off the bound for floating-point rounding
_SLACK = 1e-9


def epsilon_lower_bound(event: PrivacyEvent, delta: float) -> float:
    """A lower bound on ε(δ) of ``event`` (a leaf or a composition) that every sound accountant's ε respects.

    Args:
        event: the candidate composition.
        delta: δ in (0, ½).

    Returns:
        max over Laplace leaves of ε_L + ln(1 − 2δ), lowered by a relative 10⁻⁹; 0 if that is not positive.
    """
    if not 0 < delta < 0.5:
        return 0.0
    best = 0.0
    for leaf, _count in event.accounting_units():
        if isinstance(leaf, LaplaceEvent):
            best = max(best, entry_for(leaf).pure_epsilon(leaf) + math.log1p(-2 * delta))
    return max(0.0, best * (1 - _SLACK))
