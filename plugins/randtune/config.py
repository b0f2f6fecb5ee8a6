"""The ``randtune`` configuration: the public candidate grid, the law of the number of repetitions, the model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.events import REPETITION_DISTRIBUTIONS
from dpaudit.parallel import PARALLEL_KEYS, ParallelOptions
from dpaudit.tuning import DEFAULTS, OPTION_KEYS, Candidate, ModelOptions, parse_candidates
from dpaudit.validation import check_known_keys

_KEYS = OPTION_KEYS | PARALLEL_KEYS | {"candidates", "distribution", "gamma", "eta", "mu"}


@dataclass(frozen=True)
class RandTuneConfig:
    """Everything public that fixes a ``randtune`` run before any data is seen.

    Attributes:
        candidates: the grid; each repetition trains one drawn uniformly at random.
        distribution: law of K, ``"geometric"``, ``"truncated_negative_binomial"`` or ``"poisson"``.
        parameters: the law's parameters (``gamma``; ``eta`` and ``gamma``; ``mu``).
        options: the model, optimiser and row limits (:class:`dpaudit.tuning.ModelOptions`; the public
            evaluation records are cut into validation and final-test halves).
        parallel: where the repetitions run (``workers``, ``ray_address``; :class:`dpaudit.parallel.ParallelOptions`);
            no effect on any result or record.
    """

    candidates: tuple[Candidate, ...]
    distribution: str
    parameters: Mapping[str, float]
    options: ModelOptions = DEFAULTS
    parallel: ParallelOptions = ParallelOptions()

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> RandTuneConfig:
        """Validate a plain mapping.

        Raises:
            InvalidParameter: an unknown key, a bad candidate, a law without its parameters or with others, a bad
                ``workers`` or ``ray_address``.
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
        return cls(candidates=parse_candidates(config.get("candidates", ())), distribution=distribution,
                   parameters={k: config[k] for k in needed}, options=ModelOptions.from_mapping(config),
                   parallel=ParallelOptions.from_mapping(config))
