"""Search spaces: the public hyperparameter settings a tuning run chooses among, drawn before any data is read.

A :class:`SearchSpace` is a frozen description (parameters and a design); :func:`draw_settings` turns it into the
candidate settings, using only the session's :class:`~dpaudit.mechanisms.randomness.RandomSource`, so the
candidates are independent of the data (the premise of every selection analysis: Liu & Talwar 2019, Papernot &
Steinke 2022 and Ding et al. 2023 all take the candidate set as fixed in advance or drawn from public randomness).

Designs:

* ``grid``: the Cartesian product of each parameter's grid values (a categorical's choices; ``points`` values of
  a numeric range, evenly spaced on a linear or logarithmic scale, integers rounded and deduplicated);
* ``random``: ``samples`` independent draws, each parameter uniform (or log-uniform) on its range, a categorical
  uniform over its choices;
* ``sobol``: ``samples`` points of a scrambled Sobol sequence (scipy.stats.qmc; Owen 1998 scrambling, seeded from
  the session's source), mapped to each range by the same inverse transforms as ``random``.

A numeric parameter maps u ∈ [0, 1) to ``low + u·(high − low)`` (linear) or ``low·(high/low)^u`` (log); an
integer one to ⌊·⌋ of the same map over [low, high + 1), capped at ``high``; a categorical one to choice
⌊u·m⌋ of its m choices.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import qmc

from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.tuning.seeds import draw_seed
from dpaudit.validation import check_count, check_finite

KINDS = ("float", "int", "categorical")
DESIGNS = ("grid", "random", "sobol")
#: resolution of a uniform draw from a RandomSource: u = randbelow(2^53) / 2^53
_UNIT = 2**53


@dataclass(frozen=True)
class Parameter:
    """One hyperparameter of a search space.

    Attributes:
        name: the key of the setting passed to the trainer.
        kind: ``"float"``, ``"int"`` or ``"categorical"``.
        low, high: the range of a numeric parameter (inclusive; ``low > 0`` on a log scale).
        log: sample a numeric parameter on a logarithmic scale.
        choices: a categorical parameter's values (JSON scalars: str, int, float, bool).
        points: a numeric parameter's number of grid values (``grid`` design only).
    """

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    points: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidParameter(f"a parameter name must be a non-empty string, got {self.name!r}")
        if self.kind not in KINDS:
            raise InvalidParameter(f"parameter {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "categorical":
            object.__setattr__(self, "choices", tuple(self.choices))
            if not self.choices or any(not isinstance(c, (str, int, float, bool)) for c in self.choices):
                raise InvalidParameter(f"parameter {self.name!r}: choices must be a non-empty list of strings, "
                                       "numbers or booleans")
            if len(set(self.choices)) != len(self.choices):
                raise InvalidParameter(f"parameter {self.name!r}: choices repeat")
            return
        low, high = check_finite(f"{self.name}.low", self.low), check_finite(f"{self.name}.high", self.high)
        if self.kind == "int" and (low != int(low) or high != int(high)):
            raise InvalidParameter(f"parameter {self.name!r}: an int range needs integer bounds, got [{low}, {high}]")
        if not low <= high:
            raise InvalidParameter(f"parameter {self.name!r}: low {low} exceeds high {high}")
        if self.log and low <= 0:
            raise InvalidParameter(f"parameter {self.name!r}: a log scale needs low > 0, got {low}")
        check_count(f"{self.name}.points", self.points)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def value(self, u: float) -> Any:
        """The value at quantile ``u`` ∈ [0, 1) (module docstring)."""
        if self.kind == "categorical":
            return self.choices[min(int(u * len(self.choices)), len(self.choices) - 1)]
        assert self.low is not None and self.high is not None
        top = self.high + 1 if self.kind == "int" else self.high
        x = self.low * (top / self.low) ** u if self.log else self.low + u * (top - self.low)
        return min(int(math.floor(x)), int(self.high)) if self.kind == "int" else float(min(x, self.high))

    def grid(self) -> tuple[Any, ...]:
        """The parameter's grid values (``grid`` design)."""
        if self.kind == "categorical":
            return self.choices
        assert self.low is not None and self.high is not None
        space = np.geomspace if self.log else np.linspace
        values = space(self.low, self.high, self.points) if self.points > 1 else np.array([self.low])
        if self.kind == "int":
            return tuple(dict.fromkeys(int(round(v)) for v in values))
        return tuple(float(v) for v in values)

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "categorical":
            return {"name": self.name, "kind": self.kind, "choices": list(self.choices)}
        return {"name": self.name, "kind": self.kind, "low": self.low, "high": self.high, "log": self.log,
                "points": self.points}


