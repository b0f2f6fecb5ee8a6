"""The verifier's recheck: honest claims pass, lowered claims and a broken accountant are caught."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.accounting import charges, get_accountant, hockey_stick, recheck
from dpaudit.accounting import pld as pld_module
from dpaudit.accounting import rdp as rdp_module
from dpaudit.accounting.tightest import member_name
from dpaudit.cli import main
from dpaudit.errors import AccountingError, InvalidParameter
from dpaudit.events import ComposedEvent
from dpaudit.verify import verify_bundle

from ._events import (
    PLD2_CLAIM,
    PLD2_DELTA,
    PLD2_VERSION,
    dpsgd,
    dpsgd_without_replacement,
    exponential,
    gaussian,
    laplace,
    pld2_event,
)

recheck_module = importlib.import_module("dpaudit.accounting.recheck")  # the package exports the function by that name

DPSGD = dpsgd(0.02, 1.0, 400)
PURE = ComposedEvent(events=(laplace(0.1),) * 30 + (exponential(0.2),))
CASES = [("rdp", DPSGD), ("pld", DPSGD), ("prv", DPSGD), ("rdp", PURE), ("pld", PURE), ("basic", PURE),
         ("advanced", PURE), ("rdp", ComposedEvent(events=(laplace(0.3), gaussian(3.0)))),
         ("rdp", dpsgd_without_replacement(100, 5000, 1.1, 100))]


@pytest.mark.parametrize(("name", "event"), CASES)
def test_honest_claim_passes_and_lowered_claim_fails(name, event):
    eps = get_accountant(name).epsilon(event, 1e-5)
    good = recheck(name, event, 1e-5, eps)
    assert good.ok, good.reason
    assert good.method == name and good.recomputed == eps
    bad = recheck(name, event, 1e-5, 0.9 * eps)
    assert not bad.ok and "<" in bad.reason


def test_independent_values_are_lower_bounds_for_dpsgd():
    pld = recheck("pld", DPSGD, 1e-5, get_accountant("pld").epsilon(DPSGD, 1e-5))
    assert pld.independent == "opacus PRV eps_lower" and 0 < pld.independent_value <= pld.claimed
    prv = recheck("prv", DPSGD, 1e-5, get_accountant("prv").epsilon(DPSGD, 1e-5))
    assert prv.independent.startswith("dp_accounting PLD optimistic") and prv.independent_value <= prv.claimed


def test_tightest_claim_resolves_to_its_member():
    eps, source = get_accountant("tightest").epsilon_with_source(DPSGD, 1e-5)
    result = recheck("tightest", DPSGD, 1e-5, eps)
    assert result.ok and result.method == source


def test_no_independent_implementation_is_said_plainly():
    """Exponential-mechanism leaves alone: no lower bound models them (bounded range is tighter than RR)."""
    selections = ComposedEvent(events=(exponential(0.2),) * 5)
    result = recheck("pld", selections, 1e-5, get_accountant("pld").epsilon(selections, 1e-5))
    assert result.ok and result.independent == "none" and result.independent_value == 0.0
    assert "no independent implementation" in result.reason


def test_broken_rdp_curve_is_caught_by_the_independent_implementation(monkeypatch):
    """A deliberately broken RDP accountant (curves halved) recomputes its own claim but disagrees with
    dp_accounting's RDP on the shared integer orders."""
    original = rdp_module.rdp_curve

    def halved(spec):
        curve, at_inf = original(spec)
        return np.asarray(curve) / 2, at_inf / 2

    monkeypatch.setattr(rdp_module, "rdp_curve", halved)
    claimed = get_accountant("rdp").epsilon(DPSGD, 1e-5)
    result = recheck("rdp", DPSGD, 1e-5, claimed)
    assert result.recomputed == claimed
    assert not result.ok and "DISAGREES" in result.reason


