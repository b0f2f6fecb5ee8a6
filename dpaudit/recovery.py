"""Finishing a close, and recovering a run whose close (or whose process) died.

Closing a session is a sequence of steps after the ledger's ``close`` record: the signed certificate (with the
public key beside it), the store's transparency-log entry, the reports, the MLflow mirror. A kill, a full disk or an
MLflow outage can stop it at any step. The ledger, fsynced record by record, is the source of truth, so each step
here is *idempotent*: it checks what is already on disk and does only what is missing or stale.

* the certificate is kept when it is current (it names the ledger's head and length, the run, and a valid signature
  by the run's key, and ``public_key.pem`` is that key), otherwise it is rebuilt from the ledger alone;
* the log entry is appended once (:func:`dpaudit.transparency.ensure_entry`); a log that already names the run with
  another certificate is refused, never rewritten;
* the reports are regenerated from the ledger and certificate (atomically).

:func:`recover_run` (``dpaudit recover RUN``) applies this to a run folder from a fresh process. A ledger without a
``close`` record is a session whose process died: it is left alone unless ``abort`` is given, which appends a
``close`` record with status :data:`ABORTED` and certifies the ledger as it stands (every charge is still counted,
including one whose release was never written), not for release. Only the key the ``open`` record names may sign.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit import store as run_store
from dpaudit import transparency
from dpaudit.certificate import build_certificate, open_body, unsigned, write_certificate
from dpaudit.display import show, show_delta
from dpaudit.errors import DPAuditError, InvalidParameter, LedgerError
from dpaudit.files import read_regular
from dpaudit.ledger import MISSING_FINAL_NEWLINE, TORN_FINAL_LINE, Ledger, Record, read_records, verify_chain
from dpaudit.records import ABORTED, CHARGE, CLOSE, CloseBody
from dpaudit.signing import public_key_fingerprint, public_key_pem, verify_signature

CERTIFICATE_STEP = "certificate"
LOG_STEP = "transparency log entry"
REPORTS_STEP = "reports"


@dataclass(frozen=True)
class Recovery:
    """What :func:`recover_run` found and did.

    Attributes:
        run_id: the run.
        aborted: a ``close`` record with status :data:`ABORTED` was appended now.
        done: the close steps done now (empty: the run was already complete).
        certificate: the run's certificate.
    """

    run_id: str
    aborted: bool
    done: tuple[str, ...]
    certificate: Mapping[str, Any]

    def summary(self) -> str:
        """One line for people: which case it was and what was written."""
        claim = self.certificate["claim"]
        what = (f"closed as {ABORTED}" if self.aborted else
                "recovered" if self.done else "nothing to recover")
        steps = f": {', '.join(self.done)} written" if self.done else ": certificate, log entry and reports present"
        return (f"{what}{steps} for run {self.run_id} (epsilon <= {show(claim['epsilon'])}, "
                f"delta = {show_delta(claim['delta'])})")


def _certificate_is_current(run_dir: Path, records: Sequence[Record], key) -> Mapping[str, Any] | None:
    """The run's certificate when it certifies exactly ``records`` under ``key``; None when missing or stale."""
    try:  # the strict evidence readers: a symlink, a FIFO or a malformed file is stale, never followed
        certificate = run_store.read_certificate(run_dir)
        pem = read_regular(run_dir / run_store.PUBLIC_KEY, run_store.MAX_PUBLIC_KEY_BYTES, LedgerError).decode()
    except (DPAuditError, UnicodeDecodeError):
        return None
    expected_pem = public_key_pem(key)
    if not isinstance(certificate, dict) or pem != expected_pem:
        return None
    signature = certificate.get("signature")
    if (certificate.get("ledger") != {"head": records[-1].hash, "records": len(records)}
            or not isinstance(signature, dict) or not isinstance(signature.get("value"), str)):
        return None
    return certificate if verify_signature(expected_pem, unsigned(certificate), signature["value"]) else None


