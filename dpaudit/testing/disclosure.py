"""Whether a number is published: for testing that a size stated private never leaves a run exactly.

A plugin (or program) that states its protected set's size private (``Plugin.dataset_size_public = False``,
docs/data.md) must not publish it except through a charged mechanism. A test runs it on a data set of a distinctive
size n and asks :func:`mentions_number` of everything the run published: printed lines, the ledger's ``info``
bodies, the MLflow run's parameters, tags and non-release metrics, the returned results.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any


def _leaves(value: Any) -> Iterator[Any]:
    """Every scalar of a JSON-like value, mapping keys included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    elif value is not None:
        yield value


def mentions_number(value: Any, n: int) -> bool:
    """Whether the whole number ``n`` appears in ``value``: as a number equal to it (``32561`` or ``32561.0``), or
    written as a whole number inside a string (``"n = 32561 records"``; not ``"a32561"`` or ``"32561.5"``).

    Args:
        value: a JSON-like value (mappings, lists, tuples, strings, numbers).
        n: the number to look for.
    """
    pattern = re.compile(rf"(?<![\w.]){n}(?!\w|\.\d)")
    return any(pattern.search(leaf) is not None if isinstance(leaf, str)
               else not isinstance(leaf, bool) and isinstance(leaf, (int, float)) and leaf == n
               for leaf in _leaves(value))