def test_bad_inputs():
    with pytest.raises(InvalidParameter):
        recheck("moments", PURE, 1e-5, 1.0)
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(InvalidParameter):
            recheck("rdp", PURE, 1e-5, bad)
    with pytest.raises(InvalidParameter):
        recheck("rdp", PURE, 1.0, 1.0)


def test_pld_claim_on_a_mixed_composition_is_checked_against_its_dpsgd_part():
    """A PLD claim on Laplace + DP-SGD is compared with PRV's lower bound of the DP-SGD part; 10 % below fails."""
    event = ComposedEvent(events=(laplace(0.1), dpsgd(0.01, 1.0, 300)))
    honest = get_accountant("pld").epsilon(event, 1e-5)
    ok = recheck("pld", event, 1e-5, honest)
    assert ok.ok and "sub-composition" in ok.independent
    part_lower = ok.independent_value
    assert 0 < part_lower <= honest
    forged = recheck("pld", event, 1e-5, part_lower * 0.9)
    assert not forged.ok


def _probable(event, failure=1e-6):
    """The event with a sensitivity that holds only with probability 1 − failure (an (ε, δ) unit)."""
    return dataclasses.replace(event, sensitivity=dataclasses.replace(event.sensitivity, failure_probability=failure))


def test_pld_claim_on_epsilon_delta_units_is_checked_against_an_independent_lower_bound(monkeypatch):
    """(ε, δ) units + Laplace + a discrete Gaussian: the tilted hockey-stick lower bound checks the PLD claim. A PLD
    that under-states (simulated: dp_accounting's ε read at 10 x δ, so the recomputation agrees with the forged
    claim) is caught; before this check the claim had no independent recheck at all."""
    event = ComposedEvent(events=(_probable(laplace(0.5)),) * 3 + (laplace(0.3),) * 10 + (gaussian(3.0),) * 4)
    honest = recheck("pld", event, 1e-5, get_accountant("pld").epsilon(event, 1e-5))
    assert honest.ok and honest.independent.startswith("tilted hockey-stick lower bound")
    assert honest.claimed - 0.05 <= honest.independent_value <= honest.claimed
    original = pld_module.epsilon_from_pld
    monkeypatch.setattr(pld_module, "epsilon_from_pld", lambda pld, counts, delta: original(pld, counts, 10 * delta))
    forged_value = get_accountant("pld").epsilon(event, 1e-5)
    forged = recheck("pld", event, 1e-5, forged_value)
    assert forged.recomputed == forged_value and not forged.ok and "DISAGREES" in forged.reason


def test_without_replacement_claim_is_checked_against_a_realised_lower_bound(monkeypatch):
    """The without-replacement RDP curve is dp_accounting's on both sides of the integer-order comparison, so a
    wrong curve (simulated: divided by 1000) agrees with itself; the lower bound from the pair of neighbouring data sets
    that realises the mechanism catches it. Honest claims pass."""
    event = dpsgd_without_replacement(100, 5000, 1.1, 100)
    honest = recheck("rdp", event, 1e-5, get_accountant("rdp").epsilon(event, 1e-5))
    assert honest.ok and "without-replacement part" in honest.independent
    target = dp_accounting.rdp.rdp_privacy_accountant
    original = target._compute_rdp_sample_wor_gaussian
    def quartered(q, noise_multiplier, orders):
        return original(q, noise_multiplier, orders) / 1000

    monkeypatch.setattr(target, "_compute_rdp_sample_wor_gaussian", quartered)
    rdp_module.rdp_curve.cache_clear()
    try:
        forged_value = get_accountant("rdp").epsilon(event, 1e-5)
        forged = recheck("rdp", event, 1e-5, forged_value)
    finally:
        rdp_module.rdp_curve.cache_clear()
    assert forged_value < 1.0  # against a realised lower bound of 1.12
    assert forged.recomputed == forged_value and not forged.ok and "DISAGREES" in forged.reason


