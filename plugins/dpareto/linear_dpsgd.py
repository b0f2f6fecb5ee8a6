"""DP-SGD and DP-Adam for linear models (logistic regression, linear SVM) with closed-form per-example gradients,
R replications trained at once as a batch: DPareto's Adult evaluators (Avent et al. 2020, Sec. 4.2, Alg. 3 and 4)
without autograd or Opacus, so that one trial costs milliseconds to seconds instead of minutes.

**Per-example gradients in closed form.** A linear model scores z = ⟨w, x̃⟩ with x̃ = (x, 1) (the bias folded in).
For a loss ℓ(z, y) the per-example gradient is ∇_w ℓ = ℓ'(z, y)·x̃, so its norm is |ℓ'(z, y)|·‖x̃‖ and the clipped
sum is Σ_i clamp(ℓ'_i, ±C/‖x̃_i‖)·x̃_i: a scatter-add of each record's nonzero entries (:class:`SparseRows`; a1a rows
have at most 14 of 123), no per-example gradient is materialised.

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
sums of geometric draws (one ``torch.Tensor.geometric_`` call per epoch, from a generator seeded by the trial's
seed), in step order. This is exact independent inclusion up to the floating-point inverse-CDF of the geometric
draw (assumption ``linear-poisson-sampling``).

**Accounting order** (:func:`train_linear`): each charge must be held by the session view, must cover the run's event
(:func:`~dpaudit.tuning.training.check_covered`) and is claimed before any record is touched; the loop runs exactly
the N steps charged (:class:`StepCap` refuses step N + 1); afterwards each replication's info record and model
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
from dpaudit_plugins.dpareto.task import TrialFailed

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge

LOSSES = ("logistic", "hinge")
OPTIMIZERS = ("sgd", "adam")
MECHANISMS = {"sgd": "dp-sgd", "adam": "dp-adam"}
ADAM_BETAS = (0.9, 0.999)
ADAM_KAPPA = 1e-8

ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(
        id="linear-floating-point-gaussian",
        statement="The Gaussian noise N(0, σ²C²) is drawn by torch.normal in floating point from a torch.Generator "
        "seeded from the session's random source, not by an exact sampler; the guarantee is that of the idealised "
        "real-valued Gaussian mechanism.",
        conditional=True,
        source="Mironov 2012 (CCS); Jin et al. 2022 (IEEE S&P, arXiv 2112.05307)",
    ),
    Assumption(
        id="linear-poisson-sampling",
        statement="Each step includes every training record independently with probability q: the included "
        "(step, replication, record) triples of an epoch are cumulative sums of Geometric(q) gaps drawn by "
        "torch.Tensor.geometric_ (floating-point inverse CDF) from a torch.Generator (a PRNG, not a CSPRNG); the "
        "analysis assumes exact independent Bernoulli(q) inclusion.",
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
            InvalidParameter: B exceeds n.
        """
        n = check_count("dataset_size", dataset_size)
        if self.batch_size > n:
            raise InvalidParameter(f"batch_size {self.batch_size} exceeds the {n} training records")
        return SamplingPlan(dataset_size=n, sample_rate=self.batch_size / n, steps_per_epoch=n // self.batch_size,
                            epochs=self.epochs)

    def event(self, dataset_size: int, label: str = "") -> PoissonSubsampledGaussianEvent:
        """The run's single event (:func:`~dpaudit.tuning.training.dp_sgd_event`, add/remove neighbours)."""
        return dp_sgd_event(self.plan(dataset_size), noise_multiplier=self.noise_multiplier,
                            max_grad_norm=self.max_grad_norm, label=label or self.describe(), assumptions=ASSUMPTIONS)

    def describe(self) -> str:
        return (f"linear {self.loss} model, DP-{self.optimizer.upper()}: epochs={self.epochs}, lot={self.batch_size}, "
                f"lr={self.lr:g}, sigma={self.noise_multiplier:g}, clip={self.max_grad_norm:g}")


