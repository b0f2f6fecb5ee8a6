"""The mechanism table: each mechanism module registers its event type with its coverage rule and, for a pure-DP
mechanism, its privacy map.

A mechanism module ends with one :func:`register_mechanism` call; :mod:`dpaudit.mechanisms` imports every module of
the package when it is first imported, so the table is complete before any accountant or the coverage rules read
it. The accountants (:mod:`dpaudit.accounting.charges`), the coverage rules (:mod:`dpaudit.coverage`), the budget
filter and ``dpaudit verify`` look events up here, so adding a pure-DP mechanism is one new module plus its event
(docs/design.md, item 2).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpaudit.mechanisms.outputs import Coverage


@dataclass(frozen=True)
class MechanismEntry:
    """What the kernel needs to know of one event type.

    Attributes:
        event_type: the event class (its subclasses match too, nearest first).
        coverage: what one charge of the event covers (:mod:`dpaudit.coverage`).
        pure_epsilon: the privacy map of a pure-DP mechanism (the ε its recorded noise provides); None for the
            others, whose accounting is specified in :mod:`dpaudit.accounting.charges`.
    """

    event_type: type
    coverage: Callable[[Any], Coverage]
    pure_epsilon: Callable[[Any], float] | None = None


_ENTRIES: dict[type, MechanismEntry] = {}
_LOCK = threading.Lock()


def register_mechanism(event_type: type, *, coverage: Callable[[Any], Coverage],
                       pure_epsilon: Callable[[Any], float] | None = None) -> MechanismEntry:
    """Register ``event_type``'s coverage rule and (pure DP) privacy map; registering one type twice is refused.

    Raises:
        ValueError: ``event_type`` is already registered with other functions (two modules claiming one event).
    """
    entry = MechanismEntry(event_type, coverage, pure_epsilon)
    with _LOCK:
        existing = _ENTRIES.get(event_type)
        if existing is not None and existing != entry:
            raise ValueError(f"{event_type.__name__} is already registered by {existing.coverage.__module__}")
        _ENTRIES[event_type] = entry
    return entry


def entry_for(event: Any) -> MechanismEntry | None:
    """The entry of ``event``'s type or of its nearest registered base class; None when there is none."""
    for cls in type(event).__mro__:
        entry = _ENTRIES.get(cls)
        if entry is not None:
            return entry
    return None


def registered_types() -> tuple[type, ...]:
    """Every registered event type."""
    with _LOCK:
        return tuple(_ENTRIES)
