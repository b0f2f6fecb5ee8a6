"""Offline verification of an evidence bundle (``ledger.jsonl``, ``certificate.json``, ``public_key.pem``).

Every check runs, and every failure is reported (not only the first):

1. the ledger parses and its hash chain is intact; the certificate names the ledger's last hash and length
   (so a truncated or extended ledger fails);
2. the certificate's Ed25519 signature verifies under the bundled public key, whose fingerprint it names, and
   that key is trusted (:mod:`dpaudit.trust`: pinned, the local store's own key, or in the trust store); the
   certificate names the run id and store id of the ledger's ``open`` record, a run folder in a store has its run
   id as name, and the store's transparency log (:mod:`dpaudit.transparency`) names this very certificate;
3. the certificate's budget, neighbouring relation and data sets match the ledger's ``open`` record;
4. every charge decodes to a known event under the session's neighbouring relation; every sensitivity with a
   registered formula is recomputed from its public inputs (the recorded bound must not be smaller, nor its
   recorded failure probability, for a bound that holds only with high probability); every
   additive-noise charge is re-derived from its noise parameters (privacy maps);
5. every release refers to an earlier charge and stays within what that charge covers (:mod:`dpaudit.coverage`:
   the number of outputs, their shape, AboveThreshold rounds and answers), replayed by the same rules the session
   enforces; no record body holds a confidential key (:mod:`dpaudit.public_values`); every data access and every
   charge's ``data`` names a data set the ``open`` record declares, in its role (``data-access``);
6. the claim is recomposed with the session's accountant and re-checked by an independent implementation
   (:func:`dpaudit.accounting.recheck`), and it must lie within the budget; for an adaptive session (its ``open``
   record names a Rényi filter) every prefix of the charges must pass that filter, by our RDP curves and by
   dp_accounting's, and the claim must be the filter's budget
   (:func:`dpaudit.accounting.filter_recheck.recheck_filter`);
7. the certificate lists every assumption the charges rest on; a seeded (test) run is flagged not for release,
   and so is a run that did not close FINISHED (``run aborted``, ``run failed``, ``run refused``): both fail
   unless ``allow_not_for_release`` accepts them, and the verdict then says so;
8. the certificate's NIST SP 800-226 fields match their recomputation from the ledger (:mod:`dpaudit.nist_fields`;
   a weak guarantee, ε ≥ 10 or δ > 1/n², is a warning, not a failure); an in-toto envelope (the bundle's own or a
   named one, :mod:`dpaudit.intoto`) is signed by the run's key over this certificate and ledger head, and a PROV
   document (:mod:`dpaudit.prov`) is the one regenerated from the ledger.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePath
from typing import Any

from dpaudit import canonical, transparency
from dpaudit import store as run_store
from dpaudit.accounting import recheck
from dpaudit.accounting.charges import privacy_map_problem
from dpaudit.accounting.filter_recheck import recheck_filter
from dpaudit.certificate import (
    FORMAT,
    READABLE_FORMATS,
    charged_events,
    close_status,
    collect_assumptions,
    session_filter,
    unfinished_reason,
    unsigned,
)
from dpaudit.components import certified_components
from dpaudit.coverage import CoverageState, after_release, unused
from dpaudit.display import plural
from dpaudit.errors import DPAuditError, LedgerError, UncoveredRelease, VerificationError
from dpaudit.events import LeafEvent, PrivacyEvent, compose
from dpaudit.files import read_regular
from dpaudit.gcpause import cyclic_gc_paused
from dpaudit.intoto import ENVELOPE_FILE, MAX_ENVELOPE_BYTES, envelope_problems
from dpaudit.ledger import Record, read_records, verify_chain
from dpaudit.nist_fields import checked_fields
from dpaudit.progress import progress
from dpaudit.prov import PROV_FILE, prov_bytes
from dpaudit.public_values import CONFIDENTIAL_KEYS, find_confidential
from dpaudit.record_index import records_indexed
from dpaudit.records import CHARGE, OPEN, RELEASE, ReleaseBody, bodies_kept
from dpaudit.registry import ensure_formulas
from dpaudit.report import REPORT_FILES, report_from
from dpaudit.sensitivity import DECLARED
from dpaudit.sidecar import check_array_file
from dpaudit.signing import key_fingerprint, verify_signature
from dpaudit.tolerance import REL_TOL, within
from dpaudit.trust import KeyTrust, TrustDecision

MAX_RUN_DIR_CHARS = 4096
"""The longest ``run.run_dir`` accepted in a bundle's ``report.json``."""


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
    signing_key: TrustDecision | None = None
    not_for_release: list[str] = field(default_factory=list)  # why not, also when --allow-not-for-release accepts it
    warnings: list[str] = field(default_factory=list)  # a weak guarantee (dpaudit.nist_fields): reported, not failed

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
                "checks": [asdict(c) for c in self.checks], "claim": self.claim, "recheck": self.recheck,
                "signing_key": None if self.signing_key is None else self.signing_key.to_dict(),
                "not_for_release": self.not_for_release, "warnings": self.warnings}


