"""The mechanism tester inside an audited session: design committed before the release, evidence after it.

:func:`audit_in_session` is :func:`~dpaudit.audit.mechanism.audit_mechanism` for a ``run`` that releases through
the session (charged, ledgered, certified like any release; docs/audit.md, "Auditing a mechanism"):

1. the membership bits are drawn, and SHA-256 of the design (kind ``mechanism-canaries``, bits, the default guess
   rules, level, δ and the f-DP family's name) is written to the ledger (``audit_commitment``) before ``run``;
2. ``run`` must make exactly one charge (the audited release); its scores are tested against that charge's
   certified ε at δ (the session's accountant on the charged event), which is the claim audited;
3. the ``audit`` record (:func:`dpaudit.audit.evidence.record_evidence`) holds the bits, scores, rules, level,
   ε_cert and both ε_lb, and ``dpaudit verify``'s ``audit`` check recomputes them with the same code as a DP-SGD
   audit's (:func:`dpaudit.audit.evidence.audit_problems`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dpaudit.audit.evidence import MECHANISM, check_level, commit, record_evidence
from dpaudit.audit.guesses import default_rules
from dpaudit.audit.mechanism import AuditReport, MechanismAudit, membership, report_of, run_scores
from dpaudit.audit.tradeoff import ApproxDpFamily, GaussianFamily
from dpaudit.certificate import charged_events
from dpaudit.errors import InvalidParameter
from dpaudit.events import GaussianEvent
from dpaudit.ledger import read_records
from dpaudit.mechanisms.randomness import RandomSource, SecureRandom
from dpaudit.provenance import dpaudit_version

if TYPE_CHECKING:
    from dpaudit.session import Session

#: the plugin name the audit's records are attributed to
PLUGIN = "dpaudit-audit"


def _last_seq(session: Session) -> int:
    records, _ = read_records(session.ledger_path)
    return records[-1].seq if records else -1


def audit_in_session(session: Session, run: Callable[[Any], Any], audit: MechanismAudit,
                     rng: RandomSource | None = None) -> AuditReport:
    """Audit one release of ``session`` with both tests and leave the evidence in its ledger (module docstring).

    Args:
        session: the open audited session ``run`` releases through.
        run: canary data set x ∈ {0, 1}^m (float) → one score per canary; it must make exactly one charge.
        audit: what to audit: its level must lie in [0.001, 0.05], its rules the default rules, its family
            :class:`~dpaudit.audit.tradeoff.ApproxDpFamily` at its δ or (for a Gaussian release)
            :class:`~dpaudit.audit.tradeoff.GaussianFamily`. Its ``claimed_epsilon`` is replaced by the release's
            certified ε at δ.
        rng: source of the membership bits; None: the OS CSPRNG.

    Raises:
        InvalidParameter: a design verify would not accept, ``run`` made no charge or several, a Gaussian family for
            a release that is not Gaussian, or ``run`` did not return m finite scores (the commitment stays in the
            ledger without evidence, and verify reports it when anything was charged or released after it).
    """
    check_level(audit.level)
    if audit.rules != default_rules(audit.canaries):
        raise InvalidParameter("an audit recorded in the ledger sweeps the default guess rules")
    if audit.family not in (GaussianFamily(), ApproxDpFamily(audit.delta)):
        raise InvalidParameter(f"a mechanism audit assumes the gaussian or the (epsilon, delta) family at its delta, "
                               f"not {audit.family.name!r}")
    rng = SecureRandom() if rng is None else rng
    view = session.for_plugin(PLUGIN, dpaudit_version())
    members = membership(audit.canaries, rng)
    design = {"fdp_assumes": audit.family.name}
    commitment = commit(MECHANISM, members, rules=audit.rules, level=audit.level, delta=audit.delta, **design)
    view.record_info({"audit_commitment": commitment})
    before = _last_seq(session)
    scores = run_scores(run, members)
    records, _ = read_records(session.ledger_path)
    made = [(seq, event) for seq, event in charged_events(records) if seq > before]
    if len(made) != 1:
        raise InvalidParameter(f"the audited run made {len(made)} charges; an audited release makes exactly one")
    (charge_seq, event), = made
    if isinstance(audit.family, GaussianFamily) and not isinstance(event, GaussianEvent):
        raise InvalidParameter(f"the release is a {event.kind} charge: only a Gaussian release is audited against "
                               "the gaussian family")
    certified = dataclasses.replace(audit, claimed_epsilon=session.accountant.epsilon(event, audit.delta))
    report = report_of(certified, members, scores, rng.describe())
    record_evidence(view, MECHANISM, charge_seq=charge_seq, commitment=commitment, report=report, members=members,
                    scores=scores, design=design)
    return report
