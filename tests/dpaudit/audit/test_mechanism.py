"""The mechanism tester: a broken mechanism is refuted, the session's own Gaussian is not, bad input is refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpaudit.audit.guesses import GuessRule, sweep_bounds
from dpaudit.audit.mechanism import MechanismAudit, audit_mechanism, family_of, membership, per_test_level
from dpaudit.audit.tradeoff import ApproxDpFamily, GaussianFamily
from dpaudit.errors import InvalidParameter
from dpaudit.ledger import read_records
from dpaudit.mechanisms.gaussian import analytic_gaussian_sigma
from dpaudit.mechanisms.randomness import SeededRandom

DELTA = 1e-5


def broken_gaussian(seed: int):
    """Claims (1, δ)-DP for sensitivity 1 but adds σ/8 of the noise that claim needs (the deliberate bug)."""
    noise = np.random.default_rng(seed)
    sigma = analytic_gaussian_sigma(1.0, DELTA, 1.0)
    return lambda x: x + noise.normal(0.0, sigma / 8, x.shape)


def test_the_broken_mechanism_is_refuted_by_both_tests():
    """Stated power: the σ/8 mechanism is about 2.1-GDP (true ε ≈ 10 at δ = 1e-5); with m = 1000 each run's ε_lb is
    about 3 (Steinke) and 5 (f-DP, Gaussian family): docs/audit.md measures refutation in 200/200 seeds. Here 20
    seeds, each test must refute in at least 19."""
    refuted = {"steinke": 0, "fdp (gaussian)": 0, "fdp (epsilon, delta)": 0}
    for seed in range(20):
        gaussian = audit_mechanism(broken_gaussian(seed), MechanismAudit(1000, 1.0, DELTA, family=GaussianFamily()),
                                   SeededRandom(seed))
        free = audit_mechanism(broken_gaussian(seed), MechanismAudit(1000, 1.0, DELTA), SeededRandom(seed))
        refuted["steinke"] += gaussian.steinke.epsilon > 1.0
        refuted["fdp (gaussian)"] += gaussian.fdp.epsilon > 1.0
        refuted["fdp (epsilon, delta)"] += free.fdp.epsilon > 1.0
        assert gaussian.refuted and "REFUTED" in gaussian.statement()
    assert min(refuted.values()) >= 19, refuted


def test_the_sessions_gaussian_mechanism_shows_no_leakage_above_its_claim(make_session):
    """Audited through the session (charged, ledgered, released): ε_lb stays below the claimed ε = 1. Each test's
    false-refutation probability is at most 5% per run; the observed ε_lb are about 0.1."""
    with make_session(epsilon=5.0, delta=1e-4) as session:
        for seed in range(3):
            report = audit_mechanism(lambda x: session.gaussian(x, sensitivity=1.0, epsilon=1.0, delta=DELTA),
                                     MechanismAudit(1000, 1.0, DELTA), SeededRandom(seed))
            assert not report.refuted
            assert "no detectable leakage" in report.statement() and "private)" in report.statement()
            assert report.steinke.epsilon < report.ceiling_steinke and report.fdp.epsilon < report.ceiling_fdp
    records, problems = read_records(session.ledger_path)
    assert not problems and [r.type for r in records].count("release") == 3


def test_membership_is_reproducible_and_fair():
    first, again = membership(10_000, SeededRandom(4)), membership(10_000, SeededRandom(4))
    assert np.array_equal(first, again) and first.dtype == bool
    assert abs(first.mean() - 0.5) < 0.02          # 4 standard deviations (0.005 each)


def test_the_default_family_assumes_nothing():
    audit = MechanismAudit(100, 1.0, DELTA)
    assert audit.family == ApproxDpFamily(DELTA) and len(audit.rules) > 1


def test_bad_scores_and_parameters_are_refused():
    with pytest.raises(InvalidParameter, match="100 finite scores"):
        audit_mechanism(lambda x: x[:50], MechanismAudit(100, 1.0, DELTA), SeededRandom(0))
    with pytest.raises(InvalidParameter, match="finite scores"):
        audit_mechanism(lambda x: x + np.inf, MechanismAudit(100, 1.0, DELTA), SeededRandom(0))
    with pytest.raises(InvalidParameter, match="delta"):
        MechanismAudit(100, 1.0, 0.0)
    with pytest.raises(InvalidParameter, match="rules"):
        MechanismAudit(100, 1.0, DELTA, rules=())
    with pytest.raises(InvalidParameter, match="GuessRule"):
        MechanismAudit(100, 1.0, DELTA, rules=[(5, 5)])


def test_rules_given_as_a_list_are_kept_as_a_tuple():
    audit = MechanismAudit(100, 1.0, DELTA, rules=[GuessRule(5, 5), GuessRule(10, 10)])
    assert audit.rules == (GuessRule(5, 5), GuessRule(10, 10))
    report = audit_mechanism(lambda x: x, audit, SeededRandom(1))       # scores = membership: every guess right
    assert report.steinke.epsilon == pytest.approx(report.ceiling_steinke)


def test_each_test_runs_at_half_the_level_so_the_verdict_holds_at_the_stated_confidence():
    """``refuted`` fires when either test rejects: Bonferroni over the two tests runs each at level/2 (the old code
    ran both at the full level, so the verdict's false-refutation rate could reach 2 × level)."""
    audit = MechanismAudit(200, 1.0, DELTA, level=0.05)
    report = audit_mechanism(lambda x: x, audit, SeededRandom(2))  # every guess right: ε_lb depends on the level
    steinke, fdp = sweep_bounds(membership(200, SeededRandom(2)).astype(float), membership(200, SeededRandom(2)),
                                audit.rules, delta=DELTA, family=audit.family, level=per_test_level(0.05))
    assert per_test_level(0.05) == 0.025
    assert (report.steinke.epsilon, report.fdp.epsilon) == (steinke.epsilon, fdp.epsilon)
    assert report.steinke.level == 0.025
    assert "95% confidence overall (each test at 97.5%)" in report.statement()


def test_the_statement_rounds_lower_bounds_down_and_the_claim_up():
    report = audit_mechanism(lambda x: x, MechanismAudit(100, 1.0, DELTA), SeededRandom(1))
    near = dataclasses.replace(report, steinke=dataclasses.replace(report.steinke, epsilon=0.99996),
                               audit=dataclasses.replace(report.audit, claimed_epsilon=1.0000001))
    assert "Steinke=0.999 " in near.statement()  # nearest rounding printed 1.000, above the bound
    assert "claimed epsilon=1.00001 " in near.statement()  # :g printed 1, below the claim


def test_a_family_the_mechanism_does_not_belong_to_is_refused():
    assert family_of("gaussian", "gaussian", DELTA) == GaussianFamily()
    assert family_of("laplace", "epsilon-delta", DELTA) == ApproxDpFamily(DELTA)
    with pytest.raises(InvalidParameter, match="does not belong to the gaussian family"):
        family_of("laplace", "gaussian", DELTA)
    with pytest.raises(InvalidParameter, match="unknown mechanism"):
        family_of("exponential", "epsilon-delta", DELTA)
