"""Private numeric inputs: what is checked before the charge, and the data-independent rule applied after it.

Two kinds of checks meet a private input (a value to noise, the exponential mechanism's scores, an AboveThreshold
query value):

* **Data-independent checks** (the input's type, numpy dtype, shape, number of coordinates) depend only on the
  program, not on the data, so refusing them reveals nothing. :func:`check_value` and :func:`check_scores` run them
  before anything is charged or written: a string, ``None``, a list, a dict, a complex number, a boolean, an object
  or complex array, or an empty array costs nothing.
* **Value-dependent conditions** (a NaN, an infinity, a magnitude beyond the float range inside the data) depend on
  the private data. Refusing them after the charge would publish one exact, un-noised bit about the data (“this
  data set makes the query NaN”); refusing them before the charge would do the same for free. Following OpenDP's
  model of a declared domain with imputation (OpenDP ``make_impute_constant`` and ``make_clamp``), every private
  number is instead mapped into the domain the mechanism is calibrated on by one fixed, public rule
  (:func:`into_domain`): NaN → 0, +∞ → +:data:`BOUND`, −∞ → −:data:`BOUND`, and every finite number is clamped to
  [−:data:`BOUND`, :data:`BOUND`]. The release then goes ahead and is charged as usual; the output does not say
  whether the rule changed anything.

Why this is sound. Clamping is 1-Lipschitz coordinate by coordinate, so a query whose finite values have L1 or L2
sensitivity Δ keeps sensitivity ≤ Δ after it (the differences only shrink). A query that can take a non-finite
value on some data set has no finite sensitivity as declared; after the rule it is a real-valued query, and the
caller's declared Δ must bound it including the imputed values (docs/mechanisms/laplace.md, "Non-finite values").
The rule itself is a constant of this dpaudit version (:data:`RULE`). It is public and fixed before any data is
seen, so the session records it in the ``charge`` record of every release that applies it (``imputation``:
``{"nan": 0.0, "clamp": [−2¹⁰⁰⁰, 2¹⁰⁰⁰]}``, :class:`Imputation`), for every such charge alike: the record never
says whether the rule changed a value (that would be the leak the rule exists to avoid).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpaudit.errors import InvalidParameter

#: private numbers are clamped to [−BOUND, BOUND] (2¹⁰⁰⁰: far below the float range, so noise stays representable)
BOUND = 2.0**1000
#: the value a NaN is imputed with
IMPUTED_NAN = 0.0

_REAL_KINDS = "iuf"


def _is_real_scalar(value: object) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, np.generic):
        return value.dtype.kind in _REAL_KINDS
    return isinstance(value, (int, float))


def _is_float_range(value: object) -> bool:
    """A real number (not a bool) that is finite as a float."""
    if not _is_real_scalar(value):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


@dataclass(frozen=True)
class Imputation:
    """The public rule that maps every private number into the calibrated domain (OpenDP's impute and clamp).

    NaN → ``nan``; every other number, ±∞ included, is clamped to [``lower``, ``upper``].

    Attributes:
        nan: the value a NaN is replaced with.
        lower: the lower end of the clamp (−∞ goes here).
        upper: the upper end of the clamp (+∞ goes here).
    """

    nan: float
    lower: float
    upper: float

    def __post_init__(self) -> None:
        if not all(_is_float_range(u) for u in (self.nan, self.lower, self.upper)):
            raise InvalidParameter(f"an imputation rule needs finite numbers in the float range, got {self!r}")
        if not self.lower <= self.nan <= self.upper:
            raise InvalidParameter(f"an imputation rule needs lower <= nan <= upper, got {self!r}")

    def to_dict(self) -> dict[str, Any]:
        """The ``imputation`` field of a ``charge`` record: ``{"nan": …, "clamp": [lower, upper]}``."""
        return {"nan": self.nan, "clamp": [self.lower, self.upper]}

    @classmethod
    def from_dict(cls, value: Any) -> Imputation:
        """Parse the ``imputation`` field of a ``charge`` record.

        Raises:
            InvalidParameter: not an object with exactly ``nan`` and ``clamp`` = [lower, upper], finite numbers with
                lower ≤ nan ≤ upper.
        """
        if not isinstance(value, Mapping) or set(value) != {"nan", "clamp"}:
            raise InvalidParameter(f"an imputation rule is an object with 'nan' and 'clamp', got {value!r}")
        clamp = value["clamp"]
        if not isinstance(clamp, list) or len(clamp) != 2:
            raise InvalidParameter(f"an imputation rule's 'clamp' is [lower, upper], got {clamp!r}")
        return cls(nan=value["nan"], lower=clamp[0], upper=clamp[1])


#: the rule :func:`into_domain` applies, recorded in the charge record of every release that takes private numbers
RULE = Imputation(nan=IMPUTED_NAN, lower=-BOUND, upper=BOUND)


def check_value(value: object, name: str = "value") -> int:
    """The number of coordinates of a value to noise, after data-independent checks only.

    Accepts a real number (``int``, ``float``, a numpy integer or float scalar) or a numpy array of an integer or
    float dtype with at least one element. Nothing about the numbers themselves is checked here.

    Returns:
        The dimension d ≥ 1 (1 for a scalar, the array's size otherwise).

    Raises:
        InvalidParameter: any other type, a boolean, complex or object dtype, or an empty array.
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _REAL_KINDS:
            raise InvalidParameter(f"{name} must be a numeric (int or float) array, got dtype {value.dtype}")
        if value.size == 0:
            raise InvalidParameter(f"{name} must have at least one coordinate, got shape {value.shape}")
        return int(value.size)
    if not _is_real_scalar(value):
        hint = " (wrap a list in numpy.asarray)" if isinstance(value, (list, tuple)) else ""
        raise InvalidParameter(f"{name} must be a real number or a numeric numpy array, got "
                               f"{type(value).__name__}{hint}")
    return 1


def check_query(value: object) -> None:
    """Data-independent check of one AboveThreshold query value: a real number (not a bool, array or string).

    Raises:
        InvalidParameter: any other type.
    """
    if not _is_real_scalar(value):
        raise InvalidParameter(f"an AboveThreshold query value must be a real number, got {type(value).__name__}")


def check_scores(scores: object) -> int:
    """The number of candidates of an exponential-mechanism score vector, after data-independent checks only.

    Accepts a non-empty sequence of real numbers (``int``, ``float``, ``Fraction``, numpy real scalars) or a
    non-empty one-dimensional numpy array of an integer or float dtype.

    Raises:
        InvalidParameter: any other type, an element that is not a real number, another shape, or no candidate.
    """
    if isinstance(scores, np.ndarray):
        if scores.ndim != 1:
            raise InvalidParameter(f"scores must be one-dimensional, got shape {scores.shape}")
        if scores.dtype.kind not in _REAL_KINDS:
            raise InvalidParameter(f"scores must be a numeric (int or float) array, got dtype {scores.dtype}")
    elif isinstance(scores, (str, bytes)) or not isinstance(scores, Sequence):
        raise InvalidParameter(f"scores must be a sequence of real numbers, got {type(scores).__name__}")
    else:
        for i, u in enumerate(scores):
            if not (_is_real_scalar(u) or isinstance(u, Fraction)):
                raise InvalidParameter(f"score {i} must be a real number, got {type(u).__name__}")
    if len(scores) == 0:
        raise InvalidParameter("the exponential mechanism needs at least one candidate")
    return len(scores)


def _scalar_into_domain(value: int | float | Fraction) -> int | float | Fraction:
    if isinstance(value, float):
        if math.isnan(value):
            return IMPUTED_NAN
        return min(max(value, -BOUND), BOUND)
    # ints and Fractions are exact: compare exactly, keep them exact when inside the bound
    return value if abs(value) <= BOUND else (BOUND if value > 0 else -BOUND)


def into_domain(value: Any) -> Any:
    """A private value mapped into the calibrated domain: NaN → 0, ±∞ → ±BOUND, clamp to [−BOUND, BOUND].

    Applied after :func:`check_value` or :func:`check_scores` passed, so ``value`` is a real scalar, a numeric array
    or a sequence of real scalars; the result has the same shape (a list for a sequence). Integer arrays pass
    unchanged (every int64 lies inside the bound); float arrays become float64 copies.
    """
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "f":
            return value
        out = value.astype(np.float64)  # one copy; the rule runs in place on it, whatever the values
        np.nan_to_num(out, copy=False, nan=IMPUTED_NAN, posinf=BOUND, neginf=-BOUND)
        return np.clip(out, -BOUND, BOUND, out=out)
    if isinstance(value, np.generic):
        return _scalar_into_domain(value.item())
    if isinstance(value, numbers.Real) and not isinstance(value, Sequence):
        return _scalar_into_domain(value)
    return [_scalar_into_domain(u.item() if isinstance(u, np.generic) else u) for u in value]
