"""Scores → guesses → ε_lb for both one-run tests, with a corrected sweep over the number of guesses.

The auditor ranks the m canaries by score (higher = more likely included), guesses "in" for the ``guess_in``
highest, "out" for the ``guess_out`` lowest and abstains on the rest (Steinke et al. 2023, Sec. 3; Mahloujifar et
al. 2025, Sec. 4). Ties are broken by canary index, which is independent of the membership bits.

Sweeping the number of guesses and keeping the best ε_lb tests many hypotheses on one outcome: the maximum of K
p-values is not a p-value, and an uncorrected sweep reports leakage where there is none (measured in
tests/dpaudit/audit/test_guesses.py and docs/audit.md). :func:`sweep_bounds` therefore runs every rule at level/K
(Bonferroni): if the claim holds, each rule rejects with probability < level/K, so some rule does with probability
< level. ``correction="none"`` reproduces the papers' uncorrected reporting and is labelled invalid wherever shown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpaudit.audit.fdp import fdp_theta
from dpaudit.audit.steinke import GuessCounts, steinke_epsilon
from dpaudit.audit.tradeoff import Family
from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count

#: the two tests, as named in reports
STEINKE = "steinke"
FDP = "fdp"
#: sweep corrections: Bonferroni (valid) or none (the papers' reporting; not a valid lower bound)
CORRECTIONS = ("bonferroni", "none")


@dataclass(frozen=True)
class GuessRule:
    """Guess "in" for the ``guess_in`` highest scores and "out" for the ``guess_out`` lowest."""

    guess_in: int
    guess_out: int

    def __post_init__(self) -> None:
        check_count("guess_in", self.guess_in, minimum=0)
        check_count("guess_out", self.guess_out, minimum=0)
        if self.guess_in + self.guess_out == 0:
            raise InvalidParameter("a guess rule must make at least one guess")


@dataclass(frozen=True)
class SweepBound:
    """One test's result over a sweep.

    Attributes:
        test: :data:`STEINKE` or :data:`FDP`.
        assumes: what the ε_lb assumes about the mechanism ("none" for the (ε, δ) tests, else the f-DP family).
        epsilon: ε_lb, the best over the rules tried.
        counts: the guesses behind it (None when ε_lb = 0 for every rule).
        rule: the rule behind it (None likewise).
        level: the overall significance level.
        tried: the number of rules K (each was run at level/K under Bonferroni).
        correction: "bonferroni" or "none".
    """

    test: str
    assumes: str
    epsilon: float
    counts: GuessCounts | None
    rule: GuessRule | None
    level: float
    tried: int
    correction: str


def count_guesses(scores: np.ndarray, members: np.ndarray, rule: GuessRule) -> GuessCounts:
    """The guesses ``rule`` makes on ``scores`` and how many are right given the membership bits ``members``."""
    return outcomes(scores, members, [rule])[0]


def outcomes(scores: np.ndarray, members: np.ndarray, rules: Sequence[GuessRule]) -> list[GuessCounts]:
    """:func:`count_guesses` for every rule, sorting the scores once."""
    m = len(scores)
    worst = max(rule.guess_in + rule.guess_out for rule in rules)
    if worst > m:
        raise InvalidParameter(f"{worst} guesses asked of {m} canaries")
    ranked = np.asarray(members, dtype=bool)[np.argsort(scores, kind="stable")]
    ins = np.concatenate(([0], np.cumsum(ranked)))          # ins[j]: members among the j lowest scores
    out = []
    for rule in rules:
        right_in = int(ins[m] - ins[m - rule.guess_in])
        right_out = rule.guess_out - int(ins[rule.guess_out])
        out.append(GuessCounts(m, rule.guess_in + rule.guess_out, right_in + right_out))
    return out


def default_rules(canaries: int, per_decade: int = 4) -> tuple[GuessRule, ...]:
    """Symmetric rules (k/2 "in", k/2 "out") for k on a geometric grid from 10 (or m) to m, ``per_decade`` a decade."""
    check_count("canaries", canaries)
    low = min(10, canaries)
    points = max(2, math.ceil(per_decade * math.log10(max(canaries / low, 1.0))) + 1)
    totals = sorted({int(round(k)) for k in np.geomspace(low, canaries, points)})
    return tuple(GuessRule(k - k // 2, k // 2) for k in totals)


def sweep_bounds(scores: np.ndarray, members: np.ndarray, rules: Sequence[GuessRule], *, delta: float,
                 family: Family, level: float = 0.05, correction: str = "bonferroni") -> tuple[SweepBound, SweepBound]:
    """Both tests' ε_lb over ``rules`` (module docstring).

    Args:
        scores: one score per canary (higher = more likely in), finite.
        members: the membership bits (bool, same length).
        rules: the guess rules tried.
        delta: the δ at which ε is reported (and the Steinke test's δ).
        family: the f-DP family (:mod:`dpaudit.audit.tradeoff`).
        level: the overall significance level.
        correction: "bonferroni" (valid) or "none" (the uncorrected maximum; not a valid bound).

    Returns:
        (Steinke bound, f-DP bound).
    """
    scores = np.asarray(scores, dtype=float)
    members = np.asarray(members, dtype=bool)
    if scores.ndim != 1 or scores.shape != members.shape or not np.all(np.isfinite(scores)):
        raise InvalidParameter(f"need one finite score per canary: {scores.shape} scores, {members.shape} bits")
    if correction not in CORRECTIONS:
        raise InvalidParameter(f"correction must be one of {CORRECTIONS}, got {correction!r}")
    if not rules:
        raise InvalidParameter("no guess rules to try")
    per_rule = level / len(rules) if correction == "bonferroni" else level
    made = outcomes(scores, members, rules)
    steinke = [steinke_epsilon(counts, delta, per_rule) for counts in made]
    best = int(np.argmax(steinke))
    theta, which = fdp_theta(family, made, per_rule)
    fdp = family.epsilon(theta, delta) if theta > 0 else 0.0
    found = steinke[best] > 0
    return (SweepBound(STEINKE, "none: (epsilon, delta)-DP", steinke[best], made[best] if found else None,
                       rules[best] if found else None, level, len(rules), correction),
            SweepBound(FDP, family.name, fdp, None if which is None or fdp == 0 else made[which],
                       None if which is None or fdp == 0 else rules[which], level, len(rules), correction))


def ceilings(canaries: int, rules: Sequence[GuessRule], *, delta: float, family: Family,
             level: float = 0.05) -> tuple[float, float]:
    """The largest ε_lb each test can report with ``canaries`` canaries: every guess correct (Bonferroni sweep).

    Returns:
        (Steinke ceiling, f-DP ceiling).
    """
    per_rule = level / len(rules)
    perfect = [GuessCounts(canaries, r.guess_in + r.guess_out, r.guess_in + r.guess_out) for r in rules]
    theta, _ = fdp_theta(family, perfect, per_rule)
    return (max(steinke_epsilon(c, delta, per_rule) for c in perfect),
            family.epsilon(theta, delta) if theta > 0 else 0.0)
