"""Line templates: the canonical text of an earlier ledger line with its numbers and digests left open, so that a
later line that differs from it only there is read without a JSON parse or a canonical re-encoding.

The ledger reader (:func:`dpaudit.ledger.read_records`) checks that every line is the canonical encoding of the record
it parses to. 10⁵ releases of counts differ only in their output, charge seq, seq, time, hash and prev; 10⁵ charges
of one event only in their cumulative ``epsilon_spent`` and the same four record fields. A template is learnt from a
line the reader has parsed and checked in full; a later line of the same shape is then matched by one regular
expression and its open places are converted and checked, which costs a fraction of a parse and an encoding.

Soundness. Let O be the checked record object of a canonical line (:func:`LineTemplate.of`). Its *slots* are the
body's top-level members holding an int or a float, and the record's ``hash``, ``prev``, ``seq`` and ``time``. Let T
be the canonical encoding of O with slot i holding the string m_i, a fresh random marker (:data:`_NONCE` with the
index; no character of it is escaped). The canonical encoding of an object is ``{``, its members' encodings in key
order, ``}``, so T holds ``"m_i"`` exactly at slot i's place; the template requires each ``"m_i"`` to occur once in T
(and the nonce nowhere else), and splits T there into literal chunks c_0 … c_k. For any slot values v_i, the canonical
encoding of O with slot i holding v_i is then c_0 e(v_1) c_1 … e(v_k) c_k, e the canonical encoding (the keys and
every other member unchanged). A line L that the template's expression matches is c_0 s_1 c_1 … s_k c_k; each s_i
is converted to v_i and kept only if e(v_i) = s_i: a number s_i must be the ``repr`` of ``float(s_i)`` (when it holds
a point or an exponent) or of ``int(s_i)`` (otherwise), which is how json writes a finite float and an int and what
json's parser reads back from s_i; a digest is 64 lowercase hex digits between quotes, which a string encodes as.
So L is the canonical encoding of the object read, which is json's parse of L: the record the reader would have
parsed, with the record fields of the types its checks require (``seq`` a non-negative int, ``time`` a finite float,
digests of 64 hex digits). A line that does not match, or any slot that fails, is left to the reader's other paths,
which read it (or refuse it) as before. The object read shares the template's other body members (objects a record
never mutates, as the reader's remembered members, :class:`dpaudit.ledger._Repeats`).
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from dpaudit import canonical

#: the longest line a template is learnt from (a regular expression is built of it), and the most body slots
MAX_TEMPLATE_CHARS = 4096
MAX_BODY_SLOTS = 16

#: the markers of the open places while a template is built: a fresh random nonce per process, absent from real lines
_NONCE = "dpaudit-slot-" + secrets.token_hex(16)
#: a slot's text in a line: a number as json may write one (loosely: each match is checked exactly), a digest
_NUMBER = r"(-?[0-9][0-9.e+-]*)"
_DIGEST = r'"([0-9a-f]{64})"'
#: the record fields left open, in key order (they follow the body, the first key)
_RECORD_SLOTS = ("hash", "prev", "seq", "time")


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
    """A checked canonical line with its slots left open (module docstring). Build one with :meth:`of`."""

    __slots__ = ("_match", "_members", "_body", "_type")

    def __init__(self, match: Any, members: tuple[str, ...], body: dict[str, Any], rtype: str) -> None:
        self._match = match
        self._members = members
        self._body = body
        self._type = rtype

    @classmethod
    def of(cls, obj: dict[str, Any]) -> LineTemplate | None:
        """The template of the record object ``obj``, which must be the reader's checked parse of a canonical line
        (its six fields of their types); None where that line would be longer than :data:`MAX_TEMPLATE_CHARS`, its
        body holds more than :data:`MAX_BODY_SLOTS` numbers, or a marker is not found once (a line naming the
        nonce)."""
        body = obj["body"]
        members = tuple(key for key, value in body.items() if type(value) is int or type(value) is float)
        if len(members) > MAX_BODY_SLOTS:
            return None
        markers = [f"{_NONCE}-{i}" for i in range(len(members) + len(_RECORD_SLOTS))]
        marked = {**body, **dict(zip(members, markers[:len(members)], strict=True))}
        text = canonical.dumps_parsed({"body": marked, **dict(zip(_RECORD_SLOTS, markers[len(members):], strict=True)),
                                       "type": obj["type"]})
        if len(text) > MAX_TEMPLATE_CHARS or text.count(_NONCE) != len(markers):
            return None
        quoted = [f'"{marker}"' for marker in markers]
        places = sorted((text.find(q), i) for i, q in enumerate(quoted))
        if places[0][0] < 0 or [i for _, i in places[-len(_RECORD_SLOTS):]] != list(range(len(members),
                                                                                             len(markers))):
            return None  # (cannot happen for a record object: the body is its first key)
        kinds = [_NUMBER] * len(members) + [_DIGEST, _DIGEST, _NUMBER, _NUMBER]  # (hash, prev, seq, time)
        pattern, done = [], 0
        for at, i in places:
            pattern += [re.escape(text[done:at]), kinds[i]]
            done = at + len(quoted[i])
        pattern.append(re.escape(text[done:]))
        return cls(re.compile("".join(pattern)).fullmatch, tuple(members[i] for _, i in places[:len(members)]),
                   body, obj["type"])

    def read(self, text: str) -> dict[str, Any] | None:
        """The checked record object of the line ``text`` (no newline), or None where the template does not read
        it (the line is then read by the reader's other paths)."""
        found = self._match(text)
        if found is None:
            return None
        values = found.groups()
        body = self._body.copy()
        try:
            for key, number in zip(self._members, values[:-4], strict=True):  # (the body's slots, then the record's)
                body[key] = canonical_number(number)
            seq, time = canonical_number(values[-2]), canonical_number(values[-1])
        except ValueError:
            return None
        if type(seq) is not int or seq < 0 or type(time) is not float:
            return None
        return {"body": body, "hash": values[-4], "prev": values[-3], "seq": seq, "time": time, "type": self._type}
