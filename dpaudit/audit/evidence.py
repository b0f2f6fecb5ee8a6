"""An audit's evidence in the ledger, so that ``dpaudit verify`` recomputes ε_lb offline (docs/audit.md).

Two ``info`` records, written through the session's public API (``record_info`` of the auditing plugin's view):

1. before the audited run is charged, ``{"audit_commitment": sha256}``: the SHA-256 of the canonical JSON of
   the audit's design (:func:`commit`: kind, canaries, membership bits, guess rules, level, δ and the family's
   q and N), which fixes all of them before any score exists;
2. after the run, ``{"audit": {...}}`` (:func:`record_evidence`): the canaries, the membership bits (a string of
   ``0``/``1``), the scores, the run's charge, the family's (q, N), the guess rules, δ, the level, the certified ε
   and both tests' ε_lb as the run reported them.

:func:`audit_problems` is the ``audit`` check of :func:`dpaudit.verify.verify_bundle`: every audit record must
follow its own commitment (same digest of its whole design, earlier record, before the charge; one audit record
per commitment), name a Poisson-subsampled-Gaussian charge of the ledger with the same q and N, sweep the default
guess rules (:func:`~dpaudit.audit.guesses.default_rules`, so no rule can be picked after the scores are seen) at
a level in (0, :data:`MAX_LEVEL`], state as ``fdp_assumes`` the name of the charged run's family, state as
``epsilon_cert`` the run's accountant's ε of that charge at the record's δ, and its ε_lb (both tests) must equal
the recomputation from the recorded scores and bits by :func:`~dpaudit.audit.guesses.sweep_bounds` (relative
tolerance :data:`TOLERANCE`, for floating-point differences between machines). A forged score, bit, rule, level,
ε_cert or ε_lb is reported, never a crash.
The scores themselves are not recomputed from the model weights (verify has only the model's digest), and the
ceilings (which depend on the design alone, and cost a bisection over composed PLDs) are shown, not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit import canonical
from dpaudit.audit.guesses import GuessRule, default_rules, sweep_bounds
from dpaudit.audit.mechanism import AuditReport, per_test_level
from dpaudit.audit.tradeoff import SubsampledGaussianFamily
from dpaudit.errors import DPAuditError
from dpaudit.events import PoissonSubsampledGaussianEvent, PrivacyEvent
from dpaudit.records import INFO, OPEN

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.records import Record

#: relative tolerance of the recomputed ε_lb and ε_cert
TOLERANCE = 1e-6
#: the largest significance level an audit record may state (95% confidence: what docs/audit.md reports)
MAX_LEVEL = 0.05
#: an int64 coordinate (what the canaries' flat indices are)
_INT64 = (-(2**63), 2**63 - 1)


def _bits(members: np.ndarray) -> str:
    return "".join("1" if bit else "0" for bit in np.asarray(members, dtype=bool))


def _rules(rules: Sequence[GuessRule]) -> list[list[int]]:
    return [[int(rule.guess_in), int(rule.guess_out)] for rule in rules]


def commit(kind: str, coordinates: np.ndarray, members: np.ndarray, *, rules: Sequence[GuessRule], level: float,
           delta: float, sample_rate: float, steps: int) -> str:
    """SHA-256 of the canonical JSON of the audit's design: kind, canaries, membership bits, guess rules, level, δ
    and the family's (q, N) (module docstring)."""
    return canonical.sha256_hex(canonical.encode({
        "kind": kind, "coordinates": [int(c) for c in coordinates], "members": _bits(members),
        "rules": _rules(rules), "level": float(level), "delta": float(delta), "sample_rate": float(sample_rate),
        "steps": int(steps)}))


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
        "rules": _rules(design.rules),
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
        steinke, fdp = sweep_bounds(scores, members, rules, delta=delta, family=family, level=per_test_level(level))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise DPAuditError(f"malformed audit record: {exc}") from exc
    return {"epsilon_lb_steinke": steinke.epsilon, "epsilon_lb_fdp": fdp.epsilon}


def _digest(audit: Mapping[str, Any]) -> str:
    """:func:`commit` of the design an audit record states.

    Raises:
        KeyError, TypeError, ValueError: a malformed record.
    """
    coordinates, bits = audit["coordinates"], audit["members"]
    if not (isinstance(coordinates, list) and all(isinstance(c, int) and not isinstance(c, bool)
                                                  and _INT64[0] <= c <= _INT64[1] for c in coordinates)):
        raise ValueError("coordinates must be a list of 64-bit integers")
    if not isinstance(bits, str) or set(bits) - {"0", "1"}:
        raise ValueError("members must be a string of 0/1 characters")
    return commit(str(audit["kind"]), np.asarray(coordinates, dtype=np.int64), np.array([b == "1" for b in bits]),
                  rules=[GuessRule(int(i), int(o)) for i, o in audit["rules"]], level=float(audit["level"]),
                  delta=float(audit["delta"]), sample_rate=float(audit["sample_rate"]), steps=int(audit["steps"]))