@dataclass(frozen=True)
class SearchSpace:
    """Parameters and a design (module docstring).

    Attributes:
        parameters: the hyperparameters, with distinct names.
        design: ``"grid"``, ``"random"`` or ``"sobol"``.
        samples: the number of settings drawn by ``random`` and ``sobol`` (ignored by ``grid``).
    """

    parameters: tuple[Parameter, ...]
    design: str = "grid"
    samples: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", tuple(self.parameters))
        if not self.parameters or not all(isinstance(p, Parameter) for p in self.parameters):
            raise InvalidParameter("a search space needs at least one Parameter")
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise InvalidParameter(f"a search space repeats a parameter name: {names}")
        if self.design not in DESIGNS:
            raise InvalidParameter(f"design must be one of {DESIGNS}, got {self.design!r}")
        check_count("samples", self.samples)

    def to_dict(self) -> dict[str, Any]:
        return {"design": self.design, "samples": self.samples, "parameters": [p.to_dict() for p in self.parameters]}

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> SearchSpace:
        """From ``{"design": ..., "samples": ..., "parameters": {name: spec}}``, where a spec is
        ``{"low", "high", "log"?, "int"?, "points"?}`` (numeric), ``{"choices": [...]}`` (categorical) or a plain
        value (fixed: a categorical with one choice).

        Raises:
            InvalidParameter: an unknown key or a bad parameter.
        """
        if not isinstance(raw, Mapping):
            raise InvalidParameter(f"a search space must be a table, got {type(raw).__name__}")
        unknown = set(raw) - {"design", "samples", "parameters"}
        if unknown:
            raise InvalidParameter(f"unknown search-space key(s) {sorted(unknown)}; known: design, samples, "
                                   "parameters")
        params = raw.get("parameters")
        if not isinstance(params, Mapping) or not params:
            raise InvalidParameter("the search space needs a non-empty table of parameters")
        return cls(parameters=tuple(_parameter(name, spec) for name, spec in params.items()),
                   design=raw.get("design", "grid"), samples=raw.get("samples", 8))


def _parameter(name: str, spec: Any) -> Parameter:
    if not isinstance(spec, Mapping):
        return Parameter(name, "categorical", choices=(spec,))
    unknown = set(spec) - {"low", "high", "log", "int", "points", "choices"}
    if unknown:
        raise InvalidParameter(f"parameter {name!r}: unknown key(s) {sorted(unknown)}; known: low, high, log, int, "
                               "points, choices")
    if "choices" in spec:
        if set(spec) != {"choices"} or isinstance(spec["choices"], (str, bytes)):
            raise InvalidParameter(f"parameter {name!r}: a categorical parameter takes only a list of choices")
        return Parameter(name, "categorical", choices=tuple(spec["choices"]))
    for flag in ("log", "int"):
        if not isinstance(spec.get(flag, False), bool):
            raise InvalidParameter(f"parameter {name!r}: {flag} must be true or false")
    return Parameter(name, "int" if spec.get("int", False) else "float", low=spec.get("low"), high=spec.get("high"),
                     log=spec.get("log", False), points=spec.get("points", 3))


def _uniform(rng: RandomSource) -> float:
    return rng.randbelow(_UNIT) / _UNIT


def draw_settings(space: SearchSpace, rng: RandomSource) -> tuple[dict[str, Any], ...]:
    """The candidate settings of ``space``, drawn from ``rng`` only (never from data).

    Returns:
        One dict per candidate, parameter name → value, in draw order; duplicates (possible for integer and
        categorical parameters) are dropped, keeping the first.
    """
    params = space.parameters
    if space.design == "grid":
        rows: Sequence[Sequence[Any]] = list(itertools.product(*(p.grid() for p in params)))
    else:
        if space.design == "random":
            units = np.array([[_uniform(rng) for _ in params] for _ in range(space.samples)])
        else:
            with warnings.catch_warnings():  # a count that is not a power of 2 loses balance, not validity
                warnings.filterwarnings("ignore", message=".*balance properties", category=UserWarning)
                units = qmc.Sobol(d=len(params), scramble=True, seed=draw_seed(rng)).random(space.samples)
        rows = [[p.value(float(u)) for p, u in zip(params, row, strict=True)] for row in units]
    unique = dict.fromkeys(tuple(row) for row in rows)  # keeps the first of equal settings, in order
    return tuple(dict(zip((p.name for p in params), row, strict=True)) for row in unique)