@cyclic_gc_paused()  # objects kept per record: full collections would walk them all (dpaudit/gcpause.py)
@bodies_kept()  # the checks and the regenerated report parse each charge and release body once
@records_indexed()  # the checks that read a few record types select them once (dpaudit/record_index.py)
def verify_bundle(bundle: Path, *, allow_not_for_release: bool = False,
                  trust: KeyTrust | None = None, in_toto: Path | None = None,
                  run_id: str | None = None) -> VerificationReport:
    """Verify an evidence bundle folder offline (no MLflow needed).

    Args:
        bundle: folder with ``ledger.jsonl``, ``certificate.json`` and ``public_key.pem``.
        allow_not_for_release: accept a seeded (test) run and one that did not close FINISHED (aborted, failed,
            refused); by default they fail the ``for-release`` and ``run-status`` checks.
        trust: which signing keys are trusted; default :meth:`KeyTrust.default`, what ``dpaudit verify`` uses
            with no flags: the trust store and the key of the local store (``$DPAUDIT_HOME`` or
            ``./dpaudit_runs``). A run of another store needs ``KeyTrust.default(store)`` or a pinned key.
        in_toto: an in-toto DSSE envelope of the run (:mod:`dpaudit.intoto`) to check besides the bundle's own
            ``certificate.intoto.json``, which is checked whenever the bundle carries one.
        run_id: the run the caller asked for (``dpaudit verify RUN_ID``, :func:`dpaudit.runs.locate_run`): the
            certificate and the ledger's open record must name it (``requested-run`` check), so that a bundle
            uploaded under another run's name (an MLflow run tagged with that id) is not certified as that run.

    A folder with a ledger but no certificate (a session that never closed) is reported invalid after its ledger
    chain is checked, so an auditor can see that a crashed run's ledger verifies up to its last record.

    Raises:
        VerificationError: the ledger is missing or a file is unreadable (a usage problem, not an invalid run).
        PluginError: a charge names a formula no loaded plugin registers, and an installed plugin fails to
            load.
        TrustStoreError: the trust store is malformed.
    """
    bundle = Path(bundle)
    trust = trust if trust is not None else KeyTrust.default()
    report = VerificationReport(str(bundle))
    if not os.path.lexists(bundle / run_store.LEDGER):
        raise VerificationError(f"{bundle} has no {run_store.LEDGER}: not an evidence bundle or run folder")
    try:
        records, problems = read_records(bundle / run_store.LEDGER)
    except LedgerError as exc:  # a symlink, a device, unreadable: invalid evidence, not a usage error
        report.add("evidence-files", False, str(exc))
        return report
    chain = problems + verify_chain(records)
    report.add("ledger-chain", not chain, "; ".join(chain) or f"{plural(len(records), 'record')}, hash chain intact")
    _check_public_bodies(report, records)
    if not records:
        report.add("ledger-nonempty", False, "ledger holds no records")
        return report
    missing = [n for n in (run_store.CERTIFICATE, run_store.PUBLIC_KEY) if not os.path.lexists(bundle / n)]
    if missing:
        # e.g. a session killed before it closed: its ledger still verifies up to its last record (above)
        report.add("certificate-present", False, f"no {' or '.join(missing)}: the session never closed (a crash?) "
                   f"or the bundle is incomplete; the ledger's {len(records)} records were checked, nothing is claimed "
                   "(the run's owner finishes or aborts it with `dpaudit recover RUN [--abort]`)")
        return report
    try:
        certificate = canonical.read_object(bundle / run_store.CERTIFICATE, VerificationError)
        public_pem = read_regular(bundle / run_store.PUBLIC_KEY, run_store.MAX_PUBLIC_KEY_BYTES,
                                  VerificationError).decode()
    except (VerificationError, UnicodeDecodeError) as exc:
        report.add("evidence-files", False, str(exc))
        return report
    report.add("evidence-files", True, "regular files within the size limits, strict JSON")
    _check_certificate(report, certificate, records, public_pem, allow_not_for_release)
    _check_key_trust(report, public_pem, trust)
    opened = records[0].body if records[0].type == OPEN else {}
    _check_run_binding(report, bundle, certificate, opened, trust)
    if run_id is not None:
        _check_requested_run(report, run_id, certificate, opened)
    if os.path.lexists(bundle / PROV_FILE):
        _check_prov(report, bundle / PROV_FILE, records, certificate)
    own = [bundle / ENVELOPE_FILE] if os.path.lexists(bundle / ENVELOPE_FILE) else []
    _check_in_toto(report, own + ([Path(in_toto)] if in_toto is not None else []), records, certificate, public_pem)
    try:
        charges = charged_events(records)
    except DPAuditError as exc:
        _check_reports(report, bundle, records, certificate, None)
        report.add("events-decode", False, str(exc))
        return report
    _check_reports(report, bundle, records, certificate, charges)
    report.add("events-decode", True, f"{plural(len(charges), 'charge')} decoded")
    _check_charges(report, records, charges)
    _check_releases(report, bundle, records, charges)
    _check_data_access(report, records)
    _check_audit(report, records, charges)
    _check_epsilon_claims(report, records, charges)
    _check_claim(report, certificate, charges, opened)
    _check_components(report, records, certificate, charges)
    needed_assumptions = collect_assumptions(charges, adaptive="adaptive" in opened)
    ok, detail, report.warnings = checked_fields(certificate, records, [e for _, e in charges], needed_assumptions)
    report.add("nist-fields", ok, detail)
    assumptions = certificate.get("assumptions", [])
    if not (isinstance(assumptions, list) and all(isinstance(a, dict) and isinstance(a.get("id"), str)
                                                  and isinstance(a.get("statement"), str) for a in assumptions)):
        report.add("assumptions-listed", False, "the certificate's assumptions are not a list of {id, statement}")
        return report  # a hostile certificate: reported, not a crash
    listed = {(a["id"], a["statement"]) for a in assumptions}
    needed = {(a["id"], a["statement"]) for a in needed_assumptions}
    missing = needed - listed
    conditional = sum(1 for a in assumptions if a.get("conditional"))
    report.add("assumptions-listed", not missing,
               f"missing from certificate: {sorted(i for i, _ in missing)}" if missing
               else f"{plural(len(needed), 'assumption')} listed ({conditional} conditional)")
    return report


