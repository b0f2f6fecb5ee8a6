"""Sources of randomness for privacy noise.

Releases use :class:`SecureRandom` (the operating system's CSPRNG through :mod:`secrets`). :class:`SeededRandom`
exists only so that tests are reproducible; a session that uses it records that fact, and its certificate is
marked "not for release" (a seeded generator's output can be predicted, which voids any privacy guarantee).

Samplers only ever ask for uniform integers (``randbelow``), so that every distribution built on top is exact
(Canonne, Kamath & Steinke 2020, Sec. 5).
"""

from __future__ import annotations

import random
import secrets
from abc import ABC, abstractmethod
from typing import Any

from dpaudit.validation import check_count


class RandomSource(ABC):
    """Uniform integers for the exact samplers."""

    #: whether outputs drawn from this source may be published as differentially private
    for_release: bool

    @abstractmethod
    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Public description recorded in the ledger and certificate (never the seed of a secure source)."""


class SecureRandom(RandomSource):
    """The OS CSPRNG (``secrets`` / ``os.urandom``): the default for every release."""

    for_release = True

    def randbelow(self, n: int) -> int:
        check_count("n", n)
        return secrets.randbelow(n)

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

    def describe(self) -> dict[str, Any]:
        return {"kind": "seeded", "source": "random.Random (Mersenne Twister)", "seed": self.seed,
                "for_release": False}
