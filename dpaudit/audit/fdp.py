"""The f-DP one-run audit of Mahloujifar, Melis & Chaudhuri 2025 ("Auditing f-Differential Privacy in One Run").

Same game as :mod:`dpaudit.audit.steinke` (m canaries in with probability ½, k guesses, c correct), but the claim
tested is "M is f-DP" for a whole trade-off curve f (:mod:`dpaudit.audit.tradeoff`). Their Algorithm 3 (the
version with caps, "audit_rh_with_cap") decides whether the probability of c or more correct guesses out of k is
below τ for every f-DP mechanism and every guessing adversary:

    r ← τ·c/m,  h ← τ·(k − c)/m
    for i = c − 1, …, 0:   h' ← max(h, f̄⁻¹(r));   r ← min(1, r + i/(k − i)·(h' − h));   h ← h'
    reject "f-DP" at level τ  iff  r + h > k/m.

Once h stops growing neither r nor h can change again (f̄⁻¹(r) is fixed while r is), so the loop stops there.
A rejection is declared only when r + h exceeds k/m by the relative :data:`~dpaudit.audit.steinke.SLACK`, so
floating-point rounding cannot produce one.

ε_lb: within a family ordered by leakage θ (:mod:`dpaudit.audit.tradeoff`), rejecting the curve at θ rejects
every curve below it in leakage; the largest rejected θ is bisected (lower, verified end kept) and converted to ε at
δ by the family, rounded down. The result is a lower bound *given that the mechanism's curve is in the family*;
with :class:`~dpaudit.audit.tradeoff.ApproxDpFamily` it needs no such assumption.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dpaudit.audit.steinke import SLACK, GuessCounts, check_significance
from dpaudit.audit.tradeoff import Family, GaussianCurve, ProfileCurve

#: relative width to which the leakage parameter θ is bisected
THETA_TOLERANCE = 1e-4


def fdp_rejects(curve: GaussianCurve | ProfileCurve, counts: GuessCounts, level: float) -> bool:
    """Mahloujifar et al. 2025, Algorithm 3: True when P[≥ c correct of k] < ``level`` for every f-DP mechanism.

    Args:
        curve: the claimed trade-off curve f (anything with ``inverse_complement`` = f̄⁻¹).
        counts: m canaries, k guesses, c correct.
        level: τ, the significance level.
    """
    check_significance(level)
    m, k, c = counts.canaries, counts.guesses, counts.correct
    if c == 0:
        return False
    r = level * c / m
    h = level * (k - c) / m
    for i in range(c - 1, -1, -1):
        grown = max(h, curve.inverse_complement(r))
        if grown == h:
            break
        r = min(1.0, r + i / (k - i) * (grown - h))
        h = grown
    return r + h > (k / m) * (1.0 + SLACK)


def largest_rejected(rejects: Callable[[float], bool], theta_max: float) -> float:
    """The largest leakage θ in [0, ``theta_max``] that ``rejects`` (monotone: rejections form an interval [0, θ*)).

    Bisected to :data:`THETA_TOLERANCE` (relative); the lower end, a θ at which ``rejects`` returned True, is
    returned, so rounding can only lower it. 0 when θ = 0 is not rejected.
    """
    if not rejects(0.0):
        return 0.0
    lo, hi = 0.0, min(1.0, theta_max)
    while rejects(hi):
        lo, hi = hi, 2.0 * hi
        if hi > theta_max:
            return lo
    while hi - lo > THETA_TOLERANCE * max(hi, 1e-3):
        mid = 0.5 * (lo + hi)
        if rejects(mid):
            lo = mid
        else:
            hi = mid
    return lo


def fdp_theta(family: Family, outcomes: Sequence[GuessCounts], level: float) -> tuple[float, int | None]:
    """The largest leakage θ of ``family`` that some outcome rejects at ``level`` (module docstring).

    One bisection serves a whole sweep: the sup over outcomes of each one's largest rejected θ is the largest θ
    that some outcome rejects, since each outcome's rejections form an interval [0, θ_i) of θ.

    Returns:
        (θ_lb, index of an outcome that rejects θ_lb); (0, None) when no outcome rejects θ = 0.
    """
    def rejecting(theta: float) -> int | None:
        curve = family.curve(theta)
        return next((i for i, counts in enumerate(outcomes) if fdp_rejects(curve, counts, level)), None)

    theta = largest_rejected(lambda t: rejecting(t) is not None, family.theta_max)
    return theta, rejecting(theta)


def fdp_epsilon(family: Family, counts: GuessCounts, delta: float, level: float = 0.05) -> float:
    """ε_lb of the f-DP audit of one outcome within ``family`` (module docstring).

    Returns:
        The family's ε at ``delta`` of the largest rejected leakage θ, rounded down; 0 when not even θ = 0 is
        rejected ("no detectable leakage").
    """
    theta, _ = fdp_theta(family, [counts], level)
    return family.epsilon(theta, delta) if theta > 0 else 0.0
