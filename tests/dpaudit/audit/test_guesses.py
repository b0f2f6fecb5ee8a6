"""Scores → guesses, the Bonferroni-corrected sweep (an uncorrected sweep manufactures leakage) and the ceilings."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpaudit.audit.guesses import FDP, STEINKE, GuessRule, ceilings, count_guesses, default_rules, sweep_bounds
from dpaudit.audit.steinke import GuessCounts
from dpaudit.audit.tradeoff import GaussianFamily
from dpaudit.errors import InvalidParameter


def test_count_guesses_by_hand():
    scores = np.array([0.9, -1.0, 0.5, 2.0, -0.3, 0.0])
    members = np.array([True, False, False, True, True, False])
    # top 2 (scores 2.0, 0.9): both in -> 2 right; bottom 2 (-1.0, -0.3): out, in -> 1 right
    assert count_guesses(scores, members, GuessRule(2, 2)) == GuessCounts(6, 4, 3)
    assert count_guesses(scores, members, GuessRule(3, 0)) == GuessCounts(6, 3, 2)
    with pytest.raises(InvalidParameter, match="7 guesses"):
        count_guesses(scores, members, GuessRule(4, 3))


def test_default_rules_are_symmetric_and_span_10_to_m():
    rules = default_rules(1000)
    totals = [r.guess_in + r.guess_out for r in rules]
    assert totals[0] == 10 and totals[-1] == 1000 and totals == sorted(set(totals))
    assert all(abs(r.guess_in - r.guess_out) <= 1 for r in rules)
    assert default_rules(3) == (GuessRule(2, 1),)


def test_uncorrected_sweep_manufactures_leakage_and_the_bonferroni_sweep_does_not():
    """Null setting: scores independent of membership (the mechanism is 0-DP), so any ε_lb > 0 is a false positive.

    Stated power: 400 seeded runs, m = 1000, the 9 default rules. The corrected sweep's false-positive rate is at
    most 5% by the union bound, so P[more than 34 false positives] < 1e-3 if the code is right. The uncorrected
    sweep (the deliberately broken variant) has a rate near 15% here (measured: 62/400 for Steinke), so P[at most
    34] is below 1e-5: the test tells them apart."""
    rng = np.random.default_rng(11)
    m, runs = 1000, 400
    rules = default_rules(m)
    limit = stats.binom.ppf(1 - 1e-3, runs, 0.05)
    positives = {("bonferroni", STEINKE): 0, ("bonferroni", FDP): 0, ("none", STEINKE): 0, ("none", FDP): 0}
    for _ in range(runs):
        members, scores = rng.integers(0, 2, m).astype(bool), rng.normal(size=m)
        for correction in ("bonferroni", "none"):
            for bound in sweep_bounds(scores, members, rules, delta=1e-5, family=GaussianFamily(),
                                      correction=correction):
                positives[correction, bound.test] += bound.epsilon > 0
    assert positives["bonferroni", STEINKE] <= limit and positives["bonferroni", FDP] <= limit
    assert positives["none", STEINKE] > limit and positives["none", FDP] > limit


def test_sweep_reports_the_rule_behind_the_bound():
    rng = np.random.default_rng(3)
    members = rng.integers(0, 2, 2000).astype(bool)
    scores = members + rng.normal(0, 0.5, 2000)
    rules = default_rules(2000)
    steinke, fdp = sweep_bounds(scores, members, rules, delta=1e-5, family=GaussianFamily())
    assert steinke.epsilon > 1 and fdp.epsilon > steinke.epsilon
    assert steinke.tried == fdp.tried == len(rules) and steinke.correction == "bonferroni"
    assert steinke.counts == count_guesses(scores, members, steinke.rule)
    assert fdp.assumes == GaussianFamily().name and steinke.assumes.startswith("none")


def test_a_perfect_attack_reaches_the_ceiling_and_nothing_exceeds_it():
    """scores = membership bits: every guess right for every rule that fits, so ε_lb equals the ceiling."""
    rng = np.random.default_rng(5)
    members = rng.integers(0, 2, 1000).astype(bool)
    rules = default_rules(400)          # at most 200 "in" and 200 "out": always all right with ~500 of each
    top = ceilings(1000, rules, delta=1e-5, family=GaussianFamily())
    steinke, fdp = sweep_bounds(members.astype(float), members, rules, delta=1e-5, family=GaussianFamily())
    assert (steinke.epsilon, fdp.epsilon) == pytest.approx(top, rel=1e-9)
    noisy = sweep_bounds(members + rng.normal(0, 0.3, 1000), members, rules, delta=1e-5, family=GaussianFamily())
    assert noisy[0].epsilon <= top[0] and noisy[1].epsilon <= top[1]


def test_bad_inputs_are_refused():
    rules = default_rules(10)
    with pytest.raises(InvalidParameter, match="finite score"):
        sweep_bounds(np.array([np.nan] * 10), np.zeros(10, bool), rules, delta=1e-5, family=GaussianFamily())
    with pytest.raises(InvalidParameter, match="correction"):
        sweep_bounds(np.zeros(10), np.zeros(10, bool), rules, delta=1e-5, family=GaussianFamily(), correction="x")
    with pytest.raises(InvalidParameter, match="at least one guess"):
        GuessRule(0, 0)
