"""UCI Adult in the construction of the libsvm ``a1a`` set (Platt 1998), which DPareto's Adult experiments use
(Avent et al. 2020, Sec. 4.1: 123 binary features), built offline from the same ``adult.data`` the kernel ships.

The libsvm "a" sets turn each of the 14 attributes into binary indicators: the 8 categorical ones one-hot over their
``adult.names`` categories (99 columns) and the 6 continuous ones into quantile bins, 5 for age, fnlwgt,
education-num and hours-per-week, 2 for capital-gain and capital-loss (zero / positive), 24 columns: 123 in all, in the
attribute order of ``adult.data``. ``a1a`` holds the first 1,605 records of ``adult.data`` and ``a1a.t`` the other
30,956; DPareto trains on the 30,956 and evaluates on the 1,605 (the issue's "30,956 train / 1,605 test").

Comparable, not identical (docs/data.md, "Adult in the a1a construction"):

* **Bin boundaries are public constants**: the quintiles of the *public* ``adult.test`` file (written below; a test
  recomputes them), never of ``adult.data``, whose records are protected: bins fitted on the training data would
  make every row depend on the other records (the leak ``dpaudit/data/adult.py`` avoids). Platt's boundaries were
  computed on the data; ours differ where the two files' quintiles differ (age: 51 here, 50 in ``adult.data``) and
  in ties (hours-per-week has quintiles 35, 40, 40, 48: a bin is [lower, upper), so 40 falls in the 4th bin and the
  3rd is empty, where ``a1a`` puts 40 in its 3rd; education-num's 2nd bin is empty for the same reason).
* A missing value (``?``) encodes as all zeros for its attribute, as in ``a1a`` (no indicator set).
* The split is by record id (line number): ids below 1,605 form the public evaluation set, the rest the protected
  training set. Whether a record is in one or the other depends on its own id only, so adding or removing a record
  changes one row of one set and the selection costs no privacy. Using 1,605 records of ``adult.data`` as
  **public** evaluation data is the paper's threat model (the evaluation set is public); a session that uses them
  declares them public and protects only ``adult-a1a-train``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpaudit.data.adult import (
    CATEGORIES,
    COLUMNS,
    MISSING,
    NEGATIVE_LABELS,
    POSITIVE_LABELS,
    data_dir,
)
from dpaudit.data.catalog import CatalogEntry, DataSet, register_data_set
from dpaudit.errors import DPAuditError, InvalidParameter
from dpaudit.validation import check_count

if TYPE_CHECKING:
    import pandas as pd

TRAIN_NAME = "adult-a1a-train"
"""The protected training set: ``adult.data`` records with id ≥ 1,605 (30,956 records, ``a1a.t``)."""

TEST_NAME = "adult-a1a-test (public)"
"""The public evaluation set: ``adult.data`` records with id < 1,605 (``a1a``)."""

EVAL_NAME = "adult-a1a-test (protected)"
"""The same records as :data:`TEST_NAME`, declared as protected evaluation data (the dpareto private front)."""

TEST_IDS = 1605
N_FEATURES = 123


@dataclass(frozen=True)
class Bins:
    """A continuous attribute cut into bins [b_k, b_{k+1}) at public boundaries b_1 ≤ ... (b_0 = −∞, last = +∞).

    Attributes:
        column: the attribute.
        boundaries: the inner boundaries; ``len(boundaries) + 1`` indicator columns.
        source: where they come from.
    """

    column: str
    boundaries: tuple[float, ...]
    source: str


_QUINTILES = "quintiles (numpy linear interpolation) of the 16,281 records of the public adult.test"
BINS: dict[str, Bins] = {
    "age": Bins("age", (26.0, 33.0, 41.0, 51.0), _QUINTILES),
    "fnlwgt": Bins("fnlwgt", (105381.0, 156916.0, 196252.0, 260761.0), _QUINTILES),
    "education-num": Bins("education-num", (9.0, 9.0, 10.0, 13.0), _QUINTILES),
    "capital-gain": Bins("capital-gain", (1.0,), "zero / positive (integer dollars), as in a1a"),
    "capital-loss": Bins("capital-loss", (1.0,), "zero / positive (integer dollars), as in a1a"),
    "hours-per-week": Bins("hours-per-week", (35.0, 40.0, 40.0, 48.0), _QUINTILES),
}

ATTRIBUTES: tuple[str, ...] = COLUMNS[:-1]
"""The 14 attributes in ``adult.data`` order (the label ``income`` is last)."""


def _bin_name(bins: Bins, k: int) -> str:
    lower = "-inf" if k == 0 else f"{bins.boundaries[k - 1]:g}"
    upper = "inf" if k == len(bins.boundaries) else f"{bins.boundaries[k]:g}"
    return f"{bins.column} in [{lower}, {upper})"


_COLUMN_NAMES: dict[str, list[str]] = {
    column: [f"{column}={value}" for value in CATEGORIES[column]] if column in CATEGORIES
    else [_bin_name(BINS[column], k) for k in range(len(BINS[column].boundaries) + 1)]
    for column in ATTRIBUTES
}
"""Each attribute's indicator columns, named."""
FEATURE_NAMES: tuple[str, ...] = tuple(name for column in ATTRIBUTES for name in _COLUMN_NAMES[column])
_OFFSETS = dict(zip(ATTRIBUTES, np.cumsum([0] + [len(_COLUMN_NAMES[c]) for c in ATTRIBUTES]).tolist(), strict=False))