@pytest.mark.parametrize("name", ["pld", "tightest"])
def test_the_recheck_describes_each_charge_once(monkeypatch, name) -> None:
    """40 separately built charges (as read from a ledger): the tally and the PLD fold of the recomputation (on both
    grids) share one description of each (they described each three times before); the verdict is the same as with
    three descriptions (the deliberately broken variant of the count: no kept descriptions)."""
    event = ComposedEvent(events=tuple(laplace(0.01 * (1 + i % 4)) for i in range(40)))
    charges.LAST_TALLY.clear()
    honest = get_accountant(name).epsilon(event, 1e-5)
    calls: list = []
    original = charges.describe
    monkeypatch.setattr(charges, "describe", lambda unit: calls.append(unit) or original(unit))
    charges.LAST_TALLY.clear()
    kept = recheck(name, event, 1e-5, honest)
    assert len(calls) == 40 and kept.ok
    calls.clear()
    monkeypatch.setattr(recheck_module, "descriptions_kept", contextlib.nullcontext)
    charges.LAST_TALLY.clear()
    assert recheck(name, event, 1e-5, honest) == kept and len(calls) == 40 * 3  # the tally, the fold on two grids


def test_descriptions_are_kept_only_inside_the_block() -> None:
    event = laplace(0.1)
    with charges.descriptions_kept():
        first = charges.event_counts(event)
        assert charges.event_counts(event) == first and charges._KEPT.get().alive == [event]
    assert charges._KEPT.get() is None


@pytest.mark.parametrize("recorded", [PLD2_VERSION, f"tightest/1 [rdp/1 (opacus 1.6.0); {PLD2_VERSION}; basic/1]"])
def test_a_pld2_claim_is_rechecked_with_the_fold_it_recorded(recorded):
    """The reviewer's defect: a claim closed under ``pld/2`` (frozen from the old code) is below the ``pld/3``
    recomputation by more than the tolerance, so it failed; recomputed with its recorded fold it is exact."""
    assert not recheck("pld", pld2_event(), PLD2_DELTA, PLD2_CLAIM).ok  # with the current fold
    result = recheck("pld", pld2_event(), PLD2_DELTA, PLD2_CLAIM, recorded)
    assert result.ok, result.reason
    assert result.recomputed == PLD2_CLAIM
    assert not recheck("pld", pld2_event(), PLD2_DELTA, PLD2_CLAIM * (1 - 1e-8), recorded).ok


def test_a_claim_whose_recorded_fold_is_unknown_fails_naming_it():
    with pytest.raises(AccountingError, match="pld/1"):
        recheck("pld", pld2_event(), PLD2_DELTA, PLD2_CLAIM, "pld/1 (interval 0.0002, pessimistic; dp-accounting)")


# --- a lower bound too large to compute: reported by name, never a traceback, never a weaker check ------------------

def test_a_lower_bound_too_large_to_compute_is_reported_not_rechecked(monkeypatch) -> None:
    """Three discrete Laplace counts (Δ = 1025 grid units) with the leaf limit set to 1000: the pld claim is
    recomputed, its lower bound is refused by name, and the recheck fails saying so (not as a disagreement)."""
    monkeypatch.setattr(hockey_stick, "MAX_LEAF_POINTS", 1000)
    counts = ComposedEvent(events=(laplace(0.5),) * 3)
    claimed = get_accountant("pld").epsilon(counts, 1e-6)
    result = recheck("pld", counts, 1e-6, claimed)
    assert not result.ok and result.recomputed <= claimed and result.independent == "failed"
    assert "NOT RECHECKED" in result.reason and "MAX_LEAF_POINTS = 1000" in result.reason
    assert "DISAGREES" not in result.reason


def _laplace_run(make_session, grid: float | None) -> Path:
    with make_session(epsilon=5.0, delta=1e-6) as s:
        for _ in range(3):
            s.laplace(4.0, sensitivity=1.0, epsilon=0.5, label="count", grid=grid)
    return s.run_dir


def _recompose(run_dir: Path) -> tuple[bool, str]:
    (check,) = [c for c in verify_bundle(run_dir, allow_not_for_release=True).checks if c.name == "recompose"]
    return check.ok, check.detail