def _check_reports(report: VerificationReport, bundle: Path, records: list[Record], cert: dict[str, Any],
                   charges: list[tuple[int, PrivacyEvent]] | None) -> None:
    """Every report file the bundle carries (:data:`dpaudit.report.REPORT_FILES`) is what a reviewer reads but is
    not signed, so it must be byte for byte the report regenerated from the checked ledger and certificate. The
    one field taken from the file is ``report.json``'s ``run.run_dir`` (the folder it was written in), a path of at
    most :data:`MAX_RUN_DIR_CHARS` characters whose last component is the certificate's run id. ``charges``: the
    charges as decoded for the other checks, reused by the report model (None where they do not decode)."""
    present = [name for name in REPORT_FILES if os.path.lexists(bundle / name)]
    if not present:
        report.add("reports", True, "the bundle carries no report files: nothing to compare")
        return
    try:
        model = report_from(records, cert, "", decoded=None if charges is None else dict(charges))
    except DPAuditError as exc:
        report.add("reports", False, f"cannot regenerate the reports from the ledger: {exc}")
        return
    run = cert.get("run") if isinstance(cert.get("run"), dict) else {}
    problems = []
    for name in present:
        # report.json names the folder it was written in: rendered once, with a fresh placeholder in that place
        # (its non-ASCII letter, quote and backslash show how the renderer escapes a string)
        placeholder = secrets.token_hex(16) + '\u00e9"\\' if name == run_store.REPORT_JSON else ""
        expected = REPORT_FILES[name]({**model, "run": {**model["run"], "run_dir": placeholder}})
        slack = 2**20 + MAX_RUN_DIR_CHARS * 6  # room for an edit (reported as a difference) and a \u-escaped run_dir
        try:
            found = read_regular(bundle / name, len(expected) + slack, VerificationError)
            if placeholder:
                expected = _with_run_dir(name, expected, placeholder, found, run.get("id"))
        except (VerificationError, UnicodeDecodeError) as exc:
            problems.append(f"{name}: {exc}")
            continue
        if found != expected:
            at = len(os.path.commonprefix([found, expected]))
            problems.append(f"{name} differs from the report regenerated from the ledger and certificate (from byte "
                            f"{at}): edited after the run closed?")
    report.add("reports", not problems, "; ".join(problems) or
               f"{', '.join(present)} identical to the reports regenerated from the ledger and certificate")


