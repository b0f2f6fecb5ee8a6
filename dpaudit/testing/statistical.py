"""The statistical DP tester: an empirical check of an (ε, δ)-DP claim from samples of M(x) and M(x').

For every named event S (a boolean predicate on outputs) and both directions, the test checks the defining
inequality P[M(x) ∈ S] ≤ e^ε P[M(x') ∈ S] + δ (and with x, x' swapped) against Clopper-Pearson confidence
bounds (Clopper & Pearson 1934). A violation is declared when

    lower(P[M(a) ∈ S]) > e^ε · upper(P[M(b) ∈ S]) + δ      for some S and (a, b) ∈ {(x, x'), (x', x)}.

False-alarm rate. There are 2·|events| unknown probabilities (each event under each input). Each gets a
two-sided Clopper-Pearson interval with miscoverage alpha / (2·|events|), i.e. alpha / (4·|events|) per
one-sided bound. By the union bound, all intervals hold simultaneously with probability ≥ 1 − alpha; when they
hold and the mechanism satisfies the claim, lower(p) ≤ p ≤ e^ε q + δ ≤ e^ε upper(q) + δ, so no violation is
declared. Hence P[false alarm] ≤ alpha for a correct mechanism, whatever the events (they must be chosen before
looking at the samples). The miss rate depends on the mechanism, the events and the sample sizes and must be
measured and stated by each test that uses this helper.

Example (continuous Laplace(0, 1) against Laplace(1, 1), exactly 1-DP)::

    rng = np.random.default_rng(0)
    events = {f"> {t}": (lambda out, t=t: out > t) for t in (0.0, 1.0, 2.0)}
    dp_test(rng.laplace(0, 1, 100_000), rng.laplace(1, 1, 100_000), 1.0, 0.0, events, alpha=0.05).violated  # False
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta as beta_dist

from dpaudit.errors import InvalidParameter


@dataclass(frozen=True)
class DPTestResult:
    """Outcome of :func:`dp_test`.

    Attributes:
        violated: True when some event and direction violates the claim at the stated confidence.
        worst_event: ``"<name> [x vs x']"`` or ``"<name> [x' vs x]"``: the event and direction with the largest
            ``p_lower − bound`` (reported whether or not it is a violation).
        p_lower: lower confidence bound on P[M(a) ∈ S] for that event and direction.
        q_upper: upper confidence bound on P[M(b) ∈ S] for that event and direction.
        bound: e^ε · q_upper + δ.
    """

    violated: bool
    worst_event: str
    p_lower: float
    q_upper: float
    bound: float


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval with total miscoverage ``alpha`` (alpha/2 in each tail)."""
    lower = 0.0 if successes == 0 else float(beta_dist.ppf(alpha / 2, successes, trials - successes + 1))
    upper = 1.0 if successes == trials else float(beta_dist.ppf(1 - alpha / 2, successes + 1, trials - successes))
    return lower, upper


def _counts(outputs: np.ndarray, predicate: Callable[[np.ndarray], np.ndarray], name: str) -> int:
    hits = np.asarray(predicate(outputs))
    if hits.shape != (len(outputs),) or hits.dtype != np.bool_:
        raise InvalidParameter(f"event {name!r} must return one boolean per sample, got {hits.dtype} {hits.shape}")
    return int(hits.sum())


def dp_test(
    outputs_x: np.ndarray,
    outputs_xprime: np.ndarray,
    epsilon: float,
    delta: float,
    events: Mapping[str, Callable[[np.ndarray], np.ndarray]],
    alpha: float,
) -> DPTestResult:
    """Test the claim that a mechanism is (ε, δ)-DP on the neighbouring pair (x, x').

    False alarms: for a mechanism that satisfies the claim, P[violated] ≤ ``alpha``, whatever the events and
    sample sizes (union bound over 2·|events| Clopper-Pearson intervals; module docstring). Misses are not
    bounded here: each caller measures and states its own miss rate.

    Args:
        outputs_x: independent samples of M(x), first axis indexes samples.
        outputs_xprime: independent samples of M(x'), first axis indexes samples.
        epsilon: claimed ε ≥ 0.
        delta: claimed δ in [0, 1).
        events: named predicates, each mapping an output array to a boolean array (one entry per sample).
            They must be fixed before the samples are drawn.
        alpha: family-wise false-alarm probability for a correct mechanism (Bonferroni over 2·|events|
            two-sided intervals; see the module docstring).

    Returns:
        The verdict with the worst event and its bounds.
    """
    if not events:
        raise InvalidParameter("dp_test needs at least one event")
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise InvalidParameter(f"epsilon must be finite and >= 0, got {epsilon!r}")
    if not 0 <= delta < 1:
        raise InvalidParameter(f"delta must lie in [0, 1), got {delta!r}")
    if not 0 < alpha < 1:
        raise InvalidParameter(f"alpha must lie in (0, 1), got {alpha!r}")
    n_x, n_xp = len(outputs_x), len(outputs_xprime)
    if n_x == 0 or n_xp == 0:
        raise InvalidParameter("dp_test needs samples from both inputs")
    level = alpha / (2 * len(events))
    exp_eps = math.exp(epsilon)
    candidates = []
    for name, predicate in events.items():
        ci_x = clopper_pearson(_counts(outputs_x, predicate, name), n_x, level)
        ci_xp = clopper_pearson(_counts(outputs_xprime, predicate, name), n_xp, level)
        for label, (p_lower, _), (_, q_upper) in ((f"{name} [x vs x']", ci_x, ci_xp),
                                                  (f"{name} [x' vs x]", ci_xp, ci_x)):
            bound = exp_eps * q_upper + delta
            candidates.append(DPTestResult(violated=p_lower > bound, worst_event=label, p_lower=p_lower,
                                           q_upper=q_upper, bound=bound))
    return max(candidates, key=lambda r: r.p_lower - r.bound)
