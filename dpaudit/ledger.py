"""Append-only, hash-chained, crash-safe ledger of a session's privacy-relevant acts.

The ledger is a text file with one canonical-JSON object per ``"\\n"``-terminated UTF-8 line::

    {"body":{...},"hash":"<sha256>","prev":"<sha256>","seq":0,"time":1700000000.0,"type":"open"}

``hash`` is the SHA-256 of the canonical encoding of the other five fields and ``prev`` is the ``hash`` of the
record before (``"0" * 64`` for ``seq`` 0), so every record commits to the whole history before it (a hash chain,
Haber and Stornetta, "How to time-stamp a digital document", J. Cryptology 3(2), 1991, Sec. 5.1). Editing,
deleting, reordering or inserting a record breaks the chain at that point; cutting whole records off the end does
not, which is why the certificate signs the head hash and the record count (see docs/ledger.md).

Durability is write-ahead: :meth:`Ledger.append` writes the line with one ``os.write`` on an ``O_APPEND``
descriptor, ``fsync``\\ s it, and only then returns. A ``kill -9`` can therefore leave at most one torn final line,
belonging to a record whose append never returned. :meth:`Ledger.open` cuts such a line off (keeping its bytes in
``<ledger>.torn``) and refuses every other kind of damage. The ledger does not interpret record bodies.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit.errors import LedgerError
from dpaudit.files import fsync_dir, open_regular
from dpaudit.line_template import LineTemplate

GENESIS_PREV = "0" * 64
"""The ``prev`` of the record with ``seq`` 0."""

MALFORMED = "malformed"
"""Problem kind of :func:`read_records`: a line that is not a valid record."""

TORN_FINAL_LINE = "torn final line"
"""Problem kind of :func:`read_records`: the file ends in bytes without a newline that are not a whole record."""

MISSING_FINAL_NEWLINE = "missing final newline"
"""Problem kind of :func:`read_records`: the last line is a whole record but its newline was never written."""

MAX_LINE_BYTES = 256 * 2**20
"""The longest record line, newline included: :meth:`Ledger.append` refuses a longer record (nothing written) and
:func:`read_records` reports a longer line as malformed without holding it in memory."""

#: The deepest nesting of a record body (the body itself is one level): its line, which wraps it in the record object,
#: then nests at most :data:`dpaudit.canonical.MAX_DEPTH` levels, the most a reader accepts (as for every JSON file of
#: a bundle); the reports' renderers recurse through bodies, so a deeper one would end a close or a verify in a
#: ``RecursionError``
MAX_BODY_DEPTH = canonical.MAX_DEPTH - 1

_FIELDS = frozenset({"seq", "type", "time", "prev", "body", "hash"})

#: the attribute (not a field) in which :meth:`Record.from_line` keeps the content hash read off the line
_LINE_DIGEST = "_line_digest"

logger = logging.getLogger(__name__)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: the ledger's JSON parser (one for every line; ``json.loads`` with a keyword builds one per call)
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _hashed_fields(seq: int, rtype: str, rtime: float, prev: str, body: dict[str, Any]) -> dict[str, Any]:
    """The hashed part of a record."""
    return {"seq": seq, "type": rtype, "time": rtime, "prev": prev, "body": body}


@dataclass(frozen=True)
class Record:
    """One ledger line. Construct through :meth:`Ledger.append` or :meth:`from_line`; never mutate ``body``.

    Attributes:
        seq: position in the ledger, 0, 1, 2, ...
        type: record type ("open", "charge", "release", "info", "close"); the ledger does not interpret it.
        time: unix time of the append, in seconds.
        prev: ``hash`` of the previous record, :data:`GENESIS_PREV` for ``seq`` 0.
        body: the record's payload, a JSON object.
        hash: hex SHA-256 of the canonical encoding of the five fields above.
    """

    seq: int
    type: str
    time: float
    prev: str
    body: dict[str, Any] = field(hash=False)
    hash: str

    def _content(self) -> dict[str, Any]:
        return _hashed_fields(self.seq, self.type, self.time, self.prev, self.body)

    def compute_hash(self) -> str:
        """SHA-256 (hex) of the canonical JSON of ``seq``, ``type``, ``time``, ``prev`` and ``body``.

        For a record read from a line, that JSON is the line without its ``"hash"`` member (the line was checked to
        be canonical), hashed when it was read; otherwise the content is encoded anew.
        """
        digest = self.__dict__.get(_LINE_DIGEST)
        if digest is not None:
            return digest
        return canonical.sha256_hex(canonical.encode(self._content()))

    def to_dict(self) -> dict[str, Any]:
        """The record as the JSON object of its line (all six fields)."""
        return {**self._content(), "hash": self.hash}

    def to_line(self) -> str:
        """The record's canonical JSON line, newline included."""
        return canonical.dumps(self.to_dict()) + "\n"

    @classmethod
    def from_line(cls, line: str) -> Record:
        """Parse one ledger line (with or without its trailing newline).

        The line must be exactly the canonical encoding of its object: no extra whitespace, sorted keys, no
        duplicate keys. This makes a ledger's bytes a function of its records, so two JSON parsers can never read
        different contents from the same hashed line. The hash itself is *not* checked here (that is
        :func:`verify_chain`'s job, which reports it instead of raising).

        Raises:
            LedgerError: malformed JSON, a missing or extra field, a field of the wrong type, NaN or infinity,
                or a line that is not in canonical form.
        """
        text = line[:-1] if line.endswith("\n") else line
        return _record_of_line(text, text.encode("utf-8"))


