"""Canonical JSON: one byte string per value, so that hashes and signatures are reproducible.

Keys are sorted, separators carry no spaces, text is UTF-8, and NaN / infinity are refused (they are not JSON
and would make a ledger unverifiable). Python's float ``repr`` round-trips exactly, so a float written here reads
back as the same float.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
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


def read_object(path: Path, error: type[Exception]) -> dict[str, Any]:
    """Read a JSON file that must hold one object; anything else raises ``error`` naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise error(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise error(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data