def encode(table: pd.DataFrame, where: str = "adult.data") -> np.ndarray:
    """The 123 binary a1a-style features of each row of ``table`` (the 14 attribute columns, as strings), a fixed
    function of each row alone.

    Raises:
        DPAuditError: a non-numeric or non-finite continuous value or a category outside the public schema.
    """
    X = np.zeros((len(table), N_FEATURES), dtype=np.float32)
    rows = np.arange(len(table))
    for column in ATTRIBUTES:
        values = table[column].to_numpy(dtype=str)
        if column in CATEGORIES:
            categories = np.asarray(CATEGORIES[column])
            known = np.isin(values, categories)
            bad = ~known & (values != MISSING)
            if bad.any():
                raise DPAuditError(f"{where} record {int(np.argmax(bad))}: {column}={values[bad][0]!r} is not in "
                                   "the public schema")
            order = np.argsort(categories)
            index = np.searchsorted(categories[order], values[known])
            X[rows[known], _OFFSETS[column] + order[index]] = 1.0
        else:
            import pandas as pd  # deferred: importing dpaudit.data loads no pandas

            numbers = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
            if not np.isfinite(numbers).all():
                first = int(np.argmax(~np.isfinite(numbers)))
                raise DPAuditError(f"{where} record {first}: {column} is not a finite number: {values[first]!r}")
            bins = np.searchsorted(np.asarray(BINS[column].boundaries), numbers, side="right")
            X[rows, _OFFSETS[column] + bins] = 1.0
    return X


@lru_cache(maxsize=1)
def _encoded(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, record ids = 0-based line numbers) of every record of ``adult.data``, read-only."""
    lines = path.read_text(encoding="utf-8").splitlines()
    ids = np.asarray([i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("|")],
                     dtype=np.int64)
    fields = [[v.strip() for v in lines[i].split(",")] for i in ids]
    wrong = [i for i, f in zip(ids, fields, strict=True) if len(f) != len(COLUMNS)]
    if wrong:
        raise DPAuditError(f"{path.name} line {wrong[0] + 1}: expected {len(COLUMNS)} fields")
    import pandas as pd  # deferred: importing dpaudit.data loads no pandas

    table = pd.DataFrame(fields, columns=list(COLUMNS))
    labels = table["income"].to_numpy(dtype=str)
    unknown = ~np.isin(labels, sorted(POSITIVE_LABELS | NEGATIVE_LABELS))
    if unknown.any():
        raise DPAuditError(f"{path.name} line {ids[np.argmax(unknown)] + 1}: unknown income label "
                           f"{labels[unknown][0]!r}")
    arrays = (encode(table, path.name), np.isin(labels, sorted(POSITIVE_LABELS)).astype(np.float32), ids)
    for a in arrays:
        a.setflags(write=False)
    return arrays


def load_a1a_train(rows: int | None = None) -> DataSet:
    """The protected training part: ids ≥ 1,605, and below 1,605 + ``rows`` when given (a smoke-test limit).

    Raises:
        InvalidParameter: ``rows`` not a whole number ≥ 1.
    """
    X, y, ids = _encoded(data_dir() / "adult.data")
    keep = ids >= TEST_IDS
    if rows is not None:
        keep &= ids < TEST_IDS + check_count("rows", rows)
    if not keep.any():
        raise InvalidParameter("no a1a training record selected")
    return DataSet(TRAIN_NAME, X[keep], y[keep], ids[keep], FEATURE_NAMES)


def load_a1a_test(name: str = TEST_NAME) -> DataSet:
    """The evaluation part: ids < 1,605, named ``name`` (public :data:`TEST_NAME` or protected :data:`EVAL_NAME`)."""
    X, y, ids = _encoded(data_dir() / "adult.data")
    keep = ids < TEST_IDS
    return DataSet(name, X[keep], y[keep], ids[keep], FEATURE_NAMES)


for _entry in (
    CatalogEntry(TRAIN_NAME, ("rows",), load_a1a_train,
                 "Adult adult.data in the a1a construction (123 binary features), ids >= 1605 (a1a.t, 30 956)"),
    CatalogEntry(TEST_NAME, (), load_a1a_test,
                 "Adult adult.data in the a1a construction, ids < 1605 (a1a, 1 605), used as public evaluation data"),
    CatalogEntry(EVAL_NAME, (), lambda: load_a1a_test(EVAL_NAME),
                 "the records of adult-a1a-test (public), declared as protected evaluation data (dpareto private "
                 "front)"),
):
    register_data_set(_entry)