def _with_run_dir(name: str, expected: bytes, placeholder: str, found: bytes, run_id: Any) -> bytes:
    """``expected`` (``report.json`` rendered with ``placeholder`` as ``run.run_dir``) with the folder named at that
    place in ``found`` instead: the report regenerated for the folder the file says it was written in.

    The placeholder is fresh random text, so it occurs once, spelled as the renderer spells strings (``\\u``
    escapes or UTF-8, which the placeholder's non-ASCII letter tells apart), and the folder is spelled the same way;
    a file that differs from ``expected`` anywhere but there is left to the byte comparison. The folder must be a
    JSON string of at most :data:`MAX_RUN_DIR_CHARS` characters whose last component is ``run_id``.

    Raises:
        VerificationError: the file names no such folder, or the regenerated report does not show the placeholder.
    """
    for ascii_only in (False, True):
        needle = json.dumps(placeholder, ensure_ascii=ascii_only).encode("utf-8")
        if expected.count(needle) == 1:
            break
    else:
        raise VerificationError(f"the regenerated {name} does not name its folder once as a JSON string")
    # the two sides of the placeholder as views, not copies (report.json of 10⁵ records: tens of megabytes each)
    at = expected.find(needle)
    before, after = memoryview(expected)[:at], memoryview(expected)[at + len(needle):]
    if not (found.startswith(before) and found.endswith(after) and len(found) >= len(before) + len(after)):
        return expected
    literal = found[len(before):len(found) - len(after)]
    try:
        run_dir = json.loads(literal) if len(literal) <= 2 + MAX_RUN_DIR_CHARS * 6 else None
        if isinstance(run_dir, str):
            run_dir.encode("utf-8")  # a lone surrogate ("\ud800") is valid JSON but names no folder
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        run_dir = None
    if not (isinstance(run_dir, str) and len(run_dir) <= MAX_RUN_DIR_CHARS
            and (run_id is None or PurePath(run_dir).name == run_id)):
        raise VerificationError(f"{name} names run folder {literal[:80].decode('utf-8', 'replace')}, not one of run "
                                f"{run_id!r}")
    text = json.dumps(run_dir, ensure_ascii=ascii_only).encode("utf-8")
    # ``found`` is ``before + literal + after``: where ``text`` is ``literal``, it is the report for that folder
    return found if text == literal else b"".join((before, text, after))


def _check_certificate(report: VerificationReport, cert: dict[str, Any], records: list[Record], public_pem: str,
                       allow_not_for_release: bool) -> None:
    report.add("certificate-format", cert.get("format") in READABLE_FORMATS, f"format {cert.get('format')!r}")
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
    opened = records[0].body if records[0].type == OPEN else {}
    same = (opened.get("budget") == cert.get("budget") and opened.get("neighbouring") == cert.get("neighbouring")
            and opened.get("protected") == cert.get("protected_datasets"))
    report.add("open-record", bool(opened) and same,
               "budget, neighbouring relation and protected data match the ledger's open record" if same
               else "certificate budget / neighbouring / protected data differ from the ledger's open record")
    for_release = bool(opened.get("randomness", {}).get("for_release"))
    report.add("for-release", for_release or allow_not_for_release,
               "secure randomness" if for_release else "seeded randomness: NOT FOR RELEASE")
    unfinished = unfinished_reason(close_status(records))
    report.not_for_release += ([] if for_release else ["seeded randomness"]) + ([unfinished] if unfinished else [])
    report.add("run-status", unfinished is None or allow_not_for_release,
               "the run closed FINISHED" if unfinished is None else
               unfinished + (": NOT FOR RELEASE, accepted with --allow-not-for-release" if allow_not_for_release
                             else ""))
    # the signed release status must be the ledger's, also when --allow-not-for-release accepts the run: a
    # certificate reading "for release" for a seeded or unfinished run would mislead whoever reads the file alone
    releasable = for_release and unfinished is None
    stated = cert.get("for_release", releasable)  # certificates older than the field state nothing
    report.add("release-status", stated is releasable,
               f"the certificate states for_release={stated}, as the ledger shows" if stated is releasable else
               f"the certificate states for_release={stated!r} but the ledger shows a run that is "
               f"{'for release' if releasable else 'NOT for release'}")


def _check_in_toto(report: VerificationReport, envelopes: list[Path], records: list[Record], cert: dict[str, Any],
                   public_pem: str) -> None:
    """Each in-toto envelope (:func:`dpaudit.intoto.envelope_problems`) is signed by the run's key and states this
    very certificate and ledger head. The bundle's own file is checked whenever present, else a named one."""
    for path in envelopes:
        try:
            data = read_regular(path, MAX_ENVELOPE_BYTES, VerificationError)
        except VerificationError as exc:
            report.add("in-toto", False, str(exc))
            continue
        problems = envelope_problems(data, public_pem, records, cert)
        report.add("in-toto", not problems, f"{path.name}: " + ("; ".join(problems) or "DSSE signature by the run's "
                                                                  "key, statement of this certificate and ledger head"))


