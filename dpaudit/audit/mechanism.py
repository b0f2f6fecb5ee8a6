"""The mechanism tester: a one-run audit of any mechanism that can be run on a data set of canaries.

Protocol (Steinke, Nasr & Jagielski 2023, Sec. 3; docs/audit.md): m canaries, each included independently with
probability ½ (bits from a :class:`~dpaudit.mechanisms.randomness.RandomSource`: the OS CSPRNG by default, a seeded
source for reproducible tests); the mechanism runs once on the included canaries and the caller's scoring turns
its output into one score per canary (higher = more likely included); guesses are made by a Bonferroni-corrected
sweep of guess rules (:mod:`dpaudit.audit.guesses`); both tests report ε_lb beside the claimed ε. The claim is
refuted when either test's ε_lb exceeds it, so each test runs at half the audit's level (Bonferroni over the two
tests, :func:`per_test_level`): the verdict holds at the stated confidence, e.g. 95% for level 0.05.

``run`` receives the canary data set as a float vector x ∈ {0, 1}^m (x_i = 1 when canary i is included), the
form of the idealised setting of Mahloujifar et al. 2025, Algorithm 4, where canary i adds one to coordinate i:
for a histogram-style release through a session, ``lambda x: session.gaussian(x, sensitivity=1.0, epsilon=ε,
delta=δ)`` audits the session's Gaussian mechanism as it is charged, ledgered and released. A mechanism with any
other input builds its data set from x and returns its scores.

What a result means: ε_lb > ε_claimed refutes the claim at the stated confidence (a bug or a wrong analysis);
ε_lb ≤ ε_claimed is "no detectable leakage above ε_lb", never evidence that the mechanism is private (NIST SP
800-226: audits find bugs, they do not prove DP).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.audit.guesses import GuessRule, SweepBound, ceilings, default_rules, sweep_bounds
from dpaudit.audit.steinke import check_significance
from dpaudit.audit.tradeoff import ApproxDpFamily, Family, GaussianFamily
from dpaudit.display import show, show_delta, show_lower
from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.randomness import RandomSource, SecureRandom
from dpaudit.validation import check_count, check_delta, check_nonnegative

#: the tests whose rejections the verdict combines (Steinke et al. and f-DP): each runs at level / TESTS
TESTS = 2
#: the f-DP families (``--family`` names) each session mechanism belongs to: the Laplace mechanism is not μ-GDP
#: (its trade-off curve lies below every Gaussian curve of the same ε somewhere), so the Gaussian family would
#: convert a Laplace run's rejections into a wrong, too large, ε_lb
MECHANISM_FAMILIES = {"gaussian": ("epsilon-delta", "gaussian"), "laplace": ("epsilon-delta",)}


def per_test_level(level: float) -> float:
    """Each test's significance level for an audit at overall ``level`` (Bonferroni over the :data:`TESTS` tests)."""
    return level / TESTS


def family_of(mechanism: str, family: str, delta: float) -> Family:
    """The f-DP family named ``family`` for the session mechanism ``mechanism``, refused where it does not belong.

    Raises:
        InvalidParameter: an unknown mechanism, or a family the mechanism does not belong to (auditing a Laplace
            mechanism against μ-GDP curves "refutes" a correct one).
    """
    allowed = MECHANISM_FAMILIES.get(mechanism)
    if allowed is None:
        raise InvalidParameter(f"unknown mechanism {mechanism!r}; choose one of {sorted(MECHANISM_FAMILIES)}")
    if family not in allowed:
        raise InvalidParameter(f"the {mechanism} mechanism does not belong to the {family} family; choose one of "
                               f"{', '.join(allowed)}")
    return GaussianFamily() if family == "gaussian" else ApproxDpFamily(delta)


@dataclass(frozen=True)
class MechanismAudit:
    """What to audit: m canaries, the claimed (ε, δ), the level, the f-DP family and the guess rules.

    Attributes:
        canaries: m.
        claimed_epsilon: the ε ≥ 0 the mechanism claims at ``delta``.
        delta: the δ of the claim (and of both tests' ε).
        level: overall significance level of the verdict; each test runs at ``level / 2`` (:func:`per_test_level`).
        family: the f-DP family the f-DP test's ε assumes (:mod:`dpaudit.audit.tradeoff`); None: the (ε, δ)-DP
            curves at ``delta`` (:class:`~dpaudit.audit.tradeoff.ApproxDpFamily`), which assume nothing. Choose
            :class:`~dpaudit.audit.tradeoff.GaussianFamily` only for a mechanism known to be Gaussian-shaped.
        rules: guess rules swept (Bonferroni-corrected); None: :func:`~dpaudit.audit.guesses.default_rules`.
    """

    canaries: int
    claimed_epsilon: float
    delta: float
    level: float = 0.05
    family: Family | None = None
    rules: tuple[GuessRule, ...] | None = None

    def __post_init__(self) -> None:
        check_count("canaries", self.canaries)
        check_nonnegative("claimed_epsilon", self.claimed_epsilon)  # ε = 0: refuted by any ε_lb > 0
        check_delta(self.delta, allow_zero=False)
        check_significance(self.level)
        if self.family is None:
            object.__setattr__(self, "family", ApproxDpFamily(self.delta))
        if self.rules is None:
            object.__setattr__(self, "rules", default_rules(self.canaries))
        elif not self.rules or not all(isinstance(rule, GuessRule) for rule in self.rules):
            raise InvalidParameter("rules must be a non-empty sequence of GuessRule")
        object.__setattr__(self, "rules", tuple(self.rules))


