"""PRV bounds above the float range of e^t (composed ε > ~709): finite, and each on its side of the exact ε.

With q = 1 the Poisson-subsampled Gaussian is the Gaussian mechanism with μ = √k/σ, whose exact ε(δ) solves
δ = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) (Balle & Wang 2018, Thm. 8), evaluated here in log space. Before the fix
Opacus's ``DiscretePRV.compute_epsilon`` returned (∞, ∞, ∞) above ε ≈ 709, so verify rejected every PLD claim
there (an infinite "lower bound").
"""

from __future__ import annotations

import importlib
import math

import pytest
from opacus.accountants import PRVAccountant as OpacusPrv
from scipy import optimize, special

from dpaudit.accounting import PrvAccountant
from dpaudit.accounting.base import DeltaUnreachable
from dpaudit.accounting.charges import tally
from dpaudit.accounting.prv import prv_bounds

from ._events import dpsgd

prv_module = importlib.import_module("dpaudit.accounting.prv")
recheck_module = importlib.import_module("dpaudit.accounting.recheck")
DELTA = 1e-5


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The exact ε(δ) of the Gaussian mechanism with μ = Δ/σ (Balle & Wang 2018, Thm. 8)."""
    def log_delta(eps: float) -> float:
        a = special.log_ndtr(mu / 2 - eps / mu)
        b = eps + special.log_ndtr(-mu / 2 - eps / mu)
        return a + math.log1p(-math.exp(b - a)) if a > b else -1e300
    return optimize.brentq(lambda e: log_delta(e) - math.log(delta), 0.0, 10 * mu * mu, xtol=1e-12)


@pytest.mark.parametrize(("sigma", "steps"), [(0.1, 12), (0.1, 15)])
def test_bounds_above_709_are_finite_and_bracket_the_exact_epsilon(sigma, steps):
    exact = gaussian_epsilon(math.sqrt(steps) / sigma, DELTA)
    assert exact > 720  # beyond e^t's float range
    lower, estimate, upper = prv_bounds(((1.0, sigma, steps),), DELTA)
    assert lower <= exact <= upper
    assert upper - lower < 0.1 and lower < estimate < upper


def test_same_epsilon_as_opacus_where_opacus_is_finite():
    """ε ≈ 634 (below the overflow): the overflow-free sum gives Opacus's own upper bound."""
    ref = OpacusPrv()
    ref.history = [(0.1, 1.0, 10)]
    assert prv_bounds(((1.0, 0.1, 10),), DELTA)[2] == pytest.approx(ref.get_epsilon(DELTA), rel=1e-12)


def test_step_loss_beyond_the_float_range_keeps_the_lower_bound_and_refuses_the_upper(monkeypatch):
    """One step at σ = 1/36 (exact ε ≈ 800.6): Opacus's CDF reads 1 above ln(float max), moving the step's loss
    mass down. ε_lower stays below the exact ε; ε_upper cannot be stated (∞, the accountant refuses). The broken
    variant that ignores the moved mass (overflow mass 0) certifies an upper bound below the exact ε."""
    history = ((1.0, 1 / 36, 1),)
    exact = gaussian_epsilon(36.0, DELTA)
    lower, _, upper = prv_bounds(history, DELTA)
    assert lower <= exact and upper == math.inf
    with pytest.raises(DeltaUnreachable):
        PrvAccountant().epsilon(dpsgd(1.0, 1 / 36, 1), DELTA)
    prv_bounds.cache_clear()
    monkeypatch.setattr(prv_module, "overflow_mass", lambda history: 0.0)
    try:
        assert prv_bounds(history, DELTA)[2] < exact - 50  # what the slack prevents
    finally:
        prv_bounds.cache_clear()


def test_overflow_mass_is_zero_for_small_step_losses_and_counts_steps():
    assert prv_module.overflow_mass(((0.01, 0.1, 10_000), (1.0, 0.1, 40))) == 0.0
    one = prv_module.overflow_mass(((1.0, 1 / 33, 1),))
    assert 0.0 < one < 1e-5
    assert prv_module.overflow_mass(((1.0, 1 / 33, 3),)) == pytest.approx(3 * one, rel=1e-12)


def test_verifier_accepts_the_exact_epsilon_and_rejects_a_claim_below_the_lower_bound():
    """The PLD claim's independent check (PRV ε_lower) at ε ≈ 747: the exact ε, below every sound claim, passes;
    a claim 0.1 below the exact ε is below the lower bound and fails (before the fix both failed: lower bound ∞)."""
    counts = tally(dpsgd(1.0, 0.1, 12))[1]
    exact = gaussian_epsilon(math.sqrt(12) / 0.1, DELTA)
    passed = recheck_module._pld_vs_lower_bounds(counts, DELTA, exact, exact)
    assert passed.ok and math.isfinite(passed.value) and passed.value <= exact
    assert not recheck_module._pld_vs_lower_bounds(counts, DELTA, exact - 0.1, exact).ok


def test_verifier_falls_back_to_the_hockey_stick_bound_where_opacus_fails():
    """One step at σ = 0.025 (exact ε ≈ 970): Opacus's PRV discretisation fails (its CDF overflows on the step's
    whole law); the DP-SGD part is then checked against the tilted hockey-stick lower bound, a claim below which
    still fails (before: the check failed outright, rejecting every claim). The hockey-stick bound is tight there
    (its loss grid used to stop at e^709's overflow, capping it at 709.8)."""
    counts = tally(dpsgd(1.0, 0.025, 1))[1]
    exact = gaussian_epsilon(40.0, DELTA)
    passed = recheck_module._pld_vs_lower_bounds(counts, DELTA, exact, exact)
    assert passed.ok and "opacus PRV failed" in passed.name and exact - 0.05 <= passed.value <= exact
    assert not recheck_module._pld_vs_lower_bounds(counts, DELTA, 0.5 * passed.value, exact).ok