def _fails_naming(run_dir: Path, *needles: str) -> None:
    """The recompose check fails naming every needle, and ``dpaudit verify`` exits 1 (not a traceback) naming them."""
    ok, detail = _recompose(run_dir)
    assert not ok and all(needle in detail for needle in needles), detail
    result = CliRunner().invoke(main, ["verify", str(run_dir), "--allow-not-for-release"])
    assert result.exit_code == 1 and not isinstance(result.exception, Exception)  # exit 1, not a traceback
    assert all(needle in result.output for needle in needles), result.output


def test_dpaudit_verify_reports_a_lower_bound_it_cannot_compute(make_session, monkeypatch) -> None:
    run_dir = _laplace_run(make_session, None)
    assert _recompose(run_dir)[0]
    monkeypatch.setattr(hockey_stick, "MAX_LEAF_POINTS", 1000)
    _fails_naming(run_dir, "NOT RECHECKED", "MAX_LEAF_POINTS = 1000")


def test_dpaudit_verify_refuses_a_pld_claim_on_a_laplace_leaf_too_fine_to_enumerate(make_session) -> None:
    """A discrete Laplace on a grid 2³⁰ times finer than its sensitivity (Δ = 2³⁰ + 1 grid units; before the limits
    the PLD and the lower bound each built arrays of 2³⁰ entries, gigabytes or a MemoryError): the session certifies
    it with an accountant that does not enumerate Δ, and a certificate edited to say the PLD attained the claim fails
    verification naming the limit."""
    run_dir = _laplace_run(make_session, 2.0**-30)
    cert = json.loads((run_dir / "certificate.json").read_text())
    assert member_name(cert["claim"]["attained_by"]) != "pld"
    assert _recompose(run_dir)[0]
    cert["claim"]["attained_by"] = "pld"
    (run_dir / "certificate.json").write_text(json.dumps(cert))
    _fails_naming(run_dir, "recomposition failed", "MAX_LAPLACE_SENSITIVITY = 4194304")


def test_a_laplace_leaf_too_fine_for_the_optimistic_pld_is_not_rechecked(make_session, monkeypatch) -> None:
    """The prv claim's independent check (dp_accounting's optimistic PLD) models the discrete Laplace exactly, so a
    Laplace leaf above MAX_LAPLACE_SENSITIVITY is a leaf too large for it, not one it does not model: with a prv
    accountant that takes the tally (Opacus's takes only the subsampled Gaussian, so this stands for any extension)
    the claim is NOT RECHECKED naming the limit. It was passed over as "no independent implementation" (the limit
    was checked with the unmodelled kinds, before the re-check's own sizing) and verify called the run valid."""
    run_dir = _laplace_run(make_session, 2.0**-30)
    cert = json.loads((run_dir / "certificate.json").read_text())
    cert["claim"]["attained_by"] = "prv"
    (run_dir / "certificate.json").write_text(json.dumps(cert))
    prv_class = type(get_accountant("prv"))
    monkeypatch.setattr(prv_class, "_unsupported_reason", lambda self, counts: None)
    monkeypatch.setattr(prv_class, "_epsilon_for", lambda self, counts, delta: get_accountant("basic")
                        .epsilon_of_tally(counts, delta))
    _fails_naming(run_dir, "NOT RECHECKED", "optimistic PLD not computed", "MAX_LAPLACE_SENSITIVITY = 4194304")


# --- extreme but legal charges: verify rechecks them, never a traceback, never a genuine claim refused ---------------

