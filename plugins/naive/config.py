"""The ``naive`` configuration: the public candidate grid and the model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.parallel import PARALLEL_KEYS, ParallelOptions
from dpaudit.tuning import DEFAULTS, OPTION_KEYS, Candidate, ModelOptions, parse_candidates
from dpaudit.validation import check_known_keys

_KEYS = OPTION_KEYS | PARALLEL_KEYS | {"candidates", "fit_budget"}


@dataclass(frozen=True)
class NaiveConfig:
    """Everything public that fixes a ``naive`` run before any data is seen (fields as in ``randtune``).

    Attributes:
        candidates: the grid; every candidate is trained.
        options: the model, optimiser and row limits (:class:`dpaudit.tuning.ModelOptions`).
        fit_budget: if the grid's composed cost exceeds the session budget, multiply every candidate's σ by one
            common factor, computed from public parameters before any data is used, so that it fits
            (:mod:`dpaudit_plugins.naive.noise_scale`). False: train the grid as given (``BudgetExceeded`` once the
            budget runs out).
        parallel: where the candidates are trained (``workers``, ``ray_address``;
            :class:`dpaudit.parallel.ParallelOptions`); no effect on any result or on what the ledger records.
    """

    candidates: tuple[Candidate, ...]
    options: ModelOptions = DEFAULTS
    fit_budget: bool = False
    parallel: ParallelOptions = ParallelOptions()

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> NaiveConfig:
        """Validate a plain mapping (the model options and their defaults are the tuning kit's).

        Raises:
            InvalidParameter: an unknown key or a bad value (``workers``, ``ray_address`` included).
        """
        check_known_keys(config, _KEYS, "naive")
        fit_budget = config.get("fit_budget", False)
        if not isinstance(fit_budget, bool):
            raise InvalidParameter(f"fit_budget must be true or false, got {fit_budget!r}")
        return cls(candidates=parse_candidates(config.get("candidates", ())),
                   options=ModelOptions.from_mapping(config), fit_budget=fit_budget,
                   parallel=ParallelOptions.from_mapping(config))
