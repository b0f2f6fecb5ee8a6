"""Kusner et al. 2015 constants against hand-computed values, and the greedy γ_T bound against brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from dpaudit.errors import InvalidParameter
from dpaudit_plugins.kusner_bo import constants as kc


def test_beta_t_by_hand():
    # |Λ| = 10, t = 2, δ = 0.1: 10·2²·π²/(3·0.1) = 394.784176/0.3 = 1315.947253; 2·ln(1315.947253) = 2·7.182312
    assert kc.beta_t(10, 2, 0.1) == pytest.approx(14.364624060, rel=1e-9)


def test_c_by_hand():
    # Alg. 1: k1 = 0.5, |Λ| = 10, δ = 0.1: 2·sqrt(0.5·ln 300) = 2·sqrt(0.5·5.703782) = 2·1.688754
    assert kc.c_noisy(0.5, 10, 0.1) == pytest.approx(3.377508690, rel=1e-9)
    # Alg. 2 (proceedings): 2·sqrt(0.5·ln 200) = 2·sqrt(0.5·5.298317) = 2·1.627624
    assert kc.c_noise_free(0.5, 10, 0.1) == pytest.approx(3.255247261, rel=1e-9)
    assert kc.c_noisy(1.0, 10, 0.1) == 0.0  # identical functions on neighbours: no change


def test_q_uses_the_proceedings_constant_for_one_observation():
    # T = 1, σ = 0.1, δ = 0.1: 0.1·sqrt(8·ln 30) = 0.1·sqrt(8·3.401197) = 0.1·sqrt(27.209579) = 0.1·5.216280
    assert kc.q_noise(0.1, 0.1, 1) == pytest.approx(0.5216280193, rel=1e-9)
    arxiv = 0.1 * math.sqrt(4 * math.log(30))  # 000's σ·sqrt(4 log(3/δ)) is √2 smaller
    assert kc.q_noise(0.1, 0.1, 1) == pytest.approx(math.sqrt(2) * arxiv, rel=1e-12)


def test_q_bounds_all_t_observations_by_a_union_bound():
    """The best of T observations may carry any of their noises: q must hold for all T at once (attack: the paper's
    one-observation q, σ·sqrt(8 log(3/δ)), used for the max over T = 20 observations).

    T = 20, σ = 0.1, δ = 0.1: 0.1·sqrt(8·ln 600) = 0.1·sqrt(8·6.396930) = 0.1·sqrt(51.175437) = 0.1·7.153701.
    """
    assert kc.q_noise(0.1, 0.1, 20) == pytest.approx(0.7153700947, rel=1e-9)
    assert kc.q_noise(0.1, 0.1, 20) > 1.37 * kc.q_noise(0.1, 0.1, 1)  # the old formula is too small
    # q/2 = σ·x with x = sqrt(2 log(3T/δ)): each |α_t| > σx w.p. ≤ exp(−x²/2) = δ/(3T), all T fail w.p. ≤ δ/3;
    # the exact two-sided Gaussian tail is below that Chernoff bound
    from scipy.stats import norm
    x = kc.q_noise(1.0, 0.1, 20) / 2
    assert 20 * 2 * norm.sf(x) <= 0.1 / 3
    # with the old q the union over 20 observations exceeds δ/3
    assert 20 * 2 * norm.sf(kc.q_noise(1.0, 0.1, 1) / 2) > 0.1 / 3


def test_best_value_failure_is_the_union_of_its_four_events():
    # regret on V and on V' (δ/2 each with β_t's 3δ), c and q (δ/3 each)
    assert kc.best_value_noisy_failure(0.003) == pytest.approx(0.003 / 2 + 0.003 / 2 + 0.001 + 0.001, rel=1e-12)
    # Kusner's β_t = Srinivas et al.'s β_t (6δ_S in the denominator) with δ_S = δ/2
    assert kc.beta_t(10, 3, 0.1) == pytest.approx(2 * math.log(10 * 9 * math.pi**2 / (6 * 0.05)), rel=1e-12)


def test_c1_by_hand():
    # σ = 0.1: σ⁻² = 100, 8 / ln(101) = 8 / 4.615121
    assert kc.c1(0.1) == pytest.approx(1.7334325227, rel=1e-9)


def test_exponential_sensitivity_by_hand():
    # β_{T+1} = 9, c = 1: 2·3 + 1
    assert kc.exponential_sensitivity(9.0, 1.0) == 7.0


def test_best_value_scale_by_hand():
    # C1 = 2, β_T = 3, γ_T = 4, T = 4, ε = 0.5, c = 1, q = 0.5:
    # sqrt(2·3·4)/(0.5·√4) + 1/0.5 + 0.5/0.5 = 4.898979/1 + 2 + 1
    scale = kc.best_value_laplace_scale(c1_value=2.0, beta_T=3.0, gamma_T=4.0, T=4, epsilon=0.5, c=1.0, q=0.5)
    assert scale == pytest.approx(7.898979486, rel=1e-9)


@pytest.mark.parametrize("bad", [
    lambda: kc.beta_t(0, 1, 0.1), lambda: kc.beta_t(10, 0, 0.1), lambda: kc.beta_t(10, 1, 0.0),
    lambda: kc.c_noisy(1.5, 10, 0.1), lambda: kc.c_noisy(-0.1, 10, 0.1), lambda: kc.q_noise(0.0, 0.1, 1),
    lambda: kc.q_noise(0.1, 0.1, 0),
    lambda: kc.c1(-1.0), lambda: kc.exponential_sensitivity(-1.0, 0.0),
    lambda: kc.max_information_gain_bound(np.ones((2, 3)), 1, 1.0),
    lambda: kc.max_information_gain_bound(np.array([[1.0, 0.5], [0.4, 1.0]]), 1, 1.0),
    lambda: kc.max_information_gain_bound(np.eye(2), 0, 1.0),
])
def test_bad_input_raises(bad):
    with pytest.raises(InvalidParameter):
        bad()


def test_information_gain_by_hand():
    # K = I₂, σ = 1: greedy takes both points, ½ ln 2 each; {0, 0} gives ½ ln det[[2, 1], [1, 2]] = ½ ln 3 < ln 2
    gain, chosen = kc.greedy_information_gain(np.eye(2), 2, 1.0)
    assert sorted(chosen) == [0, 1] and gain == pytest.approx(math.log(2), rel=1e-12)
    assert kc.information_gain(np.eye(2), [0, 0], 1.0) == pytest.approx(0.5 * math.log(3), rel=1e-12)
    assert kc.max_information_gain_bound(np.eye(2), 2, 1.0) == pytest.approx(math.log(2) / (1 - 1 / math.e), rel=1e-12)


def _se_kernel(points: np.ndarray, lengthscale: float) -> np.ndarray:
    d2 = (points[:, None, :] - points[None, :, :]) ** 2
    return np.exp(-0.5 * d2.sum(-1) / lengthscale**2)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sigma", [0.1, 1.0])
def test_greedy_bound_dominates_brute_force_maximum(seed, sigma):
    rng = np.random.default_rng(seed)
    kernel = _se_kernel(rng.uniform(size=(5, 2)), lengthscale=0.3 + 0.2 * seed)
    T = 3
    exact = max(kc.information_gain(kernel, a, sigma)
                for a in itertools.combinations_with_replacement(range(5), T))  # γ_T over multisets
    greedy, _ = kc.greedy_information_gain(kernel, T, sigma)
    assert greedy <= exact + 1e-12
    assert kc.max_information_gain_bound(kernel, T, sigma) >= exact
    assert greedy >= kc.GREEDY_FACTOR * exact - 1e-12  # Nemhauser et al.'s guarantee itself


def test_torch_kernel_gives_the_numpy_value():
    kernel = _se_kernel(np.linspace(0, 1, 6)[:, None], 0.25)
    assert kc.max_information_gain_bound(torch.tensor(kernel), 4, 0.5) == kc.max_information_gain_bound(kernel, 4, 0.5)
