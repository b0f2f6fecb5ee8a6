"""``dpaudit.tune`` (:func:`tune`): private hyperparameter selection over the user's own trainer and objective.

One call selects a setting with one of the tuning plugins' methods and returns the selected setting with its
trained model, everything charged to ``session`` and certified at its close::

    result = dpaudit.tune(session, method="randtune", space=space, train=train, score=accuracy,
                          score_range=(0.0, 1.0), dataset=train_set, gamma=0.5)

* the candidates are drawn from ``space`` (:mod:`dpaudit.tuning.space`) with the session's random source before any
  data is read, and recorded (the space and the draws) as ``info``;
* ``train(trial)`` builds and trains one model for ``trial.params`` through ``trial.make_private``
  (:class:`dpaudit.tuning.user.Trial`); every setting must fix ``batch_size``, ``epochs``, ``noise_multiplier`` and
  ``max_grad_norm``, so that every DP-SGD event is known up front;
* ``score(model)`` is the user's objective on PUBLIC validation data with the declared ``score_range``;
  ``maximize=False`` for a loss or an RMSE.

The selection logic is the plugins' own (their ``user`` modules): ``naive`` (every setting charged and released;
selection is post-processing), ``randtune`` (one repeat-and-select; Papernot & Steinke 2022) and
``constant-overhead`` (Ding et al. 2023, Alg. 1; the range rescales the objective to [0, 1], sensitivity 1/k).
docs/user-guide.md, "Tuning your own model", states each method's privacy argument. randtune and
constant-overhead need independent trials (``train`` keeps no state across calls): a warm start from an earlier
trial, a second DP-SGD run under one trial's cover are refused, constant-overhead puts back the objects a partition
model trained, and what cannot be checked is a conditional assumption listed in the certificate
(:class:`dpaudit.tuning.user.TrialHistory`); naive, where every run is charged and released, accepts warm starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from dpaudit.data.catalog import as_torch
from dpaudit.errors import InvalidParameter
from dpaudit.privacy_engine import GRAD_SAMPLE_MODES, training_assumptions
from dpaudit.tuning.space import SearchSpace, draw_settings
from dpaudit.tuning.user import PUBLIC_OBJECTIVE, Objective, Setting, Trial
from dpaudit.validation import check_known_keys

if TYPE_CHECKING:
    from dpaudit.session import Session

#: method → the plugin module holding its ``tune_user``, and the method's options with their defaults
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "naive": ("dpaudit_plugins.naive.user", {}),
    "randtune": ("dpaudit_plugins.randtune.user", {"distribution": "geometric", "gamma": None, "eta": None,
                                                   "mu": None}),
    "constant-overhead": ("dpaudit_plugins.constant_overhead.user", {"record_ids": None, "k": 10,
                                                                     "epsilon_round": 0.5, "t_max": 10, "u0": 0.5,
                                                                     "granularity": 0.05, "fallback": 0}),
}


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` returns.

    Attributes:
        method: the selection method.
        selected: the selected setting (``{"index": i, **params}``), None when randtune drew K = 0.
        model: the trained model of the selected setting (None with it).
        score: its objective on the public validation data.
        model_sha256: the digest released on its charge.
        settings: every candidate setting drawn from the space, in order.
        public: the method's public results (everything in it is covered by the certificate).
    """

    method: str
    selected: dict[str, Any] | None
    model: nn.Module | None
    score: float | None
    model_sha256: str | None
    settings: tuple[dict[str, Any], ...]
    public: dict[str, Any]


def training_data(view: Any, dataset: Any) -> tuple[Dataset, Any]:
    """The protected training records as a map-style torch Dataset, with their record ids where known.

    Args:
        view: the method's view of the session.
        dataset: the name of a protected data set the session declares (read through ``session.data``, its access
            recorded; a classification target becomes int64 class labels, a regression one stays float32), a
            map-style torch Dataset, or an ``(X, y)`` pair of arrays.

    Raises:
        InvalidParameter: an undeclared or public name, a Dataset without a length, X and y of different lengths.
    """
    if isinstance(dataset, str):
        if dataset not in view.protected:
            raise InvalidParameter(f"tune trains on a protected data set; the session protects "
                                   f"{list(view.protected)}, not {dataset!r}")
        data = view.data(dataset)
        if data.y is None:
            raise InvalidParameter(f"data set {dataset!r} has no target to train on")
        return as_torch(data), data.record_ids
    if isinstance(dataset, tuple) and len(dataset) == 2:
        X, y = (a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a)) for a in dataset)
        if len(X) != len(y):
            raise InvalidParameter(f"X and y differ in length ({len(X)} and {len(y)})")
        return TensorDataset(X, y), None
    if not isinstance(dataset, Dataset) or not hasattr(dataset, "__len__"):
        raise InvalidParameter("dataset must be a declared protected data-set name, a map-style torch Dataset "
                               "(with a length) or an (X, y) pair")
    return dataset, None


