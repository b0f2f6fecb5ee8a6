"""Tests of dpaudit.mechanisms.subsampled_gaussian: one charge covers one training run (both sampling schemes)."""

from __future__ import annotations

from dpaudit.events import SampledWithoutReplacementGaussianEvent
from dpaudit.mechanisms.outputs import Coverage, TrainingRun
from dpaudit.mechanisms.subsampled_gaussian import coverage
from dpaudit.sensitivity import Neighbouring, from_formula
from dpaudit.testing.events import dpsgd_event


def test_one_charge_covers_one_training_run_whatever_the_steps() -> None:
    wor = SampledWithoutReplacementGaussianEvent(
        neighbouring=Neighbouring.REPLACE_ONE,
        sensitivity=from_formula("clipped_gradient_sum", Neighbouring.REPLACE_ONE, clip_norm=1.0),
        batch_size=10, dataset_size=100, noise_multiplier=1.0, steps=500)
    assert coverage(dpsgd_event(steps=1000)) == Coverage(TrainingRun(), 1)
    assert coverage(wor) == Coverage(TrainingRun(), 1)