def _check_prov(report: VerificationReport, path: Path, records: list[Record], cert: dict[str, Any]) -> None:
    """A bundle's PROV document (:mod:`dpaudit.prov`) is not signed: it must be the one regenerated from the checked
    ledger and certificate, byte for byte."""
    try:
        expected = prov_bytes(records, cert)
        same = read_regular(path, len(expected) + 1, VerificationError) == expected
    except DPAuditError as exc:
        report.add("prov", False, f"{path.name}: {exc}")
        return
    report.add("prov", same, f"{path.name} " + ("identical to the PROV document regenerated from the ledger" if same
                                                 else "differs from the PROV document regenerated from the ledger"))


def _check_key_trust(report: VerificationReport, public_pem: str, trust: KeyTrust) -> None:
    """The signing key must be one the verifier trusts: a valid signature by any other key proves nothing."""
    decision = trust.decide(_fingerprint(public_pem))
    report.signing_key = decision
    fingerprint = decision.fingerprint or "(unparsable public key)"
    if decision.trusted:
        by = decision.trusted_by + (f" {decision.name!r}" if decision.name else "")
        report.add("signing-key", True, f"signing key {fingerprint} trusted ({by})")
    elif decision.accepted_unpinned:
        report.add("signing-key", True, f"signing key {fingerprint} NOT PINNED: accepted the bundle's own key "
                   "(--accept-bundle-key); the signature shows only that whoever made this bundle signed it")
    else:
        report.add("signing-key", False, f"untrusted signing key {fingerprint}: compare it with the fingerprint "
                   "published out of band, then pin it (--trusted-key, or `dpaudit keys trust`)")


def _check_run_binding(report: VerificationReport, bundle: Path, cert: dict[str, Any], opened: dict[str, Any],
                       trust: KeyTrust) -> None:
    """The certificate names the run and store of the ledger's open record; a run folder in a store is named by
    its run id, sits in the store the run names, and is in that store's transparency log."""
    run = cert.get("run") if isinstance(cert.get("run"), dict) else {}
    if cert.get("format") != FORMAT:
        downgraded = "run_id" in opened
        report.add("run-binding", not downgraded,
                   f"a {cert.get('format')} certificate for a ledger whose open record names run "
                   f"{opened.get('run_id')!r}: a downgraded certificate" if downgraded else
                   f"UNBOUND legacy certificate ({cert.get('format')}): it names no run id or store, so a copy under "
                   "another run's name or in another store cannot be detected, and no store log vouches for it")
        return
    run_id, store_id = run.get("id"), run.get("store_id")
    problems = []
    if not isinstance(run_id, str) or not run_id or run_id != opened.get("run_id"):
        problems.append(f"certificate names run {run_id!r}, the ledger's open record {opened.get('run_id')!r}")
    if not isinstance(store_id, str) or store_id != opened.get("store_id"):
        problems.append(f"certificate names store {store_id!r}, the ledger's open record {opened.get('store_id')!r}")
    if cert.get("public_key_fingerprint") != opened.get("signing_key_fingerprint"):
        problems.append(f"certificate signed by key {str(cert.get('public_key_fingerprint'))[:16]}…, the ledger was "
                        f"opened for key {str(opened.get('signing_key_fingerprint'))[:16]}…")
    store = bundle.parent
    in_store = run_store.is_store(store)
    if in_store:
        if bundle.name != run_id:
            problems.append(f"folder {bundle.name} of store {store} holds run {run_id!r} (a run's files copied under "
                            "another run's id?)")
        try:
            found = run_store.read_store_id(store)
        except DPAuditError as exc:
            found = f"unreadable ({exc})"
        if found != store_id:
            problems.append(f"the run belongs to store {store_id!r} but sits in store {store} with id {found!r} "
                            "(moved or replayed from another store?)")
    where = f"folder of store {store}" if in_store else "exported bundle: folder name and store log not checked"
    report.add("run-binding", not problems, "; ".join(problems) or f"run {run_id} of store {store_id} ({where})")
    if in_store:
        _check_logged(report, store, bundle.name, cert, trust)


def _check_requested_run(report: VerificationReport, requested: str, cert: dict[str, Any],
                         opened: dict[str, Any]) -> None:
    """The run asked for is the run certified: the signed certificate (a current-format one; a legacy certificate
    names no run) and the ledger's open record both name ``requested``."""
    run = cert.get("run") if isinstance(cert.get("run"), dict) else {}
    named = {"the certificate": run.get("id") if cert.get("format") == FORMAT else None,
             "the ledger's open record": opened.get("run_id")}
    wrong = [f"{where} names run {got!r}" for where, got in named.items() if got != requested]
    report.add("requested-run", not wrong,
               f"asked to verify run {requested!r}, but {' and '.join(wrong)} (another run's evidence under its "
               "name?)" if wrong else f"the certificate and the ledger are run {requested}'s")


