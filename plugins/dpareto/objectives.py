"""The two objectives in the space the GP surrogates model (Avent et al. 2020, Sec. 4.1: "log for ε, logit for the
error"), and the rule for failed trials.

* privacy: ``log ε`` (ε > 0 always: it comes from the trial's plan, known even when the trial fails);
* utility: ``logit(clamp(error, c, 1 − c))`` with c = :data:`ERROR_CLAMP`. An error of exactly 0 or 1 (a perfect
  or an always-wrong classifier on a small evaluation set) would otherwise be ∓∞. The clamp is monotone, so it keeps
  dominance between points apart from merging errors within c of 0 or 1.

A failed trial (no finite error in [0, 1]) is never given to the utility GP. In the front and the hypervolume it
counts at the anti-ideal error (the reference point's error, 1 by default), so it contributes nothing.
"""

from __future__ import annotations

import math

import numpy as np

ERROR_CLAMP = 1e-3
"""c of the clamp [c, 1 − c] applied to an error before the logit (1/1000: finer than the 1/1605 resolution of the
a1a test set would be pointless, coarser would merge genuinely different errors)."""


def privacy_transform(epsilon: np.ndarray | float) -> np.ndarray:
    """log ε (ε > 0)."""
    return np.log(np.asarray(epsilon, dtype=float))


def utility_transform(error: np.ndarray | float) -> np.ndarray:
    """logit(clamp(error, c, 1 − c))."""
    e = np.clip(np.asarray(error, dtype=float), ERROR_CLAMP, 1.0 - ERROR_CLAMP)
    return np.log(e) - np.log1p(-e)


def is_valid_error(error: object) -> bool:
    """Whether a trial's error is usable: a finite real in [0, 1]."""
    if isinstance(error, bool) or not isinstance(error, (int, float, np.floating, np.integer)):
        return False
    return math.isfinite(float(error)) and 0.0 <= float(error) <= 1.0


def transform_reference(reference: tuple[float, float]) -> np.ndarray:
    """The reference point in the GP space (the transforms are monotone, so dominance is preserved)."""
    return np.array([float(privacy_transform(reference[0])), float(utility_transform(reference[1]))])