def test_dpaudit_verify_refuses_a_pld_claim_on_a_discrete_gaussian_too_fine_to_build(make_session) -> None:
    """Two discrete Gaussians on a grid 2³⁰ times finer than their sensitivity (σ about 10¹⁰ grid units): before the
    limit the session's close died allocating 1.74 TiB. The session certifies with an accountant that does not
    enumerate the noise, and a certificate edited to say the PLD attained the claim fails naming the limit."""
    with make_session(epsilon=5.0, delta=1e-6) as s:
        for _ in range(2):
            s.gaussian(4.0, sensitivity=1.0, epsilon=0.5, delta=1e-7, label="g", grid=2.0**-30)
    cert = json.loads((s.run_dir / "certificate.json").read_text())
    assert member_name(cert["claim"]["attained_by"]) != "pld"
    assert _recompose(s.run_dir)[0]
    cert["claim"]["attained_by"] = "pld"
    (s.run_dir / "certificate.json").write_text(json.dumps(cert))
    ok, detail = _recompose(s.run_dir)
    assert not ok and "recomposition failed" in detail and "MAX_DISCRETE_GAUSSIAN_SUPPORT = 4194304" in detail
    result = CliRunner().invoke(main, ["verify", str(s.run_dir), "--allow-not-for-release"])
    assert result.exit_code == 1 and not isinstance(result.exception, Exception)
    assert "MAX_DISCRETE_GAUSSIAN_SUPPORT" in result.output


def test_dpaudit_verify_rechecks_an_advanced_claim_beyond_exp_overflow(make_session) -> None:
    """Two exponential-mechanism releases of ε = 710 accounted by advanced composition: the independent form
    computed exp(710) and verify exited 2 with an OverflowError; ε·tanh(ε/2) is the same term without it."""
    with make_session(epsilon=5000.0, delta=1e-6, accountant="advanced") as s:
        for _ in range(2):
            s.exponential([0.0, 1.0], sensitivity=1.0, epsilon=710.0, label="e")
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    assert report.claim["epsilon"] == pytest.approx(1420.0)
    assert "independent advanced composition 1420" in _recompose(s.run_dir)[1]


@pytest.mark.parametrize("epsilon", [60.0, 745.0, 800.0, 1e4])
def test_dpaudit_verify_rechecks_an_rdp_claim_on_huge_pure_releases(make_session, epsilon) -> None:
    """Two exponential releases of ε plus three Gaussians, accounted by RDP: dp_accounting's randomized-response
    curve underflowed above ε ≈ 745 to an infinite curve and verify called the genuine claim DISAGREES (independent
    320012 at ε = 800); capped at ε (Mironov 2017, Prop. 3) it agrees at every ε, and stays a curve at most ε."""
    with make_session(epsilon=3e4, delta=1e-6, accountant="rdp") as s:
        for _ in range(2):
            s.exponential([0.0, 1.0], sensitivity=1.0, epsilon=epsilon, label="e")
        for _ in range(3):
            s.gaussian(4.0, sensitivity=1.0, epsilon=0.5, delta=1e-7, label="g")
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons
    ok, detail = _recompose(s.run_dir)
    assert ok and "(agrees)" in detail
    orders = [a for a in rdp_module.ORDERS if a.is_integer()]
    curve = recheck_module._dpa_curve(charges.PureSpec(epsilon), orders)
    assert np.all(np.isfinite(curve)) and np.all(curve <= epsilon)


def test_dpaudit_verify_bounds_a_wide_span_on_a_coarser_grid(make_session, monkeypatch) -> None:
    """A Laplace release of ε = 12 and one randomized response (the default grid 10⁻³ needs 24 002 points for the
    Laplace leaf) with the leaf limit set to 10⁴: the genuine claim was NOT RECHECKED (a small-scale copy of one
    Laplace of ε = 120 and 2000 randomized responses at the real limit); now the bound is computed on a coarser
    grid, says so, and the claim verifies."""
    with make_session(epsilon=50.0, delta=1e-6) as s:
        s.laplace(4.0, sensitivity=1.0, epsilon=12.0, label="l")
        s.randomized_response(True, epsilon=0.3, label="r")
    monkeypatch.setattr(hockey_stick, "MAX_LEAF_POINTS", 10_000)
    ok, detail = _recompose(s.run_dir)
    assert ok and "coarsened to 0.0024" in detail and "(agrees)" in detail, detail
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_dpaudit_verify_reports_a_composed_law_it_cannot_hold(make_session, monkeypatch) -> None:
    """Three discrete Laplace releases with the composed-array limit set to 100: the lower bound is refused by name
    before its convolution is allocated (a huge count of releases reached a MemoryError, which verify does not
    catch: exit 2), and verify fails with exit 1 saying NOT RECHECKED."""
    run_dir = _laplace_run(make_session, None)
    monkeypatch.setattr(hockey_stick, "MAX_COMPOSED_POINTS", 100)
    _fails_naming(run_dir, "NOT RECHECKED", "MAX_COMPOSED_POINTS = 100")


