"""The cloaking solver: convergence to a known optimum, the Kiefer-Wolfowitz optimality condition, and exact
feasibility of the returned M recomputed independently (also for a solver stopped early)."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit_plugins.dp_gp.cloaking import DEFAULT_TOLERANCE, d_optimal_design, solve_cloaking
from dpaudit_plugins.dp_gp.formulas import cloaking_matrix


def _constraints(C, M):
    """c_iᵀM⁻¹c_i by a plain solve (independent of the solver's Cholesky code)."""
    return np.einsum("ij,ij->j", C, np.linalg.solve(M, C))


def test_known_optimum_axis_points_with_interior_points():
    """Points ±a_j e_j plus points strictly inside the ellipse Σ z_j²/a_j² < 1: the minimum-volume centred ellipsoid
    is diag(a²) (its axes touch the axis points, by symmetry and Kiefer-Wolfowitz), with all weight on the axes."""
    rng = np.random.default_rng(0)
    a = np.array([1.0, 2.0, 0.5, 3.0])
    axes = np.hstack([np.diag(a), -np.diag(a)])
    inside = rng.normal(size=(4, 40))
    inside *= a[:, None] * rng.uniform(0.05, 0.9, 40) / np.linalg.norm(inside, axis=0)  # ‖D⁻¹z‖ < 0.9
    C = np.hstack([axes, inside])
    design = solve_cloaking(C, tolerance=1e-8, floor_ratio=1e-12)
    M = design.covariance(C)
    assert design.solver.converged and design.rank == 4
    np.testing.assert_allclose(M, np.diag(a * a), rtol=1e-6, atol=1e-6)
    assert np.sum(design.lambdas[8:]) < 1e-6 * np.sum(design.lambdas)  # the away steps dropped the interior points


def test_kiefer_wolfowitz_condition_and_monotone_objective():
    rng = np.random.default_rng(1)
    points = rng.normal(size=(5, 60))
    loose = d_optimal_design(points, tolerance=1e-2)
    tight = d_optimal_design(points, tolerance=1e-7)
    assert tight.converged and tight.max_ratio <= 1 + 1e-7 and tight.min_support_ratio >= 1 - 1e-7

    def logdet(u):
        return np.linalg.slogdet((points * u) @ points.T)[1]

    assert logdet(tight.weights) >= logdet(loose.weights) - 1e-12
    # duality: log det of the optimum is within r·log(1 + tol) of the bound from the loose design's max ratio
    assert logdet(tight.weights) - logdet(loose.weights) <= 5 * np.log(loose.max_ratio) + 1e-9


@pytest.mark.parametrize("max_iterations", [1, 10, 100_000])
def test_returned_covariance_is_exactly_feasible_even_when_stopped_early(max_iterations):
    rng = np.random.default_rng(2)
    X = rng.uniform(0, 85, (120, 1))
    Xs = np.linspace(-10, 110, 60)[:, None]
    C, _ = cloaking_matrix(X, Xs, 25.0, 1.0, 0.3)
    design = solve_cloaking(C, max_iterations=max_iterations)
    quad = _constraints(C, design.covariance(C))
    assert np.max(quad) <= 1 + 1e-8
    assert np.max(quad) >= 1 - 1e-8  # scaled to be tight: no more noise than the constraint needs
    assert np.all(np.linalg.eigvalsh(design.covariance(C)) > 0)  # the floor leaves no direction unnoised
    assert design.solver.converged == (max_iterations == 100_000)


def test_paper_setting_converges():
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 85.6, (287, 1))
    C, _ = cloaking_matrix(X, np.linspace(0, 110, 200)[:, None], 25.0, 1.0, 0.3)
    design = solve_cloaking(C)
    assert design.solver.converged and design.solver.max_ratio <= 1 + DEFAULT_TOLERANCE
    assert design.max_constraint == pytest.approx(1.0, abs=1e-9)


def test_refuses_a_zero_cloaking_matrix():
    with pytest.raises(InvalidParameter, match="zero"):
        solve_cloaking(np.zeros((3, 4)))


@pytest.mark.parametrize("X_star", [[[30.0]], [[30.0], [30.0], [30.0]]], ids=["one-point", "repeated-points"])
def test_rank_one_cloaking_matrix_is_solved_exactly(X_star):
    """C of rank 1 (one test point, or one repeated): the towards step of Frank-Wolfe is α = 1 and the Sherman-Morrison
    update divided by 1 − α = 0 (NaN weights, then a crash). The exact optimum puts all weight on the largest |c̃_i|;
    the returned M must be feasible and tight (the constraint of that column is 1)."""
    X = np.linspace(0, 80, 30)[:, None]
    C, _ = cloaking_matrix(X, np.array(X_star), 20.0, 1.0, 0.3)
    design = solve_cloaking(C)
    assert design.rank == 1 and design.solver.converged and np.all(np.isfinite(design.lambdas))
    assert np.count_nonzero(design.lambdas) == 1
    assert int(np.argmax(design.lambdas)) == int(np.argmax(np.abs(C[0])))
    quad = _constraints(C, design.covariance(C))
    assert np.max(quad) <= 1 + 1e-9 and np.max(quad) >= 1 - 1e-6


def test_rank_one_design_weights():
    result = d_optimal_design(np.array([[0.5, -2.0, 1.0]]))
    np.testing.assert_array_equal(result.weights, [0.0, 1.0, 0.0])
    assert result.converged and result.max_ratio == 1.0
