"""Brute-force sensitivity: the largest change of a query between small neighbouring data sets.

A sensitivity formula (:func:`dpaudit.sensitivity.register_formula`) claims sup ‖f(D) − f(D')‖ ≤ Δ over all
neighbouring D, D' (Dwork & Roth 2014, Def. 3.1). Over a finite set of candidate records and small data sets the
supremum can be computed exactly by enumeration; a formula whose value is below it is wrong, and one far above it
on a domain that contains the extreme records is loose. :func:`max_neighbour_change` does the enumeration, for both
neighbouring relations:

* ``add_remove``: D' = D ∪ {x} (removal is the same pair read the other way);
* ``replace_one``: D' = D with one record replaced by x, |D'| = |D|.

Data sets are multisets (the query must not depend on the order of records). The number of pairs grows as
``len(records) ** max(sizes)``: keep both small (six records, sizes up to 3, is a few thousand pairs).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import Neighbouring, Norm


@dataclass(frozen=True)
class NeighbourChange:
    """The largest change found, and a pair of neighbouring data sets that attains it.

    Attributes:
        value: max ‖f(D) − f(D')‖ over the enumerated pairs.
        data: D of the maximising pair.
        neighbour: D' of the maximising pair.
    """

    value: float
    data: tuple[Any, ...]
    neighbour: tuple[Any, ...]


def _distance(a: Any, b: Any, norm: Norm) -> float:
    diff = np.atleast_1d(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    if norm is Norm.L2:
        return float(np.linalg.norm(diff))
    if norm is Norm.ABS and diff.size != 1:
        raise InvalidParameter(f"an 'abs' sensitivity is for one-dimensional queries; this one has {diff.size}")
    return float(np.abs(diff).sum())


def _neighbours(data: tuple[Any, ...], records: Sequence[Any], relation: Neighbouring) -> Iterable[tuple[Any, ...]]:
    if relation is Neighbouring.ADD_REMOVE:
        for x in records:
            yield (*data, x)
    else:
        for i, x in itertools.product(range(len(data)), records):
            yield (*data[:i], x, *data[i + 1:])


def max_neighbour_change(query: Callable[[tuple[Any, ...]], Any], records: Sequence[Any],
                         relation: Neighbouring | str, *, sizes: Iterable[int], norm: Norm | str) -> NeighbourChange:
    """max ‖query(D) − query(D')‖ over neighbouring pairs, D a multiset of ``records`` of a size in ``sizes``.

    Args:
        query: a function of a data set (a tuple of records) to a number or a vector; symmetric in its records.
        records: the candidate records (include the extreme ones: values beyond clipping bounds, opposite signs).
        relation: ``add_remove`` (D' = D plus one record) or ``replace_one`` (one record of D replaced).
        sizes: the sizes |D| to enumerate (0 is allowed for add/remove).
        norm: ``abs``, ``l1`` or ``l2``, the norm of the formula under test.

    Returns:
        The largest change and a pair attaining it.

    Raises:
        InvalidParameter: no pair to compare, a non-finite query value, or ``abs`` on a vector query.
    """
    relation, norm = Neighbouring(relation), Norm(norm)
    if not records:
        raise InvalidParameter("max_neighbour_change needs at least one candidate record")
    best: NeighbourChange | None = None
    for size in sorted(set(sizes)):
        for data in itertools.combinations_with_replacement(records, size):
            value = query(data)
            for neighbour in _neighbours(data, records, relation):
                change = _distance(value, query(neighbour), norm)
                if not math.isfinite(change):
                    raise InvalidParameter(f"the query is not finite on {data} or {neighbour}")
                if best is None or change > best.value:
                    best = NeighbourChange(change, data, neighbour)
    if best is None:
        raise InvalidParameter(f"no neighbouring pairs for sizes {sorted(set(sizes))} under {relation.value}")
    return best
