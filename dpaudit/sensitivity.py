"""Sensitivity bounds as data, with the derivation that produced them.

A :class:`Sensitivity` carries its value *and* how it was obtained: the id of a formula in
:data:`FORMULAS`, the formula's public inputs, the paper and equation it comes from, and the assumptions it
rests on. ``dpaudit verify`` recomputes every sensitivity whose formula is registered here (or by a plugin) from
its recorded inputs; a ``declared`` sensitivity cannot be recomputed and is reported as an assumption.

The formulas are pure functions of public inputs and the neighbouring relation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_delta, check_positive


class Neighbouring(str, Enum):
    """Which pairs of data sets a guarantee is about.

    ``add_remove``: D' = D ∪ {x} or D \\ {x} (unbounded DP; Opacus's Poisson-sampling analysis).
    ``replace_one``: D' differs from D in one record, |D| = |D'| (bounded DP).
    """

    ADD_REMOVE = "add_remove"
    REPLACE_ONE = "replace_one"


class Norm(str, Enum):
    """Norm in which a sensitivity is measured.

    ``abs``: the sensitivity of a real-valued (one-dimensional) query, sup |f(D) − f(D')|, which is its L1 and its
    L2 sensitivity alike; it serves one-dimensional releases of either kind.
    """

    L1 = "l1"
    L2 = "l2"
    ABS = "abs"


@dataclass(frozen=True)
class Assumption:
    """Something a guarantee rests on that the ledger alone cannot establish.

    Attributes:
        id: short stable identifier, e.g. ``"declared-sensitivity"``.
        statement: the assumption in words, precise enough for a reviewer to check it.
        conditional: True when the guarantee holds *only if* the assumption is true (a modelling assumption such as
            Kusner et al.'s GP assumption); False for a fact the code enforces and states for transparency.
        source: paper and section, when it comes from one.
    """

    id: str
    statement: str
    conditional: bool = True
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "statement": self.statement, "conditional": self.conditional, "source": self.source}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Assumption:
        return cls(id=d["id"], statement=d["statement"], conditional=bool(d["conditional"]), source=d["source"])


@dataclass(frozen=True)
class Formula:
    """A registered sensitivity formula: a pure function of public inputs and the neighbouring relation.

    Attributes:
        failure_probability: for a bound that holds only with high probability over a modelled randomness (Kusner
            et al. 2015, Theorems 1, 3 and 5: over the GP prior of Assumption 1), the probability that it fails, as
            a pure function of the same inputs; ``None`` for a bound that always holds.
    """

    id: str
    description: str
    source: str
    norm: Norm
    compute: Callable[[Mapping[str, Any], Neighbouring], float]
    failure_probability: Callable[[Mapping[str, Any]], float] | None = None


FORMULAS: dict[str, Formula] = {}


def register_formula(formula: Formula) -> Formula:
    """Add ``formula`` to the registry (plugins call this at import time). Ids are unique."""
    existing = FORMULAS.get(formula.id)
    if existing is not None and existing is not formula:
        raise InvalidParameter(f"sensitivity formula id {formula.id!r} is already registered")
    FORMULAS[formula.id] = formula
    return formula


@dataclass(frozen=True)
class Sensitivity:
    """A sensitivity bound with its derivation.

    Attributes:
        value: the bound, in the units of the released value.
        norm: the norm it is measured in (L1 for Laplace, L2 for Gaussian).
        formula: id of the formula in :data:`FORMULAS`, or ``"declared"`` for a bound the caller asserts.
        inputs: the formula's public inputs, as sorted (name, value) pairs.
        source: paper and equation of the derivation.
        assumptions: what the bound rests on (a declared bound always carries one).
        failure_probability: δ_s ≥ 0, the probability that the bound fails (0: it always holds). A mechanism that
            is ε-DP under the bound is then (ε, δ_s)-DP; the accountants charge it as such
            (:class:`~dpaudit.accounting.charges.ApproximateSpec`).
    """

    value: float
    norm: Norm
    formula: str
    inputs: tuple[tuple[str, Any], ...] = ()
    source: str = ""
    assumptions: tuple[Assumption, ...] = field(default=())
    failure_probability: float = 0.0

    def __post_init__(self) -> None:
        check_positive("sensitivity", self.value)
        object.__setattr__(self, "failure_probability", check_delta(self.failure_probability, "failure_probability"))
        object.__setattr__(self, "norm", Norm(self.norm))
        object.__setattr__(self, "inputs", tuple(sorted((str(k), _frozen(v)) for k, v in self.inputs)))

    @property
    def input_map(self) -> dict[str, Any]:
        return dict(self.inputs)

    def recompute(self, neighbouring: Neighbouring) -> float | None:
        """Recompute the bound from its inputs; None for a declared bound.

        Raises:
            InvalidParameter: the formula is unknown here (a plugin that registers it is not installed).
        """
        if self.formula == DECLARED:
            return None
        formula = FORMULAS.get(self.formula)
        if formula is None:
            raise InvalidParameter(f"unknown sensitivity formula {self.formula!r} (is its plugin installed?)")
        return formula.compute(self.input_map, Neighbouring(neighbouring))

    def recompute_failure_probability(self) -> float:
        """The failure probability the formula gives for the recorded inputs (0 for a declared bound or a formula
        that always holds).

        Raises:
            InvalidParameter: the formula is unknown here.
        """
        if self.formula == DECLARED:
            return 0.0
        formula = FORMULAS.get(self.formula)
        if formula is None:
            raise InvalidParameter(f"unknown sensitivity formula {self.formula!r} (is its plugin installed?)")
        return 0.0 if formula.failure_probability is None else formula.failure_probability(self.input_map)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "value": self.value,
            "norm": self.norm.value,
            "formula": self.formula,
            "inputs": {k: v for k, v in self.inputs},
            "source": self.source,
            "assumptions": [a.to_dict() for a in self.assumptions],
        }
        if self.failure_probability:  # omitted when 0, so that always-holding bounds keep their earlier form
            out["failure_probability"] = self.failure_probability
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sensitivity:
        return cls(
            value=d["value"],
            norm=Norm(d["norm"]),
            formula=d["formula"],
            inputs=tuple(d["inputs"].items()),
            source=d["source"],
            assumptions=tuple(Assumption.from_dict(a) for a in d["assumptions"]),
            failure_probability=d.get("failure_probability", 0.0),
        )


DECLARED = "declared"


def _frozen(value: Any) -> Any:
    """A formula input with every list turned into a tuple (recursively), so that the sensitivity, and the event
    that carries it, stay hashable whether the inputs came from the caller or from a ledger record's JSON."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def declared(value: float, norm: Norm | str, reason: str) -> Sensitivity:
    """A sensitivity the caller asserts; recorded as a conditional assumption with the caller's reason."""
    if not reason:
        raise InvalidParameter("a declared sensitivity needs a reason (how the bound was derived)")
    return Sensitivity(
        value=value,
        norm=Norm(norm),
        formula=DECLARED,
        source="declared by the caller",
        assumptions=(
            Assumption(
                id="declared-sensitivity",
                statement=f"The released quantity changes by at most {value} in {Norm(norm).value} norm "
                f"between neighbouring data sets: {reason}",
                conditional=True,
            ),
        ),
    )


def from_formula(formula_id: str, neighbouring: Neighbouring | str, *, assumptions: tuple[Assumption, ...] = (),
                 **inputs: Any) -> Sensitivity:
    """Build a :class:`Sensitivity` by evaluating a registered formula (and its failure probability) on public
    inputs; ``assumptions`` are what the formula's bound rests on."""
    formula = FORMULAS.get(formula_id)
    if formula is None:
        raise InvalidParameter(f"unknown sensitivity formula {formula_id!r}; known: {sorted(FORMULAS)}")
    value = formula.compute(inputs, Neighbouring(neighbouring))
    failure = 0.0 if formula.failure_probability is None else formula.failure_probability(inputs)
    return Sensitivity(value=value, norm=formula.norm, formula=formula.id, inputs=tuple(inputs.items()),
                       source=formula.source, assumptions=tuple(assumptions), failure_probability=failure)


# --- the kernel's formulas -------------------------------------------------------------------------------------


def _bounded_sum(inputs: Mapping[str, Any], nb: Neighbouring) -> float:
    lo, hi = float(inputs["lower"]), float(inputs["upper"])
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        raise InvalidParameter(f"bounded_sum needs finite lower <= upper, got [{lo}, {hi}]")
    if nb is Neighbouring.ADD_REMOVE:
        return max(abs(lo), abs(hi))
    return hi - lo


def _count(inputs: Mapping[str, Any], nb: Neighbouring) -> float:
    return 1.0


def _bit(inputs: Mapping[str, Any], nb: Neighbouring) -> float:
    return 1.0


def _bounded_mean(inputs: Mapping[str, Any], nb: Neighbouring) -> float:
    if nb is not Neighbouring.REPLACE_ONE:
        raise InvalidParameter("bounded_mean with a public n needs replace-one neighbours (n is not public under "
                               "add/remove); release a noisy sum and a noisy count instead")
    lo, hi = float(inputs["lower"]), float(inputs["upper"])
    n = check_count("n", inputs["n"])
    if hi < lo:
        raise InvalidParameter(f"bounded_mean needs lower <= upper, got [{lo}, {hi}]")
    return (hi - lo) / n


def _clipped_sum(inputs: Mapping[str, Any], nb: Neighbouring) -> float:
    c = check_positive("clip_norm", inputs["clip_norm"])
    return c if nb is Neighbouring.ADD_REMOVE else 2.0 * c


for _f in (
    Formula("bounded_sum", "sum of values clipped to [lower, upper]", "Dwork & Roth 2014, Sec. 3.3, Def. 3.1",
            Norm.ABS, _bounded_sum),
    Formula("count", "number of records satisfying a public predicate", "Dwork & Roth 2014, Sec. 3.3, Example 3.1",
            Norm.ABS, _count),
    Formula("bit", "a 0/1-valued function of the data set", "Dwork & Roth 2014, Sec. 3.2 (randomized response)",
            Norm.ABS, _bit),
    Formula("bounded_mean", "mean of n values clipped to [lower, upper], n public (replace-one only)",
            "Dwork & Roth 2014, Sec. 3.3", Norm.ABS, _bounded_mean),
    Formula("clipped_gradient_sum", "sum of per-example gradients clipped to L2 norm clip_norm",
            "Abadi et al. 2016, Alg. 1; Ponomareva et al. 2023 (How to DP-fy ML), Sec. 5.2", Norm.L2, _clipped_sum),
):
    register_formula(_f)
del _f
