"""The marginal likelihood of the multi-task GP of Kusner et al. 2015, Assumption 1, for a neighbouring pair (V, V').

Assumption 1 puts the prior GP(0, k1(V, V') ⊗ k2(λ, λ')) on the validation-gain functions (a multi-task GP,
Bonilla, Chai & Williams, "Multi-task Gaussian process prediction", NIPS 2008). Evaluated on a finite set Λ of n
hyperparameters, the gains ``[f_V; f_V']`` of a neighbouring pair are jointly Gaussian,

    [f_V; f_V'] ~ N(0, B ⊗ K2 + s I_{2n}),    B = [[1, k1], [k1, 1]],    K2 = [k2(λ_a, λ_b)]_{a,b},

with s ≥ 0 the variance of independent observation noise (a nugget). This density is the likelihood of eq. (14)
in Kusner et al. 2015, Sec. 6 (the text calls its parameters "posterior mean and variance"; what the experiment
varies k1 in is the marginal likelihood of the observed pair under the prior, which is the density above).

Kronecker structure. B = Q diag(1 + k1, 1 − k1) Qᵀ with Q = [[1, 1], [1, −1]]/√2 and K2 = U diag(d) Uᵀ, so
B ⊗ K2 + s I has the eigenvectors Q ⊗ U and the eigenvalues (1 ± k1) d_j + s. With u = Uᵀ(f_V + f_V')/√2 and
w = Uᵀ(f_V − f_V')/√2,

    log N = −½ Σ_j [u_j² / ((1 + k1) d_j + s) + w_j² / ((1 − k1) d_j + s)
                    + log((1 + k1) d_j + s) + log((1 − k1) d_j + s)] − n log(2π),

which costs one symmetric eigendecomposition of K2 (n × n) for any number of pairs and k1 values, and never forms
the 2n × 2n covariance. The sum "w_j² / ((1 − k1) d_j + s)" is where k1 meets the data: the closer k1 is to 1, the
smaller the difference f_V − f_V' the prior expects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_nonnegative

#: eigenvalues of K2 above −PSD_TOLERANCE · n · max|d| count as rounding error and are set to 0
PSD_TOLERANCE = 1e-10


@dataclass(frozen=True)
class KernelEigen:
    """K2 = U diag(d) Uᵀ with d ≥ 0 (eigenvalues above −PSD_TOLERANCE · n · max|K2| are rounding, set to 0).

    Attributes:
        values: d, shape (n,).
        vectors: U, shape (n, n), orthonormal columns.
    """

    values: np.ndarray
    vectors: np.ndarray


@dataclass(frozen=True)
class PairStatistics:
    """Sufficient statistics of Σ_i log N([F_V]_i; [F_V']_i | 0, B ⊗ K2 + s I) for every k1 and s.

    Attributes:
        eigen: the eigendecomposition of K2.
        u2: Σ_i u_ij², u_i = Uᵀ([F_V]_i + [F_V']_i)/√2, shape (n,).
        w2: Σ_i w_ij², w_i = Uᵀ([F_V]_i − [F_V']_i)/√2, shape (n,).
        rows: the number of pairs.
    """

    eigen: KernelEigen
    u2: np.ndarray
    w2: np.ndarray
    rows: int


def kernel_eigen(K2: np.ndarray) -> KernelEigen:
    """The eigendecomposition of k2's matrix on Λ, shared by every likelihood evaluation with this K2.

    Raises:
        InvalidParameter: K2 not a finite, non-empty, square, symmetric positive semi-definite matrix.
    """
    try:
        K2 = np.asarray(K2, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"K2 must be a matrix of numbers: {exc}") from None
    if K2.ndim != 2 or K2.shape[0] != K2.shape[1] or K2.shape[0] == 0:
        raise InvalidParameter(f"K2 must be a non-empty square matrix, got shape {K2.shape}")
    if not np.all(np.isfinite(K2)):
        raise InvalidParameter("K2 must be finite")
    scale = float(np.max(np.abs(K2)))
    if not np.allclose(K2, K2.T, rtol=0.0, atol=PSD_TOLERANCE * max(scale, 1.0)):
        raise InvalidParameter("K2 must be symmetric")
    d, U = np.linalg.eigh(0.5 * (K2 + K2.T))
    floor = -PSD_TOLERANCE * K2.shape[0] * max(scale, 1.0)
    if d[0] < floor:
        raise InvalidParameter(f"K2 must be positive semi-definite; its smallest eigenvalue is {d[0]:.3g}")
    d = np.clip(d, 0.0, None)
    d.setflags(write=False)
    U.setflags(write=False)
    return KernelEigen(d, U)


def _gain_rows(name: str, F: object, n: int) -> np.ndarray:
    """Gains as a finite (rows, n) float64 array; a 1-d vector is one row."""
    try:
        F = np.asarray(F, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"{name} must be numbers: {exc}") from None
    if F.ndim == 1:
        F = F[None, :]
    if F.ndim != 2 or F.shape[0] == 0 or F.shape[1] != n:
        raise InvalidParameter(f"{name} must have shape ({n},) or (rows, {n}) to match K2, got {F.shape}")
    if not np.all(np.isfinite(F)):
        raise InvalidParameter(f"{name} must be finite")
    return F


def _k1_values(k1_values: object) -> np.ndarray:
    try:
        k = np.atleast_1d(np.asarray(k1_values, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"k1 must be numbers: {exc}") from None
    if k.ndim != 1 or k.size == 0 or not np.all(np.isfinite(k)) or np.any((k < 0.0) | (k > 1.0)):
        raise InvalidParameter(f"k1(V, V') is a correlation of a normalised kernel, in [0, 1]; got {k1_values!r}")
    return k


def _variances(d: np.ndarray, scale: np.ndarray, noise: float) -> np.ndarray:
    """scale[:, None] · d + s, refusing a singular covariance (e.g. k1 = 1 or a singular K2 with s = 0)."""
    var = scale[:, None] * d[None, :] + noise
    if np.any(var <= 0.0):
        raise InvalidParameter("the covariance B ⊗ K2 + s I is singular here (k1 = 1 or a singular K2 with "
                               "noise_variance = 0); use noise_variance > 0")
    return var


def pair_statistics(F_v: np.ndarray, F_v_prime: np.ndarray, eigen: KernelEigen) -> PairStatistics:
    """Rotate the pairs once into the eigenbasis of B ⊗ K2 (module docstring), for any number of k1 and s.

    Args:
        F_v: (rows, n) gains on the validation sets V_i (or one (n,) vector), column j at hyperparameter λ_j.
        F_v_prime: the same shape, gains on the neighbours V_i'.
        eigen: :func:`kernel_eigen` of K2.

    Raises:
        InvalidParameter: shapes that do not match K2 or each other, or non-finite gains.
    """
    n = eigen.values.size
    F = _gain_rows("F_v", F_v, n)
    Fp = _gain_rows("F_v_prime", F_v_prime, n)
    if F.shape != Fp.shape:
        raise InvalidParameter(f"F_v and F_v_prime must have the same shape, got {F.shape} and {Fp.shape}")
    u2 = np.sum(((F + Fp) @ eigen.vectors) ** 2, axis=0) / 2.0
    w2 = np.sum(((F - Fp) @ eigen.vectors) ** 2, axis=0) / 2.0
    u2.setflags(write=False)
    w2.setflags(write=False)
    return PairStatistics(eigen, u2, w2, F.shape[0])


def log_likelihood_grid(stats: PairStatistics, k1_values: object, noise_variance: float) -> np.ndarray:
    """Σ_i log N([F_V]_i; [F_V']_i | 0, B(k1) ⊗ K2 + s I) for each k1, from :func:`pair_statistics`.

    Kusner et al. 2015, eq. (14), summed over independent pairs (Sec. 6); the multi-task covariance of Bonilla et
    al. 2008; the closed form of the module docstring.

    Args:
        stats: the rotated pairs.
        k1_values: one k1 or a 1-d sequence of them, each in [0, 1].
        noise_variance: s ≥ 0.

    Returns:
        float64 array of the summed log-likelihoods, one per k1.

    Raises:
        InvalidParameter: k1 outside [0, 1], s < 0, or a singular covariance (k1 = 1 or a singular K2 with s = 0).
    """
    k1 = _k1_values(k1_values)
    s = check_nonnegative("noise_variance", noise_variance)
    d = stats.eigen.values
    var_plus = _variances(d, 1.0 + k1, s)
    var_minus = _variances(d, 1.0 - k1, s)
    quadratic = np.sum(stats.u2 / var_plus, axis=1) + np.sum(stats.w2 / var_minus, axis=1)
    log_det = stats.rows * (np.sum(np.log(var_plus), axis=1) + np.sum(np.log(var_minus), axis=1))
    return -0.5 * (quadratic + log_det) - stats.rows * d.size * math.log(2.0 * math.pi)


def summed_multitask_log_likelihood(F_v: np.ndarray, F_v_prime: np.ndarray, K2: np.ndarray, k1_values: object,
                                    noise_variance: float) -> np.ndarray:
    """Σ_i log N([F_V]_i; [F_V']_i | 0, B(k1) ⊗ K2 + s I) for each k1 of ``k1_values`` (Kusner et al. eq. (14)).

    The rows i are independent neighbouring pairs, so the joint likelihood is the product over rows (Kusner et al.
    2015, Sec. 6: "the joint marginal likelihood is simply the product of all V_i likelihoods"); its logarithm is
    the sum returned here. Multi-task covariance of Bonilla et al. 2008 with the task covariance
    B = [[1, k1], [k1, 1]]; computed through the eigendecomposition of K2 (module docstring). For many calls with
    one K2, use :func:`kernel_eigen`, :func:`pair_statistics` and :func:`log_likelihood_grid` directly.

    Args:
        F_v: (rows, n) gains on the validation sets V_i (or one (n,) vector), column j at hyperparameter λ_j.
        F_v_prime: the same shape, gains on the neighbours V_i'.
        K2: (n, n) matrix k2(λ_a, λ_b), symmetric positive semi-definite.
        k1_values: one k1 or a 1-d sequence of them, each in [0, 1].
        noise_variance: s ≥ 0, the nugget added to the diagonal.

    Returns:
        float64 array of the summed log-likelihoods, one per k1.

    Raises:
        InvalidParameter: shapes that do not match, non-finite values, K2 not symmetric PSD, k1 outside [0, 1],
            s < 0, or a singular covariance (k1 = 1 or singular K2 with s = 0).
    """
    return log_likelihood_grid(pair_statistics(F_v, F_v_prime, kernel_eigen(K2)), k1_values, noise_variance)


def multitask_log_likelihood(f_v: np.ndarray, f_v_prime: np.ndarray, K2: np.ndarray, k1: float,
                             noise_variance: float) -> float:
    """log N([f_V; f_V'] | 0, [[1, k1], [k1, 1]] ⊗ K2 + s I) for one neighbouring pair (Kusner et al. eq. (14)).

    The marginal likelihood of the multi-task GP (Bonilla et al. 2008) of Assumption 1 at the n hyperparameters
    where f_V and f_V' were observed, evaluated through the eigendecomposition of K2 (module docstring).

    Args:
        f_v: (n,) gains f_V(λ_1), ..., f_V(λ_n).
        f_v_prime: (n,) gains f_V'(λ_1), ..., f_V'(λ_n) on the neighbour V'.
        K2: (n, n) matrix k2(λ_a, λ_b), symmetric positive semi-definite.
        k1: k1(V, V') in [0, 1].
        noise_variance: s ≥ 0, the nugget (observation-noise variance) on the diagonal.

    Raises:
        InvalidParameter: as :func:`summed_multitask_log_likelihood`; also if f_v or f_v_prime is not a vector.
    """
    for name, f in (("f_v", f_v), ("f_v_prime", f_v_prime)):
        if np.ndim(f) != 1:
            raise InvalidParameter(f"{name} must be a vector of n gains, got {np.ndim(f)} dimensions")
    if isinstance(k1, bool) or not isinstance(k1, (int, float)):
        raise InvalidParameter(f"k1 must be a real number, got {k1!r}")
    return float(summed_multitask_log_likelihood(f_v, f_v_prime, K2, [k1], noise_variance)[0])


def single_task_log_likelihood(F: np.ndarray, K2: np.ndarray, noise_variance: float) -> float:
    """Σ_i log N(F_i | 0, K2 + s I): rows of F as independent draws of the single-task GP(0, k2).

    Used to choose k2's lengthscale without reference to k1 (each V_i on its own, Kusner et al. 2015, Sec. 2).

    Args:
        F: (rows, n) gains (or one (n,) vector).
        K2: (n, n) matrix k2(λ_a, λ_b), symmetric positive semi-definite.
        noise_variance: s ≥ 0.

    Raises:
        InvalidParameter: mismatched shapes, non-finite values, K2 not symmetric PSD, s < 0, or a singular
            covariance.
    """
    eigen = kernel_eigen(K2)
    d = eigen.values
    F = _gain_rows("F", F, d.size)
    var = _variances(d, np.ones(1), check_nonnegative("noise_variance", noise_variance))[0]
    c2 = np.sum((F @ eigen.vectors) ** 2, axis=0)
    rows = F.shape[0]
    return float(-0.5 * (np.sum(c2 / var) + rows * np.sum(np.log(var)) + rows * d.size * math.log(2.0 * math.pi)))


def grid_argmax(values: np.ndarray, grid: np.ndarray) -> float:
    """The grid point with the largest log-likelihood (the lowest such point among ties).

    Raises:
        InvalidParameter: sizes differ, empty, or a value is NaN.
    """
    values = np.asarray(values, dtype=np.float64)
    grid = np.asarray(grid, dtype=np.float64)
    if values.shape != grid.shape or values.ndim != 1 or values.size == 0 or np.any(np.isnan(values)):
        raise InvalidParameter("one non-NaN log-likelihood per grid point is required")
    return float(grid[int(np.argmax(values))])
