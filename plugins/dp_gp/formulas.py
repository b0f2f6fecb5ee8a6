"""The public linear algebra of DP GP regression and the two sensitivity formulas ``dpaudit verify`` recomputes
(Smith, Álvarez, Zwiessele & Lawrence, AISTATS 2018; docs/plugins/dp-gp.md), registered on import.

This module imports numpy, scipy and the kernel's light modules only (no torch, no sibling module of this package):
``dpaudit verify`` loads it on its own (:func:`dpaudit.registry.load_formulas`) to recompute a release's
sensitivity from the public inputs recorded in its charge. Everything here is float64 and uses Cholesky
factorisations only (no iterative or approximate solver touches a certified quantity).

Notation (the paper's, Sec. 2-3): X (n×D) the public training inputs, X* (P×D) the public test inputs, EQ kernel
k(x, x') = v·exp(−‖x − x'‖²/(2ℓ²)) (ℓ a scalar or one per input dimension), K_f = k(X, X), K = K_f + σ_n²I (the
paper's K, "incorporating sample variance"), K_*f = k(X*, X). Outputs are clipped to the public interval
[lower, upper] and normalised as (y − centre)/scale, so one replaced output moves by at most d = (upper − lower)/scale
in normalised units (:func:`output_bound`).

Both formulas bound the L2 sensitivity of the *whitened* prediction w = L⁻¹(f* − m), LLᵀ = M, under replace-one
neighbours; releasing w + N(0, σ²I) and mapping back f̃* = m + L·w̃ adds N(0, σ²M) to f* (Hall, Rinaldo & Wasserman
2013, Prop. 3 = the paper's eq. (6)-(7)):

* ``dp_gp_cloaking`` (Sec. 3): M = Σ λ_i c_i c_iᵀ + τI with C = K_*f K⁻¹ (eq. (8)); one output moved by d moves f*
  by d·c_i, so ‖ΔW‖₂ = d·sqrt(c_iᵀ M⁻¹ c_i) (eq. (9) with its square root restored) and Δ = d·max_i sqrt(c_iᵀM⁻¹c_i).
* ``dp_gp_standard_rkhs`` (Sec. 2): M = K_** + jI (the prior at the test points, public jitter j ≥ 0). The mean
  moves by the function d·Σ_i a_i k(x_i, ·), a = K⁻¹e_n, whose RKHS norm is d·sqrt(e_nᵀK⁻¹K_fK⁻¹e_n); for any g in
  the RKHS and any test points, g(X*)ᵀ M⁻¹ g(X*) ≤ ‖g‖²_H (Cauchy-Schwarz: (uᵀg(X*))² ≤ ‖g‖²_H uᵀK_**u ≤ ‖g‖²_H
  uᵀMu for every u). So Δ = d·max_n sqrt(e_nᵀK⁻¹K_fK⁻¹e_n) holds for every X* and jitter.

Each value is multiplied by (1 + :func:`rounding_margin`), an explicit upward allowance for the floating-point error
of the Cholesky solves, so that the recorded Δ is an upper bound on the exact one.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve, eigvalsh, solve_triangular

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import Formula, Neighbouring, Norm, register_formula
from dpaudit.validation import check_count, check_finite, check_positive

CLOAKING_FORMULA = "dp_gp_cloaking"
STANDARD_FORMULA = "dp_gp_standard_rkhs"
SOURCE_CLOAKING = ("Smith, Álvarez, Zwiessele & Lawrence 2018 (AISTATS), Sec. 3, eq. (6)-(9) with the square root of "
                   "eq. (9) restored: Δ = d·max_i sqrt(c_iᵀ M⁻¹ c_i), C = K_*f (K_f + σ_n²I)⁻¹")
SOURCE_STANDARD = ("Smith et al. 2018, Sec. 2, eq. (3)-(5); Hall, Rinaldo & Wasserman 2013, Sec. 4: exact RKHS "
                   "sensitivity Δ = d·max_n sqrt(e_nᵀ K⁻¹ K_f K⁻¹ e_n) of the posterior mean")
#: u, the unit round-off of float64
UNIT_ROUNDOFF = float(np.finfo(np.float64).eps) / 2
#: a certified quantity whose rounding margin would exceed this is refused (raise the noise, jitter or floor)
MAX_MARGIN = 1e-3


# --- inputs --------------------------------------------------------------------------------------------------------


def as_inputs(points: Any, name: str) -> np.ndarray:
    """``points`` as a finite float64 (N, D) array (a flat sequence is N one-dimensional points).

    Raises:
        InvalidParameter: empty, ragged, non-finite or more than two-dimensional.
    """
    try:
        array = np.array(points, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"{name} must be a list of points (numbers or equal-length lists): {exc}") from None
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise InvalidParameter(f"{name} must be a non-empty (N, D) array of points, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise InvalidParameter(f"{name} must be finite")
    return array


def as_lengthscale(lengthscale: float | Sequence[float], dimension: int) -> np.ndarray:
    """ℓ as a (D,) array: one positive value for every dimension, or one per dimension.

    Raises:
        InvalidParameter: a non-positive value, or a per-dimension list of the wrong length.
    """
    values = np.atleast_1d(np.array(lengthscale, dtype=np.float64))
    if values.ndim != 1 or values.size not in (1, dimension):
        raise InvalidParameter(f"lengthscale must be one number or {dimension} numbers, got {lengthscale!r}")
    for value in values:
        check_positive("lengthscale", float(value))
    return np.broadcast_to(values, (dimension,)).copy()


def output_bound(lower: float, upper: float, scale: float, centre: float,
                 neighbouring: Neighbouring | str) -> float:
    """d: how far one normalised output can move between neighbours.

    Outputs are clipped to [lower, upper] (public) and normalised as (y − centre)/scale. Replace-one: one output is
    replaced, d = (upper − lower)/scale. Add/remove is refused: the inputs X are public, so a neighbour with one
    record more or less would change the public design; the guarantee is stated for replace-one only.

    Raises:
        InvalidParameter: add/remove neighbours, an empty interval, a non-positive scale.
    """
    lower, upper = check_finite("clip_lower", lower), check_finite("clip_upper", upper)
    check_finite("centre", centre)
    scale = check_positive("scale", scale)
    if not upper > lower:
        raise InvalidParameter(f"the clipping interval must have clip_lower < clip_upper, got [{lower}, {upper}]")
    if Neighbouring(neighbouring) is not Neighbouring.REPLACE_ONE:
        raise InvalidParameter("dp-gp protects the outputs under replace-one neighbours only (the inputs X are "
                               "public); open the session with neighbouring='replace_one' (dpaudit run "
                               "--neighbouring replace_one)")
    return (upper - lower) / scale


# --- kernel and the cloaking matrix ----------------------------------------------------------------------------------


def eq_kernel(A: np.ndarray, B: np.ndarray, lengthscale: float | Sequence[float], variance: float) -> np.ndarray:
    """The EQ (squared-exponential) kernel v·exp(−½ Σ_d (a_d − b_d)²/ℓ_d²) between the rows of A and B, float64."""
    variance = check_positive("variance", variance)
    ell = as_lengthscale(lengthscale, A.shape[1])
    a, b = A / ell, B / ell
    sq = np.sum(a * a, axis=1)[:, None] + np.sum(b * b, axis=1)[None, :] - 2.0 * a @ b.T
    return variance * np.exp(-0.5 * np.maximum(sq, 0.0))


def _cholesky(matrix: np.ndarray, what: str) -> tuple[np.ndarray, bool]:
    try:
        return cho_factor(matrix, lower=True, check_finite=True)
    except np.linalg.LinAlgError:
        raise InvalidParameter(f"{what} is not numerically positive definite (raise the noise, jitter or floor)") \
            from None


def condition_number(matrix: np.ndarray) -> float:
    """κ₂ of a symmetric positive definite matrix, from its extreme eigenvalues (inf when not PD)."""
    eig = eigvalsh(matrix)
    return math.inf if eig[0] <= 0 else float(eig[-1] / eig[0])


def rounding_margin(*terms: tuple[int, float]) -> float:
    """Relative upward allowance for the rounding error of Cholesky-based quadratic forms.

    For each (size N, condition number κ) of a factorised matrix, a backward-stable Cholesky solve gives a quadratic
    form with relative error at most about c·N·u·κ (Higham 2002, Thm. 10.3 and Sec. 10.1); 8·(N + 1)·u·κ is added per
    matrix (a factor of 2 over the first-order constant, as the solved vector enters the form twice), plus 64u for
    the final products.

    Raises:
        InvalidParameter: the margin exceeds :data:`MAX_MARGIN` (too ill-conditioned to certify).
    """
    margin = 64.0 * UNIT_ROUNDOFF + sum(8.0 * (size + 1) * UNIT_ROUNDOFF * kappa for size, kappa in terms)
    if not margin <= MAX_MARGIN:
        raise InvalidParameter(f"the matrices are too ill-conditioned to certify a sensitivity (rounding margin "
                               f"{margin:.3g} > {MAX_MARGIN}); raise the noise variance, the jitter or the floor")
    return margin


def train_covariance(X: np.ndarray, lengthscale: float | Sequence[float], variance: float,
                     noise: float) -> np.ndarray:
    """K = K_f + σ_n²I, the paper's K (Sec. 2: "we replace K' + σ_n²I with K")."""
    noise = check_positive("noise", noise)
    return eq_kernel(X, X, lengthscale, variance) + noise * np.eye(len(X))


