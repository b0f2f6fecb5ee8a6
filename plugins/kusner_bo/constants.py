"""The constants of Kusner, Gardner, Garnett & Weinberger (ICML 2015), "Differentially Private Bayesian Optimization".

Pure functions of public inputs. Where the arXiv version (seed 000) and the ICML proceedings version (seed 001)
differ, the proceedings version is used (docs/constants.md, "Kusner et al. (DP-BO)"). Notation: |Λ| is the size of
the finite hyperparameter set, T the number of BO steps, σ² the observation-noise variance of the GP, k1 = k1(V, V')
the assumed multi-task covariance between neighbouring validation sets (Assumption 1).
"""

from __future__ import annotations

import math

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_delta, check_epsilon, check_nonnegative, check_positive

#: the greedy (1 − 1/e) guarantee for monotone submodular maximisation (Nemhauser, Wolsey & Fisher 1978)
GREEDY_FACTOR = 1.0 - 1.0 / math.e


def _delta(delta: float) -> float:
    return check_delta(delta, allow_zero=False)


def check_k1(k1: float) -> float:
    k1 = check_nonnegative("k1", k1)
    if k1 > 1.0:
        raise InvalidParameter(f"k1(V, V') is a correlation of a normalised kernel, in [0, 1]; got {k1}")
    return k1


def beta_t(n_candidates: int, t: int, delta: float) -> float:
    """GP-UCB exploration weight β_t = 2 log(|Λ| t² π² / (3δ)).

    Kusner et al. 2015, Algorithm 1 line 3 (both versions); Srinivas et al. 2010, Theorem 1 for finite Λ.

    Args:
        n_candidates: |Λ| ≥ 1.
        t: the step, t ≥ 1 (Theorem 1 uses t = T + 1 for the exponential mechanism).
        delta: δ in (0, 1).
    """
    n = check_count("n_candidates", n_candidates)
    t = check_count("t", t)
    return 2.0 * math.log(n * t * t * math.pi**2 / (3.0 * _delta(delta)))


def c_noisy(k1: float, n_candidates: int, delta: float) -> float:
    """c = 2·sqrt((1 − k1) log(3|Λ|/δ)), the bound on |f_V(λ) − f_V'(λ)| of Algorithm 1 (noisy observations).

    Kusner et al. 2015 (proceedings), Algorithm 1 line 9; holds w.p. ≥ 1 − δ/3 under Assumption 1 (proof of Thm. 1).
    """
    n = check_count("n_candidates", n_candidates)
    return 2.0 * math.sqrt((1.0 - check_k1(k1)) * math.log(3.0 * n / _delta(delta)))


def c_noise_free(k1: float, n_candidates: int, delta: float) -> float:
    """c = 2·sqrt((1 − k1) log(2|Λ|/δ)), the same bound for Algorithm 2 (exact observations).

    Kusner et al. 2015 (proceedings), Algorithm 2: the δ is split in two there (no observation-noise event).
    """
    n = check_count("n_candidates", n_candidates)
    return 2.0 * math.sqrt((1.0 - check_k1(k1)) * math.log(2.0 * n / _delta(delta)))


def q_noise(sigma: float, delta: float, T: int) -> float:
    """q = σ·sqrt(8 log(3T/δ)), the bound on |α_s − α_t| for the noise terms of any two of the T observations.

    Kusner et al. 2015, proceedings version, Algorithm 1 line 10 and proof of Theorem 3 bound ONE observation's noise,
    |α̂| ≤ σ·sqrt(2 log(3/δ)) w.p. ≥ 1 − δ/3, and take q = 2·that. But the best observation v* = max_t v_t may be any
    of the T observations, on V and on V' a different one, so the bound must hold for all T at once: with
    P(|N(0, σ²)| > σx) ≤ exp(−x²/2) (Srinivas et al. 2010, Lemma 5.1) and a union bound over the T observations
    (coupled across V and V', which share the noise law), max_t |α_t| ≤ σ·sqrt(2 log(3T/δ)) w.p. ≥ 1 − δ/3, so
    q = 2·max_t |α_t| ≤ σ·sqrt(8 log(3T/δ)) (docs/constants.md, "Kusner et al. (DP-BO)"). T = 1 gives the paper's q.
    The arXiv version's σ·sqrt(4 log(3/δ)) standardises 2α̂/(σ√2), whose variance is 2, not 1, and is not used.

    Args:
        sigma: observation-noise standard deviation σ > 0.
        delta: δ in (0, 1).
        T: the number of noisy observations the best value is taken over, ≥ 1.
    """
    T = check_count("T", T)
    return check_positive("sigma", sigma) * math.sqrt(8.0 * math.log(3.0 * T / _delta(delta)))


def best_value_noisy_failure(delta: float) -> float:
    """5δ/3, the probability that Theorem 3's sensitivity bound for Algorithm 1's best value fails.

    The bound |v*_V − v*_V'| ≤ sqrt(C1 β_T γ_T / T) + c + q rests on four events (docs/constants.md):

    * GP-UCB's regret bound on V, and again on V' (both runs are needed, one per direction of the difference):
      with Kusner's β_t = 2 log(|Λ| t² π² / (3δ)), Srinivas et al. 2010, Theorem 1 (whose β_t has 6δ_S in place of
      3δ) holds with δ_S = δ/2 each;
    * c, |f_V − f_V'| ≤ c on all of Λ: δ/3 (:func:`c_noisy`);
    * q, every observation noise bounded: δ/3 (:func:`q_noise`, union over the T observations).

    The paper charges δ; the union bound gives δ/2 + δ/2 + δ/3 + δ/3 = 5δ/3.
    """
    return 5.0 * _delta(delta) / 3.0


