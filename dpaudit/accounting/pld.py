"""Privacy-loss-distribution accountant: dp_accounting's PLD with pessimistic discretisation (an upper bound).

Koskela, Jälkö & Honkela 2020; Meiser & Mohammadi 2018 ("privacy buckets"); Doroshenko, Ghazi, Kamath, Kumar &
Manurangsi 2022 ("connect the dots"). With ``pessimistic_estimate=True`` dp_accounting rounds every privacy loss
up and moves truncated tail mass to +∞, so the hockey-stick divergence it computes, and hence ε at δ, is an
upper bound on the true one.

Leaves modelled (``dp_accounting.pld.privacy_loss_distribution``):

* Poisson-subsampled Gaussian, add/remove: ``from_gaussian_mechanism(σ, sampling_prob=q)``, which keeps both the
  add and the remove privacy-loss distributions and reports the worse.
* 1-D discrete Laplace: ``from_discrete_laplace_mechanism(1/t, Δ_γ)``, exact (t the scale and Δ_γ the integer L1
  sensitivity, both in grid units).
* Other pure ε-DP leaves (multi-dimensional Laplace, AboveThreshold, exponential): ``from_privacy_parameters(ε,
  0)``, the PLD of randomized response, which dominates every ε-DP mechanism (Kairouz, Oh & Viswanath 2015).
* A leaf known only through an (ε, δ) (a sensitivity that holds with probability 1 − δ_s):
  ``from_privacy_parameters(ε, δ)``, the (ε, δ) randomized-response pair, which dominates every (ε, δ)-DP
  mechanism (the same theorem).
* 1-D discrete Gaussian: ``from_discrete_gaussian_mechanism(σ, Δ_γ)``. dp_accounting truncates the noise at
  ⌈11.6σ⌉, dropping mass τ ≤ 1e-30 per release (its docstring, from Canonne et al.'s tail bound). A mechanism at
  total-variation distance T = Σ τ from the truncated one that is (ε, δ_t)-DP is (ε, δ_t + T(1 + e^ε))-DP, so ε
  is read at δ_t = δ(1 − 10⁻⁶) and the accountant checks T(1 + e^ε) ≤ 10⁻⁶·δ.
* Multi-dimensional discrete Gaussian (the 1-D PLD does not cover an L2 ball in d > 1), sampling without
  replacement (no PLD in dp_accounting 0.6) and repeat-and-select (its bounds are RDP statements): unsupported.

Regime (docs/accounting.md, "Regime"): the FFT composition's rounding error in δ(ε) is estimated
(:func:`fft_noise`); ε is read at δ less ten times the estimate, and the accountant refuses
(:class:`~dpaudit.accounting.base.OutsideControlledRegime`) where that reserve exceeds 1 % of δ (tiny δ, many steps):
there dp_accounting's ε fell below an independent lower bound (:mod:`dpaudit.accounting.hockey_stick`).

Discretisation: :data:`VALUE_DISCRETIZATION_INTERVAL` = 2·10⁻⁴ (10⁵ DP-SGD steps at q = 256/60000, σ = 1.1 take
about 0.3 s with cold caches; 10⁻⁴ changes ε by about 0.01 %).

Caching: one PLD per leaf spec and per (spec, count) self-composition, and the last composed result with its
tally, so that a growing composition (the budget filter) composes only what was appended. The fold order is the
tally's (first appearance in the event), so a result is a function of the event alone, cached or not.
"""

from __future__ import annotations

import functools
import math

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpaudit.accounting.base import Accountant, DeltaUnreachable, OutsideControlledRegime, package_versions
from dpaudit.accounting.charges import (
    ApproximateSpec,
    DiscreteGaussianSpec,
    LeafSpec,
    PoissonGaussianSpec,
    PureSpec,
    RepeatSelectSpec,
)
from dpaudit.errors import AccountingError

VALUE_DISCRETIZATION_INTERVAL = 2e-4
#: Noise mass dp_accounting's discrete Gaussian PLD drops per release (truncation at ⌈11.6σ⌉).
DISCRETE_GAUSSIAN_TAIL = 1e-30
#: Fraction of δ reserved for the discrete Gaussian truncation.
TRUNCATION_DELTA_SHARE = 1e-6
#: The PLD answers only while NOISE_RESERVE times its estimated FFT rounding error in δ (:func:`fft_noise`), which
#: is reserved from δ, is at most this share of δ.
FFT_NOISE_SHARE = 1e-2
#: Multiple of the estimated rounding error reserved from δ (the estimate may be low by this factor).
NOISE_RESERVE = 10.0
#: Observed negative mass is multiplied by this to cover the positive rounding noise of the same size.
NEGATIVE_MASS_FACTOR = 4.0


