"""GP-UCB on a finite candidate set Λ with GPyTorch exact GPs (Srinivas et al. 2010; Kusner et al. 2015, Alg. 1).

The prior is GP(0, k2) with k2 the squared-exponential or Matérn-5/2 kernel of a fixed, public lengthscale and no
output scale, so k2(λ, λ) = 1 (Kusner et al. 2015, Sec. 2: "the kernel k2 is normalized"). Nothing about the kernel
is fitted to the data: Assumption 1 takes k1 and k2 as known, and the constants of Theorems 1 and 3 are computed
from them before any evaluation. Candidates are points in the coordinates the kernel acts on (the plugin maps them
to hyperparameters by a public map).

Posteriors are computed by GPyTorch (``ExactGP``, Cholesky) in float64 on ``device`` (CUDA when available, else the
CPU). :func:`kernel_matrix` is the same kernel in numpy, used for the γ_T bound, which ``dpaudit verify``
recomputes without torch state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dpaudit.errors import InvalidParameter
from dpaudit.validation import check_count, check_positive
from dpaudit_plugins.kusner_bo.constants import beta_t

KERNELS = ("se", "matern52")
#: variance added to exact (noise-free) observations so the Cholesky factor exists when a point repeats
NOISE_FREE_JITTER = 1e-8
#: candidates per GPyTorch prediction call (the train-side caches are shared between blocks)
PREDICTION_BLOCK = 256


@dataclass(frozen=True)
class KernelSpec:
    """k2: ``"se"`` exp(−r²/(2ℓ²)) or ``"matern52"`` (1 + √5 r/ℓ + 5r²/(3ℓ²)) exp(−√5 r/ℓ), r = ‖λ − λ'‖₂.

    Kusner et al. 2015, Sec. 2 (both kernels, normalised so k2(λ, λ) = 1, fixed ℓ).
    """

    name: str
    lengthscale: float

    def __post_init__(self) -> None:
        if self.name not in KERNELS:
            raise InvalidParameter(f"unknown kernel {self.name!r}; known: {list(KERNELS)}")
        object.__setattr__(self, "lengthscale", check_positive("lengthscale", self.lengthscale))


def candidate_array(candidates: object) -> np.ndarray:
    """Λ as a finite float64 array of shape (|Λ|, d); a flat sequence is read as d = 1.

    Raises:
        InvalidParameter: empty, non-finite, or not 1-d/2-d.
    """
    try:
        X = np.asarray(candidates, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidParameter(f"candidates must be numbers: {exc}") from None
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0 or not np.all(np.isfinite(X)):
        raise InvalidParameter(f"candidates must be a non-empty finite (|Λ|, d) array, got shape {X.shape}")
    return X


def kernel_matrix(spec: KernelSpec, A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
    """k2(A_i, B_j) in numpy float64 (the formulas of :class:`KernelSpec`)."""
    A = candidate_array(A)
    B = A if B is None else candidate_array(B)
    diff = A[:, None, :] - B[None, :, :]
    r = np.sqrt(np.sum(diff * diff, axis=-1)) / spec.lengthscale
    if spec.name == "se":
        return np.exp(-0.5 * r * r)
    s = math.sqrt(5.0) * r
    return (1.0 + s + s * s / 3.0) * np.exp(-s)


def _torch_kernel(spec: KernelSpec):
    import gpytorch

    kernel = (gpytorch.kernels.RBFKernel() if spec.name == "se" else gpytorch.kernels.MaternKernel(nu=2.5))
    kernel.lengthscale = spec.lengthscale
    kernel.raw_lengthscale.requires_grad_(False)
    return kernel  # no ScaleKernel: k2(λ, λ) = 1


class GpPosterior:
    """The posterior of GP(0, k2) on Λ given observations at indices of Λ (GPyTorch ``ExactGP``).

    Args:
        spec: the kernel.
        candidates: Λ, shape (|Λ|, d).
        noise_variance: σ² of the Gaussian observation noise; 0 for exact observations (a jitter of
            :data:`NOISE_FREE_JITTER` keeps repeated points factorisable).
        device: torch device (``Session.device``: CUDA when available, else the CPU).
    """

    def __init__(self, spec: KernelSpec, candidates: object, noise_variance: float, device: object = "cpu") -> None:
        import gpytorch
        import torch

        if not (isinstance(noise_variance, (int, float)) and math.isfinite(noise_variance) and noise_variance >= 0):
            raise InvalidParameter(f"noise_variance must be a finite number >= 0, got {noise_variance!r}")
        self.spec = spec
        self.device = torch.device(device)
        self._X = torch.as_tensor(candidate_array(candidates), dtype=torch.float64, device=self.device)
        likelihood = gpytorch.likelihoods.GaussianLikelihood(
            noise_constraint=gpytorch.constraints.GreaterThan(NOISE_FREE_JITTER / 2))
        likelihood.noise = max(float(noise_variance), NOISE_FREE_JITTER)
        likelihood.raw_noise.requires_grad_(False)
        kernel = _torch_kernel(spec)

        class _Model(gpytorch.models.ExactGP):
            def __init__(self) -> None:
                super().__init__(None, None, likelihood)
                self.mean_module = gpytorch.means.ZeroMean()
                self.covar_module = kernel

            def forward(self, x):
                return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

        self._model = _Model().to(device=self.device, dtype=torch.float64)
        self._model.eval()
        likelihood.eval()

    @property
    def size(self) -> int:
        return int(self._X.shape[0])

    def mean_and_std(self, indices: Sequence[int], values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean μ_t and standard deviation σ_t of the latent f on all of Λ (Kusner et al. eq. (2)).

        With no observations: the prior, μ = 0 and σ = 1.
        """
        import gpytorch
        import torch

        if len(indices) != len(values):
            raise InvalidParameter("one value per observed index")
        if not indices:
            return np.zeros(self.size), np.ones(self.size)
        idx = torch.as_tensor(list(indices), dtype=torch.long, device=self.device)
        y = torch.as_tensor(list(values), dtype=torch.float64, device=self.device)
        if not bool(torch.isfinite(y).all()):
            raise InvalidParameter("observed values must be finite")
        self._model.set_train_data(inputs=self._X[idx], targets=y, strict=False)
        means, variances = [], []
        with torch.no_grad(), gpytorch.settings.fast_pred_var(False), gpytorch.settings.max_cholesky_size(10**6):
            # in blocks: GPyTorch forms each block's full test covariance to read its diagonal
            for start in range(0, self.size, PREDICTION_BLOCK):
                latent = self._model(self._X[start:start + PREDICTION_BLOCK])
                means.append(latent.mean.detach().cpu().numpy())
                variances.append(latent.variance.detach().cpu().numpy())
        mean = np.concatenate(means).astype(np.float64)
        return mean, np.sqrt(np.clip(np.concatenate(variances).astype(np.float64), 0.0, None))