def _certified_epsilon(records: Sequence[Record], event: PrivacyEvent, delta: float) -> float:
    """The run's accountant's ε of ``event`` at ``delta`` (the accountant and version the ``open`` record names).

    Raises:
        DPAuditError: no accountant named, or it cannot bound the event.
    """
    from dpaudit.accounting import get_accountant  # deferred: the accountants load the numerics stack

    named = records[0].body.get("accountant") if records and records[0].type == OPEN else None
    if not (isinstance(named, Mapping) and isinstance(named.get("name"), str)):
        raise DPAuditError("the ledger's open record names no accountant")
    version = named.get("version")
    return get_accountant(named["name"], version if isinstance(version, str) else None).epsilon(event, delta)


def _design_problems(records: Sequence[Record], audit: Mapping[str, Any], event: PrivacyEvent) -> list[str]:
    """What the record states about its design that the ledger contradicts (module docstring)."""
    problems = []
    if audit.get("rules") != _rules(default_rules(len(audit["members"]))):
        problems.append("its guess rules are not the default rules for its canaries")
    level = audit.get("level")
    if not (isinstance(level, (int, float)) and 0 < level <= MAX_LEVEL):
        problems.append(f"level {level!r} is not in (0, {MAX_LEVEL}]")
    family = SubsampledGaussianFamily(float(audit["sample_rate"]), int(audit["steps"]))
    if audit.get("fdp_assumes") != family.name:
        problems.append(f"fdp_assumes {str(audit.get('fdp_assumes'))[:80]!r} is not the run's family {family.name!r}")
    try:
        certified = _certified_epsilon(records, event, float(audit["delta"]))
    except DPAuditError as exc:
        return [*problems, f"the certified epsilon cannot be recomputed: {exc}"]
    if not _close(audit.get("epsilon_cert"), certified):
        problems.append(f"epsilon_cert recorded {audit.get('epsilon_cert')!r}, the run's accountant gives "
                        f"{certified:.6g} for charge {audit.get('charge_seq')}")
    return problems


def audit_problems(records: Sequence[Record], charges: Sequence[tuple[int, PrivacyEvent]]) -> tuple[list[str], int]:
    """The ``audit`` check (module docstring): (problems, number of audit records checked)."""
    events = dict(charges)
    commitments = {r.body["info"]["audit_commitment"]: r.seq for r in records
                   if r.type == INFO and isinstance(r.body.get("info"), Mapping)
                   and isinstance(r.body["info"].get("audit_commitment"), str)}
    problems: list[str] = []
    used: dict[str, int] = {}
    found = audits(records)
    for seq, audit in found:
        where = f"audit record {seq}"
        if not isinstance(audit, Mapping):
            problems.append(f"{where}: not an object")
            continue
        try:
            digest = _digest(audit)
        except (KeyError, TypeError, ValueError, OverflowError, DPAuditError) as exc:
            problems.append(f"{where}: malformed ({exc})")
            continue
        charge_seq = audit.get("charge_seq")
        committed = commitments.get(digest)
        if digest != audit.get("commitment") or committed is None:
            problems.append(f"{where}: its design (canaries, bits, rules, level, delta, q, N) does not match a "
                            "commitment in the ledger")
        elif not (isinstance(charge_seq, int) and committed < charge_seq < seq):
            problems.append(f"{where}: the commitment (record {committed}) does not precede the audited charge")
        elif digest in used:
            problems.append(f"{where}: its commitment (record {committed}) was already used by audit record "
                            f"{used[digest]}")
        used.setdefault(digest, seq)
        event = events.get(charge_seq) if isinstance(charge_seq, int) else None
        if not isinstance(event, PoissonSubsampledGaussianEvent):
            problems.append(f"{where}: charge {charge_seq!r} is not a Poisson-subsampled Gaussian charge")
            continue
        if (event.sample_rate, event.steps) != (audit.get("sample_rate"), audit.get("steps")):
            problems.append(f"{where}: family (q={audit.get('sample_rate')}, steps={audit.get('steps')}) is not the "
                            f"charged run's (q={event.sample_rate}, steps={event.steps})")
            continue
        try:
            problems.extend(f"{where}: {problem}" for problem in _design_problems(records, audit, event))
        except (TypeError, ValueError, OverflowError, DPAuditError) as exc:
            problems.append(f"{where}: malformed ({exc})")
            continue
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
