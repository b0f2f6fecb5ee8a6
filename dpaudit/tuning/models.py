"""The two model families of the tuning kit: logistic regression and a one-hidden-layer MLP.

Both output one logit per example (binary classification with ``BCEWithLogitsLoss``) and hold no buffers or
batch-mixing layers, so Opacus's per-example gradients are exact (no BatchNorm; Opacus ModuleValidator).
"""

from __future__ import annotations

import torch
from torch import nn

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count

MODEL_KINDS = ("logreg", "mlp")


def build_model(kind: str, n_features: int, hidden: int) -> nn.Module:
    """A fresh binary classifier.

    Args:
        kind: ``"logreg"`` (one linear layer) or ``"mlp"`` (linear, ReLU, linear).
        n_features: input dimension.
        hidden: width of the MLP's hidden layer (ignored for ``"logreg"``).

    Raises:
        InvalidParameter: unknown kind or a non-positive size.
    """
    check_count("n_features", n_features)
    if kind == "logreg":
        return nn.Linear(n_features, 1)
    if kind == "mlp":
        check_count("hidden", hidden)
        return nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    raise InvalidParameter(f"unknown model {kind!r}; choose one of {MODEL_KINDS}")


def seeded_model(kind: str, n_features: int, hidden: int, seed: int) -> nn.Module:
    """:func:`build_model` initialised from ``seed`` alone (torch's global generator is restored afterwards).

    Raises:
        InvalidParameter: unknown kind or a non-positive size.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model(kind, n_features, hidden)
