"""The ``kusner-bo`` configuration (Algorithm 3 on Adult): everything public, fixed before any data is read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_epsilon, check_known_keys, check_positive
from plugins.kusner_bo.algorithm3 import DEFAULT_SOLVER_TOLERANCE
from plugins.kusner_bo.losses import get_loss

_KEYS = {"algorithm", "lambdas", "loss", "epsilon", "T", "train_rows", "validation_rows", "validation_size",
         "solver_tolerance"}


@dataclass(frozen=True)
class KusnerConfig:
    """A ``kusner-bo`` run.

    Attributes:
        algorithm: 3 (Algorithms 1 and 2 are not implemented yet; docs/plugins/kusner-bo.md).
        lambdas: the public finite Λ of L2 weights, all > 0.
        loss: validation loss, "ramp" (L = 1) or "sigmoid" (L = 1/4).
        epsilon: ε of the one Laplace release.
        T: BO steps.
        train_rows: Adult records with id < train_rows form the public training set.
        validation_rows: the next ``validation_rows`` ids form the protected validation set.
        validation_size: the public m₀ the score averages over (default: ``validation_rows``).
        solver_tolerance: τ, the gradient norm every fitted model must reach.
    """

    lambdas: tuple[float, ...]
    loss: str = "ramp"
    epsilon: float = 1.0
    T: int = 10
    train_rows: int = 2000
    validation_rows: int = 1000
    validation_size: int = 1000
    solver_tolerance: float = DEFAULT_SOLVER_TOLERANCE
    algorithm: int = 3

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> KusnerConfig:
        """Validate a plain mapping.

        Raises:
            InvalidParameter: an unknown key, a bad value, or an algorithm other than 3.
        """
        check_known_keys(config, _KEYS, "kusner-bo")
        if config.get("algorithm", 3) != 3:
            raise InvalidParameter("kusner-bo implements Algorithm 3 only so far (Algorithms 1-2 are not done)")
        lambdas = config.get("lambdas")
        if not isinstance(lambdas, (list, tuple)) or not lambdas:
            raise InvalidParameter("lambdas must be a non-empty list of positive numbers")
        validation_rows = check_count("validation_rows", config.get("validation_rows", 1000))
        cfg = cls(lambdas=tuple(check_positive("lambda", v) for v in lambdas), loss=config.get("loss", "ramp"),
                  epsilon=check_epsilon(config.get("epsilon", 1.0)), T=check_count("T", config.get("T", 10)),
                  train_rows=check_count("train_rows", config.get("train_rows", 2000)),
                  validation_rows=validation_rows,
                  validation_size=check_count("validation_size", config.get("validation_size", validation_rows)),
                  solver_tolerance=check_positive("solver_tolerance",
                                                  config.get("solver_tolerance", DEFAULT_SOLVER_TOLERANCE)))
        get_loss(cfg.loss)
        return cfg
