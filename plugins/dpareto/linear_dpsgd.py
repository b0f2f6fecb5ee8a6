"""DP-SGD and DP-Adam for linear models (logistic regression, linear SVM) with closed-form per-example gradients,
R replications trained at once as a batch: DPareto's Adult evaluators (Avent et al. 2020, Sec. 4.2, Alg. 3 and 4)
without autograd or Opacus, so that one trial costs milliseconds to seconds instead of minutes. The steps run in a
compiled kernel (:mod:`~dpaudit_plugins.dpareto.linear_kernel`, numba); the randomness (batches and noise) is drawn
here, by torch, from the trial's seeded generator, and passed in.

**Per-example gradients in closed form.** A linear model scores z = ⟨w, x̃⟩ with x̃ = (x, 1) (the bias folded in).
For a loss ℓ(z, y) the per-example gradient is ∇_w ℓ = ℓ'(z, y)·x̃, so its norm is |ℓ'(z, y)|·‖x̃‖ and the clipped
sum is Σ_i clamp(ℓ'_i, ±C/‖x̃_i‖)·x̃_i: a scatter-add of each record's nonzero entries (:class:`SparseRows`; a1a rows
have at most 14 of 123), no per-example gradient is materialised. The arithmetic is float64.

* logistic (y ∈ {0, 1}): ℓ = log(1 + e^z) − y z, ℓ' = σ(z) − y;
* hinge (s = 2y − 1 ∈ {−1, 1}): ℓ = max(0, 1 − s z), ℓ' = −s·1[s z < 1] (the subgradient 0 at the kink).

**The mechanism** (the kernel's DP-SGD, ``dpaudit/tuning/training.py``): Poisson sampling at q = B/n for
N = epochs·⌊n/B⌋ steps; each step adds N(0, σ²C²I) to the clipped gradient sum and divides by the public expected
batch size B; SGD: w ← w − η g; Adam (Alg. 4, κ = 10⁻⁸, β1 = 0.9, β2 = 0.999): the same noisy g into Adam's moment
estimates. The whole run is one :class:`~dpaudit.events.PoissonSubsampledGaussianEvent` (q, σ, N, sensitivity C of
the clipped sum) under **add/remove** neighbours (:func:`~dpaudit.tuning.training.dp_sgd_event`), charged before
the first step; each replication is its own run with its own charge. The paper instead samples fixed-size batches
without replacement and adds (2L/m)·N(0, σ²I) under **replace-one** neighbours, accounted with Wang, Balle &
Kasiviswanathan's bound (docs/plugins/dpareto.md, "Adult tasks": the two ε are about different relations and are
not interchangeable).

**Poisson sampling, vectorised.** Every (step, replication, record) triple of an epoch is one Bernoulli(q) trial; the
gaps between successes of a Bernoulli process are i.i.d. Geometric(q), so the included triples are the cumulative
sums of geometric draws, in step order: uniforms u ∈ [0, 1) from ``torch.rand`` (float64, one call per chunk, from a
generator seeded by the trial's seed) and gaps ⌈log u / log(1 − q)⌉, the inverse CDF, computed in the kernel
(:func:`~dpaudit_plugins.dpareto.linear_kernel.bernoulli_positions`): the very values ``torch.Tensor.geometric_``
returns for the same generator state, so the batches are those of the earlier torch-only code (a test compares
them). This is exact independent inclusion up to the floating-point inverse CDF (assumption
``linear-poisson-sampling``). Per epoch, the batches are drawn first, then the noise ξ ~ N(0, I) of every step
(``torch.randn``, float64, shape (steps, R, d + 1): in float32 each pair comes from 24-bit uniforms and is
cut off at √(48 ln 2) ≈ 5.77σ, float64's cut-off is beyond 8σ); the kernel scales it by σC.

**Accounting order** (:func:`train_linear`): each charge must be held by the session view, must cover the run's event
(:func:`~dpaudit.tuning.training.check_covered`) and is claimed before any record is touched; the loop runs exactly
the N steps charged (:class:`StepCap` counts each epoch's steps before the kernel runs them and refuses an epoch that
would pass step N); afterwards each replication's info record and model
digest are written (:func:`~dpaudit.tuning.training.record_run`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from dpaudit import canonical
from dpaudit.errors import AccountingError, InvalidParameter, PluginError
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.registry import DATASET_SIZE_PUBLIC
from dpaudit.sensitivity import Assumption
from dpaudit.tuning.training import (
    ASSUMPTIONS as DP_SGD_ASSUMPTIONS,
)
from dpaudit.tuning.training import (
    SamplingPlan,
    check_add_remove,
    check_covered,
    dp_sgd_event,
    record_run,
)
from dpaudit.validation import check_count, check_positive
from dpaudit_plugins.dpareto.linear_kernel import (
    LOSS_CODES,
    bernoulli_positions,
    fill_rows,
    run_epoch,
    split_positions,
)
from dpaudit_plugins.dpareto.task import TrialFailed

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge

LOSSES = tuple(LOSS_CODES)
OPTIMIZERS = ("sgd", "adam")
MECHANISMS = {"sgd": "dp-sgd", "adam": "dp-adam"}

ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(
        id="linear-floating-point-gaussian",
        statement="The Gaussian noise N(0, σ²C²) is drawn by torch.randn (scaled by σC) in floating point from a "
        "torch.Generator seeded from the session's random source, in float64, not by an exact sampler (its tails are "
        "cut off beyond about 8σ); the guarantee is that of the idealised real-valued Gaussian mechanism.",
        conditional=True,
        source="Mironov 2012 (CCS); Jin et al. 2022 (IEEE S&P, arXiv 2112.05307)",
    ),
    Assumption(
        id="linear-poisson-sampling",
        statement="Each step includes every training record independently with probability q: the included "
        "(step, replication, record) triples of an epoch are cumulative sums of Geometric(q) gaps "
        "ceil(log u / log(1 - q)), a floating-point inverse CDF of uniforms u drawn by torch.rand from a "
        "torch.Generator (a PRNG, not a CSPRNG); the analysis assumes exact independent Bernoulli(q) inclusion.",
        conditional=True,
        source="Mironov, Talwar & Zhang 2019, Sec. 3; the Bernoulli process's geometric inter-arrival times",
    ),
    *(a for a in DP_SGD_ASSUMPTIONS if a.id in (DATASET_SIZE_PUBLIC, "fixed-step-count")),
    Assumption(
        id="linear-closed-form-clipping",
        statement="Per-example gradients of the linear model are ℓ'(z, y)·(x, 1) in closed form; each is scaled to "
        "L2 norm at most C (flat clipping) before summation, so the clipped sum changes by at most C when one "
        "record is added or removed.",
        conditional=False,
        source="Abadi et al. 2016, Alg. 1",
    ),
)


@dataclass(frozen=True)
class LinearTrial:
    """The public hyperparameters of one linear DP-SGD / DP-Adam trial (Avent et al. 2020, Table 1).

    Attributes:
        loss: ``"logistic"`` or ``"hinge"``.
        optimizer: ``"sgd"`` or ``"adam"``.
        epochs: T.
        batch_size: the expected lot size B (q = B/n).
        lr: η.
        noise_multiplier: σ (noise N(0, σ²C²I) on the clipped sum).
        max_grad_norm: C.
    """

    loss: str
    optimizer: str
    epochs: int
    batch_size: int
    lr: float
    noise_multiplier: float
    max_grad_norm: float

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise InvalidParameter(f"unknown loss {self.loss!r}; choose one of {LOSSES}")
        if self.optimizer not in OPTIMIZERS:
            raise InvalidParameter(f"unknown optimizer {self.optimizer!r}; choose one of {OPTIMIZERS}")
        check_count("epochs", self.epochs)
        check_count("batch_size", self.batch_size)
        for name in ("lr", "noise_multiplier", "max_grad_norm"):
            check_positive(name, getattr(self, name))

    def plan(self, dataset_size: int) -> SamplingPlan:
        """q = B/n and N = epochs·⌊n/B⌋ steps (public: n is public by assumption).

        Raises:
            InvalidParameter: B is not below n.
        """
        n = check_count("dataset_size", dataset_size)
        if self.batch_size >= n:  # q = 1 has no geometric gaps; refused before anything is charged
            raise InvalidParameter(f"batch_size {self.batch_size} must be below the {n} training records "
                                   "(Poisson sampling at q < 1)")
        return SamplingPlan(dataset_size=n, sample_rate=self.batch_size / n, steps_per_epoch=n // self.batch_size,
                            epochs=self.epochs)

    def event(self, dataset_size: int, label: str = "") -> PoissonSubsampledGaussianEvent:
        """The run's single event (:func:`~dpaudit.tuning.training.dp_sgd_event`, add/remove neighbours)."""
        return dp_sgd_event(self.plan(dataset_size), noise_multiplier=self.noise_multiplier,
                            max_grad_norm=self.max_grad_norm, label=label or self.describe(), assumptions=ASSUMPTIONS)

    def describe(self) -> str:
        return (f"linear {self.loss} model, DP-{self.optimizer.upper()}: epochs={self.epochs}, lot={self.batch_size}, "
                f"lr={self.lr:g}, sigma={self.noise_multiplier:g}, clip={self.max_grad_norm:g}")