def loss_derivative(z: torch.Tensor, y: torch.Tensor, loss: str) -> torch.Tensor:
    """ℓ'(z, y), the derivative of the loss in the score z, for labels y ∈ {0, 1} (module docstring)."""
    if loss == "logistic":
        return torch.sigmoid(z) - y
    sign = 2.0 * y - 1.0
    return -sign * (sign * z < 1.0).to(z.dtype)


def per_example_gradients(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor, loss: str) -> torch.Tensor:
    """(B, d + 1) per-example gradients ℓ'(⟨w, x̃⟩, y)·x̃ of a (d + 1,) weight vector (bias last) at rows X (B, d)."""
    Xt = torch.cat([X, torch.ones(len(X), 1, dtype=X.dtype)], dim=1)
    return loss_derivative(Xt @ w, y, loss)[:, None] * Xt


@dataclass(frozen=True)
class SparseRows:
    """Each record's nonzero features and the bias as (column, value) pairs, padded to a common width k with
    (bias column, 0.0): a padded entry adds nothing to a score or a gradient. Binary a1a rows have at most 14
    nonzeros, so a step touches k = 15 entries per included record instead of d + 1 = 124.

    Attributes:
        cols: (n, k) int64 column of each entry (the bias column is d).
        vals: (n, k) float32 value of each entry.
        width: d + 1.
    """

    cols: torch.Tensor
    vals: torch.Tensor
    width: int

    @classmethod
    def from_dense(cls, X: np.ndarray) -> SparseRows:
        """The rows of the (n, d) matrix ``X``."""
        X = np.asarray(X, dtype=np.float32)
        nonzero = X != 0
        k = int(nonzero.sum(axis=1).max(initial=0))
        cols = np.argsort(~nonzero, axis=1, kind="stable")[:, :k]  # nonzero columns first, in order
        vals = np.take_along_axis(X, cols, axis=1)  # 0 beyond a row's nonzeros
        d = X.shape[1]
        cols = np.where(vals != 0, cols, d)
        cols = np.hstack([cols, np.full((len(X), 1), d)])
        vals = np.hstack([vals, np.ones((len(X), 1), dtype=np.float32)])
        return cls(torch.from_numpy(cols.astype(np.int64)), torch.from_numpy(vals), d + 1)

    def norms(self) -> torch.Tensor:
        """(n,) ‖x̃‖ = ‖(x, 1)‖."""
        return self.vals.norm(dim=1)


def clipped_gradient_sums(W: torch.Tensor, flat: torch.Tensor, vals: torch.Tensor, y: torch.Tensor,
                          bound: torch.Tensor, loss: str) -> torch.Tensor:
    """(R, d + 1) sums of the clipped per-example gradients of each replication's batch, without forming them.

    The clipped gradient of a record is ℓ'·x̃·min(1, C/(|ℓ'|·‖x̃‖)) = clamp(ℓ', ±C/‖x̃‖)·x̃ (module docstring).

    Args:
        W: (R, d + 1) weights (contiguous).
        flat: (k, K) entries' positions in ``W.view(-1)``: replication·(d + 1) + column (:class:`SparseRows`).
        vals: (k, K) the entries' values.
        y: (k,) the included records' labels in {0, 1}.
        bound: (k,) C/‖x̃‖ of each included record.
        loss: ``"logistic"`` or ``"hinge"``.
    """
    slope = loss_derivative((W.view(-1)[flat] * vals).sum(dim=1), y, loss)
    scale = torch.clamp(slope, min=-bound, max=bound)
    return torch.zeros(W.numel()).index_add_(0, flat.view(-1), (vals * scale[:, None]).view(-1)).view(W.shape)


