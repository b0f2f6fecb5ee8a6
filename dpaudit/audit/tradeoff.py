"""Trade-off curves f (Dong, Roth & Su 2022, "Gaussian differential privacy") and the families the f-DP audit tests.

A trade-off curve f(x) is the smallest type-II error of a test of M(D) against M(D') at type-I error x. The audit
of Mahloujifar, Melis & Chaudhuri 2025 (:mod:`dpaudit.audit.fdp`) needs the inverse of f̄(x) = 1 − f(x):

    f̄⁻¹(y) = inf{x ∈ [0, 1] : 1 − f(x) ≥ y}.

Curves:

* μ-GDP (Dong et al., Def. 2.6): f(x) = Φ(Φ⁻¹(1 − x) − μ), so f̄⁻¹(y) = Φ(Φ⁻¹(y) − μ) exactly.
* A privacy profile, (ε_j, δ_j) pairs with the mechanism (ε_j, δ_j)-DP for every j: f = max_j f_{ε_j, δ_j} with
  f_{ε,δ}(x) = max(0, 1 − δ − e^ε x, e^{−ε}(1 − δ − x)) (Dong et al., Prop. 2.5 and 2.12). Then f(x) ≤ 1 − y iff
  x ≥ (y − δ_j)e^{−ε_j} and x ≥ 1 − δ_j − e^{ε_j}(1 − y) for every j, so f̄⁻¹(y) = max(0, max_j of both). One
  pair is the (ε, δ)-DP curve itself (no assumption about the mechanism's shape).

Families (what "converted to ε at δ" assumes): the f-DP audit rejects curves, and a curve is turned into an ε only
within a one-parameter family ordered by leakage θ (larger θ, weaker claim). The reported ε_lb is then "if the
mechanism's curve is in this family, its ε at δ is at least ε_lb":

* :class:`GaussianFamily` (θ = μ): the family Mahloujifar et al. use for DP-SGD and their idealised setting;
  ε(μ, δ) from the exact μ-GDP profile δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong et al., Cor. 2.13),
  bisected and rounded down.
* :class:`SubsampledGaussianFamily` (θ = 1/σ for fixed q and steps): the curve of T steps of the Poisson-subsampled
  Gaussian, add/remove. The curve tested is built from dp_accounting's *pessimistic* PLD profile δ_j ≥ δ(ε_j)
  (plus ten times the estimated FFT error, :func:`dpaudit.accounting.pld.fft_noise`) on a finite ε grid: a
  weaker curve than the true one, so rejecting it rejects the true curve. ε at δ is read from the *optimistic* PLD
  (a lower bound; :meth:`SubsampledGaussianFamily.epsilon`). Both directions are conservative. (The certified
  lower bound of :mod:`dpaudit.accounting.hockey_stick` was tried and is too loose here: 0.33 against the PLD's
  0.71 at q = 0.01, σ = 1, 100 steps, δ = 1e-5.) A member whose PLD leaf is too large to build
  (:func:`dpaudit.accounting.pld.leaf_size_reason` on the audit's grid: the connect-the-dots points pass
  ``MAX_CONNECT_DOTS_POINTS`` below σ ≈ 0.13 at q = 1 and σ ≈ 0.077 at q ≤ 0.5, i.e. above θ ≈ 7.7 to 13, below
  :attr:`~SubsampledGaussianFamily.theta_max` = 20; σ = 0.03 took 43 s and 1 GB) is tested against
  :data:`UNREJECTABLE`, the weakest curve f = 0, which every mechanism satisfies, so no outcome rejects it: such a
  θ is never reported, the bisection (:func:`dpaudit.audit.fdp.largest_rejected`) keeps a θ whose own curve was
  built and rejected, and ε_lb can only drop (at worst to the ε of the largest member that can be built), never
  rise: still a lower bound. Treating such a θ as rejected would report a leakage no test showed.
  :meth:`SubsampledGaussianFamily.epsilon` refuses such a θ by name.
* :class:`ApproxDpFamily` (θ = ε): the (ε, δ)-DP curve; ε_lb then needs no assumption on the curve's shape.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import special

from dpaudit.accounting import pld
from dpaudit.accounting.charges import PoissonGaussianSpec
from dpaudit.errors import AccountingError, InvalidParameter
from dpaudit.validation import check_count, check_delta, check_nonnegative, check_probability

#: bisection width (absolute) for ε(μ, δ) of the Gaussian family; the lower end is reported
_EPS_TOLERANCE = 1e-9
#: ε grid of a subsampled-Gaussian profile: 0 to this, in :data:`_PROFILE_POINTS` points
_PROFILE_EPS_MAX = 40.0
_PROFILE_POINTS = 4001


@dataclass(frozen=True)
class GaussianCurve:
    """The μ-GDP trade-off curve."""

    mu: float

    def inverse_complement(self, y: float) -> float:
        """f̄⁻¹(y) = Φ(Φ⁻¹(y) − μ)."""
        return float(special.ndtr(special.ndtri(y) - self.mu))


@dataclass(frozen=True, eq=False)
class ProfileCurve:
    """max_j f_{ε_j, δ_j}: the curve implied by (ε_j, δ_j)-DP for every j (module docstring)."""

    epsilons: np.ndarray
    deltas: np.ndarray
    _decay: np.ndarray = field(init=False, repr=False)
    _growth: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        eps = np.asarray(self.epsilons, dtype=float)
        deltas = np.asarray(self.deltas, dtype=float)
        if eps.shape != deltas.shape or eps.ndim != 1 or eps.size == 0:
            raise InvalidParameter("a privacy profile needs equally long, non-empty epsilon and delta arrays")
        if np.any(eps < 0) or np.any(~np.isfinite(eps)) or np.any(deltas < 0) or np.any(deltas > 1):
            raise InvalidParameter("a privacy profile needs finite epsilons >= 0 and deltas in [0, 1]")
        object.__setattr__(self, "epsilons", eps)
        object.__setattr__(self, "deltas", deltas)
        object.__setattr__(self, "_decay", np.exp(-eps))
        object.__setattr__(self, "_growth", np.exp(eps))

    def inverse_complement(self, y: float) -> float:
        """f̄⁻¹(y) = max(0, max_j max((y − δ_j)e^{−ε_j}, 1 − δ_j − e^{ε_j}(1 − y)))."""
        first = (y - self.deltas) * self._decay
        second = 1.0 - self.deltas - self._growth * (1.0 - y)
        return max(0.0, float(np.max(first)), float(np.max(second)))


def approx_dp_curve(epsilon: float, delta: float) -> ProfileCurve:
    """The (ε, δ)-DP trade-off curve f_{ε,δ}."""
    return ProfileCurve(np.array([epsilon]), np.array([delta]))


#: f = f_{0,1} = 0, the weakest trade-off curve (f̄⁻¹ = 0): every mechanism satisfies it, so no outcome rejects it
UNREJECTABLE = approx_dp_curve(0.0, 1.0)


def gaussian_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong et al. 2022, Cor. 2.13), in log space for large ε."""
    if mu == 0:
        return 0.0
    a, b = -epsilon / mu + mu / 2, -epsilon / mu - mu / 2
    first = float(special.ndtr(a))
    second = math.exp(min(epsilon + float(special.log_ndtr(b)), 0.0))
    return max(0.0, first - second)


