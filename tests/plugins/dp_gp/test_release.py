"""dp-gp releases: the private mean is the linear map the formulas bound, the budget is asked before it is computed,
the noise is N(0, σ²M) (seeded statistical test with a broken variant), δ(ε) of the release against an independent
numerical integration, and a forged ledger record is rejected by verify."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from dpaudit import canonical
from dpaudit.errors import BudgetExceeded, InvalidParameter
from dpaudit.ledger import Record
from dpaudit.mechanisms.gaussian import gaussian_event_delta, gaussian_grid_parameters
from dpaudit.sensitivity import Neighbouring
from dpaudit.verify import verify_bundle
from dpaudit_plugins.dp_gp import gp as gp_module
from dpaudit_plugins.dp_gp.formulas import cloaking_matrix, paper_c, standard_sensitivity
from dpaudit_plugins.dp_gp.gp import posterior_mean
from dpaudit_plugins.dp_gp.release import GpModel, OutputRule, plan_cloaking, plan_standard, release, whiten

REPLACE = Neighbouring.REPLACE_ONE
RULE = OutputRule(clip_lower=100.0, clip_upper=200.0, centre=150.0, scale=20.0)


def _problem(seed: int = 0, n: int = 40, P: int = 12):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0, 80, n))[:, None]
    y = 150 + 30 * np.sin(X[:, 0] / 15) + rng.normal(0, 8, n)
    return GpModel(X, 20.0, 1.0, 0.3, prior_mean=0.1), y, np.linspace(0, 90, P)[:, None]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device on this machine"))])
def test_gpytorch_posterior_mean_is_the_linear_map_the_formulas_bound(device):
    model, y, Xs = _problem()
    C, _ = cloaking_matrix(model.X, Xs, model.lengthscale, model.variance, model.noise)
    z = RULE.apply(y)
    mean = posterior_mean(model.X, z, Xs, lengthscale=model.lengthscale, variance=model.variance, noise=model.noise,
                          prior_mean=model.prior_mean, device=device)
    np.testing.assert_allclose(mean, model.prior_mean + C @ (z - model.prior_mean), atol=1e-8)


def test_gpytorch_holds_the_public_hyperparameters_in_float64():
    """Set before the float64 conversion, ℓ, v and m were rounded through float32 (ℓ = 1.5 became 1.500000035) and
    the released mean was that of other hyperparameters than Δ's, off by ~1e-7 relative: a Δ that is not an upper
    bound. The GPyTorch mean must be the formulas' linear map to float64 rounding."""
    rng = np.random.default_rng(5)
    X, Xs = rng.uniform(0, 10, size=(40, 1)), rng.uniform(0, 10, size=(25, 1))
    z = rng.uniform(-2, 2, size=40)
    ell, v, noise, m = 1.5, 3.3, 0.3, 0.1
    C, _ = cloaking_matrix(X, Xs, ell, v, noise)
    mean = posterior_mean(X, z, Xs, lengthscale=ell, variance=v, noise=noise, prior_mean=m, device="cpu")
    np.testing.assert_allclose(mean, m + C @ (z - m), rtol=1e-11, atol=1e-12)


def test_budget_is_refused_before_the_posterior_mean_is_computed(make_session, monkeypatch):
    calls = []
    monkeypatch.setattr(gp_module, "posterior_mean", lambda *a, **k: calls.append(1))
    model, y, Xs = _problem()
    with make_session(epsilon=0.5, delta=1e-6, neighbouring="replace_one", protected=("outputs",)) as s:
        view = s.for_plugin("dp-gp-test", "0")
        with pytest.raises(BudgetExceeded):
            release(view, plan_cloaking(model, RULE, Xs, REPLACE), y, 1.0, 1e-6)
        assert s.spent_epsilon() == 0.0
    assert calls == []


