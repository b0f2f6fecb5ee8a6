"""The plugin's configuration: every public parameter of a run, fixed before the data is touched."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.parallel import ParallelOptions
from dpaudit.tuning import DEFAULTS, Candidate, ModelOptions
from dpaudit.validation import check_count, check_epsilon, check_known_keys, check_positive
from dpaudit_plugins.constant_overhead.candidates import check_candidate_set, default_grid
from dpaudit_plugins.constant_overhead.partition_training import MODES

PROPOSERS = ("grid", "local")
DATA_SETS = ("adult",)


@dataclass(frozen=True)
class ConstantOverheadConfig:
    """Parameters of one constant-overhead tuning-plus-training run (Ding et al. 2023, Alg. 1).

    Attributes:
        candidates: the search space S (initial grid); (σ, epochs, batch size) may vary, the final training is
            charged as the grid's envelope.
        k: number of partitions (utility sensitivity 1/k).
        epsilon_round: ϵ of one AboveThreshold iteration (the paper's ϵ).
        t_max: iteration cap, charged in full whatever the realised T.
        u0: utility lower bound u₀ ∈ [0, 1).
        granularity: g ∈ (0, 1).
        partition_training: ``"train"`` (non-private) or ``"privtrain"`` (DP-SGD on each partition, uncharged).
        proposer: ``"grid"`` (Alg. 1) or ``"local"`` (Sec. 4.1 with local perturbations).
        proposer_batch: candidates per batch of the local proposer once something has passed.
        proposer_scale: log-normal scale of the local proposer's perturbations.
        fallback: index in ``candidates`` of the candidate trained if nothing passes (fixed in advance).
        model, hidden: model family for partition models and the final model (defaults: the tuning kit's
            :data:`dpaudit.tuning.DEFAULTS`).
        data: the data set (``"adult"``).
        train_rows: keep only training records with id below this (None: all).
        test_rows: keep only the first public test records (None: all); split into validation and final test halves.
        workers, ray_address: where the grid's k·|S| partition models are trained before the loop
            (:class:`dpaudit.parallel.ParallelOptions`); no effect on any utility, result or record.
    """

    candidates: tuple[Candidate, ...] = field(default_factory=default_grid)
    k: int = 10
    epsilon_round: float = 0.5
    t_max: int = 10
    u0: float = 0.5
    granularity: float = 0.05
    partition_training: str = "train"
    proposer: str = "grid"
    proposer_batch: int = 8
    proposer_scale: float = 0.5
    fallback: int = 0
    model: str = DEFAULTS.model
    hidden: int = DEFAULTS.hidden
    data: str = "adult"
    train_rows: int | None = DEFAULTS.train_rows
    test_rows: int | None = DEFAULTS.test_rows
    workers: int = 1
    ray_address: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", check_candidate_set(self.candidates))
        check_count("k", self.k)
        check_epsilon(self.epsilon_round, "epsilon_round")
        check_count("t_max", self.t_max)
        if not 0.0 <= self.u0 < 1.0:
            raise InvalidParameter(f"u0 must lie in [0, 1), got {self.u0!r}")
        if not 0.0 < check_positive("granularity", self.granularity) < 1.0:
            raise InvalidParameter(f"granularity must lie in (0, 1), got {self.granularity!r}")
        for name, value, allowed in (("partition_training", self.partition_training, MODES),
                                     ("proposer", self.proposer, PROPOSERS),
                                     ("data", self.data, DATA_SETS)):
            if value not in allowed:
                raise InvalidParameter(f"{name} must be one of {allowed}, got {value!r}")
        check_count("proposer_batch", self.proposer_batch, minimum=2)
        check_positive("proposer_scale", self.proposer_scale)
        ModelOptions(model=self.model, hidden=self.hidden, train_rows=self.train_rows, test_rows=self.test_rows)
        self.parallel  # noqa: B018 - validates workers and ray_address
        if isinstance(self.fallback, bool) or not isinstance(self.fallback, int) or not (
                0 <= self.fallback < len(self.candidates)):
            raise InvalidParameter(f"fallback must index the candidates (0..{len(self.candidates) - 1}), "
                                   f"got {self.fallback!r}")

    @property
    def max_batch(self) -> int:
        """The most queries one round may answer (the rounds' ``max_queries``), fixed up front."""
        return len(self.candidates) if self.proposer == "grid" else max(len(self.candidates), self.proposer_batch)

    @property
    def parallel(self) -> ParallelOptions:
        """Where the partition models are trained (``workers``, ``ray_address``)."""
        return ParallelOptions(workers=self.workers, ray_address=self.ray_address)

    @property
    def fallback_candidate(self) -> Candidate:
        return self.candidates[self.fallback]

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> ConstantOverheadConfig:
        """Build from plain JSON-like data (``candidates`` as a list of mappings); unknown keys are refused.

        Raises:
            InvalidParameter: an unknown key or an out-of-domain value.
        """
        check_known_keys(config, (f.name for f in fields(cls)), "constant-overhead")
        values = dict(config)
        if "candidates" in values:
            raw = values["candidates"]
            if isinstance(raw, (str, bytes, Mapping)) or not hasattr(raw, "__iter__"):
                raise InvalidParameter("candidates must be a list of candidate mappings")
            values["candidates"] = tuple(c if isinstance(c, Candidate) else Candidate.from_mapping(c) for c in raw)
        return cls(**values)