def cloaking_matrix(X: np.ndarray, X_star: np.ndarray, lengthscale: float | Sequence[float], variance: float,
                    noise: float) -> tuple[np.ndarray, float]:
    """C = K_*f K⁻¹ (P×n; eq. (8)): column i is how the posterior mean at X* moves per unit of output i.

    Returns:
        (C, κ(K)).
    """
    if X.shape[1] != X_star.shape[1]:
        raise InvalidParameter(f"X has {X.shape[1]} input dimensions but X_star has {X_star.shape[1]}")
    K = train_covariance(X, lengthscale, variance, noise)
    factor = _cholesky(K, "K = K_f + noise·I")
    C = cho_solve(factor, eq_kernel(X, X_star, lengthscale, variance)).T  # K symmetric: (K⁻¹K_f*)ᵀ = K_*f K⁻¹
    return C, condition_number(K)


def cloaking_covariance(C: np.ndarray, lambdas: Sequence[float], floor: float) -> np.ndarray:
    """M = Σ_i λ_i c_i c_iᵀ + τI (the paper's Sec. 3 covariance plus an isotropic floor τ outside span(C)).

    Raises:
        InvalidParameter: a negative or non-finite λ, λ of the wrong length, a floor that is not > 0.
    """
    lam = np.array(lambdas, dtype=np.float64)
    if lam.shape != (C.shape[1],) or not np.all(np.isfinite(lam)) or np.any(lam < 0):
        raise InvalidParameter(f"lambdas must be {C.shape[1]} finite numbers >= 0")
    floor = check_positive("floor", floor)
    return (C * lam) @ C.T + floor * np.eye(C.shape[0])