def unsupported_reason(counts: dict[LeafSpec, int], pessimistic: bool = True) -> str | None:
    """Why the PLD cannot bound this tally (None if it can); the optimistic estimate needs exact leaf PLDs."""
    for spec in counts:
        if isinstance(spec, RepeatSelectSpec):
            return "repeat-and-select has no PLD here (Papernot & Steinke's bounds are RDP; use rdp)"
        if isinstance(spec, DiscreteGaussianSpec) and (spec.dimension != 1 or not spec.sensitivity.is_integer()):
            return "the discrete Gaussian PLD covers one-dimensional releases only"
        if isinstance(spec, PureSpec) and spec.laplace_parameter is None and not pessimistic:
            return "a generic pure-DP leaf has no exact PLD, so no optimistic (lower) estimate"
        if isinstance(spec, ApproximateSpec) and not pessimistic:
            return "a generic (epsilon, delta) leaf has no exact PLD, so no optimistic (lower) estimate"
        if not isinstance(spec, (PureSpec, DiscreteGaussianSpec, ApproximateSpec, PoissonGaussianSpec)):
            return f"{type(spec).__name__}: dp_accounting has no PLD for sampling without replacement"
    return None


@functools.lru_cache(maxsize=4096)
def leaf_pld(spec: LeafSpec, pessimistic: bool, interval: float) -> pld_lib.PrivacyLossDistribution:
    """The PLD of one application of ``spec`` (see the module docstring for the constructor used)."""
    if isinstance(spec, PoissonGaussianSpec):
        return pld_lib.from_gaussian_mechanism(
            spec.noise_multiplier, sensitivity=1, pessimistic_estimate=pessimistic,
            value_discretization_interval=interval, sampling_prob=spec.sample_rate, use_connect_dots=pessimistic,
            neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        )
    if isinstance(spec, DiscreteGaussianSpec):
        return pld_lib.from_discrete_gaussian_mechanism(
            spec.sigma, sensitivity=int(spec.sensitivity), pessimistic_estimate=pessimistic,
            value_discretization_interval=interval,
        )
    if isinstance(spec, PureSpec) and spec.laplace_parameter is not None:
        return pld_lib.from_discrete_laplace_mechanism(
            spec.laplace_parameter, sensitivity=spec.laplace_sensitivity, pessimistic_estimate=pessimistic,
            value_discretization_interval=interval,
        )
    delta = spec.delta if isinstance(spec, ApproximateSpec) else 0.0
    return pld_lib.from_privacy_parameters(
        dp_accounting.pld.common.DifferentialPrivacyParameters(spec.epsilon, delta), interval
    )


@functools.lru_cache(maxsize=256)
def self_composed(spec: LeafSpec, count: int, pessimistic: bool, interval: float) -> pld_lib.PrivacyLossDistribution:
    """``count``-fold composition of :func:`leaf_pld` (dp_accounting's FFT self-composition)."""
    single = leaf_pld(spec, pessimistic, interval)
    return single if count == 1 else single.self_compose(count)


def fold(start: pld_lib.PrivacyLossDistribution | None, items: list[tuple[LeafSpec, int]], pessimistic: bool,
         interval: float) -> pld_lib.PrivacyLossDistribution:
    """Left fold of the self-composed PLDs of ``items`` onto ``start``."""
    out = start
    for spec, count in items:
        part = self_composed(spec, count, pessimistic, interval)
        out = part if out is None else out.compose(part)
    if out is None:
        raise AccountingError("pld: nothing to compose")
    return out


