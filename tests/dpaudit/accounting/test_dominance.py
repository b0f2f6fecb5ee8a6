"""Coverage by dominance (dpaudit.accounting.dominance): which charged event pays for which later run."""

from __future__ import annotations

from dpaudit.accounting.dominance import covers, parameter_dominated
from dpaudit.events import LaplaceEvent, PoissonSubsampledGaussianEvent, RepeatAndSelectEvent
from dpaudit.sensitivity import Neighbouring, from_formula

SENS = from_formula("clipped_gradient_sum", Neighbouring.ADD_REMOVE, clip_norm=1.0)


def dpsgd(q: float, sigma: float, steps: int) -> PoissonSubsampledGaussianEvent:
    return PoissonSubsampledGaussianEvent(neighbouring=Neighbouring.ADD_REMOVE, sensitivity=SENS, label="e",
                                          sample_rate=q, noise_multiplier=sigma, steps=steps)


def test_parameter_dominance_is_checked_field_by_field():
    envelope = dpsgd(0.1, 1.0, 100)
    assert parameter_dominated(dpsgd(0.1, 1.0, 100), envelope)
    assert parameter_dominated(dpsgd(0.05, 2.0, 10), envelope)
    for bad in (dpsgd(0.2, 1.0, 100), dpsgd(0.1, 0.9, 100), dpsgd(0.1, 1.0, 101)):
        assert not parameter_dominated(bad, envelope)


def test_an_envelope_covers_dominated_runs_only():
    envelope = dpsgd(0.1, 1.0, 100)
    assert covers(envelope, dpsgd(0.05, 1.5, 50))
    assert not covers(envelope, dpsgd(0.1, 0.99, 100))  # one field beyond the envelope


def test_a_repeat_and_select_covers_repetitions_its_base_rdp_dominates():
    charged = RepeatAndSelectEvent(event=dpsgd(0.1, 1.0, 100), distribution="geometric", gamma=0.1, label="rs")
    assert covers(charged, dpsgd(0.1, 1.2, 100))
    assert not covers(charged, dpsgd(0.1, 1.0, 101))


def test_other_charges_cover_nothing():
    laplace = LaplaceEvent(neighbouring=Neighbouring.ADD_REMOVE, sensitivity=from_formula(
        "count", Neighbouring.ADD_REMOVE), label="l", epsilon=1.0, scale=1.0, grid=1.0, dimension=1)
    assert not covers(laplace, dpsgd(0.01, 5.0, 1))
    assert not covers(dpsgd(0.1, 1.0, 100), laplace)
