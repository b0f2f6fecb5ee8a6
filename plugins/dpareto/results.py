"""The public output of a run: the front, its hypervolume with the reference point, and every evaluated trial."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpaudit_plugins.dpareto.pareto import hypervolume, pareto_mask
from dpaudit_plugins.dpareto.trials import Trial


def objective_points(trials: Sequence[Trial], reference: tuple[float, float]) -> np.ndarray:
    """(ε, error) of each trial, a failed trial at the reference point's error (it then contributes nothing)."""
    return np.array([[t.epsilon, reference[1] if t.failed else t.error] for t in trials], dtype=float).reshape(-1, 2)


def front_of(trials: Sequence[Trial]) -> list[Trial]:
    """The trials with a valid error that no other such trial dominates in (ε, error), sorted by ε."""
    valid = [t for t in trials if not t.failed]
    if not valid:
        return []
    mask = pareto_mask(np.array([[t.epsilon, t.error] for t in valid], dtype=float))
    return sorted((t for t, keep in zip(valid, mask, strict=True) if keep), key=lambda t: t.epsilon)


def hypervolume_trace(trials: Sequence[Trial], reference: tuple[float, float]) -> list[float]:
    """The hypervolume of the first k trials, k = 1..n (linear (ε, error) space, against ``reference``)."""
    points = objective_points(trials, reference)
    return [hypervolume(points[:k], np.array(reference)) for k in range(1, len(points) + 1)]


def summarise(trials: Sequence[Trial], reference: tuple[float, float]) -> dict[str, Any]:
    """``front`` (points with hyperparameters, ε and its oracle, error), ``hypervolume`` (value, reference point,
    space), ``hypervolume_trace``, ``trials`` (every evaluated point) and ``failed_trials``."""
    trace = hypervolume_trace(trials, reference)
    return {"front": [t.to_dict() for t in front_of(trials)],
            "hypervolume": {"value": trace[-1] if trace else 0.0, "reference_point": list(reference),
                            "space": "linear (epsilon, error), both minimised"},
            "hypervolume_trace": trace,
            "trials": [t.to_dict() for t in trials],
            "failed_trials": sum(t.failed for t in trials)}
