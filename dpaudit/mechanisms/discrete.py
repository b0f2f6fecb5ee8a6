"""Exact samplers for the Bernoulli(exp(−γ)), discrete Laplace and discrete Gaussian distributions.

Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020, Algorithms 1-3.
Every parameter is a :class:`fractions.Fraction` (a float converts to one exactly), and the only randomness used
is uniform integers from a :class:`~dpaudit.mechanisms.randomness.RandomSource`, so the output distributions are
exactly the stated ones: no floating-point arithmetic touches the noise (Mironov 2012's attack does not apply).
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.randomness import RandomSource


def _bernoulli(p: Fraction, rng: RandomSource) -> bool:
    """Exact Bernoulli(p) for rational p in [0, 1]."""
    return rng.randbelow(p.denominator) < p.numerator


def sample_bernoulli_exp(gamma: Fraction, rng: RandomSource) -> bool:
    """Exact Bernoulli(exp(−γ)) for rational γ ≥ 0 (CKS 2020, Algorithm 1)."""
    gamma = Fraction(gamma)
    if gamma < 0:
        raise InvalidParameter(f"gamma must be >= 0, got {gamma}")
    while gamma > 1:
        if not sample_bernoulli_exp(Fraction(1), rng):
            return False
        gamma -= 1
    k = 1
    while _bernoulli(gamma / k, rng):
        k += 1
    return k % 2 == 1


def sample_discrete_laplace(scale: Fraction, rng: RandomSource) -> int:
    """Exact discrete Laplace: P(Y = y) ∝ exp(−|y|/scale) on the integers (CKS 2020, Algorithm 2).

    Args:
        scale: t > 0, rational; written scale = t/s with integers t, s as in the paper.
    """
    scale = Fraction(scale)
    if scale <= 0:
        raise InvalidParameter(f"discrete Laplace scale must be > 0, got {scale}")
    t, s = scale.numerator, scale.denominator
    while True:
        u = rng.randbelow(t)
        if not sample_bernoulli_exp(Fraction(u, t), rng):
            continue
        v = 0
        while sample_bernoulli_exp(Fraction(1), rng):
            v += 1
        y = (u + t * v) // s
        negative = rng.randbelow(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def sample_discrete_gaussian(sigma2: Fraction, rng: RandomSource) -> int:
    """Exact discrete Gaussian: P(Y = y) ∝ exp(−y²/(2σ²)) on the integers (CKS 2020, Algorithm 3).

    Args:
        sigma2: σ² > 0, rational.
    """
    sigma2 = Fraction(sigma2)
    if sigma2 <= 0:
        raise InvalidParameter(f"discrete Gaussian variance must be > 0, got {sigma2}")
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1  # ⌊σ⌋ + 1, as in the paper
    while True:
        y = sample_discrete_laplace(Fraction(t), rng)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if sample_bernoulli_exp(gamma, rng):
            return y
