"""The GP-conditional sensitivities of Kusner et al. 2015, Algorithms 1 and 2, as registered formulas.

Each bound holds only **with probability ≥ 1 − δ over the GP prior of Assumption 1** (all validation-set
functions jointly GP(0, k1 ⊗ k2) with known k1, k2), so each formula also returns its failure probability δ, and the
accountants charge the release as (ε, δ) (:class:`~dpaudit.accounting.charges.ApproximateSpec`). ``dpaudit verify``
recomputes every value, γ_T included, from the recorded public inputs (docs/plugins/kusner-bo.md).

=============================== ============================================================ ==================
formula                          value                                                        source
=============================== ============================================================ ==================
kusner_alg1_posterior_mean       Δ = 2·sqrt(β_{T+1}) + c,  c = 2·sqrt((1−k1) log(3|Λ|/δ))      Theorem 1
kusner_alg1_best_value           sqrt(C1 β_T γ_T / T) + c + q,  q = σ·sqrt(8 log(3T/δ))       Theorem 3
kusner_alg2_best_value           A·exp(−Tτ/(log T)^{d/4}) + c,  c = 2·sqrt((1−k1) log(2|Λ|/δ))  Theorem 5
=============================== ============================================================ ==================

Failure probabilities (docs/constants.md): Theorem 1's bound fails w.p. ≤ δ/3 + 6δ/(π²(T+1)²) ≤ δ (c, and
Srinivas et al.'s Lemma 5.1 at the single step T + 1 on V and on V'), charged as δ; Theorem 5's w.p. ≤ δ/2 (c only;
the regret bound is the user's assumption), charged as δ; Theorem 3's w.p. ≤ 5δ/3 (the regret bound on V and on V',
δ/2 each with Kusner's β_t, plus c and q, δ/3 each), charged as 5δ/3, and its q covers all T observations, not one.

The exponential-mechanism bound is used for Algorithm 2's λ̃ too: the paper says Theorems 1-2 still hold with exact
observations (Sec. 4), and Theorem 1's c (log(3|Λ|/δ)) is the larger of the two.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dpaudit.sensitivity import Formula, Neighbouring, Norm, register_formula
from dpaudit.validation import check_count, check_delta, check_nonnegative, check_positive
from dpaudit_plugins.kusner_bo.constants import (
    best_value_noisy_failure,
    beta_t,
    c1,
    c_noise_free,
    c_noisy,
    exponential_sensitivity,
    max_information_gain_bound,
    q_noise,
)
from dpaudit_plugins.kusner_bo.gp import KernelSpec, candidate_array, kernel_matrix

POSTERIOR_MEAN_ID = "kusner_alg1_posterior_mean"
BEST_VALUE_NOISY_ID = "kusner_alg1_best_value"
BEST_VALUE_NOISE_FREE_ID = "kusner_alg2_best_value"
_PAPER = "Kusner, Gardner, Garnett & Weinberger 2015 (ICML proceedings)"


def posterior_mean_sensitivity(*, n_candidates: int, T: int, delta: float, k1: float) -> float:
    """Δ = 2·sqrt(β_{T+1}) + c for the exponential mechanism on μ_T (Theorem 1; Algorithm 1 line 12)."""
    return exponential_sensitivity(beta_t(n_candidates, T + 1, delta), c_noisy(k1, n_candidates, delta))


def information_gain_bound(*, kernel: str, lengthscale: float, candidates: object, T: int, sigma: float) -> float:
    """γ_T ≤ greedy/(1 − 1/e) for k2 on the public Λ (``constants.max_information_gain_bound``)."""
    K = kernel_matrix(KernelSpec(kernel, lengthscale), candidate_array(candidates))
    return max_information_gain_bound(K, T, sigma)


def best_value_noisy_sensitivity(*, kernel: str, lengthscale: float, candidates: object, T: int, delta: float,
                                 k1: float, sigma: float) -> float:
    """sqrt(C1 β_T γ_T / T) + c + q, the sensitivity of v* = max_t v_t (Theorem 3; the Laplace scale of Algorithm 1
    line 14 is this divided by ε), with q over all T observations
    (:func:`~dpaudit_plugins.kusner_bo.constants.q_noise`)."""
    n = len(candidate_array(candidates))
    regret = math.sqrt(c1(sigma) * beta_t(n, T, delta) * information_gain_bound(
        kernel=kernel, lengthscale=lengthscale, candidates=candidates, T=T, sigma=sigma) / T)
    return regret + c_noisy(k1, n, delta) + q_noise(sigma, delta, T)


def best_value_noise_free_sensitivity(*, n_candidates: int, T: int, delta: float, k1: float, A: float, tau: float,
                                      dimension: int) -> float:
    """A·exp(−Tτ/(log T)^{d/4}) + c, the sensitivity of max_{2≤t≤T} f(λ_t) (Theorem 5, proceedings version; the
    arXiv text's T-free exponent is not used).

    Raises:
        InvalidParameter: T < 2 (log T = 0), or bad constants.
    """
    return (regret_bound(A=A, tau=tau, T=T, dimension=dimension)
            + c_noise_free(k1, check_count("n_candidates", n_candidates), delta))


def regret_bound(*, A: float, tau: float, T: int, dimension: int) -> float:
    """Ω = A·exp(−Tτ/(log T)^{d/4}), the simple-regret bound of de Freitas et al. 2012 (Thm. 2) in the form of
    Kusner et al. 2015 (proceedings), Algorithm 2; T ≥ 2."""
    T = check_count("T", T, minimum=2)
    d = check_count("dimension", dimension)
    return check_nonnegative("A", A) * math.exp(-T * check_positive("tau", tau) / math.log(T) ** (d / 4.0))


def _failure(inputs: Mapping[str, Any]) -> float:
    """Theorems 1 and 5 fail with probability at most δ (the union over the events of their proofs)."""
    return check_delta(inputs["delta"], allow_zero=False)


def _failure_best_noisy(inputs: Mapping[str, Any]) -> float:
    """Theorem 3 fails with probability at most 5δ/3
    (:func:`~dpaudit_plugins.kusner_bo.constants.best_value_noisy_failure`)."""
    return best_value_noisy_failure(inputs["delta"])


# The bounds do not depend on the relation: Assumption 1 is stated through k1(V, V') for neighbouring V, V', and the
# certificate states the assumed k1 for the session's relation.
def _posterior_mean(inputs: Mapping[str, Any], nb: Neighbouring) -> float:
    return posterior_mean_sensitivity(**{k: inputs[k] for k in ("n_candidates", "T", "delta", "k1")})


def _best_noisy(inputs: Mapping[str, Any], nb: Neighbouring) -> float:
    return best_value_noisy_sensitivity(**{k: inputs[k] for k in ("kernel", "lengthscale", "candidates", "T",
                                                                  "delta", "k1", "sigma")})


def _best_noise_free(inputs: Mapping[str, Any], nb: Neighbouring) -> float:
    return best_value_noise_free_sensitivity(**{k: inputs[k] for k in ("n_candidates", "T", "delta", "k1", "A",
                                                                       "tau", "dimension")})


POSTERIOR_MEAN = register_formula(Formula(
    POSTERIOR_MEAN_ID, "GP-UCB posterior mean μ_T on a finite Λ, for the exponential mechanism (conditional on "
    "Assumption 1, holds w.p. 1 − δ)", f"{_PAPER}, Theorem 1", Norm.ABS, _posterior_mean, _failure))
BEST_VALUE_NOISY = register_formula(Formula(
    BEST_VALUE_NOISY_ID, "best noisy observation of GP-UCB (conditional on Assumption 1, holds w.p. 1 − 5δ/3)",
    f"{_PAPER}, Theorem 3 with γ_T ≤ greedy/(1 − 1/e), q = σ·sqrt(8 log(3T/δ)) (union over the T observations) and "
    "failure probability 5δ/3", Norm.ABS, _best_noisy, _failure_best_noisy))
BEST_VALUE_NOISE_FREE = register_formula(Formula(
    BEST_VALUE_NOISE_FREE_ID, "best exact observation max_{2≤t≤T} f(λ_t) (conditional on Assumption 1 and the "
    "regret bound of de Freitas et al. 2012 with the user's A, τ; holds w.p. 1 − δ)",
    f"{_PAPER}, Theorem 5 and Algorithm 2", Norm.ABS, _best_noise_free, _failure))


def public_constants(model: object, observations: object, candidates: object, T: int, delta: float) -> dict[str, float]:
    """Every constant of Algorithm 1 or 2 as numbers, for the ledger and the report (public inputs only).

    Args:
        model: a :class:`~dpaudit_plugins.kusner_bo.gp_algorithms.GpModel`.
        observations: its ``NoisyObservations`` (Algorithm 1) or ``ExactObservations`` (Algorithm 2).
        candidates: Λ in kernel coordinates.
        T: GP-UCB steps.
        delta: each release's δ.
    """
    X = candidate_array(candidates)
    n, d = X.shape
    k1 = model.k1  # type: ignore[attr-defined]
    out = {"n_candidates": n, "dimension": d, "beta_T": beta_t(n, T, delta), "beta_T_plus_1": beta_t(n, T + 1, delta),
           "c_algorithm1": c_noisy(k1, n, delta),
           "exponential_sensitivity": posterior_mean_sensitivity(n_candidates=n, T=T, delta=delta, k1=k1)}
    sigma = getattr(observations, "sigma", None)
    if sigma is not None:
        kernel = model.kernel  # type: ignore[attr-defined]
        out.update(q=q_noise(sigma, delta, T), C1=c1(sigma), gamma_T_bound=information_gain_bound(
            kernel=kernel.name, lengthscale=kernel.lengthscale, candidates=X, T=T, sigma=sigma),
            value_sensitivity=best_value_noisy_sensitivity(kernel=kernel.name, lengthscale=kernel.lengthscale,
                                                           candidates=X, T=T, delta=delta, k1=k1, sigma=sigma))
    else:
        A, tau = observations.A, observations.tau  # type: ignore[attr-defined]
        out.update(c_algorithm2=c_noise_free(k1, n, delta), regret_bound=regret_bound(A=A, tau=tau, T=T, dimension=d),
                   value_sensitivity=best_value_noise_free_sensitivity(n_candidates=n, T=T, delta=delta, k1=k1, A=A,
                                                                       tau=tau, dimension=d))
    return out
