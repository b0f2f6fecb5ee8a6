"""An audit's evidence in the ledger, so that ``dpaudit verify`` recomputes ε_lb offline (docs/audit.md).

Two ``info`` records, written through the session's public API (``record_info`` of the auditing plugin's view):

1. before the audited run is charged, ``{"audit_commitment": sha256}``: the SHA-256 of the canonical JSON of
   ``{"kind", "coordinates", "members"}`` (:func:`commit`), which fixes the canaries and their membership bits
   before any score exists;
2. after the run, ``{"audit": {...}}`` (:func:`record_evidence`): the canaries, the membership bits (a string of
   ``0``/``1``), the scores, the run's charge, the family's (q, N), the guess rules, δ, the level, the certified ε
   and both tests' ε_lb as the run reported them.

:func:`audit_problems` is the ``audit`` check of :func:`dpaudit.verify.verify_bundle`: every audit record must
follow its commitment (same digest, earlier record, before the charge), name a Poisson-subsampled-Gaussian charge
of the ledger with the same q and N, and its ε_lb (both tests) must equal the recomputation from the
recorded scores and bits by :func:`~dpaudit.audit.guesses.sweep_bounds` (relative tolerance
:data:`TOLERANCE`, for floating-point differences between machines). A forged score, bit or ε_lb is reported.
The scores themselves are not recomputed from the model weights (verify has only the model's digest), and the
ceilings (which depend on the design alone, and cost a bisection over composed PLDs) are shown, not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit import canonical
from dpaudit.audit.guesses import GuessRule, sweep_bounds
from dpaudit.audit.tradeoff import SubsampledGaussianFamily
from dpaudit.errors import DPAuditError
from dpaudit.events import PoissonSubsampledGaussianEvent, PrivacyEvent
from dpaudit.records import INFO

if TYPE_CHECKING:
    from dpaudit.audit.mechanism import AuditReport
    from dpaudit.plugin_session import PluginSession
    from dpaudit.records import Record

#: relative tolerance of the recomputed ε_lb
TOLERANCE = 1e-6


def _bits(members: np.ndarray) -> str:
    return "".join("1" if bit else "0" for bit in np.asarray(members, dtype=bool))


def commit(kind: str, coordinates: np.ndarray, members: np.ndarray) -> str:
    """SHA-256 of the canonical JSON of the audit's kind, canaries and membership bits."""
    return canonical.sha256_hex(canonical.encode({"kind": kind, "coordinates": [int(c) for c in coordinates],
                                                  "members": _bits(members)}))


def record_evidence(session: PluginSession, kind: str, *, charge_seq: int, commitment: str, report: AuditReport,
                    coordinates: np.ndarray, members: np.ndarray, scores: np.ndarray, sample_rate: float,
                    steps: int) -> None:
    """Write the ``audit`` info record of a finished audit (module docstring)."""
    design = report.audit
    session.record_info({"audit": {
        "kind": kind, "commitment": commitment, "charge_seq": charge_seq,
        "coordinates": [int(c) for c in coordinates], "members": _bits(members),
        "scores": [float(s) for s in scores], "sample_rate": sample_rate, "steps": steps,
        "delta": design.delta, "level": design.level,
        "rules": [[rule.guess_in, rule.guess_out] for rule in design.rules],
        "epsilon_cert": design.claimed_epsilon, "epsilon_lb_steinke": report.steinke.epsilon,
        "epsilon_lb_fdp": report.fdp.epsilon, "fdp_assumes": report.fdp.assumes,
    }})


def audits(records: Sequence[Record]) -> list[tuple[int, Mapping[str, Any]]]:
    """(seq, body) of every ``audit`` info record."""
    return [(r.seq, r.body["info"]["audit"]) for r in records
            if r.type == INFO and isinstance(r.body.get("info"), Mapping) and "audit" in r.body["info"]]


def _close(recorded: Any, recomputed: float) -> bool:
    return isinstance(recorded, (int, float)) and abs(recorded - recomputed) <= TOLERANCE * max(1.0, abs(recomputed))


def recompute(audit: Mapping[str, Any]) -> dict[str, float]:
    """Both tests' ε_lb from the recorded scores and bits.

    Raises:
        DPAuditError: a malformed audit record.
    """
    try:
        bits, scores = audit["members"], np.asarray(audit["scores"], dtype=float)
        if not isinstance(bits, str) or set(bits) - {"0", "1"} or len(bits) != len(scores):
            raise DPAuditError("members must be one 0/1 character per score")
        members = np.array([b == "1" for b in bits], dtype=bool)
        rules = [GuessRule(int(i), int(o)) for i, o in audit["rules"]]
        family = SubsampledGaussianFamily(float(audit["sample_rate"]), int(audit["steps"]))
        delta, level = float(audit["delta"]), float(audit["level"])
        steinke, fdp = sweep_bounds(scores, members, rules, delta=delta, family=family, level=level)
    except (KeyError, TypeError, ValueError) as exc:
        raise DPAuditError(f"malformed audit record: {exc}") from exc
    return {"epsilon_lb_steinke": steinke.epsilon, "epsilon_lb_fdp": fdp.epsilon}


def audit_problems(records: Sequence[Record], charges: Sequence[tuple[int, PrivacyEvent]]) -> tuple[list[str], int]:
    """The ``audit`` check (module docstring): (problems, number of audit records checked)."""
    events = dict(charges)
    commitments = {r.body["info"]["audit_commitment"]: r.seq for r in records
                   if r.type == INFO and isinstance(r.body.get("info"), Mapping)
                   and isinstance(r.body["info"].get("audit_commitment"), str)}
    problems = []
    found = audits(records)
    for seq, audit in found:
        where = f"audit record {seq}"
        if not isinstance(audit, Mapping):
            problems.append(f"{where}: not an object")
            continue
        try:
            digest = commit(str(audit["kind"]), np.asarray(audit["coordinates"], dtype=np.int64),
                            np.array([b == "1" for b in str(audit["members"])], dtype=bool))
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"{where}: malformed ({exc})")
            continue
        charge_seq = audit.get("charge_seq")
        committed = commitments.get(digest)
        if digest != audit.get("commitment") or committed is None:
            problems.append(f"{where}: its canaries and membership bits do not match a commitment in the ledger")
        elif not (isinstance(charge_seq, int) and committed < charge_seq < seq):
            problems.append(f"{where}: the commitment (record {committed}) does not precede the audited charge")
        event = events.get(charge_seq) if isinstance(charge_seq, int) else None
        if not isinstance(event, PoissonSubsampledGaussianEvent):
            problems.append(f"{where}: charge {charge_seq!r} is not a Poisson-subsampled Gaussian charge")
        elif (event.sample_rate, event.steps) != (audit.get("sample_rate"), audit.get("steps")):
            problems.append(f"{where}: family (q={audit.get('sample_rate')}, steps={audit.get('steps')}) is not the "
                            f"charged run's (q={event.sample_rate}, steps={event.steps})")
        try:
            again = recompute(audit)
        except DPAuditError as exc:
            problems.append(f"{where}: {exc}")
            continue
        wrong = [f"{name} recorded {audit.get(name)!r}, recomputed {value:.6g}" for name, value in again.items()
                 if not _close(audit.get(name), value)]
        if wrong:
            problems.append(f"{where}: " + "; ".join(wrong))
    return problems, len(found)