def candidate_settings(space: SearchSpace | Mapping[str, Any] | Sequence[Mapping[str, Any]],
                       rng: Any) -> tuple[Setting, ...]:
    """The candidate settings: drawn from a :class:`SearchSpace` (or its mapping form) with ``rng``, or an
    explicit list of settings.

    Raises:
        InvalidParameter: a bad space, no setting, or a setting without its DP-SGD parameters.
    """
    if isinstance(space, Mapping):
        space = SearchSpace.from_mapping(space)
    if isinstance(space, SearchSpace):
        drawn: Sequence[Mapping[str, Any]] = draw_settings(space, rng)
    elif isinstance(space, Sequence) and not isinstance(space, (str, bytes)) and space:
        drawn = space
    else:
        raise InvalidParameter("space must be a SearchSpace, its table, or a non-empty list of settings")
    return tuple(Setting.of(i, dict(s)) for i, s in enumerate(drawn))


def tune(session: Session, method: str = "constant-overhead", *,
         space: SearchSpace | Mapping[str, Any] | Sequence[Mapping[str, Any]],
         train: Callable[[Trial], nn.Module], score: Callable[[nn.Module], float],
         score_range: tuple[float, float], dataset: Any, maximize: bool = True, grad_sample_mode: str = "hooks",
         **options: Any) -> TuneResult:
    """Select a setting of ``space`` for the user's ``train`` by ``score`` with ``method`` (module docstring).

    Args:
        session: an open add/remove :class:`~dpaudit.session.Session`.
        method: ``"naive"``, ``"randtune"`` or ``"constant-overhead"``.
        space: a :class:`~dpaudit.tuning.space.SearchSpace`, its table, or an explicit list of settings.
        train: ``train(trial) -> model``, training through ``trial.make_private``.
        score: ``score(model) -> float`` on PUBLIC validation data.
        score_range: the declared (low, high) range of ``score``.
        dataset: the protected training records: the name of a protected data set the session declares
            (``Session(data=[...])`` or a shipped set such as ``"mnist-5000-train"``), a map-style torch Dataset or
            an ``(X, y)`` pair (:func:`training_data`).
        maximize: whether a larger score is better.
        grad_sample_mode: ``"hooks"``, ``"functorch"`` or ``"ghost"`` (as in ``make_private``).
        options: the method's options: randtune ``distribution`` with ``gamma`` / ``eta`` / ``mu`` (as the
            plugin's configuration); constant-overhead ``record_ids`` (one unique non-negative integer per record,
            stable under adding or removing records; taken from a named data set when it has them), ``k``,
            ``epsilon_round``, ``t_max``, ``u0``, ``granularity``, ``fallback``.

    Raises:
        InvalidParameter: an unknown method or option, a bad space, objective or dataset.
        BudgetExceeded: the session cannot pay for the method's plan (nothing is trained).
    """
    if method not in METHODS:
        raise InvalidParameter(f"method must be one of {sorted(METHODS)}, got {method!r}")
    module_name, defaults = METHODS[method]
    check_known_keys(options, defaults, f"tune(method={method!r})")
    if grad_sample_mode not in GRAD_SAMPLE_MODES:
        raise InvalidParameter(f"grad_sample_mode must be one of {GRAD_SAMPLE_MODES}, got {grad_sample_mode!r}")
    if not callable(train):
        raise InvalidParameter("train must be a callable trial -> model")
    if not (isinstance(score_range, Sequence) and len(score_range) == 2):
        raise InvalidParameter("score_range must be a (low, high) pair")
    objective = Objective(score, score_range[0], score_range[1], maximize)
    if isinstance(space, Mapping):  # parsed once: drawn from below and recorded in the info record
        space = SearchSpace.from_mapping(space)
    settings = candidate_settings(space, session.rng)
    user = importlib.import_module(module_name)
    view = session.for_plugin(user.PLUGIN_NAME, user.VERSION)
    data, record_ids = training_data(view, dataset)
    view.record_info({"space": space.to_dict() if isinstance(space, SearchSpace) else "explicit list",
                      "settings": [s.to_dict() for s in settings], "dataset_size": len(data),
                      "grad_sample_mode": grad_sample_mode, "objective": objective.to_dict()})
    chosen = {**defaults, **options}
    kwargs: dict[str, Any] = {"dataset": data, "grad_sample_mode": grad_sample_mode,
                              "assumptions": (*training_assumptions(grad_sample_mode), PUBLIC_OBJECTIVE)}
    if method == "randtune":
        kwargs["distribution"] = chosen["distribution"]
        kwargs["parameters"] = {k: chosen[k] for k in ("gamma", "eta", "mu") if chosen[k] is not None}
    elif method == "constant-overhead":
        if chosen["record_ids"] is None:
            chosen["record_ids"] = record_ids
        if chosen["record_ids"] is None:
            raise InvalidParameter("constant-overhead needs record_ids: one unique non-negative integer per record "
                                   "that adding or removing another record does not change (row positions do not "
                                   "qualify; docs/plugins/constant-overhead.md, 'Partitioning')")
        kwargs.update(chosen)
    out = user.tune_user(session, settings, train, objective, **kwargs)
    public = out["public"]
    return TuneResult(method=method, selected=public["selected"], model=out["model"], score=public["score"],
                      model_sha256=public["model_sha256"], settings=tuple(s.to_dict() for s in settings),
                      public=public)