def _record_of_line(text: str, raw: bytes, repeats: _Repeats | None = None) -> Record:
    """:meth:`Record.from_line` of the line ``text`` (no newline), whose UTF-8 bytes are ``raw``: the reader's path,
    one parse, one canonical re-encoding and one SHA-256 per line, no other copy of the line. With ``repeats`` (one
    per read), the body members an earlier line held are neither parsed nor re-encoded again (:class:`_Repeats`).

    Raises:
        LedgerError: as :meth:`Record.from_line`.
    """
    obj = None if repeats is None else repeats.parse(text)
    if obj is None:
        obj = _canonical_object(text)
        if repeats is not None:
            repeats.learn(obj, len(text))
    # the fields exactly as the dataclass's __init__ sets them (it has no __post_init__), without its six
    # ``object.__setattr__`` calls: the checked object has exactly the six fields (``_check_fields``) and is this
    # line's own, fresh from the parser, so it becomes the record's attribute dict (no copy); the content digest is
    # not a dataclass field: a record built or ``dataclasses.replace``\ d in code has none and encodes anew, and
    # ``asdict`` / equality never see it
    obj[_LINE_DIGEST] = _content_digest(raw, obj["hash"])
    # one string object per record type (a handful per ledger): every reader's ``r.type == "charge"`` is then
    # decided by identity, without touching another object per record (and 10⁵ records hold one copy, not 10⁵)
    obj["type"] = sys.intern(obj["type"])
    record = object.__new__(Record)
    object.__setattr__(record, "__dict__", obj)
    return record


def _canonical_object(text: str) -> dict[str, Any]:
    """The record object of the line ``text``, checked: its fields and their types, and that ``text`` is its
    canonical encoding.

    Raises:
        LedgerError: as :meth:`Record.from_line`.
    """
    obj = canonical.fast_loads(text)  # taken only for a canonical line (see canonical.fast_loads)
    if type(obj) is dict and obj.keys() == _FIELDS:
        try:
            _check_values(obj)
            if _canonical_line(obj) == text:
                return obj
        except (LedgerError, ValueError, RecursionError):
            pass  # parsed again below, which reports the line's own error
    depth = canonical.depth_above(text, canonical.MAX_DEPTH)
    if depth is not None:  # never written (Ledger.append): refused before parsing, no RecursionError
        raise LedgerError(f"nested deeper than {canonical.MAX_DEPTH} levels ({depth})")
    try:
        obj = _DECODER.decode(text)
    except (ValueError, RecursionError) as err:
        raise LedgerError(f"not valid JSON: {err}") from err
    if type(obj) is not dict:
        raise LedgerError(f"a record must be a JSON object, got {obj.__class__.__name__}")
    _check_fields(obj)
    try:
        canonical_text = canonical.dumps_parsed(obj)
    except ValueError as err:  # a number that overflowed to infinity while parsing
        raise LedgerError(f"not canonical JSON: {err}") from err
    if canonical_text != text:
        raise LedgerError("not in canonical JSON form (whitespace, key order, duplicate keys or number format)")
    return obj


