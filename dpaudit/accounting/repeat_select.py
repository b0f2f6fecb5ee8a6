"""Privacy of repeat-and-select: run a base mechanism K times (K random, data-independent), release the best.

Papernot & Steinke, "Hyperparameter Tuning with Renyi Differential Privacy", ICLR 2022 (arXiv 2110.03620 v2):

* **Theorem 2** (truncated negative binomial, η ≥ 0 here, including the geometric law η = 1 and the logarithmic
  law η = 0). If the base satisfies (λ, ε)-RDP and (λ̂, ε̂)-RDP, the best of K ~ D_{η,γ} runs satisfies (λ, ε′)-RDP
  with

      ε′ = ε + (1 + η)(1 − 1/λ̂) ε̂ + (1 + η) ln(1/γ)/λ̂ + ln(E[K])/(λ − 1).

  Every (λ, λ̂) pair of orders gives a valid bound, so at each order λ of the grid the bound is minimised over λ̂
  on the same grid (the λ̂ term is the same for every λ).

* **Theorem 6** (Poisson, mean μ). If the base satisfies (λ, ε)-RDP and (ε̂, δ̂)-DP with e^{ε̂} ≤ 1 + 1/(λ − 1),
  the best of K ~ Poisson(μ) runs (K = 0 releases nothing) satisfies (λ, ε′)-RDP with

      ε′ = ε + μ δ̂ + ln(μ)/(λ − 1).

  ε̂ is taken one float step below ln(1 + 1/(λ − 1)) so that the condition holds despite rounding, and δ̂ is the
  base's δ at ε̂ from its RDP curve (:func:`rdp_delta`).

Both bounds are then made monotone in the order, ε′(λ) ← min_{λ' ≥ λ} ε′(λ'), which is sound because Rényi
divergence is non-decreasing in its order (van Erven & Harremoës 2014, Thm. 3). dp_accounting's
``_compute_rdp_repeat_and_select`` implements the same statements (the verifier's independent recheck).

**Liu & Talwar 2019** ("Private Selection from Private Candidates", STOC), Theorem 3.4: random stopping with
probability γ after each run (K geometric) of an ε-DP base, releasing the best, is 3ε-DP, for every γ.
"""

from __future__ import annotations

import math

import numpy as np

from dpaudit.errors import AccountingError


def truncated_negative_binomial_mean(eta: float, gamma: float) -> float:
    """E[K] for K ~ D_{η,γ} (Papernot & Steinke 2022, Sec. 2): 1/γ for η = 1, (1/γ − 1)/ln(1/γ) for η = 0, else
    η(1 − γ)/(γ(1 − γ^η))."""
    if eta == 1.0:
        return 1.0 / gamma
    log_gamma = math.log(gamma)
    if eta == 0.0:
        return (1.0 / gamma - 1.0) / -log_gamma
    return eta * (1.0 - gamma) / (gamma * -math.expm1(eta * log_gamma))


def monotone_in_order(orders: np.ndarray, curve: np.ndarray) -> np.ndarray:
    """ε(λ) ← min over orders λ' ≥ λ of ε(λ') (Rényi divergence is non-decreasing in the order)."""
    order = np.argsort(orders)
    out = np.empty_like(curve)
    out[order] = np.minimum.accumulate(curve[order][::-1])[::-1]
    return out


def truncated_negative_binomial_rdp(orders: np.ndarray, base: np.ndarray, eta: float, gamma: float) -> np.ndarray:
    """Papernot & Steinke 2022, Theorem 2 at every order of ``orders`` (λ̂ minimised over the same orders).

    Args:
        orders: RDP orders λ > 1.
        base: the base mechanism's RDP at ``orders`` (may hold +inf).
        eta: η ≥ 0.
        gamma: γ ∈ (0, 1).
    """
    with np.errstate(invalid="ignore"):
        hat_terms = (1.0 - 1.0 / orders) * base + math.log(1.0 / gamma) / orders
    constant = (1.0 + eta) * float(np.min(hat_terms))
    curve = base + constant + math.log(truncated_negative_binomial_mean(eta, gamma)) / (orders - 1.0)
    return monotone_in_order(orders, curve)


def rdp_delta(orders: np.ndarray, base: np.ndarray, base_inf: float, epsilon: float) -> float:
    """An upper bound on the base's δ at ``epsilon`` from its RDP curve: the minimum over orders of

    * Canonne, Kamath & Steinke 2020, Prop. 12 (= Balle et al. 2020, Thm. 21 solved for δ):
      ln δ = (λ − 1)(ε(λ) − ε + ln(1 − 1/λ)) − ln λ;
    * Bretagnolle & Huber 1979: δ(ε) ≤ TV ≤ √(1 − e^{−KL}) ≤ √(1 − e^{−ε(λ)}) for λ ≥ 1;
    * 0 when the base is pure ``base_inf``-DP with ``base_inf`` ≤ ``epsilon``.

    dp_accounting's ``compute_delta`` takes the same minimum of the first two.
    """
    if base_inf <= epsilon:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        conversion = (orders - 1.0) * (base - epsilon + np.log1p(-1.0 / orders)) - np.log(orders)
        pinsker_type = 0.5 * np.log(-np.expm1(-base))
    log_delta = np.minimum(conversion, pinsker_type)
    if np.isnan(log_delta).any():
        raise AccountingError("repeat-and-select: the delta conversion produced NaN")
    return min(float(np.exp(np.min(log_delta))), 1.0)


def poisson_rdp(orders: np.ndarray, base: np.ndarray, base_inf: float, mu: float) -> np.ndarray:
    """Papernot & Steinke 2022, Theorem 6 at every order of ``orders``, with δ̂ from :func:`rdp_delta`.

    Args:
        orders: RDP orders λ > 1.
        base: the base mechanism's RDP at ``orders``.
        base_inf: its pure-DP ε (+inf when it is not pure).
        mu: μ ≥ 1.
    """
    curve = np.empty(len(orders))
    for i, lam in enumerate(orders):
        eps_hat = math.nextafter(math.log1p(1.0 / (lam - 1.0)), 0.0)
        curve[i] = base[i] + mu * rdp_delta(orders, base, base_inf, eps_hat) + math.log(mu) / (lam - 1.0)
    return monotone_in_order(orders, curve)


def repeat_and_select_rdp(orders: np.ndarray, base: np.ndarray, base_inf: float, distribution: str,
                          parameters: dict[str, float]) -> np.ndarray:
    """The repeat-and-select RDP curve at ``orders`` for a base curve (Theorem 2 or Theorem 6).

    Raises:
        AccountingError: an unknown distribution or a NaN in the result.
    """
    if distribution == "geometric":
        curve = truncated_negative_binomial_rdp(orders, base, 1.0, parameters["gamma"])
    elif distribution == "truncated_negative_binomial":
        curve = truncated_negative_binomial_rdp(orders, base, parameters["eta"], parameters["gamma"])
    elif distribution == "poisson":
        curve = poisson_rdp(orders, base, base_inf, parameters["mu"])
    else:
        raise AccountingError(f"repeat-and-select: unknown distribution {distribution!r}")
    if np.isnan(curve).any():
        raise AccountingError("repeat-and-select RDP curve contains NaN")
    return curve


def liu_talwar_epsilon(base_epsilon: float) -> float:
    """Liu & Talwar 2019, Theorem 3.4: 3ε for the best of a geometric number of runs of an ε-DP base."""
    return 3.0 * base_epsilon