@dataclass(frozen=True)
class SparseRows:
    """Each record's bias entry (column d, value 1) and nonzero features as (column, value) pairs: row i's entries are
    the first ``lengths[i]`` of ``cols[i]`` and ``vals[i]`` (the rest is padding, never read). Binary a1a rows have
    at most 14 nonzeros, so a step touches at most 15 entries per included record instead of d + 1 = 124. Columns are
    stored in the narrowest unsigned type that holds d (``uint8`` for a1a), so that the rows of all 30,956 records
    stay in a core's cache.

    Attributes:
        cols: (n, k) unsigned column of each entry.
        vals: (n, k) float64 value of each entry.
        lengths: (n,) the number of entries of each row (1 + its nonzeros).
        binary: every entry's value is 1.0 (then ``vals`` need not be read: x·1.0 = x exactly).
        width: d + 1.
    """

    cols: np.ndarray
    vals: np.ndarray
    lengths: np.ndarray
    binary: bool
    width: int

    @classmethod
    def from_dense(cls, X: np.ndarray) -> SparseRows:
        """The rows of the (n, d) matrix ``X``."""
        X = np.asarray(X)
        n, d = X.shape
        k = 1 + int(np.count_nonzero(X, axis=1).max(initial=0))
        cols, vals, lengths = np.zeros((n, k), dtype=np.min_scalar_type(d)), np.zeros((n, k)), np.empty(n, np.int64)
        fill_rows(X, cols, vals, lengths)
        return cls(cols, vals, lengths, bool(np.all((vals == 1.0) | (vals == 0.0))), d + 1)

    def norms(self) -> np.ndarray:
        """(n,) ‖x̃‖ = ‖(x, 1)‖ (padding is 0)."""
        return np.linalg.norm(self.vals, axis=1)


