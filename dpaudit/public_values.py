"""The confidential-key check: raw, data-dependent values (true scores, unnoised utilities) never enter the ledger.

The ledger is what auditors receive, and it is attached to the MLflow run, so the check runs where a body is
born: :class:`~dpaudit.session.Session` refuses a release, info or public-metrics body holding a confidential key
*before* the ledger append, whatever the mirror setting; the MLflow mirror checks every record again (with any
extra keys it was given); ``dpaudit verify`` scans every body of an exported ledger. A body is **refused**, not
stripped: a raw value there is a broken contract, and stripping it would hide the leak rather than stop it. Raw
values belong in the separate, marked confidential log (``Session(confidential=True).log_confidential``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dpaudit.errors import InvalidParameter

CONFIDENTIAL_KEYS: frozenset[str] = frozenset({
    "true_value", "true_values", "true_score", "true_scores", "true_utility", "true_utilities",
    "raw", "raw_value", "raw_values", "unnoised", "unnoised_value", "unnoised_values",
    "exact_value", "exact_values", "private_value", "private_values",
})
"""Keys (compared case-insensitively) that mark raw, data-dependent values; a body holding one is refused."""

_SCALARS = (str, int, float, bool, type(None))


def find_confidential(value: Any, keys: frozenset[str] = CONFIDENTIAL_KEYS) -> str | None:
    """The path (e.g. ``body.output.true_value``) of the first mapping key in ``value``, searched recursively
    through mappings, lists and tuples, that is listed in ``keys`` (compared in lower case); None if there is none.
    """
    found = _find(value, keys)
    if found is None:
        return None
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in reversed(found)).lstrip(".")


def _find(value: Any, keys: frozenset[str]) -> list[str | int] | None:
    """Reversed path of the first confidential key (hot path of every record: exact type checks first)."""
    if type(value) is dict or (type(value) not in _SCALARS and isinstance(value, Mapping)):
        for k, v in value.items():
            name = k if type(k) is str else str(k)
            if name.lower() in keys:
                return [name]
            if type(v) not in _SCALARS:
                found = _find(v, keys)
                if found is not None:
                    found.append(name)
                    return found
    elif type(value) in (list, tuple):
        for i, v in enumerate(value):
            if type(v) not in _SCALARS:
                found = _find(v, keys)
                if found is not None:
                    found.append(i)
                    return found
    return None


def confidential_key_set(extra: Iterable[str] = ()) -> frozenset[str]:
    """:data:`CONFIDENTIAL_KEYS` plus ``extra`` (lower-cased)."""
    return CONFIDENTIAL_KEYS | frozenset(str(k).lower() for k in extra)


def check_public(value: Any, keys: frozenset[str], what: str) -> None:
    """Refuse ``value`` if it holds a confidential key.

    Raises:
        InvalidParameter: a key listed in ``keys`` occurs in ``value``.
    """
    found = find_confidential(value, keys)
    if found is not None:
        raise InvalidParameter(
            f"{what} holds the confidential key {found!r}: raw, data-dependent values never go into the ledger or "
            "the MLflow run (log them with Session.log_confidential, a separate, marked experiment)"
        )
