"""The sensitivity formula of the private front's released errors (docs/plugins/dpareto.md, "Private front"),
registered on import.

This module imports only the kernel's light modules (no torch, no sibling module of this package), because
``dpaudit verify`` loads it on its own, without the plugin package (:func:`dpaudit.registry.load_formulas`), to
recompute the sensitivity of every evaluation release of a private-front run.

**What is released.** For one trial that trained R models on the training set, the error released on the protected
evaluation set D_eval is

    r(D_eval) = (1 / n_eval) · Σ_{x ∈ D_eval} w(x),    w(x) = (1/R) · #{models that misclassify x} ∈ [0, 1],

where ``n_eval`` is a **public constant** fixed before the run (the task's declared evaluation size), not the
realised size |D_eval|. The models depend on the training set only, so with the training set fixed:

* add/remove one evaluation record x: r changes by w(x) / n_eval ≤ 1 / n_eval;
* replace one evaluation record x by x': r changes by |w(x) − w(x')| / n_eval ≤ 1 / n_eval.

So the sensitivity is 1/n_eval under both relations (Dwork & Roth 2014, Sec. 3.3: a count with a public divisor).
It is **not** 1/|D_eval| with the realised size under add/remove: that divisor is private, and a noise scale that
depends on it makes the output distributions of D_eval and D_eval ∪ {x} differ in scale, so the privacy loss is
unbounded (tests/plugins/dpareto/test_formulas.py shows it). A neighbour in the training set changes the models;
the evaluation release is then post-processing of the models (the training charges cover it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpaudit.sensitivity import Formula, Neighbouring, Norm, register_formula
from dpaudit.validation import check_count

FORMULA_ID = "dpareto_error_rate"
SOURCE = ("Avent et al. 2020 (DPareto), Sec. 5 (a private front: noise on the utility oracle's output); Dwork & Roth "
          "2014, Sec. 3.3 (Laplace mechanism on a count): the mean error count of R models over the evaluation "
          "records, each record's share in [0, 1], divided by the public constant n_eval: 1/n_eval under add/remove "
          "and replace-one")


def error_rate_sensitivity(inputs: Mapping[str, Any], neighbouring: Neighbouring) -> float:
    """1/n_eval under add/remove and under replace-one, for ``n_eval`` a public constant divisor (module docstring).

    Raises:
        InvalidParameter: ``n_eval`` is not a whole number ≥ 1.
    """
    Neighbouring(neighbouring)  # a relation this formula covers (both)
    return 1.0 / check_count("n_eval", inputs["n_eval"])


FORMULA = register_formula(Formula(FORMULA_ID, "misclassification rate of R models on a protected evaluation set, "
                                   "the error count divided by a public constant n_eval", SOURCE, Norm.ABS,
                                   error_rate_sensitivity))