def mahalanobis_norms_squared(C: np.ndarray, M: np.ndarray) -> tuple[np.ndarray, float]:
    """c_iᵀ M⁻¹ c_i for every column of C, by a Cholesky factor of M, and κ(M).

    Raises:
        InvalidParameter: M is not numerically positive definite.
    """
    factor = _cholesky(M, "the noise covariance M")
    half = solve_triangular(factor[0], C, lower=True, check_finite=False)
    return np.sum(half * half, axis=0), condition_number(M)


def rkhs_norms_squared(X: np.ndarray, lengthscale: float | Sequence[float], variance: float,
                       noise: float) -> tuple[np.ndarray, float]:
    """e_nᵀ K⁻¹ K_f K⁻¹ e_n for every training point n (the squared RKHS norm of the mean's change per unit of
    output n), and κ(K)."""
    K = train_covariance(X, lengthscale, variance, noise)
    factor = _cholesky(K, "K = K_f + noise·I")
    A = cho_solve(factor, np.eye(len(X)))
    K_f = K - check_positive("noise", noise) * np.eye(len(X))
    return np.sum(A * (K_f @ A), axis=0), condition_number(K)


# --- the paper's constants (reproduction only; never certified) -----------------------------------------------------


def paper_b_bound(X: np.ndarray, lengthscale: float | Sequence[float], variance: float, noise: float) -> float:
    """The paper's b(K⁻¹) (Sec. 2 and Alg. 1 l. 13-14): max(‖[K⁻¹]⁺‖_∞, ‖[−K⁻¹]⁺‖_∞), the larger of the largest
    row sums of the positive and of the negated negative entries of K⁻¹. Reproduction only: it bounds the RKHS
    change only when k(x, x) ≤ 1 (docs/plugins/dp-gp.md, "The paper's b(K⁻¹)")."""
    K = train_covariance(X, lengthscale, variance, noise)
    A = cho_solve(_cholesky(K, "K = K_f + noise·I"), np.eye(len(X)))
    return float(max(np.max(np.sum(np.maximum(A, 0.0), axis=1)), np.max(np.sum(np.maximum(-A, 0.0), axis=1))))


