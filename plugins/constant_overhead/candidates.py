"""Hyperparameter candidates of the constant-overhead tuner, the default grid and the local perturbation.

A :class:`Candidate` holds the hyperparameters of one DP-SGD training run. The tuner compares candidates through
their partition-model utilities (Ding et al. 2023, Alg. 1 l. 2-11) and trains the selected one with DP-SGD on the
full training set (Alg. 1 l. 35).

Privacy-relevant parameters are shared. The final DP-SGD run's privacy event depends on the noise multiplier σ,
the sampling rate q = B/n (batch size B) and the step count (epochs); the learning rate and the clipping norm C do
not change it (the noise is σ·C for sensitivity C). If candidates differed in (σ, B, epochs), the privacy
parameters of the final charge would be chosen from the noisy tuning outputs, which the certificate's
"privacy parameters fixed in advance" assumption forbids (fully adaptive composition needs privacy filters;
Rogers, Roth, Ullman & Vadhan 2016). :func:`check_shared_privacy_parameters` therefore refuses such a set, and
:func:`perturb` never changes those fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_positive


@dataclass(frozen=True)
class Candidate:
    """One hyperparameter configuration.

    Attributes:
        lr: learning rate of (DP-)SGD, for the partition models and the final model.
        max_grad_norm: per-example clipping norm C.
        noise_multiplier: σ of the final DP-SGD run (and of PrivTrain partition models).
        epochs: passes over the data (partition models and final model).
        batch_size: (expected) batch size B.
    """

    lr: float
    max_grad_norm: float
    noise_multiplier: float = 1.0
    epochs: int = 3
    batch_size: int = 256

    def __post_init__(self) -> None:
        for name in ("lr", "max_grad_norm", "noise_multiplier"):
            object.__setattr__(self, name, check_positive(name, getattr(self, name)))
        check_count("epochs", self.epochs)
        check_count("batch_size", self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> Candidate:
        """Build from a plain mapping; unknown keys are refused.

        Raises:
            InvalidParameter: an unknown key, a missing required key or an out-of-domain value.
        """
        if not isinstance(d, Mapping):
            raise InvalidParameter(f"a candidate must be a mapping, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InvalidParameter(f"unknown candidate keys {unknown}; known: {sorted(known)}")
        try:
            return cls(**dict(d))
        except TypeError as exc:
            raise InvalidParameter(f"bad candidate {dict(d)}: {exc}") from None

    @property
    def privacy_parameters(self) -> tuple[float, int, int]:
        """(σ, epochs, batch size): the fields that fix the final DP-SGD run's privacy event."""
        return self.noise_multiplier, self.epochs, self.batch_size


#: learning rates and clipping norms of the default grid (5 × 4 = 20 candidates)
DEFAULT_LRS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
DEFAULT_CLIP_NORMS: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0)


def default_grid(*, noise_multiplier: float = 1.0, epochs: int = 3, batch_size: int = 256) -> tuple[Candidate, ...]:
    """The default search space: :data:`DEFAULT_LRS` × :data:`DEFAULT_CLIP_NORMS` with shared (σ, epochs, B)."""
    return tuple(Candidate(lr=lr, max_grad_norm=c, noise_multiplier=noise_multiplier, epochs=epochs,
                           batch_size=batch_size) for lr in DEFAULT_LRS for c in DEFAULT_CLIP_NORMS)


def check_shared_privacy_parameters(candidates: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """Refuse an empty set, duplicates, or candidates whose (σ, epochs, B) differ (see the module docstring).

    Raises:
        InvalidParameter: the set is empty, has duplicates or mixes privacy parameters.
    """
    candidates = tuple(candidates)
    if not candidates:
        raise InvalidParameter("the candidate set is empty")
    if not all(isinstance(c, Candidate) for c in candidates):
        raise InvalidParameter("candidates must be Candidate instances")
    if len(set(candidates)) != len(candidates):
        raise InvalidParameter("the candidate set has duplicates")
    shared = {c.privacy_parameters for c in candidates}
    if len(shared) > 1:
        raise InvalidParameter(
            "all candidates must share noise_multiplier, epochs and batch_size (they fix the final DP-SGD charge, "
            f"which must not depend on the noisy tuning outputs); got {sorted(shared)}")
    return candidates


def perturb(candidate: Candidate, generator: np.random.Generator, scale: float) -> Candidate:
    """A random neighbour of ``candidate``: lr and C multiplied by exp(N(0, scale²)) each.

    Only the privacy-neutral fields move (module docstring). ``generator`` must be PUBLIC randomness (seeded
    independently of the data).
    """
    check_positive("scale", scale)
    lr_factor, clip_factor = np.exp(generator.normal(0.0, scale, size=2))
    return replace(candidate, lr=_rounded(candidate.lr * float(lr_factor)),
                   max_grad_norm=_rounded(candidate.max_grad_norm * float(clip_factor)))


def _rounded(x: float) -> float:
    """Three significant digits (readable candidates)."""
    return float(f"{x:.3g}")
