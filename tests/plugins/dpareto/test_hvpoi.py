"""HVPoI in closed form (plugins/dpareto/hvpoi.py) against a Monte-Carlo estimate.

Power: P[y ∈ A] is estimated from N = 400,000 seeded draws per prediction, standard error at most
0.5/√N = 7.9·10⁻⁴; the test allows 5 standard errors (a false alarm has probability < 10⁻⁶ per prediction). The
improvement I(μ) is checked exactly against the hypervolume of the staircase with μ added (an independent
computation). The broken variants (the first cell (−∞, a₁) × (−∞, r₂) dropped; the reference point replaced by the
worst observation, as GPflowOpt did) differ from the Monte-Carlo value by more than 20 standard errors at one of the
predictions used at least, so the same tolerance catches them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpaudit_plugins.dpareto.hvpoi import HypervolumePoI, cells_for, hvpoi
from dpaudit_plugins.dpareto.pareto import hypervolume, nondominated_cells, staircase

REFERENCE = np.array([2.0, 1.5])
OBSERVED = np.array([[0.0, 1.0], [0.5, 0.2], [1.2, -0.3], [1.5, 0.8], [3.0, -1.0]])  # last: beyond r1
DRAWS = 400_000
STANDARD_ERROR = 0.5 / np.sqrt(DRAWS)
PREDICTIONS = [((0.2, 0.1), (0.5, 0.4)), ((-0.5, 1.2), (0.3, 0.3)), ((1.0, -0.5), (0.2, 0.6)),
               ((0.3, 0.6), (1.0, 1.0))]


def monte_carlo_probability(mean, std, front, reference, seed):
    y = np.random.default_rng(seed).normal(mean, std, size=(DRAWS, 2))
    below = np.all(y < reference, axis=1)
    dominated = np.zeros(DRAWS, dtype=bool)
    for p in front:
        dominated |= np.all(y >= p, axis=1)
    return float(np.mean(below & ~dominated))


def closed_form(mean, std, lower, upper):
    t = torch.tensor
    return float(hvpoi(t(mean, dtype=torch.float64), t(std, dtype=torch.float64), lower, upper))


@pytest.mark.statistical
@pytest.mark.parametrize("index", range(len(PREDICTIONS)))
def test_closed_form_matches_monte_carlo(index):
    mean, std = PREDICTIONS[index]
    front = staircase(OBSERVED, REFERENCE)
    improvement = hypervolume(np.vstack([front, [mean]]), REFERENCE) - hypervolume(front, REFERENCE)
    assert improvement > 0
    probability = monte_carlo_probability(mean, std, front, REFERENCE, seed=index)
    lower, upper = cells_for(OBSERVED, REFERENCE)
    value = closed_form(mean, std, lower, upper)
    assert value / improvement == pytest.approx(probability, abs=5 * STANDARD_ERROR)


@pytest.mark.statistical
def test_broken_variants_are_caught():
    front = staircase(OBSERVED, REFERENCE)
    lower, upper = cells_for(OBSERVED, REFERENCE)
    moved = np.max(OBSERVED, axis=0)  # GPflowOpt's replacement of the reference point
    moved_lower, moved_upper = (torch.as_tensor(a) for a in nondominated_cells(staircase(OBSERVED, moved), moved))
    gaps = {"first cell dropped": [], "reference replaced": []}
    for index, (mean, std) in enumerate(PREDICTIONS):
        improvement = hypervolume(np.vstack([front, [mean]]), REFERENCE) - hypervolume(front, REFERENCE)
        probability = monte_carlo_probability(mean, std, front, REFERENCE, seed=index)
        gaps["first cell dropped"].append(abs(closed_form(mean, std, lower[1:], upper[1:]) / improvement
                                              - probability))
        gaps["reference replaced"].append(abs(closed_form(mean, std, moved_lower, moved_upper) / improvement
                                              - probability))
    for variant, gap in gaps.items():  # the tolerance of the test above is 5 standard errors
        assert max(gap) > 20 * STANDARD_ERROR, variant


def test_zero_where_the_mean_is_dominated_and_gradients_are_finite():
    lower, upper = cells_for(OBSERVED, REFERENCE)
    mean = torch.tensor([[1.6, 0.9], [0.2, 0.1]], dtype=torch.float64, requires_grad=True)
    std = torch.tensor([[0.3, 0.3], [0.3, 0.3]], dtype=torch.float64, requires_grad=True)
    value = hvpoi(mean, std, lower, upper)
    assert value[0] == 0.0 and value[1] > 0.0
    value.sum().backward()
    assert torch.isfinite(mean.grad).all() and torch.isfinite(std.grad).all()


class _FixedPosterior:
    def __init__(self, mean, variance):
        self.mean, self.variance = mean, variance


class _FixedModel(torch.nn.Module):
    """A two-output model predicting N(x[..., :2], 0.25) (for the acquisition wrapper's shapes)."""

    num_outputs = 2

    def posterior(self, X, **kwargs):
        return _FixedPosterior(X[..., :2], torch.full_like(X[..., :2], 0.25))


def test_acquisition_wrapper_evaluates_batches():
    acquisition = HypervolumePoI(_FixedModel(), OBSERVED, REFERENCE)
    X = torch.tensor([[[0.2, 0.1, 0.0]], [[1.6, 0.9, 0.0]]], dtype=torch.float64)
    values = acquisition(X)
    lower, upper = cells_for(OBSERVED, REFERENCE)
    assert values.shape == (2,)
    assert float(values[0]) == pytest.approx(closed_form((0.2, 0.1), (0.5, 0.5), lower, upper))