def paper_c(delta: float) -> float:
    """The paper's c(δ) = sqrt(2 ln(2/δ)) (eq. (2)), the classical Gaussian constant, proven for ε ≤ 1 only.
    Reproduction only: dpaudit calibrates every release with the exact δ(ε) of the session's Gaussian."""
    delta = check_positive("delta", delta)
    if delta >= 1:
        raise InvalidParameter(f"delta must be in (0, 1), got {delta}")
    return math.sqrt(2.0 * math.log(2.0 / delta))


# --- the registered formulas -----------------------------------------------------------------------------------------


def _kernel_inputs(inputs: Mapping[str, Any]) -> tuple[np.ndarray, Any, float, float]:
    X = as_inputs(inputs["X"], "X")
    return X, inputs["lengthscale"], check_positive("variance", inputs["variance"]), \
        check_positive("noise", inputs["noise"])


def _bound(inputs: Mapping[str, Any], neighbouring: Neighbouring) -> float:
    return output_bound(inputs["clip_lower"], inputs["clip_upper"], inputs["scale"], inputs["centre"], neighbouring)


def cloaking_sensitivity(inputs: Mapping[str, Any], neighbouring: Neighbouring) -> float:
    """Δ = d·max_i sqrt(c_iᵀ M⁻¹ c_i)·(1 + margin) for M = Σλ_i c_i c_iᵀ + τI (module docstring).

    Inputs: X, X_star, lengthscale, variance, noise (kernel, normalised units), clip_lower, clip_upper, centre,
    scale (the public output rule), lambdas (n values ≥ 0), floor (τ > 0).
    """
    d = _bound(inputs, neighbouring)
    X, ell, variance, noise = _kernel_inputs(inputs)
    C, kappa_K = cloaking_matrix(X, as_inputs(inputs["X_star"], "X_star"), ell, variance, noise)
    quad, kappa_M = mahalanobis_norms_squared(C, cloaking_covariance(C, inputs["lambdas"], inputs["floor"]))
    margin = rounding_margin((len(X), kappa_K), (len(X), kappa_K), (C.shape[0], kappa_M))
    return d * math.sqrt(max(float(np.max(quad)), 0.0)) * (1.0 + margin)


def standard_sensitivity(inputs: Mapping[str, Any], neighbouring: Neighbouring) -> float:
    """Δ = d·max_n sqrt(e_nᵀ K⁻¹ K_f K⁻¹ e_n)·(1 + margin), valid for any test points and jitter (module docstring).

    Inputs: X, lengthscale, variance, noise, clip_lower, clip_upper, centre, scale; and, recorded so that an auditor
    can rebuild M = K_** + jI (Δ does not depend on them, but they must be well formed): X_star, jitter (j > 0).
    Charges recorded before X_star and jitter were added lack them and still verify.
    """
    d = _bound(inputs, neighbouring)
    X, ell, variance, noise = _kernel_inputs(inputs)
    recorded = {"X_star", "jitter"} & set(inputs)
    if len(recorded) == 1:
        raise InvalidParameter("the standard dp-gp charge records X_star and jitter together")
    if recorded:
        X_star = as_inputs(inputs["X_star"], "X_star")
        if X_star.shape[1] != X.shape[1]:
            raise InvalidParameter(f"X has {X.shape[1]} input dimensions but X_star has {X_star.shape[1]}")
        check_positive("jitter", inputs["jitter"])
    quad, kappa_K = rkhs_norms_squared(X, ell, variance, noise)
    margin = rounding_margin((len(X), kappa_K), (len(X), kappa_K))
    return d * math.sqrt(max(float(np.max(quad)), 0.0)) * (1.0 + margin)


