"""Verification of a whole run store against its transparency log (``dpaudit verify --store STORE``).

Each run verifies on its own (:func:`dpaudit.verify.verify_bundle`); what only the store can show is which runs
*should* be there. Checks, all of which run:

1. **store-id**: the store has a well-formed ``store.json``;
2. **log-head**: the signed tree head verifies, covers every log entry and equals their recomputed Merkle tree
   hash, names this store, and no run is logged twice;
3. **log-key**: the head is signed by a trusted key (:mod:`dpaudit.trust`);
4. **logged-runs-present**: every logged run's folder is still there with the logged certificate (a run
   deleted, or swapped for another run's files, fails here);
5. **closed-runs-logged**: every run folder holding a certificate is in the log;
6. **log-extends** (with an earlier head ``SIZE:ROOT`` recorded out of band): the first SIZE entries still hash to
   ROOT, so the log was only appended to.
"""

from __future__ import annotations

from pathlib import Path

from dpaudit import canonical, transparency
from dpaudit import store as run_store
from dpaudit.display import plural
from dpaudit.errors import DPAuditError, VerificationError
from dpaudit.trust import KeyTrust
from dpaudit.verify import VerificationReport


def verify_store(root: Path, *, trust: KeyTrust | None = None,
                 log_head: tuple[int, str] | None = None) -> VerificationReport:
    """Check the store at ``root`` against its transparency log.

    Args:
        root: the store's root folder.
        trust: which keys may sign the log head; default :meth:`KeyTrust.default` for ``root``.
        log_head: an earlier head (size, hex root) the log must extend.

    Raises:
        VerificationError: ``root`` is not a folder.
        TrustStoreError: the trust store is malformed.
    """
    root = Path(root)
    if not root.is_dir():
        raise VerificationError(f"{root} is not a folder: no run store to verify")
    trust = trust if trust is not None else KeyTrust.default(root)
    report = VerificationReport(str(root))
    try:
        store_id = run_store.read_store_id(root)
    except DPAuditError as exc:
        store_id, reason = None, str(exc)
    else:
        reason = f"no {run_store.STORE_FILE}: not a run store, or one made before store ids"
    report.add("store-id", store_id is not None, f"store {store_id}" if store_id else reason)
    try:
        entries, head = transparency.read_log(root), transparency.read_head(root)
    except DPAuditError as exc:
        report.add("log-head", False, f"transparency log unreadable: {exc}")
        return report
    problems = transparency.head_problems(head, entries)
    if head is not None and head.store_id != store_id:
        problems.append(f"the head names store {head.store_id!r}, the store is {store_id!r}")
    report.add("log-head", not problems, "; ".join(problems) or
               (f"signed head {head.token}, {plural(len(entries), 'entry', 'entries')}" if head
                else "empty log (no run closed yet)"))
    if head is not None:
        decision = trust.decide(head.key_fingerprint)
        report.add("log-key", decision.acceptable, f"log head signed by key {head.key_fingerprint} " + (
            f"(trusted: {decision.trusted_by})" if decision.trusted else
            "NOT PINNED (--accept-bundle-key)" if decision.accepted_unpinned else "which is untrusted"))
    _check_runs(report, root, entries)
    if log_head is not None:
        size, expected = log_head
        problem = transparency.extension_problem(entries, size, expected)
        report.add("log-extends", problem is None, problem or f"the log extends the earlier head {size}:{expected}")
    return report


def _certificate_digest(folder: Path) -> str | None:
    try:
        return transparency.certificate_digest(canonical.read_object(folder / run_store.CERTIFICATE,
                                                                     VerificationError))
    except VerificationError:
        return None


def _check_runs(report: VerificationReport, root: Path, entries: list[transparency.LogEntry]) -> None:
    missing, swapped = [], []
    for entry in entries:
        folder = root / entry.run_id
        if not (folder / run_store.CERTIFICATE).is_file():
            missing.append(entry.run_id)
        elif _certificate_digest(folder) != entry.certificate_sha256:
            swapped.append(entry.run_id)
    problems = ([f"logged runs deleted: {', '.join(missing)}"] if missing else []) + (
        [f"runs whose certificate differs from the logged one (swapped or replayed): {', '.join(swapped)}"]
        if swapped else [])
    report.add("logged-runs-present", not problems, "; ".join(problems) or
               f"all {len(entries)} logged runs present with their logged certificates")
    logged = {e.run_id for e in entries}
    closed = sorted(p.name for p in root.iterdir() if (p / run_store.CERTIFICATE).is_file())
    unlogged = [name for name in closed if name not in logged]
    report.add("closed-runs-logged", not unlogged,
               f"closed runs missing from the log (added behind its back, or closed before the log existed): "
               f"{', '.join(unlogged)}" if unlogged else f"all {len(closed)} closed runs are logged")
