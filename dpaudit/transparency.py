"""The store's transparency log: an append-only Merkle log of every closed certificate (RFC 6962 style).

A hash chain and a signature protect each run's own files, but not the store as a whole: a run can be deleted,
or its folder replaced by a copy of another run, and every remaining run still verifies. So each store keeps
``<store>/transparency/log.jsonl``, one canonical-JSON :class:`LogEntry` per closed session (run id, certificate
SHA-256, ledger head and record count, signing-key fingerprint), appended at close under an exclusive lock and
fsynced, and ``head.json``, a signed tree head: the number of entries and their Merkle tree hash, signed by the
key that closed the last run.

The tree hash is RFC 6962 (Laurie, Langley & Kasper 2013), Sec. 2.1: over entries d(0..n-1),
MTH({}) = SHA-256(), MTH({d0}) = SHA-256(0x00 || d0), and for n > 1, with k the largest power of two below n,
MTH(D[n]) = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n])). The 0x00 / 0x01 prefixes keep a leaf from ever being
read as an inner node (second-preimage resistance of the tree).

An auditor notes a head (``dpaudit log head`` prints ``SIZE:ROOT``) out of band; later ``dpaudit verify --store
STORE --log-head SIZE:ROOT`` checks that the first SIZE entries still hash to ROOT, i.e. the log was only ever
appended to. A store holder with the key can rewrite the log and re-sign a head; the out-of-band head is what
catches that. Because the whole log is at hand, consistency is checked by recomputing the prefix's tree hash
rather than with RFC 6962's logarithmic consistency proofs.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from dpaudit import canonical
from dpaudit import store as run_store
from dpaudit.errors import DPAuditError, InvalidParameter, LedgerError
from dpaudit.files import atomic_replace, fsync_dir, read_regular
from dpaudit.signing import key_fingerprint, public_key_pem, sign, verify_signature

LOG_FILE = "log.jsonl"
HEAD_FILE = "head.json"
LOCK_FILE = "log.lock"
HEAD_FORMAT = "dpaudit-log-head/1"
MAX_LOG_BYTES = 256 * 2**20
"""The largest log file read (about a million entries of ~250 bytes)."""



def log_dir(root: Path) -> Path:
    """The folder of the store's transparency log."""
    return Path(root) / run_store.TRANSPARENCY_DIR


def certificate_digest(certificate: Mapping[str, Any]) -> str:
    """Hex SHA-256 of the canonical JSON of a whole certificate (signature included): what the log names."""
    return canonical.sha256_hex(canonical.encode(dict(certificate)))


@dataclass(frozen=True)
class LogEntry:
    """One closed run, as logged.

    Attributes:
        run_id: the run's id (its folder name in the store).
        certificate_sha256: :func:`certificate_digest` of its certificate.
        ledger_head: hash of the ledger's last record.
        ledger_records: number of ledger records.
        key_fingerprint: fingerprint of the key that signed the certificate.
    """

    run_id: str
    certificate_sha256: str
    ledger_head: str
    ledger_records: int
    key_fingerprint: str

    @classmethod
    def of(cls, run_id: str, certificate: Mapping[str, Any]) -> LogEntry:
        """The entry of a run's certificate."""
        return cls(run_id, certificate_digest(certificate), str(certificate["ledger"]["head"]),
                   int(certificate["ledger"]["records"]), str(certificate["public_key_fingerprint"]))

    @classmethod
    def from_dict(cls, data: Any) -> LogEntry:
        """Parse one log line's object.

        Raises:
            LedgerError: the object is not a well-formed entry.
        """
        names = {"run_id", "certificate_sha256", "ledger_head", "ledger_records", "key_fingerprint"}
        if not isinstance(data, dict) or set(data) != names:
            raise LedgerError(f"log entry must be an object with exactly {sorted(names)}")
        entry = cls(**data)
        if not (run_store.is_run_id(entry.run_id)
                and all(isinstance(h, str) and canonical.SHA256_HEX.fullmatch(h)
                        for h in (entry.certificate_sha256, entry.ledger_head, entry.key_fingerprint))
                and type(entry.ledger_records) is int and entry.ledger_records > 0):
            raise LedgerError(f"malformed log entry {data}")
        return entry

    def leaf_data(self) -> bytes:
        """The bytes the Merkle leaf hashes: the entry's canonical JSON (one log line without its newline)."""
        return canonical.encode(asdict(self))


