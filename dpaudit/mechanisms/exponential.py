"""The exponential mechanism over a finite candidate set, sampled exactly.

McSherry & Talwar 2007; Dwork & Roth 2014, Def. 3.4 and Thm. 3.10. Candidate i, with score u_i of sensitivity Δ
(|u_i(D) − u_i(D')| ≤ Δ for every i and neighbours D, D'), is selected with probability

    P(i) = exp(c·u_i) / Σ_j exp(c·u_j),     c = ε/(2Δ)   (c = ε/Δ when the scores are monotone in the data set).

Exact sampler (rejection from the uniform proposal). Every score, ε and Δ is converted to a
:class:`fractions.Fraction` (floats are exact rationals), so c and γ_i = c·(u_max − u_i) ≥ 0 are exact. Repeat:
draw i uniformly with ``rng.randbelow(n)`` and accept it with probability exp(−γ_i), using the exact
Bernoulli(exp(−γ)) sampler of Canonne, Kamath & Steinke 2020, Alg. 1. A trial returns i with probability
exp(−γ_i)/n ∝ exp(c·u_i), so the output has exactly the distribution P above; no floating-point number touches
the randomness (Mironov 2012's attack on floating-point noise does not apply).

Acceptance bound. One trial accepts with probability A = Σ_j exp(−γ_j)/n ≥ 1/n, because the maximiser has
γ = 0 and always accepts. The number of trials is geometric with mean 1/A ≤ n = |S|.

Timing side channel. The number of trials, hence the running time, depends on the scores (it is 1/A on
average). dpaudit assumes the adversary does not observe running time; a deployment where it can must pad
the sampler to a fixed number of trials, which this module does not do.

Privacy map. The sampler computes its rate c from the event's recorded ε and Δ, so the noise provides exactly the
recorded ε (:func:`exponential_epsilon`); the mechanism is moreover ε-bounded-range (Durfee & Rogers 2019), which
the RDP accountant uses. One charge covers one index (:func:`coverage`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.events import ExponentialEvent
from dpaudit.mechanisms.discrete import sample_bernoulli_exp
from dpaudit.mechanisms.outputs import Coverage, IndexOutput
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.mechanisms.registry import register_mechanism
from dpaudit.sensitivity import Neighbouring, Sensitivity
from dpaudit.validation import check_epsilon, check_positive

#: exponents above this give weights below the smallest double (exp(−745) underflows); used for floats only
_GAMMA_CAP = Fraction(800)


def _exact_scores(scores: Sequence[float]) -> list[int | float | Fraction]:
    """The scores as Python numbers that convert to Fraction exactly; refuses NaN, ±inf and non-numbers."""
    if isinstance(scores, (str, bytes)) or not isinstance(scores, (Sequence, np.ndarray)):
        raise InvalidParameter(f"scores must be a sequence of real numbers, got {type(scores).__name__}")
    if isinstance(scores, np.ndarray) and scores.ndim != 1:
        raise InvalidParameter(f"scores must be one-dimensional, got shape {scores.shape}")
    if len(scores) == 0:
        raise InvalidParameter("the exponential mechanism needs at least one candidate")
    if isinstance(scores, np.ndarray) and scores.dtype == np.float64:
        if not np.isfinite(scores).all():
            raise InvalidParameter("scores must be finite (got NaN or infinity)")
        return scores.tolist()
    out: list[int | float | Fraction] = []
    for i, u in enumerate(scores):
        if type(u) is float and math.isfinite(u):
            out.append(u)
            continue
        if isinstance(u, (bool, np.bool_)) or not isinstance(u, numbers.Real):
            raise InvalidParameter(f"score {i} must be a real number, got {u!r}")
        if isinstance(u, numbers.Rational):
            out.append(Fraction(u))
            continue
        f = float(u)
        if not math.isfinite(f):
            raise InvalidParameter(f"score {i} must be finite, got {u!r}")
        if f != u:
            raise InvalidParameter(f"score {i} ({u!r}) is not exactly representable as a double")
        out.append(f)
    return out


def _rate(epsilon: float, sensitivity: float, monotone: bool) -> Fraction:
    """c = ε/(2Δ), or ε/Δ for monotone scores, exactly."""
    if not isinstance(monotone, bool):
        raise InvalidParameter(f"monotone must be True or False, got {monotone!r}")
    eps = Fraction(check_epsilon(epsilon))
    delta = Fraction(check_positive("sensitivity", sensitivity))
    return eps / delta if monotone else eps / (2 * delta)


def sample_exponential(
    scores: Sequence[float], epsilon: float, sensitivity: float, monotone: bool, rng: RandomSource
) -> int:
    """Draw a candidate index exactly from the exponential mechanism (McSherry & Talwar 2007).

    ε-DP for scores of sensitivity Δ (Dwork & Roth 2014, Thm. 3.10; for monotone scores c = ε/Δ is ε-DP, see
    the remark after it). See the module docstring for the sampler, its acceptance bound (at most |S| trials on
    average) and the timing assumption.

    Args:
        scores: u_i for the public candidates, finite reals (ints, floats, Fractions).
        epsilon: ε > 0.
        sensitivity: Δ > 0, the largest change of any single score between neighbouring data sets.
        monotone: True only if, for every pair of neighbours, all scores move in the same direction.
        rng: source of uniform integers.

    Returns:
        The selected index in [0, len(scores)).

    Raises:
        InvalidParameter: empty or non-finite scores, ε or Δ not finite and > 0, ``monotone`` not a bool.
    """
    values = _exact_scores(scores)
    c = _rate(epsilon, sensitivity, monotone)
    if not isinstance(rng, RandomSource):
        raise InvalidParameter(f"rng must be a RandomSource, got {type(rng).__name__}")
    u_max = Fraction(max(values))
    n = len(values)
    while True:
        i = rng.randbelow(n)
        if sample_bernoulli_exp(c * (u_max - Fraction(values[i])), rng):
            return i


def exponential_probabilities(
    scores: Sequence[float], epsilon: float, sensitivity: float, monotone: bool
) -> np.ndarray:
    """The selection probabilities of :func:`sample_exponential`, as floats (for tests and reports).

    The exponents γ_i = c·(u_max − u_i) are computed exactly and rounded once; P(i) = exp(−γ_i) / Σ_j exp(−γ_j)
    is the log-sum-exp form, which cannot overflow (the largest term is 1).

    Args:
        scores, epsilon, sensitivity, monotone: as for :func:`sample_exponential`.

    Returns:
        An array of probabilities summing to 1 (up to rounding), one per candidate.
    """
    values = _exact_scores(scores)
    c = _rate(epsilon, sensitivity, monotone)
    u_max = Fraction(max(values))
    # exp(−800) underflows to 0 already; capping first keeps float() of a huge Fraction from overflowing.
    gammas = np.array([float(min(c * (u_max - Fraction(u)), _GAMMA_CAP)) for u in values])
    weights = np.exp(-gammas)
    return weights / weights.sum()


def exponential_epsilon(event: ExponentialEvent) -> float:
    """Privacy map: ε of the recorded selection, which is its recorded ε (the rate c = ε/(2Δ), or ε/Δ for monotone
    scores, is computed from it; Dwork & Roth 2014, Thm. 3.10)."""
    return event.epsilon


def exponential_event(neighbouring: Neighbouring, sensitivity: Sensitivity, epsilon: float, *, n_candidates: int,
                      monotone: bool = False, label: str = "") -> ExponentialEvent:
    """The event of an ε-DP choice among ``n_candidates`` candidates whose scores have sensitivity Δ.

    Raises:
        InvalidParameter: ε or ``n_candidates`` out of range, ``monotone`` not a bool, a sensitivity of the wrong
            norm.
    """
    return ExponentialEvent(neighbouring=neighbouring, sensitivity=sensitivity, label=label,
                            epsilon=check_epsilon(epsilon), n_candidates=n_candidates, monotone=monotone)


def coverage(event: ExponentialEvent) -> Coverage:
    """One charge covers one index ``i`` with ``0 <= i < n_candidates``."""
    return Coverage(IndexOutput(event.n_candidates), 1)


def release(event: ExponentialEvent, scores: Sequence[float], rng: RandomSource) -> int:
    """The selected index for a charged ``event`` (:func:`sample_exponential` with the event's ε, Δ, monotone).

    Raises:
        InvalidParameter: the number of scores is not the event's ``n_candidates``, or bad scores.
    """
    if len(scores) != event.n_candidates:
        raise InvalidParameter(f"{len(scores)} scores for an event over {event.n_candidates} candidates")
    return sample_exponential(scores, event.epsilon, event.sensitivity.value, event.monotone, rng)


register_mechanism(ExponentialEvent, coverage=coverage, pure_epsilon=exponential_epsilon)
