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
proof goes through unchanged (see docs/mechanisms/above_threshold.md); ε is
:func:`dpaudit.privacy_maps.above_threshold_epsilon`.

The cap on queries is fixed at construction, before any data is seen; ε does not depend on it, but the ledger
records it and no answer beyond it is ever produced. The noisy threshold is private state and is never exposed.
"""

from __future__ import annotations

from dpaudit.errors import BudgetExceeded, InvalidParameter
from dpaudit.mechanisms.discrete import sample_discrete_laplace
from dpaudit.mechanisms.grid import round_to_grid, scale_in_grid_units
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.validation import check_count, check_positive


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
