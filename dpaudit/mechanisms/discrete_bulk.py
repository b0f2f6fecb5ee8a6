"""Vectorised exact samplers: many discrete Laplace variables at once, for releases of large arrays.

The algorithms are those of :mod:`dpaudit.mechanisms.discrete` (Canonne, Kamath & Steinke, "The Discrete
Gaussian for Differential Privacy", NeurIPS 2020, Algorithms 1 and 2), run on numpy arrays of int64 instead of one
Python integer at a time: every coordinate still follows the exact law, since the only randomness is exactly
uniform integers (rejection sampling from uniform 63-bit words, :func:`uniform_below`) and every comparison is an
integer comparison. Each loop keeps the coordinates that have not finished yet and draws for those only.

Integer ranges. The discrete Laplace scale must be a rational t/s with t < 2⁵² (:func:`bulk_scale`); Algorithm 1
then needs uniform integers below t·k for k = 1, 2, …, which stay below 2⁶² while k < 2¹⁰ (a coordinate gets to
k with probability at most 1/(k−1)!). Beyond those ranges the coordinate is finished with Python integers, by the
same algorithm, so the law stays exact. A noise value that does not fit in int64 is returned in an object array.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.randomness import RandomSource

#: uniform_below draws from [0, bound) for bound ≤ this, with rejection probability < 1/2 per word
MAX_BOUND = 2**62
#: largest numerator t of a discrete Laplace scale t/s that the vectorised sampler takes
MAX_SCALE_NUMERATOR = 2**52


def uniform_below(bound: int, count: int, rng: RandomSource) -> np.ndarray:
    """``count`` independent, exactly uniform integers in [0, bound), as int64.

    Rejection sampling: a uniform 63-bit word w is accepted when w < ⌊(2⁶³−1)/bound⌋·bound, a multiple of
    ``bound``, and then w mod bound is uniform.

    Raises:
        InvalidParameter: ``bound`` is not an integer in [1, 2⁶²].
    """
    if not 1 <= bound <= MAX_BOUND:
        raise InvalidParameter(f"uniform_below needs a bound in [1, 2**62], got {bound}")
    limit = ((2**63 - 1) // bound) * bound
    out = np.empty(count, dtype=np.int64)
    pending = np.arange(count)
    while pending.size:
        words = rng.words(pending.size)
        accepted = words < limit
        out[pending[accepted]] = words[accepted] % bound
        pending = pending[~accepted]
    return out


def uniform_bits(count: int, rng: RandomSource) -> np.ndarray:
    """``count`` independent uniform bits (bool): the 63 bits of each uniform word, so 63 bits per word drawn."""
    words = rng.words(-(-count // 63))
    return (((words[:, None] >> np.arange(63, dtype=np.int64)) & 1).reshape(-1)[:count]).astype(bool)


def bernoulli_exp(numerators: np.ndarray, denominator: int, rng: RandomSource) -> np.ndarray:
    """Exact Bernoulli(exp(−u/t)) for each u in ``numerators`` (0 ≤ u ≤ t = ``denominator``; CKS 2020, Alg. 1).

    Algorithm 1 for γ = u/t ∈ [0, 1]: K = 1; while Bernoulli(γ/K) succeeds, K += 1; return whether K is odd.
    Bernoulli(γ/K) is "a uniform integer below t·K is < u".
    """
    result = np.empty(numerators.size, dtype=bool)
    active = np.arange(numerators.size)
    k = 1
    while active.size and denominator * k <= MAX_BOUND:
        succeeded = uniform_below(denominator * k, active.size, rng) < numerators[active]
        result[active[~succeeded]] = k % 2 == 1
        active = active[succeeded]
        k += 1
    for index in active:  # past the int64 range (probability ≤ 1/(k−1)!): the same algorithm on Python integers
        u, kk = int(numerators[index]), k
        while rng.randbelow(denominator * kk) < u:
            kk += 1
        result[index] = kk % 2 == 1
    return result


def _geometric_exp1(count: int, rng: RandomSource) -> np.ndarray:
    """For each of ``count`` coordinates, the number of successes of Bernoulli(exp(−1)) before the first failure."""
    v = np.zeros(count, dtype=np.int64)
    active = np.arange(count)
    while active.size:
        success = bernoulli_exp(np.ones(active.size, dtype=np.int64), 1, rng)
        active = active[success]
        v[active] += 1
    return v


def bulk_scale(scale: Fraction) -> Fraction:
    """The discrete Laplace scale that :func:`sample_discrete_laplace_array` draws with: ``scale`` or just above.

    A scale whose numerator is ≥ 2⁵² is rounded UP to the nearest multiple of 2⁻ᵖ with the largest p that keeps
    the numerator below 2⁵² (relative increase < 2⁻⁵¹ for scales below 2⁴⁰). More noise than calibrated never
    weakens the guarantee: the privacy map ε = Δ_γ/t decreases in t (CKS 2020, Sec. 5).

    Raises:
        InvalidParameter: the scale is not > 0, or is 2⁵¹ grid units or more.
    """
    scale = Fraction(scale)
    if scale <= 0:
        raise InvalidParameter(f"discrete Laplace scale must be > 0, got {scale}")
    if scale >= MAX_SCALE_NUMERATOR // 2:
        raise InvalidParameter(f"discrete Laplace scale of {float(scale):.3g} grid units is too large for the "
                               "vectorised sampler (at most 2**51): use a coarser grid")
    if scale.numerator < MAX_SCALE_NUMERATOR:
        return scale
    p = MAX_SCALE_NUMERATOR.bit_length() - 2 - math.ceil(math.log2(scale))
    while math.ceil(scale * 2**p) >= MAX_SCALE_NUMERATOR:
        p -= 1
    return Fraction(math.ceil(scale * 2**p), 2**p)


def sample_discrete_laplace_array(scale: Fraction, count: int, rng: RandomSource) -> np.ndarray:
    """``count`` independent exact discrete Laplace variables, P(Y = y) ∝ exp(−|y|/t), t = :func:`bulk_scale`.

    CKS 2020, Algorithm 2 with scale = t/s, on arrays: U uniform in [0, t); accept with Bernoulli(exp(−U/t));
    V the number of successes of Bernoulli(exp(−1)) before a failure; Y = ⌊(U + t·V)/s⌋; a uniform sign, and a
    negative zero is rejected. Rejected coordinates are drawn again from the start.

    Returns:
        An int64 array, or an object array of Python integers if a draw does not fit in 62 bits.
    """
    scale = bulk_scale(scale)
    t, s = scale.numerator, scale.denominator
    out = np.empty(count, dtype=np.int64)
    wide: dict[int, int] = {}  # coordinates whose U + t·V leaves the int64 range
    pending = np.arange(count)
    while pending.size:
        u = uniform_below(t, pending.size, rng)
        accepted = bernoulli_exp(u, t, rng)
        u, pending_u = u[accepted], pending[accepted]
        retry = [pending[~accepted]]
        v = _geometric_exp1(u.size, rng)
        negative = uniform_bits(u.size, rng)
        fits = v < (MAX_BOUND - t) // t
        y = np.zeros(u.size, dtype=np.int64)
        y[fits] = (u[fits] + t * v[fits]) // s
        y_big = {int(i): (int(u[i]) + t * int(v[i])) // s for i in np.flatnonzero(~fits)}
        zero = (y == 0) & fits
        for i, value in y_big.items():
            zero[i] = value == 0
        rejected = negative & zero
        retry.append(pending_u[rejected])
        keep = ~rejected
        out[pending_u[keep & fits]] = np.where(negative, -y, y)[keep & fits]
        for i, value in y_big.items():
            if keep[i]:
                wide[int(pending_u[i])] = -value if negative[i] else value
        pending = np.concatenate(retry)
    if not wide:
        return out
    result = out.astype(object)
    for index, value in wide.items():
        result[index] = value
    return result
