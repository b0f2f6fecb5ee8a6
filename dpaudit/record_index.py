"""The records of a ledger of given types, each selection made once per record list within :func:`records_indexed`.

``verify`` runs a dozen checks over one list of records, and most of them read only a few record types (the ``info``
records, which a ledger of 10⁵ charges and releases holds a handful of). Each check used to walk every record to
find its types; after a long run's records are spread over the heap, each such walk costs tens of milliseconds
(docs/performance.md, "Verify"). :func:`of_type` sorts a list's records by type in one walk and hands the same
selection to every later check that asks for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

from dpaudit.ledger import Record

#: per record list (by id): the list itself (kept alive), its records by type, and the selections of several types
_Indexed = dict[int, tuple[Sequence[Record], dict[str, list[Record]], dict[frozenset[str], list[Record]]]]
_KEPT: ContextVar[_Indexed | None] = ContextVar("dpaudit_records_indexed", default=None)


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
    the records of each type are found in one walk of the list, and each selection of several types in one more;
    the caller must not change the returned list)."""
    kept = _KEPT.get()
    if kept is None:
        wanted = frozenset(types)
        return [r for r in records if r.type in wanted]
    entry = kept.get(id(records))
    if entry is None:
        by_type: dict[str, list[Record]] = {}
        for r in records:
            found = by_type.get(r.type)
            if found is None:
                found = by_type[r.type] = []
            found.append(r)
        entry = kept[id(records)] = (records, by_type, {})
    _, by_type, several = entry
    if len(types) == 1:
        return by_type.get(types[0], [])
    wanted = frozenset(types)
    selected = several.get(wanted)
    if selected is None:
        selected = several[wanted] = [r for r in records if r.type in wanted]
    return selected
