"""Offline verification of an evidence bundle (``ledger.jsonl``, ``certificate.json``, ``public_key.pem``).

Every check runs, and every failure is reported (not only the first):

1. the ledger parses and its hash chain is intact; the certificate names the ledger's last hash and length
   (so a truncated or extended ledger fails);
2. the certificate's Ed25519 signature verifies under the bundled public key, whose fingerprint it names;
3. the certificate's budget, neighbouring relation and data sets match the ledger's ``open`` record;
4. every charge decodes to a known event under the session's neighbouring relation; every sensitivity with a
   registered formula is recomputed from its public inputs (the recorded bound must not be smaller, nor its
   recorded failure probability, for a bound that holds only with high probability); every
   additive-noise charge is re-derived from its noise parameters (privacy maps);
5. every release refers to an earlier charge;
6. the claim is recomposed with the session's accountant and re-checked by an independent implementation
   (:func:`dpaudit.accounting.recheck`), and it must lie within the budget;
7. the certificate lists every assumption the charges rest on; a seeded (test) run is flagged not for release.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit import store as run_store
from dpaudit.accounting import recheck
from dpaudit.certificate import FORMAT, charged_events, collect_assumptions, unsigned
from dpaudit.errors import DPAuditError, VerificationError
from dpaudit.events import AboveThresholdEvent, GaussianEvent, LaplaceEvent, LeafEvent, PrivacyEvent, compose
from dpaudit.ledger import Record, read_records, verify_chain
from dpaudit.mechanisms.calibration import gaussian_event_delta
from dpaudit.privacy_maps import above_threshold_epsilon, laplace_epsilon
from dpaudit.progress import progress
from dpaudit.registry import load_plugins
from dpaudit.signing import key_fingerprint, verify_signature

#: relative slack for float comparisons of recomputed values (rounding in the last bits, nothing more)
REL_TOL = 1e-9


@dataclass(frozen=True)
class Check:
    """One verification check: its name, outcome and a human-readable detail."""

    name: str
    ok: bool
    detail: str


@dataclass
class VerificationReport:
    """All checks run on a bundle; ``valid`` iff every check passed."""

    bundle: str
    checks: list[Check] = field(default_factory=list)
    claim: dict[str, Any] | None = None
    recheck: dict[str, Any] | None = None

    @property
    def valid(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def reasons(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append(Check(name, bool(ok), detail))

    def to_dict(self) -> dict[str, Any]:
        return {"bundle": self.bundle, "valid": self.valid, "reasons": self.reasons,
                "checks": [asdict(c) for c in self.checks], "claim": self.claim, "recheck": self.recheck}


def verify_bundle(bundle: Path, *, allow_not_for_release: bool = False) -> VerificationReport:
    """Verify an evidence bundle folder offline (no MLflow needed).

    Args:
        bundle: folder with ``ledger.jsonl``, ``certificate.json`` and ``public_key.pem``.
        allow_not_for_release: accept a seeded (test) run; by default it fails the ``for_release`` check.

    A folder with a ledger but no certificate (a session that never closed) is reported invalid after its ledger
    chain is checked, so an auditor can see that a crashed run's ledger verifies up to its last record.

    Raises:
        VerificationError: the ledger is missing or a file is unreadable (a usage problem, not an invalid run).
        PluginError: an installed plugin fails to load (its sensitivity formulas could not be registered).
    """
    bundle = Path(bundle)
    load_plugins()  # plugins register their sensitivity formulas; a broken plugin fails loudly here
    report = VerificationReport(str(bundle))
    if not (bundle / run_store.LEDGER).is_file():
        raise VerificationError(f"{bundle} has no {run_store.LEDGER}: not an evidence bundle or run folder")
    records, problems = read_records(bundle / run_store.LEDGER)
    chain = problems + verify_chain(records)
    report.add("ledger-chain", not chain, "; ".join(chain) or f"{len(records)} records, hash chain intact")
    if not records:
        report.add("ledger-nonempty", False, "ledger holds no records")
        return report
    missing = [n for n in (run_store.CERTIFICATE, run_store.PUBLIC_KEY) if not (bundle / n).is_file()]
    if missing:
        # e.g. a session killed before it closed: its ledger still verifies up to its last record (above)
        report.add("certificate-present", False, f"no {' or '.join(missing)}: the session never closed (a crash?) "
                   f"or the bundle is incomplete; the ledger's {len(records)} records were checked, nothing is claimed")
        return report
    certificate = canonical.read_object(bundle / run_store.CERTIFICATE, VerificationError)
    public_pem = (bundle / run_store.PUBLIC_KEY).read_text(encoding="utf-8")
    _check_certificate(report, certificate, records, public_pem, allow_not_for_release)
    try:
        charges = charged_events(records)
    except DPAuditError as exc:
        report.add("events-decode", False, str(exc))
        return report
    report.add("events-decode", True, f"{len(charges)} charges decoded")
    _check_charges(report, records, charges)
    _check_releases(report, records)
    _check_claim(report, certificate, charges)
    listed = {(a["id"], a["statement"]) for a in certificate.get("assumptions", [])}
    needed = {(a["id"], a["statement"]) for a in collect_assumptions(charges)}
    missing = needed - listed
    conditional = sum(1 for a in certificate.get("assumptions", []) if a.get("conditional"))
    report.add("assumptions-listed", not missing,
               f"missing from certificate: {sorted(i for i, _ in missing)}" if missing
               else f"{len(needed)} assumptions listed ({conditional} conditional)")
    return report


def _check_certificate(report: VerificationReport, cert: dict[str, Any], records: list[Record], public_pem: str,
                       allow_not_for_release: bool) -> None:
    report.add("certificate-format", cert.get("format") == FORMAT, f"format {cert.get('format')!r}")
    ledger = cert.get("ledger", {})
    head_ok = ledger.get("head") == records[-1].hash and ledger.get("records") == len(records)
    report.add("ledger-head", head_ok,
               f"certificate names head {str(ledger.get('head'))[:16]}… of {ledger.get('records')} records; ledger "
               f"ends at {records[-1].hash[:16]}… after {len(records)}")
    signature = cert.get("signature", {})
    fingerprint_ok = cert.get("public_key_fingerprint") == _fingerprint(public_pem)
    sig_ok = fingerprint_ok and verify_signature(public_pem, unsigned(cert), str(signature.get("value", "")))
    report.add("signature", sig_ok, "Ed25519 signature valid" if sig_ok else
               ("public key fingerprint does not match the certificate" if not fingerprint_ok
                else "signature does not verify (certificate edited or wrong key)"))
    opened = records[0].body if records[0].type == "open" else {}
    same = (opened.get("budget") == cert.get("budget") and opened.get("neighbouring") == cert.get("neighbouring")
            and opened.get("protected") == cert.get("protected_datasets"))
    report.add("open-record", bool(opened) and same,
               "budget, neighbouring relation and protected data match the ledger's open record" if same
               else "certificate budget / neighbouring / protected data differ from the ledger's open record")
    for_release = bool(opened.get("randomness", {}).get("for_release"))
    report.add("for-release", for_release or allow_not_for_release,
               "secure randomness" if for_release else "seeded randomness: NOT FOR RELEASE")


def _fingerprint(public_pem: str) -> str:
    try:
        return key_fingerprint(public_pem)
    except DPAuditError:
        return ""


def _check_charges(report: VerificationReport, records: list[Record], charges: list[tuple[int, PrivacyEvent]]) -> None:
    relation = records[0].body.get("neighbouring")
    problems: list[str] = []
    recomputed = declared = 0
    for seq, event in progress(charges, "verifying charges", total=len(charges)):
        for leaf, _ in event.leaves():
            assert isinstance(leaf, LeafEvent)
            if leaf.neighbouring.value != relation:
                problems.append(f"charge {seq}: {leaf.neighbouring.value} event in a {relation} session")
            try:
                bound = leaf.sensitivity.recompute(leaf.neighbouring)
                failure = leaf.sensitivity.recompute_failure_probability()
            except DPAuditError as exc:
                problems.append(f"charge {seq}: sensitivity not recomputable: {exc}")
                continue
            if bound is None:
                declared += 1
            else:
                recomputed += 1
                if leaf.sensitivity.value < bound * (1 - REL_TOL):
                    problems.append(f"charge {seq}: recorded sensitivity {leaf.sensitivity.value} < recomputed "
                                    f"{bound} ({leaf.sensitivity.formula})")
                if leaf.sensitivity.failure_probability < failure * (1 - REL_TOL):
                    problems.append(f"charge {seq}: recorded failure probability {leaf.sensitivity.failure_probability}"
                                    f" < recomputed {failure} ({leaf.sensitivity.formula})")
            problems.extend(f"charge {seq}: {p}" for p in _privacy_map_problems(leaf))
    report.add("charges", not problems, "; ".join(problems) or
               f"{len(charges)} charges; {recomputed} sensitivities recomputed from public inputs, {declared} "
               "declared (listed as assumptions); noise parameters match every charge")


def _privacy_map_problems(leaf: LeafEvent) -> list[str]:
    if isinstance(leaf, LaplaceEvent):
        eps = laplace_epsilon(leaf)
        return [] if eps <= leaf.epsilon * (1 + REL_TOL) else [f"Laplace noise gives ε={eps} > charged {leaf.epsilon}"]
    if isinstance(leaf, AboveThresholdEvent):
        eps = above_threshold_epsilon(leaf)
        return [] if eps <= leaf.epsilon * (1 + REL_TOL) else [
            f"AboveThreshold noise gives ε={eps} > charged {leaf.epsilon}"]
    if isinstance(leaf, GaussianEvent):
        delta = gaussian_event_delta(leaf)
        return [] if delta <= leaf.delta * (1 + REL_TOL) else [
            f"Gaussian noise gives δ={delta:.3g} at ε={leaf.epsilon} > charged δ={leaf.delta}"]
    return []


def _check_releases(report: VerificationReport, records: list[Record]) -> None:
    charged: set[int] = set()
    orphans = []
    for r in records:
        if r.type == "charge":
            charged.add(r.seq)
        elif r.type == "release" and r.body.get("charge_seq") not in charged:
            orphans.append(r.seq)
    report.add("releases", not orphans, f"releases without an earlier charge: {orphans}" if orphans
               else "every release follows its charge")


def _check_claim(report: VerificationReport, cert: dict[str, Any], charges: list[tuple[int, PrivacyEvent]]) -> None:
    claim = cert.get("claim") or {}
    report.claim = claim
    try:
        eps, delta = float(claim["epsilon"]), float(claim["delta"])
        budget_eps, budget_delta = float(cert["budget"]["epsilon"]), float(cert["budget"]["delta"])
    except (KeyError, TypeError, ValueError):
        report.add("claim", False, "certificate has no numeric claim / budget")
        return
    if not (math.isfinite(eps) and math.isfinite(delta)):
        report.add("claim", False, "claim is not finite")
        return
    report.add("within-budget", eps <= budget_eps * (1 + REL_TOL) and delta <= budget_delta,
               f"claim ({eps:.6g}, {delta:.3g}) vs budget ({budget_eps:g}, {budget_delta:g})")
    if not charges:
        report.add("recompose", eps >= 0, "no charges: nothing to compose")
        return
    try:
        result = recheck(str(claim.get("attained_by")), compose([e for _, e in charges]), delta, eps)
    except DPAuditError as exc:
        report.add("recompose", False, f"recomposition failed: {exc}")
        return
    report.recheck = asdict(result)
    report.add("recompose", result.ok, result.reason)
