"""The GP surrogates (plugins/dpareto/surrogate.py): Matérn-5/2 ARD, warm-started refits, refit every k-th update,
and the search's acquisition step staying inside the box."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from gpytorch.kernels import MaternKernel

from dpaudit_plugins.dpareto.config import BoSettings
from dpaudit_plugins.dpareto.objectives import transform_reference
from dpaudit_plugins.dpareto.search import Observations, propose, single_thread
from dpaudit_plugins.dpareto.surrogate import Surrogates, make_gp


def _data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, 3))
    return x, 3.0 * x[:, 0] - 2.0 * x[:, 1] + 0.05 * rng.standard_normal(n)


def _lengthscale(gp) -> np.ndarray:
    return gp.covar_module.base_kernel.lengthscale.detach().numpy().copy()


def test_kernel_is_matern_five_halves_with_one_lengthscale_per_input():
    x, y = _data(12)
    with single_thread():
        gp = make_gp(x, y)
    kernel = gp.covar_module.base_kernel
    assert isinstance(kernel, MaternKernel) and kernel.nu == 2.5
    assert kernel.lengthscale.shape[-1] == 3
    ls = _lengthscale(gp)[0]
    assert ls[2] > ls[0]  # the irrelevant input gets the longest lengthscale (ARD)


def test_hyperparameters_are_kept_between_refits_and_refits_start_from_them():
    x, y = _data(14)
    surrogates = Surrogates(refit_every=2)
    with single_thread():
        surrogates.update(x[:12], y[:12], x[:12], y[:12])
        fitted = _lengthscale(surrogates.utility)
        surrogates.update(x[:13], y[:13], x[:13], y[:13])  # not a refit: conditioned with the same values
        np.testing.assert_array_equal(_lengthscale(surrogates.utility), fitted)
        assert surrogates.utility.train_inputs[0].shape[0] == 13
        surrogates.update(x, y, x, y)  # refit, warm-started
    assert not np.array_equal(_lengthscale(surrogates.utility), fitted)


@pytest.mark.parametrize("method", ["hvpoi", "qlognehvi"])
def test_acquisition_proposes_a_point_of_the_box(method):
    x, log_eps = _data(10, seed=1)
    logit_err = -0.5 * log_eps + 0.1 * np.random.default_rng(2).standard_normal(10)
    obs = Observations(x=x, log_epsilon=log_eps, valid=np.ones(10, dtype=bool), logit_error=logit_err)
    settings = BoSettings(raw_samples=64, restarts=1, acquisition_maxiter=20, mc_samples=32)
    with single_thread():
        models = Surrogates().update(obs.x, obs.log_epsilon, obs.x_valid, obs.logit_error)
        point, fell_back = propose(method, models, obs, transform_reference((10.0, 1.0)), settings, seed=3)
        again, _ = propose(method, models, obs, transform_reference((10.0, 1.0)), settings, seed=3)
    assert point.shape == (3,) and np.all((point >= 0) & (point <= 1))
    assert not fell_back  # the reference (10, 1) leaves room to improve: the acquisition chose the point
    np.testing.assert_array_equal(point, again)  # seeded: the same proposal


def test_a_proposal_where_hvpoi_is_zero_everywhere_is_flagged_as_a_fallback():
    """HVPoI is zero wherever the predicted mean is dominated by the observed front: with an observation at the
    ideal corner (log ε and logit error far below every prediction) no candidate can improve, BoTorch starts from a
    random candidate, and ``propose`` says so (the trial's phase becomes ``bo-fallback``)."""
    x, log_eps = _data(10, seed=1)
    logit_err = -0.5 * log_eps + 0.1 * np.random.default_rng(2).standard_normal(10)
    x, log_eps, logit_err = np.vstack([x, x[:1]]), np.append(log_eps, -50.0), np.append(logit_err, -50.0)
    obs = Observations(x=x, log_epsilon=log_eps, valid=np.ones(11, dtype=bool), logit_error=logit_err)
    settings = BoSettings(raw_samples=64, restarts=1, acquisition_maxiter=20, mc_samples=32)
    with single_thread():
        models = Surrogates().update(obs.x, obs.log_epsilon, obs.x_valid, obs.logit_error)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the fallback's warning is consumed, not passed on
            point, fell_back = propose("hvpoi", models, obs, transform_reference((10.0, 1.0)), settings, seed=3)
    assert fell_back and point.shape == (3,)


def test_single_thread_restores_the_setting():
    before = torch.get_num_threads()
    with single_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_a_refit_that_fails_keeps_the_warm_start_and_a_first_fit_that_fails_raises(monkeypatch):
    """BoTorch gives up on some fits (every retry failed, e.g. after BO sampled one corner dozens of times): the loop
    then keeps the previous hyperparameters and conditions on the data; with no previous GP the error stands."""
    from botorch.exceptions.errors import ModelFittingError

    from dpaudit_plugins.dpareto import surrogate

    x, y = _data(20)
    first = make_gp(x[:10], y[:10])

    def fail(mll):
        mll.model.covar_module.base_kernel.raw_lengthscale.data.fill_(7.0)  # a failed fit may leave anything behind
        raise ModelFittingError("All attempts to fit the model have failed.")

    monkeypatch.setattr(surrogate, "fit_gpytorch_mll", fail)
    second = make_gp(x, y, previous=first)
    np.testing.assert_array_equal(_lengthscale(second), _lengthscale(first))
    assert second.train_inputs[0].shape[0] == 20
    with pytest.raises(ModelFittingError):
        make_gp(x, y)
