"""Integer seeds for data-independent randomness (model initialisation, generators), drawn from a session's source.

One range for every seed of the tuning kit and the plugins: :data:`SEED_RANGE`, below torch's and numpy's 64-bit
seed limits.
"""

from __future__ import annotations

from dpaudit.mechanisms.randomness import RandomSource

SEED_RANGE = 2**63
"""Seeds are drawn uniformly from [0, SEED_RANGE)."""


def draw_seed(rng: RandomSource) -> int:
    """A seed drawn uniformly below :data:`SEED_RANGE` from ``rng`` (a session's randomness, independent of data)."""
    return rng.randbelow(SEED_RANGE)
