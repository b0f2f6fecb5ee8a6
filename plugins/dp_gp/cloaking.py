"""The cloaking covariance M = Σ λ_i c_i c_iᵀ + τI (Smith et al. 2018, Sec. 3 and supplement), by a convergent
solver, made exactly feasible.

The paper's problem, min log det M subject to c_iᵀ M⁻¹ c_i ≤ 1 with M = Σ λ_i c_i c_iᵀ (supplement, eq. (10)), is the
minimum-volume centred ellipsoid enclosing the columns c_i of C, whose dual is the D-optimal design problem
max_u log det V(u), V(u) = Σ u_i c_i c_iᵀ, u on the simplex (Titterington 1975; Khachiyan 1996). The columns rarely
span R^P (P test points, an EQ kernel: C has low numerical rank r), so the design is solved in span(C): c̃_i = U_rᵀc_i
with U_r the r leading left singular vectors of C (singular values ≥ ``rank_tolerance``·s_max), or equivalently on the
rows of V_rᵀ = S_r⁻¹U_rᵀC (the design problem is invariant under invertible linear maps). In R^r the optimum
satisfies max_i c̃_iᵀ V(u*)⁻¹ c̃_i = r (Kiefer-Wolfowitz), and M̃ = r·V(u*) is the optimal ellipsoid.

Solver: Frank-Wolfe with away steps and exact line search (Wolfe-Atwood; Todd & Yildirim 2007, "WA-TY", with their
closed-form step sizes and rank-one updates of V⁻¹ and of every g_i = c̃_iᵀV⁻¹c̃_i), stopped when
max_i g_i ≤ r(1 + tol) and min_{u_i>0} g_i ≥ r(1 − tol) (an (1+tol)-approximate MVEE: its log-volume is within
r·log(1 + tol)/2 of the optimum; Todd 2016, Thm. 3.2), or after ``max_iterations`` (the result is still feasible
after the exact step below, only less tight). For r = 1 (one test point, or one repeated) the optimum is taken
directly: all weight on the largest |c̃_i| (a towards step would be α = 1, and the update of V⁻¹ would divide by
1 − α = 0).

Exact feasibility: λ = r·u, M = C diag(λ) Cᵀ + τI with the isotropic floor τ = ``floor_ratio``·‖C diag(λ) Cᵀ‖₂ so that
no direction of R^P is unnoised; then s = max_i c_iᵀ M⁻¹ c_i is recomputed on the full M with a Cholesky factor
(:func:`~dpaudit_plugins.dp_gp.formulas.mahalanobis_norms_squared`), and λ and τ are multiplied by s (s > 1
restores feasibility; s < 1, where the floor already covers part of a constraint, tightens M). The
certified Δ is recomputed from λ and τ in any case (:func:`~dpaudit_plugins.dp_gp.formulas.cloaking_sensitivity`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_positive
from dpaudit_plugins.dp_gp.formulas import cloaking_covariance, mahalanobis_norms_squared

DEFAULT_TOLERANCE = 1e-3
DEFAULT_FLOOR_RATIO = 1e-6
DEFAULT_RANK_TOLERANCE = 1e-9
DEFAULT_MAX_ITERATIONS = 100_000
#: V⁻¹ and every g_i are recomputed from scratch this often, so rank-one updates cannot drift
_REFRESH_EVERY = 200


@dataclass(frozen=True)
class DesignResult:
    """A D-optimal design in R^r: the weights and how well they converged.

    Attributes:
        weights: u (n,), on the simplex.
        iterations: Frank-Wolfe steps taken.
        converged: whether both stopping conditions held within ``max_iterations``.
        max_ratio: max_i g_i / r at the returned u (1 at the optimum; ≤ 1 + tol when converged).
        min_support_ratio: min over the support of g_i / r (≥ 1 − tol when converged).
    """

    weights: np.ndarray
    iterations: int
    converged: bool
    max_ratio: float
    min_support_ratio: float


@dataclass(frozen=True)
class CloakingDesign:
    """The public cloaking covariance M = Σ λ_i c_i c_iᵀ + τI, feasible (max_i c_iᵀM⁻¹c_i ≤ 1 up to rounding).

    Attributes:
        lambdas: λ (n,), ≥ 0, already scaled by ``scaled_by``.
        floor: τ > 0, already scaled by ``scaled_by``.
        rank: r, the numerical rank of C the design was solved in.
        max_constraint: max_i c_iᵀ M⁻¹ c_i for the returned M (recomputed by Cholesky; ≤ 1 up to rounding).
        scaled_by: the factor s applied for exact feasibility.
        solver: the design solver's report.
    """

    lambdas: np.ndarray
    floor: float
    rank: int
    max_constraint: float
    scaled_by: float
    solver: DesignResult

    def covariance(self, C: np.ndarray) -> np.ndarray:
        """M for the cloaking matrix C the design was made for."""
        return cloaking_covariance(C, self.lambdas, self.floor)

    def summary(self) -> dict[str, float | int | bool]:
        """The public description of M recorded with a release (λ themselves go into the charge's inputs)."""
        return {"rank": self.rank, "floor": self.floor, "scaled_by": self.scaled_by,
                "max_constraint": self.max_constraint, "lambda_sum": float(np.sum(self.lambdas)),
                "support": int(np.count_nonzero(self.lambdas)), "iterations": self.solver.iterations,
                "converged": self.solver.converged, "max_ratio": self.solver.max_ratio}


def d_optimal_design(points: np.ndarray, *, tolerance: float = DEFAULT_TOLERANCE,
                     max_iterations: int = DEFAULT_MAX_ITERATIONS) -> DesignResult:
    """Frank-Wolfe with away steps for max_u log det Σ u_i p_i p_iᵀ over the simplex (Todd & Yildirim 2007).

    Args:
        points: (r, n) with rank r (the columns p_i span R^r).
        tolerance: the stopping tolerance tol of the module docstring.
        max_iterations: the most Frank-Wolfe steps taken.

    Raises:
        InvalidParameter: the points do not span R^r, or a bad tolerance.
    """
    tolerance = check_positive("tolerance", tolerance)
    max_iterations = check_count("max_iterations", max_iterations)
    r, n = points.shape
    if r == 1:  # exact: V(u) = Σu_i p_i², maximal at all weight on the largest |p_i| (a towards step would be α = 1)
        u = np.zeros(n)
        j = int(np.abs(points[0]).argmax())
        if points[0, j] == 0:
            raise InvalidParameter("the cloaking columns do not span the reduced space")
        u[j] = 1.0
        return DesignResult(weights=u, iterations=0, converged=True, max_ratio=1.0, min_support_ratio=1.0)
    u = np.full(n, 1.0 / n)

    def refresh() -> tuple[np.ndarray, np.ndarray]:
        V = (points * u) @ points.T
        try:
            V_inv = np.linalg.inv(V)
        except np.linalg.LinAlgError:
            raise InvalidParameter("the cloaking columns do not span the reduced space") from None
        V_inv = 0.5 * (V_inv + V_inv.T)
        return V_inv, np.einsum("ij,ij->j", points, V_inv @ points)

    V_inv, g = refresh()
    iterations = 0
    while True:
        j = int(g.argmax())
        k = int(np.where(u > 0, g, np.inf).argmin())
        up, down = g[j] / r - 1.0, 1.0 - g[k] / r
        if (up <= tolerance and down <= tolerance) or iterations >= max_iterations:
            break
        drop = False
        if up >= down:  # towards step on j: u ← (1 − α)u + α e_j, α* = (g_j − r)/(r(g_j − 1))
            index, gi = j, g[j]
            alpha = (gi - r) / (r * (gi - 1.0))
        else:  # away step from k: α < 0, bounded below by −u_k/(1 − u_k) (u_k → 0, the point leaves the support)
            index, gi = k, g[k]
            limit = -u[k] / (1.0 - u[k])
            alpha = limit if gi <= 1.0 else max((gi - r) / (r * (gi - 1.0)), limit)
            drop = alpha == limit
        u *= 1.0 - alpha
        u[index] += alpha
        if drop:  # a drop step: exactly zero, not a rounding residue that keeps the point in the support
            u[index] = 0.0
        iterations += 1
        if iterations % _REFRESH_EVERY == 0:
            np.maximum(u, 0.0, out=u)
            u /= u.sum()
            V_inv, g = refresh()
            continue
        # V' = (1−α)V + α p pᵀ ⇒ V'⁻¹ = (V⁻¹ − α h hᵀ/(1 − α + α g_p))/(1 − α), h = V⁻¹p (Sherman-Morrison)
        h = V_inv @ points[:, index]
        denominator = 1.0 - alpha + alpha * gi
        projections = points.T @ h
        V_inv -= (alpha / denominator) * np.outer(h, h)
        V_inv /= 1.0 - alpha
        g -= (alpha / denominator) * projections * projections
        g /= 1.0 - alpha
    np.maximum(u, 0.0, out=u)
    u /= u.sum()
    V_inv, g = refresh()
    support = u > 0
    max_ratio, min_ratio = float(np.max(g) / r), float(np.min(g[support]) / r)
    return DesignResult(weights=u, iterations=iterations,
                        converged=max_ratio - 1.0 <= tolerance and 1.0 - min_ratio <= tolerance,
                        max_ratio=max_ratio, min_support_ratio=min_ratio)


def solve_cloaking(C: np.ndarray, *, tolerance: float = DEFAULT_TOLERANCE, floor_ratio: float = DEFAULT_FLOOR_RATIO,
                   rank_tolerance: float = DEFAULT_RANK_TOLERANCE,
                   max_iterations: int = DEFAULT_MAX_ITERATIONS) -> CloakingDesign:
    """The cloaking covariance for the cloaking matrix C (P×n), made exactly feasible (module docstring).

    Args:
        C: K_*f K⁻¹ (:func:`~dpaudit_plugins.dp_gp.formulas.cloaking_matrix`).
        tolerance: the design solver's stopping tolerance.
        floor_ratio: τ / ‖Σλ_i c_i c_iᵀ‖₂, the isotropic floor (> 0).
        rank_tolerance: singular values of C below this fraction of the largest are left to the floor.
        max_iterations: the design solver's step limit.

    Raises:
        InvalidParameter: C is zero or not finite, or a bad parameter.
    """
    floor_ratio = check_positive("floor_ratio", floor_ratio)
    rank_tolerance = check_positive("rank_tolerance", rank_tolerance)
    C = np.asarray(C, dtype=np.float64)
    if C.ndim != 2 or not np.all(np.isfinite(C)):
        raise InvalidParameter("the cloaking matrix must be a finite 2-D array")
    _, s, Vt = np.linalg.svd(C, full_matrices=False)
    if s.size == 0 or s[0] <= 0:
        raise InvalidParameter("the cloaking matrix is zero: the test points do not depend on the outputs")
    r = int(np.count_nonzero(s >= rank_tolerance * s[0]))
    # U_rᵀC = S_r V_rᵀ; the design is invariant under the linear map S_r⁻¹, and V_rᵀ is perfectly conditioned
    design = d_optimal_design(Vt[:r], tolerance=tolerance, max_iterations=max_iterations)
    lambdas = r * design.weights
    floor = floor_ratio * float(np.linalg.norm((C * lambdas) @ C.T, 2))
    quad, _ = mahalanobis_norms_squared(C, cloaking_covariance(C, lambdas, floor))
    scale = float(np.max(quad))  # > 1: infeasible by rounding or non-convergence; < 1: the floor made it slack
    lambdas, floor = lambdas * scale, floor * scale
    quad, _ = mahalanobis_norms_squared(C, cloaking_covariance(C, lambdas, floor))
    return CloakingDesign(lambdas=lambdas, floor=floor, rank=r, max_constraint=float(np.max(quad)), scaled_by=scale,
                          solver=design)