def fft_noise(pld: pld_lib.PrivacyLossDistribution, applications: int, epsilon: float) -> float:
    """Estimated absolute floating-point error of δ(ε) computed from a composed PLD (module docstring, "Regime").

    The larger, over the add and remove PMFs, of (a) :data:`NEGATIVE_MASS_FACTOR` times the negative mass in the
    PMF (pure rounding noise: a probability cannot be negative, so its size measures the noise floor directly; the
    factor covers the positive noise it cannot see) and (b) the a-priori estimate (k − 1)·u·log₂N·max(p)·√N_ε: the
    FFT of a k-fold composition carries relative error about (k − 1)·u·log₂N (the transform's error raised to the
    k-th power; a single leaf is built without FFT), i.e. about that
    times max(p) per entry, of either sign, over the N_ε entries above ε that δ(ε) adds up. A sparse PMF (pure-DP
    leaves composed by dictionary) has no FFT and contributes 0.

    Raises:
        OutsideControlledRegime: this dp_accounting version does not expose the PMFs, so the error is unknown.
    """
    remove, add = getattr(pld, "_pmf_remove", None), getattr(pld, "_pmf_add", None)
    if remove is None or add is None:
        raise OutsideControlledRegime("pld outside its controlled regime: this dp_accounting version does not "
                                      "expose its PMFs, so the FFT rounding error cannot be checked")
    noise = 0.0
    for pmf in {id(remove): remove, id(add): add}.values():
        probs = getattr(pmf, "_probs", None)
        if probs is None:
            continue
        losses = (pmf._lower_loss + np.arange(len(probs))) * pmf._discretization
        above = int(np.count_nonzero(losses > epsilon))
        observed = NEGATIVE_MASS_FACTOR * float(-np.sum(probs[probs < 0]))
        a_priori = ((applications - 1) * np.finfo(float).eps * math.log2(max(len(probs), 2)) * float(np.max(probs))
                    * math.sqrt(above))
        noise = max(noise, observed, a_priori)
    return noise


def epsilon_from_pld(pld: pld_lib.PrivacyLossDistribution, counts: dict[LeafSpec, int], delta: float) -> float:
    """ε at δ, with parts of δ reserved for the discrete Gaussian's truncated tails and the FFT rounding error.

    ε is first read at δ_t (δ less the truncation share, module docstring); then, with r = :data:`NOISE_RESERVE`
    times the estimated rounding error of δ(ε) (:func:`fft_noise`), it is read again at δ_t − r, so that an error
    up to r in the computed δ(·) cannot bring ε below the truth. When r exceeds :data:`FFT_NOISE_SHARE`·δ the
    rounding error is not small against δ and the PLD refuses to answer (module docstring, "Regime").

    Raises:
        OutsideControlledRegime: r > :data:`FFT_NOISE_SHARE`·δ.
        DeltaUnreachable: the discrete Gaussian truncation does not fit in δ.
    """
    tail = DISCRETE_GAUSSIAN_TAIL * sum(k for s, k in counts.items() if isinstance(s, DiscreteGaussianSpec))
    target = delta * (1.0 - TRUNCATION_DELTA_SHARE) if tail else delta
    eps = float(pld.get_epsilon_for_delta(target))
    if math.isfinite(eps):
        reserve = NOISE_RESERVE * fft_noise(pld, sum(counts.values()), eps)
        if not reserve <= FFT_NOISE_SHARE * delta:
            raise OutsideControlledRegime(
                f"pld outside its controlled regime: FFT rounding error in delta about {reserve / NOISE_RESERVE:.2g}, "
                f"not small against delta = {delta:.3g} (limit {FFT_NOISE_SHARE / NOISE_RESERVE:g} * delta)")
        if reserve > 0:
            eps = float(pld.get_epsilon_for_delta(target - reserve))
    if tail and not tail * (1.0 + math.exp(min(eps, 700.0))) <= TRUNCATION_DELTA_SHARE * delta:
        raise DeltaUnreachable(f"pld: the discrete Gaussian truncation ({tail:g}) does not fit in delta = {delta!r}")
    return eps


class PldAccountant(Accountant):
    """dp_accounting PLD, pessimistic estimate, interval :data:`VALUE_DISCRETIZATION_INTERVAL`."""

    name = "pld"

    def __init__(self) -> None:
        self._last: tuple[list[tuple[LeafSpec, int]], pld_lib.PrivacyLossDistribution] | None = None

    def version(self) -> str:
        return f"pld/1 (interval {VALUE_DISCRETIZATION_INTERVAL:g}, pessimistic; {package_versions('dp-accounting')})"

    def _unsupported_reason(self, counts: dict[LeafSpec, int]) -> str | None:
        return unsupported_reason(counts)

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        return epsilon_from_pld(self.composed(counts), counts, delta)

    def composed(self, counts: dict[LeafSpec, int]) -> pld_lib.PrivacyLossDistribution:
        """The pessimistic PLD of the tally, resuming from the previous call when its tally is a prefix."""
        items = list(counts.items())
        start, done = None, 0
        if self._last is not None and items[: len(self._last[0])] == self._last[0]:
            start, done = self._last[1], len(self._last[0])
        pld = fold(start, items[done:], True, VALUE_DISCRETIZATION_INTERVAL) if done < len(items) else start
        self._last = (items, pld)
        return pld