def _bound_run(run_dir: Path, root: Path, records: Sequence[Record]) -> tuple[str, str | None]:
    """(run id, store id) after checking that the ledger's ``open`` record names this folder and this store.

    Raises:
        LedgerError: a run copied under another id or into another store (never certified or logged there).
    """
    opened = open_body(records)
    run_id = opened.run_id or run_dir.name
    store_id = run_store.read_store_id(root)
    if run_id != run_dir.name or (opened.store_id is not None and opened.store_id != store_id):
        raise LedgerError(f"the ledger in {run_dir} names run {run_id} of store {opened.store_id}, not this folder "
                          f"of store {store_id}: a run copied elsewhere is not certified or logged there")
    return run_id, store_id


def finish_close(run_dir: Path, root: Path, records: Sequence[Record], key, *, plugins: Mapping[str, str],
                 confidential_log: str | None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Do every close step after the ``close`` record that is missing or stale: certificate, log entry, reports.

    Args:
        run_dir: the run folder.
        root: the run store (its transparency log).
        records: the ledger's records, ending in its ``close`` record.
        key: the run's signing key (the one its ``open`` record names).
        plugins: plugin name → version, listed in a certificate built now.
        confidential_log: where the run's confidential log lives (relative to the run folder), for a certificate
            built now; None when it has none.

    Returns:
        (the certificate, the steps done now).

    Raises:
        LedgerError: the ledger is not closed, names another run id or store than the folder's, or the store's log
            names the run with another certificate.
        OSError: a file could not be written (a later call finishes the rest).
    """
    if not records or records[-1].type != CLOSE:
        raise LedgerError(f"ledger of {run_dir} has no close record: the session is not closed")
    run_id, store_id = _bound_run(run_dir, root, records)
    done: list[str] = []
    found = _certificate_is_current(run_dir, records, key)
    certificate = dict(found) if found is not None else build_certificate(
        records, key=key, plugins=plugins, confidential_log=confidential_log)
    if found is None:
        write_certificate(run_dir, certificate, key)
        done.append(CERTIFICATE_STEP)
    if store_id is not None and transparency.ensure_entry(root, store_id,
                                                          transparency.LogEntry.of(run_id, certificate), key):
        done.append(LOG_STEP)
    from dpaudit.report import write_reports

    if write_reports(run_dir):
        done.append(REPORTS_STEP)
    return certificate, tuple(done)


def intact_records(path: Path) -> tuple[list[Record], bool]:
    """The whole records of a ledger whose chain is intact, and whether its last append was interrupted (a torn or
    unterminated final line, which :meth:`~dpaudit.ledger.Ledger.open` repairs).

    Raises:
        LedgerError: the ledger is unreadable, empty, or damaged otherwise (nothing is recovered from it).
    """
    records, problems = read_records(path)
    interrupted = [p for p in problems if TORN_FINAL_LINE in p or MISSING_FINAL_NEWLINE in p]
    damaged = [p for p in problems if p not in interrupted] + verify_chain(records)
    if damaged or not records:
        raise LedgerError(f"ledger {path} is damaged or empty, nothing is recovered from it: "
                          f"{'; '.join(damaged) or 'no records'}")
    return records, bool(interrupted)


def _run_key(run_dir: Path, records: Sequence[Record], signing_key: Path | None, root: Path):
    """The private key the run's ``open`` record names (refusing any other)."""
    from dpaudit.signing import load_key

    path = signing_key if signing_key is not None else run_store.default_key_path(root)
    key = load_key(path)
    if key is None:
        raise InvalidParameter(f"no signing key at {path}: give the key that signed run {run_dir.name} "
                               "(--signing-key)")
    named = open_body(records).signing_key_fingerprint
    if named is not None and public_key_fingerprint(key) != named:
        raise InvalidParameter(f"the key at {path} has fingerprint {public_key_fingerprint(key)}, but run "
                               f"{run_dir.name} was opened to be signed by {named}: refusing to sign with another key")
    return key


def _confidential_log(records: Sequence[Record]) -> str | None:
    """Where the run's confidential log lives (named in the certificate), when its ``open`` record enabled one."""
    if not open_body(records).confidential_log:
        return None
    from dpaudit.tracking.confidential import LOCATION

    return LOCATION


def local_run(run: str, store: Path | str | None) -> tuple[Path, Path]:
    """(run folder, store root) of ``run``: a run folder inside a store, or a run id of the local store.

    Unlike :func:`dpaudit.runs.resolve_run` nothing is fetched from MLflow: recovery writes into the store.

    Raises:
        InvalidParameter: not a valid run id (:func:`dpaudit.store.validate_run_id`), or no such run in the store.
    """
    path = Path(run)
    if (path / run_store.LEDGER).is_file():
        if not run_store.is_store(path.resolve().parent):
            raise InvalidParameter(f"{path} is not a folder of a run store (no store.json, keys or transparency "
                                   "log beside it): only a store's run can be recovered")
        return path, path.resolve().parent
    root = run_store.store_root(store)
    folder = run_store.run_folder(root, run)  # a valid run id, resolving inside the store
    if not (folder / run_store.LEDGER).is_file():
        raise InvalidParameter(f"no run {run!r} in the store {root} (no {run_store.LEDGER})")
    return folder, root


def recover_run(run_dir: Path, root: Path, *, abort: bool = False, signing_key: Path | None = None) -> Recovery:
    """Finish the close of the run in ``run_dir`` (a folder of the store ``root``), or close it as aborted.

    A ledger ending in a ``close`` record gets what its close left undone (:func:`finish_close`); the certificate
    then lists no plugin versions (they were held by the dead process; each charge still names its plugin). A
    ledger without one is the trace of a process that died mid-session: with ``abort`` a ``close`` record with
    status :data:`ABORTED` is appended and the ledger as it stands is certified; without, nothing is written. Do not
    abort a session whose process is still running: its next append would then be refused (the ledger grew).

    Args:
        run_dir: the run folder (its ledger).
        root: the run store holding it.
        abort: close an unclosed run as :data:`ABORTED`.
        signing_key: the key to sign with (default the store's); it must be the one the ``open`` record names.

    Raises:
        InvalidParameter: the run is not closed and ``abort`` is not given, or the key is missing or not the run's.
        LedgerError: the ledger is damaged (other than a torn final line, which is cut off and kept aside), names
            another run id or store than the folder's, or the store's log names the run with another certificate.
        OSError: a file could not be written.
    """
    run_dir, root = Path(run_dir), Path(root)
    path = run_dir / run_store.LEDGER
    records, interrupted = intact_records(path)
    _bound_run(run_dir, root, records)
    key = _run_key(run_dir, records, signing_key, root)
    aborted = False
    if interrupted or records[-1].type != CLOSE:
        if not abort and records[-1].type != CLOSE:
            raise InvalidParameter(
                f"run {run_dir.name} has no close record: its process died mid-session ({len(records)} records). "
                f"Run `dpaudit recover {run_dir.name} --abort` to close it as {ABORTED} and certify every charge "
                "in its ledger as it stands (make sure no process still uses the session).")
        with Ledger.open(path) as ledger:  # cuts off a torn final line (kept aside) before appending
            if ledger.records()[-1].type != CLOSE:
                charges = sum(1 for r in ledger.records() if r.type == CHARGE)
                ledger.append(CLOSE, CloseBody(status=ABORTED, charges=charges).to_dict())
                aborted = True
            records = ledger.records()
    certificate, done = finish_close(run_dir, root, records, key, plugins={},
                                     confidential_log=_confidential_log(records))
    return Recovery(open_body(records).run_id or run_dir.name, aborted, done, certificate)
