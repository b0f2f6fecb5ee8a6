"""Line templates: the canonical text of an earlier ledger line with its numbers and digests left open, so that a
later line that differs from it only there is read without a JSON parse or a canonical re-encoding.

The ledger reader (:func:`dpaudit.ledger.read_records`) checks that every line is the canonical encoding of the record
it parses to. 10⁵ releases of counts differ only in their output, charge seq, seq, time, hash and prev; 10⁵ charges
of one event only in their cumulative ``epsilon_spent`` and the same four record fields. A template is learnt from a
line the reader has parsed and checked in full; a later line of the same shape is then matched by one regular
expression and its open places are converted and checked, which costs a fraction of a parse and an encoding.

Soundness. Let O be the checked record object of a canonical line (:func:`LineTemplate.of`). Its *slots* are the
ints and floats in its body, at any depth, and the record's ``hash``, ``prev``, ``seq`` and ``time``. Let T be the
canonical encoding of O with slot i holding the string m_i, a fresh random marker (:data:`_NONCE` with the index; no
character of it is escaped). The canonical encoding of an object is ``{``, its members' encodings in key order,
``}`` (of a list, ``[``, its items', ``]``), so T holds ``"m_i"`` exactly at slot i's place; the template requires
each ``"m_i"`` to occur once in T (and the nonce nowhere else), and splits T there into literal chunks c_0 … c_k. For
any slot values v_i, the canonical encoding of O with slot i holding v_i is then c_0 e(v_1) c_1 … e(v_k) c_k, e the
canonical encoding (the keys and every other value unchanged). A line L that the template's expression matches is
c_0 s_1 c_1 … s_k c_k; each s_i is converted to v_i and kept only if e(v_i) = s_i: a number s_i must be the ``repr``
of ``float(s_i)`` (when it holds a point or an exponent) or of ``int(s_i)`` (otherwise), which is how json writes a
finite float and an int and what json's parser reads back from s_i; a digest is 64 lowercase hex digits between
quotes, which a string encodes as. So L is the canonical encoding of the object read, which is json's parse of L: the
record the reader would have parsed, with the record fields of the types its checks require (``seq`` a
non-negative int, ``time`` a finite float, digests of 64 hex digits). A line that does not match, or any slot that
fails, is left to the reader's other paths, which read it (or refuse it) as before.

Sharing. A body member's encoding is one piece of the line, so the slots inside a member are consecutive, and two
lines the template reads with the same texts in that member's slots hold the same text for the member, hence equal
values: the template gives them one object (kept by those texts, the template's own line's member under its own
numbers' ``repr``), copying only the containers on the paths of the slots whose values differ from the template's.
Records never mutate their bodies, and the reader's remembered members (:class:`dpaudit.ledger._Repeats`) are shared
alike. 10⁵ charges whose events differ only in their ε, cycling through a few values, are read as a few event
objects, which every later check describes once.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from dpaudit import canonical

#: the longest line a template is learnt from (a regular expression is built of it), the most body slots, and the
#: most objects a template keeps of each body member with slots (those of the latest distinct slot texts)
MAX_TEMPLATE_CHARS = 4096
MAX_BODY_SLOTS = 64
MEMBERS_KEPT = 256

#: the markers of the open places while a template is built: a fresh random nonce per process, absent from real lines
_NONCE = "dpaudit-slot-" + secrets.token_hex(16)
#: a slot's text in a line: a number as json may write one (loosely: each match is checked exactly; at most 32
#: characters, which every float's repr fits in, so that no long integer is converted before a line is refused), a
#: digest
_NUMBER = r"(-?[0-9][0-9.e+-]{0,31})"
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

    __slots__ = ("_match", "_parts", "_body", "_type")

    def __init__(self, match: Any, parts: tuple[_Part, ...], body: dict[str, Any], rtype: str) -> None:
        self._match = match
        self._parts = parts
        self._body = body
        self._type = rtype

    @classmethod
    def of(cls, obj: dict[str, Any], chars: int) -> LineTemplate | None:
        """The template of the record object ``obj``, which must be the reader's checked parse of a canonical line
        of ``chars`` characters (its six fields of their types); None where that line is longer than
        :data:`MAX_TEMPLATE_CHARS`, its body holds more than :data:`MAX_BODY_SLOTS` numbers, or a marker is not found
        once (a line naming the nonce)."""
        if chars > MAX_TEMPLATE_CHARS:
            return None
        body = obj["body"]
        paths: list[tuple[Any, ...]] = []  # each body slot's path: the top-level key, then keys and list indices
        marked = _marked(body, (), paths)
        if len(paths) > MAX_BODY_SLOTS:
            return None
        markers = [f"{_NONCE}-{i}" for i in range(len(paths) + len(_RECORD_SLOTS))]
        text = canonical.dumps_parsed({"body": marked, **dict(zip(_RECORD_SLOTS, markers[len(paths):], strict=True)),
                                       "type": obj["type"]})
        if text.count(_NONCE) != len(markers):
            return None
        quoted = [f'"{marker}"' for marker in markers]
        places = sorted((text.find(q), i) for i, q in enumerate(quoted))
        order = [i for _, i in places]
        if places[0][0] < 0 or order[len(paths):] != list(range(len(paths), len(markers))):
            return None  # (cannot happen for a record object: the body is its first key)
        kinds = [_NUMBER] * len(paths) + [_DIGEST, _DIGEST, _NUMBER, _NUMBER]  # (hash, prev, seq, time)
        pattern, done = [], 0
        for at, i in places:
            pattern += [re.escape(text[done:at]), kinds[i]]
            done = at + len(quoted[i])
        pattern.append(re.escape(text[done:]))
        parts = _parts(body, [paths[i] for i in order[:len(paths)]])
        if parts is None:
            return None
        return cls(re.compile("".join(pattern)).fullmatch, parts, body, obj["type"])

    def read(self, text: str) -> dict[str, Any] | None:
        """The checked record object of the line ``text`` (no newline), or None where the template does not read
        it (the line is then read by the reader's other paths)."""
        found = self._match(text)
        if found is None:
            return None
        values = found.groups()
        body = self._body.copy()
        try:
            for key, start, stop, inner, own, kept in self._parts:  # (the body's slots first, the record's last)
                if inner is None:  # a number
                    body[key] = canonical_number(values[start])
                    continue
                texts = values[start:stop]
                member = kept.get(texts)
                if member is None:  # (a slot whose text is the template's keeps the template's number)
                    changed = [(path, text) for path, text, mine in zip(inner, texts, own, strict=True)
                               if text != mine]
                    member = _placed(self._body[key], tuple(path for path, _ in changed),
                                     [canonical_number(text) for _, text in changed])
                    if len(kept) >= MEMBERS_KEPT:
                        del kept[next(iter(kept))]
                    kept[texts] = member
                body[key] = member
            seq, time = canonical_number(values[-2]), canonical_number(values[-1])
        except ValueError:
            return None
        if type(seq) is not int or seq < 0 or type(time) is not float:
            return None
        return {"body": body, "hash": values[-4], "prev": values[-3], "seq": seq, "time": time, "type": self._type}


#: a body member with slots: its key, its slots' range in the groups of a match, the slots' paths inside it and the
#: texts of the template's own numbers there (None, None for a number member), and the member objects built so far,
#: by the texts of its slots
_Part = tuple[str, int, int, "tuple[tuple[Any, ...], ...] | None", "tuple[str, ...] | None",
              "dict[tuple[str, ...], Any]"]


def _marked(value: Any, path: tuple[Any, ...], paths: list[tuple[Any, ...]]) -> Any:
    """``value`` with each int and float in it (at any depth) replaced by the next marker; their paths appended to
    ``paths``. Recurses once a level (a checked body nests at most 63 levels)."""
    kind = type(value)
    if kind is int or kind is float:
        paths.append(path)
        return f"{_NONCE}-{len(paths) - 1}"
    if kind is dict:
        return {key: _marked(item, (*path, key), paths) for key, item in value.items()}
    if kind is list:
        return [_marked(item, (*path, i), paths) for i, item in enumerate(value)]
    return value


def _parts(body: dict[str, Any], paths: list[tuple[Any, ...]]) -> tuple[_Part, ...] | None:
    """The body's members with slots, from the slots' paths in the order their markers occur in the line (a member's
    slots are consecutive, its encoding being one piece of the line); each member kept under the texts of its own
    numbers (their ``repr``, json's text of them); None where a member's slots are not consecutive (cannot happen)."""
    parts: list[_Part] = []
    start = 0
    while start < len(paths):
        key = paths[start][0]
        stop = start
        while stop < len(paths) and paths[stop][0] == key:
            stop += 1
        if any(key == part[0] for part in parts):
            return None
        if paths[start] == (key,):
            parts.append((key, start, stop, None, None, {}))
        else:
            inner = tuple(path[1:] for path in paths[start:stop])
            own = tuple(repr(_at(body[key], path)) for path in inner)
            parts.append((key, start, stop, inner, own, {own: body[key]}))
        start = stop
    return tuple(parts)


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _placed(value: Any, paths: tuple[tuple[Any, ...], ...], numbers: list[int | float]) -> Any:
    """``value`` (a dict or list) with the number at each path replaced by the matching one of ``numbers``, copying
    only the containers on those paths (the others are shared: never mutated); ``value`` itself where no path."""
    if not paths:
        return value
    copy = dict(value) if type(value) is dict else list(value)
    deeper: dict[Any, tuple[list[tuple[Any, ...]], list[int | float]]] = {}
    for path, number in zip(paths, numbers, strict=True):
        if len(path) == 1:
            copy[path[0]] = number
        else:
            inner, found = deeper.setdefault(path[0], ([], []))
            inner.append(path[1:])
            found.append(number)
    for step, (inner, found) in deeper.items():
        copy[step] = _placed(value[step], tuple(inner), found)
    return copy
