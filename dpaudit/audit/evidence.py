"""An audit's evidence in the ledger, so that ``dpaudit verify`` recomputes ε_lb offline (docs/audit.md).

Two ``info`` records, written through the session's public API (``record_info`` of the auditing plugin's view):

1. before the audited release is charged, ``{"audit_commitment": sha256}``: the SHA-256 of the canonical JSON of
   the audit's design (:func:`commit`: kind, membership bits, guess rules, level, δ and the kind's own fields,
   :data:`_DESIGN`: the canaries and the family's (q, N) for a DP-SGD audit, the family's name for a mechanism
   audit), which fixes all of them before any score exists;
2. after the run, ``{"audit": {...}}`` (:func:`record_evidence`): the design fields, the membership bits (a string
   of ``0``/``1``), the scores, the audited charge, the guess rules, δ, the level, the certified ε, both tests'
   ε_lb as the run reported them and, for DP-SGD, the last-iterate heuristic (:data:`LAST_ITERATE`).

Kinds: :data:`DIRAC` (white-box canaries, :mod:`dpaudit.audit.dpsgd`), :data:`INPUT` (black-box input canaries,
:mod:`dpaudit.audit.blackbox`) and :data:`MECHANISM` (the mechanism tester on a session's release,
:mod:`dpaudit.audit.in_session`). One check serves all three.

:func:`audit_problems` is the ``audit`` check of :func:`dpaudit.verify.verify_bundle`: every audit record must
follow its own commitment (same digest of its whole design, the latest such commitment before its charge; one
audit record per commitment), name a charge of the ledger its design fits (DP-SGD kinds: a
Poisson-subsampled-Gaussian charge with the same q and N; a mechanism audit: any charge, a Gaussian one for the
Gaussian family), sweep the default guess rules (:func:`~dpaudit.audit.guesses.default_rules`, so no rule can be
picked after the scores are seen) at a level in [:data:`MIN_LEVEL`, :data:`MAX_LEVEL`] (:func:`check_level`),
state as ``fdp_assumes`` the name of its family, state as ``epsilon_cert`` the run's accountant's ε of that charge
at the record's δ, state (if at all, and for DP-SGD only) the last-iterate heuristic of the charge's (q, N, σ) at
δ, and its ε_lb (both tests) must equal the recomputation from the recorded scores and bits by
:func:`~dpaudit.audit.guesses.sweep_bounds`; every recomputed number is compared within the relative tolerance
:data:`TOLERANCE` (floating-point differences between machines), and must be finite. A forged score, bit, rule,
level, ε_cert, heuristic or ε_lb is reported, never a crash. Every commitment must be answered by an audit record:
a commitment that no audit record uses, followed by a charge or a release, is reported (selective reporting: an
auditee could commit, release, see the leakage and drop the evidence), and one with nothing charged or released
after it (an audit refused or abandoned before its run) is shown in the check's line, with the levels stated.
The scores themselves are not recomputed from the model weights (verify has only the model's digest), and the
ceilings (which depend on the design alone, and cost a bisection over composed PLDs) are shown, not recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit import canonical
from dpaudit.audit.guesses import GuessRule, default_rules, sweep_bounds
from dpaudit.audit.last_iterate import last_iterate_epsilon
from dpaudit.audit.mechanism import AuditReport, per_test_level
from dpaudit.audit.tradeoff import ApproxDpFamily, Family, GaussianFamily, SubsampledGaussianFamily
from dpaudit.display import plural
from dpaudit.errors import DPAuditError, InvalidParameter
from dpaudit.events import GaussianEvent, PoissonSubsampledGaussianEvent, PrivacyEvent
from dpaudit.record_index import of_type
from dpaudit.records import INFO, OPEN, RELEASE

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.records import Record

#: relative tolerance of the recomputed ε_lb and ε_cert
TOLERANCE = 1e-6
#: the largest significance level an audit record may state (95% confidence: what docs/audit.md reports)
MAX_LEVEL = 0.05
#: the smallest: a level near 0 makes ε_lb ≈ 0 whatever the scores, stated at "100% confidence"
MIN_LEVEL = 1e-3
#: the kinds of audit: white-box and black-box (input) canaries in a DP-SGD run, canaries of the mechanism tester
DIRAC = "dpsgd-dirac-canaries"
INPUT = "dpsgd-input-canaries"
MECHANISM = "mechanism-canaries"
#: the key of a DP-SGD audit's last-iterate heuristic (:mod:`dpaudit.audit.last_iterate`)
LAST_ITERATE = "epsilon_last_iterate_heuristic"
#: an int64 coordinate (what the canaries' flat indices are)
_INT64 = (-(2**63), 2**63 - 1)


def check_level(level: float) -> float:
    """The level of an audit recorded in a ledger: in [:data:`MIN_LEVEL`, :data:`MAX_LEVEL`] (what verify accepts).

    Raises:
        InvalidParameter: a level outside that range.
    """
    if not _level_ok(level):
        raise InvalidParameter(f"level must lie in [{MIN_LEVEL}, {MAX_LEVEL}] (what verify accepts), got {level!r}")
    return level


def _level_ok(level: Any) -> bool:
    return isinstance(level, (int, float)) and not isinstance(level, bool) and MIN_LEVEL <= level <= MAX_LEVEL


def _bits(members: np.ndarray) -> str:
    return "".join("1" if bit else "0" for bit in np.asarray(members, dtype=bool))


def _rules(rules: Sequence[GuessRule]) -> list[list[int]]:
    return [[int(rule.guess_in), int(rule.guess_out)] for rule in rules]


def commit(kind: str, members: np.ndarray, *, rules: Sequence[GuessRule], level: float, delta: float,
           **design: Any) -> str:
    """SHA-256 of the canonical JSON of the audit's design: kind, membership bits, guess rules, level, δ and the
    kind's own fields (:data:`_DESIGN`: the canaries and the family's parameters; module docstring)."""
    return canonical.sha256_hex(canonical.encode({
        "kind": kind, "members": _bits(members), "rules": _rules(rules), "level": float(level), "delta": float(delta),
        **design}))


def subsampled_design(canaries: Mapping[str, Any], sample_rate: float, steps: int) -> dict[str, Any]:
    """The design fields of a DP-SGD audit: its canaries' description and the charged run's (q, N)."""
    return {**canaries, "sample_rate": float(sample_rate), "steps": int(steps)}


def record_evidence(session: PluginSession, kind: str, *, charge_seq: int, commitment: str, report: AuditReport,
                    members: np.ndarray, scores: np.ndarray, design: Mapping[str, Any]) -> None:
    """Write the ``audit`` info record of a finished audit (module docstring); ``design`` holds the kind's fields,
    as passed to :func:`commit`."""
    audit = report.audit
    heuristic = ({} if report.last_iterate is None else {LAST_ITERATE: report.last_iterate})
    session.record_info({"audit": {
        "kind": kind, "commitment": commitment, "charge_seq": charge_seq, **design,
        "members": _bits(members), "scores": [float(s) for s in scores],
        "delta": audit.delta, "level": audit.level, "rules": _rules(audit.rules),
        "epsilon_cert": audit.claimed_epsilon, "epsilon_lb_steinke": report.steinke.epsilon,
        "epsilon_lb_fdp": report.fdp.epsilon, "fdp_assumes": report.fdp.assumes, **heuristic,
    }})


def audits(records: Sequence[Record]) -> list[tuple[int, Mapping[str, Any]]]:
    """(seq, body) of every ``audit`` info record."""
    return [(r.seq, r.body["info"]["audit"]) for r in of_type(records, INFO)
            if isinstance(r.body.get("info"), Mapping) and "audit" in r.body["info"]]


def _close(recorded: Any, recomputed: float) -> bool:
    """Whether a recorded number is the finite recomputed one (within :data:`TOLERANCE`); an infinite recomputation
    matches nothing (|x − ∞| ≤ tolerance·∞ would hold for every x)."""
    return (isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and math.isfinite(recomputed)
            and math.isfinite(recorded) and abs(recorded - recomputed) <= TOLERANCE * max(1.0, abs(recomputed)))


def _coordinates(value: Any) -> list[int]:
    if not (isinstance(value, list) and all(isinstance(c, int) and not isinstance(c, bool)
                                            and _INT64[0] <= c <= _INT64[1] for c in value)):
        raise ValueError("coordinates must be a list of 64-bit integers")
    return value


def _sha256(value: Any) -> str:
    if not (isinstance(value, str) and len(value) == 64 and not set(value) - set("0123456789abcdef")):
        raise ValueError("canary_digest must be 64 lowercase hex digits")
    return value


#: each kind's design fields (beyond bits, rules, level and δ) and how a record's value is read for :func:`commit`
_DESIGN: dict[str, dict[str, Any]] = {
    DIRAC: {"coordinates": _coordinates, "sample_rate": float, "steps": int},
    INPUT: {"canary_digest": _sha256, "sample_rate": float, "steps": int},
    MECHANISM: {"fdp_assumes": str},
}


def _design(audit: Mapping[str, Any]) -> dict[str, Any]:
    """The kind's design fields of a record, read as :func:`commit` takes them.

    Raises:
        KeyError, TypeError, ValueError: an unknown kind or a malformed field.
    """
    fields = _DESIGN.get(audit["kind"]) if isinstance(audit["kind"], str) else None
    if fields is None:
        raise ValueError(f"unknown audit kind {str(audit['kind'])[:80]!r}; known: {sorted(_DESIGN)}")
    return {key: read(audit[key]) for key, read in fields.items()}


def _family(audit: Mapping[str, Any]) -> Family:
    """The f-DP family a record's design names (DP-SGD kinds: the run's own (q, N); a mechanism audit: by name).

    Raises:
        KeyError, TypeError, ValueError: a malformed record or a family no mechanism audit uses.
    """
    if audit["kind"] != MECHANISM:
        return SubsampledGaussianFamily(float(audit["sample_rate"]), int(audit["steps"]))
    named = {f.name: f for f in (GaussianFamily(), ApproxDpFamily(float(audit["delta"])))}
    if audit["fdp_assumes"] not in named:
        raise ValueError(f"fdp_assumes {str(audit['fdp_assumes'])[:80]!r} is not a mechanism audit's family")
    return named[audit["fdp_assumes"]]


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
        delta, level = float(audit["delta"]), float(audit["level"])
        steinke, fdp = sweep_bounds(scores, members, rules, delta=delta, family=_family(audit),
                                    level=per_test_level(level))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise DPAuditError(f"malformed audit record: {exc}") from exc
    return {"epsilon_lb_steinke": steinke.epsilon, "epsilon_lb_fdp": fdp.epsilon}


def _digest(audit: Mapping[str, Any]) -> str:
    """:func:`commit` of the design an audit record states.

    Raises:
        KeyError, TypeError, ValueError: a malformed record.
    """
    bits = audit["members"]
    if not isinstance(bits, str) or set(bits) - {"0", "1"}:
        raise ValueError("members must be a string of 0/1 characters")
    return commit(str(audit["kind"]), np.array([b == "1" for b in bits]),
                  rules=[GuessRule(int(i), int(o)) for i, o in audit["rules"]], level=float(audit["level"]),
                  delta=float(audit["delta"]), **_design(audit))


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


def _event_problem(audit: Mapping[str, Any], event: PrivacyEvent | None) -> str | None:
    """Why the audited charge's event cannot be the one the record's design describes (None: it can)."""
    charge_seq = audit.get("charge_seq")
    if audit["kind"] == MECHANISM:
        if event is None:
            return f"charge {charge_seq!r} is not a charge of the ledger"
        if audit.get("fdp_assumes") == GaussianFamily().name and not isinstance(event, GaussianEvent):
            return (f"charge {charge_seq} is a {event.kind} charge: only a Gaussian mechanism is audited against "
                    "the gaussian family")
        return None
    if not isinstance(event, PoissonSubsampledGaussianEvent):
        return f"charge {charge_seq!r} is not a Poisson-subsampled Gaussian charge"
    if (event.sample_rate, event.steps) != (audit.get("sample_rate"), audit.get("steps")):
        return (f"family (q={audit.get('sample_rate')}, steps={audit.get('steps')}) is not the charged run's "
                f"(q={event.sample_rate}, steps={event.steps})")
    return None


def _design_problems(records: Sequence[Record], audit: Mapping[str, Any], event: PrivacyEvent) -> list[str]:
    """What the record states about its design that the ledger contradicts (module docstring)."""
    problems = []
    if audit.get("rules") != _rules(default_rules(len(audit["members"]))):
        problems.append("its guess rules are not the default rules for its canaries")
    level = audit.get("level")
    if not _level_ok(level):
        problems.append(f"level {level!r} is not in [{MIN_LEVEL}, {MAX_LEVEL}]")
    family = _family(audit)
    if audit.get("fdp_assumes") != family.name:
        problems.append(f"fdp_assumes {str(audit.get('fdp_assumes'))[:80]!r} is not the run's family {family.name!r}")
    delta = float(audit["delta"])
    if isinstance(event, PoissonSubsampledGaussianEvent) and LAST_ITERATE in audit:
        heuristic = last_iterate_epsilon(event.sample_rate, event.steps, event.noise_multiplier, delta)
        if not _close(audit[LAST_ITERATE], heuristic):
            problems.append(f"{LAST_ITERATE} recorded {str(audit[LAST_ITERATE])[:40]!r}, recomputed {heuristic:.6g} "
                            f"from the charge (q, N, sigma) at delta")
    elif LAST_ITERATE in audit:
        problems.append(f"{LAST_ITERATE} is stated for a charge that is not a DP-SGD run")
    try:
        certified = _certified_epsilon(records, event, delta)
    except DPAuditError as exc:
        return [*problems, f"the certified epsilon cannot be recomputed: {exc}"]
    if not _close(audit.get("epsilon_cert"), certified):
        problems.append(f"epsilon_cert recorded {audit.get('epsilon_cert')!r}, the run's accountant gives "
                        f"{certified:.6g} for charge {audit.get('charge_seq')}")
    return problems


def audit_problems(records: Sequence[Record],
                   charges: Sequence[tuple[int, PrivacyEvent]]) -> tuple[list[str], str | None]:
    """The ``audit`` check (module docstring): (problems, the check's line when there are none; None: the ledger
    holds no audit record and no commitment, so the check has nothing to say)."""
    committed_at = [(r.seq, r.body["info"]["audit_commitment"]) for r in of_type(records, INFO)
                    if isinstance(r.body.get("info"), Mapping)
                    and isinstance(r.body["info"].get("audit_commitment"), str)]
    found = audits(records)
    if not found and not committed_at:
        return [], None
    events = dict(charges)
    problems: list[str] = []
    used: dict[int, int] = {}  # commitment record → the audit record that answers it
    levels: set[float] = set()
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
        charge_ok = isinstance(charge_seq, int) and not isinstance(charge_seq, bool)
        same = [at for at, d in committed_at if d == digest]
        before = [at for at in same if charge_ok and at < charge_seq < seq]
        if digest != audit.get("commitment") or not same:
            problems.append(f"{where}: its design (canaries, bits, rules, level, delta, family) does not match a "
                            "commitment in the ledger")
        elif not before:
            problems.append(f"{where}: the commitment (record {same[0]}) does not precede the audited charge")
        elif before[-1] in used:
            problems.append(f"{where}: its commitment (record {before[-1]}) was already used by audit record "
                            f"{used[before[-1]]}")
        else:
            used[before[-1]] = seq
        levels.add(audit.get("level"))
        event = events.get(charge_seq) if charge_ok else None
        wrong_event = _event_problem(audit, event)
        if wrong_event is not None or event is None:
            problems.append(f"{where}: {wrong_event}")
            continue
        try:
            problems.extend(f"{where}: {problem}" for problem in _design_problems(records, audit, event))
        except (KeyError, TypeError, ValueError, OverflowError, DPAuditError) as exc:
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
    acted = [r.seq for r in of_type(records, RELEASE)] + list(events)
    idle = []
    for at, _ in committed_at:
        if at in used:
            continue
        later = [s for s in acted if s > at]
        if later:
            problems.append(f"commitment record {at}: no audit record answers it, yet record {min(later)} charged or "
                            "released after it (an audit whose evidence is missing: selective reporting)")
        else:
            idle.append(at)
    shown = ", ".join(str(level) for level in sorted(levels, key=str))
    line = (f"{plural(len(found), 'audit')}: level {shown}; committed design, epsilon_cert, both tests' epsilon_lb "
            "and the last-iterate heuristic (DP-SGD) recomputed" if found else "no audit record")
    if idle:
        line += (f"; {plural(len(idle), 'commitment')} (record {', '.join(map(str, idle))}) with nothing charged or "
                 "released after it: an audit refused before its run, nothing audited")
    return problems, line
