"""The constant-overhead tuner's default grid, the candidate-set check and the local perturbation.

Candidates are :class:`~dpaudit.tuning.candidates.Candidate` (lr, C, σ, epochs, B), the type every
tuning plugin shares. The tuner compares candidates through their partition-model utilities (Ding et al. 2023, Alg. 1
l. 2-11) and trains the selected one with DP-SGD on the full training set (Alg. 1 l. 35).

Candidates may differ in every field, σ, epochs and B included. The final DP-SGD run's privacy parameters must
nevertheless be fixed before the selection (the certificate's "privacy parameters fixed in advance"; fully adaptive
composition would need privacy filters, Rogers, Roth, Ullman & Vadhan 2016), so the plugin charges, before any data is
used, the grid's envelope (:func:`~dpaudit.tuning.candidates.grid_envelope`: largest q, smallest σ,
most steps), which dominates every candidate parameter-wise, and trains the selected candidate under that charge
(docs/accounting.md, "Envelope charges"). :func:`perturb` moves only lr and C, so a candidate proposed by the local
proposer keeps the (σ, epochs, B) of a grid candidate and stays under the envelope.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.tuning import Candidate
from dpaudit.validation import check_positive

#: learning rates and clipping norms of the default grid (5 × 4 = 20 candidates)
DEFAULT_LRS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
DEFAULT_CLIP_NORMS: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0)


def default_grid(*, noise_multiplier: float = 1.0, epochs: int = 3, batch_size: int = 256) -> tuple[Candidate, ...]:
    """The default search space: :data:`DEFAULT_LRS` × :data:`DEFAULT_CLIP_NORMS` with the given (σ, epochs, B)."""
    return tuple(Candidate(lr=lr, max_grad_norm=c, noise_multiplier=noise_multiplier, epochs=epochs,
                           batch_size=batch_size) for lr in DEFAULT_LRS for c in DEFAULT_CLIP_NORMS)


def check_candidate_set(candidates: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """Refuse an empty set, a non-candidate or duplicates.

    Raises:
        InvalidParameter: the set is empty, holds something other than candidates, or has duplicates.
    """
    candidates = tuple(candidates)
    if not candidates:
        raise InvalidParameter("the candidate set is empty")
    if not all(isinstance(c, Candidate) for c in candidates):
        raise InvalidParameter("candidates must be Candidate instances")
    if len(set(candidates)) != len(candidates):
        raise InvalidParameter("the candidate set has duplicates")
    return candidates


def perturb(candidate: Candidate, generator: np.random.Generator, scale: float) -> Candidate:
    """A random neighbour of ``candidate``: lr and C multiplied by exp(N(0, scale²)) each.

    Only the privacy-neutral fields move, so the result stays under the grid's envelope (module docstring).
    ``generator`` must be PUBLIC randomness (seeded independently of the data).
    """
    check_positive("scale", scale)
    lr_factor, clip_factor = np.exp(generator.normal(0.0, scale, size=2))
    return replace(candidate, lr=_rounded(candidate.lr * float(lr_factor)),
                   max_grad_norm=_rounded(candidate.max_grad_norm * float(clip_factor)))


def _rounded(x: float) -> float:
    """Three significant digits (readable candidates)."""
    return float(f"{x:.3g}")
