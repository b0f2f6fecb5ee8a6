"""The plugin's configuration: a validated, frozen record of every public hyperparameter of a training run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.tuning import DEFAULTS, ModelOptions
from dpaudit.validation import check_count, check_known_keys, check_positive

DATA_SETS = ("adult",)


@dataclass(frozen=True)
class TrainingConfig:
    """Hyperparameters of one run; all are public and chosen before the data is touched.

    Attributes:
        model: ``"logreg"`` or ``"mlp"``.
        hidden: hidden width of the MLP.
        optimizer: ``"sgd"`` (DP-SGD) or ``"adam"`` (DP-Adam).
        lr: learning rate.
        epochs: passes over the data; fixes the charged step count.
        batch_size: expected Poisson batch size B (q = B / n).
        max_grad_norm: per-example clipping norm C.
        noise_multiplier: σ.
        data: the data set (``"adult"``).
        train_rows: use only training records with record id below this (None: all).
        test_rows: use only the first public evaluation records (None: all).

    The model options and their defaults are the tuning kit's (:class:`dpaudit.tuning.ModelOptions`).
    """

    model: str = DEFAULTS.model
    hidden: int = DEFAULTS.hidden
    optimizer: str = DEFAULTS.optimizer
    lr: float = 1.0
    epochs: int = 3
    batch_size: int = 256
    max_grad_norm: float = 1.0
    noise_multiplier: float = 1.0
    data: str = "adult"
    train_rows: int | None = DEFAULTS.train_rows
    test_rows: int | None = DEFAULTS.test_rows

    def __post_init__(self) -> None:
        if self.data not in DATA_SETS:
            raise InvalidParameter(f"data must be one of {DATA_SETS}, got {self.data!r}")
        if self.test_rows is not None:
            check_count("test_rows", self.test_rows)
        ModelOptions(model=self.model, hidden=self.hidden, optimizer=self.optimizer, train_rows=self.train_rows)
        check_count("epochs", self.epochs)
        check_count("batch_size", self.batch_size)
        check_positive("lr", self.lr)
        check_positive("max_grad_norm", self.max_grad_norm)
        check_positive("noise_multiplier", self.noise_multiplier)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> TrainingConfig:
        """Build from a plain mapping; unknown keys are refused (a typo must not silently fall back to a default).

        Raises:
            InvalidParameter: an unknown key or an out-of-domain value.
        """
        check_known_keys(config, (f.name for f in fields(cls)), "opacus-training")
        return cls(**dict(config))
