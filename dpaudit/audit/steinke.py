"""The (ε, δ) one-run audit of Steinke, Nasr & Jagielski 2023 ("Privacy auditing with one (1) training run").

Game (their Sec. 3): m canaries, each included independently with probability ½; after one run the auditor
guesses "in" or "out" for r of them (abstaining on the rest) and v of the guesses are correct. If the mechanism is
(ε, δ)-DP, for every v (their Thm. 3.1 / Prop. 5.2, the bound their Algorithm 2 evaluates)

    P[V ≥ v] ≤ β + α·2mδ,   β = P[Bin(r, p_ε) ≥ v],   α = max_{1≤i≤v} P[v − i ≤ Bin(r, p_ε) < v] / i,

with p_ε = e^ε/(1 + e^ε), the accuracy of ε-randomized response. The right-hand side is the p-value of the claim
"(ε, δ)-DP"; the audit's lower bound ε_lb is the largest ε whose p-value is below the level (0.05).

Soundness of the arithmetic (a reported ε_lb must be a valid lower bound): the binomial pmf and tail come from
scipy's regularised incomplete beta (relative error ~1e-14); a p-value is treated as below the level only when
it is below ``level·(1 − SLACK)``, SLACK = 1e-9, far above that error. ε_lb is found by bisection and the value
reported is the lower end of the final bracket, an ε at which that strict test was passed, so rounding can only
lower it. An (ε, δ)-DP mechanism is (ε', δ)-DP for every ε' ≥ ε, so rejecting ε_lb rejects every smaller ε too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_delta

#: relative margin by which a computed p-value must clear the level before a claim counts as rejected
SLACK = 1e-9
#: ε_lb is bisected to this absolute width (the lower, verified end is reported)
EPSILON_TOLERANCE = 1e-6
#: the bisection never looks above this ε (the p-value of ε = 60 is 1 to double precision for any r ≤ 10⁹)
EPSILON_CAP = 60.0


@dataclass(frozen=True)
class GuessCounts:
    """The outcome of one audit's guessing: m canaries, ``guesses`` = r guesses made, ``correct`` = v of them right.

    Raises:
        InvalidParameter: not 0 ≤ correct ≤ guesses ≤ canaries, or canaries < 1.
    """

    canaries: int
    guesses: int
    correct: int

    def __post_init__(self) -> None:
        check_count("canaries", self.canaries)
        check_count("guesses", self.guesses, minimum=0)
        check_count("correct", self.correct, minimum=0)
        if not self.correct <= self.guesses <= self.canaries:
            raise InvalidParameter(f"need 0 <= correct <= guesses <= canaries, got correct={self.correct}, "
                                   f"guesses={self.guesses}, canaries={self.canaries}")


def check_significance(level: float) -> float:
    """A test's significance level: in (0, 1).

    Raises:
        InvalidParameter: a level outside (0, 1).
    """
    if not 0 < level < 1:
        raise InvalidParameter(f"level must lie in (0, 1), got {level!r}")
    return level


def rejects(p_value: float, level: float) -> bool:
    """Whether a computed p-value clears ``level`` by the relative :data:`SLACK` (module docstring)."""
    return p_value < level * (1.0 - SLACK)


def steinke_p_value(counts: GuessCounts, epsilon: float, delta: float) -> float:
    """β + α·2mδ of Steinke et al. 2023, Thm. 3.1 / Prop. 5.2 (module docstring): the p-value of "(ε, δ)-DP".

    Args:
        counts: m, r and v.
        epsilon: the claimed ε ≥ 0.
        delta: the claimed δ in [0, 1).

    Returns:
        min(1, β + α·2mδ).
    """
    if not (isinstance(epsilon, (int, float)) and epsilon >= 0 and math.isfinite(epsilon)):
        raise InvalidParameter(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    check_delta(delta)
    r, v = counts.guesses, counts.correct
    if v == 0:
        return 1.0
    p = float(special.expit(epsilon))
    beta = float(stats.binom.sf(v - 1, r, p))
    if delta == 0.0:
        return min(1.0, beta)
    # P[v − i ≤ Bin < v] for i = 1..v: cumulative sums of the pmf at v−1, v−2, ..., 0 (no cancellation)
    window = np.cumsum(stats.binom.pmf(np.arange(v - 1, -1, -1), r, p))
    alpha = float(np.max(window / np.arange(1, v + 1)))
    return min(1.0, beta + alpha * 2.0 * counts.canaries * delta)


def steinke_epsilon(counts: GuessCounts, delta: float, level: float = 0.05) -> float:
    """ε_lb: the largest ε (to :data:`EPSILON_TOLERANCE`, rounded down) whose p-value is below ``level``.

    Args:
        counts: m, r and v.
        delta: the δ the claim is tested at.
        level: the significance level (a Bonferroni-corrected one when several guess counts are tried).

    Returns:
        ε_lb ≥ 0; 0 when not even ε = 0 is rejected ("no detectable leakage").
    """
    check_significance(level)
    if not rejects(steinke_p_value(counts, 0.0, delta), level):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejects(steinke_p_value(counts, hi, delta), level):
        lo, hi = hi, 2.0 * hi
        if hi > EPSILON_CAP:
            return lo
    while hi - lo > EPSILON_TOLERANCE:
        mid = 0.5 * (lo + hi)
        if rejects(steinke_p_value(counts, mid, delta), level):
            lo = mid
        else:
            hi = mid
    return lo
