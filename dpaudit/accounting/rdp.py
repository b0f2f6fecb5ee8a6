"""Rényi-DP accountant (Mironov 2017) over a fixed grid of orders plus α = ∞.

Per application, each leaf contributes an RDP curve ε(α) (an upper bound on the Rényi divergence of order α
between the outputs on any two neighbouring data sets); curves add under adaptive composition (Mironov 2017,
Prop. 1). Curves (one function per spec type, dispatched by :data:`_CURVES`):

* Poisson-subsampled Gaussian: Mironov, Talwar & Zhang 2019, as implemented by
  ``opacus.accountants.analysis.rdp.compute_rdp`` (exact for integer α, the Sec. 3.3 series for fractional α).
* Fixed-size batches without replacement, replace-one: Wang, Balle & Kasiviswanathan 2019, Thm. 27 (with
  Cor. 10 interpolation between integer orders), as implemented by dp_accounting's ``RdpAccountant`` for
  ``SampledWithoutReplacementDpEvent`` under ``NeighboringRelation.REPLACE_ONE``.
* Discrete Gaussian: α·Δ²/(2σ²) in grid units (Canonne, Kamath & Steinke 2020, Thm. 14: Δ²/(2σ²)-zCDP).
* Pure ε-DP leaves (Laplace, AboveThreshold, exponential, randomized response): the Rényi divergence of binary
  randomized response with parameter ε, which bounds every ε-DP pair (each is a post-processing of randomized
  response, Kairouz, Oh & Viswanath 2015, Thm. 2.1; Rényi divergence obeys data processing); equals ε at α = ∞
  (and is exact for randomized response itself). The exponential
  mechanism is also ε-bounded-range, hence ε²/8-zCDP (Cesar & Rogers 2021, Lemma 3.2), so its curve is the
  minimum of the two.
* Repeat-and-select (a random number of runs of a base event, the best released): Papernot & Steinke 2022,
  Thm. 2 (truncated negative binomial, geometric) and Thm. 6 (Poisson), applied to the base's composed curve
  (:mod:`dpaudit.accounting.repeat_select`). No pure-DP (α = ∞) value is claimed for it.

Conversion to (ε, δ): Balle, Barthe, Gaboardi, Hsu & Sato 2020, Thm. 21 (= Canonne, Kamath & Steinke 2020,
Prop. 12), the formula of Opacus 1.6's ``get_privacy_spent``:

    ε = ε(α) + ln((α − 1)/α) − (ln δ + ln α)/(α − 1),   minimised over the grid,

and at α = ∞ the curve is a pure-DP ε with no δ term (ε_∞ = Σ ε_i when every leaf is pure, else ∞).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dp_accounting
import numpy as np

from dpaudit.accounting.base import Accountant, package_versions
from dpaudit.accounting.charges import (
    ApproximateSpec,
    DiscreteGaussianSpec,
    LeafSpec,
    PoissonGaussianSpec,
    PureSpec,
    RepeatSelectSpec,
    WorGaussianSpec,
    tally,
)
from dpaudit.accounting.opacus_analysis import rdp_analysis
from dpaudit.accounting.repeat_select import repeat_and_select_rdp
from dpaudit.errors import AccountingError, UnsupportedEvent
from dpaudit.events import PrivacyEvent

#: Orders beyond Opacus's default grid, so that strongly private events (optimum at large α) are not cut off.
LARGE_ORDERS: tuple[float, ...] = (64.0, 80.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0)
#: The finite orders: Opacus 1.6's ``RDPAccountant.DEFAULT_ALPHAS`` (1.1 ... 10.9, 12 ... 63; spelled out so that
#: accounting does not import Opacus's training stack, a test checks they agree) plus LARGE_ORDERS.
ORDERS: tuple[float, ...] = tuple(1 + x / 10.0 for x in range(1, 100)) + tuple(float(a) for a in range(12, 64)) \
    + LARGE_ORDERS
_ORDERS = np.array(ORDERS)


def _log_expm1(t: np.ndarray) -> np.ndarray:
    """ln(e^t − 1) for t > 0, without overflow for large t or cancellation for small t."""
    return t + np.log(-np.expm1(-t))


def randomized_response_rdp(epsilon: float, orders: np.ndarray) -> np.ndarray:
    """D_α(P‖Q) for P = (e^ε, 1)/(1 + e^ε), Q = (1, e^ε)/(1 + e^ε): the largest RDP of any ε-DP mechanism.

    D_α = ln((e^{αε} + e^{(1−α)ε})/(1 + e^ε))/(α − 1). The argument of the logarithm is 1 + x with
    x = (e^{(α−1)ε} − 1)(e^{αε} − 1)e^{(1−α)ε}/(1 + e^ε) > 0, which is evaluated in log space so that neither small ε
    (cancellation) nor large αε (overflow) loses accuracy. Capped at ε (= D_∞), which it never exceeds.
    """
    a = np.asarray(orders, dtype=float)
    log_x = _log_expm1((a - 1.0) * epsilon) + _log_expm1(a * epsilon) + (1.0 - a) * epsilon - np.logaddexp(0.0, epsilon)
    return np.minimum(np.logaddexp(0.0, log_x) / (a - 1.0), epsilon)


def _poisson_curve(spec: PoissonGaussianSpec) -> np.ndarray:
    out = np.empty(len(ORDERS))
    for i, a in enumerate(ORDERS):
        try:
            out[i] = float(rdp_analysis().compute_rdp(q=spec.sample_rate, noise_multiplier=spec.noise_multiplier,
                                                      steps=1, orders=a))
        except (ValueError, OverflowError, FloatingPointError):
            out[i] = math.inf  # an order whose series fails is dropped; +inf is a valid (vacuous) bound
    return out


def _wor_curve(spec: WorGaussianSpec) -> np.ndarray:
    acc = dp_accounting.rdp.RdpAccountant(
        orders=list(ORDERS), neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    )
    acc.compose(
        dp_accounting.SampledWithoutReplacementDpEvent(
            source_dataset_size=spec.dataset_size,
            sample_size=spec.batch_size,
            event=dp_accounting.GaussianDpEvent(spec.noise_multiplier),
        )
    )
    return acc.rdp


def unsupported_reason(counts: dict[LeafSpec, int]) -> str | None:
    """Why RDP cannot bound this tally (None if it can): a leaf known only through an (ε, δ) with δ > 0."""
    for spec in counts:
        inner = spec.base_counts() if isinstance(spec, RepeatSelectSpec) else {spec: 1}
        if any(isinstance(s, ApproximateSpec) for s in inner):
            return ("a release whose sensitivity holds only with probability 1 - delta_s has no Renyi-DP bound; "
                    "use pld, advanced or basic")
    return None


def _pure_curve(spec: PureSpec) -> tuple[np.ndarray, float]:
    curve = randomized_response_rdp(spec.epsilon, _ORDERS)
    if spec.bounded_range:
        curve = np.minimum(curve, _ORDERS * spec.epsilon**2 / 8.0)
    return curve, spec.epsilon


def _discrete_gaussian_curve(spec: DiscreteGaussianSpec) -> tuple[np.ndarray, float]:
    return _ORDERS * spec.sensitivity**2 / (2.0 * spec.sigma**2), math.inf


def _no_curve(spec: ApproximateSpec) -> tuple[np.ndarray, float]:
    raise UnsupportedEvent(unsupported_reason({spec: 1}))


#: (RDP at :data:`ORDERS`, RDP at α = ∞) of one application, by spec type (see the module docstring)
_CURVES: dict[type, Callable[[Any], tuple[np.ndarray, float]]] = {
    PureSpec: _pure_curve,
    DiscreteGaussianSpec: _discrete_gaussian_curve,
    PoissonGaussianSpec: lambda spec: (_poisson_curve(spec), math.inf),
    WorGaussianSpec: lambda spec: (_wor_curve(spec), math.inf),
    RepeatSelectSpec: lambda spec: _repeat_select_curve(spec, None),
    ApproximateSpec: _no_curve,
}


@functools.lru_cache(maxsize=65536)
def rdp_curve(spec: LeafSpec) -> tuple[np.ndarray, float]:
    """(RDP at :data:`ORDERS`, RDP at α = ∞) of one application of ``spec``; cached (specs are frozen).

    Raises:
        AccountingError: the curve contains NaN.
        UnsupportedEvent: a spec known only through its (ε, δ).
    """
    curve, at_inf = _CURVES[type(spec)](spec)
    curve = np.array(curve, dtype=float)
    if np.isnan(curve).any() or math.isnan(at_inf):
        raise AccountingError(f"RDP curve of {spec!r} contains NaN")
    curve.setflags(write=False)
    return curve, at_inf


def rdp_to_epsilon(orders: np.ndarray, rdp: np.ndarray, epsilon_inf: float, delta: float) -> tuple[float, float]:
    """(ε, optimal order) from RDP values: Balle et al. 2020 Thm. 21 at each finite order, ε_∞ at α = ∞.

    Returns ``(inf, nan)`` when no order gives a finite bound (e.g. δ = 0 and a non-pure leaf).
    """
    best, best_order = epsilon_inf, math.inf
    if delta > 0:
        a = np.asarray(orders, dtype=float)
        with np.errstate(invalid="ignore", over="ignore"):
            eps = rdp + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
        if np.isnan(eps).any():
            raise AccountingError("RDP conversion produced NaN")
        i = int(np.argmin(eps))
        if eps[i] < best:
            best, best_order = float(eps[i]), float(a[i])
    if math.isinf(best):
        return math.inf, math.nan
    return max(best, 0.0), best_order


def _repeat_select_curve(spec: RepeatSelectSpec, mask: np.ndarray | None) -> tuple[np.ndarray, float]:
    """Papernot & Steinke's bound on the orders ``ORDERS[mask]`` from the base's composed curve on those orders."""
    base, base_inf = composed_rdp(spec.base_counts(), mask)
    orders = _ORDERS if mask is None else _ORDERS[mask]
    return repeat_and_select_rdp(orders, base, base_inf, spec.distribution, spec.parameter_map()), math.inf


def _curve_on(spec: LeafSpec, mask: np.ndarray | None) -> tuple[np.ndarray, float]:
    if mask is None:
        return rdp_curve(spec)
    if isinstance(spec, RepeatSelectSpec):  # its λ̂ minimum depends on which orders are available
        return _repeat_select_curve(spec, mask)
    curve, at_inf = rdp_curve(spec)
    return curve[mask], at_inf


def composed_rdp(counts: dict[LeafSpec, int], mask: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Σ k · curve and Σ k · ε_∞ over the tally (Mironov 2017, Prop. 1).

    Args:
        counts: the tally.
        mask: a boolean mask of :data:`ORDERS`: evaluate on ``ORDERS[mask]`` only, as if that were the grid (the
            verifier's comparison on the integer orders). None: the whole grid.
    """
    total = np.zeros(len(ORDERS) if mask is None else int(np.count_nonzero(mask)))
    at_inf = 0.0
    for spec, k in counts.items():
        curve, inf_value = _curve_on(spec, mask)
        total += k * curve
        at_inf += k * inf_value
    return total, at_inf