def _check_logged(report: VerificationReport, store: Path, run_id: str, cert: dict[str, Any],
                  trust: KeyTrust) -> None:
    """The store's transparency log names run ``run_id`` (the folder's name) with this very certificate, under a
    valid, trusted signed head."""
    try:
        entries, head = transparency.read_log(store), transparency.read_head(store)
        expected = transparency.LogEntry.of(run_id, cert)
    except (DPAuditError, KeyError, TypeError, ValueError) as exc:
        report.add("transparency-log", False, f"store log unreadable or certificate incomplete: {exc}")
        return
    problems = transparency.head_problems(head, entries)
    index = next((i for i, e in enumerate(entries) if e.run_id == run_id), None)
    if index is None:
        problems.append(f"run {run_id} is not in the store's transparency log (closed elsewhere, or its entry "
                        "removed)")
    elif entries[index] != expected:
        problems.append(f"the store log names another certificate for run {run_id} (logged "
                        f"{entries[index].certificate_sha256[:16]}…, found {expected.certificate_sha256[:16]}…): "
                        "the run's files were swapped or replayed")
    if head is not None and not trust.decide(head.key_fingerprint).acceptable:
        problems.append(f"the log head is signed by untrusted key {head.key_fingerprint}")
    report.add("transparency-log", not problems, "; ".join(problems) or
               f"entry {index} of the store log; signed head {head.token if head else '-'}")


def _fingerprint(public_pem: str) -> str:
    try:
        return key_fingerprint(public_pem)
    except DPAuditError:
        return ""


def _load_plugins_if_needed(charges: list[tuple[int, PrivacyEvent]]) -> None:
    """Register the sensitivity formulas the charges name: the kernel's are always there; a plugin's come from its
    light formulas module, else from loading the installed plugins (a broken one fails loudly here). A run that
    uses the kernel's formulas only, or plugins with light formulas modules, never imports a plugin (or torch)."""
    # each event object once (equal charges share one, ChargeBody.privacy_event; ``charges`` keeps them alive)
    distinct = {id(event): event for _, event in charges}.values()
    ensure_formulas({leaf.sensitivity.formula for event in distinct for leaf, _ in event.leaves()} - {DECLARED})


def _check_charges(report: VerificationReport, records: list[Record], charges: list[tuple[int, PrivacyEvent]]) -> None:
    _load_plugins_if_needed(charges)
    relation = records[0].body.get("neighbouring")
    problems: list[str] = []
    recomputed = declared = 0
    # equal charges decode to one event object (ChargeBody.privacy_event): each object is checked once, and its
    # findings are reported for every charge that holds it
    checked: dict[int, tuple[list[str], int, int]] = {}
    for seq, event in progress(charges, "verifying charges", total=len(charges)):
        found = checked.get(id(event))  # ``charges`` holds every event to the end: no id is reused meanwhile
        if found is None:
            found = checked[id(event)] = _event_problems(event, relation)
        if found[0]:
            problems += (f"charge {seq}: {problem}" for problem in found[0])
        recomputed += found[1]
        declared += found[2]
    report.add("charges", not problems, "; ".join(problems) or
               f"{plural(len(charges), 'charge')}; {plural(recomputed, 'sensitivity', 'sensitivities')} recomputed "
               f"from public inputs, {declared} "
               "declared (listed as assumptions); noise parameters match every charge")


def _event_problems(event: PrivacyEvent, relation: Any) -> tuple[list[str], int, int]:
    """What is wrong with one charged event in a ``relation`` session (its leaves' relation, sensitivities recomputed
    from their public inputs, privacy maps), and how many of its sensitivities were recomputed and declared."""
    problems: list[str] = []
    recomputed = declared = 0
    for leaf, _ in event.leaves():
        assert isinstance(leaf, LeafEvent)
        if leaf.neighbouring.value != relation:
            problems.append(f"{leaf.neighbouring.value} event in a {relation} session")
        try:
            bound = leaf.sensitivity.recompute(leaf.neighbouring)
            failure = leaf.sensitivity.recompute_failure_probability()
        except DPAuditError as exc:
            problems.append(f"sensitivity not recomputable: {exc}")
            continue
        if bound is None:
            declared += 1
        else:
            recomputed += 1
            if leaf.sensitivity.value < bound * (1 - REL_TOL):
                problems.append(f"recorded sensitivity {leaf.sensitivity.value} < recomputed {bound} "
                                f"({leaf.sensitivity.formula})")
            if leaf.sensitivity.failure_probability < failure * (1 - REL_TOL):
                problems.append(f"recorded failure probability {leaf.sensitivity.failure_probability} < recomputed "
                                f"{failure} ({leaf.sensitivity.formula})")
        if (problem := privacy_map_problem(leaf)) is not None:  # the accountants' map and tolerance
            problems.append(problem)
    return problems, recomputed, declared


