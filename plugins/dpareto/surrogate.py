"""The two surrogates: independent exact GPs (BoTorch ``SingleTaskGP``), Matérn-5/2 with one lengthscale per input
(ARD), on inputs in the unit cube of the declared scales and outputs standardised (Avent et al. 2020, Sec. 4.1).

Refitting hyperparameters is the loop's main cost. :class:`Surrogates` keeps each GP's kernel and likelihood
hyperparameters between iterations: a refit starts from them (warm start), and between refits (every
``refit_every`` iterations) the GP is only conditioned on the new observations with the previous hyperparameters.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from botorch.exceptions.errors import ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import ModelListGP, SingleTaskGP
from botorch.models.transforms.outcome import Standardize
from gpytorch.kernels import MaternKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood

DTYPE = torch.float64


def make_gp(x: np.ndarray, y: np.ndarray, previous: SingleTaskGP | None = None, fit: bool = True) -> SingleTaskGP:
    """A Matérn-5/2 ARD GP on ``x`` (n, d) in [0, 1]^d and ``y`` (n,), standardised.

    Args:
        previous: a GP whose kernel, mean and likelihood hyperparameters are copied first (warm start).
        fit: maximise the marginal likelihood (L-BFGS-B, from the copied values when ``previous`` is given). When
            every attempt fails (BoTorch's ``ModelFittingError``, seen on the full Adult runs once BO had sampled one
            corner of the domain dozens of times), a warm-started GP keeps ``previous``'s hyperparameters and is only
            conditioned on the data; a first fit that fails still raises.
    """
    train_x = torch.as_tensor(x, dtype=DTYPE)
    train_y = torch.as_tensor(y, dtype=DTYPE).reshape(-1, 1)
    covar = ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=train_x.shape[1]))
    model = SingleTaskGP(train_x, train_y, covar_module=covar, outcome_transform=Standardize(m=1))
    if previous is not None:
        _copy_hyperparameters(previous, model)
    if fit:
        with warnings.catch_warnings():  # BoTorch warns on every retry of an ill-conditioned fit; the fit still ends
            warnings.simplefilter("ignore")
            try:
                fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
            except ModelFittingError:  # every retry failed (e.g. many repeated points): keep the warm start
                if previous is None:
                    raise
                _copy_hyperparameters(previous, model)
    model.eval()
    return model


def _copy_hyperparameters(source: SingleTaskGP, target: SingleTaskGP) -> None:
    for name in ("covar_module", "mean_module", "likelihood"):
        getattr(target, name).load_state_dict(getattr(source, name).state_dict())


@dataclass
class Surrogates:
    """The privacy and utility GPs across iterations (mutable: it carries the warm-start hyperparameters).

    Attributes:
        refit_every: refit hyperparameters on every k-th call of :meth:`update` (the first always refits).
    """

    refit_every: int = 1
    privacy: SingleTaskGP | None = field(default=None, init=False)
    utility: SingleTaskGP | None = field(default=None, init=False)
    _calls: int = field(default=0, init=False)

    def update(self, x_privacy: np.ndarray, y_privacy: np.ndarray, x_utility: np.ndarray,
               y_utility: np.ndarray) -> ModelListGP:
        """Condition (and every ``refit_every`` calls, refit) both GPs on the observations so far.

        The privacy GP sees every trial (ε is known from the trial's plan even when it failed); the utility GP only
        the trials with a valid error.
        """
        fit = self._calls % self.refit_every == 0 or self.privacy is None
        self._calls += 1
        self.privacy = make_gp(x_privacy, y_privacy, self.privacy, fit=fit)
        self.utility = make_gp(x_utility, y_utility, self.utility, fit=fit or self.utility is None)
        return ModelListGP(self.privacy, self.utility)
