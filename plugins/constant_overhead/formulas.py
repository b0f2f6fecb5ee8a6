"""The sensitivity formula of constant-overhead's aggregated utility (Ding et al. 2023, Lemma 2), registered on
import.

This module imports only the kernel's light modules (no torch, no sibling module of this package), because
``dpaudit verify`` loads it on its own, without the plugin package (:func:`dpaudit.registry.load_formulas`), to
recompute the sensitivity of a run's AboveThreshold rounds. The derivation is in
:mod:`dpaudit_plugins.constant_overhead.utility`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpaudit.sensitivity import Formula, Neighbouring, Norm, register_formula
from dpaudit.validation import check_count

FORMULA_ID = "partition_average_utility"
SOURCE = ("Ding, Wu, Xu & Pan 2023 (Constant-overhead differentially private hyperparameter tuning), Alg. 1 "
          "l. 2-11, Lemma 2 (add/remove: 1/k); replace-one: 2/k (the replacement may fall in another partition)")


def partition_average_sensitivity(inputs: Mapping[str, Any], neighbouring: Neighbouring) -> float:
    """1/k under add/remove, 2/k under replace-one, for utilities in [0, 1] averaged over k partitions."""
    k = check_count("k", inputs["k"])
    return (1.0 if Neighbouring(neighbouring) is Neighbouring.ADD_REMOVE else 2.0) / k


FORMULA = register_formula(Formula(FORMULA_ID, "mean over k record-keyed partitions of a per-partition utility in "
                                   "[0, 1]", SOURCE, Norm.L1, partition_average_sensitivity))