def _check_data_access(report: VerificationReport, records: list[Record]) -> None:
    """Every data access and every charge's ``data`` names a set the open record declares, in its role
    (:func:`dpaudit.data.access.access_problems`)."""
    from dpaudit.data.access import access_problems  # deferred: dpaudit.data registers the catalog (start-up cost)

    problems = access_problems(records)
    report.add("data-access", not problems, "; ".join(problems) or "every access and charge names a declared data set")


def _check_audit(report: VerificationReport, records: list[Record], charges: list[tuple[int, PrivacyEvent]]) -> None:
    """Recompute every one-run audit's ε_lb from the canary scores and bits in the ledger
    (:func:`dpaudit.audit.evidence.audit_problems`: with every commitment answered, and the levels shown); a ledger
    without audit evidence or commitments gets no ``audit`` line."""
    from dpaudit.audit.evidence import audit_problems  # deferred: the audit's PLD tools are needed only here

    problems, line = audit_problems(records, charges)
    if line is not None or problems:
        report.add("audit", not problems, "; ".join(problems) or str(line))


def _check_epsilon_claims(report: VerificationReport, records: list[Record],
                          charges: list[tuple[int, PrivacyEvent]]) -> None:
    """Re-derive every ε a plugin stated about its charges (``epsilon_claim``, :mod:`dpaudit.epsilon_claims`) and
    compare every value it stated to be a release with that release (``release_claim``); a ledger without such
    statements gets no ``epsilon-claims`` / ``released-values`` line."""
    from dpaudit.epsilon_claims import claim_problems, release_claim_problems

    problems, checked = claim_problems(records, charges)
    if checked or problems:
        report.add("epsilon-claims", not problems, "; ".join(problems) or
                   f"{plural(checked, 'stated epsilon')} recomputed from the charges they name, none below")
    problems, checked = release_claim_problems(records, charges)
    if checked or problems:
        report.add("released-values", not problems, "; ".join(problems) or
                   f"{plural(checked, 'stated value')} equal to the ledger's releases they name, clipped, with "
                   "their charges' mechanism, epsilon and sensitivity; every required claim present")


def _check_public_bodies(report: VerificationReport, records: list[Record]) -> None:
    """No record body holds a confidential key (a raw value that the session should have refused)."""
    clean: set[int] = set()  # member objects found clean: a ledger read shares repeated members (dpaudit.ledger)
    public: set[Any] = set()  # body keys found not confidential (10⁵ bodies repeat a handful of keys)
    found = [f"record {r.seq} ({r.type}): {path}" for r in records
             if (path := _confidential_path(r.body, clean, public)) is not None]
    report.add("public-bodies", not found, "confidential keys in the ledger: " + "; ".join(found) if found
               else f"{len(records)} record bodies hold no confidential key")


#: the types of JSON scalars, which hold no key
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def _confidential_path(body: dict[str, Any], clean: set[int], public: set[Any]) -> str | None:
    """:func:`~dpaudit.public_values.find_confidential` of ``body``, walking each member object once: ``clean`` holds
    the ids of the members already found clean (the records keep them alive, so no id is reused meanwhile), and
    ``public`` the keys already found not confidential (each key's lower case is looked up once)."""
    for key, value in body.items():
        if key not in public:
            if str(key).lower() in CONFIDENTIAL_KEYS:
                return str(key).lstrip(".")
            public.add(key)
        if type(value) not in _JSON_SCALARS and id(value) not in clean:
            path = find_confidential(value)
            if path is not None:
                return (f"{key}{path}" if path.startswith("[") else f"{key}.{path}").lstrip(".")
            clean.add(id(value))
    return None


def _check_releases(report: VerificationReport, bundle: Path, records: list[Record],
                    charges: list[tuple[int, PrivacyEvent]]) -> None:
    """Replay every release against its charge's coverage (the rules the session enforced when it wrote them).

    A release whose array is in a sidecar file (:mod:`dpaudit.sidecar`) counts the numbers its record names, and
    the file must be in the bundle with that hash, dtype and shape, all finite.
    """
    events = dict(charges)
    states: dict[int, CoverageState | UncoveredRelease] = {}
    # a fresh charge's state is a pure function of its event, and immutable: one per event object (equal charges
    # decode to one, ChargeBody.privacy_event; ``events`` keeps every one alive, so no id is reused meanwhile)
    fresh: dict[int, CoverageState | UncoveredRelease] = {}
    problems: list[str] = []
    released = 0
    for r in records:
        if r.type == CHARGE:
            event = events[r.seq]
            state = fresh.get(id(event))
            if state is None:
                try:
                    state = unused(event)
                except UncoveredRelease as exc:  # no release rule: any release against it is reported below
                    state = exc
                fresh[id(event)] = state
            states[r.seq] = state
            continue
        if r.type != RELEASE:
            continue
        try:
            body = ReleaseBody.from_dict(r.body)
        except LedgerError as exc:
            problems.append(f"release {r.seq}: {exc}")
            continue
        seq = body.charge_seq
        state = states.get(seq)
        if state is None:
            problems.append(f"release {r.seq}: no earlier charge {seq!r}")
            continue
        if isinstance(state, UncoveredRelease):
            problems.append(f"charge {seq}: release {r.seq}: {state}")
            continue
        if body.output_file is not None:
            problem = check_array_file(bundle, body.output_file)
            if problem:
                problems.append(f"release {r.seq}: {problem}")
                continue
        try:
            states[seq] = after_release(state, body.released)
            released += 1
        except UncoveredRelease as exc:
            problems.append(f"charge {seq}: release {r.seq}: {exc}")
    report.add("releases", not problems, "; ".join(problems) or
               f"{released} releases, each after its charge and within what the charge covers")


