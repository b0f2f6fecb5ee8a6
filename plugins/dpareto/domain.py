"""The hyperparameter domain a DPareto task declares: names, bounds, scales, integer rounding (public, fixed first).

Every search method (BO, random sampling, grid search) works in the unit cube [0, 1]^d: coordinate u of a parameter
maps to ``lower + u·(upper − lower)`` on a linear scale and to ``lower·(upper/lower)^u`` on a log scale (Avent et al.
2020, Sec. 4: rates on log scales), then an integer parameter is rounded to the nearest integer inside its bounds.
The GP surrogates see :meth:`Domain.to_unit` of the *rounded* values, so what the GP learns from is exactly what was
evaluated.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_finite, check_known_keys

SCALES = ("linear", "log")
MAX_GRID_POINTS = 100_000
"""The most points a grid may have (points per axis to the power d): a larger one is refused before it is built."""


@dataclass(frozen=True)
class Parameter:
    """One hyperparameter's public range.

    Attributes:
        name: the hyperparameter's name (the key in the dictionaries a task's evaluation receives).
        lower, upper: its bounds, ``lower < upper`` (both > 0 on a log scale; integers when ``integer``).
        scale: ``"linear"`` or ``"log"`` (uniform in log space: learning rates, noise multipliers, SVT's b).
        integer: round to the nearest integer (epochs, batch sizes, SVT's C).
    """

    name: str
    lower: float
    upper: float
    scale: str = "linear"
    integer: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidParameter("a parameter's name must be a non-empty string")
        lower, upper = check_finite(f"{self.name}.lower", self.lower), check_finite(f"{self.name}.upper", self.upper)
        if not lower < upper:
            raise InvalidParameter(f"parameter {self.name!r}: lower {lower:g} must be below upper {upper:g}")
        if self.scale not in SCALES:
            raise InvalidParameter(f"parameter {self.name!r}: scale must be one of {SCALES}, got {self.scale!r}")
        if self.scale == "log" and lower <= 0:
            raise InvalidParameter(f"parameter {self.name!r}: a log scale needs lower > 0, got {lower:g}")
        if self.integer and (lower != math.floor(lower) or upper != math.floor(upper)):
            raise InvalidParameter(f"parameter {self.name!r}: an integer parameter needs integer bounds")

    def from_unit(self, u: np.ndarray) -> np.ndarray:
        """Values for unit coordinates ``u`` (clipped into [0, 1]), rounded when integer."""
        u = np.clip(np.asarray(u, dtype=float), 0.0, 1.0)
        if self.scale == "log":
            values = np.exp(math.log(self.lower) + u * (math.log(self.upper) - math.log(self.lower)))
        else:
            values = self.lower + u * (self.upper - self.lower)
        values = np.clip(values, self.lower, self.upper)
        return np.rint(values) if self.integer else values

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        """The unit coordinates of ``values`` (inverse of :meth:`from_unit` before rounding)."""
        values = np.asarray(values, dtype=float)
        if self.scale == "log":
            return (np.log(values) - math.log(self.lower)) / (math.log(self.upper) - math.log(self.lower))
        return (values - self.lower) / (self.upper - self.lower)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "lower": self.lower, "upper": self.upper, "scale": self.scale,
                "integer": self.integer}

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Parameter:
        """Parse ``{"name", "lower", "upper", "scale"?, "integer"?}``.

        Raises:
            InvalidParameter: unknown keys or bad values.
        """
        check_known_keys(data, ("name", "lower", "upper", "scale", "integer"), "a dpareto parameter")
        return cls(name=data.get("name", ""), lower=data.get("lower", float("nan")),
                   upper=data.get("upper", float("nan")), scale=data.get("scale", "linear"),
                   integer=bool(data.get("integer", False)))


@dataclass(frozen=True)
class Domain:
    """The box of hyperparameters a task is tuned over, in a fixed order.

    Attributes:
        parameters: the parameters, names distinct.
    """

    parameters: tuple[Parameter, ...]

    def __post_init__(self) -> None:
        if not self.parameters:
            raise InvalidParameter("a domain needs at least one parameter")
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise InvalidParameter(f"parameter names must be distinct, got {names}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    @property
    def dimension(self) -> int:
        return len(self.parameters)

    def from_unit(self, u: np.ndarray) -> np.ndarray:
        """Parameter values (rows) for unit coordinates ``u`` of shape (n, d), integers rounded."""
        u = np.atleast_2d(np.asarray(u, dtype=float))
        if u.shape[1] != self.dimension:
            raise InvalidParameter(f"expected {self.dimension} coordinates per point, got {u.shape[1]}")
        return np.column_stack([p.from_unit(u[:, j]) for j, p in enumerate(self.parameters)])

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        """Unit coordinates (rows) of parameter values of shape (n, d)."""
        values = np.atleast_2d(np.asarray(values, dtype=float))
        return np.column_stack([p.to_unit(values[:, j]) for j, p in enumerate(self.parameters)])

    def snap(self, u: np.ndarray) -> np.ndarray:
        """The unit coordinates of the values ``u`` maps to (integer parameters rounded): the point actually run."""
        return self.to_unit(self.from_unit(u))

    def point(self, row: Sequence[float]) -> dict[str, float | int]:
        """One row of values as ``{name: value}`` (ints for integer parameters): what a task's evaluation gets."""
        return {p.name: int(v) if p.integer else float(v) for p, v in zip(self.parameters, row, strict=True)}

    def grid(self, points_per_axis: int) -> np.ndarray:
        """The full grid of ``points_per_axis`` evenly spaced unit coordinates per axis (ends included), as unit
        coordinates of shape (points_per_axis^d, d), in lexicographic order (Avent et al. 2020, Fig. 6).

        Raises:
            InvalidParameter: fewer than 2 points per axis, or more than :data:`MAX_GRID_POINTS` in all.
        """
        k = check_count("points_per_axis", points_per_axis, minimum=2)
        if k ** self.dimension > MAX_GRID_POINTS:
            raise InvalidParameter(f"a grid of {k} points per axis in {self.dimension} dimensions has "
                                   f"{k ** self.dimension} points; at most {MAX_GRID_POINTS} are allowed")
        axis = np.linspace(0.0, 1.0, k)
        return np.array(list(itertools.product(axis, repeat=self.dimension)), dtype=float)

    def to_dict(self) -> list[dict[str, Any]]:
        return [p.to_dict() for p in self.parameters]

    @classmethod
    def from_list(cls, items: Sequence[Mapping[str, Any]]) -> Domain:
        """Parse a list of parameter mappings (:meth:`Parameter.from_mapping`)."""
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise InvalidParameter("a domain is a list of parameters")
        return cls(tuple(Parameter.from_mapping(item) for item in items))