CLOAKING = register_formula(Formula(
    CLOAKING_FORMULA, "L2 sensitivity of the whitened GP posterior mean L⁻¹f* at public test points, LLᵀ = M = "
    "Σλ_i c_i c_iᵀ + τI (cloaking), one output replaced within a public clipping interval",
    SOURCE_CLOAKING, Norm.L2, cloaking_sensitivity))
STANDARD = register_formula(Formula(
    STANDARD_FORMULA, "RKHS-norm sensitivity of the GP posterior mean (bounds the whitened change L⁻¹Δf* for "
    "LLᵀ = K_** + jI at any test points), one output replaced within a public clipping interval",
    SOURCE_STANDARD, Norm.L2, standard_sensitivity))


# --- DP hyperparameter selection (selection.py) and the binning baselines (binning.py) -----------------------------

CV_SSE_FORMULA = "dp_gp_cv_truncated_sse"
BIN_SUMS_FORMULA = "dp_gp_bin_sums"
BIN_SUMS_L2_FORMULA = "dp_gp_bin_sums_l2"
SOURCE_CV_SSE = ("Smith et al. 2018, supplement 'Hyperparameter selection' (exponential mechanism on a K-fold "
                 "cross-validation SSE); sensitivity re-derived for squared errors truncated at a public bound b²: "
                 "Δ = max_θ max_j [min(b², 2bd) + Σ_{k: j trains} Σ_{t in fold k} min(b², 2bd|C_k[t, j]|)] "
                 "(docs/plugins/dp-gp.md, 'DP hyperparameter selection')")
SOURCE_BIN_SUMS = ("Smith et al. 2018, Sec. 4 (binning baseline; Dwork & Roth 2014, Sec. 3.4): bins are fixed by the "
                   "public inputs, so replacing one output moves one bin sum by at most d")


def cv_folds(n: int, folds: int, salt: str) -> np.ndarray:
    """The public fold of each of n records: records ordered by SHA-256(``f"{salt}:{i}"``), the r-th in that order
    in fold r mod K (balanced, and a function of n, K and the salt only, never of the outputs).

    Raises:
        InvalidParameter: fewer than 2 folds, or fewer records than twice the folds (a fold must train and test).
    """
    n, folds = check_count("n", n), check_count("folds", folds, minimum=2)
    if n < 2 * folds:
        raise InvalidParameter(f"{folds}-fold cross-validation needs at least {2 * folds} records, got {n}")
    keys = [hashlib.sha256(f"{salt}:{i}".encode()).digest() for i in range(n)]
    fold = np.empty(n, dtype=np.int64)
    fold[sorted(range(n), key=keys.__getitem__)] = np.arange(n) % folds
    return fold


def cv_candidates(candidates: Any) -> list[tuple[Any, float]]:
    """The grid as (lengthscale, noise variance) pairs; a lengthscale is a number or one number per dimension.

    Raises:
        InvalidParameter: an empty grid or a malformed pair.
    """
    if not isinstance(candidates, Sequence) or isinstance(candidates, str) or not candidates:
        raise InvalidParameter("candidates must be a non-empty list of [lengthscale, noise variance] pairs")
    pairs = []
    for pair in candidates:
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
            raise InvalidParameter(f"a candidate is a [lengthscale, noise variance] pair, got {pair!r}")
        pairs.append((pair[0], check_positive("noise variance", pair[1])))
    return pairs