class StepCap:
    """Counts noisy steps and refuses step N + 1 before it computes anything (the accounting never follows a
    data-dependent stopping time)."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = check_count("max_steps", max_steps)
        self.taken = 0

    def take(self, steps: int = 1) -> int:
        """Count ``steps`` steps before any of them runs, and return the number (from 1) of the first.

        Raises:
            AccountingError: the last of them would exceed the steps charged (none is counted).
        """
        if self.taken + steps > self.max_steps:
            raise AccountingError(f"noisy step {self.max_steps + 1} exceeds the {self.max_steps} steps charged")
        self.taken += steps
        return self.taken - steps + 1


def poisson_epoch(generator: torch.Generator, *, steps: int, replications: int, n: int,
                  q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One epoch of Poisson sampling for all replications: (offsets (steps + 1,), replication, record), the included
    pairs of step t being ``[offsets[t], offsets[t + 1])`` (module docstring, "Poisson sampling, vectorised")."""
    total = steps * replications * n
    positions: list[np.ndarray] = []
    last = -1
    log_keep = math.log1p(-q)
    while last < total:
        expected = (total - last) * q
        uniforms = torch.rand(int(expected + 6 * math.sqrt(expected) + 16), dtype=torch.float64, generator=generator)
        positions.append(bernoulli_positions(uniforms.numpy(), last, log_keep))
        last = int(positions[-1][-1])
    return split_positions(np.concatenate(positions), steps, replications, n)


