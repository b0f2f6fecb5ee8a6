"""Candidate hyperparameter configurations for DP-SGD runs, as every tuning plugin uses them.

A candidate is public and fixed before any data is seen: (lr, max_grad_norm C, noise_multiplier σ, epochs,
batch_size B). Its privacy is that of :func:`~dpaudit.tuning.training.dp_sgd_event` with q = B/n and
N = epochs × ⌊1/q⌋ steps; C scales the noise (σ·C) with the clipped gradients, so it does not change the privacy.
:func:`grid_envelope` is the one event that dominates every candidate of a grid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from opacus.data_loader import DPDataLoader
from torch.utils.data import TensorDataset

from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.tuning.models import seeded_model
from dpaudit.tuning.seeds import draw_seed
from dpaudit.tuning.training import TrainResult, dp_sgd_event, evaluate, plan_from_loader, train_private
from dpaudit.validation import check_count, check_positive

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge
    from dpaudit.tuning.data import TuningData
    from dpaudit.tuning.options import ModelOptions

SEEDS_PER_TRAINING = 3
"""The seeds one :func:`train_candidate` draws from its session's randomness: the model's initialisation, then the
Poisson sampler's and the noise generator's (:func:`~dpaudit.tuning.training.train_private`)."""


@dataclass(frozen=True)
class Candidate:
    """One DP-SGD configuration.

    Attributes:
        lr: learning rate.
        max_grad_norm: per-example clipping norm C.
        noise_multiplier: σ.
        epochs: passes over the data.
        batch_size: expected Poisson batch size B.
    """

    lr: float
    max_grad_norm: float
    noise_multiplier: float
    epochs: int
    batch_size: int

    def __post_init__(self) -> None:
        for name in ("lr", "max_grad_norm", "noise_multiplier"):
            object.__setattr__(self, name, check_positive(name, getattr(self, name)))
        check_count("epochs", self.epochs)
        check_count("batch_size", self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> Candidate:
        """Build from a plain mapping with exactly the five keys.

        Raises:
            InvalidParameter: not a mapping, an unknown or missing key, or an out-of-domain value.
        """
        if not isinstance(raw, Mapping):
            raise InvalidParameter(f"a candidate must be a mapping, got {type(raw).__name__}")
        names = {f.name for f in fields(cls)}
        if set(raw) != names:
            raise InvalidParameter(f"a candidate needs exactly the keys {sorted(names)}, got {sorted(raw)}")
        return cls(**dict(raw))


def parse_candidates(raw: Sequence[Mapping[str, Any] | Candidate]) -> tuple[Candidate, ...]:
    """The candidate grid from plain mappings (or candidates).

    Raises:
        InvalidParameter: an empty grid or a bad candidate.
    """
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Sequence) or not raw:
        raise InvalidParameter("candidates must be a non-empty list of mappings")
    return tuple(c if isinstance(c, Candidate) else Candidate.from_mapping(c) for c in raw)


def candidate_event(candidate: Candidate, dataset_size: int, label: str) -> PoissonSubsampledGaussianEvent:
    """The event :func:`~dpaudit.tuning.training.train_private` charges for ``candidate`` on ``dataset_size``
    records (its sampling plan is read off the same Opacus loader that training builds)."""
    check_count("dataset_size", dataset_size)
    if candidate.batch_size > dataset_size:
        raise InvalidParameter(f"batch_size {candidate.batch_size} exceeds the {dataset_size} training records")
    loader = DPDataLoader(TensorDataset(torch.zeros(dataset_size, 1)), sample_rate=candidate.batch_size / dataset_size)
    plan = plan_from_loader(loader, candidate.epochs)
    return dp_sgd_event(plan, noise_multiplier=candidate.noise_multiplier, max_grad_norm=candidate.max_grad_norm,
                        label=label)


def envelope_event(events: Sequence[PoissonSubsampledGaussianEvent], label: str) -> PoissonSubsampledGaussianEvent:
    """The envelope of a grid's DP-SGD events: the largest sample rate q, the smallest noise multiplier σ and the
    most steps N among them, which dominates each of them parameter-wise
    (:func:`~dpaudit.accounting.dominance.parameter_dominated`; docs/accounting.md, "Envelope charges").

    Its sensitivity and assumptions are those of the event with the largest clipping norm (the clipping norm does
    not enter the privacy: each run's noise is σ times its own norm).

    Raises:
        PluginError: no event, or events about different neighbouring relations.
    """
    if not events:
        raise PluginError("the envelope of an empty grid is undefined")
    if len({e.neighbouring for e in events}) > 1:
        raise PluginError("the grid's events use different neighbouring relations")
    widest = max(events, key=lambda e: e.sensitivity.value)
    return dataclasses.replace(widest, label=label, sample_rate=max(e.sample_rate for e in events),
                               noise_multiplier=min(e.noise_multiplier for e in events),
                               steps=max(e.steps for e in events))


def grid_envelope(candidates: Sequence[Candidate], dataset_size: int, label: str) -> PoissonSubsampledGaussianEvent:
    """:func:`envelope_event` of the candidates' trainings on ``dataset_size`` records (public quantities only).

    Raises:
        PluginError: an empty grid.
        InvalidParameter: a batch size above ``dataset_size``.
    """
    return envelope_event([candidate_event(c, dataset_size, label) for c in candidates], label)


def train_candidate(session: PluginSession, candidate: Candidate, data: TuningData, options: ModelOptions, *,
                    label: str, charge: Charge | None = None, claimed: bool = False) -> TrainResult:
    """Initialise a model from a seed drawn from ``session.rng`` (data-independent) and train it with DP-SGD.

    Args:
        options: the model family, width and optimiser (the row limits were applied when ``data`` was read).
        charge: None to charge this run's own event; or a repeat-and-select charge covering it (nothing is
            written to the ledger then), or an unused envelope.
        claimed: ``charge`` is this run's own event, charged and claimed by the caller, who writes the returned
            :attr:`~dpaudit.tuning.training.TrainResult.pending` record
            (:func:`~dpaudit.tuning.training.train_private`).
    """
    net = seeded_model(options.model, data.X_train.shape[1], options.hidden, draw_seed(session.rng))
    return train_private(session, net, data.X_train, data.y_train, optimizer=options.optimizer, lr=candidate.lr,
                         epochs=candidate.epochs, batch_size=candidate.batch_size,
                         max_grad_norm=candidate.max_grad_norm, noise_multiplier=candidate.noise_multiplier,
                         label=label, charge=charge, claimed=claimed)


def accuracy(result: TrainResult, X: np.ndarray, y: np.ndarray, session: PluginSession) -> float:
    """Accuracy of the trained model on PUBLIC data."""
    return evaluate(result.model, X, y, session.device)["test_accuracy"]