def _canonical_line(obj: dict[str, Any]) -> str:
    """``canonical.dumps_parsed(obj)`` of a record object that passed :func:`_check_fields`, the same text, built
    from its members: the canonical encoding of an object is ``{`` + its members in key order (body, hash, prev,
    seq, time, type) + ``}``, and for the types ``_check_fields`` admits json writes ``hash`` and ``prev`` (64
    lowercase hex digits, nothing to escape) between quotes, ``seq`` (an int) and ``time`` (a finite float) as their
    ``repr``, ``type`` by its string encoder, and the body is encoded by json itself. Only the body's keys are
    sorted (the record's six are in place), and the two digests are not scanned for escapes: one encoding per line
    of the ledger's reader.

    Raises:
        ValueError, RecursionError: as ``canonical.dumps_parsed`` of the body.
    """
    return (f'{{"body":{canonical.dumps_parsed(obj["body"])},"hash":"{obj["hash"]}","prev":"{obj["prev"]}",'
            f'"seq":{obj["seq"]!r},"time":{obj["time"]!r},"type":{canonical.encode_string(obj["type"])}}}')


def _check_fields(obj: dict[str, Any]) -> None:
    """The record object has exactly the six fields, of their types.

    Raises:
        LedgerError: a missing or extra field, or one of the wrong type.
    """
    if obj.keys() != _FIELDS:
        missing, extra = sorted(_FIELDS - set(obj)), sorted(set(obj) - _FIELDS)
        raise LedgerError(f"wrong fields: missing {missing}, unexpected {extra}")
    _check_values(obj)


def _check_values(obj: dict[str, Any]) -> None:
    """:func:`_check_fields` of an object known to have exactly the six fields: their types.

    Raises:
        LedgerError: a field of the wrong type.
    """
    seq, rtype, rtime, prev, body, rhash = obj["seq"], obj["type"], obj["time"], obj["prev"], obj["body"], obj["hash"]
    if type(seq) is not int or seq < 0:  # the parser makes int (never bool) of an integer
        raise LedgerError(f"seq must be a non-negative integer, got {seq!r}")
    if type(rtype) is not str or not rtype:
        raise LedgerError(f"type must be a non-empty string, got {rtype!r}")
    if type(rtime) is not float or not math.isfinite(rtime):
        raise LedgerError(f"time must be a finite float, got {rtime!r}")
    # both at once (a regex call per line less); the length of ``prev`` says where one ends and the other starts
    if type(prev) is not str or type(rhash) is not str or len(prev) != 64 or not _HEX128(prev + rhash):
        for name, value in (("prev", prev), ("hash", rhash)):
            if type(value) is not str or not _HEX64(value):
                raise LedgerError(f"{name} must be 64 lowercase hex digits, got {value!r}")
    if type(body) is not dict:
        raise LedgerError(f"body must be a JSON object, got {body.__class__.__name__}")


#: how many object-valued body members a :class:`_Repeats` remembers (the latest), and the shortest it remembers;
#: how many line templates it keeps (the latest)
REPEATS_KEPT = 4
REPEAT_MIN_CHARS = 64
TEMPLATES_KEPT = 4
#: after this many lines in a row that no template read, templates are tried only on the lines of the streak
#: numbered by a power of two (until one reads a line)
TEMPLATE_TRIES = 16


