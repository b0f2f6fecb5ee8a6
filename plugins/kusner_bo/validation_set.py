"""A validation set of public fixed size m₀, so Algorithm 3's score has one sensitivity for both neighbourings.

f_V = −(1/m₀) Σ g over exactly m₀ records: the first m₀ of V in a canonical order fixed by each record's own key
(e.g. its record id, never its position in a shuffled list), padded with the dummy record (x = 0, y = +1) when
|V| < m₀. The dummy's loss φ(0) is a loss some real record attains (x = 0 is in the unit ball), so it lies in the
range of g at every w. Adding or removing one record then changes the m₀ evaluated records by at most one swap
(one record in, one record or dummy out), and so does replacing one: either way it is a replace-one change of a
size-m₀ set, and Theorem 7's per-record term with m = m₀ covers add/remove and replace-one neighbours alike,
while |V| itself is never used (it is private under add/remove). docs/plugins/kusner-bo.md.
"""

from __future__ import annotations

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count


def fixed_size(X: np.ndarray, ys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``size`` rows of (X, ys), padded with (0, +1) rows up to ``size``.

    Args:
        X: validation features in canonical record order, rows of norm ≤ 1.
        ys: labels in {−1, +1}, same order.
        size: the public m₀ ≥ 1.
    """
    m0 = check_count("validation_size", size)
    X = np.asarray(X, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    if X.ndim != 2 or ys.shape != (X.shape[0],):
        raise InvalidParameter(f"validation features {X.shape} and labels {ys.shape} do not match")
    X, ys = X[:m0], ys[:m0]
    pad = m0 - len(ys)
    return (np.vstack([X, np.zeros((pad, X.shape[1]))]), np.concatenate([ys, np.ones(pad)]))