def c1(sigma: float) -> float:
    """C1 = 8 / log(1 + σ⁻²) (Srinivas et al. 2010, Theorem 1; Kusner et al. 2015, Algorithm 1 line 11)."""
    s = check_positive("sigma", sigma)
    return 8.0 / math.log1p(s**-2)


def exponential_sensitivity(beta_next: float, c: float) -> float:
    """Δ = 2·sqrt(β_{T+1}) + c, the sensitivity of the posterior mean μ_T for the exponential mechanism.

    Kusner et al. 2015, Theorem 1 (Algorithm 1 line 12 draws λ̃ w.p. ∝ exp(ε μ_T(λ) / (2Δ))).
    """
    return 2.0 * math.sqrt(check_positive("beta_next", beta_next)) + check_nonnegative("c", c)


def best_value_laplace_scale(*, c1_value: float, beta_T: float, gamma_T: float, T: int, epsilon: float,
                             c: float, q: float) -> float:
    """Laplace scale sqrt(C1 β_T γ_T)/(ε√T) + c/ε + q/ε for the best observed value ṽ of Algorithm 1.

    Kusner et al. 2015, Theorem 3 (the sensitivity Ω/T + c + q with Ω = sqrt(C1 T β_T γ_T)) and Algorithm 1
    line 14; the scale is that sensitivity divided by ε.
    """
    T = check_count("T", T)
    eps = check_epsilon(epsilon)
    regret = math.sqrt(check_positive("c1_value", c1_value) * check_positive("beta_T", beta_T)
                       * check_nonnegative("gamma_T", gamma_T)) / math.sqrt(T)
    return (regret + check_nonnegative("c", c) + check_nonnegative("q", q)) / eps


def information_gain(kernel: np.ndarray, indices: list[int] | tuple[int, ...], sigma: float) -> float:
    """½ log det(I + σ⁻² K_A) for the points A = ``indices`` of a kernel matrix (Srinivas et al. 2010, Lemma 5.3)."""
    K = _kernel(kernel)
    s = check_positive("sigma", sigma)
    idx = list(indices)
    if not idx:
        return 0.0
    sub = K[np.ix_(idx, idx)]
    sign, logdet = np.linalg.slogdet(np.eye(len(idx)) + sub / s**2)
    if sign <= 0:
        raise InvalidParameter("I + σ⁻² K_A is not positive definite: the kernel matrix is not PSD")
    return 0.5 * float(logdet)


def greedy_information_gain(kernel: np.ndarray, T: int, sigma: float) -> tuple[float, tuple[int, ...]]:
    """Greedy maximisation of F(A) = ½ log det(I + σ⁻² K_A) over multisets |A| = T of points of a finite Λ.

    Each step adds the point with the largest posterior variance σ_{t−1}²(λ) (the marginal gain of F is
    ½ log(1 + σ⁻² σ_{t−1}²(λ)), Srinivas et al. 2010, Lemma 5.3); points may repeat, as in γ_T's definition.

    Args:
        kernel: |Λ| × |Λ| symmetric PSD kernel matrix (numpy array or CPU torch tensor).
        T: number of points, ≥ 1.
        sigma: observation-noise standard deviation σ > 0.

    Returns:
        (F(A_greedy), A_greedy as indices into Λ).
    """
    K = _kernel(kernel)
    T = check_count("T", T)
    s2 = check_positive("sigma", sigma) ** 2
    var = np.diag(K).copy()
    # posterior covariance by rank-one updates: Σ ← Σ − Σ[:, i] Σ[i, :] / (σ² + Σ[i, i])
    cov = K.copy()
    chosen: list[int] = []
    gain = 0.0
    for _ in range(T):
        i = int(np.argmax(var))
        v = max(float(cov[i, i]), 0.0)
        gain += 0.5 * math.log1p(v / s2)
        col = cov[:, i].copy()
        cov -= np.outer(col, col) / (s2 + v)
        var = np.diag(cov).copy()
        chosen.append(i)
    return gain, tuple(chosen)


def max_information_gain_bound(kernel: np.ndarray, T: int, sigma: float) -> float:
    """A computable upper bound on the maximum information gain γ_T on a finite Λ: greedy / (1 − 1/e).

    F(A) = ½ log det(I + σ⁻² K_A) is monotone submodular (Srinivas et al. 2010, Sec. 5.2; Krause & Guestrin 2005),
    so the greedy value is ≥ (1 − 1/e)·γ_T (Nemhauser, Wolsey & Fisher 1978) and γ_T ≤ greedy / (1 − 1/e).
    The greedy value is recomputed exactly from the chosen points (no accumulated rank-one rounding).
    """
    _, chosen = greedy_information_gain(kernel, T, sigma)
    return information_gain(kernel, chosen, sigma) / GREEDY_FACTOR


def _kernel(kernel: object) -> np.ndarray:
    if hasattr(kernel, "detach"):
        kernel = kernel.detach().cpu().numpy()  # a torch tensor
    K = np.asarray(kernel, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] == 0:
        raise InvalidParameter(f"kernel must be a non-empty square matrix, got shape {K.shape}")
    if not np.all(np.isfinite(K)) or not np.allclose(K, K.T, rtol=1e-10, atol=1e-12):
        raise InvalidParameter("kernel must be a finite symmetric matrix")
    return K
