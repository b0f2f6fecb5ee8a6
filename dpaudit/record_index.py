"""The records of a ledger of given types, each selection made once per record list within :func:`records_indexed`.

``verify`` runs a dozen checks over one list of records, and most of them read only a few record types (the ``info``
records, which a ledger of 10⁵ charges and releases holds a handful of). Each check used to walk every record to
find its types; after a long run's records are spread over the heap, each such walk costs tens of milliseconds
(docs/performance.md, "Verify"). :func:`of_type` sorts a list's records by type in one walk and hands the same
selection to every later check that asks for it.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

from dpaudit.ledger import Record

#: per record list (by id): the list itself (kept alive), the positions of its records by type, its records by type,
#: and the selections of several types
_Entry = tuple[Sequence[Record], dict[str, list[int]], dict[str, list[Record]], dict[frozenset[str], list[Record]]]
_KEPT: ContextVar[dict[int, _Entry] | None] = ContextVar("dpaudit_records_indexed", default=None)


@contextlib.contextmanager
def records_indexed() -> Iterator[None]:
    """Within the block (in this thread), :func:`of_type` selects from each record list once per set of types.

    Keyed by the list's identity, so it costs no hashing of records; the kept entries hold the lists, so no identity
    is reused meanwhile, and they are dropped when the block ends. Sound for lists that do not change within the
    block (``verify`` reads its records once and never changes them).
    """
    token = _KEPT.set({})
    try:
        yield
    finally:
        _KEPT.reset(token)


def of_type(records: Sequence[Record], *types: str) -> list[Record]:
    """The records of ``records`` whose type is one of ``types``, in their order (within :func:`records_indexed`,
    the list is walked once, and a selection of several types merges their positions without another walk; the
    caller must not change the returned list)."""
    kept = _KEPT.get()
    if kept is None:
        wanted = frozenset(types)
        return [r for r in records if r.type in wanted]
    entry = kept.get(id(records))
    if entry is None:
        where: dict[str, list[int]] = {}
        by_type: dict[str, list[Record]] = {}
        for i, r in enumerate(records):
            positions = where.get(r.type)
            if positions is None:
                positions = where[r.type] = []
                by_type[r.type] = []
            positions.append(i)
            by_type[r.type].append(r)
        entry = kept[id(records)] = (records, where, by_type, {})
    _, where, by_type, several = entry
    if len(types) == 1:
        return by_type.get(types[0], [])
    wanted = frozenset(types)
    selected = several.get(wanted)
    if selected is None:
        positions = sorted(itertools.chain.from_iterable(where.get(t, ()) for t in wanted))  # (sorted runs: merged)
        selected = several[wanted] = [records[i] for i in positions]
    return selected