@dataclass(frozen=True)
class GaussianFamily:
    """μ-GDP curves, θ = μ (module docstring)."""

    name: str = "gaussian (mu-GDP)"
    theta_max: float = 60.0

    def curve(self, theta: float) -> GaussianCurve:
        return GaussianCurve(theta)

    def epsilon(self, theta: float, delta: float) -> float:
        """The ε at δ of μ-GDP, rounded down (bisection on the exact profile, lower end reported)."""
        check_delta(delta, allow_zero=False)
        if gaussian_delta(theta, 0.0) <= delta:
            return 0.0
        lo, hi = 0.0, 1.0
        while gaussian_delta(theta, hi) > delta:
            lo, hi = hi, 2.0 * hi
        while hi - lo > _EPS_TOLERANCE * max(1.0, lo):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if gaussian_delta(theta, mid) > delta else (lo, mid)
        return lo


def _size_reason(sample_rate: float, noise_multiplier: float) -> str | None:
    """Why the subsampled Gaussian's PLD leaf is too large to build on the audit's grid (None: it is not)."""
    return pld.leaf_size_reason(PoissonGaussianSpec(sample_rate, noise_multiplier), pld.VALUE_DISCRETIZATION_INTERVAL)


def _composed(sample_rate: float, noise_multiplier: float, steps: int, pessimistic: bool):
    """``steps`` self-compositions of the subsampled Gaussian's PLD (not kept in the accountant's cache).

    Raises:
        AccountingError: the leaf is too large to build (:func:`_size_reason`).
    """
    too_large = _size_reason(sample_rate, noise_multiplier)
    if too_large is not None:
        raise AccountingError(f"the f-DP audit's subsampled-Gaussian curve is not built: {too_large}")
    leaf = pld.leaf_pld(PoissonGaussianSpec(sample_rate, noise_multiplier), pessimistic,
                        pld.VALUE_DISCRETIZATION_INTERVAL)
    return leaf if steps == 1 else leaf.self_compose(steps)


