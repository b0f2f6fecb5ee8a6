"""Tests of dpaudit.mechanisms.randomized_response: the exact flip probability, the event, map and coverage, and that
the accountants charge it through the dispatch table with no mechanism-specific code.

The privacy of the release is tested statistically in tests/statistical/test_randomized_response_privacy.py.
"""

from __future__ import annotations

import math

import pytest

from dpaudit.accounting import get_accountant
from dpaudit.errors import InvalidParameter
from dpaudit.events import PrivacyEvent, RandomizedResponseEvent
from dpaudit.mechanisms.outputs import Coverage, IndexOutput
from dpaudit.mechanisms.randomized_response import (
    coverage,
    randomized_response_epsilon,
    randomized_response_event,
    release,
)
from dpaudit.mechanisms.randomness import RandomSource, SeededRandom
from dpaudit.sensitivity import Neighbouring
from dpaudit.testing.statistical import clopper_pearson


class Scripted(RandomSource):
    """Returns the scripted answers in order (for a deterministic walk through the sampler)."""

    for_release = False

    def __init__(self, answers: list[int]) -> None:
        self._answers = list(answers)

    def randbelow(self, n: int) -> int:
        answer = self._answers.pop(0)
        assert 0 <= answer < n
        return answer

    def describe(self) -> dict:
        return {"kind": "scripted"}


def test_a_keep_proposal_reports_the_true_bit_and_an_accepted_flip_negates_it() -> None:
    event = randomized_response_event(Neighbouring.ADD_REMOVE, 1.0)
    assert release(event, True, Scripted([0])) is True  # the fair coin proposes "keep", always accepted
    # "flip" proposed; Bernoulli(exp(−1)) by CKS Alg. 1: Bernoulli(1/1) succeeds, Bernoulli(1/2) fails at k = 2
    # (even: reject), so the coin is tossed again and proposes "keep"
    assert release(event, False, Scripted([1, 0, 1, 0])) is False
    # "flip" proposed; Bernoulli(1/1), Bernoulli(1/2) succeed, Bernoulli(1/3) fails at k = 3 (odd: accept)
    assert release(event, False, Scripted([1, 0, 0, 2])) is True


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_the_flip_frequency_is_one_over_one_plus_e_to_the_epsilon(epsilon: float) -> None:
    """20 000 draws (seed 7): the exact flip probability lies in the two-sided Clopper-Pearson interval at level
    10⁻⁶ (false alarm ≤ 10⁻⁶ per ε for a correct sampler; a sampler flipping at the rate of 2ε is outside it)."""
    event = randomized_response_event(Neighbouring.ADD_REMOVE, epsilon)
    rng = SeededRandom(7)
    n = 20_000
    flips = sum(not release(event, True, rng) for _ in range(n))
    lower, upper = clopper_pearson(flips, n, 1e-6)
    assert lower <= 1 / (1 + math.exp(epsilon)) <= upper
    assert not lower <= 1 / (1 + math.exp(2 * epsilon)) <= upper


def test_event_map_and_coverage() -> None:
    event = randomized_response_event(Neighbouring.REPLACE_ONE, 0.7, label="smoker")
    assert event.sensitivity.formula == "bit" and event.sensitivity.recompute(Neighbouring.REPLACE_ONE) == 1.0
    assert randomized_response_epsilon(event) == 0.7
    assert coverage(event) == Coverage(IndexOutput(2), 1)
    assert PrivacyEvent.from_dict(event.to_dict()) == event


@pytest.mark.parametrize("name", ["basic", "advanced", "rdp", "pld", "tightest"])
def test_every_accountant_charges_its_epsilon(name: str) -> None:
    """Pure ε-DP through the dispatch table: one application costs ε (within the accountant's own rounding)."""
    event = randomized_response_event(Neighbouring.ADD_REMOVE, 0.5)
    assert get_accountant(name).epsilon(event, 1e-6) <= 0.5 * (1 + 1e-6)


@pytest.mark.parametrize("bit", [1, 0, None, "1", 1.0])
def test_only_a_bool_is_released(bit) -> None:
    event = randomized_response_event(Neighbouring.ADD_REMOVE, 1.0)
    with pytest.raises(InvalidParameter, match="needs a bool"):
        release(event, bit, SeededRandom(0))


def test_bad_epsilon_is_refused() -> None:
    with pytest.raises(InvalidParameter):
        randomized_response_event(Neighbouring.ADD_REMOVE, 0.0)
    with pytest.raises(InvalidParameter):
        RandomizedResponseEvent(neighbouring=Neighbouring.ADD_REMOVE,
                                sensitivity=randomized_response_event(Neighbouring.ADD_REMOVE, 1.0).sensitivity,
                                epsilon=float("nan"))
