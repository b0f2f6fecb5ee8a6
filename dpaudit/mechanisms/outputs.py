"""What one charge covers, as data: the shape of one output unit and how many units one charge pays for.

Each mechanism module states its own rule (its ``coverage`` function returns a :class:`Coverage`);
:mod:`dpaudit.coverage` dispatches to them and replays releases against the result.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VectorOutput:
    """One additive-noise output: exactly ``dimension`` finite numbers (a number, or nested lists of numbers)."""

    dimension: int


@dataclass(frozen=True)
class IndexOutput:
    """One choice among ``n_candidates``: an int ``i`` with ``0 <= i < n_candidates`` (a bit: ``n_candidates`` 2)."""

    n_candidates: int


@dataclass(frozen=True)
class AboveThresholdRound:
    """One AboveThreshold run: at most ``max_queries`` answers, numbered consecutively, none after the first ⊤."""

    max_queries: int


@dataclass(frozen=True)
class TrainingRun:
    """One training run (DP-SGD): claimed once before it starts; one output (the trained model or its digest)."""


@dataclass(frozen=True)
class SelectedOutput:
    """The one output of a repeat-and-select: the selected repetition's, or that nothing was selected."""


Unit = VectorOutput | IndexOutput | AboveThresholdRound | TrainingRun | SelectedOutput


@dataclass(frozen=True)
class Coverage:
    """What one charge covers: at most ``count`` units of kind ``unit``."""

    unit: Unit
    count: int

    def describe(self) -> str:
        """A one-line public description, e.g. ``"1 output of 3 numbers"``."""
        unit = self.unit
        if isinstance(unit, VectorOutput):
            return f"{self.count} output(s) of {unit.dimension} number(s) each"
        if isinstance(unit, IndexOutput):
            return f"{self.count} index(es) in [0, {unit.n_candidates})"
        if isinstance(unit, AboveThresholdRound):
            return (f"{self.count} AboveThreshold round(s), each at most {unit.max_queries} answer(s) and none after "
                    "its first above-threshold answer")
        if isinstance(unit, TrainingRun):
            return f"{self.count} training run(s) with one output each"
        return f"{self.count} selected output(s)"
