"""Train and PrivTrain: the models trained on one partition to measure a candidate's utility.

Ding et al. 2023, Alg. 1 l. 5: θ ← Train(D_i, S_s) or PrivTrain(D_i, S_s, ε, δ). Neither model is released: only
the utilities' AboveThreshold answers are (the loop's noise covers them), so partition training adds no charge.
PrivTrain exists for utility quality (a proxy closer to the final DP-SGD run), as in the paper.

Both are minibatch SGD with per-example gradients (Opacus ``GradSampleModule``) clipped to L2 norm C, so the
clipping norm is a meaningful hyperparameter in both modes:

* Train: a seeded shuffle into batches of B, no noise (non-private);
* PrivTrain: DP-SGD (Abadi et al. 2016, Alg. 1): Poisson sampling at q = B/n_i, Gaussian noise N(0, σ²C²) on the
  clipped sum, divided by the expected batch size B.

Everything random comes from one integer seed, and the records arrive ordered by id, so the model is a
deterministic function of (partition records, candidate, seed): the property Lemma 2's sensitivity argument needs.
An empty partition yields the untrained (seeded) initial model.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from opacus import GradSampleModule
from torch import nn

from dpaudit.errors import InvalidParameter
from dpaudit.tuning import Candidate, seeded_model

MODES = ("train", "privtrain")


def _clipped_sum(gsm: GradSampleModule, X: torch.Tensor, y: torch.Tensor, clip: float) -> list[torch.Tensor]:
    """Σ_i clip_C(∇ℓ_i) per parameter, from Opacus's per-example gradients (``loss_reduction="sum"``)."""
    for p in gsm.parameters():
        p.grad_sample = None
        p.grad = None
    loss = nn.functional.binary_cross_entropy_with_logits(gsm(X).reshape(-1), y, reduction="sum")
    loss.backward()
    norms = torch.sqrt(sum(p.grad_sample.reshape(len(y), -1).pow(2).sum(dim=1) for p in gsm.parameters()))
    factor = torch.clamp(clip / (norms + 1e-12), max=1.0)
    return [torch.einsum("i,i...->...", factor, p.grad_sample) for p in gsm.parameters()]


@contextlib.contextmanager
def _single_thread() -> Iterator[None]:
    """Run torch on one intra-op thread (these models are tiny: with several threads the synchronisation dominates,
    20x slower on 2 busy cores); the caller's setting is restored. Opacus's note that the first layer's input needs
    no gradient (harmless) is silenced here."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
            yield
    finally:
        torch.set_num_threads(previous)


def _batches(mode: str, n: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """One epoch's batches: a shuffle cut into batches of B (Train) or ⌊n/B⌋ Poisson draws at q = B/n (PrivTrain)."""
    if mode == "train":
        order = torch.randperm(n, generator=generator)
        return [order[i:i + batch_size] for i in range(0, n, batch_size)]
    q = min(1.0, batch_size / n)
    return [torch.nonzero(torch.rand(n, generator=generator) < q).reshape(-1) for _ in range(max(1, n // batch_size))]


def train_partition_model(X: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, candidate: Candidate, *,
                          mode: str, model_kind: str, hidden: int, n_features: int, seed: int) -> nn.Module:
    """Train one partition model (CPU, float32) with ``candidate``'s lr, C, epochs, B (and σ for PrivTrain).

    Args:
        X, y: the partition's records ordered by record id (may be empty).
        candidate: the hyperparameters.
        mode: ``"train"`` or ``"privtrain"``.
        model_kind, hidden: the model family (``dpaudit.tuning.models.build_model``).
        n_features: input dimension (public).
        seed: the only source of randomness (initialisation, shuffles or Poisson draws, noise).

    Raises:
        InvalidParameter: unknown mode or malformed data.
    """
    if mode not in MODES:
        raise InvalidParameter(f"partition training mode must be one of {MODES}, got {mode!r}")
    Xt = as_float_tensor(X).reshape(-1, n_features)
    yt = as_float_tensor(y).reshape(-1)
    if len(Xt) != len(yt):
        raise InvalidParameter("X and y of a partition must have the same length")
    generator = torch.Generator().manual_seed(seed)
    model = seeded_model(model_kind, n_features, hidden, seed)
    gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum", strict=True)
    n, B = len(yt), candidate.batch_size
    noise_std = candidate.noise_multiplier * candidate.max_grad_norm
    with _single_thread():
        for _ in range(candidate.epochs if n else 0):
            for idx in _batches(mode, n, B, generator):
                summed = (_clipped_sum(gsm, Xt[idx], yt[idx], candidate.max_grad_norm) if len(idx) else
                          [torch.zeros_like(p) for p in gsm.parameters()])
                divisor = float(len(idx)) if mode == "train" else float(B)  # PrivTrain: the public expected B
                with torch.no_grad():
                    for p, g in zip(gsm.parameters(), summed, strict=True):
                        if mode == "privtrain":
                            g = g + torch.normal(0.0, noise_std, size=g.shape, generator=generator)
                        p -= candidate.lr * g / divisor
    return gsm.to_standard_module()


def as_float_tensor(a: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A float32 CPU tensor: a tensor is used as is, an array is copied (the caller's array is never shared)."""
    if isinstance(a, torch.Tensor):
        return a.to(device="cpu", dtype=torch.float32)
    return torch.from_numpy(np.array(a, dtype=np.float32))


def accuracy(model: nn.Module, X: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor) -> float:
    """Fraction of (public) validation records classified correctly (logit > 0 means class 1)."""
    Xt = as_float_tensor(X)
    yt = as_float_tensor(y).reshape(-1)
    if len(yt) == 0:
        raise InvalidParameter("the validation set is empty")
    with torch.no_grad():
        predicted = (model(Xt).reshape(-1) > 0).float()
    return float((predicted == yt).float().mean().item())


@dataclass(frozen=True)
class ValidationScorer:
    """A :data:`~dpaudit_plugins.constant_overhead.utility.PartitionScorer`: train one partition model, return its
    accuracy on the public validation set. A dataclass, not a closure, so that parallel workers can import it.

    Attributes:
        mode, model_kind, hidden, n_features: as :func:`train_partition_model`.
        X_val, y_val: the PUBLIC validation set (float tensors).
    """

    mode: str
    model_kind: str
    hidden: int
    n_features: int
    X_val: torch.Tensor
    y_val: torch.Tensor

    def __call__(self, X: np.ndarray, y: np.ndarray, candidate: Candidate, seed: int) -> float:
        model = train_partition_model(X, y, candidate, mode=self.mode, model_kind=self.model_kind,
                                      hidden=self.hidden, n_features=self.n_features, seed=seed)
        return accuracy(model, self.X_val, self.y_val)
