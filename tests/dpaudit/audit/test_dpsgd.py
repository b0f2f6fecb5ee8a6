"""White-box DP-SGD audits (dpaudit.audit.dpsgd) and their ledger evidence (dpaudit.audit.evidence).

Statistical checks use seeded randomness and exact binomial tests at level ALPHA = 1e-3; their power against the
broken variants is stated where they are used. The end-to-end runs use one full-batch step (q = 1, N = 1), the
cheapest run whose f-DP family is still the Poisson-subsampled Gaussian of the run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from dpaudit.audit import dpsgd
from dpaudit.audit.dpsgd import CanaryInjector, DiracCanaries, audit_dpsgd, draw_canaries
from dpaudit.audit.evidence import audit_problems, audits
from dpaudit.audit.tradeoff import GaussianFamily
from dpaudit.certificate import charged_events
from dpaudit.errors import InvalidParameter
from dpaudit.ledger import read_records
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.report.model import build_report
from dpaudit.tuning.models import seeded_model
from dpaudit.verify import verify_bundle
from tests.dpaudit.audit._forge import add_less_noise, forger, with_evidence

ALPHA = 1e-3


def _rate_ok(successes: int, trials: int, p: float) -> bool:
    """The exact two-sided binomial test does not reject rate ``p`` at level ALPHA."""
    return stats.binomtest(successes, trials, p).pvalue > ALPHA


def test_membership_bits_are_fair_and_coordinates_distinct():
    """m = 4000 bits: a rate of 0.45 or 0.55 would be rejected with probability > 0.999 (6.3 standard deviations)."""
    canaries = draw_canaries(4000, 100_000, 1.0, SeededRandom(0))
    assert _rate_ok(int(canaries.members.sum()), 4000, 0.5)
    assert len(np.unique(canaries.coordinates)) == 4000
    assert canaries.coordinates.min() >= 0 and canaries.coordinates.max() < 100_000
    with pytest.raises(InvalidParameter, match="distinct coordinates"):
        draw_canaries(11, 10, 1.0, SeededRandom(0))


class _IgnoresMembership(CanaryInjector):
    """Broken: samples every canary, in or out."""

    def __call__(self, params):
        members = self.canaries.members
        object.__setattr__(self.canaries, "members", np.ones_like(members))
        try:
            super().__call__(params)
        finally:
            object.__setattr__(self.canaries, "members", members)


def _inject_steps(injector: CanaryInjector, steps: int, real_rows: int = 4) -> None:
    """Run ``steps`` injections on two parameters and check each appended row is C·e_{c_i} of a sampled canary."""
    params = [torch.nn.Parameter(torch.zeros(50, 40)), torch.nn.Parameter(torch.zeros(100))]
    for _ in range(steps):
        before = injector.sampled.copy()
        for p in params:
            p.grad_sample = torch.full((real_rows, *p.shape), 0.25)
        injector(params)
        chosen = np.flatnonzero(injector.sampled - before)
        flat = torch.cat([p.grad_sample.reshape(p.grad_sample.shape[0], -1) for p in params], dim=1)
        assert flat.shape[0] == real_rows + len(chosen)
        assert torch.all(flat[:real_rows] == 0.25)  # the batch's own rows are untouched
        rows = flat[real_rows:]
        expected = torch.zeros_like(rows)
        expected[torch.arange(len(chosen)), torch.as_tensor(injector.canaries.coordinates[chosen])] = 1.5
        assert torch.equal(rows, expected)


@pytest.mark.parametrize("broken", [None, "rate", "membership"])
def test_included_canaries_are_sampled_at_the_run_rate(broken):
    """Members are sampled at rate q per step, non-members never. 20 steps at q = 0.3 over ~1000 members: ~6000
    expected draws (sd 65); the broken rate 1.5q (+3000) and a sampler ignoring membership (~+6000 draws of
    non-members) are rejected with probability ~1."""
    canaries = draw_canaries(2000, 2100, 1.5, SeededRandom(1))
    q, steps = 0.3, 20
    kind = _IgnoresMembership if broken == "membership" else CanaryInjector
    injector = kind(canaries, 1.5 * q if broken == "rate" else q, torch.Generator().manual_seed(2))
    _inject_steps(injector, steps)
    members = canaries.members
    honest = (_rate_ok(int(injector.sampled[members].sum()), int(members.sum()) * steps, q)
              and not injector.sampled[~members].any())
    assert honest == (broken is None)


def _digits(view, rows: int):
    data = view.data("digits-train")
    return np.asarray(data.X[:rows], dtype=np.float32), (np.asarray(data.y[:rows]) >= 5).astype(np.float32)


def _audit(make_session, seed: int, noise_multiplier: float = 5.0, canaries: int = 300, forge=None):
    """One full-batch step (q = 1) of an MLP with 4,225 parameters on 64 digits with m white-box canaries.

    Few records and many parameters keep the real examples' clipped gradients in the canaries' coordinates small
    beside the noise (docs/audit.md, "Interference"), so that the broken run's signal shows. ``forge(session,
    view)``, when given, runs after the audit and before the session closes."""
    session = make_session(epsilon=3.0, delta=1e-5, seed=seed, protected=("digits-train",))
    view = session.for_plugin("dpaudit-audit", "0")
    X, y = _digits(view, 64)
    result = audit_dpsgd(view, seeded_model("mlp", X.shape[1], 64, seed), X, y, canaries=canaries, lr=0.5, epochs=1,
                         batch_size=len(X), max_grad_norm=1.0, noise_multiplier=noise_multiplier, delta=1e-5)
    if forge is not None:
        forge(session, view)
    session.close()
    return session, result


def test_honest_run_is_not_refuted_and_verify_recomputes_its_evidence(make_session):
    session, result = _audit(make_session, seed=3)
    report = result.report
    assert 0 < report.audit.claimed_epsilon < 3.0
    assert not report.refuted  # each test's false-positive rate is ≤ 5% (test_guesses.py); this seed is fixed
    assert report.fdp.assumes.startswith("poisson-subsampled gaussian (q=1, steps=1)")
    assert result.train.steps == 1 and result.train.n_parameters == 4225
    assert np.array_equal(result.sampled, result.canaries.members.astype(int))  # q = 1: every member, once
    verdict = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert verdict.valid, verdict.reasons
    assert any(c.name == "audit" and c.ok for c in verdict.checks)
    audited = next(q for q in build_report(session.run_dir)["summary"] if q["question"] == "Was the guarantee audited?")
    assert f"Steinke et al. ε_lb = {math.floor(report.steinke.epsilon * 1000) / 1000:.3f}" in audited["statements"][0]
    # the last-iterate heuristic (q = 1, N = 1: the Gaussian mechanism at μ = 1/σ) beside the bounds, labelled
    assert report.last_iterate == pytest.approx(GaussianFamily().epsilon(1 / 5.0, 1e-5), rel=1e-6)
    assert "last-iterate heuristic epsilon=" in report.statement()
    assert "last-iterate heuristic ε = " in audited["statements"][0] and "not a bound" in audited["statements"][0]

    records, problems = read_records(session.ledger_path)
    assert not problems
    charges = charged_events(records)
    problems, line = audit_problems(records, charges)
    assert problems == [] and line.startswith("1 audit: level 0.05; committed design")
    (seq, evidence), = audits(records)
    forged = forger(records, charges, seq, evidence)

    bits = evidence["members"]
    perfect = [1.0 if b == "1" else -1.0 for b in bits]  # scores forged to separate the members perfectly
    assert any("epsilon_lb_steinke recorded" in p for p in forged(scores=perfect))
    flipped = ("0" if bits[0] == "1" else "1") + bits[1:]
    assert any("match a commitment" in p for p in forged(members=flipped))
    assert any("epsilon_lb_fdp recorded" in p for p in forged(epsilon_lb_fdp=evidence["epsilon_lb_fdp"] + 1.0))
    assert any("is not the charged run's" in p for p in forged(sample_rate=0.5))
    # the design is committed too: a rule, level or delta changed after the scores are seen no longer matches
    assert any("match a commitment" in p for p in forged(rules=evidence["rules"][:1]))
    assert any("match a commitment" in p for p in forged(level=0.5))
    assert any("match a commitment" in p for p in forged(delta=0.1))
    assert any("epsilon_cert recorded" in p for p in forged(epsilon_cert=0.1))
    assert any("not the run's family" in p for p in forged(fdp_assumes="gaussian (mu-GDP)"))
    heuristic = evidence["epsilon_last_iterate_heuristic"]
    assert any("epsilon_last_iterate_heuristic recorded" in p
               for p in forged(epsilon_last_iterate_heuristic=heuristic * (1 + 1e-4)))
    # a coordinate beyond int64 or a non-list is reported, never an uncaught OverflowError / TypeError
    assert any("malformed" in p for p in forged(coordinates=[2**63, *evidence["coordinates"][1:]]))
    assert any("malformed" in p for p in forged(coordinates=None, rules="x"))


def test_a_forged_second_audit_record_is_invalid(make_session):
    """The reviewer's forgery: after the scores are seen, a second ``audit`` record reusing the run's commitment
    with one rule picked after the fact, level 0.99 and ε_cert 0.1 (the old verify called it VALID and the report
    printed "certified ε = 0.1")."""
    def forge(session, view):
        records, _ = read_records(session.ledger_path)
        (_, evidence), = audits(records)
        view.record_info({"audit": {**evidence, "rules": evidence["rules"][:1], "level": 0.99, "epsilon_cert": 0.1}})

    session, _ = _audit(make_session, seed=3, canaries=50, forge=forge)
    verdict = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert not verdict.valid
    audit = next(c for c in verdict.checks if c.name == "audit")
    assert not audit.ok and "match a commitment" in audit.detail
    assert "default rules" in audit.detail and "level 0.99" in audit.detail and "epsilon_cert recorded" in audit.detail

    records, _ = read_records(session.ledger_path)
    honest, forged = audits(records)
    again = {**forged[1], "rules": honest[1]["rules"], "level": honest[1]["level"],
             "epsilon_cert": honest[1]["epsilon_cert"]}  # the honest record again: its commitment is used twice
    twice = with_evidence(records, forged[0], again)
    assert any("already used" in p for p in audit_problems(twice, charged_events(records))[0])


def test_broken_run_with_an_eighth_of_the_noise_is_refuted(make_session, monkeypatch):
    """DP-SGD that charges σ but adds σ/8: μ = 8/σ = 1.6 per canary instead of 0.2, so both tests refute the
    certified ε ≈ 1 (their ceilings at m = 300 are ≈ 4) in every seed tried here."""
    add_less_noise(monkeypatch, 8)
    _, result = _audit(make_session, seed=4)
    report = result.report
    assert report.refuted
    assert report.steinke.epsilon > report.audit.claimed_epsilon
    assert report.fdp.epsilon > report.audit.claimed_epsilon


def test_oversized_canaries_are_clipped_like_examples(make_session, monkeypatch):
    """Canaries of norm 8C go through the same clipping as real examples: the run is not refuted (without clipping
    they would carry 8× the signal, as the broken run above)."""
    def big(canaries, n_parameters, magnitude, rng):
        drawn = draw_canaries(canaries, n_parameters, magnitude, rng)
        return DiracCanaries(drawn.coordinates, drawn.members, 8 * magnitude)

    monkeypatch.setattr(dpsgd, "draw_canaries", big)
    _, result = _audit(make_session, seed=5)
    assert result.canaries.magnitude == 8.0
    assert not result.report.refuted


@pytest.mark.parametrize(("change", "message"), [
    ({"lr": -1.0}, "lr must be"), ({"level": 0.0005}, "level must lie in"), ({"delta": 0.0}, "delta must lie in"),
    ({"noise_multiplier": 0.0}, "noise_multiplier"),
])
def test_bad_options_are_refused_before_the_commitment(make_session, change, message):
    """Everything the plan fixes is checked before anything is written (the old code wrote the commitment, then
    refused a bad learning rate: an orphaned commitment)."""
    session = make_session(epsilon=3.0, delta=1e-5, protected=("digits-train",))
    view = session.for_plugin("dpaudit-audit", "0")
    X, y = _digits(view, 64)
    run = {"canaries": 10, "lr": 0.5, "epochs": 1, "batch_size": 64, "max_grad_norm": 1.0, "noise_multiplier": 5.0,
           "delta": 1e-5, **change}
    with pytest.raises(InvalidParameter, match=message):
        audit_dpsgd(view, seeded_model("mlp", X.shape[1], 8, 0), X, y, **run)
    written = [r.type for r in read_records(session.ledger_path)[0]]
    assert written == ["open", "info"]                      # the data access only: no commitment, no charge
    session.close()


def test_a_run_certified_at_epsilon_0_is_audited_and_verifies(make_session):
    """σ = 10⁶, one full-batch step: the accountant certifies ε = 0 at δ = 10⁻⁵ (δ(0) ≈ 4·10⁻⁷ for μ = 10⁻⁶). The
    old code refused ε_cert = 0 after the charge (exit 2 from the CLI, an orphaned commitment); a claim of ε = 0 is
    refuted by any ε_lb > 0 and otherwise stands."""
    session, result = _audit(make_session, seed=3, noise_multiplier=1e6, canaries=50)
    assert result.report.audit.claimed_epsilon == 0.0 and not result.report.refuted
    verdict = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert verdict.valid, verdict.reasons
