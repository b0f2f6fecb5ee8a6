"""The binning baselines (Smith et al. 2018, Sec. 4 and supplement): the bin sums' sensitivity attacked by brute
force, the integral kernel's closed form against numerical integration, the release through the session (charged,
recorded, verified, refused before any private computation when unaffordable), the noise's scale by a seeded test
that catches a halved sensitivity, and the fitted GP recovering a smooth function when the noise is small."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import dblquad, quad

from dpaudit.errors import BudgetExceeded
from dpaudit.events import PrivacyEvent
from dpaudit.ledger import read_records
from dpaudit.sensitivity import Neighbouring
from dpaudit.verify import verify_bundle
from dpaudit_plugins.dp_gp.binning import (
    GAUSSIAN,
    INTEGRAL,
    SIMPLE,
    Bins,
    bin_sums,
    box_average_kernel,
    box_point_kernel,
    predict,
    release_bin_sums,
)
from dpaudit_plugins.dp_gp.formulas import bin_sums_sensitivity
from dpaudit_plugins.dp_gp.release import OutputRule

RULE = OutputRule(-1.0, 1.0, 0.0, 0.5)  # d = 4 in normalised units
D = 4.0


def _session(make_session, epsilon=10.0):
    return make_session(epsilon=epsilon, delta=1e-5, protected=("howell1-women",), neighbouring="replace_one")


def test_one_replaced_output_moves_one_bin_sum_by_at_most_d():
    """Brute force over every single-output replacement by either end of the interval (200 random designs' worth
    of (X, y) pairs): the L1 and the L2 change of the sums never exceeds d, and reaches it."""
    rng = np.random.default_rng(0)
    bins = Bins.uniform([0.0, 0.0], [1.0, 1.0], [4, 3])
    assert bin_sums_sensitivity(RULE.formula_inputs(), Neighbouring.REPLACE_ONE) == D
    worst = 0.0
    for _ in range(20):
        X = rng.uniform(-0.2, 1.2, (10, 2))  # some points outside the edges: they fall into the outer bins
        y = rng.uniform(-2.0, 2.0, 10)  # raw outputs, clipped by the rule
        base, _ = bin_sums(bins, X, RULE.apply(y))
        for j in range(10):
            for value in (-1.0, 1.0, 5.0):
                replaced = y.copy()
                replaced[j] = value
                change = bin_sums(bins, X, RULE.apply(replaced))[0] - base
                assert np.count_nonzero(np.abs(change) > 1e-12) <= 1
                worst = max(worst, float(np.sum(np.abs(change))))
    assert worst <= D and worst > 0.9 * D


def test_the_integral_kernel_matches_numerical_integration():
    lower, upper = np.array([[0.0, 1.0], [2.5, 0.0]]), np.array([[1.5, 2.0], [4.0, 0.5]])
    ell, v = (1.3, 0.7), 2.0
    K = box_average_kernel(lower, upper, ell, v)

    def average(i, j):
        value = v
        for d in range(2):
            inner = dblquad(lambda u, w, e=ell[d]: np.exp(-0.5 * ((u - w) / e) ** 2), lower[i, d], upper[i, d],
                            lower[j, d], upper[j, d])[0]
            value *= inner / ((upper[i, d] - lower[i, d]) * (upper[j, d] - lower[j, d]))
        return value

    for i in range(2):
        for j in range(2):
            assert K[i, j] == pytest.approx(average(i, j), rel=1e-7)
    point = np.array([[0.7, 0.2]])
    cross = box_point_kernel(point, lower, upper, ell, v)
    for j in range(2):
        expected = v * np.prod([quad(lambda u, e=ell[d], x=point[0, d]: np.exp(-0.5 * ((u - x) / e) ** 2),
                                     lower[j, d], upper[j, d])[0] / (upper[j, d] - lower[j, d]) for d in range(2)])
        assert cross[0, j] == pytest.approx(expected, rel=1e-7)
    assert np.all(np.linalg.eigvalsh(K) > 0)


@pytest.mark.parametrize("kernel", [SIMPLE, INTEGRAL])
def test_the_release_is_charged_recorded_verified_and_a_smooth_function_is_recovered(make_session, kernel):
    X = np.linspace(0.0, 10.0, 400)[:, None]
    truth = 0.8 * np.sin(X[:, 0] / 2.0)
    y = RULE.to_original(truth)  # raw units: the rule maps them back to truth
    bins = Bins.uniform(0.0, 10.0, 20)
    s = _session(make_session, epsilon=200.0)
    view = s.for_plugin("binning-test", "1")
    released = release_bin_sums(view, bins, X, y, RULE, epsilon=100.0)
    assert np.all(released.counts == 20)
    predictions = predict(released, X, lengthscale=2.0, variance=1.0, noise=1e-3, kernel=kernel)
    rmse = float(np.sqrt(np.mean((predictions - truth) ** 2)))
    assert rmse < (0.05 if kernel == INTEGRAL else 0.1)  # simple binning carries the bins' own averaging bias
    s.close()
    (charge,) = [PrivacyEvent.from_dict(r.body["event"]) for r in read_records(s.ledger_path)[0]
                 if r.type == "charge"]
    assert charge.kind == "laplace" and charge.sensitivity.formula == "dp_gp_bin_sums"
    assert charge.sensitivity.recompute(Neighbouring.REPLACE_ONE) == charge.sensitivity.value == D
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_gaussian_noise_is_calibrated_by_the_session_and_unaffordable_releases_are_refused_first(make_session):
    X = np.linspace(0.0, 1.0, 50)[:, None]
    bins = Bins.uniform(0.0, 1.0, 5)
    s = _session(make_session, epsilon=1.0)
    view = s.for_plugin("binning-test", "1")
    released = release_bin_sums(view, bins, X, np.zeros(50), RULE, epsilon=0.5, noise=GAUSSIAN, delta=1e-6)
    assert released.noise == GAUSSIAN and released.noise_variance > (D / 0.5) ** 2  # σ > Δ/ε for small δ

    class Exploding:  # outputs that fail if touched: the refusal must come before the data is read
        def __array__(self, *args, **kwargs):
            raise AssertionError("the outputs were read before the budget was asked")

    with pytest.raises(BudgetExceeded):
        release_bin_sums(view, bins, X, Exploding(), RULE, epsilon=5.0)
    s.close()
    charges = [r for r in read_records(s.ledger_path)[0] if r.type == "charge"]
    assert len(charges) == 1


def _variance_matches(noise: np.ndarray, expected: float) -> bool:
    """Whether the sample variance of 2 000 Laplace draws is within ±20 % of ``expected``: the estimate's relative
    standard error is sqrt((κ − 1)/n) = sqrt(5/2000) = 5 % (Laplace kurtosis κ = 6), so a correct scale fails with
    probability below 10⁻⁴ and a halved sensitivity (a quarter of the variance) always fails."""
    return abs(float(np.mean(noise**2)) / expected - 1.0) < 0.2


def test_the_noise_has_the_calibrated_scale_and_a_halved_sensitivity_is_caught(make_session):
    X = np.arange(2000.0)[:, None] + 0.5
    bins = Bins.uniform(0.0, 2000.0, 2000)  # one point per bin
    y = np.zeros(2000)
    s = _session(make_session, epsilon=10.0)
    view = s.for_plugin("binning-test", "1")
    released = release_bin_sums(view, bins, X, y, RULE, epsilon=1.0)
    assert released.noise_variance == pytest.approx(2 * D**2, rel=2e-3)  # the grid adds ≤ Δ/1024 to Δ
    assert _variance_matches(released.sums, released.noise_variance)
    broken = view.laplace(np.zeros(2000), D / 2, 1.0, label="broken: half the sensitivity", grid=D / 2**21)
    assert not _variance_matches(np.asarray(broken, dtype=np.float64), released.noise_variance)
    s.close()


def test_binning_is_a_method_of_the_plugin(make_session):
    """``dpaudit run dp-gp`` with method "binning": the Laplace release on the bins of the configured inputs, the GP
    fitted to the noisy means at the test points, a verified bundle; an unknown kernel is refused up front."""
    from dpaudit_plugins.dp_gp import PLUGIN, DpGpConfig

    config = {**PLUGIN.smoke_config, "method": "binning", "bin_edges": [[15.0, 25.0, 30.0, 35.0, 50.0]],
              "bin_kernel": "integral"}
    s = make_session(epsilon=2.0, delta=1e-5, protected=PLUGIN.protected, neighbouring="replace_one")
    out = PLUGIN.run(s, config)
    s.close()
    assert out["method"] == "binning" and out["bins"] == 4 and sum(out["counts"]) > 0
    assert len(out["predictions"]) == len(out["test_points"]) and out["guarantee"].startswith("1-DP")
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid
    with pytest.raises(ValueError, match="bin_kernel"):
        DpGpConfig.from_mapping({**config, "bin_kernel": "cubic"})
