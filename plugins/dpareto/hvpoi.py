"""Hypervolume-based probability of improvement (HVPoI) for two objectives, in closed form.

Couckuyt, Deschrijver & Dhaene 2014 (J. Global Optim. 60), Sec. 3.2, as DPareto uses it (Avent et al. 2020,
Sec. 3.2): with independent Gaussian predictions y_j ~ N(μ_j, σ_j²) of the two objectives (minimised),

    HVPoI(x) = I(μ) · P[y ∈ A],

where A is the part of the box below the reference point r that no observed Pareto point weakly dominates, and
I(μ) = HV(P ∪ {μ}) − HV(P) is the hypervolume the predicted mean would add. A is the union of the disjoint cells of
:func:`~dpaudit_plugins.dpareto.pareto.nondominated_cells`, so

    P[y ∈ A] = Σ_cells Π_j [Φ((u_j − μ_j)/σ_j) − Φ((l_j − μ_j)/σ_j)],
    I(μ)     = Σ_cells Π_j max(0, u_j − max(l_j, μ_j)).

The Pareto set is taken from the observations (not from the GP means), and r is the recorded reference point,
never replaced (the public GPflowOpt code moved r to the worst observation on every step).
"""

from __future__ import annotations

import numpy as np
import torch
from botorch.acquisition import AcquisitionFunction
from botorch.models.model import Model

from dpaudit_plugins.dpareto.pareto import nondominated_cells, staircase

MIN_STD = 1e-9
"""Predictive standard deviations are floored here so that Φ((u − μ)/σ) stays defined at observed points."""


def hvpoi(mean: torch.Tensor, std: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """HVPoI of predictions ``mean``, ``std`` (shape (..., 2)) over cells ``lower``, ``upper`` (shape (k, 2)).

    Returns:
        Shape (...): I(μ)·P[y ∈ A], differentiable in ``mean`` and ``std``.
    """
    mu = mean.unsqueeze(-2)  # (..., 1, 2) against (k, 2)
    sigma = std.clamp_min(MIN_STD).unsqueeze(-2)
    normal = torch.distributions.Normal(torch.zeros((), dtype=mean.dtype), torch.ones((), dtype=mean.dtype))
    unbounded = torch.isinf(lower)  # Φ(−∞) = 0, without the 0·∞ = NaN its gradient would carry
    below = torch.where(unbounded, 0.0, normal.cdf((torch.where(unbounded, 0.0, lower) - mu) / sigma))
    mass = normal.cdf((upper - mu) / sigma) - below
    probability = mass.prod(dim=-1).sum(dim=-1)
    extent = (upper - torch.maximum(lower, mu)).clamp_min(0.0)
    improvement = extent.prod(dim=-1).sum(dim=-1)
    return improvement * probability


def cells_for(observed: np.ndarray, reference: np.ndarray, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor,
                                                                                                          torch.Tensor]:
    """The non-dominated cells of the observed points (GP space) below ``reference``, as tensors."""
    lower, upper = nondominated_cells(staircase(observed, reference), reference)
    return torch.as_tensor(lower, dtype=dtype), torch.as_tensor(upper, dtype=dtype)


class HypervolumePoI(AcquisitionFunction):
    """HVPoI on a two-output model (the two independent GPs as a ``ModelListGP``) for q = 1 candidates.

    Args:
        model: outputs (privacy, utility) in the transformed space, both minimised.
        observed: the observed objective pairs in the transformed space (failed trials excluded).
        reference: the reference point in the transformed space.
    """

    def __init__(self, model: Model, observed: np.ndarray, reference: np.ndarray) -> None:
        super().__init__(model)
        lower, upper = cells_for(observed, reference)
        self.register_buffer("lower", lower)
        self.register_buffer("upper", upper)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """HVPoI at ``X`` of shape (b, 1, d); returns shape (b,)."""
        posterior = self.model.posterior(X)
        mean = posterior.mean.squeeze(-2)
        std = posterior.variance.clamp_min(0.0).sqrt().squeeze(-2)
        return hvpoi(mean, std, self.lower.to(mean), self.upper.to(mean))
