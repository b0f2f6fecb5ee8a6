"""Tallies: specs from privacy maps, counts, and the growing-composition cache."""

from __future__ import annotations

import pytest

from dpaudit.accounting import charges, get_accountant
from dpaudit.accounting.charges import PoissonGaussianSpec, PureSpec, tally
from dpaudit.events import ComposedEvent, SelfComposedEvent

from ._events import above_threshold, dpsgd, exponential, laplace


def test_specs_and_counts():
    event = ComposedEvent(events=(laplace(0.5), SelfComposedEvent(event=dpsgd(0.01, 1.0, 7), count=3),
                                  laplace(0.5), exponential(0.2), above_threshold(0.3)))
    relation, counts = tally(event)
    assert relation.value == "add_remove"
    lap = PureSpec(pytest.approx(0.5), laplace_parameter=pytest.approx(1 / (1025 / 0.5)), laplace_sensitivity=1025)
    items = list(counts.items())
    assert items[0][0] == lap and items[0][1] == 2
    assert items[1] == (PoissonGaussianSpec(0.01, 1.0), 21)
    assert items[2] == (PureSpec(0.2, bounded_range=True), 1)
    assert items[3][0].epsilon == pytest.approx(0.3) and items[3][0].laplace_parameter is None


def test_growing_composition_reuses_the_previous_tally(monkeypatch):
    calls = []
    original = charges.describe
    monkeypatch.setattr(charges, "describe", lambda leaf: calls.append(leaf) or original(leaf))
    released = [laplace(0.1 * (i + 1)) for i in range(50)]
    for i in range(1, 51):
        relation, counts = tally(ComposedEvent(events=tuple(released[:i])))
    assert len(calls) == 50  # each release described once, not 50·51/2 times
    assert counts == tally(ComposedEvent(events=tuple(reversed(released))))[1]  # not a prefix: recomputed
    assert len(calls) == 100


def test_gaussian_event_that_under_charges_is_refused_everywhere(tmp_path):
    """σ far too small for the declared (ε, δ): every accountant refuses, and a session charges nothing."""
    from dpaudit.errors import AccountingError
    from dpaudit.events import GaussianEvent
    from dpaudit.mechanisms.randomness import SeededRandom
    from dpaudit.sensitivity import declared
    from dpaudit.session import Session

    from ._events import GRID

    forged = GaussianEvent(neighbouring="add_remove", sensitivity=declared(1.0, "l2", "one bounded record"),
                           epsilon=0.01, delta=1e-10, sigma=0.01, grid=GRID)
    for name in ("basic", "advanced", "rdp", "pld", "tightest"):
        with pytest.raises(AccountingError, match="under-charges"):
            get_accountant(name).epsilon(forged, 1e-6)
    s = Session(epsilon=1.0, delta=1e-6, rng=SeededRandom(0), mirror=False, store=tmp_path)
    with pytest.raises(AccountingError):
        s.charge(forged, plugin="test", mechanism="gaussian")
    assert s.spent_epsilon() == 0.0
    s.close()


def test_threads_growing_different_compositions_get_the_tally_of_their_own_event():
    """The one-entry cache :data:`charges.LAST_TALLY` is shared by every thread of the process: two threads that grow
    different compositions at once keep replacing each other's entry. Each must still get its own event's counts
    (those of an uncached tally), and a result already handed out must never change afterwards."""
    import threading

    builders = {"laplace": lambda i: laplace(0.01 * (1 + i % 3)), "exponential": lambda i: exponential(0.02)}
    results: dict[str, list] = {name: [] for name in builders}
    start = threading.Barrier(len(builders))

    def grow(name):
        events: tuple = ()
        start.wait()
        for i in range(60):
            events = (*events, builders[name](i))
            _, counts = tally(ComposedEvent(events=events))
            results[name].append((events, counts, dict(counts)))

    threads = [threading.Thread(target=grow, args=(name,)) for name in builders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, rows in results.items():
        for events, counts, snapshot in rows:
            assert counts == snapshot  # not modified after it was returned
            charges.LAST_TALLY.clear()
            assert tally(ComposedEvent(events=events))[1] == snapshot, name


@pytest.mark.parametrize(("excess", "accepted"), [(0.5e-9, True), (2e-9, False)])
def test_one_tolerance_decides_for_the_accountants_and_for_verify(excess: float, accepted: bool):
    """A Laplace event whose map exceeds its declared ε by ``excess`` (relative): both the accountants and verify's
    charge check (:func:`charges.privacy_map_problem`) accept it within :data:`dpaudit.tolerance.REL_TOL` and refuse
    it beyond, with the same message; an accepted event is charged the (larger) map, never the declaration."""
    from dpaudit.errors import AccountingError
    from dpaudit.events import LaplaceEvent
    from dpaudit.mechanisms.laplace import laplace_epsilon
    from dpaudit.sensitivity import declared

    base = LaplaceEvent(neighbouring="add_remove", sensitivity=declared(1.0, "l1", "test"), epsilon=1.0, scale=1.0,
                        grid=1.0)
    mapped = laplace_epsilon(base)
    event = LaplaceEvent(neighbouring="add_remove", sensitivity=base.sensitivity, epsilon=mapped / (1 + excess),
                         scale=1.0, grid=1.0)
    problem = charges.privacy_map_problem(event)
    if accepted:
        assert problem is None
        assert get_accountant("basic").epsilon(event, 1e-6) == mapped
    else:
        assert "under-charges" in problem
        with pytest.raises(AccountingError, match="under-charges"):
            get_accountant("basic").epsilon(event, 1e-6)