class _Repeats:
    """Object-valued body members met earlier in one read of a ledger, so that a line repeating one (10⁵ charges of
    one event) is parsed and re-encoded without it.

    For a remembered member ``"key":S`` (S the canonical text of an earlier line's ``body[key]``), a line holding that
    text is parsed with a marker in place of S: a fresh random string ``"<nonce>-i"`` per replaced member, the nonce
    drawn once per process and absent from the line. The shortcut is taken only if the shortened line is a valid
    record in canonical form whose ``body[key]`` is exactly marker i for each replaced member i; then the record is
    the shortened one with ``body[key]`` set to the earlier (shared, never mutated) value. That is the line's parse,
    and the line is canonical: each marker's canonical text occurs once in the shortened line, at ``body[key]``, so
    the line is the shortened line with S in that place; S is the canonical encoding of that value, and a canonical
    encoding (or a parse) of an object is its members' in key order. Where any condition fails the line is parsed
    whole, as without a shortcut (same record, same errors).

    Remembering costs an encoding of the members, so after n lines in a row without the shortcut only the lines
    numbered by a power of two are learnt from (a ledger whose members never repeat pays for about log n of them).

    It also keeps line templates (:class:`dpaudit.line_template.LineTemplate`, the latest :data:`TEMPLATES_KEPT`):
    an earlier line's text with its numbers and digests left open, tried first. A line that one reads (10⁵ releases
    of counts, or charges of one event, differing only in numbers and digests) is neither parsed nor re-encoded. A
    template costs an encoding and a regular expression, so one is learnt only from the 1st, 2nd, 4th, 8th, ... line
    of the read that no template read (a ledger whose lines never repeat a shape pays for about log n of them); and
    after :data:`TEMPLATE_TRIES` lines in a row that none read, they are tried on about log n more lines of the
    streak only (lines that share a long start with a template but never match it pay little).

    A reader keeps one per record type (:func:`_repeats_for`): the members a charge repeats are searched for in
    charge lines only, and a release line, whose body holds no large member, is not searched at all.
    """

    _NONCE = "dpaudit-member-" + secrets.token_hex(16)
    #: marker i, and its canonical text (a string: the nonce and i hold no character json escapes)
    _MARKERS = tuple(map(f"{_NONCE}-{{}}".format, range(REPEATS_KEPT)))
    _QUOTED = tuple(map('"{}"'.format, _MARKERS))

    def __init__(self) -> None:
        self._members: dict[str, tuple[str, int, Any]] = {}  # '"key":S' -> (key, len(S), the value S encodes)
        self._misses = 0  # lines in a row parsed whole
        self._templates: list[LineTemplate] = []  # the latest first
        self._template_misses = 0  # lines of the read that no template read
        self._template_streak = 0  # lines in a row that no template read

    def learn(self, obj: dict[str, Any], chars: int) -> None:
        """Learn from the checked record object of a line of ``chars`` characters that :meth:`parse` did not read: a
        template (on the lines :meth:`_learn_template` says), and the object-valued members of its body (the latest
        :data:`REPEATS_KEPT`), on the 1st, 2nd, 4th, 8th, ... line in a row that the members' shortcut did not read."""
        self._learn_template(obj, chars)
        body = obj["body"]
        self._misses += 1
        if self._misses & (self._misses - 1):
            return
        for key, value in body.items():
            if type(value) is dict:
                text = canonical.dumps_parsed(value)
                if len(text) >= REPEAT_MIN_CHARS:
                    needle = canonical.dumps_parsed(key) + ":" + text
                    if needle not in self._members:
                        self._members[needle] = (key, len(text), value)
                        if len(self._members) > REPEATS_KEPT:
                            del self._members[next(iter(self._members))]

    def _learn_template(self, obj: dict[str, Any], chars: int) -> None:
        """Keep the template of the checked record object ``obj`` of a line of ``chars`` characters that no template
        read, when that line is the 1st, 2nd, 4th, 8th, ... such line of the read."""
        self._template_misses += 1
        if self._template_misses & (self._template_misses - 1):
            return
        template = LineTemplate.of(obj, chars)
        if template is not None:
            self._templates = [template, *self._templates[:TEMPLATES_KEPT - 1]]

    def parse(self, text: str) -> dict[str, Any] | None:
        """The checked record object of the line ``text`` by a template or the members' shortcut, or None where
        neither applies."""
        streak = self._template_streak
        if streak < TEMPLATE_TRIES or not streak & (streak - 1):  # (a shape that keeps missing is rarely tried)
            for template in self._templates:
                obj = template.read(text)
                if obj is not None:
                    self._template_streak = 0
                    return obj
        self._template_streak = streak + 1
        obj = self._shortened(text)
        if obj is not None:
            self._learn_template(obj, len(text))
        return obj

    def _shortened(self, text: str) -> dict[str, Any] | None:
        """The checked record object of the line ``text`` by the members' shortcut, or None where it does not
        apply."""
        if not self._members:
            return None
        short, replaced = text, []
        for needle, (key, size, value) in self._members.items():
            at = short.find(needle)
            if at >= 0:
                start = at + len(needle) - size
                short = short[:start] + self._QUOTED[len(replaced)] + short[start + size:]
                replaced.append((key, value))
        if not replaced or self._NONCE in text or short.count(self._NONCE) != len(replaced):
            return None  # (a marker lost to a later replacement, or a line naming the nonce itself)
        try:
            obj = canonical.fast_loads(short)  # used only if its canonical re-encoding is ``short`` (below)
            if type(obj) is not dict:
                return None
            _check_fields(obj)
            body = obj["body"]
            for i, (key, _) in enumerate(replaced):  # (at most REPEATS_KEPT members are remembered)
                if body.get(key) != self._MARKERS[i]:
                    return None
            if _canonical_line(obj) != short:
                return None
        except (ValueError, RecursionError, LedgerError):
            return None  # the whole line is parsed instead, and reports its own error
        for key, value in replaced:
            body[key] = value
        self._misses = 0
        return obj


