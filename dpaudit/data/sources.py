"""The user's own data: CSV and Parquet files, NumPy arrays and torch data sets, declared when a session opens.

A :class:`DataSource` describes one data set: its name, its role (``"protected"``: the certificate's guarantee is
about its records; ``"public"``: used without protection, e.g. a test set), where it is, which column is the
record id (or none: the row order), which is the target (or none) and which are the features. The session loads
and checks every source when it opens (``Session(..., data=[...])``), before its ledger exists: a missing file or
column, a non-numeric feature, a NaN, a duplicate id or a label outside the declared classes is refused with one
line, and nothing is written. Record ids are non-negative integers below 2⁵³ (exact in every numeric type a
table holds them in); every value must be finite after conversion to float32 (a 1e300 that float32 would turn into
inf is refused, not stored as inf). Plugins and users then obtain the data only through ``session.data(name)``
(docs/data.md, "Your own data").

No statistic of the data is computed here: values are converted to float32 as they are (any scaling must use public
constants, docs/data.md, "Preprocessing with public constants only").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.data.access import PROTECTED, PUBLIC
from dpaudit.data.catalog import DataSet, known_names
from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count

KINDS = ("csv", "parquet", "arrays", "torch")
"""The kinds of source: a CSV file, a Parquet file, NumPy arrays, a torch map-style ``Dataset``."""


@dataclass(frozen=True)
class DataSource:
    """One declared data set of the user's (build it with :func:`csv`, :func:`parquet`, :func:`arrays`,
    :func:`torch_dataset`).

    Attributes:
        name: the name the session declares (in the certificate) and ``session.data`` takes.
        kind: one of :data:`KINDS`.
        role: ``"protected"`` or ``"public"``.
        path: the file (``csv`` and ``parquet``).
        target: the target column (files), or None for a set without a target.
        id_column: the column of stable integer record ids (files), or None: ids are the row positions 0, 1, ...
        features: the feature columns (files); None: every column but the target and the id.
        classes: the public number of classes of a classification target (labels must be 0, ..., classes - 1),
            or None.
        content: the in-memory data (``arrays``: ``(X, y, record_ids)``; ``torch``: the data set); not compared.
    """

    name: str
    kind: str
    role: str = PROTECTED
    path: str | None = None
    target: str | None = None
    id_column: str | None = None
    features: tuple[str, ...] | None = None
    classes: int | None = None
    content: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidParameter(f"a data source needs a non-empty name, got {self.name!r}")
        if self.kind not in KINDS:
            raise InvalidParameter(f"data source {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.role not in (PROTECTED, PUBLIC):
            raise InvalidParameter(f"data source {self.name!r}: role must be 'protected' or 'public', "
                                   f"got {self.role!r}")
        if self.classes is not None:
            check_count(f"data source {self.name!r}: classes", self.classes, minimum=2)
        if self.features is not None:
            object.__setattr__(self, "features", tuple(self.features))

    def describe(self) -> dict[str, Any]:
        """The public description written with each access (never the data)."""
        body: dict[str, Any] = {"kind": self.kind, "role": self.role, "classes": self.classes}
        if self.path is not None:
            body.update(path=self.path, target=self.target, id_column=self.id_column,
                        features=None if self.features is None else list(self.features))
        return body


def csv(name: str, path: str | Path, *, target: str | None = None, features: Sequence[str] | None = None,
        id_column: str | None = None, role: str = PROTECTED, classes: int | None = None) -> DataSource:
    """A CSV file with a header row (see :class:`DataSource` for the arguments)."""
    return DataSource(name, "csv", role, str(path), target, id_column, _names(features), classes)


def parquet(name: str, path: str | Path, *, target: str | None = None, features: Sequence[str] | None = None,
            id_column: str | None = None, role: str = PROTECTED, classes: int | None = None) -> DataSource:
    """A Parquet file (see :class:`DataSource` for the arguments)."""
    return DataSource(name, "parquet", role, str(path), target, id_column, _names(features), classes)


def arrays(name: str, X: Any, y: Any = None, *, record_ids: Any = None, role: str = PROTECTED,
           classes: int | None = None) -> DataSource:
    """NumPy arrays: features ``X`` (n, ...), targets ``y`` (n,) or None, record ids (n,) or None (row order)."""
    return DataSource(name, "arrays", role, classes=classes, content=(X, y, record_ids))


def torch_dataset(name: str, dataset: Any, *, role: str = PROTECTED, classes: int | None = None) -> DataSource:
    """A map-style torch ``Dataset`` whose item ``i`` is ``(x, y)`` or ``x``; record ids are the indices."""
    return DataSource(name, "torch", role, classes=classes, content=dataset)


def _names(features: Sequence[str] | None) -> tuple[str, ...] | None:
    if features is None:
        return None
    if isinstance(features, str):
        raise InvalidParameter(f"features must be a sequence of column names, got the string {features!r}")
    return tuple(features)


def load_source(source: DataSource) -> DataSet:
    """Read and check ``source``.

    Raises:
        InvalidParameter: a missing file or column, a non-numeric or NaN value in a declared column, duplicate or
            non-integer record ids, a label outside the declared classes, an empty set.
    """
    if not isinstance(source, DataSource):
        raise InvalidParameter(f"data= takes DataSource descriptions (dpaudit.data.csv, ...), got "
                               f"{type(source).__name__}")
    if source.kind in ("csv", "parquet"):
        X, y, ids, names = _from_table(source)
    elif source.kind == "arrays":
        X, y, ids = source.content
        X, y, ids = _array(source, "X", X), None if y is None else _array(source, "y", y), ids
        names = tuple(f"x{i}" for i in range(X.shape[1])) if X.ndim == 2 else ()
    else:
        X, y = _from_torch(source)
        ids, names = None, tuple(f"x{i}" for i in range(X.shape[1])) if X.ndim == 2 else ()
    return _checked(source, X, y, ids, names)


Declared = tuple[tuple[str, ...], tuple[str, ...], dict[str, tuple[DataSource, DataSet]]]


def declare_sources(sources: Iterable[DataSource], protected: Sequence[str], public: Sequence[str]) -> Declared:
    """The session's declaration with ``sources`` added under their roles, and every source loaded and checked.

    Returns:
        ``(protected, public, loaded)``: the names to declare, and name → (source, data set).

    Raises:
        InvalidParameter: a bad source (:func:`load_source`), a name given twice, a name declared in both roles
            (here or in ``protected`` and ``public``) or already in the catalog.
    """
    protected, public = list(protected), list(public)
    both = sorted(set(protected) & set(public))
    if both:  # a set read as protected and stated as public: the certificate would contradict itself
        raise InvalidParameter(f"data set {both[0]!r} is declared both protected and public; pick one role")
    loaded: dict[str, tuple[DataSource, DataSet]] = {}
    for source in sources:
        if not isinstance(source, DataSource):
            raise InvalidParameter(f"data= takes DataSource descriptions (dpaudit.data.csv, ...), got "
                                   f"{type(source).__name__}")
        if source.name in loaded:
            raise InvalidParameter(f"data source {source.name!r} is given twice")
        if source.name in known_names():
            raise InvalidParameter(f"data source {source.name!r} has the name of a catalog data set; rename it")
        mine, other = (protected, public) if source.role == PROTECTED else (public, protected)
        if source.name in other:
            raise InvalidParameter(f"data source {source.name!r} is {source.role} but the session also declares it "
                                   f"{'public' if source.role == PROTECTED else 'protected'}")
        loaded[source.name] = (source, load_source(source))
        if source.name not in mine:
            mine.append(source.name)
    return tuple(protected), tuple(public), loaded


def _from_table(source: DataSource) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, tuple[str, ...]]:
    import pandas as pd  # imported here: only file sources need it

    path = Path(source.path)
    if not path.is_file():
        raise InvalidParameter(f"data source {source.name!r}: no file {path}")
    try:
        frame = pd.read_csv(path) if source.kind == "csv" else pd.read_parquet(path)
        # pandas renames a repeated CSV header ("a", "a" -> "a", "a.1"): read the header as written
        header = list(pd.read_csv(path, header=None, nrows=1, dtype=str).iloc[0]) if source.kind == "csv" else []
    except Exception as exc:  # a parser's message names the problem; any failure to read is the user's input
        raise InvalidParameter(f"data source {source.name!r}: cannot read {path} as {source.kind}: "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    repeated = sorted(str(c) for c, count in Counter(header).items() if count > 1)
    if repeated:
        raise InvalidParameter(f"data source {source.name!r}: column names repeat in {path}: {repeated}")
    columns = [str(c) for c in frame.columns]
    frame.columns = columns
    special = [c for c in (source.target, source.id_column) if c is not None]
    features = source.features if source.features is not None else tuple(c for c in columns if c not in special)
    for column in (*special, *features):
        if column not in columns:
            raise InvalidParameter(f"data source {source.name!r}: no column {column!r} in {path} "
                                   f"(columns: {columns})")
    overlap = sorted(set(features) & set(special))
    if overlap or len(set(features)) != len(features) or not features:
        raise InvalidParameter(f"data source {source.name!r}: the features must be distinct, non-empty and exclude "
                               f"the target and the id column (got features {list(features)})")
    for column in (*special, *features):
        if not pd.api.types.is_numeric_dtype(frame[column]):
            raise InvalidParameter(f"data source {source.name!r}: column {column!r} is not numeric "
                                   f"(dtype {frame[column].dtype}); encode it with public constants first")
    X = frame[list(features)].to_numpy(dtype=np.float64)
    y = None if source.target is None else frame[source.target].to_numpy(dtype=np.float64)
    ids = None if source.id_column is None else frame[source.id_column].to_numpy()  # as stored: no float rounding
    return X, y, ids, tuple(features)


def _from_torch(source: DataSource) -> tuple[np.ndarray, np.ndarray | None]:
    dataset = source.content
    try:
        n = len(dataset)
        items = [dataset[i] for i in range(n)]
    except Exception as exc:  # the user's data set raised: its message is theirs, one line of it
        raise InvalidParameter(f"data source {source.name!r}: not a map-style data set with len() and [i]: "
                               f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    if n == 0:
        raise InvalidParameter(f"data source {source.name!r} has no records")
    pairs = [isinstance(item, (tuple, list)) and len(item) == 2 for item in items]
    if any(pairs) and not all(pairs):
        raise InvalidParameter(f"data source {source.name!r}: items must all be (x, y) pairs or all be x")
    xs = [item[0] for item in items] if pairs[0] else items
    try:
        X = np.stack([_numeric(x) for x in xs])
        y = np.array([_numeric(item[1]) for item in items], dtype=np.float64) if pairs[0] else None
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"data source {source.name!r}: items are not numeric arrays of one shape "
                               f"({exc})") from None
    if y is not None and y.ndim != 1:
        raise InvalidParameter(f"data source {source.name!r}: each target must be a scalar, got shape "
                               f"{y.shape[1:]}")
    return X, y


def _numeric(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if np.iscomplexobj(value):  # float64 conversion would drop the imaginary part with only a warning
        raise TypeError("complex values")
    return np.asarray(value, dtype=np.float64)


def _array(source: DataSource, what: str, value: Any) -> np.ndarray:
    try:
        return _numeric(value)
    except (TypeError, ValueError):
        raise InvalidParameter(f"data source {source.name!r}: {what} is not numeric") from None


def _checked(source: DataSource, X: np.ndarray, y: np.ndarray | None, ids: Any,
             names: tuple[str, ...]) -> DataSet:
    what = f"data source {source.name!r}"
    if X.ndim < 2 or len(X) == 0:
        raise InvalidParameter(f"{what}: features must have shape (n, ...) with n ≥ 1, got {X.shape}")
    n = len(X)
    if y is not None and y.shape != (n,):
        raise InvalidParameter(f"{what}: the target must have shape ({n},), got {y.shape}")
    with np.errstate(over="ignore"):  # an overflow to inf is refused just below
        X, y = X.astype(np.float32), None if y is None else y.astype(np.float32)  # what the model will see
    for label, values in (("features", X), ("target", y)):
        if values is not None and not np.isfinite(values).all():
            raise InvalidParameter(f"{what}: the {label} hold NaN or infinite values (or values beyond float32's "
                                   "range); impute or rescale them with a public rule first")
    if source.classes is not None:
        if y is None:
            raise InvalidParameter(f"{what}: classes={source.classes} needs a target")
        if not (np.all(y == np.round(y)) and y.min() >= 0 and y.max() < source.classes):
            raise InvalidParameter(f"{what}: labels must be the integers 0, ..., {source.classes - 1} "
                                   f"(classes={source.classes})")
    record_ids = np.arange(n, dtype=np.int64) if ids is None else _ids(what, ids, n)
    return DataSet(source.name, X, y, record_ids, names, source.classes)


#: record ids lie in [0, MAX_RECORD_ID]: exact as float64 too, so a CSV column read as floats cannot merge two ids
MAX_RECORD_ID = 2**53


def _ids(what: str, ids: Any, n: int) -> np.ndarray:
    values = np.asarray(ids)
    if values.shape != (n,) or values.dtype == bool or not np.issubdtype(values.dtype, np.number) \
            or np.iscomplexobj(values) or not np.isfinite(values).all() or not np.all(values == np.round(values)):
        raise InvalidParameter(f"{what}: record ids must be {n} finite integers")
    if n and not (values.min() >= 0 and int(values.max()) <= MAX_RECORD_ID):  # int(): no uint64/int64 mixing
        raise InvalidParameter(f"{what}: record ids must lie in [0, 2**53], got {values.min()} to {values.max()}")
    values = values.astype(np.int64)
    if len(np.unique(values)) != n:
        raise InvalidParameter(f"{what}: record ids must be distinct")
    return values
