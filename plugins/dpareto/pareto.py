"""Pareto fronts and hypervolumes of two objectives to minimise (pure functions, numpy only).

Points are rows (f1, f2), e.g. (ε, error). A point dominates another when it is no worse in both objectives and
better in one. The hypervolume of a set against a reference point r is the area of the region that some point of the
set dominates and that dominates r (Zitzler & Thiele 1999); a point not strictly below r in both objectives
contributes nothing (Avent et al. 2020, Sec. 3.2, with the anti-ideal point r = (10, 1)).
"""

from __future__ import annotations

import numpy as np

from dpaudit.errors import InvalidParameter


def _as_points(points: np.ndarray) -> np.ndarray:
    points = np.asarray(points, dtype=float).reshape(-1, 2)
    if np.isnan(points).any():
        raise InvalidParameter("objective values must not be NaN")
    return points


def _as_reference(reference: np.ndarray) -> np.ndarray:
    reference = np.asarray(reference, dtype=float).reshape(-1)
    if reference.shape != (2,) or not np.isfinite(reference).all():
        raise InvalidParameter("the reference point must be two finite numbers")
    return reference


def pareto_mask(points: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows no other row dominates (of equal rows, the first is kept)."""
    points = _as_points(points)
    order = np.lexsort((points[:, 1], points[:, 0]))  # by f1, then f2
    mask = np.zeros(len(points), dtype=bool)
    best_f2 = np.inf
    for i in order:
        if points[i, 1] < best_f2:
            mask[i] = True
            best_f2 = points[i, 1]
    return mask


def staircase(points: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The non-dominated points strictly below ``reference`` in both objectives, sorted by f1 ascending (so f2
    strictly descending): the corners of the dominated region's staircase."""
    points, reference = _as_points(points), _as_reference(reference)
    inside = points[(points[:, 0] < reference[0]) & (points[:, 1] < reference[1])]
    front = inside[pareto_mask(inside)] if len(inside) else inside
    return front[np.argsort(front[:, 0], kind="stable")]


def hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """Area dominated by ``points`` and dominating ``reference`` (0 for an empty set or points beyond it)."""
    reference = _as_reference(reference)
    front = staircase(points, reference)
    if not len(front):
        return 0.0
    right = np.append(front[1:, 0], reference[0])
    return float(np.sum((right - front[:, 0]) * (reference[1] - front[:, 1])))


def nondominated_cells(front: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The region below ``reference`` that no point of ``front`` weakly dominates, as disjoint boxes.

    ``front`` must be a :func:`staircase` (sorted by f1, f2 descending, all below the reference). With corners
    (a_1, b_1), ..., (a_k, b_k) the boxes are (−∞, a_1) × (−∞, r_2) and [a_i, a_{i+1}) × (−∞, b_i) for i = 1..k
    with a_{k+1} = r_1 (Couckuyt, Deschrijver & Dhaene 2014, Sec. 3: the cell decomposition, for two objectives).

    Returns:
        (lower, upper) corners, arrays of shape (k + 1, 2); lower bounds in f2 are −∞.
    """
    front, reference = _as_points(front), _as_reference(reference)
    a = np.concatenate([[-np.inf], front[:, 0]])
    upper_f1 = np.append(front[:, 0], reference[0])
    upper_f2 = np.concatenate([[reference[1]], front[:, 1]])
    lower = np.column_stack([a, np.full(len(a), -np.inf)])
    upper = np.column_stack([upper_f1, upper_f2])
    return lower, upper
