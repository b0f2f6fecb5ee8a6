"""The ``kusner-bo`` configuration: everything public, fixed before any data is read (docs/plugins/kusner-bo.md).

``algorithm`` selects the section: 3 (Lipschitz and convex, unconditional) or 1 / 2 (GP-UCB, conditional on
Assumption 1). Keys of another algorithm's section are refused, so a typo cannot silently fall back to a default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_known_keys,
    check_nonnegative,
    check_positive,
)
from dpaudit_plugins.kusner_bo.algorithm3 import DEFAULT_SOLVER_TOLERANCE, PROPOSERS
from dpaudit_plugins.kusner_bo.constants import check_k1
from dpaudit_plugins.kusner_bo.gp import KernelSpec
from dpaudit_plugins.kusner_bo.losses import get_loss

_COMMON = {"algorithm", "epsilon", "T", "train_rows", "validation_rows"}
_ALGORITHM3 = {"lambdas", "loss", "validation_size", "solver_tolerance", "proposer"}
_GP = {"delta", "k1", "kernel", "lengthscale", "grid_points", "gain_offset", "gain_scale"}
_ALGORITHM1 = {"sigma", "log10_learning_rate", "log10_lambda", "epochs", "batch_size"}
_ALGORITHM2 = {"A", "tau", "log10_lambda", "threshold"}


@dataclass(frozen=True)
class Algorithm3Config:
    """Algorithm 3 on Adult.

    Attributes:
        lambdas: the public finite Λ of L2 weights, all > 0.
        loss: validation loss, "ramp" (L = 1) or "sigmoid" (L = 1/4).
        epsilon: ε of the one Laplace release.
        T: BO steps.
        train_rows: Adult records with id < train_rows form the public training set.
        validation_rows: the next ``validation_rows`` ids form the protected validation set.
        validation_size: the public m₀ the score averages over (default: ``validation_rows``).
        solver_tolerance: τ, the gradient norm every fitted model must reach.
        proposer: "grid" (Λ in order) or "gp-ucb" (GP-UCB on log10 λ); the guarantee holds for any proposer.
    """

    lambdas: tuple[float, ...]
    loss: str = "ramp"
    epsilon: float = 1.0
    T: int = 10
    train_rows: int = 2000
    validation_rows: int = 1000
    validation_size: int = 1000
    solver_tolerance: float = DEFAULT_SOLVER_TOLERANCE
    proposer: str = "grid"
    algorithm: int = 3


@dataclass(frozen=True)
class GpConfig:
    """Algorithm 1 (noisy, SGD task) or 2 (exact, threshold task) on Adult; tasks in
    :mod:`dpaudit_plugins.kusner_bo.tasks`.

    Attributes:
        algorithm: 1 or 2.
        epsilon, delta: each release's ε and the δ of the constants; releasing λ̃ and the value is (2ε, 2δ) for
            Algorithm 2 and (2ε, 8δ/3) for Algorithm 1 (its value's bound fails w.p. 5δ/3), so the session's δ_B
            must be at least that.
        T: GP-UCB steps.
        k1: the assumed k1(V, V') (Assumption 1; the paper's likelihood study found 0.95 most likely on its grid).
        kernel: k2, "se" or "matern52", with ``lengthscale`` on Λ's coordinates scaled to [0, 1]^2.
        grid_points: points per axis of Λ (|Λ| = grid_points²).
        gain_offset, gain_scale: f_V = (accuracy − offset)/scale, the gain the GP models.
        sigma: Algorithm 1's observation-noise standard deviation, in gain units.
        A, tau: Algorithm 2's regret constants (de Freitas et al. 2012), A in gain units.
        log10_learning_rate, log10_lambda, threshold: the axes' [lo, hi].
        epochs, batch_size: Algorithm 1's SGD.
        train_rows, validation_rows: the Adult split, as for Algorithm 3.
    """

    algorithm: int
    epsilon: float = 1.0
    delta: float = 1e-5
    T: int = 20
    k1: float = 0.95
    kernel: KernelSpec = KernelSpec("matern52", 0.25)
    grid_points: int = 8
    gain_offset: float = 0.8
    gain_scale: float = 0.05
    sigma: float = 0.1
    A: float = 1.0
    tau: float = 0.1
    log10_learning_rate: tuple[float, float] = (-0.5, 1.5)
    log10_lambda: tuple[float, float] = (-5.0, -1.0)
    threshold: tuple[float, float] = (0.3, 0.7)
    epochs: int = 2
    batch_size: int = 64
    train_rows: int = 5000
    validation_rows: int = 2000

    @property
    def gain(self) -> str:
        return f"(validation accuracy - {self.gain_offset:g}) / {self.gain_scale:g}"


KusnerConfig = Algorithm3Config | GpConfig


def _range(name: str, value: object, default: tuple[float, float]) -> tuple[float, float]:
    if value is None:
        return default
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise InvalidParameter(f"{name} must be [lo, hi], got {value!r}")
    try:
        lo, hi = float(value[0]), float(value[1])
    except (TypeError, ValueError):
        raise InvalidParameter(f"{name} must be two numbers [lo, hi], got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise InvalidParameter(f"{name} needs finite lo <= hi, got {value!r}")
    return lo, hi


def parse_config(config: Mapping[str, Any]) -> KusnerConfig:
    """Validate a plain mapping into the section of its ``algorithm`` (default 3).

    Raises:
        InvalidParameter: an unknown key (or one of another algorithm), a bad value, an unknown algorithm.
    """
    algorithm = config.get("algorithm", 3)
    if algorithm not in (1, 2, 3) or isinstance(algorithm, bool):
        raise InvalidParameter(f"kusner-bo algorithm must be 1, 2 or 3, got {algorithm!r}")
    if algorithm == 3:
        return _algorithm3(config)
    return _gp(config, algorithm)


def _algorithm3(config: Mapping[str, Any]) -> Algorithm3Config:
    check_known_keys(config, _COMMON | _ALGORITHM3, "kusner-bo algorithm 3")
    lambdas = config.get("lambdas")
    if not isinstance(lambdas, (list, tuple)) or not lambdas:
        raise InvalidParameter("lambdas must be a non-empty list of positive numbers")
    validation_rows = check_count("validation_rows", config.get("validation_rows", 1000))
    proposer = config.get("proposer", "grid")
    if proposer not in PROPOSERS:
        raise InvalidParameter(f"unknown proposer {proposer!r}; known: {list(PROPOSERS)}")
    cfg = Algorithm3Config(
        lambdas=tuple(check_positive("lambda", v) for v in lambdas), loss=config.get("loss", "ramp"),
        epsilon=check_epsilon(config.get("epsilon", 1.0)), T=check_count("T", config.get("T", 10)),
        train_rows=check_count("train_rows", config.get("train_rows", 2000)), validation_rows=validation_rows,
        validation_size=check_count("validation_size", config.get("validation_size", validation_rows)),
        solver_tolerance=check_positive("solver_tolerance", config.get("solver_tolerance", DEFAULT_SOLVER_TOLERANCE)),
        proposer=proposer)
    get_loss(cfg.loss)
    return cfg


def _gp(config: Mapping[str, Any], algorithm: int) -> GpConfig:
    own = _ALGORITHM1 if algorithm == 1 else _ALGORITHM2
    check_known_keys(config, _COMMON | _GP | own, f"kusner-bo algorithm {algorithm}")
    d = GpConfig(algorithm=algorithm)
    kernel = KernelSpec(config.get("kernel", d.kernel.name), config.get("lengthscale", d.kernel.lengthscale))
    threshold = _range("threshold", config.get("threshold"), d.threshold)
    if not (threshold[0] > 0.0 and threshold[1] < 1.0):
        raise InvalidParameter(f"threshold must lie in (0, 1), got {threshold}")
    return GpConfig(
        algorithm=algorithm, epsilon=check_epsilon(config.get("epsilon", d.epsilon)),
        delta=check_delta(config.get("delta", d.delta), allow_zero=False),
        T=check_count("T", config.get("T", d.T), minimum=2 if algorithm == 2 else 1),
        k1=check_k1(config.get("k1", d.k1)), kernel=kernel,
        grid_points=check_count("grid_points", config.get("grid_points", d.grid_points)),
        gain_offset=float(check_nonnegative("gain_offset", config.get("gain_offset", d.gain_offset))),
        gain_scale=check_positive("gain_scale", config.get("gain_scale", d.gain_scale)),
        sigma=check_positive("sigma", config.get("sigma", d.sigma)),
        A=check_nonnegative("A", config.get("A", d.A)), tau=check_positive("tau", config.get("tau", d.tau)),
        log10_learning_rate=_range("log10_learning_rate", config.get("log10_learning_rate"), d.log10_learning_rate),
        log10_lambda=_range("log10_lambda", config.get("log10_lambda"), d.log10_lambda), threshold=threshold,
        epochs=check_count("epochs", config.get("epochs", d.epochs)),
        batch_size=check_count("batch_size", config.get("batch_size", d.batch_size)),
        train_rows=check_count("train_rows", config.get("train_rows", d.train_rows)),
        validation_rows=check_count("validation_rows", config.get("validation_rows", d.validation_rows)))
