"""Pareto fronts and hypervolumes (plugins/dpareto/pareto.py) against hand-computed staircases and BoTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from botorch.utils.multi_objective.hypervolume import Hypervolume

from dpaudit.errors import InvalidParameter
from dpaudit_plugins.dpareto.pareto import hypervolume, nondominated_cells, pareto_mask, staircase

REFERENCE = np.array([10.0, 1.0])


def botorch_hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """BoTorch's hypervolume (maximisation) of the negated points against the negated reference."""
    inside = points[(points < reference).all(axis=1)]
    if not len(inside):
        return 0.0
    hv = Hypervolume(ref_point=-torch.as_tensor(reference, dtype=torch.float64))
    return float(hv.compute(-torch.as_tensor(inside, dtype=torch.float64)))


def test_hand_computed_staircase():
    # corners (1, 0.5), (2, 0.3), (5, 0.1): strips 1x0.5 + 3x0.7 + 5x0.9 = 0.5 + 2.1 + 4.5
    points = np.array([[5.0, 0.1], [1.0, 0.5], [2.0, 0.3]])
    assert hypervolume(points, REFERENCE) == pytest.approx(7.1, abs=1e-12)


def test_dominated_and_duplicate_points_add_nothing():
    points = np.array([[1.0, 0.5], [2.0, 0.3], [5.0, 0.1]])
    extra = np.vstack([points, [[3.0, 0.4], [1.0, 0.5], [2.0, 0.3]]])
    assert hypervolume(extra, REFERENCE) == hypervolume(points, REFERENCE)


def test_points_at_or_beyond_the_reference_contribute_nothing():
    points = np.array([[1.0, 0.5], [2.0, 0.3]])
    beyond = np.vstack([points, [[12.0, 0.01], [0.1, 1.0], [10.0, 0.0], [20.0, 2.0]]])
    assert hypervolume(beyond, REFERENCE) == hypervolume(points, REFERENCE)
    assert hypervolume(np.array([[11.0, 0.5]]), REFERENCE) == 0.0
    assert hypervolume(np.empty((0, 2)), REFERENCE) == 0.0


def test_single_point_is_a_rectangle():
    assert hypervolume(np.array([[4.0, 0.25]]), REFERENCE) == pytest.approx(6.0 * 0.75)


@pytest.mark.parametrize("seed", range(5))
def test_matches_botorch(seed):
    rng = np.random.default_rng(seed)
    points = np.column_stack([rng.uniform(0, 12, 40), rng.uniform(0, 1.2, 40)])
    assert hypervolume(points, REFERENCE) == pytest.approx(botorch_hypervolume(points, REFERENCE), rel=1e-12)


def test_pareto_mask_keeps_exactly_the_non_dominated():
    rng = np.random.default_rng(7)
    points = rng.integers(0, 6, size=(60, 2)).astype(float)
    mask = pareto_mask(points)
    for i, p in enumerate(points):
        dominated = any(np.all(q <= p) and np.any(q < p) for q in points)
        earlier_copy = any(np.array_equal(q, p) for q in points[:i])
        assert mask[i] == (not dominated and not earlier_copy)


def test_cells_partition_the_non_dominated_region():
    front = staircase(np.array([[1.0, 0.5], [2.0, 0.3], [5.0, 0.1]]), REFERENCE)
    lower, upper = nondominated_cells(front, REFERENCE)
    rng = np.random.default_rng(3)
    probes = np.column_stack([rng.uniform(-2, 11, 5000), rng.uniform(-0.5, 1.1, 5000)])
    for p in probes:
        inside = np.sum(np.all((p >= lower) & (p < upper), axis=1))
        dominated = np.any(np.all(front <= p, axis=1))
        below_reference = np.all(p < REFERENCE)
        assert inside == (1 if below_reference and not dominated else 0)


def test_nan_objectives_are_refused():
    with pytest.raises(InvalidParameter, match="NaN"):
        hypervolume(np.array([[1.0, np.nan]]), REFERENCE)
