"""Repeat-and-select (Papernot & Steinke 2022; Liu & Talwar 2019): what one charge covers, and exact samplers for K.

One charge of a :class:`~dpaudit.events.RepeatAndSelectEvent` covers one output, the selected repetition's
(:func:`coverage`); K and every other repetition stay secret. Its privacy map is a Rényi-DP statement about the
whole base event (:mod:`dpaudit.accounting.repeat_select`); its event is built, and checked to have an exact
sampler for K before anything is charged, by :func:`repeat_and_select_event`.

Every parameter is converted to a :class:`fractions.Fraction` (a float converts exactly, so the law sampled is the
law of the recorded float parameter) and the only randomness is uniform integers from a
:class:`~dpaudit.mechanisms.randomness.RandomSource`, so each sampler draws from exactly its stated law:

* geometric, P(K = k) = γ(1 − γ)^{k−1} on {1, 2, ...}: the index of the first success of Bernoulli(γ) trials
  (Liu & Talwar's "stop with probability γ after each run");
* truncated negative binomial D_{η,γ} for a whole η ≥ 1: the number F of failures before the η-th success of
  Bernoulli(γ) trials has P(F = k) = C(k + η − 1, k) γ^η (1 − γ)^k, the negative binomial; redrawing while
  F = 0 truncates it at 0, which is D_{η,γ} (Papernot & Steinke 2022, Def. 1). η = 1 is the geometric law.
  Fractional η (and the logarithmic law, η = 0) need γ^{−η} or ln γ, which no finite rational computation gives;
  they are refused rather than approximated;
* Poisson(μ): the sum of m = ⌈2μ⌉ independent Poisson(λ) draws, λ = μ/m ≤ 1/2. Each Poisson(λ) is drawn by
  rejection: propose C = the number of leading successes of independent Bernoulli(λ/j), j = 1, 2, ..., so that
  P(C ≥ k) = λ^k/k! and P(C = k) = (λ^k/k!)(1 − λ/(k + 1)) (the chain of Canonne, Kamath & Steinke 2020, Alg. 1);
  accept with probability e^{−λ} · (1 − λ)(k + 1)/(k + 1 − λ) (an exact Bernoulli(exp(−λ)) times a rational
  Bernoulli). Then P(accept, C = k) = (1 − λ) e^{−λ} λ^k/k!, proportional to the Poisson pmf, and each attempt is
  accepted with probability 1 − λ ≥ 1/2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from dpaudit.errors import InvalidParameter
from dpaudit.events import PrivacyEvent, RepeatAndSelectEvent
from dpaudit.mechanisms.discrete import _bernoulli, sample_bernoulli_exp
from dpaudit.mechanisms.outputs import Coverage, SelectedOutput
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.mechanisms.registry import register_mechanism
from dpaudit.validation import check_finite

REPETITION_PARAMETERS = frozenset({"gamma", "eta", "mu"})
"""The parameters of the repetition laws (``{"gamma": γ}``, ``{"eta": η, "gamma": γ}``, ``{"mu": μ}``)."""


def repeat_and_select_event(base_event: PrivacyEvent, distribution: str, params: Mapping[str, float],
                            label: str = "") -> RepeatAndSelectEvent:
    """The event a repeat-and-select of ``base_event`` charges, checked to have an exact sampler for K.

    Raises:
        InvalidParameter: unknown or bad law parameters, or a truncated negative binomial law whose η is not a whole
            number ≥ 1 (no exact sampler here).
    """
    if not isinstance(params, Mapping):
        raise InvalidParameter(f"repetition parameters must be a mapping, got {type(params).__name__}")
    unknown = set(params) - REPETITION_PARAMETERS
    if unknown:
        raise InvalidParameter(f"unknown repetition parameters {sorted(unknown)}")
    event = RepeatAndSelectEvent(event=base_event, distribution=distribution, label=label,
                                 **{k: check_finite(k, v) for k, v in params.items()})
    if distribution == "truncated_negative_binomial" and not (event.eta >= 1 and float(event.eta).is_integer()):
        raise InvalidParameter(f"K ~ TNB(eta={event.eta}) has no exact sampler here: use a whole eta >= 1")
    return event


def coverage(event: RepeatAndSelectEvent) -> Coverage:
    """One charge covers one selected output (or that nothing was selected)."""
    return Coverage(SelectedOutput(), 1)


def _fraction(name: str, value: float | Fraction) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise InvalidParameter(f"{name} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameter(f"{name} must be finite, got {value!r}")
    return Fraction(value)


def _gamma(value: float | Fraction) -> Fraction:
    gamma = _fraction("gamma", value)
    if not 0 < gamma < 1:
        raise InvalidParameter(f"gamma must lie in (0, 1), got {value!r}")
    return gamma


def sample_geometric(gamma: float | Fraction, rng: RandomSource) -> int:
    """K ≥ 1 with P(K = k) = γ(1 − γ)^{k−1}: the first success of Bernoulli(γ) trials."""
    g = _gamma(gamma)
    k = 1
    while not _bernoulli(g, rng):
        k += 1
    return k


def sample_truncated_negative_binomial(eta: int | float, gamma: float | Fraction, rng: RandomSource) -> int:
    """K ~ D_{η,γ} for a whole η ≥ 1 (module docstring).

    Raises:
        InvalidParameter: η is not a whole number ≥ 1 (no exact sampler), or γ ∉ (0, 1).
    """
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not float(eta).is_integer() or eta < 1:
        raise InvalidParameter(f"exact truncated negative binomial sampling needs a whole eta >= 1, got {eta!r}")
    g = _gamma(gamma)
    while True:
        failures = sum(sample_geometric(g, rng) - 1 for _ in range(int(eta)))
        if failures >= 1:
            return failures


def _poisson_half(lam: Fraction, rng: RandomSource) -> int:
    """Poisson(λ) for rational λ ∈ (0, 1/2] by the rejection of the module docstring."""
    while True:
        k = 0
        while _bernoulli(lam / (k + 1), rng):
            k += 1
        if sample_bernoulli_exp(lam, rng) and _bernoulli((1 - lam) * (k + 1) / (k + 1 - lam), rng):
            return k


def sample_poisson(mu: float | Fraction, rng: RandomSource) -> int:
    """K ~ Poisson(μ), μ > 0 rational (module docstring)."""
    m = _fraction("mu", mu)
    if m <= 0:
        raise InvalidParameter(f"mu must be > 0, got {mu!r}")
    parts = math.ceil(2 * m)
    return sum(_poisson_half(m / parts, rng) for _ in range(parts))


def sample_repetitions(distribution: str, parameters: Mapping[str, float], rng: RandomSource) -> int:
    """K for a :class:`~dpaudit.events.RepeatAndSelectEvent` law (``distribution`` and its ``parameters()``).

    Raises:
        InvalidParameter: an unknown law, or one without an exact sampler here (fractional η).
    """
    if distribution == "geometric":
        return sample_geometric(parameters["gamma"], rng)
    if distribution == "truncated_negative_binomial":
        return sample_truncated_negative_binomial(parameters["eta"], parameters["gamma"], rng)
    if distribution == "poisson":
        return sample_poisson(parameters["mu"], rng)
    raise InvalidParameter(f"no sampler for the repetition law {distribution!r}")


register_mechanism(RepeatAndSelectEvent, coverage=coverage)