@functools.lru_cache(maxsize=64)
def _subsampled_profile(sample_rate: float, noise_multiplier: float, steps: int) -> ProfileCurve:
    composed = _composed(sample_rate, noise_multiplier, steps, True)
    epsilons = np.linspace(0.0, _PROFILE_EPS_MAX, _PROFILE_POINTS)
    reserve = pld.NOISE_RESERVE * pld.fft_noise(composed, steps, 0.0) if steps > 1 else 0.0
    deltas = np.minimum(1.0, np.asarray(composed.get_delta_for_epsilon(epsilons), dtype=float) + reserve)
    return ProfileCurve(epsilons, deltas)


@dataclass(frozen=True)
class SubsampledGaussianFamily:
    """T steps of the Poisson-subsampled Gaussian at rate q, θ = 1/σ (module docstring)."""

    sample_rate: float
    steps: int
    name: str = field(init=False)
    theta_max: float = 20.0

    def __post_init__(self) -> None:
        check_probability("sample_rate", self.sample_rate)
        check_count("steps", self.steps)
        object.__setattr__(self, "name", f"poisson-subsampled gaussian (q={self.sample_rate:g}, steps={self.steps})")

    def curve(self, theta: float) -> GaussianCurve | ProfileCurve:
        """The member's curve, or :data:`UNREJECTABLE` where its PLD is too large to build (module docstring)."""
        if theta == 0:
            return GaussianCurve(0.0)  # σ = ∞: the identity curve, perfect privacy
        if _size_reason(self.sample_rate, 1.0 / theta) is not None:
            return UNREJECTABLE
        return _subsampled_profile(self.sample_rate, 1.0 / theta, self.steps)

    def epsilon(self, theta: float, delta: float) -> float:
        """A lower bound on the ε at δ of the family member: dp_accounting's *optimistic* PLD (losses rounded down,
        truncated mass dropped), read at δ plus ten times its estimated FFT error, so rounding can only lower it.

        Raises:
            AccountingError: the member's PLD is too large to build (module docstring).
        """
        check_delta(delta, allow_zero=False)
        if theta == 0:
            return 0.0
        composed = _composed(self.sample_rate, 1.0 / theta, self.steps, False)
        reserve = pld.NOISE_RESERVE * pld.fft_noise(composed, self.steps, 0.0) if self.steps > 1 else 0.0
        return max(0.0, float(composed.get_epsilon_for_delta(min(delta + reserve, 1.0))))


@dataclass(frozen=True)
class ApproxDpFamily:
    """(ε, δ)-DP curves at the audit's δ, θ = ε: no assumption on the mechanism's curve."""

    delta: float
    name: str = field(init=False)
    theta_max: float = 60.0

    def __post_init__(self) -> None:
        check_nonnegative("delta", self.delta)
        check_delta(self.delta)
        object.__setattr__(self, "name", f"(epsilon, delta)-DP at delta={self.delta:g}")

    def curve(self, theta: float) -> ProfileCurve:
        return approx_dp_curve(theta, self.delta)

    def epsilon(self, theta: float, delta: float) -> float:
        if delta != self.delta:
            raise InvalidParameter(f"this family's curves are at delta={self.delta!r}, not {delta!r}")
        return theta


Family = GaussianFamily | SubsampledGaussianFamily | ApproxDpFamily
