"""Event builders for tests: privacy events calibrated exactly as the session calibrates them, with defaults.

Each builder returns an event that a :class:`~dpaudit.session.Session` could have charged: its noise is the one
the mechanism module's calibration (:mod:`dpaudit.mechanisms.laplace`, :mod:`dpaudit.mechanisms.gaussian`) gives
for the stated (ε[, δ]), so the event passes the charge checks of the accountants and of ``dpaudit verify`` (an
event whose noise is too small for its declared ε is refused as under-charging).
Sensitivities come from the kernel's formulas (``count``, ``clipped_gradient_sum``), so verify can recompute them.

Example::

    from dpaudit.testing.events import dpsgd_event, laplace_event
    from dpaudit.events import compose

    accountant.epsilon(compose([laplace_event(0.5), dpsgd_event(steps=200)]), delta=1e-6)
"""

from __future__ import annotations

from dpaudit.events import GaussianEvent, LaplaceEvent, PoissonSubsampledGaussianEvent
from dpaudit.mechanisms import gaussian, laplace
from dpaudit.sensitivity import Neighbouring, Sensitivity, declared, from_formula


def _count_sensitivity(neighbouring: Neighbouring | str, dimension: int, norm: str) -> Sensitivity:
    """One count (formula ``count``), or a histogram of ``dimension`` disjoint counts (declared, with its reason)."""
    if dimension == 1:
        return from_formula("count", neighbouring)
    return declared(1.0, norm, "a histogram of disjoint counts: one record changes one count by 1")


def laplace_event(epsilon: float = 1.0, *, neighbouring: Neighbouring | str = Neighbouring.ADD_REMOVE,
                  dimension: int = 1, label: str = "test count") -> LaplaceEvent:
    """A count (or histogram) released with discrete Laplace noise calibrated to ``epsilon`` like
    :meth:`Session.laplace <dpaudit.session.Session.laplace>` (session grid, grid-rounding inflation included).

    Args:
        epsilon: the pure-DP charge.
        neighbouring: the relation the guarantee is about.
        dimension: number of counts released (L1 sensitivity 1 over all of them).
        label: public description.
    """
    return laplace.laplace_event(Neighbouring(neighbouring), _count_sensitivity(neighbouring, dimension, "l1"),
                                 epsilon, dimension=dimension, label=label)


def gaussian_event(epsilon: float = 1.0, delta: float = 1e-6, *,
                   neighbouring: Neighbouring | str = Neighbouring.ADD_REMOVE, dimension: int = 1,
                   label: str = "test count") -> GaussianEvent:
    """A count (or histogram) released with discrete Gaussian noise calibrated to (ε, δ) like
    :meth:`Session.gaussian <dpaudit.session.Session.gaussian>` (Canonne, Kamath & Steinke 2020, Thm. 7).

    Args:
        epsilon, delta: the (ε, δ) charge.
        neighbouring: the relation the guarantee is about.
        dimension: number of counts released (L2 sensitivity 1 over all of them).
        label: public description.
    """
    return gaussian.gaussian_event(Neighbouring(neighbouring), _count_sensitivity(neighbouring, dimension, "l2"),
                                   epsilon, delta, dimension=dimension, label=label)


def dpsgd_event(sample_rate: float = 0.01, noise_multiplier: float = 1.0, steps: int = 100, *,
                clip_norm: float = 1.0, label: str = "test DP-SGD") -> PoissonSubsampledGaussianEvent:
    """``steps`` DP-SGD steps with Poisson sampling at ``sample_rate`` and noise σ·C (Abadi et al. 2016, Alg. 1),
    add/remove neighbours (the only relation this event is analysed under).

    Args:
        sample_rate: Poisson sampling probability q.
        noise_multiplier: σ, the noise standard deviation in units of the clipping norm.
        steps: number of noisy gradient steps.
        clip_norm: per-example L2 clipping norm C (sensitivity formula ``clipped_gradient_sum``).
        label: public description.
    """
    sens = from_formula("clipped_gradient_sum", Neighbouring.ADD_REMOVE, clip_norm=clip_norm)
    return PoissonSubsampledGaussianEvent(neighbouring=Neighbouring.ADD_REMOVE, sensitivity=sens, label=label,
                                          sample_rate=sample_rate, noise_multiplier=noise_multiplier, steps=steps)