#: the unit roundoff of IEEE double precision (Higham 2002, Sec. 2.1)
UNIT_ROUNDOFF = 2.0**-53


@dataclass(frozen=True, eq=False)
class RunningRdp:
    """A running sum of RDP curves in charge order, and a bound on what :func:`composed_rdp` gives for the same charges.

    RDP curves add under composition (Mironov 2017, Prop. 1), so the composed curve of charges already counted plus a
    candidate is ``curve`` plus the candidate's curve: O(specs of the candidate), whatever came before. The tally that
    an accountant composes from scratch (:func:`composed_rdp`, e.g. the certificate's RDP member) sums the same terms
    k·c in another order and grouping, so its value may differ in the last bits; :meth:`upper` bounds it from above.

    Attributes:
        curve: Σ fl(k·c) over every (charge, spec) term, added left to right in charge order, at :data:`ORDERS`.
        at_inf: the same sum of the α = ∞ values.
        magnitude: Σ |fl(k·c)| (the same order), for the rounding bound.
        magnitude_inf: Σ |fl(k·ε_∞)|.
        terms: how many terms were added.
    """

    curve: np.ndarray = field(default_factory=lambda: np.zeros(len(ORDERS)))
    at_inf: float = 0.0
    magnitude: np.ndarray = field(default_factory=lambda: np.zeros(len(ORDERS)))
    magnitude_inf: float = 0.0
    terms: int = 0

    def plus(self, counts: dict[LeafSpec, int]) -> RunningRdp:
        """The running sum with the terms of ``counts`` (one charge's tally, first-appearance order) added.

        Raises:
            UnsupportedEvent: a spec with no RDP curve (known only through its (ε, δ)).
            AccountingError: a curve contains NaN.
        """
        curve, magnitude = self.curve.copy(), self.magnitude.copy()
        at_inf, magnitude_inf = self.at_inf, self.magnitude_inf
        for spec, k in counts.items():
            spec_curve, spec_inf = rdp_curve(spec)
            term, term_inf = k * spec_curve, k * spec_inf
            curve += term
            magnitude += np.abs(term)
            at_inf += term_inf
            magnitude_inf += abs(term_inf)
        return RunningRdp(curve, at_inf, magnitude, magnitude_inf, self.terms + len(counts))

    def upper(self) -> tuple[np.ndarray, float]:
        """(RDP at :data:`ORDERS`, RDP at α = ∞), each at least what :func:`composed_rdp` computes for the tally of the
        same charges, whatever its summation order.

        Both sums add exactly the same real numbers Σ k·c (grouped per spec in the tally, per charge here) in at most
        N = :attr:`terms` rounded products and additions, so each is within γ_N·Σ|k·c| of the exact sum, γ_N =
        Nu/(1 − Nu) (Higham 2002, *Accuracy and Stability of Numerical Algorithms*, eq. 4.4, one more u for the
        product). Their difference is at most 2γ_N·Σ|k·c| ≤ 2.1·N·u·magnitude for Nu ≤ 0.01; the margin 4·N·u·
        magnitude covers it and the rounding of the margin's own product and addition. The (ε, δ) conversion
        (:func:`rdp_to_epsilon`) is non-decreasing in every input (each IEEE operation is monotone), so the ε of
        this bound is at least the ε of the tally's curve.
        """
        if self.terms * UNIT_ROUNDOFF > 0.01:
            raise AccountingError(f"{self.terms} RDP terms are too many for the running sum's rounding bound")
        margin = 4.0 * self.terms * UNIT_ROUNDOFF
        return self.curve + margin * self.magnitude, self.at_inf + margin * self.magnitude_inf

    def epsilon(self, delta: float) -> float:
        """An upper bound on the ε at δ that :class:`RdpAccountant` certifies for the same charges (see :meth:`upper`);
        ``inf`` when there is no finite one."""
        curve, at_inf = self.upper()
        return rdp_to_epsilon(_ORDERS, curve, at_inf, delta)[0]


