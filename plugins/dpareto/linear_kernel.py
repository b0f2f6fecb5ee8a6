"""The compiled step kernel of the linear DP-SGD / DP-Adam trainer (:mod:`~dpaudit_plugins.dpareto.linear_dpsgd`):
one epoch's noisy steps for R replications at once, given the epoch's Poisson batches and Gaussian noise, both
drawn by the caller from the trial's seeded generator. Pure arithmetic on arrays (numba ``@njit``, float64; numpy's
error model: no divisor here can be 0, and the per-division checks of Python's model halved Adam's speed at small
lots); no randomness, no data access, no accounting: the caller counts the steps (``StepCap``) before calling.

Per step t (Abadi et al. 2016, Alg. 1; Avent et al. 2020, Alg. 3 and 4), for each replication r:

    g_r = (Σ_{i ∈ batch_{t,r}} clamp(ℓ'(⟨w_r, x̃_i⟩, y_i), ±C/‖x̃_i‖)·x̃_i + σC·ξ_{t,r}) / B,    ξ ~ N(0, I)

then SGD w_r ← w_r − η g_r, or Adam (β1 = 0.9, β2 = 0.999, κ = 10⁻⁸, bias-corrected at the global step number):
μ ← β1 μ + (1 − β1) g, ν ← β2 ν + (1 − β2) g², w ← w − η (μ / (1 − β1^s)) / (√(ν / (1 − β2^s)) + κ).
The clipped per-example gradient ℓ'·x̃·min(1, C/(|ℓ'|·‖x̃‖)) equals clamp(ℓ', ±C/‖x̃‖)·x̃ (a linear model's
per-example gradient is ℓ'·x̃), so no per-example gradient is formed: each included record's score is a gather of
its k sparse entries and its clipped gradient a scatter-add of the same entries.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

LOGISTIC = 0
HINGE = 1
LOSS_CODES = {"logistic": LOGISTIC, "hinge": HINGE}
ADAM_BETAS = (0.9, 0.999)
ADAM_KAPPA = 1e-8
BEYOND = 2**62
"""A position past every epoch: where a gap of +∞ (u = 0) or one that would overflow leads."""


@njit(cache=True, error_model="numpy")
def loss_slope(z: float, y: float, loss: int) -> float:
    """ℓ'(z, y) for a label y ∈ {0, 1}: logistic σ(z) − y (ℓ = log(1 + e^z) − y z, σ evaluated without overflow);
    hinge −s·1[s z < 1] with s = 2y − 1 (ℓ = max(0, 1 − s z), subgradient 0 at the kink)."""
    if loss == LOGISTIC:
        if z >= 0.0:
            return 1.0 / (1.0 + math.exp(-z)) - y
        e = math.exp(z)
        return e / (1.0 + e) - y
    s = 2.0 * y - 1.0
    return -s if s * z < 1.0 else 0.0


@njit(cache=True, error_model="numpy")
def run_epoch(W: np.ndarray, mu: np.ndarray, nu: np.ndarray, first_step: int, cols: np.ndarray, vals: np.ndarray,
              lengths: np.ndarray, binary: bool, labels: np.ndarray, bounds: np.ndarray, offsets: np.ndarray,
              replication: np.ndarray, record: np.ndarray, noise: np.ndarray, noise_std: float, batch_size: float,
              lr: float, loss: int, adam: bool) -> None:
    """Run ``len(offsets) − 1`` noisy steps on the weights ``W`` in place (module docstring).

    Args:
        W: (R, d + 1) float64 weights, bias last; updated in place.
        mu, nu: (R, d + 1) float64 Adam moments, updated in place (unused by SGD).
        first_step: the global number (from 1) of this epoch's first step (Adam's bias correction).
        cols, vals: (n, k) each record's entries (column, value), the first ``lengths[i]`` of row i (``SparseRows``).
        lengths: (n,) the number of entries of each row.
        binary: every entry's value is 1.0: ``vals`` is not read (x·1.0 = x exactly, the same result).
        labels: (n,) float64 labels in {0, 1}.
        bounds: (n,) float64 C/‖x̃_i‖, each record's clamp on ℓ'.
        offsets: (steps + 1,) int64: step t's included pairs are ``[offsets[t], offsets[t + 1])``.
        replication, record: int64 (replication, record) of each included pair.
        noise: (steps, R, d + 1) standard normal draws ξ.
        noise_std: σC.
        batch_size: the public expected lot size B (the divisor).
        lr: η.
        loss: :data:`LOGISTIC` or :data:`HINGE`.
        adam: Adam's update, else SGD's.
    """
    R, width = W.shape
    beta1, beta2 = ADAM_BETAS
    G = np.empty((R, width))
    for t in range(len(offsets) - 1):
        G[:, :] = 0.0
        for i in range(offsets[t], offsets[t + 1]):
            r = replication[i]
            row = record[i]
            length = lengths[row]
            z = 0.0
            z_odd = 0.0  # two partial sums: half the dependent additions
            if binary:
                for j in range(0, length - 1, 2):
                    z += W[r, cols[row, j]]
                    z_odd += W[r, cols[row, j + 1]]
                if length % 2:
                    z += W[r, cols[row, length - 1]]
            else:
                for j in range(0, length - 1, 2):
                    z += W[r, cols[row, j]] * vals[row, j]
                    z_odd += W[r, cols[row, j + 1]] * vals[row, j + 1]
                if length % 2:
                    z += W[r, cols[row, length - 1]] * vals[row, length - 1]
            slope = loss_slope(z + z_odd, labels[row], loss)
            bound = bounds[row]
            if slope > bound:  # written out so that a NaN slope stays NaN (a diverged run fails, it is not masked)
                slope = bound
            elif slope < -bound:
                slope = -bound
            if binary:
                for j in range(length):
                    G[r, cols[row, j]] += slope
            else:
                for j in range(length):
                    G[r, cols[row, j]] += slope * vals[row, j]
        step = first_step + t
        correction1 = 1.0 - beta1**step
        correction2 = 1.0 - beta2**step
        for r in range(R):
            for c in range(width):
                g = (G[r, c] + noise_std * noise[t, r, c]) / batch_size
                if adam:
                    mu[r, c] = beta1 * mu[r, c] + (1.0 - beta1) * g
                    nu[r, c] = beta2 * nu[r, c] + (1.0 - beta2) * g * g
                    W[r, c] -= lr * (mu[r, c] / correction1) / (math.sqrt(nu[r, c] / correction2) + ADAM_KAPPA)
                else:
                    W[r, c] -= lr * g


@njit(cache=True, error_model="numpy")
def bernoulli_positions(uniforms: np.ndarray, last: int, log_keep: float) -> np.ndarray:
    """The positions of the successes of a Bernoulli(q) process after position ``last``: ``last`` plus the cumulative
    sums of Geometric(q) gaps ⌈log u / log(1 − q)⌉ (the inverse CDF, as ``torch.Tensor.geometric_`` computes it from
    the same uniforms u ∈ [0, 1)), P(gap > k) = P(u < (1 − q)^k) = (1 − q)^k.

    Args:
        uniforms: u ∈ [0, 1), one per gap.
        last: the position before the first gap.
        log_keep: log(1 − q) < 0.
    """
    out = np.empty(len(uniforms), dtype=np.int64)
    position = last
    for i in range(len(uniforms)):
        if position < BEYOND:
            gap = math.log(uniforms[i]) / log_keep if uniforms[i] > 0.0 else math.inf
            position = position + int(math.ceil(gap)) if gap < BEYOND - position else BEYOND
        out[i] = position
    return out


@njit(cache=True, error_model="numpy")
def split_positions(positions: np.ndarray, steps: int, replications: int,
                    n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions step·R·n + replication·n + record (ascending; those ≥ steps·R·n are dropped) as (offsets
    (steps + 1,), replication, record), step t's pairs being ``[offsets[t], offsets[t + 1])``."""
    per_step = replications * n
    total = steps * per_step
    kept = 0
    while kept < len(positions) and positions[kept] < total:
        kept += 1
    offsets = np.empty(steps + 1, dtype=np.int64)
    replication = np.empty(kept, dtype=np.int64)
    record = np.empty(kept, dtype=np.int64)
    step = 0
    offsets[0] = 0
    for i in range(kept):
        here = positions[i] // per_step
        while step < here:
            step += 1
            offsets[step] = i
        rest = positions[i] - here * per_step
        replication[i] = rest // n
        record[i] = rest - replication[i] * n
    while step < steps:
        step += 1
        offsets[step] = kept
    return offsets, replication, record


@njit(cache=True, error_model="numpy")
def fill_rows(X: np.ndarray, cols: np.ndarray, vals: np.ndarray, lengths: np.ndarray) -> None:
    """Write each row of the (n, d) ``X`` as its bias entry (column d, value 1) followed by its nonzero entries in
    column order into ``cols``/``vals`` (n, k ≥ 1 + the most nonzeros of a row), and their number into ``lengths``."""
    n, d = X.shape
    for i in range(n):
        cols[i, 0] = d
        vals[i, 0] = 1.0
        length = 1
        for c in range(d):
            if X[i, c] != 0.0:
                cols[i, length] = c
                vals[i, length] = X[i, c]
                length += 1
        lengths[i] = length