@dataclass(frozen=True)
class GpUcbTrace:
    """What one GP-UCB run saw. Everything here depends on the protected data: it never leaves the plugin except
    through a mechanism (the exponential mechanism on ``final_mean``, the Laplace mechanism on the best value).

    Attributes:
        indices: λ_1, ..., λ_T as indices into Λ.
        values: the observed v_t.
        final_mean: μ_T on Λ.
    """

    indices: tuple[int, ...]
    values: tuple[float, ...]
    final_mean: np.ndarray


def ucb_index(mean: np.ndarray, std: np.ndarray, beta: float) -> int:
    """argmax_λ μ(λ) + sqrt(β) σ(λ), the lowest index among ties (Kusner et al. Alg. 1 line 4)."""
    return int(np.argmax(mean + math.sqrt(beta) * std))


def gp_ucb(objective: Callable[[int], float], posterior: GpPosterior, T: int, delta: float) -> GpUcbTrace:
    """T steps of GP-UCB with β_t = 2 log(|Λ| t² π²/(3δ)) (Kusner et al. 2015, Alg. 1 lines 2-7).

    Args:
        objective: evaluates the (possibly noisy) gain at an index of Λ.
        posterior: the GP on Λ.
        T: number of evaluations, ≥ 1 (fixed up front; no data-dependent stopping).
        delta: the δ of β_t.
    """
    T = check_count("T", T)
    indices: list[int] = []
    values: list[float] = []
    for t in range(1, T + 1):
        mean, std = posterior.mean_and_std(indices, values)
        i = ucb_index(mean, std, beta_t(posterior.size, t, delta))
        v = float(objective(i))
        if not math.isfinite(v):
            raise InvalidParameter(f"the objective returned a non-finite value at candidate {i}")
        indices.append(i)
        values.append(v)
    final_mean, _ = posterior.mean_and_std(indices, values)
    return GpUcbTrace(tuple(indices), tuple(values), final_mean)