#: what a canonical line ends with: its ``"type"`` member (the last of its keys, sorted) and the closing brace
_TYPE_MEMBER = ',"type":'
#: the most record types a read keeps a :class:`_Repeats` of apart, and the longest tail it keys one by; lines of
#: further types, or with a longer tail (a malformed line), share one
MAX_REPEAT_TYPES = 16
MAX_TYPE_TAIL_CHARS = 256


def _repeats_for(text: str, kept: dict[str, _Repeats]) -> _Repeats:
    """The :class:`_Repeats` of the line ``text``'s record type, from ``kept`` (one read's). The type is read from
    the line's tail, where a canonical line has it; that is a hint only: a line whose tail says otherwise gets
    another type's, or the shared one, and any shortcut is still checked in full (:meth:`_Repeats.parse`)."""
    at = text.rfind(_TYPE_MEMBER)
    tail = text[at:] if len(text) - at <= MAX_TYPE_TAIL_CHARS else ""
    repeats = kept.get(tail)
    if repeats is None:
        repeats = kept.setdefault(tail if len(kept) < MAX_REPEAT_TYPES else "", _Repeats())
    return repeats


#: fullmatch of 64 lowercase hex digits (:data:`dpaudit.canonical.SHA256_HEX`), and of two such digests in a row
_HEX64 = canonical.SHA256_HEX.fullmatch
_HEX128 = re.compile(r"[0-9a-f]{128}").fullmatch


#: what the canonical line holds between the body and ``prev``: the ``"hash"`` member (keys are sorted)
_HASH_MEMBER = ',"hash":"'
_HASH_MEMBER_BYTES = _HASH_MEMBER.encode("ascii")


def _content_digest(line: bytes, rhash: str) -> str | None:
    """SHA-256 of the canonical encoding of a record's hashed fields, from its canonical line ``line`` (no newline).

    In the line the keys are sorted, so the ``"hash"`` member comes right after ``body`` and is followed only by
    ``prev``, ``seq``, ``time`` and ``type``, whose values hold no object; a ``"`` inside a JSON string is escaped,
    so the last ``,"hash":"`` of the line is that member. The line without it is exactly the canonical encoding of
    the other five fields (the encoding of an object is its members' encodings in key order). None where the line
    does not have that shape (then :meth:`Record.compute_hash` encodes the fields anew).
    """
    at = line.rfind(_HASH_MEMBER_BYTES)
    member = _HASH_MEMBER_BYTES + rhash.encode("ascii") + b'"'
    if at < 0 or not line.startswith(member, at):  # cannot happen for a canonical line; then encode anew
        return None
    # the line without the member, joined: one sha256 call, cheaper than two memoryview updates
    return hashlib.sha256(line[:at] + line[at + len(member):]).hexdigest()


def _new_record(seq: int, rtype: str, body: dict[str, Any], prev: str, rtime: float) -> Record:
    """A record with its hash computed; ``body`` must already be a canonical-JSON round-tripped copy."""
    digest = canonical.sha256_hex(canonical.encode(_hashed_fields(seq, rtype, rtime, prev, body)))
    return Record(seq=seq, type=rtype, time=rtime, prev=prev, body=body, hash=digest)


@dataclass(frozen=True)
class _Parsed:
    records: list[Record]
    problems: list[str]
    line_problems: list[str]  # problems other than the final line's
    tail: bytes  # bytes after the last newline
    tail_is_record: bool


def _parse(data: bytes) -> _Parsed:
    lines: list[bytes | None] = list(data.split(b"\n"))
    tail = lines.pop()
    return _parse_lines(lines, tail)


