"""The ``dp-gp`` configuration: everything public, fixed before any data is read (docs/plugins/dp-gp.md).

The kernel hyperparameters, the prior mean and the output rule (clipping interval, centre, scale) are in normalised
output units, i.e. after y ↦ (clip(y) − centre)/scale; none may be computed from the outputs. Keys of the other
method are refused, so a typo cannot silently fall back to a default.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_finite,
    check_known_keys,
    check_positive,
)
from dpaudit_plugins.dp_gp.binning import BIN_KEYS, BINNING, BinningOptions
from dpaudit_plugins.dp_gp.cloaking import DEFAULT_FLOOR_RATIO, DEFAULT_TOLERANCE
from dpaudit_plugins.dp_gp.formulas import as_inputs
from dpaudit_plugins.dp_gp.release import CLOAKING, METHODS, STANDARD, GpModel, OutputRule

DEFAULT_DATA = "diabetes-train"
_COMMON = {"method", "epsilon", "delta", "data", "inputs", "test_points", "test_grid", "lengthscale", "variance",
           "noise", "prior_mean", "clip_lower", "clip_upper", "centre", "scale"}
_ONLY = {CLOAKING: {"tolerance", "floor_ratio"}, STANDARD: {"jitter"}, BINNING: set(BIN_KEYS)}


def grid_points(lower: Any, upper: Any, points: int) -> np.ndarray:
    """The product grid with ``points`` equally spaced values per axis from ``lower`` to ``upper`` (each a number or
    one per input dimension), as a (points^D, D) array."""
    lo, hi = np.atleast_1d(np.array(lower, dtype=np.float64)), np.atleast_1d(np.array(upper, dtype=np.float64))
    points = check_count("test_grid points", points)
    if lo.shape != hi.shape or lo.ndim != 1 or not np.all(np.isfinite(lo)) or not np.all(hi >= lo):
        raise InvalidParameter(f"test_grid needs finite lower <= upper of one length, got {lower!r}, {upper!r}")
    axes = [np.linspace(a, b, points) for a, b in zip(lo, hi, strict=True)]
    return np.array(list(itertools.product(*axes)), dtype=np.float64)


@dataclass(frozen=True)
class DpGpConfig:
    """A dp-gp run.

    Attributes:
        method: "cloaking" (test points known in advance, Sec. 3), "standard" (Sec. 2) or "binning" (the Sec. 4
            baseline, :mod:`~dpaudit_plugins.dp_gp.binning`).
        epsilon, delta: the release's (ε, δ).
        data: the protected catalog data set (its target y is protected; ``inputs`` are public columns). ``dpaudit
            run`` protects ``diabetes-train`` only (:func:`check_cli_config`); another set needs a session that
            protects it (the Python API).
        inputs: the feature columns used as the public inputs X.
        test_points: the public test inputs X* (P×D, or a flat list for D = 1).
        lengthscale, variance, noise: the EQ kernel (ℓ: one value or one per input) and the noise variance.
        prior_mean: the public constant prior mean, normalised units.
        clip_lower, clip_upper, centre, scale: the public output rule
            (:class:`~dpaudit_plugins.dp_gp.release.OutputRule`).
        jitter: the standard method's j in M = K_** + jI (None: 10⁻⁶·variance).
        tolerance, floor_ratio: the cloaking solver's tolerance and isotropic floor.
        binning: the binning method's bins, kernel and noise kind (None for the other methods).
    """

    method: str
    epsilon: float
    delta: float
    inputs: tuple[str, ...]
    test_points: tuple[tuple[float, ...], ...]
    lengthscale: float | tuple[float, ...]
    variance: float
    noise: float
    clip_lower: float
    clip_upper: float
    centre: float
    scale: float
    prior_mean: float = 0.0
    data: str = DEFAULT_DATA
    jitter: float | None = None
    tolerance: float = DEFAULT_TOLERANCE
    floor_ratio: float = DEFAULT_FLOOR_RATIO
    binning: BinningOptions | None = None

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> DpGpConfig:
        """Parse and check a configuration (no data, no session).

        Raises:
            InvalidParameter: an unknown or missing key, a key of the other method, a bad value.
        """
        if not isinstance(config, Mapping):
            raise InvalidParameter(f"the dp-gp configuration must be a mapping, got {type(config).__name__}")
        method = config.get("method", CLOAKING)
        if method not in (*METHODS, BINNING):
            raise InvalidParameter(f"dp-gp method must be one of {[*METHODS, BINNING]}, got {method!r}")
        check_known_keys(config, _COMMON | _ONLY[method], f"dp-gp ({method})")
        missing = sorted({"epsilon", "delta", "inputs", "lengthscale", "variance", "noise", "clip_lower",
                          "clip_upper", "centre", "scale"} - set(config))
        if missing:
            raise InvalidParameter(f"the dp-gp configuration needs {missing}")
        if ("test_points" in config) == ("test_grid" in config):
            raise InvalidParameter("give exactly one of test_points (a list) and test_grid ({lower, upper, points})")
        inputs = config["inputs"]
        if isinstance(inputs, str) or not inputs or not all(isinstance(c, str) and c for c in inputs):
            raise InvalidParameter(f"inputs must be a non-empty list of column names, got {inputs!r}")
        if "test_grid" in config:
            grid = config["test_grid"]
            if not isinstance(grid, Mapping) or set(grid) != {"lower", "upper", "points"}:
                raise InvalidParameter("test_grid must be {lower, upper, points}")
            X_star = grid_points(grid["lower"], grid["upper"], grid["points"])
        else:
            X_star = as_inputs(config["test_points"], "test_points")
        if X_star.shape[1] != len(inputs):
            raise InvalidParameter(f"the test points have {X_star.shape[1]} dimensions but inputs names "
                                   f"{len(inputs)} columns")
        ell = config["lengthscale"]
        lengthscale = tuple(check_positive("lengthscale", v) for v in ell) if isinstance(ell, (list, tuple)) \
            else check_positive("lengthscale", ell)
        data = config.get("data", DEFAULT_DATA)
        if not isinstance(data, str) or not data:
            raise InvalidParameter(f"data must be a catalog data set name, got {data!r}")
        cfg = cls(method=method, epsilon=check_epsilon(config["epsilon"]),
                  delta=check_delta(config["delta"], allow_zero=False), inputs=tuple(inputs),
                  test_points=tuple(tuple(float(v) for v in row) for row in X_star), lengthscale=lengthscale,
                  variance=check_positive("variance", config["variance"]),
                  noise=check_positive("noise", config["noise"]),
                  clip_lower=check_finite("clip_lower", config["clip_lower"]),
                  clip_upper=check_finite("clip_upper", config["clip_upper"]),
                  centre=check_finite("centre", config["centre"]), scale=check_positive("scale", config["scale"]),
                  prior_mean=check_finite("prior_mean", config.get("prior_mean", 0.0)), data=data,
                  jitter=None if config.get("jitter") is None else check_positive("jitter", config["jitter"]),
                  tolerance=check_positive("tolerance", config.get("tolerance", DEFAULT_TOLERANCE)),
                  floor_ratio=check_positive("floor_ratio", config.get("floor_ratio", DEFAULT_FLOOR_RATIO)),
                  binning=BinningOptions.from_mapping(config, len(inputs)) if method == BINNING else None)
        cfg.rule()  # the output rule and the kernel are checked here, before any data is read
        GpModel(X_star, cfg.lengthscale, cfg.variance, cfg.noise, cfg.prior_mean)
        return cfg

    def rule(self) -> OutputRule:
        """The public output rule."""
        return OutputRule(self.clip_lower, self.clip_upper, self.centre, self.scale)

    def model(self, X: np.ndarray) -> GpModel:
        """The public GP on training inputs ``X``."""
        return GpModel(X, self.lengthscale, self.variance, self.noise, self.prior_mean)

    def plan_options(self) -> dict[str, Any]:
        """The method's options for :func:`dpaudit_plugins.dp_gp.release.plan`."""
        if self.method == CLOAKING:
            return {"tolerance": self.tolerance, "floor_ratio": self.floor_ratio}
        return {"jitter": self.jitter}


def check_cli_config(config: Mapping[str, Any]) -> DpGpConfig:
    """The check ``dpaudit run dp-gp`` makes before opening a run: :meth:`DpGpConfig.from_mapping`, and ``data`` must
    be :data:`DEFAULT_DATA`, the one set the CLI's session protects (another would be refused only after the run
    opened).

    Raises:
        InvalidParameter: a bad configuration, or another data set.
    """
    cfg = DpGpConfig.from_mapping(config)
    if cfg.data != DEFAULT_DATA:
        raise InvalidParameter(f"dpaudit run dp-gp protects {DEFAULT_DATA!r} only, got data={cfg.data!r} (another set "
                               "needs a session that protects it: the Python API)")
    return cfg
