"""Domain checks for privacy parameters, shared by mechanisms, events and the session.

Each check raises :class:`~dpaudit.errors.InvalidParameter` with a message that names the parameter and
the value, so that bad input never reaches a sampler or an accountant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from dpaudit.errors import InvalidParameter


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidParameter(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if math.isnan(value):
        raise InvalidParameter(f"{name} must not be NaN")
    return value


def check_finite(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite real number (for public values such as a threshold)."""
    v = _real(name, value)
    if math.isinf(v):
        raise InvalidParameter(f"{name} must be finite, got {value!r}")
    return v


def check_label(value: object) -> str:
    """A public description must be a string."""
    if not isinstance(value, str):
        raise InvalidParameter(f"label must be a string, got {type(value).__name__}")
    return value


def check_positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float if it is a finite (or, if allowed, infinite) number > 0."""
    v = _real(name, value)
    if v <= 0 or (math.isinf(v) and not allow_inf):
        raise InvalidParameter(f"{name} must be a finite number > 0, got {value!r}")
    return v


def check_nonnegative(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite number ≥ 0."""
    v = _real(name, value)
    if v < 0 or math.isinf(v):
        raise InvalidParameter(f"{name} must be a finite number >= 0, got {value!r}")
    return v


def check_epsilon(value: object, name: str = "epsilon") -> float:
    """ε must be finite and > 0."""
    return check_positive(name, value)


def check_delta(value: object, name: str = "delta", *, allow_zero: bool = True) -> float:
    """δ must lie in [0, 1) (or (0, 1) when ``allow_zero`` is false)."""
    v = _real(name, value)
    if v < 0 or v >= 1 or (v == 0 and not allow_zero):
        bounds = "[0, 1)" if allow_zero else "(0, 1)"
        raise InvalidParameter(f"{name} must lie in {bounds}, got {value!r}")
    return v


def check_probability(name: str, value: object) -> float:
    """A sampling rate: 0 < q ≤ 1."""
    v = _real(name, value)
    if not 0 < v <= 1:
        raise InvalidParameter(f"{name} must lie in (0, 1], got {value!r}")
    return v


def check_count(name: str, value: object, *, minimum: int = 1) -> int:
    """A whole number ≥ ``minimum`` (booleans refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParameter(f"{name} must be a whole number, got {value!r}")
    if value < minimum:
        raise InvalidParameter(f"{name} must be >= {minimum}, got {value!r}")
    return value


def check_known_keys(config: object, known: Iterable[str], owner: str) -> None:
    """A configuration must be a mapping whose keys are all ``known``: a typo must not fall back to a default."""
    if not isinstance(config, Mapping):
        raise InvalidParameter(f"{owner} config must be a mapping, got {type(config).__name__}")
    known = set(known)
    unknown = sorted(str(k) for k in set(config) - known)
    if unknown:
        raise InvalidParameter(f"unknown {owner} config keys {unknown}; known: {sorted(known)}")
