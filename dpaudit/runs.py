"""Finding a run: a folder, a run id in the local store, or an MLflow run id (artifacts downloaded)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dpaudit import store as run_store
from dpaudit.errors import InvalidParameter, VerificationError
from dpaudit.files import copy_regular
from dpaudit.sidecar import OUTPUTS_DIR, sidecar_files

#: the files an auditor receives (the evidence bundle)
BUNDLE_FILES = (run_store.LEDGER, run_store.CERTIFICATE, run_store.PUBLIC_KEY, run_store.REPORT_MD,
                run_store.REPORT_JSON)


@dataclass(frozen=True)
class LocatedRun:
    """Where a run named on the command line was found.

    Attributes:
        folder: the folder holding its ledger (a temporary download for an MLflow run).
        run_id: the dpaudit run id that folder must hold, when the name stood for one (a local run id, or an MLflow
            run: its tag ``dpaudit.run_id``, else its MLflow id, as runs mirrored before sessions made their own ids
            were named); None for a folder named by its path, which holds whatever run it holds.
    """

    folder: Path
    run_id: str | None


def resolve_run(run: str, *, store: Path | str | None = None, tracking_uri: str | None = None) -> Path:
    """The folder holding ``run``'s ledger (:func:`locate_run`'s folder)."""
    return locate_run(run, store=store, tracking_uri=tracking_uri).folder


def locate_run(run: str, *, store: Path | str | None = None, tracking_uri: str | None = None) -> LocatedRun:
    """Find ``run``: itself if it is a folder, else the local store's folder for that run id, else the run's
    artifacts downloaded from MLflow into a temporary folder (removed when the process exits).

    Nothing is created: a local SQLite MLflow store that does not exist is not searched (MLflow would create it).
    Anything that is not an existing folder must be a valid run id (:func:`dpaudit.store.validate_run_id`: no path
    separator, no ``..``), and its local folder must resolve inside the store. An MLflow run is found by
    :meth:`~dpaudit.tracking.MlflowMirror.find_run` (refused when two runs carry its tag); anyone who may edit the
    experiment can upload any files under it, so :attr:`LocatedRun.run_id` is what the verifier checks the
    certificate against (:func:`dpaudit.verify.verify_bundle`'s ``run_id``). No message shows a URI's password.

    Raises:
        InvalidParameter: ``run`` is neither a folder nor a valid run id, its folder leaves the store, or the
            tracking URI is refused (:func:`~dpaudit.tracking.store.check_credentials`).
        VerificationError: no such folder, local run or MLflow run, or more than one MLflow run tagged with it.
    """
    path = Path(run)
    if path.is_dir():
        if not os.path.lexists(path / run_store.LEDGER):
            raise VerificationError(f"{path} is a folder but holds no {run_store.LEDGER}")
        return LocatedRun(path, None)
    local = run_store.run_folder(run_store.store_root(store), run)
    if os.path.lexists(local / run_store.LEDGER):
        return LocatedRun(local, run)
    from dpaudit.tracking import RUN_ID_TAG, MlflowMirror, resolve_tracking_uri
    from dpaudit.tracking.store import redact_credentials, sqlite_database

    uri = resolve_tracking_uri(tracking_uri)
    database = sqlite_database(uri)
    if database is not None and not database.is_file():  # a read-only command never creates a store
        raise VerificationError(f"no run folder, local run or MLflow run named {run!r}: no run {run!r} in the store "
                                f"{run_store.store_root(store)} and no MLflow store at {database}")
    try:
        mirror = MlflowMirror(uri)
        found = mirror.find_run(run)
    except InvalidParameter:  # a refused URI: its own message, never the URI
        raise
    except Exception as exc:
        raise VerificationError(redact_credentials(
            f"no run folder, local run or single MLflow run named {run!r} ({uri}): {exc}")) from exc
    destination = Path(tempfile.mkdtemp(prefix=f"dpaudit-{run[:12]}-"))
    atexit.register(shutil.rmtree, destination, ignore_errors=True)  # the download lives until the process exits
    folder = mirror.download_artifacts(found, destination)
    if not (Path(folder) / run_store.LEDGER).is_file():
        ledger = next(Path(folder).rglob(run_store.LEDGER), None)
        if ledger is None:
            raise VerificationError(f"MLflow run {run} has no {run_store.LEDGER} artifact")
        folder = ledger.parent
    return LocatedRun(Path(folder), found.data.tags.get(RUN_ID_TAG) or found.info.run_id)


def export_bundle(run_dir: Path, destination: Path) -> list[Path]:
    """Copy the evidence bundle of ``run_dir`` into ``destination`` (created); returns the files written.

    Every file is copied without following a symlink at either end (a bundle file that is a symlink is refused).

    Raises:
        VerificationError: the run has no certificate yet (a session that never closed), misses a file, or a file
            is a symlink or not a regular file.
    """
    run_dir, destination = Path(run_dir), Path(destination)
    missing = [n for n in BUNDLE_FILES if not os.path.lexists(run_dir / n)]
    if missing:
        raise VerificationError(f"{run_dir} is missing {', '.join(missing)}: was the session closed?")
    destination.mkdir(parents=True, exist_ok=True)
    written = [copy_regular(run_dir / name, destination / name, VerificationError) for name in BUNDLE_FILES]
    outputs = sidecar_files(run_dir)  # large released arrays, named by hash in the ledger (dpaudit/sidecar.py)
    if outputs:
        (destination / OUTPUTS_DIR).mkdir(exist_ok=True)
    written += [copy_regular(run_dir / name, destination / name, VerificationError) for name in outputs]
    readme = destination / "README.txt"
    readme.unlink(missing_ok=True)  # never write through a symlink left there
    readme.write_text(
        "dpaudit evidence bundle\n\n"
        "ledger.jsonl      every charge and release of the run, hash-chained (append-only)\n"
        "certificate.json  the (epsilon, delta) claim, assumptions, versions and ledger head, signed (Ed25519)\n"
        "public_key.pem    the key that verifies the signature (trust it only if its fingerprint matches the\n"
        "                  one the run's owner gave you out of band)\n"
        "report.md/.json   the budget report\n"
        "outputs/*.npy     large released arrays, named by their SHA-256 in the ledger (if any)\n\n"
        "Re-verify offline:  dpaudit verify . --trusted-key FINGERPRINT   (or pin it once: dpaudit keys trust)\n"
        "                    exit 0 valid, 1 invalid with reasons (e.g. an untrusted key), 2 usage error\n",
        encoding="utf-8")
    written.append(readme)
    return written