def _parse_lines(lines: list[bytes | None], tail: bytes | None) -> _Parsed:
    """Parse newline-terminated ``lines`` (newlines stripped) and the final bytes ``tail``; None stands for a line
    longer than :data:`MAX_LINE_BYTES`, never read whole."""
    records: list[Record] = []
    problems: list[str] = []
    repeats: dict[str, _Repeats] = {}  # by record type (_repeats_for)
    for n, raw in enumerate(lines, start=1):
        if raw is None:
            problems.append(f"line {n}: {MALFORMED}: longer than {MAX_LINE_BYTES} bytes")
            continue
        try:
            text = raw.decode("utf-8")
            records.append(_record_of_line(text, raw, _repeats_for(text, repeats)))
        except (UnicodeDecodeError, LedgerError) as err:
            problems.append(f"line {n}: {MALFORMED}: {err}")
    line_problems = list(problems)
    tail_is_record = False
    if tail is None:
        problems.append(f"line {len(lines) + 1}: {TORN_FINAL_LINE}: more than {MAX_LINE_BYTES} bytes without a "
                        "newline")
    elif tail:
        n = len(lines) + 1
        try:
            records.append(Record.from_line(tail.decode("utf-8")))
            tail_is_record = True
            problems.append(f"line {n}: {MISSING_FINAL_NEWLINE}: a whole record whose append was interrupted")
        except (UnicodeDecodeError, LedgerError):
            problems.append(f"line {n}: {TORN_FINAL_LINE}: {len(tail)} bytes without a newline are not a record")
    return _Parsed(records, problems, line_problems, tail, tail_is_record)


def read_records(path: Path) -> tuple[list[Record], list[str]]:
    """Parse every line of a ledger file without judging the chain.

    Args:
        path: the ledger file.

    Returns:
        ``(records, problems)``: the records of every well-formed line, in file order, and one message per bad
        line, each ``"line N: <kind>: <detail>"`` with kind :data:`MALFORMED`, :data:`TORN_FINAL_LINE` (the final
        bytes lack a newline and are not a record; they are not in ``records``) or :data:`MISSING_FINAL_NEWLINE`
        (the final line is a whole record without its newline; it *is* in ``records``).

    Raises:
        LedgerError: the file is missing or unreadable, a symbolic link (never followed), or not a regular file
            (a device such as ``/dev/zero``, a FIFO). A line longer than :data:`MAX_LINE_BYTES` is a problem, read
            in bounded chunks and never held whole.
    """
    with os.fdopen(open_regular(Path(path), LedgerError), "rb") as file:
        lines: list[bytes | None] = []
        tail: bytes | None = b""
        while True:
            raw: bytes | None = file.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            if len(raw) > MAX_LINE_BYTES:
                while raw and not raw.endswith(b"\n"):  # skip the rest of the line in bounded chunks
                    raw = file.readline(1 << 20)
                if not raw:
                    tail = None
                    break
                lines.append(None)
            elif raw.endswith(b"\n"):
                lines.append(raw[:-1])
            else:
                tail = raw
    parsed = _parse_lines(lines, tail)
    return parsed.records, parsed.problems


def verify_chain(records: Sequence[Record]) -> list[str]:
    """Check the hash chain and report every problem, not only the first.

    Checks, for each record in order: its ``hash`` equals the hash of its content (else it was edited), its
    ``seq`` is new and is one more than the previous record's (0 for the first), and its ``prev`` equals the
    previous record's ``hash`` (:data:`GENESIS_PREV` for the first).

    A chain cannot show that whole records were cut off its end; compare the head hash and the count with the
    signed certificate for that.

    Args:
        records: records in file order, as from :func:`read_records`.

    Returns:
        Problem messages; the empty list means the chain is valid.
    """
    problems: list[str] = []
    seen: dict[int, int] = {}
    before: Record | None = None
    for pos, rec in enumerate(records):
        actual = rec.compute_hash()
        if actual != rec.hash:
            problems.append(f"{_where(pos, rec)}: hash mismatch, stored {rec.hash} but content hashes to {actual} "
                            "(edited)")
        if rec.seq in seen:
            problems.append(f"{_where(pos, rec)}: duplicate seq, first seen at record {seen[rec.seq]}")
        else:
            seen[rec.seq] = pos
        expected_seq = 0 if before is None else before.seq + 1
        if rec.seq != expected_seq:
            problems.append(f"{_where(pos, rec)}: seq not consecutive, expected {expected_seq}")
        expected_prev = GENESIS_PREV if before is None else before.hash
        if rec.prev != expected_prev:
            problems.append(f"{_where(pos, rec)}: prev {rec.prev} does not match {expected_prev}, the hash of the "
                            "record before")
        before = rec
    return problems


def _where(pos: int, rec: Record) -> str:
    return f"record {pos} (seq {rec.seq})"


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


