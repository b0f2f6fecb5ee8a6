"""Bulk words from every randomness source: in range, reproducible only where seeded, and the default via randbelow."""

from __future__ import annotations

import numpy as np

from dpaudit.mechanisms.randomness import RandomSource, SecureRandom, SeededRandom


class _Counting(RandomSource):
    """A source with only ``randbelow``: the base class's ``words`` must go through it."""

    for_release = False

    def __init__(self) -> None:
        self.calls: list[int] = []

    def randbelow(self, n: int) -> int:
        self.calls.append(n)
        return n - 1

    def describe(self) -> dict:
        return {"kind": "counting"}


def test_words_are_63_bit_and_seeded_words_reproduce() -> None:
    for source in (SecureRandom(), SeededRandom(1)):
        words = source.words(1000)
        assert words.dtype == np.int64 and words.shape == (1000,)
        assert words.min() >= 0 and words.max() < 2**63
        assert len(np.unique(words)) == 1000
    assert np.array_equal(SeededRandom(9).words(50), SeededRandom(9).words(50))
    assert not np.array_equal(SecureRandom().words(50), SecureRandom().words(50))


def test_the_default_words_draw_through_randbelow() -> None:
    source = _Counting()
    assert source.words(3).tolist() == [2**63 - 1] * 3
    assert source.calls == [2**63] * 3
