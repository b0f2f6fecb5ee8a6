"""Privacy events: what a mechanism application *is*, as immutable data with a lossless JSON form.

Modelled on dp_accounting's ``DpEvent``. An event never holds data or released values, only public parameters:
the mechanism's noise parameters, the charge it was calibrated for, the neighbouring relation, the sensitivity
with its derivation, and the assumptions its guarantee rests on. Accountants compose events; the ledger stores
them; ``dpaudit verify`` re-reads them.

DP-SGD steps are one event with a ``steps`` count, not one event per step; :class:`SelfComposedEvent` and
:class:`ComposedEvent` describe k-fold and heterogeneous composition. :class:`RepeatAndSelectEvent` (a random
number of repetitions of a base event, only the best output released) is not a composition: accountants treat it
as one unit (:meth:`PrivacyEvent.accounting_units`), while :meth:`PrivacyEvent.leaves` still lists its base's
leaves for the checks that inspect sensitivities, relations and assumptions.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from dpaudit.errors import InvalidParameter, UnsupportedEvent
from dpaudit.sensitivity import Assumption, Neighbouring, Norm, Sensitivity
from dpaudit.validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_label,
    check_positive,
    check_probability,
)

EVENT_KINDS: dict[str, type[PrivacyEvent]] = {}


def _register(cls: type[PrivacyEvent]) -> type[PrivacyEvent]:
    EVENT_KINDS[cls.kind] = cls
    return cls


@dataclass(frozen=True, kw_only=True)
class PrivacyEvent:
    """Base of every event. Subclasses set ``kind`` and are registered for JSON decoding."""

    kind: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form; ``from_dict(to_dict(e)) == e``."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            out[f.name] = _encode(getattr(self, f.name))
        return out

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> PrivacyEvent:
        """Decode any registered event kind.

        Raises:
            UnsupportedEvent: the kind is unknown.
        """
        kind = d.get("kind")
        cls = EVENT_KINDS.get(kind)  # type: ignore[arg-type]
        if cls is None:
            raise UnsupportedEvent(f"unknown event kind {kind!r}; known: {sorted(EVENT_KINDS)}")
        kwargs = {f.name: _decode(f.name, d[f.name]) for f in fields(cls) if f.name in d}
        return cls(**kwargs)

    def leaves(self) -> Iterator[tuple[LeafEvent, int]]:
        """Yield (leaf event, multiplicity) pairs; a leaf's own ``steps`` count is not folded in.

        For inspection (relations, sensitivities, assumptions), not for accounting: a
        :class:`RepeatAndSelectEvent` yields its base's leaves although it is not their composition.
        """
        raise NotImplementedError

    def accounting_units(self) -> Iterator[tuple[PrivacyEvent, int]]:
        """Yield (unit, multiplicity): what accountants compose. A unit is a :class:`LeafEvent` or a
        :class:`RepeatAndSelectEvent` (whose privacy is a function of its whole base, not of its leaves)."""
        raise NotImplementedError


def _encode(v: Any) -> Any:
    if isinstance(v, PrivacyEvent):
        return v.to_dict()
    if isinstance(v, (Sensitivity, Assumption)):
        return v.to_dict()
    if isinstance(v, Neighbouring):
        return v.value
    if isinstance(v, tuple):
        return [_encode(x) for x in v]
    return v


def _decode(name: str, v: Any) -> Any:
    if name == "sensitivity":
        return Sensitivity.from_dict(v)
    if name == "assumptions":
        return tuple(Assumption.from_dict(a) for a in v)
    if name == "neighbouring":
        return Neighbouring(v)
    if name == "event":
        return PrivacyEvent.from_dict(v)
    if name == "events":
        return tuple(PrivacyEvent.from_dict(e) for e in v)
    return v


@dataclass(frozen=True, kw_only=True)
class LeafEvent(PrivacyEvent):
    """An event that applies one mechanism (possibly for a counted number of steps).

    Attributes:
        neighbouring: the neighbouring relation the guarantee is about.
        sensitivity: the bound and its derivation.
        label: public description of what was queried (e.g. ``"mean age, clipped to [17, 90]"``).
        assumptions: what the guarantee rests on beyond the sensitivity's own assumptions.
    """

    neighbouring: Neighbouring
    sensitivity: Sensitivity
    label: str = ""
    assumptions: tuple[Assumption, ...] = field(default=())

    required_norm: ClassVar[Norm] = Norm.L1
    #: the mechanism compares or scores real-valued queries, so a one-dimensional (``abs``) sensitivity applies
    scalar_query: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "neighbouring", Neighbouring(self.neighbouring))
        object.__setattr__(self, "assumptions", tuple(self.assumptions))
        check_label(self.label)
        if not isinstance(self.sensitivity, Sensitivity):
            raise InvalidParameter(f"sensitivity must be a Sensitivity, got {type(self.sensitivity).__name__}")
        scalar = self.scalar_query or getattr(self, "dimension", 0) == 1
        one_dimensional = self.sensitivity.norm is Norm.ABS and scalar
        if self.sensitivity.norm is not self.required_norm and not one_dimensional:
            raise InvalidParameter(
                f"{self.kind} needs an {self.required_norm.value} sensitivity, got {self.sensitivity.norm.value}"
            )

    def leaves(self) -> Iterator[tuple[LeafEvent, int]]:
        yield self, 1

    def accounting_units(self) -> Iterator[tuple[PrivacyEvent, int]]:
        yield self, 1

    def all_assumptions(self) -> tuple[Assumption, ...]:
        return self.sensitivity.assumptions + self.assumptions


@_register
@dataclass(frozen=True, kw_only=True)
class LaplaceEvent(LeafEvent):
    """Discrete Laplace noise on the grid ``grid·Z`` (Canonne, Kamath & Steinke 2020, Sec. 5).

    Attributes:
        epsilon: the pure-DP charge; must be ≥ the privacy map of the noise (checked by verify).
        scale: noise scale b in value units, P(z) ∝ exp(-|z|/b) for z on the grid.
        grid: spacing γ > 0 of the output grid.
        dimension: number of coordinates released.
    """

    kind: ClassVar[str] = "laplace"
    epsilon: float
    scale: float
    grid: float
    dimension: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_epsilon(self.epsilon)
        check_positive("scale", self.scale)
        check_positive("grid", self.grid)
        check_count("dimension", self.dimension)


@_register
@dataclass(frozen=True, kw_only=True)
class GaussianEvent(LeafEvent):
    """Discrete Gaussian noise on the grid ``grid·Z`` (Canonne, Kamath & Steinke 2020).

    Attributes:
        epsilon, delta: the (ε, δ) charge it was calibrated for; verify checks the noise achieves it.
        sigma: noise standard-deviation parameter in value units.
        grid: spacing γ > 0 of the output grid.
        dimension: number of coordinates released (L2 sensitivity over all of them).
    """

    kind: ClassVar[str] = "gaussian"
    required_norm: ClassVar[Norm] = Norm.L2
    epsilon: float
    delta: float
    sigma: float
    grid: float
    dimension: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_epsilon(self.epsilon)
        check_delta(self.delta, allow_zero=False)
        check_positive("sigma", self.sigma)
        check_positive("grid", self.grid)
        check_count("dimension", self.dimension)


@_register
@dataclass(frozen=True, kw_only=True)
class ExponentialEvent(LeafEvent):
    """Exponential mechanism over a public finite candidate set (McSherry & Talwar 2007).

    Candidate i is chosen with probability ∝ exp(ε·u_i / (2Δ)), or exp(ε·u_i / Δ) when the score is monotone in
    the data set (Dwork & Roth 2014, Thm. 3.10 and the remark after it).
    """

    kind: ClassVar[str] = "exponential"
    scalar_query: ClassVar[bool] = True
    epsilon: float
    n_candidates: int
    monotone: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_epsilon(self.epsilon)
        check_count("n_candidates", self.n_candidates)
        if not isinstance(self.monotone, bool):
            raise InvalidParameter(f"monotone must be True or False, got {self.monotone!r}")

    def all_assumptions(self) -> tuple[Assumption, ...]:
        """The sensitivity's and the event's assumptions, plus :data:`MONOTONE_SCORES` when ``monotone``: the halved
        noise rests on the caller's word, so it is derived from the flag itself and no event (an older ledger's
        included) can carry the flag without it."""
        own = super().all_assumptions()
        return (*own, MONOTONE_SCORES) if self.monotone else own


#: the caller-asserted property behind ``ExponentialEvent(monotone=True)``'s rate ε/Δ (instead of ε/(2Δ))
MONOTONE_SCORES = Assumption(
    id="exponential-monotone-scores",
    statement="The caller asserted that the exponential mechanism's scores are monotone: for every pair of "
    "neighbouring data sets, every candidate's score moves in the same direction (all rise or all fall together). "
    "On that word the selection used the rate ε/Δ, half the noise of the general rate ε/(2Δ); if the "
    "scores are not monotone the selection is only 2ε-DP, not ε-DP. dpaudit does not check it.",
    conditional=True,
    source="McSherry & Talwar 2007, Thm. 6; Dwork & Roth 2014, Thm. 3.10 and the remark after its proof",
)


@_register
@dataclass(frozen=True, kw_only=True)
class AboveThresholdEvent(LeafEvent):
    """AboveThreshold (sparse vector, halting at the first positive answer), Dwork & Roth 2014 Alg. 1.

    Threshold noise Lap(2Δ/ε) and query noise Lap(4Δ/ε) give ε-DP for any number of queries (Lyu, Su & Li 2017,
    Alg. 1 with c = 1). Noise is discrete Laplace on ``grid·Z``.

    Attributes:
        epsilon: the pure-DP charge.
        threshold_scale, query_scale: noise scales in value units.
        grid: spacing of the grid that queries and threshold are rounded to.
        max_queries: the cap on queries, fixed before any data is seen (information; ε does not depend on it).
    """

    kind: ClassVar[str] = "above_threshold"
    scalar_query: ClassVar[bool] = True
    epsilon: float
    threshold_scale: float
    query_scale: float
    grid: float
    max_queries: int

    def __post_init__(self) -> None:
        super().__post_init__()
        check_epsilon(self.epsilon)
        check_positive("threshold_scale", self.threshold_scale)
        check_positive("query_scale", self.query_scale)
        check_positive("grid", self.grid)
        check_count("max_queries", self.max_queries)


@_register
@dataclass(frozen=True, kw_only=True)
class RandomizedResponseEvent(LeafEvent):
    """Randomized response on one bit (Warner 1965; Dwork & Roth 2014, Sec. 3.2): the true bit is reported with
    probability e^ε/(1 + e^ε) and flipped otherwise, which is ε-DP for any 0/1-valued function of the data set.

    Attributes:
        epsilon: the pure-DP charge; the flip probability 1/(1 + e^ε) is derived from it.
    """

    kind: ClassVar[str] = "randomized_response"
    scalar_query: ClassVar[bool] = True
    epsilon: float

    def __post_init__(self) -> None:
        super().__post_init__()
        check_epsilon(self.epsilon)


@_register
@dataclass(frozen=True, kw_only=True)
class PoissonSubsampledGaussianEvent(LeafEvent):
    """``steps`` DP-SGD steps: Poisson sampling at rate q, clipped sum, Gaussian noise σ·C (Abadi et al. 2016).

    Only defined for add/remove neighbours (Mironov, Talwar & Zhang 2019, the analysis Opacus implements).
    """

    kind: ClassVar[str] = "poisson_subsampled_gaussian"
    required_norm: ClassVar[Norm] = Norm.L2
    sample_rate: float
    noise_multiplier: float
    steps: int

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability("sample_rate", self.sample_rate)
        check_positive("noise_multiplier", self.noise_multiplier)
        check_count("steps", self.steps)
        if self.neighbouring is not Neighbouring.ADD_REMOVE:
            raise InvalidParameter("Poisson-subsampled Gaussian is analysed under add/remove neighbours only")


@_register
@dataclass(frozen=True, kw_only=True)
class SampledWithoutReplacementGaussianEvent(LeafEvent):
    """``steps`` steps of fixed-size batches drawn without replacement, Gaussian noise σ·(sensitivity).

    The replace-one analysis of Wang, Balle & Kasiviswanathan 2019 (as used by DPareto, Avent et al. 2020).
    """

    kind: ClassVar[str] = "sampled_without_replacement_gaussian"
    required_norm: ClassVar[Norm] = Norm.L2
    batch_size: int
    dataset_size: int
    noise_multiplier: float
    steps: int

    def __post_init__(self) -> None:
        super().__post_init__()
        check_count("batch_size", self.batch_size)
        check_count("dataset_size", self.dataset_size)
        if self.batch_size > self.dataset_size:
            raise InvalidParameter("batch_size must not exceed dataset_size")
        check_positive("noise_multiplier", self.noise_multiplier)
        check_count("steps", self.steps)
        if self.neighbouring is not Neighbouring.REPLACE_ONE:
            raise InvalidParameter("sampling without replacement is analysed under replace-one neighbours only")


@_register
@dataclass(frozen=True, kw_only=True)
class ComposedEvent(PrivacyEvent):
    """Adaptive composition of ``events`` in order."""

    kind: ClassVar[str] = "composed"
    events: tuple[PrivacyEvent, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", tuple(self.events))
        for e in self.events:
            if not isinstance(e, PrivacyEvent):
                raise InvalidParameter(f"composed event holds a non-event {e!r}")

    def leaves(self) -> Iterator[tuple[LeafEvent, int]]:
        for e in self.events:
            yield from e.leaves()

    def accounting_units(self) -> Iterator[tuple[PrivacyEvent, int]]:
        for e in self.events:
            yield from e.accounting_units()


@_register
@dataclass(frozen=True, kw_only=True)
class SelfComposedEvent(PrivacyEvent):
    """``count``-fold adaptive composition of ``event``."""

    kind: ClassVar[str] = "self_composed"
    event: PrivacyEvent
    count: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameter("self-composed event needs an event")
        check_count("count", self.count)

    def leaves(self) -> Iterator[tuple[LeafEvent, int]]:
        for leaf, k in self.event.leaves():
            yield leaf, k * self.count

    def accounting_units(self) -> Iterator[tuple[PrivacyEvent, int]]:
        for unit, k in self.event.accounting_units():
            yield unit, k * self.count


#: The laws of the number of repetitions K that :class:`RepeatAndSelectEvent` supports, with their parameters.
REPETITION_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "geometric": ("gamma",),
    "truncated_negative_binomial": ("eta", "gamma"),
    "poisson": ("mu",),
}


@_register
@dataclass(frozen=True, kw_only=True)
class RepeatAndSelectEvent(PrivacyEvent):
    """Run ``event`` K times with a random K, release only the best output (by a public total order).

    K is drawn independently of the data from one of (Papernot & Steinke 2022, Sec. 2 and 3.4; Liu & Talwar 2019):

    * ``"geometric"``: P(K = k) = γ(1 − γ)^{k−1}, k ≥ 1 (Liu & Talwar's random stopping; = TNB with η = 1);
    * ``"truncated_negative_binomial"``: P(K = k) = (1 − γ)^k / (γ^{−η} − 1) · Π_{ℓ=0}^{k−1} (ℓ + η)/(ℓ + 1),
      k ≥ 1, for η > 0; the logarithmic law P(K = k) = (1 − γ)^k / (k · ln(1/γ)) for η = 0 (P&S Def. 1);
    * ``"poisson"``: P(K = k) = e^{−μ} μ^k / k!, k ≥ 0 (K = 0 releases nothing).

    Neither K nor any output but the best may be released: the bound covers the best output alone (revealing K
    reveals which mixture component produced the output, and the loss of best-of-k grows with k).

    Attributes:
        event: the base event (one full run, e.g. a DP-SGD training).
        distribution: a key of :data:`REPETITION_DISTRIBUTIONS`.
        gamma: γ ∈ (0, 1) (geometric, truncated negative binomial).
        eta: η ≥ 0 (truncated negative binomial; dp_accounting's ``shape``). Papernot & Steinke allow η > −1;
            η < 0 is refused because no independent implementation can recheck it.
        mu: μ ≥ 1 (Poisson; the mean, as dp_accounting requires).
        label: public description of what is repeated and selected.
    """

    kind: ClassVar[str] = "repeat_and_select"
    event: PrivacyEvent
    distribution: str
    gamma: float | None = None
    eta: float | None = None
    mu: float | None = None
    label: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameter("repeat-and-select needs a base event")
        check_label(self.label)
        needed = REPETITION_DISTRIBUTIONS.get(self.distribution)
        if needed is None:
            raise InvalidParameter(f"unknown repetition distribution {self.distribution!r}; known: "
                                   f"{sorted(REPETITION_DISTRIBUTIONS)}")
        for name in ("gamma", "eta", "mu"):
            value = getattr(self, name)
            if (value is None) == (name in needed):
                raise InvalidParameter(f"the {self.distribution} law {'needs' if value is None else 'takes no'} "
                                       f"parameter {name}")
        if self.gamma is not None:
            gamma = check_probability("gamma", self.gamma)
            if gamma == 1.0:
                raise InvalidParameter("gamma must lie in (0, 1) (Papernot & Steinke 2022, Thm. 2)")
        if self.eta is not None:
            eta = _finite("eta", self.eta)
            if eta < 0:
                raise InvalidParameter(f"eta must be >= 0, got {self.eta!r}")
        if self.mu is not None and _finite("mu", self.mu) < 1:
            raise InvalidParameter(f"mu must be >= 1, got {self.mu!r}")
        neighbouring_of(self.event)  # one relation, at least one leaf

    @property
    def neighbouring(self) -> Neighbouring:
        """The base event's neighbouring relation."""
        return neighbouring_of(self.event)

    def parameters(self) -> dict[str, float]:
        """The law's parameters by name, e.g. ``{"gamma": 0.1}``."""
        return {name: float(getattr(self, name)) for name in REPETITION_DISTRIBUTIONS[self.distribution]}

    def leaves(self) -> Iterator[tuple[LeafEvent, int]]:
        yield from self.event.leaves()

    def accounting_units(self) -> Iterator[tuple[PrivacyEvent, int]]:
        yield self, 1


def _finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidParameter(f"{name} must be a finite number, got {value!r}")
    return float(value)


def neighbouring_of(event: PrivacyEvent) -> Neighbouring:
    """The single neighbouring relation of ``event``.

    Raises:
        UnsupportedEvent: the event mixes relations (no accountant composes those), or holds no leaf.
    """
    relations = {leaf.neighbouring for leaf, _ in event.leaves()}
    if len(relations) != 1:
        raise UnsupportedEvent(
            "cannot compose events under different neighbouring relations: "
            + (", ".join(sorted(r.value for r in relations)) or "no events")
        )
    return relations.pop()


def compose(events: list[PrivacyEvent] | tuple[PrivacyEvent, ...]) -> PrivacyEvent:
    """One event for a sequence: the event itself when there is one, else a :class:`ComposedEvent`."""
    return events[0] if len(events) == 1 else ComposedEvent(events=tuple(events))
