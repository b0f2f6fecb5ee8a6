"""Randomized response on one bit: event, privacy map, coverage, exact release.

Warner 1965; Dwork & Roth 2014, Sec. 3.2 and Claim 3.5. The true bit b is reported with probability
e^ε/(1 + e^ε) and flipped with probability 1/(1 + e^ε); for two data sets whose bits differ the probabilities of
either output differ by a factor of at most e^ε, so the release is ε-DP for any 0/1-valued function of the data set
(:func:`randomized_response_epsilon`). One charge covers one bit, recorded as the index 0 or 1 (:func:`coverage`).

Exact sampler. Propose "keep" or "flip" with a fair coin; accept "keep" always and "flip" with probability e^{−ε}
(the exact Bernoulli(exp(−γ)) sampler of Canonne, Kamath & Steinke 2020, Alg. 1, on ε as an exact rational). Then
P(flip) = e^{−ε}/(1 + e^{−ε}) = 1/(1 + e^ε) exactly, and at most two proposals are needed on average.
"""

from __future__ import annotations

from fractions import Fraction

from dpaudit.errors import InvalidParameter
from dpaudit.events import RandomizedResponseEvent
from dpaudit.mechanisms.discrete import sample_bernoulli_exp
from dpaudit.mechanisms.outputs import Coverage, IndexOutput
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.mechanisms.registry import register_mechanism
from dpaudit.sensitivity import Neighbouring, from_formula
from dpaudit.validation import check_epsilon


def randomized_response_epsilon(event: RandomizedResponseEvent) -> float:
    """Privacy map: ln(P(keep)/P(flip)) = ε, the recorded ε (the flip probability is derived from it exactly)."""
    return event.epsilon


def randomized_response_event(neighbouring: Neighbouring, epsilon: float, *,
                              label: str = "") -> RandomizedResponseEvent:
    """The event of an ε-DP randomized response on one bit (sensitivity: the kernel formula ``bit``)."""
    return RandomizedResponseEvent(neighbouring=neighbouring, sensitivity=from_formula("bit", neighbouring),
                                   label=label, epsilon=check_epsilon(epsilon))


def coverage(event: RandomizedResponseEvent) -> Coverage:
    """One charge covers one bit: the index 0 or 1."""
    return Coverage(IndexOutput(2), 1)


def release(event: RandomizedResponseEvent, bit: bool, rng: RandomSource) -> bool:
    """The reported bit: ``bit`` with probability e^ε/(1 + e^ε), its negation otherwise (exact, module docstring).

    Raises:
        InvalidParameter: ``bit`` is not a bool.
    """
    if not isinstance(bit, bool):
        raise InvalidParameter(f"randomized response needs a bool, got {bit!r}")
    rate = Fraction(event.epsilon)
    while True:
        if rng.randbelow(2) == 0:
            return bit
        if sample_bernoulli_exp(rate, rng):
            return not bit


register_mechanism(RandomizedResponseEvent, coverage=coverage, pure_epsilon=randomized_response_epsilon)