class RdpAccountant(Accountant):
    """Rényi-DP composition over :data:`ORDERS` and α = ∞; every leaf kind of :mod:`dpaudit.events`."""

    name = "rdp"

    def version(self) -> str:
        return f"rdp/1 ({package_versions('opacus', 'dp-accounting')})"

    def _unsupported_reason(self, counts: dict[LeafSpec, int]) -> str | None:
        return unsupported_reason(counts)

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        return self.epsilon_and_order(counts, delta)[0]

    def epsilon_and_order(self, counts: dict[LeafSpec, int], delta: float) -> tuple[float, float]:
        """(ε, the order attaining it) for a tally; the order is ``inf`` when the pure-DP bound wins."""
        rdp, at_inf = composed_rdp(counts)
        return rdp_to_epsilon(_ORDERS, rdp, at_inf, delta)


def rdp_dominated(event: PrivacyEvent, by: PrivacyEvent) -> bool:
    """Whether ``event``'s RDP curve is at most ``by``'s at every order of :data:`ORDERS` and at α = ∞.

    Then every RDP bound on the grid (and the pure-DP bound) that the accountants derive for ``by`` also holds for
    ``event``, as does anything derived from those bounds alone (Papernot & Steinke's repeat-and-select bounds).

    Raises:
        UnsupportedEvent: an event the accountants cannot tally, or the two differ in neighbouring relation.
    """
    relation, counts = tally(event)
    counts = dict(counts)  # tally's mapping is shared with its cache
    by_relation, by_counts = tally(by)
    if relation is not by_relation:
        raise UnsupportedEvent(f"cannot compare a {relation.value} event with a {by_relation.value} one")
    curve, at_inf = composed_rdp(counts)
    by_curve, by_inf = composed_rdp(by_counts)
    return bool(np.all(curve <= by_curve)) and at_inf <= by_inf