def test_a_lower_bound_of_zero_is_called_uninformative(monkeypatch) -> None:
    """A lower bound of 0 holds for every claim: the recheck still passes (0 is a valid bound) but says the bound
    checked nothing, instead of a silent "agrees"."""
    counts = ComposedEvent(events=(laplace(0.5),) * 3)
    claimed = get_accountant("pld").epsilon(counts, 1e-6)
    monkeypatch.setattr(recheck_module, "epsilon_lower_bound",
                        lambda rest, delta: hockey_stick.LowerBound(0.0, delta, 1e-3, 0.0, 3, 0))
    result = recheck("pld", counts, 1e-6, claimed)
    assert result.ok and "UNINFORMATIVE" in result.reason and "(agrees)" in result.reason
    monkeypatch.undo()
    assert "UNINFORMATIVE" not in recheck("pld", counts, 1e-6, claimed).reason


def test_a_prv_claim_whose_optimistic_pld_is_too_large_is_not_rechecked(monkeypatch) -> None:
    """The prv claim's independent check builds dp_accounting's optimistic PLD on a grid twice as fine as the PLD
    accountant's: its leaves are sized on that grid, and one above the limit is NOT RECHECKED by name (σ = 0.03
    took 43 s and 1 GB on the coarser grid alone)."""
    claimed = get_accountant("prv").epsilon(DPSGD, 1e-5)
    monkeypatch.setattr(pld_module, "MAX_CONNECT_DOTS_POINTS", 1000)
    result = recheck("prv", DPSGD, 1e-5, claimed)
    assert not result.ok and "NOT RECHECKED" in result.reason
    assert "optimistic PLD not computed on the interval 0.0001" in result.reason
    assert "MAX_CONNECT_DOTS_POINTS = 1000" in result.reason


def test_dpaudit_verify_reports_an_out_of_memory_recheck_by_name(make_session, monkeypatch) -> None:
    """The independent bound's arrays are limited one by one; the sum of many large leaves is not (a session of 100
    Gaussians and 1,900 Laplace releases needed 3 GB at the recheck). Running out of memory there is NOT RECHECKED
    (exit 1, named), not a MemoryError ending verify with exit 2."""
    run_dir = _laplace_run(make_session, None)

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(importlib.import_module("dpaudit.accounting.recheck"), "epsilon_lower_bound", exhausted)
    _fails_naming(run_dir, "NOT RECHECKED", "out of memory")


def test_a_gaussian_beyond_its_truncation_bound_is_not_the_plds_and_its_session_closes(make_session) -> None:
    """A Gaussian release of ε = 300 at δ = 1e-6 on the default grid (Δ = 1025 grid units against a truncation bound
    T = 613) composed with a Laplace: nearly all of its PLD's mass is at an infinite loss, which broke the PLD's
    composition (an IndexError at the session's close: no certificate). The PLD refuses the leaf by name; the session
    certifies with the other accountants and verifies."""
    with make_session(epsilon=5000.0, delta=1e-5) as s:
        s.gaussian(4.0, sensitivity=1.0, epsilon=300.0, delta=1e-6, label="g")
        s.laplace(4.0, sensitivity=1.0, epsilon=1.0, label="l")
    claim = json.loads((s.run_dir / "certificate.json").read_text())["claim"]
    assert member_name(claim["attained_by"]) != "pld"
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid
