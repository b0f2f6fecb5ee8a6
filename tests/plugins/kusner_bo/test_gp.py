"""GP-UCB on a finite Λ with GPyTorch: normalised kernels, exact posteriors, the UCB rule, and device handling."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpaudit.errors import InvalidParameter
from dpaudit_plugins.kusner_bo.constants import beta_t
from dpaudit_plugins.kusner_bo.gp import (
    KERNELS,
    GpPosterior,
    KernelSpec,
    candidate_array,
    gp_ucb,
    kernel_matrix,
    ucb_index,
)

X = np.linspace(0.0, 1.0, 25)[:, None]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _numpy_posterior(spec, X, idx, y, noise):
    K = kernel_matrix(spec, X)
    Kxx = K[np.ix_(idx, idx)] + noise * np.eye(len(idx))
    kx = K[:, idx]
    mean = kx @ np.linalg.solve(Kxx, y)
    var = 1.0 - np.sum(kx * np.linalg.solve(Kxx, kx.T).T, axis=1)
    return mean, np.sqrt(np.clip(var, 0, None))


@pytest.mark.parametrize("name", KERNELS)
def test_kernels_are_normalised_and_match_their_formulas(name):
    spec = KernelSpec(name, 0.3)
    K = kernel_matrix(spec, X)
    np.testing.assert_allclose(np.diag(K), 1.0)
    r = 0.5 / 0.3
    expected = math.exp(-r * r / 2) if name == "se" else (1 + math.sqrt(5) * r + 5 * r * r / 3) * math.exp(
        -math.sqrt(5) * r)
    assert kernel_matrix(spec, [[0.0]], [[0.5]])[0, 0] == pytest.approx(expected, rel=1e-12)
    assert np.all(np.linalg.eigvalsh(K) > -1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", KERNELS)
def test_gpytorch_posterior_equals_the_closed_form(name, device):
    spec = KernelSpec(name, 0.2)
    idx, y = [3, 10, 20, 20], [0.5, -1.0, 2.0, 1.9]
    for noise in (0.01, 0.0):
        mean, std = GpPosterior(spec, X, noise, device).mean_and_std(idx, y)
        ref_mean, ref_std = _numpy_posterior(spec, X, idx, np.array(y), max(noise, 1e-8))
        np.testing.assert_allclose(mean, ref_mean, atol=1e-5)
        np.testing.assert_allclose(std, ref_std, atol=1e-4)
    prior_mean, prior_std = GpPosterior(spec, X, 0.01, device).mean_and_std([], [])
    assert np.all(prior_mean == 0.0) and np.all(prior_std == 1.0)


def test_the_gp_runs_on_the_requested_device():
    posterior = GpPosterior(KernelSpec("se", 0.2), X, 0.01, "cpu")
    assert posterior.device.type == "cpu" and posterior._X.device.type == "cpu"
    assert posterior._X.dtype == torch.float64


def test_session_device_is_cuda_exactly_when_available(make_session, monkeypatch):
    with make_session(protected=("v",)) as s:
        assert s.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        assert s.device.type == "cpu"
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        assert s.device.type == "cuda"


def test_ucb_rule_and_lowest_index_ties():
    assert ucb_index(np.array([0.0, 1.0, 1.0]), np.zeros(3), 4.0) == 1
    assert ucb_index(np.array([0.0, 0.0]), np.array([0.5, 1.0]), 4.0) == 1
    assert ucb_index(np.array([1.0, 0.0]), np.array([0.0, 0.6]), 4.0) == 1  # 0 + 2·0.6 > 1


def test_gp_ucb_makes_exactly_t_evaluations_and_follows_beta_t():
    calls = []
    f = lambda i: calls.append(i) or float(np.sin(6 * X[i, 0]))  # noqa: E731
    posterior = GpPosterior(KernelSpec("se", 0.2), X, 1e-4)
    trace = gp_ucb(f, posterior, 12, 0.1)
    assert list(trace.indices) == calls and len(calls) == 12
    assert trace.indices[0] == 0  # prior: every UCB equal, lowest index
    # replay the rule independently with the closed-form posterior
    for t in range(1, 12):
        mean, std = _numpy_posterior(posterior.spec, X, list(trace.indices[:t]), np.array(trace.values[:t]), 1e-4)
        ucb = mean + math.sqrt(beta_t(len(X), t + 1, 0.1)) * std
        assert ucb[trace.indices[t]] >= ucb.max() - 1e-6
    best = int(np.argmax(np.sin(6 * X[:, 0])))
    assert abs(int(np.argmax(trace.final_mean)) - best) <= 1


@pytest.mark.parametrize("bad", [[], [[np.nan]], [[[1.0]]], "abc"])
def test_bad_candidates_are_refused(bad):
    with pytest.raises(InvalidParameter):
        candidate_array(bad)


def test_bad_kernels_noise_and_values_are_refused():
    with pytest.raises(InvalidParameter):
        KernelSpec("rbf", 1.0)
    with pytest.raises(InvalidParameter):
        KernelSpec("se", 0.0)
    with pytest.raises(InvalidParameter):
        GpPosterior(KernelSpec("se", 0.2), X, -1.0)
    posterior = GpPosterior(KernelSpec("se", 0.2), X, 0.1)
    with pytest.raises(InvalidParameter):
        posterior.mean_and_std([0], [math.inf])
    with pytest.raises(InvalidParameter):
        gp_ucb(lambda i: math.nan, posterior, 3, 0.1)