def leaf_hash(data: bytes) -> bytes:
    """RFC 6962 leaf hash: SHA-256(0x00 || data)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 inner-node hash: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962 Merkle tree hash over the leaf hashes ``leaves`` (in log order)."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1 << ((n - 1).bit_length() - 1)  # the largest power of two strictly below n
    return node_hash(merkle_root(leaves[:k]), merkle_root(leaves[k:]))


def tree_hash(entries: Sequence[LogEntry]) -> str:
    """Hex Merkle tree hash of ``entries``."""
    return merkle_root([leaf_hash(e.leaf_data()) for e in entries]).hex()


@dataclass(frozen=True)
class TreeHead:
    """A signed tree head: ``size`` entries hash to ``root``, signed by the key with ``key_fingerprint``."""

    store_id: str
    size: int
    root: str
    key_fingerprint: str
    public_key: str
    signature: str

    @property
    def token(self) -> str:
        """``SIZE:ROOT``, the form an auditor records out of band and passes to ``--log-head``."""
        return f"{self.size}:{self.root}"

    def signed_bytes(self) -> bytes:
        return canonical.encode({"format": HEAD_FORMAT, **{k: v for k, v in asdict(self).items()
                                                           if k != "signature"}})

    def signature_ok(self) -> bool:
        """Whether the signature verifies under ``public_key`` and that key has ``key_fingerprint``."""
        try:
            return (key_fingerprint(self.public_key) == self.key_fingerprint
                    and verify_signature(self.public_key, self.signed_bytes(), self.signature))
        except DPAuditError:
            return False

    def to_dict(self) -> dict[str, Any]:
        return {"format": HEAD_FORMAT, **asdict(self)}

    @classmethod
    def signed(cls, store_id: str, entries: Sequence[LogEntry], key: Ed25519PrivateKey) -> TreeHead:
        """The head of ``entries``, signed with ``key``."""
        pem = public_key_pem(key)
        unsigned_head = cls(store_id, len(entries), tree_hash(entries), key_fingerprint(pem), pem, "")
        return cls(**{**asdict(unsigned_head), "signature": sign(key, unsigned_head.signed_bytes())})


def parse_head_token(text: str) -> tuple[int, str]:
    """``SIZE:ROOT`` as (size, lower-case hex root).

    Raises:
        InvalidParameter: not a non-negative size, a colon and 64 hex digits.
    """
    size, _, root = text.strip().partition(":")
    if not size.isdigit() or not canonical.SHA256_HEX.fullmatch(root.lower()):
        raise InvalidParameter(f"log head must be SIZE:ROOT (a count and 64 hex digits), got {text!r}")
    return int(size), root.lower()


def read_log(root: Path) -> list[LogEntry]:
    """The entries of the store's log, in order ([] when the store has no log yet).

    Raises:
        LedgerError: a line is not a canonical, well-formed entry, or the file ends in a torn line.
    """
    path = log_dir(root) / LOG_FILE
    if not os.path.lexists(path):
        return []
    data = read_regular(path, MAX_LOG_BYTES, LedgerError)
    if data and not data.endswith(b"\n"):
        raise LedgerError(f"transparency log {path} ends in a torn line (a crash during an append?)")
    entries = []
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            entry = LogEntry.from_dict(canonical.loads_object(line.decode("utf-8"), f"line {number}", LedgerError))
        except (ValueError, UnicodeDecodeError, TypeError, LedgerError) as exc:
            raise LedgerError(f"transparency log {path}, line {number}: {exc}") from exc
        if entry.leaf_data() != line:
            raise LedgerError(f"transparency log {path}, line {number} is not canonical JSON")
        entries.append(entry)
    return entries


def read_head(root: Path) -> TreeHead | None:
    """The store's signed tree head, or None if it has none.

    Raises:
        LedgerError: ``head.json`` is malformed.
    """
    path = log_dir(root) / HEAD_FILE
    if not os.path.lexists(path):
        return None
    data = canonical.read_object(path, LedgerError)
    if data.pop("format", None) != HEAD_FORMAT:
        raise LedgerError(f"{path} is not a {HEAD_FORMAT} tree head")
    try:
        head = TreeHead(**data)
    except TypeError as exc:
        raise LedgerError(f"{path}: {exc}") from exc
    texts = (head.store_id, head.root, head.key_fingerprint, head.public_key, head.signature)
    if type(head.size) is not int or head.size < 0 or not all(isinstance(v, str) for v in texts):
        raise LedgerError(f"{path}: malformed tree head")
    return head


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    folder = log_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def append_entry(root: Path, store_id: str, entry: LogEntry, key: Ed25519PrivateKey) -> TreeHead:
    """Append ``entry`` to the store's log and re-sign its head, under an exclusive lock, fsynced.

    The line is written with one ``write`` on an ``O_APPEND`` descriptor and fsynced before the new head replaces
    the old one atomically, so a crash leaves either the old head (the new line not yet covered: ``verify --store``
    reports it) or the new one.

    Raises:
        LedgerError: the log is damaged, already names this run, or cannot be written.
    """
    with _locked(root):
        entries = read_log(root)
        if any(e.run_id == entry.run_id for e in entries):
            raise LedgerError(f"transparency log of {root} already names run {entry.run_id}")
        return _append_locked(root, store_id, entries, entry, key)


def _append_locked(root: Path, store_id: str, entries: Sequence[LogEntry], entry: LogEntry,
                   key: Ed25519PrivateKey) -> TreeHead:
    """Append ``entry`` after ``entries`` (the log as read) and re-sign the head; the caller holds the log lock."""
    path = log_dir(root) / LOG_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            line = entry.leaf_data() + b"\n"
            if os.write(fd, line) != len(line):
                raise OSError(f"short write to {path}")
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(path.parent)
        head = TreeHead.signed(store_id, [*entries, entry], key)
        atomic_replace(log_dir(root) / HEAD_FILE, (canonical.dumps(head.to_dict()) + "\n").encode("utf-8"))
    except OSError as exc:
        raise LedgerError(f"cannot append to transparency log {path}: {exc}") from exc
    return head


def ensure_entry(root: Path, store_id: str, entry: LogEntry, key: Ed25519PrivateKey) -> bool:
    """Make the store's log hold ``entry`` exactly once, under a signed head (a retried or recovered close).

    Appends it if the run is not logged (:func:`append_entry`). If this very entry is logged already, nothing is
    appended; a valid head of the log without this last entry (a crash between the append and the head's
    replacement) is re-signed over the log. Any other head problem is refused, never signed over.

    Returns:
        Whether anything was written.

    Raises:
        LedgerError: the log names the run with another entry (another certificate: never rewritten), its head is
            wrong otherwise, the log is damaged, or cannot be written.
    """
    with _locked(root):
        entries = read_log(root)
        logged = [e for e in entries if e.run_id == entry.run_id]
        if logged and logged != [entry]:
            raise LedgerError(f"transparency log of {root} names run {entry.run_id} with another certificate "
                              f"({logged[0].certificate_sha256[:16]}…, not {entry.certificate_sha256[:16]}…): "
                              "the logged one is not rewritten")
        if not logged:
            _append_locked(root, store_id, entries, entry, key)
            return True
        head = read_head(root)
        if not head_problems(head, entries):
            return False
        if entries[-1] != entry or head_problems(head, entries[:-1]):
            raise LedgerError(f"transparency log of {root}: {'; '.join(head_problems(head, entries))}; only a head "
                              "one entry short of its own run's entry is re-signed, this one is not")
        head = TreeHead.signed(store_id, entries, key)
        try:
            atomic_replace(log_dir(root) / HEAD_FILE, (canonical.dumps(head.to_dict()) + "\n").encode("utf-8"))
        except OSError as exc:
            raise LedgerError(f"cannot re-sign the transparency log head of {root}: {exc}") from exc
        return True


def current_head(root: Path) -> TreeHead:
    """The store's signed head after checking it against the log (what ``dpaudit log head`` prints).

    Raises:
        LedgerError: no head, or a head that does not sign the log as it stands (size, root or signature).
    """
    head = read_head(root)
    if head is None:
        raise LedgerError(f"{root} has no transparency log head (no session has closed in this store)")
    problems = head_problems(head, read_log(root))
    if problems:
        raise LedgerError(f"transparency log of {root}: {'; '.join(problems)}")
    return head


def head_problems(head: TreeHead | None, entries: Sequence[LogEntry]) -> list[str]:
    """Why ``head`` is not a valid signed head of exactly ``entries`` ([] when it is)."""
    if head is None:
        return [] if not entries else [f"{len(entries)} log entries but no signed head"]
    problems = []
    if not head.signature_ok():
        problems.append("the tree head's signature does not verify")
    if head.size != len(entries):
        problems.append(f"the signed head covers {head.size} entries, the log holds {len(entries)}")
    elif head.root != tree_hash(entries):
        problems.append(f"the log's tree hash {tree_hash(entries)[:16]}… differs from the signed root "
                        f"{head.root[:16]}…")
    seen: set[str] = set()
    for e in entries:
        if e.run_id in seen:
            problems.append(f"run {e.run_id} is logged twice")
        seen.add(e.run_id)
    return problems


def extension_problem(entries: Sequence[LogEntry], size: int, root: str) -> str | None:
    """Why the log is not an append-only extension of an earlier head (``size`` entries hashing to ``root``)."""
    if size > len(entries):
        return f"the earlier head covers {size} entries but the log now holds only {len(entries)} (entries removed)"
    found = tree_hash(entries[:size])
    if found != root:
        return (f"the first {size} entries now hash to {found[:16]}…, not the earlier head's {root[:16]}… "
                "(the log was rewritten)")
    return None
