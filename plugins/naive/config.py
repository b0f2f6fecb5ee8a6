"""The ``naive`` configuration: the public candidate grid and the model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_known_keys
from dpaudit_plugins.opacus_training.candidates import Candidate, check_model_options, parse_candidates

_KEYS = {"candidates", "model", "hidden", "optimizer", "train_rows", "test_rows", "fit_budget"}


@dataclass(frozen=True)
class NaiveConfig:
    """Everything public that fixes a ``naive`` run before any data is seen (fields as in ``randtune``).

    Attributes:
        fit_budget: if the grid's composed cost exceeds the session budget, multiply every candidate's σ by one
            common factor, computed from public parameters before any data is used, so that it fits
            (:mod:`dpaudit_plugins.naive.noise_scale`). False: train the grid as given (``BudgetExceeded`` once the
            budget runs out).
    """

    candidates: tuple[Candidate, ...]
    model: str = "logreg"
    hidden: int = 64
    optimizer: str = "sgd"
    train_rows: int | None = None
    test_rows: int | None = None
    fit_budget: bool = False

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> NaiveConfig:
        """Validate a plain mapping.

        Raises:
            InvalidParameter: an unknown key or a bad value.
        """
        check_known_keys(config, _KEYS, "naive")
        cfg = cls(candidates=parse_candidates(config.get("candidates", ())), model=config.get("model", "logreg"),
                  hidden=config.get("hidden", 64), optimizer=config.get("optimizer", "sgd"),
                  train_rows=config.get("train_rows"), test_rows=config.get("test_rows"),
                  fit_budget=config.get("fit_budget", False))
        if not isinstance(cfg.fit_budget, bool):
            raise InvalidParameter(f"fit_budget must be true or false, got {cfg.fit_budget!r}")
        check_model_options(cfg.model, cfg.hidden, cfg.optimizer)
        for name in ("train_rows", "test_rows"):
            if getattr(cfg, name) is not None:
                check_count(name, getattr(cfg, name))
        return cfg
