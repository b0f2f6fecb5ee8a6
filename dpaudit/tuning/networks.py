"""The study file's built-in models, losses, optimizers and objectives (docs/user-guide.md, "Study files").

Models, all free of batch-mixing layers (Opacus ModuleValidator accepts them):

* ``logistic``: one linear layer, d → outputs;
* ``mlp``: linear layers with ReLU between them, widths ``hidden`` (a list);
* ``cnn``: for square single-channel images flattened to d = s² features: two 5×5 convolutions (16 and 32
  channels, ReLU, 2×2 max-pooling each) and a linear head, with no normalisation layer;
* ``package.module:factory``: ``factory(n_features=d, n_outputs=o, **options)`` returning an ``nn.Module``.

``outputs`` is the number of classes of a classification target (``cross_entropy``), 1 for regression (``mse``).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count

BUILTIN_MODELS = ("logistic", "mlp", "cnn")
LOSSES = ("cross_entropy", "mse")
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam,
                                                       "adamw": torch.optim.AdamW}
#: metric → (loss it goes with, maximise)
METRICS = {"accuracy": ("cross_entropy", True), "cross_entropy": ("cross_entropy", False), "rmse": ("mse", False)}


class _Image(nn.Module):
    """Reshape flat (B, s²) inputs to (B, 1, s, s) images."""

    def __init__(self, side: int) -> None:
        super().__init__()
        self.side = side

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, 1, self.side, self.side)


class _Squeeze(nn.Module):
    """(B, 1) → (B,): a regression head."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1)


def load_factory(spec: str) -> Callable[..., nn.Module]:
    """The callable named ``package.module:factory``.

    Raises:
        InvalidParameter: not of that form, or the module or attribute cannot be imported.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidParameter(f"a model factory is named 'package.module:factory', got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InvalidParameter(f"cannot import model factory {spec!r}: {exc}") from exc
    if not callable(factory):
        raise InvalidParameter(f"model factory {spec!r} is not callable")
    return factory


def build_network(kind: str, n_features: int, n_outputs: int, *, hidden: Sequence[int] = (64,),
                  options: dict[str, Any] | None = None) -> nn.Module:
    """A fresh model (module docstring); a regression model (``n_outputs == 1``) returns shape (B,).

    Raises:
        InvalidParameter: an unknown kind, bad sizes, a ``cnn`` on non-square inputs, a factory returning no module.
    """
    check_count("n_features", n_features)
    check_count("n_outputs", n_outputs)
    head: list[nn.Module] = [_Squeeze()] if n_outputs == 1 else []
    if kind == "logistic":
        return nn.Sequential(nn.Linear(n_features, n_outputs), *head)
    if kind == "mlp":
        widths = [n_features, *(check_count("hidden", h) for h in hidden)]
        layers: list[nn.Module] = []
        for a, b in zip(widths, widths[1:], strict=False):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(widths[-1], n_outputs), *head)
    if kind == "cnn":
        side = math.isqrt(n_features)
        if side * side != n_features or side < 4:
            raise InvalidParameter(f"the cnn model needs square single-channel images (d = s*s, s >= 4), got "
                                   f"d = {n_features}")
        flat = 32 * (side // 4) ** 2
        return nn.Sequential(_Image(side), nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(flat, n_outputs), *head)
    model = load_factory(kind)(n_features=n_features, n_outputs=n_outputs, **(options or {}))
    if not isinstance(model, nn.Module):
        raise InvalidParameter(f"model factory {kind!r} returned {type(model).__name__}, not a torch module")
    return model


def loss_function(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The mean loss ``name`` (per-example terms averaged: Opacus's ``loss_reduction="mean"``)."""
    if name == "cross_entropy":
        return lambda out, y: nn.functional.cross_entropy(out, y.long())
    if name == "mse":
        return lambda out, y: nn.functional.mse_loss(out, y.float())
    raise InvalidParameter(f"loss must be one of {LOSSES}, got {name!r}")


def metric(name: str, model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """``accuracy``, mean ``cross_entropy`` or ``rmse`` of ``model`` on (public) ``X``, ``y``."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model(X)
        if name == "accuracy":
            value = (out.argmax(dim=1) == y.long()).float().mean()
        elif name == "cross_entropy":
            value = nn.functional.cross_entropy(out, y.long())
        elif name == "rmse":
            value = nn.functional.mse_loss(out, y.float()).sqrt()
        else:
            raise InvalidParameter(f"metric must be one of {sorted(METRICS)}, got {name!r}")
    model.train(was_training)
    return float(value.item())