@dataclass(frozen=True)
class AuditReport:
    """Both tests' ε_lb beside the claim, and each test's ceiling for this m (every guess correct).

    ``last_iterate`` (DP-SGD audits only): the last-iterate HEURISTIC ε of Steinke et al. 2024 for the run's q, N and
    σ at δ (:mod:`dpaudit.audit.last_iterate`), shown beside the bounds and never part of the verdict.
    """

    audit: MechanismAudit
    steinke: SweepBound
    fdp: SweepBound
    ceiling_steinke: float
    ceiling_fdp: float
    randomness: dict[str, Any]
    last_iterate: float | None = None

    @property
    def refuted(self) -> bool:
        """Whether either test's ε_lb exceeds the claimed ε (each test at half the level: Bonferroni)."""
        return max(self.steinke.epsilon, self.fdp.epsilon) > self.audit.claimed_epsilon

    def statement(self) -> str:
        """One line: the claim, both ε_lb (with what they assume) and the verdict, never "private"."""
        a = self.audit
        head = (f"claimed epsilon={show(a.claimed_epsilon)} at delta={show_delta(a.delta)}; m={a.canaries} "
                f"canaries, {len(a.rules)} guess rules (Bonferroni), {100 * (1 - a.level):g}% confidence overall "
                f"(each test at {100 * (1 - per_test_level(a.level)):g}%), lower bounds rounded down: "
                f"epsilon_lb Steinke={show_lower(self.steinke.epsilon)} (ceiling {show_lower(self.ceiling_steinke)}), "
                f"f-DP={show_lower(self.fdp.epsilon)} (ceiling {show_lower(self.ceiling_fdp)}, "
                f"assumes {self.fdp.assumes})")
        if self.last_iterate is not None:
            head += (f"; last-iterate heuristic epsilon={show(self.last_iterate)} (Steinke et al. 2024, exact for "
                     "linear losses only: a heuristic, not a bound in either direction)")
        if self.refuted:
            return f"{head}: CLAIM REFUTED (leakage above the claimed epsilon)"
        return f"{head}: no detectable leakage above the claim (an audit cannot show a mechanism is private)"


@functools.lru_cache(maxsize=64)
def _ceilings(canaries: int, rules: tuple[GuessRule, ...], delta: float, family: Family,
              level: float) -> tuple[float, float]:
    """:func:`~dpaudit.audit.guesses.ceilings` at each test's level for an audit at ``level``, once per audit design
    (it depends on nothing the run produces)."""
    return ceilings(canaries, rules, delta=delta, family=family, level=per_test_level(level))


def membership(canaries: int, rng: RandomSource) -> np.ndarray:
    """m independent fair membership bits from ``rng`` (the low bit of uniform 63-bit words)."""
    return (rng.words(check_count("canaries", canaries)) & 1).astype(bool)


def run_scores(run: Callable[[np.ndarray], Any], members: np.ndarray) -> np.ndarray:
    """``run`` on the canary data set x (float 0/1 vector of ``members``), checked to return one finite score each.

    Raises:
        InvalidParameter: ``run`` did not return m finite scores.
    """
    scores = np.asarray(run(members.astype(float)), dtype=float)
    if scores.shape != members.shape or not np.all(np.isfinite(scores)):
        raise InvalidParameter(f"the mechanism must return {len(members)} finite scores, got shape {scores.shape}")
    return scores


def report_of(audit: MechanismAudit, members: np.ndarray, scores: np.ndarray, randomness: dict[str, Any],
              last_iterate: float | None = None) -> AuditReport:
    """Both tests (each at :func:`per_test_level`) on the scores and bits of a finished audit run, with the
    ceilings of its design."""
    steinke, fdp = sweep_bounds(scores, members, audit.rules, delta=audit.delta, family=audit.family,
                                level=per_test_level(audit.level))
    top_steinke, top_fdp = _ceilings(audit.canaries, audit.rules, audit.delta, audit.family, audit.level)
    return AuditReport(audit, steinke, fdp, top_steinke, top_fdp, randomness, last_iterate)


def audit_mechanism(run: Callable[[np.ndarray], Any], audit: MechanismAudit,
                    rng: RandomSource | None = None) -> AuditReport:
    """Run ``run`` once on a random canary set and audit its scores with both tests (module docstring).

    Nothing is written to a ledger: :func:`dpaudit.audit.in_session.audit_in_session` audits a session's release
    and commits its design and evidence there.

    Args:
        run: canary data set x ∈ {0, 1}^m (float) → one score per canary (higher = more likely included).
        audit: what to audit.
        rng: source of the membership bits; None: the OS CSPRNG.

    Raises:
        InvalidParameter: ``run`` did not return m finite scores.
    """
    rng = SecureRandom() if rng is None else rng
    members = membership(audit.canaries, rng)
    return report_of(audit, members, run_scores(run, members), rng.describe())