@dataclass(frozen=True)
class LinearRun:
    """The outcome of :func:`train_linear`.

    Attributes:
        weights: (R, d + 1) float64 final weights of the R replications (bias last).
        errors: (R,) misclassification rates on the public evaluation data.
        steps: noisy steps taken per replication (= N).
        digests: SHA-256 of each replication's weights (the recorded releases).
    """

    weights: np.ndarray
    errors: np.ndarray
    steps: int
    digests: tuple[str, ...]

    @property
    def error(self) -> float:
        """The mean error over the replications (DPareto's utility oracle)."""
        return float(np.mean(self.errors))


def weights_sha256(w: np.ndarray) -> str:
    """SHA-256 of one replication's weights: canonical JSON of {dtype, shape}, then the little-endian bytes."""
    h = hashlib.sha256(canonical.encode({"dtype": str(w.dtype), "shape": list(w.shape)}))
    h.update(np.ascontiguousarray(w, dtype=w.dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class LinearJob:
    """One claimed run of :func:`train_linear`, ready to train: public hyperparameters and schedule, and the data.

    Attributes:
        trial: the hyperparameters.
        plan: the sampling plan of ``trial`` on ``len(X)`` records.
        replications: R, one per claimed charge.
        X, y: the private training features and 0/1 labels.
        X_eval, y_eval: the evaluation data.
    """

    trial: LinearTrial
    plan: SamplingPlan
    replications: int
    X: np.ndarray
    y: np.ndarray
    X_eval: np.ndarray
    y_eval: np.ndarray


@dataclass(frozen=True)
class LinearFit:
    """The trained weights of a :class:`LinearJob`, not recorded yet (:func:`fit_linear`).

    Attributes:
        trial, plan: the job's hyperparameters and schedule (not its data).
        weights: (R, d + 1) float64 final weights (bias last), possibly non-finite.
        errors: (R,) misclassification rates on the job's evaluation data.
        steps: noisy steps taken per replication.
        width: d + 1.
        evaluated: the number of evaluation records the errors are rates on.
    """

    trial: LinearTrial
    plan: SamplingPlan
    weights: np.ndarray
    errors: np.ndarray
    steps: int
    width: int
    evaluated: int


def claim_linear(view: PluginSession, charges: Sequence[Charge], trial: LinearTrial, X: np.ndarray, y: np.ndarray,
                 X_eval: np.ndarray, y_eval: np.ndarray) -> LinearJob:
    """Check that ``view`` holds each charge and that it covers ``trial``'s run on ``X``, then claim every charge;
    no record is read (:func:`train_linear`'s first step, in the driver).

    Raises:
        InvalidParameter: no charge, or shapes that are not (n, d) and (n,).
        PluginError: a charge this session does not hold, or one that does not cover the run (nothing is claimed).
    """
    check_add_remove(view)
    if not charges:
        raise InvalidParameter("train_linear needs one charge per replication, got none")
    if len(np.shape(X)) != 2 or np.shape(y) != np.shape(X)[:1]:  # shapes only: n is public, no record is read
        raise InvalidParameter(f"need X of shape (n, d) and y of shape (n,); got {np.shape(X)} and {np.shape(y)}")
    plan = trial.plan(np.shape(X)[0])
    event = trial.event(np.shape(X)[0])
    for charge in charges:
        if not view.holds(charge):
            raise PluginError(f"linear DP training: charge {charge.seq} was not made by this session")
        check_covered(charge.event, event)
    for charge in charges:
        view.claim(charge)  # atomic in the session: a charge covers one run
    return LinearJob(trial=trial, plan=plan, replications=len(charges), X=X, y=y, X_eval=X_eval, y_eval=y_eval)


def fit_linear(job: LinearJob, *, seed: int) -> LinearFit:
    """Train the job's R replications: a pure function of the job and ``seed`` (it may run in a worker process,
    :mod:`dpaudit.parallel`); nothing is recorded."""
    trial, plan = job.trial, job.plan
    rows = SparseRows.from_dense(job.X)  # the first read of a record, after every claim
    labels = np.array(job.y, dtype=np.float64)
    generator = torch.Generator().manual_seed(seed)
    R = job.replications
    W = np.zeros((R, rows.width))
    mu, nu = np.zeros_like(W), np.zeros_like(W)
    bounds = trial.max_grad_norm / rows.norms()
    cap = StepCap(plan.steps)
    for _ in range(plan.epochs):
        offsets, replication, record = poisson_epoch(generator, steps=plan.steps_per_epoch, replications=R,
                                                     n=len(labels), q=plan.sample_rate)
        # float64: torch.randn in float32 builds each pair from 24-bit uniforms, so no draw exceeds √(48 ln 2) ≈ 5.77σ
        noise = torch.randn(plan.steps_per_epoch, R, rows.width, generator=generator, dtype=torch.float64)
        first = cap.take(plan.steps_per_epoch)
        run_epoch(W, mu, nu, first, rows.cols, rows.vals, rows.lengths, rows.binary, labels, bounds, offsets,
                  replication, record, noise.numpy(), trial.noise_multiplier * trial.max_grad_norm,
                  float(plan.expected_batch_size), trial.lr, LOSS_CODES[trial.loss], trial.optimizer == "adam")
    return LinearFit(trial=trial, plan=plan, weights=W, errors=evaluation_errors(W, job.X_eval, job.y_eval),
                     steps=cap.taken, width=rows.width, evaluated=len(job.y_eval))


def record_linear(view: PluginSession, charges: Sequence[Charge], fit: LinearFit) -> LinearRun:
    """Write each replication's run record and model digest on its charge (:func:`train_linear`'s last step, in
    the driver), then return the run.

    Raises:
        TrialFailed: the weights became non-finite (the run is recorded: its charges are spent).
    """
    trial = fit.trial
    digests = tuple(weights_sha256(w) for w in fit.weights)
    for charge, digest in zip(charges, digests, strict=True):
        record_run(view, charge, fit.plan, digest=digest, n_parameters=fit.width, realised_steps=fit.steps,
                   details={"mechanism": MECHANISMS[trial.optimizer], "model": f"linear ({trial.loss} loss)",
                            "trainer": "dpareto closed-form linear DP-SGD", "noise_multiplier": trial.noise_multiplier,
                            "max_grad_norm": trial.max_grad_norm, "optimizer": trial.optimizer, "lr": trial.lr,
                            "replications": len(fit.weights)})
    if not np.isfinite(fit.weights).all():
        raise TrialFailed(f"{trial.describe()}: the weights became non-finite")
    return LinearRun(weights=fit.weights, errors=fit.errors, steps=fit.steps, digests=digests)


def train_linear(view: PluginSession, charges: Sequence[Charge], trial: LinearTrial, X: np.ndarray, y: np.ndarray,
                 X_eval: np.ndarray, y_eval: np.ndarray, *, seed: int) -> LinearRun:
    """Train ``len(charges)`` replications of ``trial`` on the private (X, y), one charge per replication, and
    measure each on the public (X_eval, y_eval): :func:`claim_linear`, :func:`fit_linear`, :func:`record_linear`.

    Args:
        view: the plugin's view of the session (add/remove neighbours).
        charges: one charge per replication, made through ``view`` before this call, each covering
            ``trial.event(len(X))``; each is claimed here before any record is touched.
        trial: the hyperparameters.
        X, y: the private training features and 0/1 labels.
        X_eval, y_eval: PUBLIC evaluation data.
        seed: seeds the sampling and the noise (the caller draws it from the session's random source).

    Raises:
        PluginError: a charge this session does not hold, or one that does not cover the run (nothing is trained).
        TrialFailed: the weights became non-finite (the run is still recorded: its charges are spent).
    """
    return record_linear(view, charges, fit_linear(claim_linear(view, charges, trial, X, y, X_eval, y_eval),
                                                   seed=seed))


def evaluation_errors(weights: np.ndarray, X_eval: np.ndarray, y_eval: np.ndarray) -> np.ndarray:
    """(R,) misclassification rates of the R linear models (bias last) on public data (a score > 0 predicts 1)."""
    scores = np.asarray(X_eval, dtype=np.float64) @ weights[:, :-1].T + weights[:, -1]
    return np.mean((scores > 0) != (np.asarray(y_eval)[:, None] > 0.5), axis=0)
