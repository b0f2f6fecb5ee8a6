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


class _ExactGp(gpytorch.models.ExactGP):
    def __init__(self, X: torch.Tensor, y: torch.Tensor, likelihood: gpytorch.likelihoods.Likelihood,
                 lengthscale: np.ndarray, variance: float, prior_mean: float) -> None:
        super().__init__(X, y, likelihood)
        self.mean_module = gpytorch.means.ConstantMean()
        self.mean_module.constant.data.fill_(prior_mean)
        base = gpytorch.kernels.RBFKernel(ard_num_dims=X.shape[1])
        base.lengthscale = torch.as_tensor(lengthscale, dtype=X.dtype, device=X.device).reshape(1, -1)
        self.covar_module = gpytorch.kernels.ScaleKernel(base)
        self.covar_module.outputscale = torch.as_tensor(variance, dtype=X.dtype, device=X.device)

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
    model = _ExactGp(Xt, yt, likelihood, as_lengthscale(lengthscale, X.shape[1]), float(variance),
                     float(prior_mean)).to(device=dev, dtype=torch.float64)
    model.eval()
    likelihood.eval()
    with torch.no_grad(), gpytorch.settings.max_cholesky_size(_ALWAYS_CHOLESKY), \
            gpytorch.settings.fast_computations(covar_root_decomposition=False, log_prob=False, solves=False), \
            gpytorch.settings.skip_posterior_variances(True), gpytorch.settings.fast_pred_var(False):
        mean = model(torch.as_tensor(X_star, dtype=torch.float64, device=dev)).mean
    return mean.detach().cpu().numpy().astype(np.float64)
