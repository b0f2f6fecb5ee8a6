"""The catalog of named data sets: the only place a plugin's data comes from (through ``Session.data``).

A session declares by name, when it opens, which data sets it protects and which it uses as public
(``Session(protected=..., public=...)``); the certificate lists both. ``Session.data(name, **parameters)`` looks the
name up here, refuses one the session did not declare, loads it and records the access (docs/data.md, "Data through
the session"). Each entry names the keyword parameters its loader takes (public row limits, fixed before any data
is read); anything else is refused.

The built-in entries are the Adult splits the plugins use. Every split is a function of each record's own id or
position in the public file, so a neighbouring training set keeps the same selection of the shared records
(:func:`dpaudit.data.adult.load_adult`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.data.adult import TEST_NAME, TRAIN_NAME, load_adult
from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count

VALIDATION_NAME = f"{TEST_NAME} (first half: public validation)"
"""The first half of the (first ``rows``) public Adult test records: the tuning plugins' validation set."""

FINAL_TEST_NAME = f"{TEST_NAME} (second half: public final test)"
"""The second half of the (first ``rows``) public Adult test records: the tuning plugins' final test set."""

SLICE_VALIDATION_NAME = "adult-validation (protected)"
"""Training records with id in [``offset``, ``offset + rows``): kusner-bo's protected validation set."""

SLICE_TRAINING_NAME = "adult-train-public (training part of kusner-bo, public)"
"""Training records with id below ``rows``: kusner-bo's public training set."""


@dataclass(frozen=True)
class DataSet:
    """One loaded data set. Arrays are read-only.

    Attributes:
        name: the catalog name it was loaded under.
        X: float32 (n, d) features, or (n, ...) for a torch data set's multi-dimensional items.
        y: float32 (n,) targets, or None for a set declared without a target.
        record_ids: int64 (n,) stable per-record ids (for keyed partitions), or None where the set has none.
        feature_names: the d column names (empty where X has more than two dimensions).
        classes: the declared (public) number of classes of a classification target (labels 0, ..., classes - 1),
            or None (a regression or binary 0/1 target used as floats).
    """

    name: str
    X: np.ndarray
    y: np.ndarray | None
    record_ids: np.ndarray | None
    feature_names: tuple[str, ...]
    classes: int | None = None

    def __post_init__(self) -> None:
        for field in ("X", "y", "record_ids"):
            array = getattr(self, field)
            if array is not None and array.flags.writeable:
                view = array.view()  # a selection by mask is a fresh, writable copy: hand out a read-only view
                view.setflags(write=False)
                object.__setattr__(self, field, view)

    def __len__(self) -> int:
        return len(self.X)

    def tensors(self) -> tuple[Any, ...]:
        """``(X, y)`` as fresh torch tensors (``(X,)`` without a target), e.g. for a ``TensorDataset``.

        X is float32; y is int64 when the set declares ``classes`` (what ``CrossEntropyLoss`` takes), else float32.
        """
        import torch  # imported here: loading data needs no torch

        X = torch.from_numpy(np.array(self.X, dtype=np.float32))  # a copy: the arrays are read-only
        if self.y is None:
            return (X,)
        return X, torch.from_numpy(np.array(self.y, dtype=np.int64 if self.classes is not None else np.float32))


def as_torch(data: DataSet) -> Any:
    """``data`` as a ``torch.utils.data.TensorDataset`` (:meth:`DataSet.tensors`), to wrap in a DataLoader."""
    from torch.utils.data import TensorDataset

    return TensorDataset(*data.tensors())


@dataclass(frozen=True)
class CatalogEntry:
    """A named data set and how to load it.

    Attributes:
        name: the name sessions declare (``protected=`` / ``public=``) and plugins ask for.
        parameters: the keyword parameters ``load`` accepts (each optional; all public).
        load: ``load(**parameters) -> DataSet``.
        summary: one line for the documentation.
    """

    name: str
    parameters: tuple[str, ...]
    load: Callable[..., DataSet]
    summary: str


_ENTRIES: dict[str, CatalogEntry] = {}
_LOCK = threading.Lock()


