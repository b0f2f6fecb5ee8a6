"""dp-gp speed: the cloaking solve and the sensitivity recomputation, as ratios to one Cholesky of K.

The !Kung-sized problem (n = 287 training inputs uniform on [0, 85.6] years, P = 200 test points on [0, 110], EQ
kernel ℓ = 25, v = 1, σ_n² = 0.3 in normalised units) and a larger one (n = 1000). For each: the reference (one
Cholesky factorisation of the n×n K, the floor of any exact GP computation), building C = K_*f K⁻¹, the cloaking
solve (Frank-Wolfe with away steps + exact feasibility; :func:`dpaudit_plugins.dp_gp.cloaking.solve_cloaking`), the
whole plan (solve + Δ), and ``dpaudit verify``'s recomputation of Δ. For comparison, the paper's Algorithm 2
(plain gradient descent on λ, learning rate 0.05, its stopping rule |Δλ| < 10⁻⁵) is run for at most 20 s, and its
constraint violation max_i c_iᵀM⁻¹c_i and log det M are printed next to ours (dp4gp takes 10-165 s there).

BLAS is pinned to one thread (set before numpy loads) so that timings on a shared machine are comparable; every
number is a median over repeats, and ratios are to the reference measured in the same run.
Run: ``.venv/bin/python benchmarks/bench_dp_gp.py``.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from scipy.linalg import cho_factor  # noqa: E402

from dpaudit.sensitivity import Neighbouring  # noqa: E402
from dpaudit_plugins.dp_gp.cloaking import solve_cloaking  # noqa: E402
from dpaudit_plugins.dp_gp.formulas import cloaking_matrix, cloaking_sensitivity, train_covariance  # noqa: E402
from dpaudit_plugins.dp_gp.release import GpModel, OutputRule, plan_cloaking  # noqa: E402

RULE = OutputRule(clip_lower=-50.0, clip_upper=50.0, centre=0.0, scale=27.6)
REPEATS = 5
PAPER_SECONDS = 20.0


def _median(fn, repeats: int = REPEATS) -> tuple[float, object]:
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def paper_gradient_descent(C: np.ndarray, seconds: float) -> tuple[np.ndarray, int, bool]:
    """Smith et al. 2018, Alg. 2 findLambdas: λ ~ U(0.1, 0.9), λ ← λ − 0.05·(1 − c_jᵀM⁺c_j), until |Δλ| ≤ 10⁻⁵."""
    rng = np.random.default_rng(0)
    lam = rng.uniform(0.1, 0.9, C.shape[1])
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        M_pinv = np.linalg.pinv((C * lam) @ C.T)
        step = -0.05 * (1.0 - np.einsum("ij,ij->j", C, M_pinv @ C))
        lam = lam + step
        steps += 1
        if np.max(np.abs(step)) <= 1e-5:
            return lam, steps, True
    return lam, steps, False


def _log_pdet(M: np.ndarray, rank: int) -> float:
    """log of the product of M's ``rank`` largest eigenvalues (the volume in span(C), floor excluded)."""
    return float(np.sum(np.log(np.clip(np.linalg.eigvalsh(M)[-rank:], 1e-300, None))))


def bench(n: int, P: int = 200) -> None:
    rng = np.random.default_rng(n)
    X = rng.uniform(0.0, 85.6, (n, 1))
    Xs = np.linspace(0.0, 110.0, P)[:, None]
    model = GpModel(X, 25.0, 1.0, 0.3)
    ref, _ = _median(lambda: cho_factor(train_covariance(X, 25.0, 1.0, 0.3), lower=True))
    t_c, (C, _) = _median(lambda: cloaking_matrix(X, Xs, 25.0, 1.0, 0.3))
    t_solve, design = _median(lambda: solve_cloaking(C))
    t_plan, plan = _median(lambda: plan_cloaking(model, RULE, Xs, Neighbouring.REPLACE_ONE))
    inputs = plan.sensitivity.input_map
    t_verify, _ = _median(lambda: cloaking_sensitivity(inputs, Neighbouring.REPLACE_ONE))
    print(f"n = {n}, P = {P}: reference (one Cholesky of K) {ref * 1e3:.2f} ms")
    for label, seconds in (("C = K_*f K^-1", t_c), ("cloaking solve", t_solve), ("plan (solve + Delta)", t_plan),
                           ("verify's recomputation of Delta", t_verify)):
        print(f"  {label:34s} {seconds:8.3f} s  x{seconds / ref:9.1f} vs reference")
    print(f"  solver: {design.solver.iterations} Frank-Wolfe steps, rank {design.rank}, converged "
          f"{design.solver.converged}, max_i c_i'M^-1 c_i = {design.max_constraint:.12f}, "
          f"log pdet M = {_log_pdet((C * design.lambdas) @ C.T, design.rank):.3f} (top {design.rank} eigenvalues)")
    if n <= 300:
        lam, steps, converged = paper_gradient_descent(C, PAPER_SECONDS)
        M = (C * lam) @ C.T
        quad = np.einsum("ij,ij->j", C, np.linalg.pinv(M) @ C)
        print(f"  paper's Alg. 2 (gradient descent, <= {PAPER_SECONDS:.0f} s): {steps} steps, converged {converged}, "
              f"max_i c_i'M^+ c_i = {np.max(quad):.4f} (must be <= 1), min lambda = {np.min(lam):.3g} (must be "
              f">= 0), log pdet M = {_log_pdet(M, design.rank):.3f}")


if __name__ == "__main__":
    bench(287)
    bench(1000)
