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
  Their state is snapshotted first and restored after the utility is read (:meth:`Trial.restore`), so a model or
  optimizer that outlives ``train`` leaves each partition model as it came: no partition's unnoised training
  reaches another partition's utility or the final, released run.

Independence across trials (:class:`TrialHistory`). A selection method whose guarantee needs its trials to be
independent (randtune's repetitions; constant-overhead's partition models and final run) refuses a trial whose
module or optimizer starts from a floating-point tensor an earlier trial of the run trained (a warm start through
``load_state_dict``), and randtune also one that holds a tensor object an earlier repetition trained or trains a
tensor an earlier repetition's model holds. The check runs when ``trial.make_private`` is called and again at the
trial's first optimizer step (the DP optimizer's, or in partition mode the user's own), before anything is applied,
so weights loaded right after ``make_private`` are refused too; at every later step and when ``train`` returns, a
tensor of the module or optimizer that is new or changed outside the optimizer since the previous step (a load
between steps or after the last) is checked against the earlier trials' values.
State kept elsewhere (globals, files, values derived from earlier models) cannot be checked: it is the conditional
assumption :data:`INDEPENDENT_REPETITIONS` / :data:`INDEPENDENT_PARTITION_MODELS`, listed with the method's charges.
A covered run's cover is handed out once (:class:`CoveredView`): a second DP-SGD run under one repetition or one
envelope is refused.

The DP-SGD parameters of a setting are public and fixed before any data is read: every setting holds
``batch_size``, ``epochs``, ``noise_multiplier`` and ``max_grad_norm`` (from the search space, or fixed values in
it), so each setting's event (:func:`setting_event`) is known up front; ``trial.make_private`` refuses anything else
(another loader, batch size, σ, C or epoch count, or ``target_epsilon``).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import threading
import types
import weakref
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

INDEPENDENT_REPETITIONS = Assumption(
    id="independent-repetitions",
    statement="Repetitions are independent: train() keeps no state across trials. Each repetition builds and trains "
    "its model from the setting, public data and fresh randomness only, never from an earlier repetition's model, "
    "optimizer or anything derived from them (a warm start makes the selected model the composition of several "
    "repetitions' DP-SGD runs, which the repeat-and-select charge of one run per repetition does not cover). "
    "dpaudit refuses a repetition that starts from a tensor an earlier repetition trained, that holds or trains a "
    "tensor of an earlier repetition's model, or that runs DP-SGD twice; state kept elsewhere (globals, files, "
    "values derived from earlier models) cannot be checked.",
    conditional=True,
    source="Papernot & Steinke 2022 (ICLR), Sec. 2-3 (the best of K independent runs of one algorithm); "
    "Liu & Talwar 2019",
)

