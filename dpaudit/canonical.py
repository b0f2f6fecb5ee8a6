"""Canonical JSON: one byte string per value, so that hashes and signatures are reproducible.

Keys are sorted, separators carry no spaces, text is UTF-8, and NaN / infinity are refused (they are not JSON
and would make a ledger unverifiable). Python's float ``repr`` round-trips exactly, so a float written here reads
back as the same float.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring,
    encode_basestring_ascii,
)
from pathlib import Path
from typing import Any

import orjson

from dpaudit.files import read_regular

#: one encoder for every call: ``json.dumps`` with these options builds a new one each time (what it then does)
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


#: json's encoder of one string as canonical JSON writes it (``ensure_ascii=False``): for callers that write a known
#: shape of canonical or report JSON member by member
encode_string = encode_basestring


def dumps(obj: Any) -> str:
    """Serialise ``obj`` as canonical JSON text."""
    return _ENCODER.encode(obj)


def acyclic_encode(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode``, faster, for values that hold no cycle (parsed JSON, report models): json's C encoder built
    once with ``encoder``'s options and without the circular-reference check (``encode`` builds one, and a closure,
    per call). The same text for every such value; ``encoder.encode`` itself where json has no C speedups or
    ``encoder`` indents (which the C encoder does not do).

    Raises (from the returned function):
        ValueError: a float that is not finite, when ``encoder`` does not allow NaN.
        TypeError: a value of a type JSON does not encode.
    """
    if c_make_encoder is None or encoder.indent is not None:
        return encoder.encode
    encode_string = encode_basestring_ascii if encoder.ensure_ascii else encode_basestring
    fast = c_make_encoder(None, encoder.default, encode_string, None, encoder.key_separator,
                          encoder.item_separator, encoder.sort_keys, encoder.skipkeys, encoder.allow_nan)
    return lambda obj: "".join(fast(obj, 0))


#: :func:`dumps` of a value parsed from JSON text (plain dicts, lists, strings, numbers; no cycles): the same text,
#: faster (the canonical-form check of every ledger line, :mod:`dpaudit.ledger`)
dumps_parsed = acyclic_encode(_ENCODER)


def encode(obj: Any) -> bytes:
    """Canonical JSON as UTF-8 bytes."""
    return dumps(obj).encode("utf-8")


#: 64 lowercase hex digits: how every SHA-256 digest (record hashes, fingerprints, log roots) is written
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


MAX_OBJECT_BYTES = 16 * 2**20
"""The largest JSON object file :func:`read_object` reads (a certificate is a few kB; a trust store, a head and a
store id less)."""

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects :func:`loads_object` accepts (our evidence nests fewer than 10 levels);
deeper input is refused before it is parsed, so it can never raise ``RecursionError``."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """The deepest bracket nesting of JSON text, string literals skipped (linear time, no recursion)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _opening_brackets(text: str) -> int:
    """How many opening brackets JSON text holds, in strings or not: a bound on its nesting depth."""
    return text.count("[") + text.count("{")


def depth_above(text: str, limit: int) -> int | None:
    """The nesting of JSON text where it is deeper than ``limit``, else None: the text's count of opening brackets
    bounds its depth, so the exact scan (:func:`json_depth`) runs only on text with more than ``limit`` of them."""
    if _opening_brackets(text) <= limit:
        return None
    depth = json_depth(text)
    return depth if depth > limit else None


def fast_loads(text: str) -> Any:
    """``text`` parsed by orjson (a C parser, faster than json's), or None where it refuses the text. Only a parse
    whose canonical re-encoding (:data:`dumps_parsed`, json's own encoder) is ``text`` may be used: then ``text`` is
    json's canonical encoding of that value, which json's parser reads back as the very same value (a float's ``repr``
    round-trips exactly), so the result is json's parse of ``text``. Where orjson parses differently, refuses what
    json accepts (integers beyond 64 bits, escaped lone surrogates) or accepts what it refuses, the re-encoding
    differs or the parse is None, and the caller parses with json: what is accepted, and each error, are json's (the
    ledger reader, :mod:`dpaudit.ledger`, and its line templates, :mod:`dpaudit.line_template`)."""
    if _opening_brackets(text) > MAX_DEPTH:
        # may nest deeper than json reaches at some recursion depth while orjson (limit 1024) does not: such text
        # goes to json alone, so text json cannot read is refused as before, never accepted to fail later
        return None
    try:
        return orjson.loads(text)
    except ValueError:  # orjson.JSONDecodeError, and anything else it refuses
        return None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key!r} (two parsers could read two different values)")
        obj[key] = value
    return obj


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"non-finite number {text[:40]} (overflows to infinity)")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} (not JSON)")


def loads_object(text: str, where: str, error: type[Exception]) -> dict[str, Any]:
    """Parse JSON text that must hold one object, strictly: the single parser for JSON evidence.

    Refused, each with a named reason: nesting deeper than :data:`MAX_DEPTH`, a duplicate key in any object,
    ``NaN`` / ``Infinity`` or a number that overflows to infinity (``1e400``), a huge integer, and anything but an
    object at the top.

    Args:
        text: the JSON text.
        where: what the text is (a file name, a line), for messages.
        error: the exception type to raise.

    Raises:
        error: the text is refused; the message names ``where`` and the reason.
    """
    depth = depth_above(text, MAX_DEPTH)
    if depth is not None:
        raise error(f"{where}: nested deeper than {MAX_DEPTH} levels ({depth})")
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_float=_finite_float,
                          parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise error(f"{where}: not strict JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise error(f"{where} must hold a JSON object, got {type(data).__name__}")
    return data


def read_object(path: Path, error: type[Exception], limit: int = MAX_OBJECT_BYTES) -> dict[str, Any]:
    """Read a JSON file that must hold one object, through :func:`dpaudit.files.read_regular` (no symlink, a
    regular file, at most ``limit`` bytes) and :func:`loads_object` (strict JSON); anything else raises ``error``
    naming the file and the reason."""
    data = read_regular(path, limit, error)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text: {exc}") from exc
    return loads_object(text, str(path), error)