def fold_smoother(X: np.ndarray, fold: np.ndarray, k: int, lengthscale: Any, variance: float,
                  noise: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(C_k, train rows, test rows, κ(K_k)): C_k = K_{test,train}(K_train + σ_n²I)⁻¹ maps the training outputs of
    fold k to its predictions at its test inputs (zero prior mean in normalised units)."""
    train, test = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
    C, kappa = cloaking_matrix(X[train], X[test], lengthscale, variance, noise)
    return C, train, test, kappa


def cv_sse_sensitivities(X: np.ndarray, fold: np.ndarray, candidates: Any, variance: float, d: float,
                         error_bound: float) -> np.ndarray:
    """Δ(θ) for every candidate θ: the most the truncated SSE Σ_k Σ_{t in fold k} min((ŷ_t − y_t)², b²) can move
    when one output moves by at most d (derivation in docs/plugins/dp-gp.md, 'DP hyperparameter selection').

    g(e) = min(e², b²) is 2b-Lipschitz and takes values in [0, b²]. Output j is a test point of one fold, where only
    its own error moves, by at most d: at most min(b², 2bd). In every other fold it trains, and moves the prediction
    at test point t by d·|C_k[t, j]|: at most Σ_t min(b², 2bd·|C_k[t, j]|). Δ(θ) = max_j of the sum over folds. Each
    |C_k[t, j]| is raised by the backward-error allowance margin·‖C_k[t, :]‖₂ (:func:`rounding_margin`).
    """
    b = check_positive("error_bound", error_bound)
    square, own = b * b, min(b * b, 2.0 * b * d)
    out = []
    for lengthscale, noise in cv_candidates(candidates):
        total = np.zeros(len(X))
        for k in range(int(fold.max()) + 1):
            C, train, test, kappa = fold_smoother(X, fold, k, lengthscale, variance, noise)
            slack = rounding_margin((len(train), kappa)) * np.linalg.norm(C, axis=1, keepdims=True)
            total[train] += np.sum(np.minimum(square, 2.0 * b * d * (np.abs(C) + slack)), axis=0)
            total[test] += own
        out.append(float(np.max(total)) * (1.0 + 64.0 * UNIT_ROUNDOFF))
    return np.array(out)


def cv_sse_sensitivity(inputs: Mapping[str, Any], neighbouring: Neighbouring) -> float:
    """Δ = max_θ Δ(θ) of the truncated cross-validation SSE (:func:`cv_sse_sensitivities`).

    Inputs: X, candidates ([lengthscale, noise variance] pairs), variance (kernel, normalised units), folds,
    fold_salt, error_bound (b, normalised units), clip_lower, clip_upper, centre, scale (the public output rule).
    """
    d = _bound(inputs, neighbouring)
    X = as_inputs(inputs["X"], "X")
    fold = cv_folds(len(X), inputs["folds"], str(inputs["fold_salt"]))
    return float(np.max(cv_sse_sensitivities(X, fold, inputs["candidates"], check_positive(
        "variance", inputs["variance"]), d, inputs["error_bound"])))


def bin_sums_sensitivity(inputs: Mapping[str, Any], neighbouring: Neighbouring) -> float:
    """d: one replaced output moves one bin sum (of clipped, normalised outputs) by at most d; every other bin is
    unchanged (its members are fixed by the public inputs), so d is the L1 and the L2 sensitivity of the vector of
    bin sums.

    Inputs: clip_lower, clip_upper, centre, scale (the public output rule).
    """
    return _bound(inputs, neighbouring)


CV_SSE = register_formula(Formula(
    CV_SSE_FORMULA, "sensitivity of a K-fold cross-validation SSE of GP predictions, each squared error truncated "
    "at a public bound, over a public grid of hyperparameters; one output replaced within a public clipping interval",
    SOURCE_CV_SSE, Norm.ABS, cv_sse_sensitivity))
BIN_SUMS = register_formula(Formula(
    BIN_SUMS_FORMULA, "L1 sensitivity of the sums of clipped outputs over bins of the public inputs, one output "
    "replaced", SOURCE_BIN_SUMS, Norm.L1, bin_sums_sensitivity))
BIN_SUMS_L2 = register_formula(Formula(
    BIN_SUMS_L2_FORMULA, "L2 sensitivity of the sums of clipped outputs over bins of the public inputs, one output "
    "replaced", SOURCE_BIN_SUMS, Norm.L2, bin_sums_sensitivity))
