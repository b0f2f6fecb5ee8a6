"""Tuning over the user's own trainer: one hyperparameter setting trained through ``make_private``, scored by the
user's objective on public data (``dpaudit.tune``; docs/user-guide.md, "Tuning").

The user's ``train(trial)`` builds a model for ``trial.params``, wraps it with ``trial.make_private(module=…,
optimizer=…, data_loader=DataLoader(trial.dataset, batch_size=…))`` and trains it with any loop and loss. What
``trial.make_private`` does depends on the run the selection method gives it (:class:`Trial`):

* ``charged``: a :class:`~dpaudit.privacy_engine.PrivacyEngine` charges the setting's own DP-SGD event (naive);
* ``covered``: the run is paid for by a charge made before any data was used, checked to dominate the run
  (:func:`~dpaudit.accounting.dominance.covers`): a repeat-and-select (randtune: the repetition writes nothing to the
  ledger) or an unused envelope (constant-overhead's final training: recorded and released against it);
* ``partition``: a model whose only output is a utility answered through AboveThreshold (constant-overhead's
  partition models, Ding et al. 2023 Alg. 1 l. 5 "Train"): the user's objects come back unwrapped with a seeded
  shuffled loader over the partition, and nothing is charged or recorded (the rounds' noise covers the utility).

The DP-SGD parameters of a setting are public and fixed before any data is read: every setting holds
``batch_size``, ``epochs``, ``noise_multiplier`` and ``max_grad_norm`` (from the search space, or fixed values in
it), so each setting's event (:func:`setting_event`) is known up front; ``trial.make_private`` refuses anything else
(another loader, batch size, σ, C or epoch count, or ``target_epsilon``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from opacus.data_loader import DPDataLoader
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from dpaudit.errors import InvalidParameter, PluginError, UncoveredRelease
from dpaudit.events import PoissonSubsampledGaussianEvent, RepeatAndSelectEvent
from dpaudit.plugin_session import PluginSession
from dpaudit.sensitivity import Assumption
from dpaudit.tuning.space import SearchSpace
from dpaudit.tuning.training import check_covered, dp_sgd_event, plan_from_loader, state_dict_sha256
from dpaudit.validation import check_count, check_finite, check_positive

if TYPE_CHECKING:
    from dpaudit.privacy_engine import PrivacyEngine
    from dpaudit.session import Charge, Session

#: the keys every setting must hold: they fix its DP-SGD event before any data is read
PRIVACY_KEYS = ("batch_size", "epochs", "noise_multiplier", "max_grad_norm")
MODES = ("charged", "covered", "partition")

PUBLIC_OBJECTIVE = Assumption(
    id="public-objective",
    statement="The tuning objective score(model) reads only the model and public validation data, never the "
    "protected training records: its values are released (logged, compared, thresholded) as functions of the "
    "trained models alone. A score computed on training data is an unaccounted query of it.",
    conditional=True,
    source="Papernot & Steinke 2022 (ICLR), Sec. 3; Ding et al. 2023, Alg. 1 (utility on a public validation set)",
)


@dataclass(frozen=True)
class Objective:
    """The user's objective: ``fn(model) -> float`` on PUBLIC validation data, with a declared range.

    Attributes:
        fn: the objective (accuracy, loss, RMSE, ...); it must read public data only.
        low, high: the declared range [low, high] of ``fn``'s values.
        maximize: True if larger is better (accuracy), False if smaller is (loss, RMSE).
    """

    fn: Callable[[nn.Module], float]
    low: float
    high: float
    maximize: bool = True

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise InvalidParameter("score must be a callable model -> float")
        low, high = check_finite("score_range low", self.low), check_finite("score_range high", self.high)
        if not low < high:
            raise InvalidParameter(f"score_range must be (low, high) with low < high, got ({low}, {high})")
        if not isinstance(self.maximize, bool):
            raise InvalidParameter("maximize must be true or false")

    def value(self, model: nn.Module) -> float:
        """The objective of ``model``, as a float (NaN is kept: callers refuse or order it)."""
        value = self.fn(model)
        if isinstance(value, torch.Tensor):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidParameter(f"score returned {type(value).__name__}, not a number")
        return float(value)

    def utility(self, value: float) -> float:
        """``value`` mapped to the unit scale, larger is better: (v − low)/(high − low), or (high − v)/(high −
        low) when minimising. Unclipped: values outside the range (and NaN) are left for the caller
        (:func:`dpaudit_plugins.constant_overhead.utility.aggregate_utility` clips to [0, 1], NaN counting as 0)."""
        span = self.high - self.low
        return (value - self.low) / span if self.maximize else (self.high - value) / span

    def key(self, value: float) -> float:
        """The selection key of a score: larger is better; NaN ranks below every number."""
        return -math.inf if math.isnan(value) else (value if self.maximize else -value)

    def to_dict(self) -> dict[str, Any]:
        return {"range": [self.low, self.high], "maximize": self.maximize,
                "name": getattr(self.fn, "__qualname__", type(self.fn).__name__)}


@dataclass(frozen=True)
class Setting:
    """One candidate setting (hashable, for the selection loops): its index in the drawn list and its values."""

    index: int
    items: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, index: int, params: Mapping[str, Any]) -> Setting:
        check_setting(params)
        return cls(index, tuple(sorted(params.items())))

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.items)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, **self.params}


def check_setting(params: Mapping[str, Any]) -> None:
    """A setting fixes its DP-SGD parameters (module docstring).

    Raises:
        InvalidParameter: a missing or out-of-domain privacy key.
    """
    missing = [k for k in PRIVACY_KEYS if k not in params]
    if missing:
        raise InvalidParameter(f"every setting must fix {list(PRIVACY_KEYS)} (in the search space or as fixed "
                               f"values); missing {missing}")
    check_count("batch_size", params["batch_size"])
    check_count("epochs", params["epochs"])
    check_positive("noise_multiplier", params["noise_multiplier"])
    check_positive("max_grad_norm", params["max_grad_norm"])


def check_space(space: SearchSpace) -> None:
    """Every setting ``space`` can produce fixes valid DP-SGD parameters (checked on each choice of a categorical
    parameter and on both ends of a range), so a study is refused before its run opens.

    Raises:
        InvalidParameter: a missing privacy key or a value out of its domain, naming the parameter.
    """
    by_name = {p.name: p for p in space.parameters}
    missing = [k for k in PRIVACY_KEYS if k not in by_name]
    if missing:
        raise InvalidParameter(f"every setting must fix {list(PRIVACY_KEYS)} (in the search space or as fixed "
                               f"values); missing {missing}")
    for key in PRIVACY_KEYS:
        p = by_name[key]
        values = p.choices if p.kind == "categorical" else (p.low, p.high)
        if key in ("batch_size", "epochs") and p.kind == "float":
            raise InvalidParameter(f"{key} must be an integer parameter (int = true)")
        for value in values:
            try:
                (check_count if key in ("batch_size", "epochs") else check_positive)(key, value)
            except InvalidParameter as exc:
                raise InvalidParameter(f"parameter {key!r}: {exc}") from exc


def setting_event(params: Mapping[str, Any], dataset_size: int, label: str,
                  assumptions: tuple[Any, ...]) -> PoissonSubsampledGaussianEvent:
    """The DP-SGD event ``make_private`` charges for a setting on ``dataset_size`` records (its plan read off the
    same Opacus Poisson loader at q = B/n), from public quantities only."""
    check_setting(params)
    n = check_count("dataset_size", dataset_size)
    if params["batch_size"] > n:
        raise InvalidParameter(f"batch_size {params['batch_size']} exceeds the {n} training records")
    loader = DPDataLoader(TensorDataset(torch.zeros(n, 1)), sample_rate=params["batch_size"] / n)
    return dp_sgd_event(plan_from_loader(loader, params["epochs"]), noise_multiplier=params["noise_multiplier"],
                        max_grad_norm=params["max_grad_norm"], label=label, assumptions=assumptions)


class CoveredView(PluginSession):
    """A plugin's view in which the DP-SGD run's own charge is replaced by an existing charge that covers it.

    ``charge`` returns the covering charge after checking that it dominates the run (never a new ledger record).
    Under a repeat-and-select the repetition writes nothing (no claim, info or release: only the best repetition
    is released, by the selection); under an envelope the run claims it and is recorded and released against it.
    """

    def __init__(self, session: Session, name: str, version: str, cover: Charge) -> None:
        super().__init__(session, name, version)
        self._cover = cover
        self._repetition = isinstance(cover.event, RepeatAndSelectEvent)

    def charge(self, event: PoissonSubsampledGaussianEvent, *, mechanism: str) -> Charge:  # type: ignore[override]
        check_covered(self._cover.event, event)
        return self._cover

    def claim(self, charge: Charge) -> None:
        if not self._repetition:
            super().claim(charge)

    def record_info(self, body: Mapping[str, Any]) -> None:
        if not self._repetition:
            super().record_info(body)

    def record_release(self, charge: Charge, output: Any) -> None:
        if not self._repetition:
            super().record_release(charge, output)


@dataclass
class Trial:
    """What the user's ``train`` receives: one setting, the data it may train on, and ``make_private``.

    Attributes:
        params: the setting (hyperparameter name → value).
        dataset: the private training records of this run (the whole set, or one partition).
        device: the session's device.
        mode: ``"charged"``, ``"covered"`` or ``"partition"`` (module docstring).
        seed: ``partition`` mode: the seed of the shuffle (public, data-independent).
        assumptions: ``charged`` mode: the run's assumptions beyond the kit's (the charge lists them).
    """

    params: dict[str, Any]
    dataset: Dataset
    device: torch.device
    mode: str
    view: PluginSession | None = None
    grad_sample_mode: str = "hooks"
    seed: int = 0
    assumptions: tuple[Assumption, ...] = ()
    engine: PrivacyEngine | None = field(default=None, init=False)
    _called: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidParameter(f"trial mode must be one of {MODES}, got {self.mode!r}")

    def make_private(self, *, module: nn.Module, optimizer: torch.optim.Optimizer, data_loader: DataLoader,
                     **kwargs: Any) -> tuple[Any, ...]:
        """``make_private`` for this setting: ``epochs``, ``max_grad_norm`` and ``noise_multiplier`` come from
        ``params`` (passing them is allowed only with the same values); the loader must iterate ``dataset`` with
        ``batch_size = params["batch_size"]``. Returns what :meth:`~dpaudit.privacy_engine.PrivacyEngine.make_private`
        returns.

        Raises:
            InvalidParameter: a second call, another loader or batch size, another σ, C or epoch count,
                ``target_epsilon``, another ``grad_sample_mode``.
        """
        if self._called:
            raise InvalidParameter("trial.make_private trains one model per setting; call it once")
        if not isinstance(data_loader, DataLoader) or data_loader.dataset is not self.dataset:
            raise InvalidParameter("the data loader must iterate trial.dataset (DataLoader(trial.dataset, "
                                   "batch_size=trial.params['batch_size']))")
        if data_loader.batch_size != self.params["batch_size"]:
            raise InvalidParameter(f"the loader's batch_size {data_loader.batch_size} is not the setting's "
                                   f"{self.params['batch_size']}")
        if "target_epsilon" in kwargs or "target_delta" in kwargs:
            raise InvalidParameter("a tuned setting fixes noise_multiplier; target_epsilon is not accepted here")
        if kwargs.setdefault("grad_sample_mode", self.grad_sample_mode) != self.grad_sample_mode:
            raise InvalidParameter(f"this tuning run trains with grad_sample_mode={self.grad_sample_mode!r}")
        for key in ("epochs", "max_grad_norm", "noise_multiplier"):
            if kwargs.setdefault(key, self.params[key]) != self.params[key]:
                raise InvalidParameter(f"{key}={kwargs[key]!r} differs from the setting's {self.params[key]!r}")
        self._called = True
        if self.mode == "partition":
            generator = torch.Generator().manual_seed(self.seed)
            loader = DataLoader(self.dataset, batch_size=self.params["batch_size"], shuffle=True,
                                generator=generator, collate_fn=data_loader.collate_fn)
            if self.grad_sample_mode == "ghost":
                return module, optimizer, kwargs.get("criterion") or nn.CrossEntropyLoss(), loader
            return module, optimizer, loader
        from dpaudit.privacy_engine import PrivacyEngine  # the engine imports the kit: import it on use

        self.engine = PrivacyEngine(self.view, assumptions=self.assumptions)
        return self.engine.make_private(module=module, optimizer=optimizer, data_loader=data_loader, **kwargs)


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside an Opacus wrapper (or ``model`` itself)."""
    return getattr(model, "_module", model)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """torch's global generators seeded with ``seed`` inside, restored afterwards (model initialisation in the
    user's ``train`` becomes a function of public data)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def run_trial(train: Callable[[Trial], nn.Module], trial: Trial) -> tuple[nn.Module, str | None]:
    """Call the user's ``train`` and check what it returns.

    Returns:
        The trained model and, outside ``partition`` mode, the digest its engine released.

    Raises:
        PluginError: ``train`` did not call ``trial.make_private`` or returned no module.
        UncoveredRelease: the returned model is not the one trained under the charge.
    """
    model = train(trial)
    if not isinstance(model, nn.Module):
        raise PluginError(f"train must return the trained torch module, got {type(model).__name__}")
    if not trial._called:
        raise PluginError("train must train its model through trial.make_private(...)")
    if trial.mode == "partition":
        return model, None
    assert trial.engine is not None
    digest = trial.engine.release_model()
    if state_dict_sha256(unwrap(model)) != digest:
        raise UncoveredRelease("train returned a model other than the one trained under trial.make_private")
    return model, digest