class StepCap:
    """Counts noisy steps and refuses step N + 1 before it computes anything (the accounting never follows a
    data-dependent stopping time)."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = check_count("max_steps", max_steps)
        self.taken = 0

    def take(self) -> None:
        """Count one step.

        Raises:
            AccountingError: the step would exceed the steps charged.
        """
        if self.taken >= self.max_steps:
            raise AccountingError(f"noisy step {self.taken + 1} exceeds the {self.max_steps} steps charged")
        self.taken += 1


def poisson_epoch(generator: torch.Generator, *, steps: int, replications: int, n: int,
                  q: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One epoch of Poisson sampling for all replications: (offsets (steps + 1,), replication, record), the included
    pairs of step t being ``[offsets[t], offsets[t + 1])`` (module docstring, "Poisson sampling, vectorised")."""
    total = steps * replications * n
    positions: list[torch.Tensor] = []
    last = -1
    while last < total:
        expected = (total - last) * q
        gaps = torch.empty(int(expected + 6 * math.sqrt(expected) + 16), dtype=torch.float64).geometric_(
            q, generator=generator)
        drawn = last + torch.cumsum(gaps.to(torch.int64), 0)
        positions.append(drawn)
        last = int(drawn[-1])
    pos = torch.cat(positions)
    pos = pos[pos < total]
    step, rest = pos // (replications * n), pos % (replications * n)
    offsets = torch.searchsorted(step, torch.arange(steps + 1, dtype=torch.int64))
    return offsets, rest // n, rest % n


@dataclass(frozen=True)
class LinearRun:
    """The outcome of :func:`train_linear`.

    Attributes:
        weights: (R, d + 1) final weights of the R replications (bias last).
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
        weights: (R, d + 1) final weights (bias last), possibly non-finite.
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
    yt = torch.from_numpy(np.array(job.y, dtype=np.float32))

    generator = torch.Generator().manual_seed(seed)
    R = job.replications
    W = torch.zeros(R, rows.width)
    moments = (torch.zeros_like(W), torch.zeros_like(W))
    bound = trial.max_grad_norm / rows.norms()
    noise_std = trial.noise_multiplier * trial.max_grad_norm
    cap = StepCap(plan.steps)
    for _ in range(plan.epochs):
        offsets, replication, record = poisson_epoch(generator, steps=plan.steps_per_epoch, replications=R,
                                                     n=len(yt), q=plan.sample_rate)
        # every gather of the epoch at once; a step only slices
        flat, vals = replication[:, None] * rows.width + rows.cols[record], rows.vals[record]
        labels, bounds = yt[record], bound[record]
        noise = torch.randn(plan.steps_per_epoch, R, rows.width, generator=generator).mul_(noise_std)
        cuts = offsets.tolist()
        for t in range(plan.steps_per_epoch):
            cap.take()
            part = slice(cuts[t], cuts[t + 1])
            g = clipped_gradient_sums(W, flat[part], vals[part], labels[part], bounds[part], trial.loss)
            g.add_(noise[t]).div_(plan.expected_batch_size)
            _update(W, g, moments, cap.taken, trial)
    weights = W.numpy().copy()
    return LinearFit(trial=trial, plan=plan, weights=weights, errors=evaluation_errors(weights, job.X_eval, job.y_eval),
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


def _update(W: torch.Tensor, g: torch.Tensor, moments: tuple[torch.Tensor, torch.Tensor], step: int,
            trial: LinearTrial) -> None:
    """One SGD step w ← w − η g, or Adam (Avent et al. 2020, Alg. 4), in place (the moments too)."""
    if trial.optimizer == "sgd":
        W.sub_(g, alpha=trial.lr)
        return
    mu, nu = moments
    beta1, beta2 = ADAM_BETAS
    mu.mul_(beta1).add_(g, alpha=1 - beta1)
    nu.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    denominator = (nu / (1 - beta2**step)).sqrt_().add_(ADAM_KAPPA)
    W.addcdiv_(mu, denominator, value=-trial.lr / (1 - beta1**step))


def evaluation_errors(weights: np.ndarray, X_eval: np.ndarray, y_eval: np.ndarray) -> np.ndarray:
    """(R,) misclassification rates of the R linear models (bias last) on public data (a score > 0 predicts 1)."""
    scores = np.asarray(X_eval, dtype=np.float64) @ weights[:, :-1].T + weights[:, -1]
    return np.mean((scores > 0) != (np.asarray(y_eval)[:, None] > 0.5), axis=0)
