"""What each leaf event costs, reduced to the public numbers an accountant needs.

Every accountant first turns an event into a *tally*: a mapping from a hashable :data:`LeafSpec` (the
accounting-relevant parameters of one mechanism application) to how many times it is applied. Two releases with
the same noise parameters share a spec, whatever their labels, so per-spec work (an RDP curve, a PLD) is done
once and cached by the accountants; building the tally is the only O(n) part of a call.

Pure-DP charges come from the privacy maps (:mod:`dpaudit.privacy_maps`), not from the declared value: the map is
the ε the noise actually provides. A map *larger* than the declared charge means the event under-charges; that is
refused (:class:`~dpaudit.errors.AccountingError`), never silently repaired. A map that exceeds the declaration
only by float rounding (relative 1e-9, the session calibrates the scale from the declared ε) is accepted and the
(larger) map value is used, so the charge is never below the map.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpaudit.errors import AccountingError, UnsupportedEvent
from dpaudit.events import (
    AboveThresholdEvent,
    ComposedEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    LeafEvent,
    PoissonSubsampledGaussianEvent,
    PrivacyEvent,
    RepeatAndSelectEvent,
    SampledWithoutReplacementGaussianEvent,
    neighbouring_of,
)
from dpaudit.mechanisms.calibration import gaussian_event_delta
from dpaudit.privacy_maps import (
    above_threshold_epsilon,
    gaussian_grid_parameters,
    grid_sensitivity,
    laplace_epsilon,
)
from dpaudit.sensitivity import Neighbouring, Norm

#: Relative slack between a privacy map and the declared charge attributed to float rounding.
MAP_REL_TOL = 1e-9


@dataclass(frozen=True)
class PureSpec:
    """One ε-DP mechanism application.

    Attributes:
        epsilon: the pure-DP ε from the privacy map.
        bounded_range: the mechanism is also ε-bounded-range (exponential mechanism; Durfee & Rogers 2019).
        laplace_parameter: for a one-dimensional discrete Laplace release, 1/t with t the scale in grid units
            (P(z) ∝ exp(−|z|/t)); ``None`` otherwise.
        laplace_sensitivity: the integer L1 grid sensitivity of that release (0 when not a 1-D discrete Laplace).
    """

    epsilon: float
    bounded_range: bool = False
    laplace_parameter: float | None = None
    laplace_sensitivity: int = 0


@dataclass(frozen=True)
class DiscreteGaussianSpec:
    """One discrete-Gaussian release (Canonne, Kamath & Steinke 2020), in grid units.

    Attributes:
        sigma: the discrete Gaussian's σ parameter in grid units.
        sensitivity: an upper bound on the L2 distance of the rounded neighbouring values, in grid units.
        dimension: number of coordinates.
        declared_epsilon, declared_delta: the (ε, δ) charge the release was calibrated for.
    """

    sigma: float
    sensitivity: float
    dimension: int
    declared_epsilon: float
    declared_delta: float


@dataclass(frozen=True)
class ApproximateSpec:
    """One (ε, δ)-DP application known only through its (ε, δ): a mechanism that is ε-DP (or (ε, δ₀)-DP) given a
    sensitivity bound that itself fails with probability δ_s (Kusner et al. 2015, Theorems 1, 3, 5 and their
    corollaries), so ``delta`` = δ₀ + δ_s. Basic, advanced and PLD (the (ε, δ) randomized-response pair dominates
    every (ε, δ)-DP mechanism; Kairouz, Oh & Viswanath 2015) compose it; RDP cannot (no Rényi bound holds with
    probability 1 − δ)."""

    epsilon: float
    delta: float


@dataclass(frozen=True)
class PoissonGaussianSpec:
    """One step of the Poisson-subsampled Gaussian mechanism (add/remove neighbours)."""

    sample_rate: float
    noise_multiplier: float


@dataclass(frozen=True)
class WorGaussianSpec:
    """One step of the Gaussian mechanism on a fixed-size batch drawn without replacement (replace-one)."""

    batch_size: int
    dataset_size: int
    noise_multiplier: float


@dataclass(frozen=True)
class RepeatSelectSpec:
    """One repeat-and-select (Papernot & Steinke 2022; Liu & Talwar 2019): the base's own tally and the law of K.

    Attributes:
        base: the base event's tally as (spec, count) pairs, in first-appearance order.
        distribution: ``"geometric"``, ``"truncated_negative_binomial"`` or ``"poisson"``.
        parameters: the law's parameters as sorted (name, value) pairs.
    """

    base: tuple[tuple[LeafSpec, int], ...]
    distribution: str
    parameters: tuple[tuple[str, float], ...]

    def base_counts(self) -> dict[LeafSpec, int]:
        return dict(self.base)

    def parameter_map(self) -> dict[str, float]:
        return dict(self.parameters)

    def is_geometric(self) -> bool:
        """K ~ Geometric(γ) on {1, 2, ...} (the geometric law, or the truncated negative binomial with η = 1)."""
        return self.distribution == "geometric" or (
            self.distribution == "truncated_negative_binomial" and self.parameter_map()["eta"] == 1.0)


LeafSpec = PureSpec | DiscreteGaussianSpec | ApproximateSpec | PoissonGaussianSpec | WorGaussianSpec | RepeatSelectSpec


def _checked_map(name: str, mapped: float, declared: float) -> float:
    if not mapped <= declared * (1.0 + MAP_REL_TOL):
        raise AccountingError(
            f"{name} event under-charges: its noise provides epsilon = {mapped!r} but it declares {declared!r}"
        )
    return mapped


def describe(leaf: LeafEvent | RepeatAndSelectEvent) -> tuple[LeafSpec, int]:
    """The spec of one accounting unit and the number of applications it stands for (its ``steps``, else 1).

    A :class:`~dpaudit.events.RepeatAndSelectEvent` becomes one :class:`RepeatSelectSpec` holding its base's tally.

    Raises:
        UnsupportedEvent: an event kind no accountant here models.
        AccountingError: a pure-DP event whose privacy map exceeds its declared charge.
    """
    if isinstance(leaf, RepeatAndSelectEvent):
        relations: set[Neighbouring] = set()
        base: dict[LeafSpec, int] = {}
        _count((leaf.event,), relations, base)
        return RepeatSelectSpec(tuple(base.items()), leaf.distribution, tuple(sorted(leaf.parameters().items()))), 1
    spec, applications = _describe_leaf(leaf)
    failure = leaf.sensitivity.failure_probability
    if not failure:
        return spec, applications
    if isinstance(spec, PureSpec):
        return ApproximateSpec(spec.epsilon, failure), applications
    if isinstance(spec, DiscreteGaussianSpec):
        return ApproximateSpec(spec.declared_epsilon, min(spec.declared_delta + failure, 1.0)), applications
    raise UnsupportedEvent(f"{leaf.kind}: a sensitivity that holds only with probability 1 - delta_s is modelled "
                           "for Laplace, AboveThreshold, exponential and Gaussian releases only")


def _describe_leaf(leaf: LeafEvent) -> tuple[LeafSpec, int]:
    if isinstance(leaf, LaplaceEvent):
        eps = _checked_map("laplace", laplace_epsilon(leaf), leaf.epsilon)
        if leaf.dimension == 1:
            delta_grid = int(grid_sensitivity(leaf.sensitivity.value, leaf.grid, 1, Norm.L1))
            return PureSpec(eps, laplace_parameter=leaf.grid / leaf.scale, laplace_sensitivity=delta_grid), 1
        return PureSpec(eps), 1
    if isinstance(leaf, AboveThresholdEvent):
        return PureSpec(_checked_map("above_threshold", above_threshold_epsilon(leaf), leaf.epsilon)), 1
    if isinstance(leaf, ExponentialEvent):
        return PureSpec(leaf.epsilon, bounded_range=True), 1
    if isinstance(leaf, GaussianEvent):
        achieved = gaussian_event_delta(leaf)
        if not achieved <= leaf.delta * (1.0 + MAP_REL_TOL):
            raise AccountingError(f"gaussian event under-charges: its noise gives delta = {achieved!r} at epsilon = "
                                  f"{leaf.epsilon!r} but it declares delta = {leaf.delta!r}")
        sigma, sens = gaussian_grid_parameters(leaf)
        return DiscreteGaussianSpec(sigma, sens, leaf.dimension, leaf.epsilon, leaf.delta), 1
    if isinstance(leaf, PoissonSubsampledGaussianEvent):
        return PoissonGaussianSpec(leaf.sample_rate, leaf.noise_multiplier), leaf.steps
    if isinstance(leaf, SampledWithoutReplacementGaussianEvent):
        return WorGaussianSpec(leaf.batch_size, leaf.dataset_size, leaf.noise_multiplier), leaf.steps
    raise UnsupportedEvent(f"no accountant models events of kind {leaf.kind!r}")


def _count(events: tuple[PrivacyEvent, ...], relations: set[Neighbouring], counts: dict[LeafSpec, int]) -> None:
    for event in events:
        for unit, multiplicity in event.accounting_units():
            relations.add(unit.neighbouring)  # type: ignore[attr-defined]  (leaves and repeat-and-select have one)
            spec, applications = describe(unit)  # type: ignore[arg-type]
            counts[spec] = counts.get(spec, 0) + multiplicity * applications


#: The last composed event tallied: (its events, their relations, the counts). The budget filter asks about
#: ``ComposedEvent(previous + (new,))`` before every release, so only the new events need describing.
_last: tuple[tuple[PrivacyEvent, ...], frozenset[Neighbouring], dict[LeafSpec, int]] | None = None


def tally(event: PrivacyEvent) -> tuple[Neighbouring, dict[LeafSpec, int]]:
    """The event's single neighbouring relation and its applications counted per spec (first-appearance order).

    The returned mapping is shared with a one-entry cache and must not be modified. When ``event`` is a
    :class:`~dpaudit.events.ComposedEvent` whose events extend those of the previous call, only the new events
    are described (tuple prefix comparison short-circuits on identical objects), so a growing composition costs
    O(new leaves) Python work per call.

    Raises:
        UnsupportedEvent: mixed neighbouring relations, no leaf, or an unknown leaf kind.
        AccountingError: an under-charging pure-DP leaf.
    """
    global _last
    last = _last
    if isinstance(event, ComposedEvent):
        events = event.events
        done = 0
        relations: set[Neighbouring] = set()
        counts: dict[LeafSpec, int] = {}
        if last is not None and len(events) >= len(last[0]) and events[: len(last[0])] == last[0]:
            done, relations, counts = len(last[0]), set(last[1]), last[2]
            if done < len(events):
                counts = dict(counts)
        _count(events[done:], relations, counts)
        if done < len(events) or last is None or last[0] is not events:
            _last = (events, frozenset(relations), counts)
    else:
        relations, counts = set(), {}
        _count((event,), relations, counts)
    if len(relations) != 1:
        neighbouring_of(event)  # raises UnsupportedEvent with the relations found
    return next(iter(relations)), counts