class Ledger:
    """An open ledger file for appending. Build one with :meth:`create` or :meth:`open`, never directly.

    Appends are serialised by a ``threading.Lock`` within the process and an exclusive ``fcntl.flock`` on the
    file across processes. Each object remembers how many bytes it has written; if the file has grown by any
    other writer (another process, another :class:`Ledger` object on the same file), the next append raises
    :class:`LedgerError` instead of forking the chain. A ledger object must not be used across ``fork``.
    """

    def __init__(self, path: Path, fd: int, records: list[Record], size: int, recovery: tuple[str, ...]) -> None:
        self._path = path
        self._fd = fd
        self._records = records
        self._size = size
        self._recovery = recovery
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._broken: str | None = None
        self._frozen_at: float | None = None

    @classmethod
    def create(cls, path: Path) -> Ledger:
        """Create a new, empty ledger file (and its parent directories).

        Raises:
            LedgerError: the file already exists or cannot be created.
        """
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError as err:
            raise LedgerError(f"ledger {path} already exists; use Ledger.open to append to it") from err
        except OSError as err:
            raise LedgerError(f"cannot create ledger {path}: {err}") from err
        try:
            fsync_dir(path.parent)
        except OSError as err:
            os.close(fd)
            raise LedgerError(f"cannot make the creation of {path} durable: {err}") from err
        return cls(path, fd, [], 0, ())

    @classmethod
    def open(cls, path: Path) -> Ledger:
        """Open an existing ledger for appending, after reading and verifying all of it.

        A final line without its newline is the trace of an append that never returned (a crash mid-write). If
        it is a whole valid record continuing the chain, the newline is written and the record kept; otherwise
        its bytes are appended (plus a newline) to ``path.with_suffix(".torn")`` and cut off the ledger. Either
        repair is logged as a warning and listed in :attr:`recovery`. Nothing else is ever repaired.

        Raises:
            LedgerError: the file is missing or unreadable, a line other than the last is malformed, or the
                chain is broken.
        """
        path = Path(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
        except OSError as err:
            raise LedgerError(f"cannot open ledger {path}: {err}") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                data = _read_fd(fd)
                parsed = _parse(data)
                if parsed.line_problems:
                    raise LedgerError(f"ledger {path} is corrupted: " + "; ".join(parsed.line_problems))
                chain_problems = verify_chain(parsed.records)
                if chain_problems:
                    raise LedgerError(f"ledger {path} has a broken hash chain: " + "; ".join(chain_problems))
                size = len(data)
                recovery: tuple[str, ...] = ()
                if parsed.tail_is_record:
                    os.write(fd, b"\n")
                    os.fsync(fd)
                    size += 1
                    recovery = (f"{parsed.problems[-1]}; newline written, record kept",)
                elif parsed.tail:
                    torn_path = path.with_suffix(".torn")
                    with open(torn_path, "ab") as torn:
                        torn.write(parsed.tail + b"\n")
                        torn.flush()
                        os.fsync(torn.fileno())
                    fsync_dir(path.parent)
                    size -= len(parsed.tail)
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                    recovery = (f"{parsed.problems[-1]}; cut off, bytes kept in {torn_path}",)
                for message in recovery:
                    logger.warning("ledger %s: %s", path, message)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as err:
            os.close(fd)
            raise LedgerError(f"cannot open ledger {path}: {err}") from err
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, parsed.records, size, recovery)

    @property
    def path(self) -> Path:
        """The ledger file."""
        return self._path

    @property
    def head(self) -> str:
        """Hash of the last record, :data:`GENESIS_PREV` for an empty ledger."""
        with self._lock:
            return self._records[-1].hash if self._records else GENESIS_PREV

    @property
    def count(self) -> int:
        """Number of records."""
        with self._lock:
            return len(self._records)

    @property
    def recovery(self) -> tuple[str, ...]:
        """What :meth:`open` repaired (a torn final line); empty when nothing was."""
        return self._recovery

    def records(self) -> list[Record]:
        """A copy of the list of records, in order."""
        with self._lock:
            return list(self._records)

    def freeze_clock(self) -> float:
        """Stop the record clock: every later record appended by this object carries the last record's ``time``.

        For selections whose cost must stay hidden (a repeat-and-select's number of repetitions K, Papernot &
        Steinke 2022): freezing right after the charge record, before K is drawn, makes the ``time`` of every later
        record, and so the certificate's ``closed_at``, independent of K. Time never goes backwards (the frozen time
        is the latest record's) and the freeze is not undone; freezing again keeps the first frozen time. The freeze
        belongs to this writer: a ledger reopened with :meth:`open` appends with the wall clock again.

        Returns:
            The frozen time.

        Raises:
            LedgerError: the ledger has no record yet (nothing to freeze at), or is closed or unusable.
        """
        with self._lock:
            self._check_usable()
            if self._frozen_at is None:
                if not self._records:
                    raise LedgerError("cannot freeze the clock of an empty ledger: no record time to freeze at")
                self._frozen_at = self._records[-1].time
            return self._frozen_at

    def append(self, type: str, body: Mapping[str, Any]) -> Record:
        """Append one record durably: it is on disk (written and fsync'ed) when this returns.

        Its ``time`` is the wall clock, or the frozen time after :meth:`freeze_clock`.

        Args:
            type: the record type, a non-empty string.
            body: a JSON object; it must be canonical-JSON encodable (no NaN or infinity; keys become strings).
                The record holds a round-tripped copy, equal to what a reader of the file will see.

        Returns:
            The appended record.

        Raises:
            LedgerError: bad ``type`` or ``body`` (nothing is written); the file was written by another writer
                since this object last wrote; the ledger is closed, used across ``fork``, or broken by an earlier
                failed fsync; or the write or fsync failed.
        """
        if not isinstance(type, str) or not type:
            raise LedgerError(f"record type must be a non-empty string, got {type!r}")
        if not isinstance(body, Mapping):
            raise LedgerError(f"record body must be a mapping, got {body.__class__.__name__}")
        try:
            text = canonical.dumps(dict(body))
            if not text.isascii():
                text.encode("utf-8")  # a lone surrogate has no UTF-8 (UnicodeEncodeError, a ValueError)
        except (TypeError, ValueError, RecursionError) as err:
            raise LedgerError(f"record body is not canonical-JSON encodable: {err}") from err
        depth = canonical.depth_above(text, MAX_BODY_DEPTH)
        if depth is not None:
            raise LedgerError(f"record body nested deeper than {MAX_BODY_DEPTH} levels ({depth}): a reader refuses "
                              "such a line; nothing was written")
        body_copy = json.loads(text)
        with self._lock:
            self._check_usable()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                found = os.fstat(self._fd).st_size
                if found != self._size:
                    raise LedgerError(
                        f"ledger {self._path} is {found} bytes but this writer left it at {self._size}: another "
                        "writer appended or truncated it; refusing to fork the chain"
                    )
                prev = self._records[-1].hash if self._records else GENESIS_PREV
                rtime = time.time() if self._frozen_at is None else self._frozen_at
                record = _new_record(len(self._records), type, body_copy, prev, rtime)
                data = record.to_line().encode("utf-8")
                if len(data) > MAX_LINE_BYTES:
                    raise LedgerError(f"a {type} record of {len(data)} bytes is longer than the {MAX_LINE_BYTES}-byte "
                                      "line limit of a readable ledger; nothing was written")
                self._write_durably(data)
                self._records.append(record)
                self._size += len(data)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        return record

    def _check_usable(self) -> None:
        if self._fd < 0:
            raise LedgerError(f"ledger {self._path} is closed")
        if os.getpid() != self._pid:
            raise LedgerError(f"ledger {self._path} was opened by process {self._pid}; open it anew after fork")
        if self._broken is not None:
            raise LedgerError(f"ledger {self._path} is unusable after an earlier failure: {self._broken}")

    def _write_durably(self, data: bytes) -> None:
        """One ``os.write`` of a whole line, then ``fsync``; on failure the file is left at a record boundary."""
        try:
            written = os.write(self._fd, data)
        except OSError as err:
            raise LedgerError(f"cannot write to ledger {self._path}: {err}") from err
        if written != len(data):
            try:
                os.ftruncate(self._fd, self._size)
                os.fsync(self._fd)
            except OSError as err:
                self._broken = f"short write ({written} of {len(data)} bytes) could not be undone: {err}"
                raise LedgerError(f"ledger {self._path}: {self._broken}") from err
            raise LedgerError(f"short write to ledger {self._path} ({written} of {len(data)} bytes); undone")
        try:
            os.fsync(self._fd)
        except OSError as err:
            # After a failed fsync the kernel may have dropped the dirty pages: the state on disk is unknown.
            self._broken = f"fsync failed: {err}"
            raise LedgerError(f"ledger {self._path}: {self._broken}") from err

    def close(self) -> None:
        """Close the file; later appends raise :class:`LedgerError`. Closing twice is harmless."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
