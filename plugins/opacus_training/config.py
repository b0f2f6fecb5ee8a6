"""The plugin's configuration: a validated, frozen record of every public hyperparameter of a training run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_known_keys, check_positive
from dpaudit_plugins.opacus_training.models import MODEL_KINDS
from dpaudit_plugins.opacus_training.training import OPTIMIZERS

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
    """

    model: str = "logreg"
    hidden: int = 64
    optimizer: str = "sgd"
    lr: float = 1.0
    epochs: int = 3
    batch_size: int = 256
    max_grad_norm: float = 1.0
    noise_multiplier: float = 1.0
    data: str = "adult"
    train_rows: int | None = None
    test_rows: int | None = None

    def __post_init__(self) -> None:
        if self.model not in MODEL_KINDS:
            raise InvalidParameter(f"model must be one of {MODEL_KINDS}, got {self.model!r}")
        if self.optimizer not in OPTIMIZERS:
            raise InvalidParameter(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.data not in DATA_SETS:
            raise InvalidParameter(f"data must be one of {DATA_SETS}, got {self.data!r}")
        check_count("hidden", self.hidden)
        check_count("epochs", self.epochs)
        check_count("batch_size", self.batch_size)
        check_positive("lr", self.lr)
        check_positive("max_grad_norm", self.max_grad_norm)
        check_positive("noise_multiplier", self.noise_multiplier)
        for name in ("train_rows", "test_rows"):
            value = getattr(self, name)
            if value is not None:
                check_count(name, value)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> TrainingConfig:
        """Build from a plain mapping; unknown keys are refused (a typo must not silently fall back to a default).

        Raises:
            InvalidParameter: an unknown key or an out-of-domain value.
        """
        check_known_keys(config, (f.name for f in fields(cls)), "opacus-training")
        return cls(**dict(config))
