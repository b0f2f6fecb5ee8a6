"""Vectorised exact samplers: many discrete Laplace or discrete Gaussian variables at once, for large releases.

The algorithms are those of :mod:`dpaudit.mechanisms.discrete` (Canonne, Kamath & Steinke, "The Discrete
Gaussian for Differential Privacy", NeurIPS 2020, Algorithms 1-3), run on numpy arrays of int64 instead of one
Python integer at a time. Every coordinate still follows the exact law: the only randomness is exactly uniform
integers (63-bit words from the :class:`~dpaudit.mechanisms.randomness.RandomSource`, split into disjoint bit
fields, :func:`uniform_digits`), and every decision is an integer comparison. Each loop keeps the coordinates that
have not finished yet and draws for those only.

Rational Bernoulli trials digit by digit. A Bernoulli(p) trial compares a uniform U ∈ [0, 1) with p. Writing
U = (D + R)/2¹⁵ with D a uniform 15-bit digit and R uniform in [0, 1), U < p exactly when D < ⌊2¹⁵p⌋, or
D = ⌊2¹⁵p⌋ and R < {2¹⁵p} (the fractional part). So one 15-bit digit decides (:func:`bernoulli_digit`), except
with probability 2⁻¹⁵, when Bernoulli({2¹⁵p}) is drawn exactly on Python integers. This uses 15 random bits per
trial where a comparison of whole words uses 63; random bytes are most of the cost of a large release. For the same
reason a Bernoulli(exp(−1)) (Algorithm 1 with γ = 1) is drawn by inversion of the algorithm's stopping K from one
digit (:func:`bernoulli_exp1`).

Integer ranges. The discrete Laplace scale must be a rational t/s with t < 2⁵² (:func:`bulk_scale`); Algorithm 1
needs ⌊2¹⁵·u/(t·k)⌋ for u < t and k = 1, 2, …, computed in int64 while t·k ≤ 2⁶² (a coordinate gets to k with
probability at most 1/(k−1)!). Beyond that range the coordinate is finished with Python integers, by the same
algorithm, so the law stays exact. A noise value that does not fit in int64 is returned in an object array.

The discrete Gaussian's acceptance probability exp(−(|y| − σ²/t)²/(2σ²)) depends on the proposal only through
|y|, and its exponent is a rational whose numerator and denominator exceed int64 (σ² is the exact square of a
float). :class:`DiscreteGaussianSampler` computes, once per value of |y| and on Python integers, the exact split
γ = m + r (m exp(−1) trials and one Algorithm-1 trial on r ∈ [0, 1], as the scalar sampler reduces γ) and the
first digit ⌊2¹⁵r⌋; every trial is then a vectorised digit comparison, ⌊2¹⁵r/k⌋ = ⌊⌊2¹⁵r⌋/k⌋ for step k.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.discrete import sample_bernoulli_exp
from dpaudit.mechanisms.randomness import RandomSource

#: uniform_below draws from [0, bound) for bound ≤ this, with rejection probability < 1/2 per word
MAX_BOUND = 2**62
#: largest numerator t of a discrete Laplace scale t/s that the vectorised sampler takes
MAX_SCALE_NUMERATOR = 2**52
#: bits of the uniform digit that decides a Bernoulli trial (a tie, probability 2⁻¹⁵, is resolved exactly)
DIGIT_BITS = 15
#: below this denominator, ⌊u·2¹⁵/b⌋ for u ≤ b is one int64 division (u·2¹⁵ < 2⁶³)
_SHIFT_LIMIT = 2**48
#: |y| below this get their Gaussian acceptance digits from a table filled once per value (≤ 16 MiB)
GAUSSIAN_TABLE_LIMIT = 2**20


def with_wide(out: np.ndarray, wide: dict[int, int]) -> np.ndarray:
    """``out`` (int64) with the coordinates in ``wide`` (index → a value beyond int64) set: an object array when there
    are any, ``out`` itself otherwise."""
    if not wide:
        return out
    result = out.astype(object)
    for index, value in wide.items():
        result[index] = value
    return result


def uniform_below(bound: int, count: int, rng: RandomSource) -> np.ndarray:
    """``count`` independent, exactly uniform integers in [0, bound), as int64.

    Rejection sampling on uniform digits of 31 bits (bound ≤ 2³⁰) or 63 bits: a digit w is accepted when
    w < ⌊(2^bits − 1)/bound⌋·bound, a multiple of ``bound``, and then w mod bound is uniform (rejection probability
    < 1/2, and < 2⁻¹⁶ for bounds below 2¹⁵); rejected digits are drawn again.

    Raises:
        InvalidParameter: ``bound`` is not an integer in [1, 2⁶²].
    """
    if not 1 <= bound <= MAX_BOUND:
        raise InvalidParameter(f"uniform_below needs a bound in [1, 2**62], got {bound}")
    bits = 31 if bound <= 2**30 else 63
    limit = ((2**bits - 1) // bound) * bound
    draws = uniform_digits(count, rng, bits)
    rejected = np.flatnonzero(draws >= limit)
    if rejected.size:
        draws[rejected] = uniform_below(bound, rejected.size, rng)
    return (draws % bound).astype(np.int64, copy=False)


#: the unsigned lanes a 63-bit word is viewed as, by digit width: every lane's top bit is dropped
_LANES = {7: np.uint8, 15: np.uint16, 31: np.uint32}


def uniform_digits(count: int, rng: RandomSource, bits: int = DIGIT_BITS) -> np.ndarray:
    """``count`` independent uniform integers in [0, 2^bits), for ``bits`` in 7, 15, 31 or 63.

    A uniform 63-bit word viewed as 64/(bits + 1) unsigned lanes, each lane's top bit dropped: disjoint bit fields
    of uniform bits, hence independent and uniform (the word's always-zero bit 63 is one of the dropped bits).

    Returns:
        The lanes' unsigned dtype (uint8, uint16, uint32), or int64 for 63 bits: compare, do not compute, with them.
    """
    if bits == 63:
        return rng.words(count)
    lanes = 64 // (bits + 1)
    words = rng.words(-(-count // lanes))
    return words.view(_LANES[bits])[:count] & ((1 << bits) - 1)


def uniform_bits(count: int, rng: RandomSource) -> np.ndarray:
    """``count`` independent uniform bits (bool): the 63 bits of each uniform word, so 63 bits per word drawn."""
    words = rng.words(-(-count // 63))
    return (((words[:, None] >> np.arange(63, dtype=np.int64)) & 1).reshape(-1)[:count]).astype(bool)


def bernoulli_digit(thresholds: np.ndarray, resolve_ties: Callable[[np.ndarray], np.ndarray],
                    rng: RandomSource) -> np.ndarray:
    """Exact Bernoulli(p_i) for each i, given ``thresholds[i]`` = ⌊2¹⁵·p_i⌋ with p_i ∈ [0, 1].

    A uniform 15-bit digit D_i below the threshold is a success, above it a failure (see the module docstring);
    for the indices where it equals the threshold, ``resolve_ties(indices)`` must return exact Bernoulli({2¹⁵p_i})
    draws (a bool array).
    """
    digits = uniform_digits(thresholds.size, rng)
    result = digits < thresholds
    ties = np.flatnonzero(digits == thresholds)
    if ties.size:
        result[ties] = resolve_ties(ties)
    return result


def _scaled_quotient(numerators: np.ndarray, denominator: int) -> np.ndarray:
    """⌊u·2¹⁵/b⌋ for every u in ``numerators`` (0 ≤ u ≤ b = ``denominator`` ≤ 2⁶²), in int64."""
    if denominator < _SHIFT_LIMIT:
        return (numerators << DIGIT_BITS) // denominator
    quotient = (numerators >= denominator).astype(np.int64)  # long division, one bit at a time: r < b ≤ 2⁶²
    remainder = numerators - quotient * denominator
    for _ in range(DIGIT_BITS):
        remainder <<= 1
        bit = remainder >= denominator
        remainder -= bit * denominator
        quotient = 2 * quotient + bit
    return quotient


def bernoulli_fraction(numerators: np.ndarray, denominator: int, rng: RandomSource) -> np.ndarray:
    """Exact Bernoulli(u/b) for each u in ``numerators`` (0 ≤ u ≤ b = ``denominator`` ≤ 2⁶²).

    A tie is Bernoulli({2¹⁵u/b}) = Bernoulli((u·2¹⁵ mod b)/b), drawn on Python integers.
    """
    return bernoulli_digit(_scaled_quotient(numerators, denominator), lambda ties: np.array(
        [rng.randbelow(denominator) < (int(numerators[i]) << DIGIT_BITS) % denominator for i in ties], dtype=bool),
        rng)


def algorithm1(count: int, trial: Callable[[np.ndarray | slice, int], np.ndarray]) -> np.ndarray:
    """CKS 2020, Algorithm 1 for ``count`` coordinates: K = 1; while Bernoulli(γ/K) succeeds, K += 1; K odd?

    Args:
        count: the number of coordinates.
        trial: ``trial(indices, k)`` draws Bernoulli(γ_i/k) for the coordinates ``indices`` (an index array, or
            ``slice(None)`` for all of them at K = 1), as a bool array.

    Returns:
        Bernoulli(exp(−γ_i)) for every coordinate (bool).
    """
    result = np.ones(count, dtype=bool)  # a coordinate whose first trial fails stops at K = 1: odd
    active = np.flatnonzero(trial(slice(None), 1))
    k = 2
    while active.size:
        succeeded = trial(active, k)
        result[active[~succeeded]] = k % 2 == 1
        active = active[succeeded]
        k += 1
    return result


def bernoulli_exp(numerators: np.ndarray, denominator: int, rng: RandomSource) -> np.ndarray:
    """Exact Bernoulli(exp(−u/t)) for each u in ``numerators`` (0 ≤ u ≤ t = ``denominator`` ≤ 2⁶²; CKS Alg. 1).

    Bernoulli(γ/K) is :func:`bernoulli_fraction`(u, t·K) while t·K ≤ 2⁶², and a uniform integer below t·K
    compared with u on Python integers beyond (probability ≤ 1/(K−1)!).
    """
    def trial(active: np.ndarray | slice, k: int) -> np.ndarray:
        if denominator * k <= MAX_BOUND:
            return bernoulli_fraction(numerators[active], denominator * k, rng)
        return np.array([rng.randbelow(denominator * k) < int(u) for u in numerators[active]], dtype=bool)

    return algorithm1(numerators.size, trial)


#: CKS Algorithm 1 with γ = 1 stops at K > j with probability 1/j! (j trials of Bernoulli(1/i), i ≤ j, succeed);
#: its stopping K is found by inversion of one uniform U: K > j iff U < 1/j!. _STOP_DIGITS[i] = ⌊2¹⁵/(i + 2)!⌋ for
#: i = 0 … 6 (the last, j = _LAST_STOP = 8, is 0: 8! > 2¹⁵), decreasing; _STOP_ASCENDING the others increasing.
_LAST_STOP = 8
_STOP_DIGITS = np.array([2**DIGIT_BITS // math.factorial(j) for j in range(2, _LAST_STOP + 1)], dtype=np.int64)
_STOP_ASCENDING = _STOP_DIGITS[-2::-1].copy()


def _resolve_stop(j: int, rng: RandomSource) -> int:
    """The stopping K when U's 15-bit digit equals ⌊2¹⁵/j!⌋ (so K is j, or more), decided exactly.

    With U = (D + R)/2¹⁵ and D = ⌊2¹⁵/j!⌋: K > j iff R < {2¹⁵/j!}, a rational Bernoulli. For j < 8 the digit also
    shows U ≥ D/2¹⁵ > 1/(j+1)! (as D ≥ 1), so K = j + 1 then; for j = 8 (D = 0) the chain goes on from there:
    given U < 1/8!, K > i + 1 given K > i is Bernoulli(1/(i + 1)), as in Algorithm 1.
    """
    factorial = math.factorial(j)
    if rng.randbelow(factorial) >= 2**DIGIT_BITS % factorial:
        return j
    k = j + 1
    if j == _LAST_STOP:
        while rng.randbelow(k) == 0:
            k += 1
    return k


def bernoulli_exp1(count: int, rng: RandomSource) -> np.ndarray:
    """``count`` exact Bernoulli(exp(−1)) draws: CKS Algorithm 1 with γ = 1 by inversion of its stopping K.

    Algorithm 1 draws Bernoulli(1/K) for K = 1, 2, … (the first always succeeds) and returns whether the first
    failing K is odd; P(K > j) = 1/j!. One uniform 15-bit digit D of U locates K among the thresholds ⌊2¹⁵/j!⌋
    (j = 2 … 8): K = 2 + #{j < 8 : D < ⌊2¹⁵/j!⌋}, except when D equals a threshold (probability ≤ 7·2⁻¹⁵), then
    :func:`_resolve_stop` decides exactly. The law of K, hence of the result, is the algorithm's own.
    """
    digits = uniform_digits(count, rng)
    below = _STOP_ASCENDING.size - np.searchsorted(_STOP_ASCENDING, digits, side="right")
    stop = below + 2
    for i in np.flatnonzero(digits == _STOP_DIGITS[below]).tolist():
        stop[i] = _resolve_stop(int(stop[i]), rng)
    return (stop & 1).astype(bool)


def geometric_exp1(count: int, rng: RandomSource) -> np.ndarray:
    """For each of ``count`` coordinates, the number V of successes of Bernoulli(exp(−1)) before the first failure."""
    v = np.zeros(count, dtype=np.int64)
    active = np.arange(count)
    while active.size:
        active = active[bernoulli_exp1(active.size, rng)]
        v[active] += 1
    return v


def bulk_scale(scale: Fraction) -> Fraction:
    """The discrete Laplace scale that :func:`sample_discrete_laplace_array` draws with: ``scale`` or just above.

    A scale whose numerator is ≥ 2⁵² is rounded UP to the nearest multiple of 2⁻ᵖ with the largest p that keeps
    the numerator below 2⁵² (relative increase < 2⁻⁵¹ for scales below 2⁴⁰). A scale whose denominator exceeds
    2⁶² (int64 division) is rounded up the same way with p ≤ 62, hence to at least 2⁻⁶² (a scale that small adds
    non-zero noise with probability below 2·exp(−2⁶²)). More noise than calibrated never weakens the guarantee:
    the privacy map ε = Δ_γ/t decreases in t (CKS 2020, Sec. 5).

    Raises:
        InvalidParameter: the scale is not > 0, or is 2⁵¹ grid units or more.
    """
    scale = Fraction(scale)
    if scale <= 0:
        raise InvalidParameter(f"discrete Laplace scale must be > 0, got {scale}")
    if scale >= MAX_SCALE_NUMERATOR // 2:
        raise InvalidParameter(f"discrete Laplace scale of {float(scale):.3g} grid units is too large for the "
                               "vectorised sampler (at most 2**51): use a coarser grid")
    if scale.numerator < MAX_SCALE_NUMERATOR and scale.denominator <= MAX_BOUND:
        return scale
    if scale <= Fraction(1, MAX_BOUND):
        return Fraction(1, MAX_BOUND)
    p = min(MAX_SCALE_NUMERATOR.bit_length() - 2 - math.ceil(math.log2(scale)), MAX_BOUND.bit_length() - 1)
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
    v_max = (MAX_BOUND - t) // t  # V < v_max keeps U + t·V < 2⁶²
    pending = np.arange(count)
    while pending.size:
        u = uniform_below(t, pending.size, rng)
        accepted = bernoulli_exp(u, t, rng)
        u, pending_u = u[accepted], pending[accepted]
        retry = [pending[~accepted]]
        v = geometric_exp1(u.size, rng)
        negative = uniform_bits(u.size, rng)
        y = u + t * np.minimum(v, v_max)  # exact where V < v_max
        if s != 1:
            y //= s
        big = np.flatnonzero(v >= v_max)  # U + t·V beyond int64: finished on Python integers below
        y[big] = 1
        rejected = negative & (y == 0)
        retry.append(pending_u[rejected])
        keep = ~rejected
        out[pending_u[keep]] = np.where(negative, -y, y)[keep]
        for i in big.tolist():
            value = (int(u[i]) + t * int(v[i])) // s
            if negative[i] and value == 0:
                retry.append(pending_u[i:i + 1])
            else:
                wide[int(pending_u[i])] = -value if negative[i] else value
        pending = np.concatenate(retry)
    return with_wide(out, wide)


class DiscreteGaussianSampler:
    """Exact discrete Gaussian draws on arrays, P(Y = y) ∝ exp(−y²/(2σ²)) (CKS 2020, Algorithm 3), σ² rational.

    Algorithm 3 with t = ⌊σ⌋ + 1, as :func:`~dpaudit.mechanisms.discrete.sample_discrete_gaussian`: Y discrete
    Laplace with scale t (:func:`sample_discrete_laplace_array`), accepted with Bernoulli(exp(−γ(|Y|))),
    γ(n) = (n − σ²/t)²/(2σ²); rejected coordinates are drawn again. Writing σ² = a/b, γ(n) = N/D with
    N = (n·b·t − a)² and D = 2·a·b·t². As the scalar sampler does, γ > 1 is reduced to m = ⌈γ⌉ − 1 independent
    Bernoulli(exp(−1)) trials and one Algorithm-1 trial on r = γ − m ∈ (0, 1]; the acceptance is their
    conjunction, of probability exp(−m)·exp(−r) = exp(−γ). m and ⌊2¹⁵r⌋ are computed exactly on Python integers
    once per value n below the table's limit (:data:`GAUSSIAN_TABLE_LIMIT`, lowered where γ(n) could reach 2⁶²,
    so that m fits in int64) and kept for later calls (so one instance should serve a whole release); a proposal
    with |Y| beyond the limit is accepted by the scalar exact Bernoulli(exp(−γ)).

    Raises:
        InvalidParameter: σ² is not > 0, or t is too large for :func:`sample_discrete_laplace_array`.
    """

    def __init__(self, sigma2: Fraction) -> None:
        sigma2 = Fraction(sigma2)
        if sigma2 <= 0:
            raise InvalidParameter(f"discrete Gaussian variance must be > 0, got {sigma2}")
        self.sigma2 = sigma2
        self.t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1  # ⌊σ⌋ + 1, as in the paper
        if self.t >= MAX_SCALE_NUMERATOR // 2:  # the proposal's range (bulk_scale), checked before anything is drawn
            raise InvalidParameter(f"a discrete Gaussian sigma of {math.sqrt(float(sigma2)):.3g} grid units is too "
                                   "large for the vectorised sampler (below 2**51): use a coarser grid")
        self._a, self._b = sigma2.numerator, sigma2.denominator
        self._den = 2 * self._a * self._b * self.t**2
        # n < limit ⇒ n + σ²/t < √(2⁶³σ²) ⇒ γ(n) ≤ (n + σ²/t)²/(2σ²) < 2⁶²
        root = math.isqrt(2**63 * self._a // self._b)
        self.limit = max(0, min(GAUSSIAN_TABLE_LIMIT, root - math.ceil(sigma2 / self.t)))
        self._reductions = np.empty(0, dtype=np.int64)  # m(n) per n, −1 where not computed yet
        self._digits = np.empty(0, dtype=np.int64)  # ⌊2¹⁵·r(n)⌋ per n

    def _split(self, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(m, N − m·D) for each |y| = n (int64 array): γ(n) = m + (N − m·D)/D, remainder in (0, D] (0 if N = 0).

        Computed on Python integers (object arrays).
        """
        numerator = (n.astype(object) * (self._b * self.t) - self._a) ** 2
        m = np.where(numerator > 0, (numerator - 1) // self._den, 0)
        return m, numerator - m * self._den

    def _fill(self, values: np.ndarray) -> None:
        """Make the table hold m and ⌊2¹⁵r⌋ for every n in ``values`` (all below the limit)."""
        if values.size == 0:
            return
        needed = int(values.max()) + 1
        if needed > self._reductions.size:
            size = min(max(needed, 2 * self._reductions.size), self.limit)
            self._reductions = np.concatenate([self._reductions, np.full(size - self._reductions.size, -1)])
            self._digits = np.resize(self._digits, size)
        new = np.unique(values[self._reductions[values] < 0])
        if new.size:
            m, rest = self._split(new)
            self._reductions[new] = m.astype(np.int64)
            self._digits[new] = ((rest * 2**DIGIT_BITS) // self._den).astype(np.int64)

    def _accept_tabled(self, values: np.ndarray, rng: RandomSource) -> np.ndarray:
        """Bernoulli(exp(−γ(n))) for every n in ``values`` (int64, all below the limit)."""
        self._fill(values)
        reductions, digits = self._reductions[values], self._digits[values]
        alive = np.ones(values.size, dtype=bool)
        reducing = np.flatnonzero(reductions > 0)  # m exp(−1) trials all succeed iff V ≥ m (V geometric_exp1)
        alive[reducing] = geometric_exp1(reducing.size, rng) >= reductions[reducing]
        survivors = np.flatnonzero(alive)

        def trial(active: np.ndarray | slice, k: int) -> np.ndarray:  # Bernoulli(r/k): ⌊2¹⁵r/k⌋ = ⌊⌊2¹⁵r⌋/k⌋
            coordinates = survivors[active]
            return bernoulli_digit(digits[coordinates] // k, lambda ties: self._resolve(
                values[coordinates[ties]], k, rng), rng)

        alive[survivors] = algorithm1(survivors.size, trial)
        return alive

    def _resolve(self, values: np.ndarray, k: int, rng: RandomSource) -> np.ndarray:
        """Exact Bernoulli({2¹⁵·r(n)/k}) for each n in ``values`` (the tie of a digit comparison)."""
        bound = self._den * k
        return np.array([rng.randbelow(bound) < (int(rest) << DIGIT_BITS) % bound for rest in self._split(values)[1]],
                        dtype=bool)

    def __call__(self, count: int, rng: RandomSource) -> np.ndarray:
        """``count`` independent exact discrete Gaussian draws (int64, or object if one does not fit in 62 bits)."""
        out = np.empty(count, dtype=np.int64)
        wide: dict[int, int] = {}
        pending = np.arange(count)
        while pending.size:
            y = sample_discrete_laplace_array(Fraction(self.t), pending.size, rng)
            magnitude = np.abs(y)
            small = magnitude < self.limit
            accepted = np.empty(pending.size, dtype=bool)
            accepted[small] = self._accept_tabled(magnitude[small].astype(np.int64), rng)
            for i in np.flatnonzero(~small).tolist():
                gamma = (Fraction(int(magnitude[i])) - self.sigma2 / self.t) ** 2 / (2 * self.sigma2)
                accepted[i] = sample_bernoulli_exp(gamma, rng)
            if y.dtype == object:
                wide.update((int(pending[i]), int(y[i])) for i in np.flatnonzero(accepted & ~small))
                accepted &= small
                y = np.where(small, y, 0).astype(np.int64)
            out[pending[accepted]] = y[accepted]
            pending = pending[~accepted]
        return with_wide(out, wide)


def sample_discrete_gaussian_array(sigma2: Fraction, count: int, rng: RandomSource) -> np.ndarray:
    """``count`` independent exact discrete Gaussian variables N_Z(0, σ²) (:class:`DiscreteGaussianSampler`)."""
    return DiscreteGaussianSampler(sigma2)(count, rng)
