"""The ``randtune`` configuration: the public candidate grid, the law of the number of repetitions, the model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.events import REPETITION_DISTRIBUTIONS
from dpaudit.validation import check_count, check_known_keys
from dpaudit_plugins.opacus_training.candidates import Candidate, check_model_options, parse_candidates

_KEYS = {"candidates", "distribution", "gamma", "eta", "mu", "model", "hidden", "optimizer", "train_rows",
         "test_rows"}


@dataclass(frozen=True)
class RandTuneConfig:
    """Everything public that fixes a ``randtune`` run before any data is seen.

    Attributes:
        candidates: the grid; each repetition trains one drawn uniformly at random.
        distribution: law of K, ``"geometric"``, ``"truncated_negative_binomial"`` or ``"poisson"``.
        parameters: the law's parameters (``gamma``; ``eta`` and ``gamma``; ``mu``).
        model, hidden, optimizer: the classifier and optimiser (as in ``opacus-training``).
        train_rows: use training records with record id below this (None: all).
        test_rows: use the first public evaluation records (None: all); halves: validation, final test.
    """

    candidates: tuple[Candidate, ...]
    distribution: str
    parameters: Mapping[str, float]
    model: str = "logreg"
    hidden: int = 64
    optimizer: str = "sgd"
    train_rows: int | None = None
    test_rows: int | None = None

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> RandTuneConfig:
        """Validate a plain mapping.

        Raises:
            InvalidParameter: an unknown key, a bad candidate, a law without its parameters or with others.
        """
        check_known_keys(config, _KEYS, "randtune")
        distribution = config.get("distribution", "geometric")
        needed = REPETITION_DISTRIBUTIONS.get(distribution)
        if needed is None:
            raise InvalidParameter(f"distribution must be one of {sorted(REPETITION_DISTRIBUTIONS)}, got "
                                   f"{distribution!r}")
        given = {k for k in ("gamma", "eta", "mu") if config.get(k) is not None}
        if given != set(needed):
            raise InvalidParameter(f"the {distribution} law takes exactly {sorted(needed)}, got {sorted(given)}")
        cfg = cls(candidates=parse_candidates(config.get("candidates", ())), distribution=distribution,
                  parameters={k: config[k] for k in needed}, model=config.get("model", "logreg"),
                  hidden=config.get("hidden", 64), optimizer=config.get("optimizer", "sgd"),
                  train_rows=config.get("train_rows"), test_rows=config.get("test_rows"))
        check_model_options(cfg.model, cfg.hidden, cfg.optimizer)
        for name in ("train_rows", "test_rows"):
            if getattr(cfg, name) is not None:
                check_count(name, getattr(cfg, name))
        return cfg
