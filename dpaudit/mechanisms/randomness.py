"""Sources of randomness for privacy noise.

Releases use :class:`SecureRandom` (the operating system's CSPRNG through :mod:`secrets`). :class:`SeededRandom`
exists only so that tests are reproducible; a session that uses it records that fact, and its certificate is
marked "not for release" (a seeded generator's output can be predicted, which voids any privacy guarantee).

Samplers only ever ask for uniform integers (``randbelow``, or ``words`` for the vectorised samplers of
:mod:`dpaudit.mechanisms.discrete_bulk`), so that every distribution built on top is exact
(Canonne, Kamath & Steinke 2020, Sec. 5).
"""

from __future__ import annotations

import os
import random
import secrets
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from dpaudit.validation import check_count


class RandomSource(ABC):
    """Uniform integers for the exact samplers."""

    #: whether outputs drawn from this source may be published as differentially private
    for_release: bool

    @abstractmethod
    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n)."""

    def words(self, count: int) -> np.ndarray:
        """``count`` independent uniform 63-bit integers (int64 in [0, 2⁶³)), for the vectorised samplers.

        This default asks :meth:`randbelow` once per word; sources with a bulk generator override it.
        """
        return np.fromiter((self.randbelow(2**63) for _ in range(count)), dtype=np.int64, count=count)

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Public description recorded in the ledger and certificate (never the seed of a secure source)."""


def _words_from_bytes(data: bytes) -> np.ndarray:
    """Uniform bytes as uniform 63-bit integers: little-endian 64-bit words with the top bit dropped."""
    return (np.frombuffer(data, dtype="<u8") >> np.uint64(1)).astype(np.int64)


class SecureRandom(RandomSource):
    """The OS CSPRNG (``secrets`` / ``os.urandom``): the default for every release."""

    for_release = True

    def randbelow(self, n: int) -> int:
        check_count("n", n)
        return secrets.randbelow(n)

    def words(self, count: int) -> np.ndarray:
        """Uniform 63-bit integers from ``os.urandom`` in one call (the OS CSPRNG, as :mod:`secrets`)."""
        return _words_from_bytes(os.urandom(8 * count))

    def describe(self) -> dict[str, Any]:
        return {"kind": "secure", "source": "secrets.randbelow (os.urandom)", "for_release": True}


class SeededRandom(RandomSource):
    """A seeded Mersenne Twister, for reproducible tests only. Certificates made with it say "not for release"."""

    for_release = False

    def __init__(self, seed: int) -> None:
        self.seed = check_count("seed", seed, minimum=0)
        self._rng = random.Random(seed)

    def randbelow(self, n: int) -> int:
        check_count("n", n)
        return self._rng.randrange(n)

    def words(self, count: int) -> np.ndarray:
        """Uniform 63-bit integers from the seeded generator's bytes (reproducible; not for release)."""
        return _words_from_bytes(self._rng.randbytes(8 * count))

    def describe(self) -> dict[str, Any]:
        return {"kind": "seeded", "source": "random.Random (Mersenne Twister)", "seed": self.seed,
                "for_release": False}