def _released_noise(make_session, plan, y, releases: int, whitened: bool) -> np.ndarray:
    """The standardised noise of ``releases`` seeded releases: L⁻¹(f̃ − f*)/σ (or, for the broken variant that
    forgets the whitening, (f̃ − f*)/(σ·sqrt(M_jj)), which is marginally right but correlated)."""
    model = plan.model
    mean = posterior_mean(model.X, RULE.apply(y), plan.X_star, lengthscale=model.lengthscale,
                          variance=model.variance, noise=model.noise, prior_mean=model.prior_mean, device="cpu")
    out = []
    with make_session(epsilon=1e6, delta=0.5, neighbouring="replace_one", protected=("outputs",)) as s:
        view = s.for_plugin("dp-gp-test", "0")
        for _ in range(releases):
            r = release(view, plan, y, 1.0, 1e-3)
            noise = (r.predictions - RULE.to_original(mean)) / RULE.scale
            out.append(whiten(plan, noise + model.prior_mean) / r.sigma if whitened
                       else noise / (r.sigma * np.sqrt(np.diag(plan.covariance))))
    return np.concatenate(out)


def test_release_noise_is_sigma_squared_m(make_session):
    """40 releases × 12 test points: the whitened noise must be iid N(0, 1). KS test at α = 10⁻³; the
    broken variant (noise standardised per coordinate only, i.e. correlations ignored) is caught through the lag-1
    correlation of neighbouring test points (≈ 0.9 under the cloaking M), whose z-score is then > 20; the power of the
    correlation check against that alternative is ≈ 1 (its null sd is 1/sqrt(480))."""
    model, y, Xs = _problem()
    plan = plan_cloaking(model, RULE, Xs, REPLACE)
    z = _released_noise(make_session, plan, y, 40, whitened=True)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    pairs = z.reshape(40, -1)
    lag = np.corrcoef(pairs[:, :-1].ravel(), pairs[:, 1:].ravel())[0, 1]
    assert abs(lag) * math.sqrt(pairs[:, 1:].size) < 3.3
    broken = _released_noise(make_session, plan, y, 40, whitened=False).reshape(40, -1)
    lag = np.corrcoef(broken[:, :-1].ravel(), broken[:, 1:].ravel())[0, 1]
    assert abs(lag) * math.sqrt(broken[:, 1:].size) > 3.3


