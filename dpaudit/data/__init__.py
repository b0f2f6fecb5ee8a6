"""Data sets used by the plugins and examples, preprocessed with public constants only (see docs/data.md)."""

from dpaudit.data.adult import AdultData, load_adult

__all__ = ["AdultData", "load_adult"]