def _check_claim(report: VerificationReport, cert: dict[str, Any], charges: list[tuple[int, PrivacyEvent]],
                 opened: dict[str, Any]) -> None:
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
    report.add("within-budget", within(eps, budget_eps) and delta <= budget_delta,
               f"claim ({eps:.6g}, {delta:.3g}) vs budget ({budget_eps:g}, {budget_delta:g})")
    if "adaptive" in opened:  # decided by the hash-chained open record, never by the certificate
        _check_filter_claim(report, claim, charges, opened, eps, delta)
        return
    if not charges:
        report.add("recompose", eps >= 0, "no charges: nothing to compose")
        return
    try:
        result = recheck(str(claim.get("attained_by")), compose([e for _, e in charges]), delta, eps,
                         claim.get("accountant_version"))
    except DPAuditError as exc:
        report.add("recompose", False, f"recomposition failed: {exc}")
        return
    report.recheck = asdict(result)
    report.add("recompose", result.ok, result.reason)


def _check_components(report: VerificationReport, records: list[Record], cert: dict[str, Any],
                      charges: list[tuple[int, PrivacyEvent]]) -> None:
    """The certificate's per-component costs (:mod:`dpaudit.components`), which the report shows, are upper-bound
    claims: each is recomputed from the ledger with the run's accountant (the member that attained it, for the
    tightest) and must not be below its recomputation (:func:`~dpaudit.tolerance.within`). A certificate made before
    the field has none: its report composes them."""
    listed = cert.get("components")
    if listed is None:
        report.add("components", True, "the certificate lists no component costs (made before the field): the "
                   "report composes them from the ledger")
        return
    claim = cert.get("claim")
    # each component is recomputed with the accountant the certificate says attained it (dpaudit/components.py)
    attained = {str(c.get("component")): c.get("attained_by") for c in listed if isinstance(c, dict)} \
        if isinstance(listed, list) else None
    try:
        recomputed = certified_components(records, claim if isinstance(claim, dict) else {}, dict(charges), attained)
    except (DPAuditError, KeyError, TypeError) as exc:
        report.add("components", False, f"component costs not recomputable: {exc}")
        return
    if not isinstance(listed, list) or not all(isinstance(c, dict) for c in listed) \
            or sorted(str(c.get("component")) for c in listed) != sorted(r["component"] for r in recomputed):
        report.add("components", False, "the certificate's components are not the ledger's (plugin, mechanism) pairs")
        return
    by_key = {c["component"]: c.get("epsilon") for c in listed}
    problems = []
    for r in recomputed:
        claimed = by_key[r["component"]]
        if r["epsilon"] is None:
            continue  # no bound applies (adaptive session, accountant error): nothing is claimed that could be low
        if not isinstance(claimed, (int, float)) or isinstance(claimed, bool) or not within(r["epsilon"], claimed):
            problems.append(f"{r['component']}: claimed epsilon {claimed!r} < recomputed {r['epsilon']:.6g}")
    report.add("components", not problems, "; ".join(problems) or
               f"{plural(len(recomputed), 'component cost')} recomputed, each claim an upper bound")


def _check_filter_claim(report: VerificationReport, claim: dict[str, Any], charges: list[tuple[int, PrivacyEvent]],
                        opened: dict[str, Any], eps: float, delta: float) -> None:
    """An adaptive session: its Rényi filter admits every prefix of the charges and the claim is its budget."""
    try:
        flt = session_filter(opened.get("adaptive"), opened.get("budget", {}))
    except DPAuditError as exc:
        report.add("recompose", False, f"the open record's privacy filter is unusable: {exc}")
        return
    assert flt is not None
    result = recheck_filter(flt, charges, eps, delta)
    report.recheck = asdict(result)
    same = claim.get("filter") == flt.to_dict()
    report.add("recompose", result.ok and same, result.reason + ("" if same else "; the claim's filter description "
                                                                 "differs from the one the ledger's open record names"))
