"""The searches: DPareto's Bayesian optimisation (HVPoI or qLogNEHVI) and the random and grid baselines.

All work in the unit cube of the task's declared scales and call ``evaluate(units, phases)`` once per batch, which
returns the :class:`~dpaudit_plugins.dpareto.trials.Trial` (the plugin binds it to a certified trial; the benchmark
to a synthetic objective). The BO loop (Avent et al. 2020, Alg. 1):

1. ``n_initial`` points of a scrambled Sobol design (seeded by the session's randomness);
2. ``n_iterations`` times: fit the privacy GP on (x, log ε) of every trial and the utility GP on (x, logit error) of
   the trials that did not fail (:mod:`~dpaudit_plugins.dpareto.objectives`); maximise the acquisition over the
   box (``raw_samples`` Sobol candidates, then L-BFGS-B from the best ``restarts``: BoTorch ``optimize_acqf``);
   round integer parameters; run the trial.

HVPoI's Pareto set is that of the observed trials and its reference point is the recorded one. While fewer than two
trials have a valid error the utility GP cannot be fitted, and the next point is the next Sobol point instead.

Where the acquisition is zero at every candidate BoTorch tries (HVPoI is zero wherever the predicted mean is
dominated by the observed front, which late in a run with noisy errors can be everywhere), BoTorch starts its
optimiser from a random candidate with zero gradient, so the proposal is a random point: such a trial's phase is
:data:`FALLBACK_PHASE` instead of ``"bo"``, so a run states how many of its BO trials the acquisition really chose.

With parallel workers, ``evaluate`` takes a batch of points and both phases run ``batch`` points at a time: BO
proposes a batch by the kriging believer for HVPoI or jointly for qLogNEHVI (:func:`propose_batch`;
docs/plugins/dpareto.md, "Parallel trials"). ``batch = 1`` is the sequential loop above.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
from botorch.acquisition.multi_objective.objective import GenericMCMultiOutputObjective
from botorch.exceptions.warnings import BadInitialCandidatesWarning
from botorch.models import ModelListGP
from botorch.optim import optimize_acqf
from botorch.sampling import SobolQMCNormalSampler

from dpaudit_plugins.dpareto.config import BoSettings
from dpaudit_plugins.dpareto.domain import Domain
from dpaudit_plugins.dpareto.hvpoi import HypervolumePoI
from dpaudit_plugins.dpareto.objectives import privacy_transform, transform_reference, utility_transform
from dpaudit_plugins.dpareto.surrogate import DTYPE, Surrogates, make_gp
from dpaudit_plugins.dpareto.trials import Trial

FALLBACK_PHASE = "bo-fallback"
"""The phase of a BO trial whose acquisition was zero at every candidate BoTorch tried (a random point)."""

Evaluate = Callable[[np.ndarray, Sequence[str]], list[Trial]]
"""``evaluate(units, phases) -> trials``: run one batch of trials at the rows of ``units`` (q, d), possibly in
parallel, with the q ``phases`` (:attr:`Trial.phase`), and return them in row order."""


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


def run_fixed(points: np.ndarray, phase: str, evaluate: Evaluate, batch: int = 1) -> list[Trial]:
    """Evaluate ``points`` in order, ``batch`` at a time (random sampling and grid search: every point fixed before
    the first trial)."""
    return [trial for start in range(0, len(points), batch)
            for trial in evaluate(points[start:start + batch], [phase] * len(points[start:start + batch]))]


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
            seed: int, q: int = 1) -> tuple[np.ndarray, bool]:
    """The acquisition's maximiser over [0, 1]^d (before rounding): shape (d,) for ``q = 1``, else (q, d); and
    whether BoTorch fell back to a random start because the acquisition was zero at every candidate it tried
    (BoTorch's ``BadInitialCandidatesWarning``, caught here: the point is then a random one).

    Args:
        method: ``"hvpoi"`` or ``"qlognehvi"``.
        reference: the reference point in the GP space (minimised objectives).
        seed: seeds the raw candidates and (qLogNEHVI) the quasi-MC samples.
        q: the joint batch size (qLogNEHVI's native q-batch; HVPoI is analytic: 1 only).
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
    fell_back = False
    with warnings.catch_warnings():  # the filters and the display hook as they were, restored on exit
        warnings.filterwarnings("always", category=BadInitialCandidatesWarning)
        passed_on = warnings.showwarning

        def note_fallback(message, category, filename, lineno, file=None, line=None) -> None:
            nonlocal fell_back
            if issubclass(category, BadInitialCandidatesWarning):
                fell_back = True  # consumed: it is the trial's phase now
            else:  # any other warning reaches the caller's handler through the caller's own filters
                passed_on(message, category, filename, lineno, file, line)

        warnings.showwarning = note_fallback
        candidate, _ = optimize_acqf(acquisition, bounds=bounds, q=q, num_restarts=settings.restarts,
                                     raw_samples=settings.raw_samples,
                                     options={"maxiter": settings.acquisition_maxiter, "seed": seed},
                                     retry_on_optimization_warning=False)
    point = candidate.detach().numpy()
    return (point.reshape(d) if q == 1 else point.reshape(q, d)), fell_back


def believe(models: ModelListGP, obs: Observations, point: np.ndarray) -> tuple[ModelListGP, Observations]:
    """Kriging believer (Ginsbourger, Le Riche & Carraro 2010, Sec. 3.2): the GPs conditioned, with their
    hyperparameters unchanged, on ``point`` observed at their posterior means, and the observations with it as a
    valid trial. Only a pending point's *proposal* uses this; the fantasy never becomes a trial or a result."""
    x = torch.as_tensor(point, dtype=DTYPE).reshape(1, -1)
    with torch.no_grad():
        mean = models.posterior(x).mean.reshape(2).numpy()
    believed = Observations(x=np.vstack([obs.x, point]), log_epsilon=np.append(obs.log_epsilon, mean[0]),
                            valid=np.append(obs.valid, True), logit_error=np.append(obs.logit_error, mean[1]))
    privacy, utility = models.models
    return ModelListGP(make_gp(believed.x, believed.log_epsilon, privacy, fit=False),
                       make_gp(believed.x_valid, believed.logit_error, utility, fit=False)), believed


def propose_batch(method: str, models: ModelListGP, obs: Observations, reference: np.ndarray, settings: BoSettings,
                  seed: int, q: int) -> tuple[np.ndarray, list[bool]]:
    """``q`` points to run together, shape (q, d) (before rounding): qLogNEHVI's joint q-batch, or for HVPoI a
    kriging-believer batch (each next point proposed with the earlier ones fantasised at the GP means,
    :func:`believe`; seeds ``seed``, ``seed + 1``, ...). For ``q = 1`` both are :func:`propose`. Also, per point,
    whether it is a fallback (:func:`propose`; a joint batch falls back as a whole)."""
    if method != "hvpoi":
        points, fell_back = propose(method, models, obs, reference, settings, seed, q)
        return points.reshape(q, -1), [fell_back] * q
    points, fallbacks = [], []
    for j in range(q):
        if j:
            models, obs = believe(models, obs, points[-1])
        point, fell_back = propose(method, models, obs, reference, settings, seed + j)
        points.append(point)
        fallbacks.append(fell_back)
    return np.array(points), fallbacks


def bayesian_optimisation(domain: Domain, method: str, settings: BoSettings, reference_point: tuple[float, float],
                          evaluate: Evaluate, seed: int, batch: int = 1) -> list[Trial]:
    """DPareto's loop: ``settings.n_initial`` Sobol trials, then ``settings.n_iterations`` acquisition trials, both
    ``batch`` at a time (the last batch may be smaller). With ``batch = 1`` this is Avent et al.'s sequential loop;
    a larger batch proposes its points together (:func:`propose_batch`) and sees their results together.

    Args:
        reference_point: the recorded anti-ideal (ε, error), transformed once here and used unchanged throughout.
        seed: the only randomness of the search (Sobol scrambling, raw candidates, MC samples); the BO trial at
            position i (from 0) of a batch starting at iteration t is proposed with seed ``seed + 1 + t + i``.
        batch: trials evaluated together (the number of parallel workers).
    """
    reference = transform_reference(reference_point)
    sobol = sobol_points(settings.n_initial + settings.n_iterations, domain.dimension, seed)
    trials = run_fixed(domain.snap(sobol[:settings.n_initial]), "initial", evaluate, batch)
    surrogates = Surrogates(refit_every=settings.refit_every)
    for iteration in range(0, settings.n_iterations, batch):
        q = min(batch, settings.n_iterations - iteration)
        obs = Observations.of(trials)
        if len(obs.x_valid) < 2:
            points, fallbacks = sobol[settings.n_initial + iteration:settings.n_initial + iteration + q], [False] * q
        else:
            with single_thread(), torch.random.fork_rng():
                torch.manual_seed(seed + 1 + iteration)  # BoTorch's fallbacks draw from torch's global generator
                models = surrogates.update(obs.x, obs.log_epsilon, obs.x_valid, obs.logit_error)
                points, fallbacks = propose_batch(method, models, obs, reference, settings, seed + 1 + iteration, q)
        trials.extend(evaluate(domain.snap(points), [FALLBACK_PHASE if f else "bo" for f in fallbacks]))
    return trials
