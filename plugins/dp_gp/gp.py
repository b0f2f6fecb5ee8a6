"""The private computation of dp-gp: the exact GP posterior mean at public test points, on GPyTorch in float64.

Hyperparameters are fixed and public (never fitted to the outputs: a fitted value would depend on them); the prior
mean is zero or a public constant (a learned mean depends on the outputs). The mean is
f* = m + K_*f (K_f + σ_n²I)⁻¹ (y − m) (Rasmussen & Williams 2006, eq. (2.25)), solved by Cholesky: GPyTorch's
iterative solvers (CG, Lanczos) are switched off so the computed function is the linear map whose sensitivity the
formulas of :mod:`dpaudit_plugins.dp_gp.formulas` bound. CUDA is used when the session's device is a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import gpytorch
import numpy as np
import torch

from dpaudit.errors import InvalidParameter
from dpaudit_plugins.dp_gp.formulas import as_lengthscale

#: GPyTorch solves systems up to this size by Cholesky (above its default 800 it would switch to CG)
_ALWAYS_CHOLESKY = 2**40


def _identity() -> gpytorch.constraints.GreaterThan:
    """A positivity constraint GPyTorch does not enforce by a transform: the value set is the value held."""
    return gpytorch.constraints.GreaterThan(0.0, transform=None)


class _ExactGp(gpytorch.models.ExactGP):
    def __init__(self, X: torch.Tensor, y: torch.Tensor, likelihood: gpytorch.likelihoods.Likelihood) -> None:
        super().__init__(X, y, likelihood)
        self.mean_module = gpytorch.means.ConstantMean()
        # unenforced constraints: the raw parameter IS the value (GPyTorch's default softplus round trip moves a
        # lengthscale of 25 by 1.4e-11, and the mean would be that of another kernel than the one Δ is computed for)
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.RBFKernel(ard_num_dims=X.shape[1], lengthscale_constraint=_identity()),
            outputscale_constraint=_identity())

    def set_hyperparameters(self, lengthscale: np.ndarray, variance: float, prior_mean: float) -> None:
        """Set ℓ, v and m on a model already in float64 (set before the conversion, they would be rounded to float32
        and the mean computed would be that of other hyperparameters than those Δ is computed for), and check that
        GPyTorch holds exactly the public values.

        Raises:
            InvalidParameter: a value GPyTorch does not hold exactly.
        """
        like = self.mean_module.constant
        self.mean_module.constant.data.fill_(prior_mean)
        self.covar_module.base_kernel.lengthscale = torch.as_tensor(lengthscale, dtype=like.dtype,
                                                                   device=like.device).reshape(1, -1)
        self.covar_module.outputscale = torch.as_tensor(variance, dtype=like.dtype, device=like.device)
        with torch.no_grad():
            held = (self.covar_module.base_kernel.lengthscale.cpu().numpy().ravel(),
                    float(self.covar_module.outputscale), float(self.mean_module.constant))
        for name, got, want in zip(("lengthscale", "variance", "prior mean"), held,
                                   (lengthscale, variance, prior_mean), strict=True):
            if not np.array_equal(got, want):
                raise InvalidParameter(f"GPyTorch holds the {name} as {got!r}, not {want!r}: the mean would not be "
                                       "the one the sensitivity is computed for")

    def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def posterior_mean(X: np.ndarray, y: np.ndarray, X_star: np.ndarray, *, lengthscale: float | Sequence[float],
                   variance: float, noise: float, prior_mean: float = 0.0,
                   device: torch.device | str | None = None) -> np.ndarray:
    """The exact posterior mean at ``X_star`` of a GP with an EQ kernel and fixed hyperparameters, float64.

    Args:
        X: (n, D) public training inputs.
        y: (n,) outputs (private), already clipped and normalised.
        X_star: (P, D) public test inputs.
        lengthscale, variance, noise: the EQ kernel's ℓ (one or D values), v and the noise variance σ_n².
        prior_mean: the public constant prior mean m.
        device: where to compute (default: CUDA when available, else CPU).

    Returns:
        f* as a (P,) float64 numpy array.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (len(X),):
        raise InvalidParameter(f"y must have one output per training input ({len(X)}), got shape {y.shape}")
    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    Xt = torch.tensor(np.array(X, dtype=np.float64), device=dev)  # a copy: the catalog arrays are read-only
    yt = torch.as_tensor(y, dtype=torch.float64, device=dev)
    likelihood = gpytorch.likelihoods.FixedNoiseGaussianLikelihood(
        noise=torch.full((len(X),), float(noise), dtype=torch.float64, device=dev))
    model = _ExactGp(Xt, yt, likelihood).to(device=dev, dtype=torch.float64)
    model.set_hyperparameters(as_lengthscale(lengthscale, X.shape[1]), float(variance), float(prior_mean))
    model.eval()
    likelihood.eval()
    with torch.no_grad(), gpytorch.settings.max_cholesky_size(_ALWAYS_CHOLESKY), \
            gpytorch.settings.fast_computations(covar_root_decomposition=False, log_prob=False, solves=False), \
            gpytorch.settings.skip_posterior_variances(True), gpytorch.settings.fast_pred_var(False):
        mean = model(torch.as_tensor(X_star, dtype=torch.float64, device=dev)).mean
    return mean.detach().cpu().numpy().astype(np.float64)
