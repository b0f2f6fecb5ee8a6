"""The signed head checkpoint of an open run: the last record the session appended, so a cut ledger is not resumed.

A ledger is a hash chain: a changed or removed record in its middle breaks the chain, but a ledger cut at a record
boundary (a stale replica, an old backup, a truncated copy) is a shorter chain that still verifies. Resuming such a
ledger would give back the budget its lost charges spent. So after every append the session writes ``head.json``
in the run folder: the run id, the record's ``seq`` and ``hash``, signed with the run's Ed25519 key (the one its
``open`` record names), and :meth:`dpaudit.Session.resume` refuses a ledger that ends before the checkpointed head,
holds another record there, or comes without a checkpoint whose signature is the run key's (:func:`check_head`).

Ordering (why no extra fsync is needed): the ledger record is written and fsynced *before* the checkpoint naming it
is written, so a crash can only lose checkpoint updates, leaving the checkpoint *behind* the ledger (resume accepts
that: the ledger holds the checkpointed record), never *ahead* of it. The file holds two fixed-size slots, and the
checkpoint of record ``seq`` is written in place (one ``pwrite``) into slot ``seq % 2``; the newest slot whose
signature verifies is the head. A torn or lost write spoils at most the slot being written, and the other slot
still holds the previous checkpoint, also behind the ledger. (Writing a temporary file and renaming it over the old
one was measured first: on ext4 the rename over an existing file forces the new file's data out, about 2-4 ms per
append, close to the fsync itself; the in-place slot costs the signature, ~0.1 ms: ``benchmarks/bench_ledger.py``.)
If no slot verifies (e.g. a power cut before the first write reached the disk) resume refuses: the conservative
side (``dpaudit recover RUN`` still closes the run as its ledger stands).

Limitation: the checkpoint lives beside the ledger. A consistent rollback of the whole run folder (ledger *and*
checkpoint restored from one old backup) is a valid older state and is not detectable locally; only a copy of the
head kept elsewhere (e.g. a transparency log entry per append) would detect it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit.errors import LedgerError
from dpaudit.files import read_regular
from dpaudit.ledger import Record
from dpaudit.signing import public_key_pem, sign, verify_signature

HEAD = "head.json"
"""The checkpoint's file name in the run folder."""

HEAD_FORMAT = "dpaudit-head/1"
SLOT_BYTES = 512
"""The size of each of the file's two slots: a checkpoint's canonical JSON (about 250 bytes), padded with spaces."""


def _signed_part(run_id: object, seq: object, record_hash: object) -> dict[str, Any]:
    return {"format": HEAD_FORMAT, "run_id": run_id, "seq": seq, "hash": record_hash}


def write_head(run_dir: Path, run_id: str, record: Record, key) -> None:
    """Write the checkpoint naming ``record`` (already appended and fsynced), signed with ``key``, into its slot.

    In place and not fsynced: see the module docstring.

    Raises:
        OSError: the checkpoint could not be written (the record itself is in the ledger).
    """
    part = _signed_part(run_id, record.seq, record.hash)
    data = canonical.encode({**part, "signature": sign(key, canonical.encode(part))})
    if len(data) >= SLOT_BYTES:
        raise ValueError(f"a head checkpoint of {len(data)} bytes does not fit its {SLOT_BYTES}-byte slot")
    fd = os.open(Path(run_dir) / HEAD, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data.ljust(SLOT_BYTES - 1) + b"\n", (record.seq % 2) * SLOT_BYTES)
    finally:
        os.close(fd)


def _slots(data: bytes, run: str, public_pem: str) -> list[tuple[int, str]]:
    """(seq, hash) of the slots of ``data`` that hold a checkpoint of run ``run`` signed by ``public_pem``'s key."""
    found = []
    for start in range(0, min(len(data), 2 * SLOT_BYTES), SLOT_BYTES):
        try:
            head = json.loads(data[start:start + SLOT_BYTES])
        except ValueError:  # a torn or never-written slot
            continue
        if not isinstance(head, dict):
            continue
        seq, record_hash, signature = head.get("seq"), head.get("hash"), head.get("signature")
        if not (type(seq) is int and isinstance(record_hash, str) and isinstance(signature, str)):
            continue
        signed = canonical.encode(_signed_part(head.get("run_id"), seq, record_hash))
        if (head.get("format") == HEAD_FORMAT and head.get("run_id") == run
                and verify_signature(public_pem, signed, signature)):
            found.append((seq, record_hash))
    return found


def check_head(run_dir: Path, records: Sequence[Record], key) -> None:
    """Check that the ledger ``records`` of the run in ``run_dir`` reach its signed head checkpoint.

    Args:
        run_dir: the run folder (holding :data:`HEAD`).
        records: the ledger's whole records, from seq 0.
        key: the run's private signing key (its public half checks the signatures).

    Raises:
        LedgerError: no slot holds a checkpoint of this run signed by its key (the file missing, forged, of another
            run), or the ledger ends before the newest checkpointed record or holds another record at its seq.
    """
    path = Path(run_dir) / HEAD
    run = Path(run_dir).name
    if not path.is_file():
        raise LedgerError(f"run {run} has no head checkpoint ({HEAD}): without it a ledger cut at a record boundary "
                          "cannot be told from a whole one, so it is not resumed (`dpaudit recover RUN` closes it "
                          "as its ledger stands)")
    found = _slots(read_regular(path, 2 * SLOT_BYTES, LedgerError), run, public_key_pem(key))
    if not found:
        raise LedgerError(f"run {run}: the head checkpoint {path} holds no checkpoint of this run signed by the run's "
                          "key: not resumed")
    seq, record_hash = max(found)
    if seq >= len(records):
        raise LedgerError(f"run {run}: the ledger ends at record {len(records) - 1} but the signed head checkpoint "
                          f"names record {seq}: the ledger was cut (a stale copy or a truncated file) and resuming "
                          "it would give spent budget back; restore the whole ledger")
    if records[seq].hash != record_hash:
        raise LedgerError(f"run {run}: ledger record {seq} is not the one the signed head checkpoint names: the "
                          "ledger was rewritten; not resumed")
