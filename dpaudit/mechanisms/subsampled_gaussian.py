"""Subsampled Gaussian steps (DP-SGD): what one charge covers.

A :class:`~dpaudit.events.PoissonSubsampledGaussianEvent` (Abadi et al. 2016; Mironov, Talwar & Zhang 2019) or a
:class:`~dpaudit.events.SampledWithoutReplacementGaussianEvent` (Wang, Balle & Kasiviswanathan 2019) records the
``steps`` noisy steps of one training run. The noise is added by the training library (Opacus), not by a sampler
here, and the privacy map is a Rényi-DP curve (:func:`dpaudit.accounting.rdp.rdp_curve`), so this module states
only the coverage: one charge covers one training run, claimed once before it starts
(:meth:`dpaudit.session.Session.claim`), and its one output (the trained model or its digest).
"""

from __future__ import annotations

from dpaudit.events import PoissonSubsampledGaussianEvent, SampledWithoutReplacementGaussianEvent
from dpaudit.mechanisms.outputs import Coverage, TrainingRun
from dpaudit.mechanisms.registry import register_mechanism


def coverage(event: PoissonSubsampledGaussianEvent | SampledWithoutReplacementGaussianEvent) -> Coverage:
    """One charge covers one training run with one output."""
    return Coverage(TrainingRun(), 1)


register_mechanism(PoissonSubsampledGaussianEvent, coverage=coverage)
register_mechanism(SampledWithoutReplacementGaussianEvent, coverage=coverage)
