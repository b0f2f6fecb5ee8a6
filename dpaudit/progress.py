"""Progress bars for long work (training epochs, verifying large ledgers), on stderr and only for a terminal.

Set ``DPAUDIT_PROGRESS=0`` to silence them, ``=1`` to force them (e.g. in a CI log).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def _enabled() -> bool:
    setting = os.environ.get("DPAUDIT_PROGRESS")
    if setting is not None:
        return setting not in ("0", "", "false", "no")
    return sys.stderr.isatty()


def progress(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """``items`` wrapped in a tqdm bar on stderr when progress display is on, else ``items`` unchanged."""
    if not _enabled():
        yield from items
        return
    yield from tqdm(items, desc=description, total=total, file=sys.stderr, leave=False, dynamic_ncols=True)
