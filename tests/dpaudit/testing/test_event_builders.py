"""dpaudit.testing.events: the builders give the events the session would charge, and they achieve their charge."""

from __future__ import annotations

import pytest

from dpaudit.accounting import get_accountant
from dpaudit.events import GaussianEvent, LaplaceEvent, PoissonSubsampledGaussianEvent
from dpaudit.mechanisms.gaussian import gaussian_event_delta
from dpaudit.mechanisms.laplace import laplace_epsilon
from dpaudit.sensitivity import from_formula
from dpaudit.testing.events import dpsgd_event, gaussian_event, laplace_event


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace_one"])
@pytest.mark.parametrize("dimension", [1, 5])
def test_laplace_event_achieves_its_epsilon(neighbouring: str, dimension: int) -> None:
    event = laplace_event(0.3, neighbouring=neighbouring, dimension=dimension)
    assert isinstance(event, LaplaceEvent) and event.neighbouring.value == neighbouring
    assert laplace_epsilon(event) <= 0.3
    assert get_accountant("basic").epsilon(event, 1e-6) == pytest.approx(0.3)


@pytest.mark.parametrize("dimension", [1, 3])
def test_gaussian_event_achieves_its_delta(dimension: int) -> None:
    event = gaussian_event(0.8, 1e-7, dimension=dimension)
    assert isinstance(event, GaussianEvent)
    assert gaussian_event_delta(event) <= 1e-7


def test_dpsgd_event_carries_the_recomputable_clipping_bound() -> None:
    event = dpsgd_event(0.02, 1.1, 50, clip_norm=2.0)
    assert isinstance(event, PoissonSubsampledGaussianEvent)
    assert event.sensitivity == from_formula("clipped_gradient_sum", "add_remove", clip_norm=2.0)
    assert event.sensitivity.recompute(event.neighbouring) == 2.0


def test_laplace_event_is_what_the_session_charges(make_session) -> None:
    with make_session(epsilon=1.0) as session:
        charged = session.laplace_event(from_formula("count", "add_remove"), 0.4, label="test count")
    assert charged == laplace_event(0.4)
