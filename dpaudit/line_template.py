"""Line templates: the canonical text of an earlier ledger line with its numbers and digests left open, so that a
later line that differs from it only there is read without a JSON parse or a canonical re-encoding.

The ledger reader (:func:`dpaudit.ledger.read_records`) checks that every line is the canonical encoding of the record
it parses to. 10⁵ releases of counts differ only in their output, charge seq, seq, time, hash and prev; 10⁵ charges
of one event only in their cumulative ``epsilon_spent`` and the same four record fields. A template is learnt from a
line the reader has parsed and checked in full; a later line of the same shape is then matched by one regular
expression and its open places are converted and checked, which costs a fraction of a parse and an encoding.

Soundness. Let O be the checked record object of a canonical line (:func:`LineTemplate.of`). Its *open places* are
the ints and floats in its body, at any depth, and the record's ``hash``, ``prev``, ``seq`` and ``time``. Let T be
the canonical encoding of O with open place i holding the string m_i, a fresh random marker (:data:`_NONCE` with the
index; no character of it is escaped). The canonical encoding of an object is ``{``, its members' encodings in key
order, ``}`` (of a list, ``[``, its items', ``]``), so T holds ``"m_i"`` exactly at place i; the template requires the
nonce to occur in T once per marker, and T to be the concatenation it assembles member by member (checked against
the encoder). Its regular expression is T with each ``"m_i"`` replaced by a number's pattern (a digest's, quoted, for
``hash`` and ``prev``) and each body member that holds an open number wrapped in a group.

A line L that the expression matches is T with other texts in the open places. Each top-level number's text s must
be ``repr`` of what it reads as, ``float(s)`` where it holds a point or an exponent, else ``int(s)``: json's own text
of a finite float and of an int, and what json's parser reads back from s. Each digest is 64 lowercase hex digits
between quotes, as a string encodes. Each member group's text M must be the canonical encoding of its own parse
(orjson's parse, or json's above 64 brackets, re-encoded by json's encoder: then it is json's parse, as in the
reader, :func:`dpaudit.canonical.fast_loads`). So every piece of L is the canonical encoding of the value read for
it, the rest of L is T's own text, and L is the canonical encoding of the record read, which is json's parse of L:
the record the reader would have parsed, with the record fields of the types its checks require (``seq`` a
non-negative int, ``time`` a finite float, digests of 64 hex digits). A line that does not match, or any piece that
fails, is left to the reader's other paths, which read it (or refuse it) as before.

Sharing. Two lines the template reads with the same text M for a member hold equal values there, so the template
gives them one object: it keeps the members it has read by their text (at most :data:`MEMBERS_KEPT` per member, its
own line's under that line's text) and parses a member only when its text is new. Records never mutate their
bodies, and the reader's remembered members (:class:`dpaudit.ledger._Repeats`) are shared alike. 10⁵ charges whose
events differ only in their ε, cycling through a few values, are read as a few event objects, which every later
check describes once.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from dpaudit import canonical

#: the longest line a template is learnt from (a regular expression is built of it), the most numbers of a body it
#: leaves open, and the most objects a template keeps of each body member with open numbers (the latest texts)
MAX_TEMPLATE_CHARS = 4096
MAX_BODY_SLOTS = 64
MEMBERS_KEPT = 256

#: the markers of the open places while a template is built: a fresh random nonce per process, absent from real lines
_NONCE = "dpaudit-slot-" + secrets.token_hex(16)
#: a slot's text in a line: a number as json may write one (loosely: each match is checked exactly; at most 32
#: characters, which every float's repr fits in, so that no long integer is converted before a line is refused), a
#: digest
_INNER_NUMBER = r"-?[0-9][0-9.e+-]{0,31}"
_NUMBER = f"({_INNER_NUMBER})"
_DIGEST = r'"([0-9a-f]{64})"'
#: a body marker as the encoder writes it (quoted)
_QUOTED_MARKER = re.compile(f'"{re.escape(_NONCE)}-[0-9]+"')


def canonical_number(text: str) -> int | float:
    """The number whose canonical JSON text is ``text``: ``float(text)`` where ``text`` holds a point or an exponent,
    else ``int(text)``, which is what json's parser reads from such a text.

    Raises:
        ValueError: ``text`` is not the canonical text of a finite number (another form, such as ``1e0`` or ``-0``,
            or no number at all).
    """
    value: int | float = float(text) if "." in text or "e" in text else int(text)
    if repr(value) != text:  # json writes an int and a finite float as their repr
        raise ValueError(f"not a canonical JSON number: {text!r}")
    return value


class LineTemplate:
    """A checked canonical line with its open places (module docstring). Build one with :meth:`of`."""

    __slots__ = ("_match", "_parts", "_body", "_type")

    def __init__(self, match: Any, parts: tuple[tuple[str, dict[str, Any] | None], ...], body: dict[str, Any],
                 rtype: str) -> None:
        self._match = match
        self._parts = parts  # the body's members with open places, in order: (key, members kept by text or None)
        self._body = body
        self._type = rtype

    @classmethod
    def of(cls, obj: dict[str, Any], chars: int) -> LineTemplate | None:
        """The template of the record object ``obj``, which must be the reader's checked parse of a canonical line
        of ``chars`` characters (its six fields of their types); None where that line is longer than
        :data:`MAX_TEMPLATE_CHARS`, its body holds more than :data:`MAX_BODY_SLOTS` numbers, or the markers do not
        occur once each (a line naming the nonce)."""
        if chars > MAX_TEMPLATE_CHARS:
            return None
        body = obj["body"]
        markers: list[str] = []
        marked = _marked(body, markers)
        if len(markers) > MAX_BODY_SLOTS:
            return None
        record = [f"{_NONCE}-r{i}" for i in range(4)]  # hash, prev, seq, time
        text = canonical.dumps_parsed({"body": marked, "hash": record[0], "prev": record[1], "seq": record[2],
                                       "time": record[3], "type": obj["type"]})
        if text.count(_NONCE) != len(markers) + len(record):
            return None
        pieces: list[tuple[str, str]] = [('{"body":{', "")]  # (text, pattern) whose texts make T
        parts: list[tuple[str, dict[str, Any] | None]] = []
        for i, key in enumerate(sorted(body)):  # (the canonical order of the keys)
            value, head = marked[key], ("," if i else "") + canonical.encode_string(key) + ":"
            member = canonical.dumps_parsed(value)
            if type(body[key]) in (int, float):
                pieces += [(head, ""), (member, _NUMBER)]
                parts.append((key, None))
            elif _NONCE in member:
                pieces += [(head, ""), (member, "(" + _opened(member) + ")")]
                parts.append((key, {canonical.dumps_parsed(body[key]): body[key]}))
            else:
                pieces.append((head + member, ""))
        quoted = [canonical.encode_string(m) for m in record]
        pieces += [('},"hash":', ""), (quoted[0], _DIGEST), (',"prev":', ""), (quoted[1], _DIGEST), (',"seq":', ""),
                   (quoted[2], _NUMBER), (',"time":', ""), (quoted[3], _NUMBER),
                   (',"type":' + canonical.encode_string(obj["type"]) + "}", "")]
        if "".join(piece for piece, _ in pieces) != text:
            return None  # (cannot happen: the encoder's text, member by member)
        pattern = "".join(regex or re.escape(piece) for piece, regex in pieces)
        return cls(re.compile(pattern).fullmatch, tuple(parts), body, obj["type"])

    def read(self, text: str) -> dict[str, Any] | None:
        """The checked record object of the line ``text`` (no newline), or None where the template does not read
        it (the line is then read by the reader's other paths)."""
        found = self._match(text)
        if found is None:
            return None
        values = found.groups()
        body = self._body.copy()
        try:
            for (key, kept), piece in zip(self._parts, values, strict=False):  # (then the record's four)
                if kept is None:  # a number
                    body[key] = canonical_number(piece)
                    continue
                member = kept.get(piece)
                if member is None:
                    member = _canonical_member(piece)
                    if len(kept) >= MEMBERS_KEPT:
                        del kept[next(iter(kept))]
                    kept[piece] = member
                body[key] = member
            seq, time = canonical_number(values[-2]), canonical_number(values[-1])
        except (ValueError, RecursionError):
            return None
        if type(seq) is not int or seq < 0 or type(time) is not float:
            return None
        return {"body": body, "hash": values[-4], "prev": values[-3], "seq": seq, "time": time, "type": self._type}


def _marked(value: Any, markers: list[str]) -> Any:
    """``value`` with each int and float in it (at any depth) replaced by the next marker (appended to
    ``markers``). Recurses once a level (a checked body nests at most 63 levels)."""
    kind = type(value)
    if kind is int or kind is float:
        markers.append(f"{_NONCE}-{len(markers)}")
        return markers[-1]
    if kind is dict:
        return {key: _marked(item, markers) for key, item in value.items()}
    if kind is list:
        return [_marked(item, markers) for item in value]
    return value


def _opened(member: str) -> str:
    """The pattern of a member's marked text: its text, each quoted marker a number's pattern (not a group)."""
    return _INNER_NUMBER.join(map(re.escape, _QUOTED_MARKER.split(member)))


def _canonical_member(text: str) -> Any:
    """The value whose canonical JSON text is ``text``: its parse (:func:`dpaudit.canonical.fast_loads`, else json's),
    kept only if json's canonical encoder writes it back as ``text`` (then it is json's parse of ``text``).

    Raises:
        ValueError: ``text`` is not the canonical encoding of its parse (or not JSON).
        RecursionError: json's parser or encoder ran out of stack.
    """
    value = canonical.fast_loads(text)
    if value is None:
        value = json.loads(text)
    if canonical.dumps_parsed(value) != text:
        raise ValueError("not a canonical member")
    return value
