"""What each leaf event costs, reduced to the public numbers an accountant needs.

Every accountant first turns an event into a *tally*: a mapping from a hashable :data:`LeafSpec` (the
accounting-relevant parameters of one mechanism application) to how many times it is applied. Two releases with
the same noise parameters share a spec, whatever their labels, so per-spec work (an RDP curve, a PLD) is done
once and cached by the accountants; building the tally is the only O(n) part of a call.

Pure-DP charges come from the privacy maps of the mechanism modules (``dpaudit/mechanisms/<name>.py``, one
function per mechanism, the same one calibration and ``dpaudit verify`` call), not from the declared value: the map
is the ε the noise actually provides. A map *larger* than the declared charge means the event under-charges; that
is refused (:class:`~dpaudit.errors.AccountingError`), never silently repaired. A map that exceeds the declaration
only by float rounding (:data:`dpaudit.tolerance.REL_TOL`; the session calibrates the scale from the declared ε) is
accepted and the (larger) map value is used, so the charge is never below the map.

Which spec an event becomes is one lookup by event type: a pure-DP mechanism's privacy map comes from the mechanism
table its module registers in (:mod:`dpaudit.mechanisms.registry`), so a new pure-DP mechanism needs nothing here;
:data:`_SPECS` holds the mechanisms that are not pure DP.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from dpaudit.errors import AccountingError, UnsupportedEvent
from dpaudit.events import (
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
from dpaudit.mechanisms.gaussian import gaussian_event_delta, gaussian_grid_parameters
from dpaudit.mechanisms.grid import grid_sensitivity
from dpaudit.mechanisms.registry import entry_for
from dpaudit.sensitivity import Neighbouring, Norm
from dpaudit.tolerance import within


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


def _lookup(table: dict[type[LeafEvent], Any], leaf: LeafEvent) -> Any:
    """The table entry of ``leaf``'s type or its nearest base class; None when there is none."""
    for cls in type(leaf).__mro__:
        if cls in table:
            return table[cls]
    return None


def _pure_spec(leaf: LeafEvent, epsilon: float) -> PureSpec:
    """The spec of a pure-DP leaf whose map gives ``epsilon`` (the exponential mechanism is also bounded-range;
    a one-dimensional discrete Laplace also records its parameter, for the PLD accountant)."""
    if isinstance(leaf, ExponentialEvent):
        return PureSpec(epsilon, bounded_range=True)
    if isinstance(leaf, LaplaceEvent) and leaf.dimension == 1:
        delta_grid = int(grid_sensitivity(leaf.sensitivity.value, leaf.grid, 1, Norm.L1))
        return PureSpec(epsilon, laplace_parameter=leaf.grid / leaf.scale, laplace_sensitivity=delta_grid)
    return PureSpec(epsilon)


@functools.lru_cache(maxsize=1024)  # its δ check costs milliseconds; tally and the PLD's parts both ask
def _gaussian_spec(leaf: GaussianEvent) -> tuple[LeafSpec, int]:
    achieved = gaussian_event_delta(leaf)
    if not within(achieved, leaf.delta):
        raise AccountingError(f"gaussian event under-charges: its noise gives delta = {achieved!r} at epsilon = "
                              f"{leaf.epsilon!r} but it declares delta = {leaf.delta!r}")
    sigma, sens = gaussian_grid_parameters(leaf)
    return DiscreteGaussianSpec(sigma, sens, leaf.dimension, leaf.epsilon, leaf.delta), 1


#: the spec builders of the mechanisms that are not pure DP, by event type
_SPECS: dict[type[LeafEvent], Callable[[Any], tuple[LeafSpec, int]]] = {
    GaussianEvent: _gaussian_spec,
    PoissonSubsampledGaussianEvent: lambda e: (PoissonGaussianSpec(e.sample_rate, e.noise_multiplier), e.steps),
    SampledWithoutReplacementGaussianEvent: lambda e: (
        WorGaussianSpec(e.batch_size, e.dataset_size, e.noise_multiplier), e.steps),
}


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
    entry = entry_for(leaf)
    pure_map = entry.pure_epsilon if entry is not None else None
    if pure_map is not None:
        mapped = pure_map(leaf)
        if not within(mapped, leaf.epsilon):
            raise AccountingError(f"{leaf.kind} event under-charges: its noise provides epsilon = {mapped!r} but it "
                                  f"declares {leaf.epsilon!r}")
        return _pure_spec(leaf, mapped), 1
    build = _lookup(_SPECS, leaf)
    if build is None:
        raise UnsupportedEvent(f"no accountant models events of kind {leaf.kind!r}")
    return build(leaf)


def privacy_map_problem(leaf: LeafEvent) -> str | None:
    """Why ``leaf``'s recorded noise does not pay for its declared charge, by its mechanism's privacy map; None when
    it does (within :data:`~dpaudit.tolerance.REL_TOL`) or when no accountant models the kind (reported elsewhere)."""
    try:
        _describe_leaf(leaf)
    except AccountingError as exc:
        return str(exc)
    except UnsupportedEvent:
        return None
    return None


