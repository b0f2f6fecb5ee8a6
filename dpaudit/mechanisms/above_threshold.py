"""AboveThreshold (the sparse vector technique, halting at the first positive answer), on an integer grid.

Dwork & Roth 2014, Alg. 1; Lyu, Su & Li 2017, Alg. 1 with c = 1. The threshold T is perturbed once,
ρ ~ Lap(t₁); each query value q_i gets fresh noise ν_i ~ Lap(t₂); the answer is ⊤ (True) when
q_i + ν_i ≥ T + ρ, and the mechanism halts after the first ⊤. With query sensitivity Δ it is
(Δ/t₁ + 2Δ/t₂)-DP for any number of queries (Lyu et al. 2017, Thm. 2); t₁ = 2Δ/ε, t₂ = 4Δ/ε gives ε.

Here everything lives on the grid γ·Z and is compared in integer grid units: T and every q_i are rounded to the
nearest grid point exactly (:func:`~dpaudit.mechanisms.grid.round_to_grid`), and the noises are γ times exact
discrete Laplace variables with scales t₁/γ and t₂/γ (Canonne, Kamath & Steinke 2020, Alg. 2; each quotient
read as the larger of its float and exact values, :func:`~dpaudit.mechanisms.grid.scale_in_grid_units`). After rounding,
neighbouring queries differ by at most Δ_γ = ⌊Δ/γ⌋ + 1 grid units, an integer, so the shift argument of the
proof goes through unchanged (see docs/mechanisms/above_threshold.md); ε is the privacy map
:func:`above_threshold_epsilon`, which the calibration, every accountant, the budget filter and ``dpaudit verify``
evaluate. One charge covers ``count`` rounds of a self-composed event (:func:`coverage`).

The cap on queries is fixed at construction, before any data is seen; ε does not depend on it, but the ledger
records it and no answer beyond it is ever produced. The noisy threshold is private state and is never exposed.
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpaudit.errors import AccountingError, BudgetExceeded, InvalidParameter
from dpaudit.events import AboveThresholdEvent, PrivacyEvent, SelfComposedEvent
from dpaudit.mechanisms.discrete import sample_discrete_laplace
from dpaudit.mechanisms.grid import default_grid, grid_sensitivity, round_to_grid, scale_in_grid_units
from dpaudit.mechanisms.numerics import U, grid_units_lower
from dpaudit.mechanisms.outputs import AboveThresholdRound, Coverage
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.mechanisms.registry import register_mechanism
from dpaudit.sensitivity import Neighbouring, Norm, Sensitivity
from dpaudit.validation import check_count, check_epsilon, check_positive


def above_threshold_epsilon(event: AboveThresholdEvent) -> float:
    """Privacy map: ε of AboveThreshold with threshold noise scale t₁ and query noise scale t₂ (grid units).

    Lyu, Su & Li 2017, Alg. 1 with c = 1: ρ ~ Lap(Δ/ε₁), ν_i ~ Lap(2Δ/ε₂) is (ε₁ + ε₂)-DP, so
    ε = Δ_γ/t₁ + 2Δ_γ/t₂. With t₁ = 2Δ/ε and t₂ = 4Δ/ε this is ε (Dwork & Roth 2014, Alg. 1). The proof shifts
    the threshold noise by Δ_γ, an integer, so it holds for the discrete Laplace on the grid as for the continuous.
    """
    delta_grid = grid_sensitivity(event.sensitivity.value, event.grid, 1, Norm.L1)
    return delta_grid / (event.threshold_scale / event.grid) + 2.0 * delta_grid / (event.query_scale / event.grid)


def calibrate_above_threshold(epsilon: float, sensitivity: float, grid: float) -> tuple[float, float]:
    """(threshold_scale, query_scale) in value units for ε-DP AboveThreshold on ``grid``·Z.

    Grid-unit scales t₁ = 2Δ_γ/ε and t₂ = 4Δ_γ/ε (Dwork & Roth 2014, Alg. 1; Lyu, Su & Li 2017, Alg. 1 with
    c = 1), Δ_γ = grid_sensitivity(Δ, γ, 1, 'l1'), times γ; both raised ulp by ulp until
    Δ_γ/t₁ + 2Δ_γ/t₂ ≤ ε·(1 − 4u) exactly for both readings of t = b/γ. The margin 4u absorbs the three
    roundings of :func:`above_threshold_epsilon`, which is therefore ≤ ε.

    Args:
        epsilon: target ε > 0.
        sensitivity: sensitivity Δ of each query in value units.
        grid: grid spacing γ > 0.

    Returns:
        (threshold_scale, query_scale) in value units.

    Raises:
        InvalidParameter: a parameter out of its domain, or a scale (or scale/γ) that overflows or underflows a float.
    """
    epsilon = check_epsilon(epsilon)
    grid = check_positive("grid", grid)
    delta_grid = Fraction(grid_sensitivity(sensitivity, grid, 1, Norm.L1))
    target = Fraction(epsilon) * (1 - 4 * Fraction(U))
    threshold_scale = grid * (2.0 * float(delta_grid)) / epsilon  # exact products: overflow gives inf, not an error
    query_scale = grid * (4.0 * float(delta_grid)) / epsilon
    if not math.isfinite(query_scale):
        raise InvalidParameter(f"the AboveThreshold noise scale overflows ({query_scale!r}): epsilon too small for the "
                               "sensitivity")
    for _ in range(64):
        loss = delta_grid / grid_units_lower(threshold_scale, grid) + 2 * delta_grid / grid_units_lower(
            query_scale, grid)
        if loss <= target:
            return threshold_scale, query_scale
        threshold_scale = math.nextafter(threshold_scale, math.inf)
        query_scale = math.nextafter(query_scale, math.inf)
    raise AccountingError("could not round the AboveThreshold scales up to values that meet the target")


def above_threshold_event(neighbouring: Neighbouring, sensitivity: Sensitivity, epsilon: float, *,
                          max_queries: int, rounds: int = 1, label: str = "",
                          grid: float | None = None) -> AboveThresholdEvent | SelfComposedEvent:
    """The calibrated event of ``rounds`` ε-DP AboveThreshold runs, each answering at most ``max_queries``.

    One round is an :class:`~dpaudit.events.AboveThresholdEvent`; several are its ``rounds``-fold
    :class:`~dpaudit.events.SelfComposedEvent` (charged up front, whatever number of rounds is realised).

    Raises:
        InvalidParameter: ε, the grid, ``max_queries`` or ``rounds`` out of range.
    """
    epsilon = check_epsilon(epsilon)
    check_count("max_queries", max_queries)
    check_count("rounds", rounds)
    grid = grid if grid is not None else default_grid(sensitivity.value)
    t_scale, q_scale = calibrate_above_threshold(epsilon, sensitivity.value, grid)
    leaf = AboveThresholdEvent(neighbouring=neighbouring, sensitivity=sensitivity, label=label, epsilon=epsilon,
                               threshold_scale=t_scale, query_scale=q_scale, grid=grid, max_queries=max_queries)
    return leaf if rounds == 1 else SelfComposedEvent(event=leaf, count=rounds)


def coverage(event: AboveThresholdEvent) -> Coverage:
    """One charge covers one round: at most ``max_queries`` answers, none after the first ⊤."""
    return Coverage(AboveThresholdRound(event.max_queries), 1)


def start_round(event: PrivacyEvent, threshold: float, rng: RandomSource) -> AboveThreshold:
    """A fresh run for one round of a charged AboveThreshold ``event`` (a leaf, or its self-composition).

    Raises:
        InvalidParameter: ``event`` is not an AboveThreshold charge.
    """
    leaf = event.event if isinstance(event, SelfComposedEvent) else event
    if not isinstance(leaf, AboveThresholdEvent):
        raise InvalidParameter(f"not an AboveThreshold charge: {event.kind}")
    return AboveThreshold(threshold, leaf.threshold_scale, leaf.query_scale, leaf.grid, leaf.max_queries, rng)


class AboveThreshold:
    """One run of AboveThreshold: answers queries until the first True, then refuses.

    Args:
        threshold: the public threshold T (finite).
        threshold_scale: t₁ > 0, scale of the threshold noise in value units (P(ρ = kγ) ∝ exp(−|kγ|/t₁)).
        query_scale: t₂ > 0, scale of each query's noise in value units.
        grid: spacing γ > 0 of the grid that threshold, queries and noise live on.
        max_queries: the most queries this run will answer, fixed up front.
        rng: source of uniform integers for the exact samplers.

    Raises:
        InvalidParameter: a parameter is out of its domain.
    """

    def __init__(
        self,
        threshold: float,
        threshold_scale: float,
        query_scale: float,
        grid: float,
        max_queries: int,
        rng: RandomSource,
    ) -> None:
        check_positive("threshold_scale", threshold_scale)
        check_positive("query_scale", query_scale)
        check_positive("grid", grid)
        self._max_queries = check_count("max_queries", max_queries)
        if not isinstance(rng, RandomSource):
            raise InvalidParameter(f"rng must be a RandomSource, got {type(rng).__name__}")
        self._grid = grid
        self._query_units_scale = scale_in_grid_units(query_scale, grid)
        self._rng = rng
        self._noisy_threshold = round_to_grid(threshold, grid) + sample_discrete_laplace(
            scale_in_grid_units(threshold_scale, grid), rng
        )
        self._queries_made = 0
        self._halted = False

    @property
    def halted(self) -> bool:
        """True once a query has been answered True."""
        return self._halted

    @property
    def queries_made(self) -> int:
        """Number of queries answered so far."""
        return self._queries_made

    @property
    def max_queries(self) -> int:
        """The cap fixed at construction."""
        return self._max_queries

    def test(self, value: float) -> bool:
        """Answer one query: is the noisy, rounded ``value`` at or above the noisy threshold?

        Args:
            value: the query's true value q_i(D) (finite), of sensitivity at most the Δ the scales were
                calibrated for.

        Returns:
            True (and the run halts) when round(q_i) + ν_i ≥ round(T) + ρ in grid units, else False.

        Raises:
            BudgetExceeded: the run has halted, or ``max_queries`` queries were already answered; nothing is
                released and the query is not counted.
            InvalidParameter: ``value`` is not a finite number (the query is not counted).
        """
        if self._halted:
            raise BudgetExceeded("AboveThreshold has halted after its positive answer; start a new, charged run")
        if self._queries_made >= self._max_queries:
            raise BudgetExceeded(f"AboveThreshold already answered its cap of {self._max_queries} queries")
        rounded = round_to_grid(value, self._grid)
        self._queries_made += 1
        above = rounded + sample_discrete_laplace(self._query_units_scale, self._rng) >= self._noisy_threshold
        if above:
            self._halted = True
        return above


register_mechanism(AboveThresholdEvent, coverage=coverage, pure_epsilon=above_threshold_epsilon)