def _numerical_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of the Gaussian shift N(0, 1) vs N(μ, 1), by integrating (p − e^ε q)⁺ numerically (Dong, Roth & Su
    2022, the privacy-loss form; independent of dpaudit's closed forms)."""
    threshold = epsilon / mu + mu / 2  # p = N(μ, 1), q = N(0, 1): p(x) ≥ e^ε q(x) ⇔ x ≥ ε/μ + μ/2
    value, _ = integrate.quad(lambda x: stats.norm.pdf(x, mu) - math.exp(epsilon) * stats.norm.pdf(x),
                              threshold, math.inf, epsabs=1e-14, epsrel=1e-10)
    return value


@pytest.mark.parametrize(("method", "epsilon", "delta"), [("cloaking", 1.0, 0.01), ("standard", 50.0, 0.01),
                                                          ("cloaking", 0.3, 1e-6)])
def test_delta_of_the_release_against_numerical_integration(method, epsilon, delta):
    model, _, Xs = _problem()
    plan = (plan_cloaking if method == "cloaking" else plan_standard)(model, RULE, Xs, REPLACE)
    event = plan.event(REPLACE, epsilon, delta)
    sigma_grid, delta_grid = gaussian_grid_parameters(event)
    exact = _numerical_delta(delta_grid / sigma_grid, epsilon)  # the continuous Gaussian at the grid sensitivity
    assert exact <= delta  # the release meets its claim
    assert exact <= gaussian_event_delta(event) <= delta  # the recorded privacy map is an upper bound
    assert gaussian_grid_parameters(event)[1] <= plan.sensitivity.value / plan.grid() * (1 + 1e-3)


def test_the_papers_classical_constant_fails_at_large_epsilon():
    """The paper's noise Δ·c(δ)/ε with c(δ) = sqrt(2 ln(2/δ)) at ε = 50, δ = 0.01 (its standard-method setting):
    integrated, its δ(50) is above 0.9, so dpaudit never certifies with it."""
    mu = 50.0 / paper_c(0.01)  # Δ/σ
    assert _numerical_delta(mu, 50.0) > 0.9
    assert _numerical_delta(1.0 / paper_c(0.01), 1.0) <= 0.01  # and it does hold at ε = 1


def test_forged_cloaking_record_is_rejected_by_verify(make_session):
    """A forger halves every λ in the charge record (a smaller M than the noise was drawn from, so a smaller claimed
    noise) and re-chains the ledger's hashes, but cannot re-sign the certificate: verify says INVALID, and its
    recomputation of Δ from the forged public inputs exceeds the recorded Δ."""
    model, y, Xs = _problem()
    with make_session(epsilon=2.0, delta=1e-5, neighbouring="replace_one", protected=("outputs",)) as s:
        release(s.for_plugin("dp-gp-test", "0"), plan_cloaking(model, RULE, Xs, REPLACE), y, 1.0, 1e-6)
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid
    records = [Record.from_line(line) for line in s.ledger_path.read_text(encoding="utf-8").splitlines()]
    forged, prev, found = [], records[0].prev, False
    for record in records:
        body = record.body
        if record.type == "charge" and "lambdas" in body["event"]["sensitivity"]["inputs"]:
            body = json.loads(json.dumps(body))
            inputs = body["event"]["sensitivity"]["inputs"]
            inputs["lambdas"] = [v / 2 for v in inputs["lambdas"]]
            found = True
        content = {"seq": record.seq, "type": record.type, "time": record.time, "prev": prev, "body": body}
        forged.append(Record(**content, hash=canonical.sha256_hex(canonical.encode(content))))
        prev = forged[-1].hash
    assert found, "no charge record holds the cloaking λ"
    s.ledger_path.write_text("".join(r.to_line() for r in forged), encoding="utf-8")
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert not report.valid
    failed = {check.name: check.detail for check in report.checks if not check.ok}
    assert "ledger-chain" not in failed  # the chain itself was re-made consistently
    assert "recorded sensitivity" in failed["charges"] and "dp_gp_cloaking" in failed["charges"]


def test_plan_for_another_relation_is_refused_before_any_charge(make_session, monkeypatch):
    """A replace-one plan passed to ``release`` in an add/remove session was charged and released (verify flagged it
    only afterwards): it must be refused before the budget is asked or the posterior mean computed."""
    calls = []
    monkeypatch.setattr(gp_module, "posterior_mean", lambda *a, **k: calls.append(1))
    model, y, Xs = _problem()
    plan = plan_standard(model, RULE, Xs, REPLACE)
    assert plan.neighbouring is REPLACE
    with make_session(epsilon=10.0, delta=1e-5, neighbouring="add_remove", protected=("outputs",)) as s:
        view = s.for_plugin("dp-gp-test", "0")
        monkeypatch.setattr(view, "check_affordable", lambda events: calls.append(2))
        with pytest.raises(InvalidParameter, match="replace_one neighbours but the session uses add_remove"):
            release(view, plan, y, 1.0, 1e-6)
        assert s.spent_epsilon() == 0.0
    assert calls == []


def test_standard_charge_records_test_points_and_jitter():
    """An auditor needs X* and j to rebuild M = K_** + jI (and check M ⪰ K_**, which Δ's "any X*, any j" rests on);
    verify's formula refuses a record holding one without the other, or a bad jitter."""
    model, _, Xs = _problem()
    plan = plan_standard(model, RULE, Xs, REPLACE, jitter=1e-4)
    inputs = plan.sensitivity.input_map
    np.testing.assert_array_equal(np.array(inputs["X_star"]), Xs)
    assert inputs["jitter"] == 1e-4
    base = {**model.formula_inputs(), **RULE.formula_inputs()}
    full = {**base, "X_star": Xs.tolist(), "jitter": 1e-4}
    assert standard_sensitivity(full, REPLACE) == standard_sensitivity(base, REPLACE) == plan.sensitivity.value
    for bad in ({**base, "jitter": 1e-4}, {**full, "jitter": 0.0}, {**full, "X_star": [[1.0, 2.0]]}):
        with pytest.raises(InvalidParameter):
            standard_sensitivity(bad, REPLACE)
