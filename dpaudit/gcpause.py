"""Pausing Python's cyclic garbage collector around short, allocation-heavy work."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def cyclic_gc_paused(*, freeze: bool = False) -> Iterator[None]:
    """Pause Python's cyclic garbage collector (reference counting still frees everything acyclic); usable as a
    decorator too.

    Verification builds a few objects per ledger record and keeps them to the end; each full collection walks all of
    them, which made a quarter of the time of verifying 10⁵ records. The cycles made meanwhile are few and are
    collected once the collector runs again.

    Args:
        freeze: on leaving, first move every object then alive into the collector's permanent generation
            (``gc.freeze``), which no later collection walks. For a process that ends right after, the
            ``dpaudit verify`` and ``dpaudit account`` commands (:func:`dpaudit.cli.program`): importing numpy,
            SciPy and dp_accounting leaves a few hundred thousand long-lived objects, and the collection that
            re-enabling triggers plus the one at interpreter shutdown walked them all, about 0.25 s of those
            commands' CPU time (docs/performance.md). Cyclic garbage made inside is then never collected: only for a
            command that holds no resource whose finalizer matters (they write nothing but stdout).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()
