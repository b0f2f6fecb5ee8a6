"""The searches: DPareto's Bayesian optimisation (HVPoI or qLogNEHVI) and the random and grid baselines.

All work in the unit cube of the task's declared scales and call ``evaluate(unit, phase)`` once per trial, which
returns the :class:`~dpaudit_plugins.dpareto.trials.Trial` (the plugin binds it to a certified trial; the benchmark
to a synthetic objective). The BO loop (Avent et al. 2020, Alg. 1):

1. ``n_initial`` points of a scrambled Sobol design (seeded by the session's randomness);
2. ``n_iterations`` times: fit the privacy GP on (x, log ε) of every trial and the utility GP on (x, logit error) of
   the trials that did not fail (:mod:`~dpaudit_plugins.dpareto.objectives`); maximise the acquisition over the
   box (``raw_samples`` Sobol candidates, then L-BFGS-B from the best ``restarts``: BoTorch ``optimize_acqf``);
   round integer parameters; run the trial.

HVPoI's Pareto set is that of the observed trials and its reference point is the recorded one. While fewer than two
trials have a valid error the utility GP cannot be fitted, and the next point is the next Sobol point instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
from botorch.acquisition.multi_objective.objective import GenericMCMultiOutputObjective
from botorch.models import ModelListGP
from botorch.optim import optimize_acqf
from botorch.sampling import SobolQMCNormalSampler

from dpaudit_plugins.dpareto.config import BoSettings
from dpaudit_plugins.dpareto.domain import Domain
from dpaudit_plugins.dpareto.hvpoi import HypervolumePoI
from dpaudit_plugins.dpareto.objectives import privacy_transform, transform_reference, utility_transform
from dpaudit_plugins.dpareto.surrogate import DTYPE, Surrogates
from dpaudit_plugins.dpareto.trials import Trial

Evaluate = Callable[[np.ndarray, str], Trial]
"""``evaluate(unit, phase) -> Trial``: run one trial at unit coordinates ``unit``."""


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one intra-op thread, the caller's setting restored after. The GPs hold at most a few hundred
    points: with several threads the synchronisation dominates (tens of times slower on busy cores)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def sobol_points(n: int, dimension: int, seed: int) -> np.ndarray:
    """``n`` points of a scrambled Sobol sequence in [0, 1]^d (Owen scrambling, seeded)."""
    engine = torch.quasirandom.SobolEngine(dimension, scramble=True, seed=seed)
    return engine.draw(n, dtype=DTYPE).numpy()


def random_points(n: int, dimension: int, seed: int) -> np.ndarray:
    """``n`` independent uniform points of [0, 1]^d (uniform on the declared scales: the random-sampling baseline)."""
    return np.random.default_rng(seed).random((n, dimension))


def run_fixed(points: np.ndarray, phase: str, evaluate: Evaluate) -> list[Trial]:
    """Evaluate ``points`` in order (random sampling and grid search: every point fixed before the first trial)."""
    return [evaluate(point, phase) for point in points]


@dataclass(frozen=True)
class Observations:
    """The trials so far in the surrogates' terms: unit inputs, log ε of every trial, logit error of the valid ones.

    Attributes:
        x: unit coordinates of every trial, shape (n, d).
        log_epsilon: log ε of every trial (known from the plan, failed trials included), shape (n,).
        valid: which trials have a valid error, shape (n,).
        logit_error: logit of the valid trials' errors, shape (m,).
    """

    x: np.ndarray
    log_epsilon: np.ndarray
    valid: np.ndarray
    logit_error: np.ndarray

    @classmethod
    def of(cls, trials: list[Trial]) -> Observations:
        valid = np.array([not t.failed for t in trials], dtype=bool)
        return cls(x=np.array([t.unit for t in trials], dtype=float),
                   log_epsilon=privacy_transform([t.epsilon for t in trials]), valid=valid,
                   logit_error=utility_transform([t.error for t in trials if not t.failed]))

    @property
    def x_valid(self) -> np.ndarray:
        return self.x[self.valid]

    @property
    def valid_objectives(self) -> np.ndarray:
        """(log ε, logit error) of the trials with a valid error, shape (m, 2)."""
        return np.column_stack([self.log_epsilon[self.valid], self.logit_error])


def propose(method: str, models: ModelListGP, obs: Observations, reference: np.ndarray, settings: BoSettings,
            seed: int) -> np.ndarray:
    """The acquisition's maximiser over [0, 1]^d (before rounding).

    Args:
        method: ``"hvpoi"`` or ``"qlognehvi"``.
        reference: the reference point in the GP space (minimised objectives).
        seed: seeds the raw candidates and (qLogNEHVI) the quasi-MC samples.
    """
    d = obs.x.shape[1]
    if method == "hvpoi":
        acquisition = HypervolumePoI(models, obs.valid_objectives, reference)
    else:  # BoTorch maximises: negate both objectives and the reference point
        acquisition = qLogNoisyExpectedHypervolumeImprovement(
            models, ref_point=(-torch.as_tensor(reference, dtype=DTYPE)).tolist(),
            X_baseline=torch.as_tensor(obs.x_valid, dtype=DTYPE),
            objective=GenericMCMultiOutputObjective(lambda samples, X=None: -samples),
            sampler=SobolQMCNormalSampler(sample_shape=torch.Size([settings.mc_samples]), seed=seed),
            prune_baseline=True)
    bounds = torch.stack([torch.zeros(d, dtype=DTYPE), torch.ones(d, dtype=DTYPE)])
    candidate, _ = optimize_acqf(acquisition, bounds=bounds, q=1, num_restarts=settings.restarts,
                                 raw_samples=settings.raw_samples,
                                 options={"maxiter": settings.acquisition_maxiter, "seed": seed},
                                 retry_on_optimization_warning=False)
    return candidate.detach().numpy().reshape(d)


def bayesian_optimisation(domain: Domain, method: str, settings: BoSettings, reference_point: tuple[float, float],
                          evaluate: Evaluate, seed: int) -> list[Trial]:
    """DPareto's loop: ``settings.n_initial`` Sobol trials, then ``settings.n_iterations`` acquisition trials.

    Args:
        reference_point: the recorded anti-ideal (ε, error), transformed once here and used unchanged throughout.
        seed: the only randomness of the search (Sobol scrambling, raw candidates, MC samples).
    """
    reference = transform_reference(reference_point)
    sobol = sobol_points(settings.n_initial + settings.n_iterations, domain.dimension, seed)
    trials = [evaluate(domain.snap(point)[0], "initial") for point in sobol[:settings.n_initial]]
    surrogates = Surrogates(refit_every=settings.refit_every)
    for iteration in range(settings.n_iterations):
        obs = Observations.of(trials)
        if len(obs.x_valid) < 2:
            point = sobol[settings.n_initial + iteration]
        else:
            with single_thread():
                models = surrogates.update(obs.x, obs.log_epsilon, obs.x_valid, obs.logit_error)
                point = propose(method, models, obs, reference, settings, seed + 1 + iteration)
        trials.append(evaluate(domain.snap(point)[0], "bo"))
    return trials
