"""Candidate hyperparameter configurations for DP-SGD runs, as the tuning plugins use them.

A candidate is public and fixed before any data is seen: (lr, max_grad_norm C, noise_multiplier σ, epochs,
batch_size B). Its privacy is that of :func:`~dpaudit_plugins.opacus_training.training.dp_sgd_event` with q = B/n and
N = epochs × ⌊1/q⌋ steps; C scales the noise (σ·C) with the clipped gradients, so it does not change the privacy.
:class:`Candidate` is the one candidate type of every tuning plugin (``naive``, ``randtune``, ``constant-overhead``);
:func:`grid_envelope` is the one event that dominates every candidate of a grid.

Selection uses public data only: the public Adult test split is cut in two fixed halves, the first for validation
(scoring candidates) and the second as the final test set, so the score of a DP-trained model is a
post-processing of that model and costs no privacy.
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

from dpaudit.data.adult import TEST_NAME, TRAIN_NAME, AdultData, load_adult
from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.validation import check_count, check_positive
from dpaudit_plugins.opacus_training.models import MODEL_KINDS, build_model
from dpaudit_plugins.opacus_training.training import (
    OPTIMIZERS,
    TrainResult,
    dp_sgd_event,
    evaluate,
    plan_from_loader,
    train_private,
)

if TYPE_CHECKING:
    from dpaudit.session import Charge, Session

VALIDATION_NAME = f"{TEST_NAME} (first half: public validation)"
FINAL_TEST_NAME = f"{TEST_NAME} (second half: public final test)"
_SEED_RANGE = 2**63


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


def parse_candidates(raw: Sequence[Mapping[str, Any]]) -> tuple[Candidate, ...]:
    """The candidate grid from plain mappings.

    Raises:
        InvalidParameter: an empty grid or a bad candidate.
    """
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Sequence) or not raw:
        raise InvalidParameter("candidates must be a non-empty list of mappings")
    return tuple(Candidate.from_mapping(c) for c in raw)


@dataclass(frozen=True)
class TuningData:
    """The private training set and the two public halves of the evaluation split."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def tuning_data(train_rows: int | None, test_rows: int | None) -> TuningData:
    """Adult, with the public split cut in two fixed halves (validation first, final test second).

    Raises:
        InvalidParameter: fewer than 2 public records.
    """
    data: AdultData = load_adult(train_rows=train_rows, test_rows=test_rows)
    return TuningData(data.X_train, data.y_train, *split_public(data))


def split_public(data: AdultData) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_val, y_val, X_test, y_test): the first ⌊m/2⌋ public test records validate, the rest test.

    Raises:
        InvalidParameter: fewer than 2 public records.
    """
    half = len(data.y_test) // 2
    if half == 0:
        raise InvalidParameter("need at least 2 public evaluation records to split into validation and test")
    return data.X_test[:half], data.y_test[:half], data.X_test[half:], data.y_test[half:]


def candidate_event(candidate: Candidate, dataset_size: int, label: str) -> PoissonSubsampledGaussianEvent:
    """The event :func:`~dpaudit_plugins.opacus_training.training.train_private` charges for ``candidate`` on
    ``dataset_size`` records (its sampling plan is read off the same Opacus loader that training builds)."""
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
    (:func:`~dpaudit_plugins.opacus_training.training.parameter_dominated`; docs/accounting.md, "Envelope charges").

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


def check_model_options(model: str, hidden: int, optimizer: str) -> None:
    """Raises InvalidParameter for an unknown model / optimizer or a bad hidden width."""
    if model not in MODEL_KINDS:
        raise InvalidParameter(f"model must be one of {MODEL_KINDS}, got {model!r}")
    if optimizer not in OPTIMIZERS:
        raise InvalidParameter(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}")
    check_count("hidden", hidden)


def require_protected_train(session: Session, plugin: str) -> None:
    """Raises PluginError unless the session protects the Adult training set."""
    if TRAIN_NAME not in session.protected:
        raise PluginError(f"{plugin} trains on {TRAIN_NAME!r}; open the Session with it in protected= (got "
                          f"{session.protected})")


def train_candidate(session: Session, candidate: Candidate, data: TuningData, *, model: str, hidden: int,
                    optimizer: str, label: str, charge: Charge | None = None) -> TrainResult:
    """Initialise a model from a seed drawn from ``session.rng`` (data-independent) and train it with DP-SGD.

    Args:
        charge: None to charge this run's own event; or a repeat-and-select charge covering it (nothing is
            written to the ledger then).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(session.rng.randbelow(_SEED_RANGE))
        net = build_model(model, data.X_train.shape[1], hidden)
    return train_private(session, net, data.X_train, data.y_train, optimizer=optimizer, lr=candidate.lr,
                         epochs=candidate.epochs, batch_size=candidate.batch_size,
                         max_grad_norm=candidate.max_grad_norm, noise_multiplier=candidate.noise_multiplier,
                         label=label, charge=charge)


def accuracy(result: TrainResult, X: np.ndarray, y: np.ndarray, session: Session) -> float:
    """Accuracy of the trained model on PUBLIC data."""
    return evaluate(result.model, X, y, session.device)["test_accuracy"]