def register_data_set(entry: CatalogEntry) -> CatalogEntry:
    """Add ``entry`` to the catalog (a name registers once; registering the same entry again is a no-op).

    Raises:
        InvalidParameter: another entry already has this name.
    """
    with _LOCK:
        known = _ENTRIES.get(entry.name)
        if known is not None and known != entry:
            raise InvalidParameter(f"a data set named {entry.name!r} is already in the catalog")
        _ENTRIES[entry.name] = entry
    return entry


def catalog_entry(name: str) -> CatalogEntry:
    """The entry named ``name``.

    Raises:
        InvalidParameter: no such entry.
    """
    with _LOCK:
        entry = _ENTRIES.get(name)
        known = sorted(_ENTRIES)
    if entry is None:
        raise InvalidParameter(f"no data set named {name!r} in the catalog (known: {known})")
    return entry


def known_names() -> frozenset[str]:
    """The names in the catalog."""
    with _LOCK:
        return frozenset(_ENTRIES)


def load(name: str, parameters: Mapping[str, Any]) -> DataSet:
    """Load the data set ``name`` with ``parameters`` (no session, no record: callers outside a plugin only).

    Raises:
        InvalidParameter: an unknown name or parameter, or a bad parameter value.
    """
    entry = catalog_entry(name)
    unknown = sorted(set(parameters) - set(entry.parameters))
    if unknown:
        raise InvalidParameter(f"data set {name!r} takes the parameters {list(entry.parameters)}, got {unknown}")
    return entry.load(**parameters)


def _rows(name: str, value: int | None, minimum: int = 1) -> int | None:
    return None if value is None else check_count(name, value, minimum=minimum)


def _adult_train(rows: int | None = None) -> DataSet:
    data = load_adult(train_rows=_rows("rows", rows))
    return DataSet(TRAIN_NAME, data.X_train, data.y_train, data.record_ids, data.feature_names)


def _adult_test(rows: int | None = None) -> DataSet:
    data = load_adult(train_rows=1, test_rows=_rows("rows", rows))
    return DataSet(TEST_NAME, data.X_test, data.y_test, None, data.feature_names)


def _test_half(second: bool, rows: int | None = None) -> DataSet:
    whole = _adult_test(_rows("rows", rows, minimum=2))
    half = len(whole) // 2
    if half == 0:
        raise InvalidParameter("need at least 2 public evaluation records to split into validation and test")
    part = slice(half, None) if second else slice(None, half)
    return DataSet(FINAL_TEST_NAME if second else VALIDATION_NAME, whole.X[part], whole.y[part], None,
                   whole.feature_names)


def _id_slice(name: str, start: int, stop: int) -> DataSet:
    data = load_adult(train_rows=stop)
    keep = data.record_ids >= start
    if not keep.any():
        raise InvalidParameter(f"{name}: no training record has an id in [{start}, {stop})")
    return DataSet(name, data.X_train[keep], data.y_train[keep], data.record_ids[keep], data.feature_names)


def _slice_validation(offset: int = 0, rows: int = 1) -> DataSet:
    start = check_count("offset", offset, minimum=0)
    return _id_slice(SLICE_VALIDATION_NAME, start, start + check_count("rows", rows))


def _slice_training(rows: int = 1) -> DataSet:
    return _id_slice(SLICE_TRAINING_NAME, 0, check_count("rows", rows))


for _entry in (
    CatalogEntry(TRAIN_NAME, ("rows",), _adult_train,
                 "Adult adult.data, the records with id below rows (all 32 561 without rows)"),
    CatalogEntry(TEST_NAME, ("rows",), _adult_test, "Adult adult.test, the first rows records (all 16 281)"),
    CatalogEntry(VALIDATION_NAME, ("rows",), lambda rows=None: _test_half(False, rows),
                 "the first half of the first rows adult.test records"),
    CatalogEntry(FINAL_TEST_NAME, ("rows",), lambda rows=None: _test_half(True, rows),
                 "the second half of the first rows adult.test records"),
    CatalogEntry(SLICE_VALIDATION_NAME, ("offset", "rows"), _slice_validation,
                 "Adult adult.data, the records with id in [offset, offset + rows)"),
    CatalogEntry(SLICE_TRAINING_NAME, ("rows",), _slice_training,
                 "Adult adult.data, the records with id below rows"),
):
    register_data_set(_entry)