INDEPENDENT_PARTITION_MODELS = Assumption(
    id="independent-partition-models",
    statement="train() keeps no state across trials: each partition model is built and trained from the setting, "
    "its own partition's records, public data and the public seed only, and the final (released) training does not "
    "start from or use anything a partition model learned. Otherwise a partition's objective depends on other "
    "partitions' records (the average's sensitivity 1/k fails) and the released model carries unnoised training "
    "on the data. dpaudit restores the module and optimizer handed to trial.make_private after each partition "
    "model and refuses a run that starts from a tensor an earlier trial trained; state kept elsewhere (globals, "
    "files, values derived from partition models) cannot be checked.",
    conditional=True,
    source="Ding et al. 2023, Alg. 1 l. 5 (each partition model trained on its partition alone) and Lemma 2",
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

    ``charge`` returns the covering charge after checking that it dominates the run (never a new ledger record),
    once: the cover pays for one DP-SGD run, so a second ``charge`` through the view (another
    ``PrivacyEngine(trial.view)``, a second ``make_private``) is refused. Make one view per covered run.
    Under a repeat-and-select the repetition writes nothing (no claim, info or release: only the best repetition
    is released, by the selection); under an envelope the run claims it and is recorded and released against it.
    """

    def __init__(self, session: Session, name: str, version: str, cover: Charge) -> None:
        super().__init__(session, name, version)
        self._cover = cover
        self._repetition = isinstance(cover.event, RepeatAndSelectEvent)
        self._lock = threading.Lock()
        self._used = False

    def charge(self, event: PoissonSubsampledGaussianEvent, *, mechanism: str) -> Charge:  # type: ignore[override]
        """The cover, for the first run it dominates; every later call is refused.

        Raises:
            PluginError: the cover does not dominate ``event``.
            UncoveredRelease: the cover already paid for a run.
        """
        with self._lock:
            if self._used:
                what = "one repetition" if self._repetition else "the selected setting's training"
                raise UncoveredRelease(f"charge {self._cover.seq} covers one DP-SGD run ({what}), already "
                                       "started: a second run (another PrivacyEngine(trial.view), a second "
                                       "make_private) is not paid for")
            check_covered(self._cover.event, event)
            self._used = True
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


def _tensors(module: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> list[torch.Tensor]:
    """The distinct parameters and buffers of ``module`` and the parameters ``optimizer`` updates, in order."""
    found: dict[int, torch.Tensor] = {}
    for t in module.parameters():
        found.setdefault(id(t), t)
    for t in module.buffers():
        found.setdefault(id(t), t)
    if optimizer is not None:
        for group in optimizer.param_groups:
            for t in group["params"]:
                found.setdefault(id(t), t)
    return list(found.values())


def _optimizer_state(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The floating-point tensors of ``optimizer``'s per-parameter state (momenta, second moments; not the step
    counters)."""
    return [v for state in optimizer.state.values() if isinstance(state, Mapping)
            for key, v in state.items() if key != "step" and isinstance(v, torch.Tensor) and _learnable(v)]


def _learnable(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _initial_constant(t: torch.Tensor) -> bool:
    """Whether ``t`` is all zeros or all ones, a common initialisation (a bias, a fresh momentum): such a value
    is not remembered as trained, so that a fresh model is never refused for it."""
    with torch.no_grad():
        return t.numel() > 0 and bool((t == 0).all() or (t == 1).all())


def tensor_sha256(t: torch.Tensor) -> str:
    """SHA-256 of one tensor's dtype, shape and raw bytes (C order, on the CPU)."""
    t = t.detach().to("cpu").contiguous()
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class TrialHistory:
    """What the earlier trials of one tuning run trained, so that a trial continuing from it is refused.

    Every trial's :meth:`Trial.make_private` calls :meth:`start` with the user's module and optimizer, and
    :func:`run_trial` calls :meth:`finish` once ``train`` returned. A floating-point tensor whose value a trial
    changed (a parameter, a buffer, an optimizer momentum; not one left all zeros or all ones, common initial
    values) is remembered by its digest; a later trial whose module or optimizer starts with one of these values
    is a warm start and is refused. With ``shared=False``
    (randtune: every repetition's model may be the one released) a later trial must also neither hold a tensor
    object an earlier trial changed nor change a tensor object an earlier trial's module holds (which would alter
    an earlier, possibly selected, model after its release). A fresh model per ``train`` call passes both checks;
    a module shared across calls passes them only where the method restores it in between (constant-overhead's
    partition models, :meth:`Trial.restore`).

    What this cannot see (state kept in globals or files, values derived from earlier models rather than copied)
    is the method's conditional assumption (:data:`INDEPENDENT_REPETITIONS`, :data:`INDEPENDENT_PARTITION_MODELS`).
    """

    def __init__(self, what: str, *, shared: bool) -> None:
        """``what``: the name of a trial in messages ("repetition", "trial"); ``shared``: whether later trials
        may share tensor objects with earlier ones (module docstring)."""
        self._what = what
        self._shared = shared
        self._trained: set[str] = set()
        self._changed: dict[int, weakref.ref[torch.Tensor]] = {}
        self._held: dict[int, weakref.ref[torch.Tensor]] = {}

    @staticmethod
    def _contains(refs: dict[int, weakref.ref[torch.Tensor]], t: torch.Tensor) -> bool:
        ref = refs.get(id(t))
        return ref is not None and ref() is t

    def start(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[int, tuple[torch.Tensor, str]]:
        """Check that a trial starts fresh; returns its starting digests for :meth:`finish`.

        Raises:
            PluginError: the module or optimizer starts from (or, unless ``shared``, holds) a tensor an earlier
                trial trained.
        """
        before: dict[int, tuple[torch.Tensor, str]] = {}
        for t in _tensors(module, optimizer):
            if not self._shared and self._contains(self._changed, t):
                raise PluginError(f"this {self._what}'s model holds a tensor an earlier {self._what} trained (a "
                                  f"module kept across train() calls): {self._what}s must be independent; build "
                                  "a new model in train()")
            if _learnable(t):
                digest = tensor_sha256(t)
                if digest in self._trained:
                    raise PluginError(f"this {self._what}'s model starts from a tensor an earlier {self._what} "
                                      f"trained (a warm start): {self._what}s must be independent; initialise "
                                      "each model afresh in train()")
                before[id(t)] = (t, digest)
            else:
                before[id(t)] = (t, "")
        for t in _optimizer_state(optimizer):
            if tensor_sha256(t) in self._trained:
                raise PluginError(f"this {self._what}'s optimizer starts from a state an earlier {self._what} "
                                  f"trained (a warm start): {self._what}s must be independent; make a new "
                                  "optimizer in train()")
        return before

    def check_loaded(self, tensors: list[torch.Tensor]) -> None:
        """Check tensors changed outside the optimizer during a trial (after its first step).

        Raises:
            PluginError: one of them now holds a value an earlier trial trained (a warm start mid-trial).
        """
        for t in tensors:
            if _learnable(t) and tensor_sha256(t) in self._trained:
                raise PluginError(f"this {self._what}'s model or optimizer was given a tensor an earlier "
                                  f"{self._what} trained, after its first optimizer step (a warm start): "
                                  f"{self._what}s must be independent; initialise each model afresh in train()")

    def finish(self, before: Mapping[int, tuple[torch.Tensor, str]], optimizer: torch.optim.Optimizer) -> None:
        """Remember what the trial that started with ``before`` trained.

        Raises:
            PluginError: unless ``shared``, the trial trained a tensor an earlier trial's module holds.
        """
        changed = [t for t, digest in before.values() if digest and tensor_sha256(t) != digest]
        if not self._shared and any(self._contains(self._held, t) for t in changed):
            raise PluginError(f"this {self._what} trained a tensor an earlier {self._what}'s model holds, changing "
                              f"that model after its release: {self._what}s must be independent; build a new "
                              "model in train()")
        self._trained.update(tensor_sha256(t) for t in (*changed, *_optimizer_state(optimizer))
                             if not _initial_constant(t))
        for t in changed:
            self._changed[id(t)] = weakref.ref(t)
        for t, _ in before.values():
            self._held[id(t)] = weakref.ref(t)


@dataclass
class _Snapshot:
    """The state of the objects handed to a partition-mode ``make_private``, to put back afterwards."""

    module: nn.Module
    optimizer: torch.optim.Optimizer
    tensors: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]]
    optimizer_state: dict[str, Any]
    modes: list[tuple[nn.Module, bool]]

    @classmethod
    def take(cls, module: nn.Module, optimizer: torch.optim.Optimizer) -> _Snapshot:
        tensors = [(t, t.detach().clone(), None if t.grad is None else t.grad.detach().clone(), t.requires_grad)
                   for t in _tensors(module, optimizer)]
        return cls(module, optimizer, tensors, copy.deepcopy(optimizer.state_dict()),
                   [(m, m.training) for m in module.modules()])

    def restore(self) -> None:
        """Put every tensor, gradient, flag and the optimizer's state back as they were.

        Raises:
            PluginError: ``train`` replaced the module's tensors or the optimizer's parameter groups, so the
                objects cannot be put back.
        """
        now = _tensors(self.module, self.optimizer)
        if [id(t) for t in now] != [id(t) for t, *_ in self.tensors]:
            raise PluginError("in partition mode train() replaced the parameters or buffers of the module it handed "
                              "to trial.make_private (or the optimizer's parameters): partition models are "
                              "trained on the objects handed over and then put back; build a new model in train()")
        with torch.no_grad():
            for t, value, grad, requires_grad in self.tensors:
                t.copy_(value)
                t.grad = grad
                t.requires_grad_(requires_grad)
        try:
            self.optimizer.load_state_dict(self.optimizer_state)
        except (ValueError, KeyError) as exc:
            raise PluginError(f"in partition mode train() changed the optimizer's parameter groups; it cannot be "
                              f"put back ({exc})") from exc
        for m, training in self.modes:
            m.train(training)


class _VirtualSteps:
    """Partition mode: ``BatchMemoryManager``'s virtual steps for the user's own optimizer, which
    ``trial.make_private`` hands back unwrapped (the partition models are trained without noise and never released;
    only their utility is, through AboveThreshold, so the run's Poisson accounting does not apply to them).

    ``signal_skip_step`` queues the skip flags as Opacus's ``DPOptimizer`` does; a skipped ``step()`` leaves the
    gradients where they are and the next ``zero_grad()`` keeps them, so a batch split into physical batches is
    stepped once, on the gradients summed over its physical batches (with a mean loss: the sum of their means).
    Installed on the optimizer object and removed by :meth:`Trial.restore`.
    """

    _NAMES = ("signal_skip_step", "step", "zero_grad")

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self._optimizer = optimizer
        self._skips: list[bool] = []
        self._skipped = False
        self._step, self._zero_grad = optimizer.step, optimizer.zero_grad
        self._saved: dict[str, Any] | None = None
        if not hasattr(optimizer, "signal_skip_step"):  # a plain torch optimizer
            self._saved = {name: vars(optimizer)[name] for name in self._NAMES if name in vars(optimizer)}
            for name in self._NAMES:
                setattr(optimizer, name, types.MethodType(self._forwarding(name), optimizer))

    def _forwarding(self, name: str) -> Callable[..., Any]:
        """A function for the optimizer's ``name`` that calls this object's, whatever it is bound to: torch's LR
        schedulers re-bind ``optimizer.step.__func__`` to the optimizer."""
        method = getattr(self, name)

        def forward(_optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return forward

    def signal_skip_step(self, do_skip: bool = True) -> None:
        self._skips.append(bool(do_skip))

    def step(self, closure: Any = None) -> Any:
        self._skipped = self._skips.pop(0) if self._skips else False
        return None if self._skipped else self._step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not self._skipped:
            self._zero_grad(set_to_none)

    def remove(self) -> None:
        """Put the optimizer's own ``step`` and ``zero_grad`` back."""
        saved, self._saved = self._saved, None
        if saved is not None:
            for name in self._NAMES:
                vars(self._optimizer).pop(name, None)
            vars(self._optimizer).update(saved)


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
        history: the run's :class:`TrialHistory` when its trials must be independent (randtune,
            constant-overhead), else None (naive: every run is charged and released, so one may continue another).
    """

    params: dict[str, Any]
    dataset: Dataset
    device: torch.device
    mode: str
    view: PluginSession | None = None
    grad_sample_mode: str = "hooks"
    seed: int = 0
    assumptions: tuple[Assumption, ...] = ()
    history: TrialHistory | None = None
    engine: PrivacyEngine | None = field(default=None, init=False)
    _called: bool = field(default=False, init=False)
    _module: nn.Module | None = field(default=None, init=False, repr=False)
    _optimizer: torch.optim.Optimizer | None = field(default=None, init=False, repr=False)
    _before: dict[int, tuple[torch.Tensor, str]] | None = field(default=None, init=False, repr=False)
    _snapshot: _Snapshot | None = field(default=None, init=False, repr=False)
    _stepped: bool = field(default=False, init=False, repr=False)
    _refused: str | None = field(default=None, init=False, repr=False)
    _versions: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _hooks: list[Any] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidParameter(f"trial mode must be one of {MODES}, got {self.mode!r}")

    def make_private(self, *, module: nn.Module, optimizer: torch.optim.Optimizer, data_loader: DataLoader,
                     **kwargs: Any) -> tuple[Any, ...]:
        """``make_private`` for this setting: ``epochs``, ``max_grad_norm`` and ``noise_multiplier`` come from
        ``params`` (passing them is allowed only with the same values); the loader must iterate ``dataset`` with
        ``batch_size = params["batch_size"]``. Returns what :meth:`~dpaudit.privacy_engine.PrivacyEngine.make_private`
        returns.

        In ``partition`` mode the module's and optimizer's state is snapshotted first and put back by
        :meth:`restore`; with a :class:`TrialHistory` the objects must start fresh (:meth:`TrialHistory.start`),
        checked now and again at the first optimizer step (:meth:`_check_step`). In ``partition`` mode the user's
        optimizer also takes ``BatchMemoryManager``'s skip signals (:class:`_VirtualSteps`).

        Raises:
            InvalidParameter: a second call, another loader or batch size, another σ, C or epoch count,
                ``target_epsilon``, another ``grad_sample_mode``, objects that are no torch module and optimizer.
            PluginError: a module or optimizer that continues an earlier trial (with a history); in partition
                mode, an optimizer over tensors outside the module.
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
        if not isinstance(module, nn.Module) or not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidParameter("make_private takes the user's torch module and optimizer")
        if self.mode == "partition":
            own = {id(p) for p in module.parameters()}
            if any(id(p) not in own for g in optimizer.param_groups for p in g["params"]):
                raise PluginError("the optimizer must update only the parameters of the module handed to "
                                  "trial.make_private")
        before = self.history.start(module, optimizer) if self.history is not None else None
        self._called = True
        self._module, self._optimizer, self._before = module, optimizer, before
        if self.mode == "partition":
            self._snapshot = _Snapshot.take(module, optimizer)
            self._watch(optimizer)
            self._hooks.append(_VirtualSteps(optimizer))
            if self.history is not None:
                self._hooks.append(optimizer.register_step_pre_hook(lambda *_: self._check_step()))
            generator = torch.Generator().manual_seed(self.seed)
            loader = DataLoader(self.dataset, batch_size=self.params["batch_size"], shuffle=True,
                                generator=generator, collate_fn=data_loader.collate_fn)
            if self.grad_sample_mode == "ghost":
                return module, optimizer, kwargs.get("criterion") or nn.CrossEntropyLoss(), loader
            return module, optimizer, loader
        from dpaudit.privacy_engine import PrivacyEngine  # the engine imports the kit: import it on use

        self.engine = PrivacyEngine(self.view, assumptions=self.assumptions)
        returned = self.engine.make_private(module=module, optimizer=optimizer, data_loader=data_loader, **kwargs)
        if self.history is not None:
            self._watch(optimizer)
            self.engine.add_step_check(self._check_step)
        return returned

    def _watch(self, optimizer: torch.optim.Optimizer) -> None:
        """Note the versions of the trial's tensors now and after each update of ``optimizer`` (the user's), so
        that a tensor changed between two steps outside the optimizer is seen (:meth:`_check_step`)."""
        if self.history is None:
            return
        self._note_versions()
        self._hooks.append(optimizer.register_step_post_hook(lambda *_: self._note_versions()))

    def _current(self) -> list[torch.Tensor]:
        """The trial's tensors now: the module's, the optimizer's parameters and its state."""
        assert self._module is not None and self._optimizer is not None
        return [*_tensors(self._module, self._optimizer), *_optimizer_state(self._optimizer)]

    def _note_versions(self) -> None:
        if self._module is not None and self._optimizer is not None:
            self._versions = {id(t): t._version for t in self._current()}

    def _check_step(self, where: str = "at an optimizer step") -> None:
        """Before each optimizer step of a trial with a history (and once more when ``train`` returns): at the
        first, :meth:`TrialHistory.start` again on the module and optimizer as they are now (weights loaded after
        ``make_private``), its digests replacing those taken at ``make_private``; at later ones,
        :meth:`TrialHistory.check_loaded` on the tensors (module, optimizer parameters and state) that are new or
        were changed since the previous step other than by the optimizer. A refusal is final: every later step
        and :func:`run_trial` refuse too.

        Raises:
            PluginError: the trial continues an earlier one.
        """
        if self._refused is not None:
            raise PluginError(self._refused)
        assert self.history is not None
        try:
            if not self._stepped:
                assert self._module is not None and self._optimizer is not None
                self._before = self.history.start(self._module, self._optimizer)
                self._stepped = True
            else:
                self.history.check_loaded([t for t in self._current()
                                           if self._versions.get(id(t)) != t._version])
        except PluginError as exc:
            self._refused = f"{where}: {exc}"
            raise PluginError(self._refused) from exc
        self._note_versions()

    def _unhook(self) -> None:
        """Remove the hooks :meth:`make_private` put on the user's optimizer."""
        hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook.remove()

    def restore(self) -> None:
        """``partition`` mode: put the module and optimizer handed to :meth:`make_private` back as they came
        (parameters, buffers, gradients, ``requires_grad`` and train/eval flags, the optimizer's state), once the
        partition model's utility has been read. Then no partition's (unnoised) training survives in an object
        that outlives ``train``: not in the next partition's model, not in the final released run. A no-op in the
        other modes or before ``make_private``.

        Raises:
            PluginError: ``train`` replaced the objects' tensors, so they cannot be put back.
        """
        self._unhook()
        snapshot, self._snapshot = self._snapshot, None
        if snapshot is not None:
            snapshot.restore()


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
        PluginError: ``train`` did not call ``trial.make_private`` or returned no module; in partition mode, a
            module other than the one handed to ``make_private``; with a history, a trial that continued an
            earlier one (refused at an optimizer step, :meth:`Trial._check_step`, even if ``train`` caught it) or
            trained a tensor an earlier trial's model holds (:meth:`TrialHistory.finish`).
        UncoveredRelease: the returned model is not the one trained under the charge.
    """
    try:
        model = train(trial)
    finally:
        if trial.mode != "partition":  # partition mode: Trial.restore removes them with the snapshot
            trial._unhook()
    if trial._refused is not None:
        raise PluginError(trial._refused)
    if trial.history is not None and trial._called:
        trial._check_step("when train returned")  # weights loaded after the last step (or with no step)
    if not isinstance(model, nn.Module):
        raise PluginError(f"train must return the trained torch module, got {type(model).__name__}")
    if not trial._called:
        raise PluginError("train must train its model through trial.make_private(...)")
    assert trial._optimizer is not None
    if trial.mode == "partition":
        if unwrap(model) is not trial._module:
            raise PluginError("train must return the module it handed to trial.make_private")
        if trial.history is not None and trial._before is not None:
            trial.history.finish(trial._before, trial._optimizer)
        return model, None
    assert trial.engine is not None
    digest = trial.engine.release_model()
    if state_dict_sha256(unwrap(model)) != digest:
        raise UncoveredRelease("train returned a model other than the one trained under trial.make_private")
    if trial.history is not None and trial._before is not None:
        trial.history.finish(trial._before, trial._optimizer)
    return model, digest


def check_released(model: nn.Module, digest: str | None) -> None:
    """The model about to be returned is still the one whose digest was released.

    Raises:
        UncoveredRelease: it changed since (a later trial trained a tensor it shares).
    """
    if digest is not None and state_dict_sha256(unwrap(model)) != digest:
        raise UncoveredRelease(f"the selected model changed after its release (digest {digest}): a later trial "
                               "trained a tensor it shares; build a new model in each train() call")
