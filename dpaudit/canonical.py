"""Canonical JSON: one byte string per value, so that hashes and signatures are reproducible.

Keys are sorted, separators carry no spaces, text is UTF-8, and NaN / infinity are refused (they are not JSON
and would make a ledger unverifiable). Python's float ``repr`` round-trips exactly, so a float written here reads
back as the same float.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def dumps(obj: Any) -> str:
    """Serialise ``obj`` as canonical JSON text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(obj: Any) -> bytes:
    """Canonical JSON as UTF-8 bytes."""
    return dumps(obj).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()
