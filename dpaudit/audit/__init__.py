"""One-run privacy audits: empirical lower bounds ε_lb to set beside a certified ε (docs/audit.md).

* :mod:`~dpaudit.audit.steinke`: the (ε, δ) test of Steinke, Nasr & Jagielski 2023.
* :mod:`~dpaudit.audit.fdp`: the f-DP test of Mahloujifar, Melis & Chaudhuri 2025 (their Algorithm 3).
* :mod:`~dpaudit.audit.tradeoff`: the trade-off curves and families the f-DP test assumes.
* :mod:`~dpaudit.audit.order_stats`: the order-statistics test of Xiang et al. 2025, valid for products of
  independent μ-GDP channels only (the idealised setting).
* :mod:`~dpaudit.audit.guesses`: scores → guesses, the Bonferroni-corrected sweep and each test's ceiling.
* :mod:`~dpaudit.audit.mechanism`: the mechanism tester (:func:`audit_mechanism`).
* :mod:`~dpaudit.audit.dpsgd`: white-box canaries in a DP-SGD run (``audit_dpsgd``; imported on its own, it loads
  torch and Opacus).
* :mod:`~dpaudit.audit.blackbox`: black-box input canaries in a DP-SGD run (``audit_dpsgd_blackbox``; loads torch).
* :mod:`~dpaudit.audit.last_iterate`: the last-iterate HEURISTIC ε of Steinke et al. 2024 (not a bound).
* :mod:`~dpaudit.audit.in_session`: the mechanism tester on a session's release, with evidence in its ledger.
* :mod:`~dpaudit.audit.evidence`: the audit's commitment and evidence in the ledger, recomputed by ``verify``.
"""

from dpaudit.audit.fdp import fdp_epsilon, fdp_rejects, fdp_theta
from dpaudit.audit.guesses import (
    GuessRule,
    SweepBound,
    ceilings,
    count_guesses,
    default_rules,
    outcomes,
    sweep_bounds,
)
from dpaudit.audit.mechanism import AuditReport, MechanismAudit, audit_mechanism, membership
from dpaudit.audit.order_stats import order_stats_epsilon, order_stats_p_value
from dpaudit.audit.steinke import GuessCounts, steinke_epsilon, steinke_p_value
from dpaudit.audit.tradeoff import ApproxDpFamily, GaussianFamily, SubsampledGaussianFamily

__all__ = [
    "ApproxDpFamily", "AuditReport", "GaussianFamily", "GuessCounts", "GuessRule", "MechanismAudit",
    "SubsampledGaussianFamily", "SweepBound", "audit_mechanism", "ceilings", "count_guesses", "default_rules",
    "fdp_epsilon", "fdp_rejects", "fdp_theta", "membership", "order_stats_epsilon", "order_stats_p_value", "outcomes",
    "sweep_bounds", "steinke_epsilon", "steinke_p_value",
]
