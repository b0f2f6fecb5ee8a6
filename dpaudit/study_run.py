"""Run a validated study (:mod:`dpaudit.study`): open the session on its data, build its trainer and objective, and
select and train with :func:`dpaudit.tuner.tune`.

The trainer is the Opacus tutorial loop over the study's built-in or factory model
(:mod:`dpaudit.tuning.networks`): ``trial.make_private`` on a fresh model, the study's optimizer at the setting's
``lr``, mean loss, ``epochs`` passes. The objective is the study's metric on the public validation set, read through
the session.

Before the session opens, :func:`check_model` builds the study's model once on the public validation set's schema
(its number of features and classes), so that a factory that raises, returns no module or cannot be allocated is
refused with one line before any run exists.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from torch import nn
from torch.utils.data import DataLoader

import dpaudit.data.sources as sources
from dpaudit.data.catalog import DataSet, load
from dpaudit.data.sources import DataSource
from dpaudit.errors import InvalidParameter
from dpaudit.mechanisms.randomness import RandomSource
from dpaudit.session import Session
from dpaudit.study import DataSpec, Study, StudyError
from dpaudit.tuner import TuneResult, tune
from dpaudit.tuning.networks import METRICS, OPTIMIZERS, build_network, loss_function, metric
from dpaudit.tuning.user import Trial


def _source(spec: DataSpec, role: str) -> DataSource | None:
    if spec.kind == "catalog":
        return None
    build = sources.csv if spec.kind == "csv" else sources.parquet
    return build(spec.name, spec.path, target=spec.target, features=spec.features, id_column=spec.id_column,
                 role=role, classes=spec.classes)


def _shape(study: Study, validation: DataSet) -> tuple[int, int]:
    """(features per record, model outputs) read off the public validation set's schema."""
    if validation.y is None:
        raise InvalidParameter(f"validation set {study.validation.name!r} has no target")
    n_outputs = validation.classes if study.loss == "cross_entropy" and validation.classes else 1
    return int(np.prod(validation.X.shape[1:])), n_outputs


def check_model(study: Study) -> None:
    """Build the study's model once on the public validation set's schema, before any run exists.

    Raises:
        StudyError: the validation set is refused (:func:`dpaudit.data.sources.load_source`), or the model cannot
            be built: a factory raises, returns no torch module, or the sizes cannot be allocated.
    """
    spec = study.validation
    try:
        validation = load(spec.name, {}) if spec.kind == "catalog" else sources.load_source(_source(spec, "public"))
        n_features, n_outputs = _shape(study, validation)
    except InvalidParameter as exc:
        raise StudyError(f"{study.path}: data.validation: {exc}") from None
    try:
        build_network(study.model, n_features, n_outputs, hidden=study.hidden, options=study.model_options)
    except Exception as exc:  # the user's factory or the allocation: any failure is the study's input
        text = " ".join(str(exc).split())[:300]
        raise StudyError(f"{study.path}: model: {study.model!r} cannot be built for {n_features} features and "
                         f"{n_outputs} outputs: {type(exc).__name__}{': ' + text if text else ''}") from None


def open_session(study: Study, *, rng: RandomSource | None, store: Any, tracking_uri: str | None,
                 mirror: bool = True) -> Session:
    """The study's session: its budget, accountant and tracking URI, its training set protected and its
    validation set public (files are loaded and checked before the ledger exists; the model is built once first,
    :func:`check_model`)."""
    check_model(study)
    data = [s for s in (_source(study.train, "protected"), _source(study.validation, "public")) if s is not None]
    return Session(study.epsilon, study.delta, study.name,
                   protected=[study.train.name] if study.train.kind == "catalog" else None,
                   public=[study.validation.name] if study.validation.kind == "catalog" else (),
                   data=data, accountant=study.accountant, rng=rng, store=store,
                   tracking_uri=study.tracking_uri or tracking_uri, mirror=mirror)


def run_study(study: Study, session: Session) -> TuneResult:
    """Select and train as ``study`` says, inside ``session`` (:func:`open_session`)."""
    validation = session.data(study.validation.name)
    n_features, n_outputs = _shape(study, validation)
    device = session.device
    X_val, y_val = (t.to(device) for t in validation.tensors())
    loss = loss_function(study.loss)
    criterion = nn.CrossEntropyLoss() if study.loss == "cross_entropy" else nn.MSELoss()

    def train(trial: Trial) -> nn.Module:
        # the schema is public (the values are not used); a partition may be empty
        features = int(np.prod(trial.dataset[0][0].shape)) if len(trial.dataset) else n_features
        if features != n_features:
            raise InvalidParameter(f"the training set has {features} features per record, the validation set "
                                   f"{n_features}: declare the same feature columns (and id_column) for both")
        model = build_network(study.model, n_features, n_outputs, hidden=study.hidden,
                              options=study.model_options).to(trial.device)
        optimizer = OPTIMIZERS[study.optimizer](model.parameters(), lr=trial.params["lr"])
        loader = DataLoader(trial.dataset, batch_size=trial.params["batch_size"])
        if study.grad_sample_mode == "ghost":
            model, optimizer, step_loss, loader = trial.make_private(module=model, optimizer=optimizer,
                                                                     data_loader=loader, criterion=criterion)
        else:
            model, optimizer, loader = trial.make_private(module=model, optimizer=optimizer, data_loader=loader)
            step_loss = loss
        with warnings.catch_warnings():
            # Opacus hooks the first layer, whose input needs no gradient; torch notes it on every backward pass
            warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
            for _ in range(trial.params["epochs"]):
                for xb, yb in loader:
                    optimizer.zero_grad()
                    step_loss(model(xb.to(trial.device)), yb.to(trial.device)).backward()
                    optimizer.step()
        return model

    def score(model: nn.Module) -> float:
        return metric(study.metric, model, X_val, y_val)

    return tune(session, study.method, space=study.space, train=train, score=score, score_range=study.score_range,
                maximize=METRICS[study.metric][1], dataset=study.train.name, grad_sample_mode=study.grad_sample_mode,
                **study.method_options)
