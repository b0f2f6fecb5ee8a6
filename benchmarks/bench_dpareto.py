"""DPareto's BO overhead per iteration against a reference BoTorch qLogNEHVI loop, measured in the same run.

One iteration = condition/fit the two GPs on the n points so far + maximise the acquisition (the trial itself is not
counted: it is the task's cost). Both loops see the same synthetic 5-D two-objective histories (the Adult domain's
dimension; objectives shaped like (log ε, logit error) of DP-SGD) at n = 32, 128 and 272 points (16 + 256: the
paper's largest run), torch pinned to one thread (unpinned threads are several times slower on shared cores). Times
are CPU seconds of this process (``time.process_time``): with one thread they are the work done, not the waiting of
a machine shared with other jobs. Both loops run once untimed first (imports, lazy initialisation).

* reference: the BoTorch tutorial loop: both GPs (Matérn-5/2 ARD, standardised) fitted from scratch every iteration,
  ``qLogNoisyExpectedHypervolumeImprovement`` (128 quasi-MC samples, pruned baseline) maximised by ``optimize_acqf``
  with 10 restarts from 512 raw samples;
* dpareto: the plugin's default iteration (:func:`dpaudit_plugins.dpareto.search.propose` and
  :class:`~dpaudit_plugins.dpareto.surrogate.Surrogates`): GPs refitted warm-started from the previous iteration's
  hyperparameters, closed-form HVPoI maximised from 1024 raw Sobol candidates and 2 L-BFGS-B restarts.

Prints seconds per iteration and the ratio dpareto / reference at each n and over all n (goal: ≤ 0.25).
Run: ``.venv/bin/python benchmarks/bench_dpareto.py [--repeats R]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
from botorch.acquisition.multi_objective.objective import GenericMCMultiOutputObjective
from botorch.models import ModelListGP
from botorch.optim import optimize_acqf
from botorch.sampling import SobolQMCNormalSampler

from dpaudit_plugins.dpareto.config import DEFAULT_REFERENCE, BoSettings
from dpaudit_plugins.dpareto.objectives import transform_reference
from dpaudit_plugins.dpareto.search import Observations, propose, single_thread
from dpaudit_plugins.dpareto.surrogate import DTYPE, Surrogates, make_gp

DIMENSION = 5
SIZES = (32, 128, 272)


def synthetic_history(n: int, seed: int) -> Observations:
    """n points of [0, 1]^5 with (log ε, logit error) shaped like DP-SGD's: ε grows with epochs and lot and falls with
    the noise multiplier; the error falls with ε and has a learning-rate optimum, plus observation noise."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, DIMENSION))
    log_eps = 4.0 * x[:, 0] + 2.0 * x[:, 1] - 5.0 * x[:, 3] + 0.5
    logit_err = -0.6 * log_eps + 3.0 * (x[:, 2] - 0.6) ** 2 + 0.5 * x[:, 4] + 0.1 * rng.standard_normal(n)
    return Observations(x=x, log_epsilon=log_eps, valid=np.ones(n, dtype=bool), logit_error=logit_err)


def reference_iteration(obs: Observations, reference: np.ndarray, seed: int) -> None:
    models = ModelListGP(make_gp(obs.x, obs.log_epsilon), make_gp(obs.x_valid, obs.logit_error))
    acquisition = qLogNoisyExpectedHypervolumeImprovement(
        models, ref_point=(-torch.as_tensor(reference, dtype=DTYPE)).tolist(),
        X_baseline=torch.as_tensor(obs.x_valid, dtype=DTYPE),
        objective=GenericMCMultiOutputObjective(lambda samples, X=None: -samples),
        sampler=SobolQMCNormalSampler(sample_shape=torch.Size([128]), seed=seed), prune_baseline=True)
    bounds = torch.stack([torch.zeros(DIMENSION, dtype=DTYPE), torch.ones(DIMENSION, dtype=DTYPE)])
    optimize_acqf(acquisition, bounds=bounds, q=1, num_restarts=10, raw_samples=512, options={"seed": seed})


def dpareto_iteration(surrogates: Surrogates, obs: Observations, reference: np.ndarray, seed: int) -> None:
    models = surrogates.update(obs.x, obs.log_epsilon, obs.x_valid, obs.logit_error)
    propose("hvpoi", models, obs, reference, BoSettings(), seed)


def _prefix(obs: Observations, n: int) -> Observations:
    return Observations(x=obs.x[:n], log_epsilon=obs.log_epsilon[:n], valid=obs.valid[:n],
                        logit_error=obs.logit_error[:n])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="iterations timed per history size")
    args = parser.parse_args()
    reference = transform_reference(DEFAULT_REFERENCE)
    print(f"DPareto BO overhead per iteration (CPU s), {DIMENSION}-D, two objectives, torch threads = 1, "
          f"{args.repeats} iteration(s) per size")
    total_ours = total_reference = 0.0
    with single_thread():
        warm = synthetic_history(16, seed=0)
        dpareto_iteration(Surrogates(), warm, reference, 0)
        reference_iteration(warm, reference, 0)
        for n in SIZES:
            history = synthetic_history(n + args.repeats, seed=n)
            surrogates = Surrogates()
            dpareto_iteration(surrogates, _prefix(history, n - 1), reference, 0)  # warm state, untimed
            ours = ref = 0.0
            for r in range(args.repeats):
                obs = _prefix(history, n + r)
                start = time.process_time()
                dpareto_iteration(surrogates, obs, reference, r + 1)
                middle = time.process_time()
                reference_iteration(obs, reference, r + 1)
                ref += time.process_time() - middle
                ours += middle - start
            total_ours, total_reference = total_ours + ours, total_reference + ref
            print(f"  n = {n:3d}: reference qLogNEHVI {ref / args.repeats:7.3f} s/iter   dpareto HVPoI "
                  f"{ours / args.repeats:7.3f} s/iter   ratio {ours / ref:5.3f}x")
    print(f"  all sizes: ratio dpareto / reference = {total_ours / total_reference:.3f}x (goal <= 0.25x)")


if __name__ == "__main__":
    main()
