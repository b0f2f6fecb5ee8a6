"""The options every tuning plugin shares (model family, width, optimiser, row limits), with one set of defaults
and one parser, so that ``{"model": "mlp"}`` means the same thing in every plugin's configuration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.tuning.models import MODEL_KINDS
from dpaudit.tuning.training import OPTIMIZERS
from dpaudit.validation import check_count


@dataclass(frozen=True)
class ModelOptions:
    """The model and data options of a tuning run; all public, fixed before any data is read.

    Attributes:
        model: ``"logreg"`` or ``"mlp"``.
        hidden: hidden width of the MLP.
        optimizer: ``"sgd"`` (DP-SGD) or ``"adam"`` (DP-Adam).
        train_rows: use only training records with record id below this (None: all).
        test_rows: use only the first public evaluation records (None: all); at least 2 (they are cut into a
            validation and a final-test half).
    """

    model: str = "logreg"
    hidden: int = 64
    optimizer: str = "sgd"
    train_rows: int | None = None
    test_rows: int | None = None

    def __post_init__(self) -> None:
        if self.model not in MODEL_KINDS:
            raise InvalidParameter(f"model must be one of {MODEL_KINDS}, got {self.model!r}")
        if self.optimizer not in OPTIMIZERS:
            raise InvalidParameter(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {self.optimizer!r}")
        check_count("hidden", self.hidden)
        if self.train_rows is not None:
            check_count("train_rows", self.train_rows)
        if self.test_rows is not None:
            check_count("test_rows", self.test_rows, minimum=2)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> ModelOptions:
        """The options named in ``config`` (other keys are the caller's), defaults for the rest.

        Raises:
            InvalidParameter: an out-of-domain value.
        """
        return cls(**{f.name: config[f.name] for f in fields(cls) if f.name in config})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


OPTION_KEYS = frozenset(f.name for f in fields(ModelOptions))
"""The configuration keys :class:`ModelOptions` reads."""

DEFAULTS = ModelOptions()
"""The one set of defaults."""