_Description = tuple[frozenset[Neighbouring], tuple[tuple[LeafSpec, int], ...]]


@dataclass
class _Kept:
    """The descriptions kept by :func:`descriptions_kept`: by event ``id`` (``alive`` holds the events, so no ``id`` is
    reused meanwhile), each equal description stored once (``distinct``), so that keeping 10⁵ of them allocates no
    object per event for the garbage collector to walk (a tuple per entry cost more than the description it saved)."""

    by_id: dict[int, _Description] = field(default_factory=dict)
    alive: list[PrivacyEvent] = field(default_factory=list)
    distinct: dict[_Description, _Description] = field(default_factory=dict)


_KEPT: ContextVar[_Kept | None] = ContextVar("dpaudit_kept", default=None)


@contextlib.contextmanager
def descriptions_kept() -> Iterator[None]:
    """Within the block (in this thread), each event object is described once, however many times it is tallied or
    counted (:func:`tally` and :func:`event_counts`, e.g. the tally and the PLD fold of one recomputation).

    The descriptions are dropped when the block ends, so nothing outlives it; keyed by object identity, so the
    cache costs no hashing of events and cannot confuse two events.
    """
    token = _KEPT.set(_Kept())
    try:
        yield
    finally:
        _KEPT.reset(token)


def _describe_event(event: PrivacyEvent) -> _Description:
    """The relations of ``event``'s accounting units and its applications counted per spec (first-appearance order)."""
    relations: set[Neighbouring] = set()
    counts: dict[LeafSpec, int] = {}
    for unit, multiplicity in event.accounting_units():
        relations.add(unit.neighbouring)  # type: ignore[attr-defined]  (leaves and repeat-and-select have one)
        spec, applications = describe(unit)  # type: ignore[arg-type]
        counts[spec] = counts.get(spec, 0) + multiplicity * applications
    return frozenset(relations), tuple(counts.items())


def _description(event: PrivacyEvent) -> _Description:
    kept = _KEPT.get()
    if kept is None:
        return _describe_event(event)
    found = kept.by_id.get(id(event))
    if found is None:
        described = _describe_event(event)
        found = kept.by_id[id(event)] = kept.distinct.setdefault(described, described)
        kept.alive.append(event)
    return found


def _count(events: tuple[PrivacyEvent, ...], relations: set[Neighbouring], counts: dict[LeafSpec, int]) -> None:
    for event in events:
        event_relations, items = _description(event)
        relations |= event_relations
        for spec, applications in items:
            counts[spec] = counts.get(spec, 0) + applications


def event_counts(event: PrivacyEvent) -> dict[LeafSpec, int]:
    """``event``'s applications counted per spec (first-appearance order), without :func:`tally`'s cache or its
    relation check: for an accountant that composes the parts of an already tallied event one by one (the PLD)."""
    counts: dict[LeafSpec, int] = {}
    _count((event,), set(), counts)
    return counts


_Tallied = tuple[tuple[PrivacyEvent, ...], frozenset[Neighbouring], dict[LeafSpec, int]]


class LastTally:
    """The process-wide, one-entry cache of :func:`tally`: the last composed event tallied (its events, their
    relations, the counts).

    The budget filter asks about ``ComposedEvent(previous + (new,))`` before every release, so with this entry only
    the new events need describing. The entry is an immutable tuple whose counts are never modified once stored
    (:func:`tally` copies them before adding to them), and it is read and replaced under a lock, so threads that
    tally different compositions only replace each other's entry (costing speed, never correctness). It holds
    privacy events, not data; :meth:`clear` empties it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entry: _Tallied | None = None

    def get(self) -> _Tallied | None:
        with self._lock:
            return self._entry

    def put(self, entry: _Tallied) -> None:
        with self._lock:
            self._entry = entry

    def clear(self) -> None:
        with self._lock:
            self._entry = None


LAST_TALLY = LastTally()


def tally(event: PrivacyEvent) -> tuple[Neighbouring, dict[LeafSpec, int]]:
    """The event's single neighbouring relation and its applications counted per spec (first-appearance order).

    The returned mapping is shared with the one-entry cache :data:`LAST_TALLY` and must not be modified. When
    ``event`` is a :class:`~dpaudit.events.ComposedEvent` whose events extend those of the previous call, only the
    new events are described (tuple prefix comparison short-circuits on identical objects), so a growing
    composition costs O(new leaves) Python work per call.

    Raises:
        UnsupportedEvent: mixed neighbouring relations, no leaf, or an unknown leaf kind.
        AccountingError: an under-charging pure-DP leaf.
    """
    last = LAST_TALLY.get()
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
            LAST_TALLY.put((events, frozenset(relations), counts))
    else:
        relations, counts = set(), {}
        _count((event,), relations, counts)
    if len(relations) != 1:
        neighbouring_of(event)  # raises UnsupportedEvent with the relations found
    return next(iter(relations)), counts
