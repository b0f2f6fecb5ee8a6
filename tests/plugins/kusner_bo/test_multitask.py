"""The multi-task GP likelihood of Kusner et al. 2015 eq. (14): dense cross-checks, recovery of k1, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from dpaudit.errors import InvalidParameter
from dpaudit_plugins.kusner_bo.gp import KernelSpec, kernel_matrix
from dpaudit_plugins.kusner_bo.multitask import (
    grid_argmax,
    multitask_log_likelihood,
    single_task_log_likelihood,
    summed_multitask_log_likelihood,
)

PAPER_GRID = np.round(np.arange(0.05, 0.951, 0.05), 2)


def _dense(f: np.ndarray, g: np.ndarray, K2: np.ndarray, k1: float, s: float) -> float:
    cov = np.kron(np.array([[1.0, k1], [k1, 1.0]]), K2) + s * np.eye(2 * len(f))
    return float(multivariate_normal(np.zeros(2 * len(f)), cov).logpdf(np.concatenate([f, g])))


@pytest.mark.parametrize("kernel", ["se", "matern52"])
@pytest.mark.parametrize("k1", [0.0, 0.3, 0.95, 1.0])
@pytest.mark.parametrize("s", [1e-3, 0.5])
def test_kronecker_likelihood_equals_dense_logpdf(kernel, k1, s):
    rng = np.random.default_rng(7)
    X = rng.uniform(size=(7, 2))
    K2 = kernel_matrix(KernelSpec(kernel, 0.4), X)
    f, g = rng.normal(size=7), rng.normal(size=7)
    assert multitask_log_likelihood(f, g, K2, k1, s) == pytest.approx(_dense(f, g, K2, k1, s), rel=1e-9, abs=1e-9)


def test_summed_likelihood_is_the_sum_over_pairs_on_a_grid():
    rng = np.random.default_rng(8)
    K2 = kernel_matrix(KernelSpec("se", 0.3), rng.uniform(size=(6, 1)))
    F, Fp = rng.normal(size=(4, 6)), rng.normal(size=(4, 6))
    grid = [0.1, 0.5, 0.9]
    expected = [sum(_dense(F[i], Fp[i], K2, k, 0.01) for i in range(4)) for k in grid]
    np.testing.assert_allclose(summed_multitask_log_likelihood(F, Fp, K2, grid, 0.01), expected, rtol=1e-10)


def test_single_task_likelihood_equals_dense_logpdf():
    rng = np.random.default_rng(9)
    K2 = kernel_matrix(KernelSpec("se", 0.3), rng.uniform(size=(6, 2)))
    F = rng.normal(size=(3, 6))
    expected = sum(multivariate_normal(np.zeros(6), K2 + 0.05 * np.eye(6)).logpdf(row) for row in F)
    assert single_task_log_likelihood(F, K2, 0.05) == pytest.approx(expected, rel=1e-10)


def _simulate(k1: float, seed: int, pairs: int = 20, n: int = 20, s: float = 1e-2):
    K2 = kernel_matrix(KernelSpec("se", 0.2), np.linspace(0.0, 1.0, n)[:, None])
    cov = np.kron(np.array([[1.0, k1], [k1, 1.0]]), K2) + s * np.eye(2 * n)
    Z = np.random.default_rng(seed).normal(size=(pairs, 2 * n)) @ np.linalg.cholesky(cov).T
    return Z[:, :n], Z[:, n:], K2, s


def _swapped(F, Fp, K2, grid, s):
    """Deliberately broken: the roles of k1 and 1 − k1 exchanged."""
    return summed_multitask_log_likelihood(F, Fp, K2, 1.0 - np.asarray(grid), s)


@pytest.mark.statistical
@pytest.mark.parametrize("seed", [11, 12, 13, 14, 15])
def test_grid_mle_recovers_the_true_k1(seed):
    """20 pairs of a 20-point multi-task GP (SE k2, ℓ = 0.2, nugget 0.01) with k1 = 0.8: the maximum-likelihood k1
    on the paper's grid {0.05, ..., 0.95} must lie within 0.1 of 0.8.

    Power, measured over seeds 0..19 999 of this same simulation: the correct likelihood never missed by more than
    0.1 (0/20 000; 95% upper bound on the false-alarm rate 1.5e-4 per seed, so < 8e-4 for these five seeds); the
    swapped variant (k1 ↔ 1 − k1) landed at 0.1-0.3 every time (miss rate 0/20 000) and is caught below.
    """
    F, Fp, K2, s = _simulate(0.8, seed)
    assert abs(grid_argmax(summed_multitask_log_likelihood(F, Fp, K2, PAPER_GRID, s), PAPER_GRID) - 0.8) <= 0.1 + 1e-9
    broken = grid_argmax(_swapped(F, Fp, K2, PAPER_GRID, s), PAPER_GRID)
    assert abs(broken - 0.8) > 0.1


def test_identical_pair_prefers_k1_near_one():
    K2 = kernel_matrix(KernelSpec("se", 0.3), np.linspace(0.0, 1.0, 10)[:, None])
    f = np.random.default_rng(3).multivariate_normal(np.zeros(10), K2 + 1e-2 * np.eye(10))
    ll = summed_multitask_log_likelihood(f, f, K2, PAPER_GRID, 1e-2)
    assert np.all(np.diff(ll) > 0)  # f_V = f_V': the likelihood increases all the way to the grid's edge


@pytest.mark.parametrize(
    "kwargs",
    [
        {"k1": 1.5},
        {"k1": -0.1},
        {"k1": float("nan")},
        {"k1": True},
        {"noise_variance": -1.0},
        {"K2": np.array([[1.0, 2.0], [2.0, 1.0]])},  # indefinite
        {"K2": np.array([[1.0, 0.5], [0.0, 1.0]])},  # not symmetric
        {"K2": np.eye(3)},  # wrong size
        {"f_v": np.array([0.0, np.nan])},
        {"f_v_prime": np.zeros((1, 2))},  # not a vector
        {"k1": 1.0, "noise_variance": 0.0},  # singular covariance
    ],
)
def test_bad_input_is_refused(kwargs):
    args = {"f_v": np.zeros(2), "f_v_prime": np.ones(2), "K2": np.eye(2), "k1": 0.5, "noise_variance": 0.1}
    args.update(kwargs)
    with pytest.raises(InvalidParameter):
        multitask_log_likelihood(**args)


def test_mismatched_pair_shapes_and_grid_argmax_input_are_refused():
    with pytest.raises(InvalidParameter):
        summed_multitask_log_likelihood(np.zeros((2, 3)), np.zeros((3, 3)), np.eye(3), [0.5], 0.1)
    with pytest.raises(InvalidParameter):
        grid_argmax(np.array([1.0, np.nan]), np.array([0.1, 0.2]))
    assert grid_argmax(np.array([1.0, 3.0, 3.0]), np.array([0.1, 0.2, 0.3])) == 0.2
