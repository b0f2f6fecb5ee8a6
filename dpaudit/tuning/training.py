"""DP-SGD and DP-Adam (Abadi et al. 2016, Alg. 1) through Opacus, inside a plugin's view of an audited session
(:class:`~dpaudit.plugin_session.PluginSession`: the charge, info and release are attributed to that plugin).

The order of operations is what makes the accounting sound:

1. The sampling plan is fixed from public quantities only: Poisson sampling at rate ``q = B / n`` (B the expected
   batch size, n the training-set size, treated as public) and ``N = epochs × ⌊1/q⌋`` steps, the number of
   batches Opacus's ``DPDataLoader`` yields per epoch times the epochs. (Opacus's own ``make_private`` sets
   ``q = 1 / len(data_loader)``, which differs from B/n whenever B does not divide n; it is not used here.)
2. One :class:`~dpaudit.events.PoissonSubsampledGaussianEvent` (q, σ, N, L2 sensitivity C of the clipped gradient
   sum under add/remove neighbours) is charged through ``session.charge`` *before* the first noisy step. If the
   budget cannot pay for it, :class:`~dpaudit.errors.BudgetExceeded` propagates and nothing is trained.
3. :class:`CappedDPOptimizer` refuses step N + 1 before any gradient of that step is clipped or noised, so the
   realised number of steps can be smaller (the charge covers N) but never larger: the accounting never follows a
   data-dependent stopping time.
4. Only the model's digest is recorded as the release; metrics on public evaluation data are logged unnoised.

Under an existing charge (``charge=``) step 2 is replaced by a coverage check (:func:`check_covered`):

* a :class:`~dpaudit.events.RepeatAndSelectEvent` whose base event dominates this run's event in RDP at every order
  (:func:`~dpaudit.accounting.dominance.covers`): the run writes nothing to the ledger (no charge, info, metrics or
  release): it is one repetition of a repeat-and-select, and only the caller's selected output may be released;
* an *envelope* :class:`~dpaudit.events.PoissonSubsampledGaussianEvent` charged before a private selection, which
  dominates this run parameter-wise (:func:`~dpaudit.accounting.dominance.parameter_dominated`, docs/accounting.md
  "Envelope charges"): the run is recorded and released against that charge as if it had made it; an envelope
  covers one run only (:meth:`~dpaudit.session.Session.claim`, atomic in the session: of two threads training under
  one envelope, one is refused before it touches any data);
* the run's own event, charged and claimed by the caller (``claimed=True``; :func:`charge_run` in the driver of
  parallel trials, :mod:`dpaudit.parallel`): the run writes nothing, and returns its record
  (:attr:`TrainResult.pending`, :class:`RunRecord`) for the driver to write, the same ``info`` and release that
  ``charge=None`` writes. Each claim starts one run (:meth:`~dpaudit.session.Session.start_claimed_run`; a
  worker's view likewise, :class:`~dpaudit.parallel.DetachedView`): a second training handed the same claimed
  charge, or one handed a charge nobody claimed, is refused before it touches any data.

Each step computes ``(Σ_{i∈batch} clip_C(∇ℓ_i) + N(0, σ²C² I)) / B`` (Opacus ``DPOptimizer``: flat clipping,
``loss_reduction="sum"`` per-example gradients, averaged by the *expected* batch size B, which is public, never
by the realised Poisson batch size, which is not).
"""

from __future__ import annotations

import hashlib
import math
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import opacus
import torch
from opacus import GradSampleModule
from opacus.data_loader import DPDataLoader
from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping
from opacus.utils.batch_memory_manager import BatchSplittingSampler
from opacus.utils.uniform_sampler import UniformWithReplacementSampler
from opacus.validators import ModuleValidator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import canonical
from dpaudit.accounting.base import Accountant, DeltaUnreachable
from dpaudit.accounting.dominance import covers
from dpaudit.errors import AccountingError, InvalidParameter, PluginError
from dpaudit.events import PoissonSubsampledGaussianEvent, PrivacyEvent, RepeatAndSelectEvent
from dpaudit.registry import DATASET_SIZE_PUBLIC
from dpaudit.sensitivity import Assumption, Neighbouring, from_formula
from dpaudit.tuning.seeds import draw_seed
from dpaudit.validation import check_count, check_delta, check_positive

if TYPE_CHECKING:
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge

#: how errors name the trainer (the charge itself is attributed to the calling plugin)
TRAINER = "DP-SGD training"
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}
MECHANISMS = {"sgd": "dp-sgd", "adam": "dp-adam"}
#: a hook run between each backward pass and the step that clips and noises (``train_private``'s ``inject``)
Injector = Callable[[list[torch.Tensor]], None]

ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(
        id="opacus-floating-point-gaussian",
        statement="The Gaussian noise N(0, σ²C²) is drawn by torch.normal in floating point from a torch.Generator "
        "(a pseudo-random generator seeded from the session's random source), not by an exact sampler. The "
        "guarantee is that of the idealised real-valued Gaussian mechanism; floating-point attacks on naive "
        "Gaussian sampling are not mitigated because Opacus secure_mode is off.",
        conditional=True,
        source="Mironov 2012 (CCS), floating-point attack on Laplace; Jin et al. 2022 (IEEE S&P, arXiv 2112.05307) "
        "for Opacus's Gaussian sampler",
    ),
    Assumption(
        id="opacus-poisson-sampling",
        statement="Each step includes every training record independently with probability q, implemented by "
        "Opacus's UniformWithReplacementSampler as torch.rand(n) < q from a torch.Generator (a PRNG, not a "
        "CSPRNG); the analysis assumes exact independent Bernoulli(q) inclusion.",
        conditional=True,
        source="Mironov, Talwar & Zhang 2019 (Rényi DP of the sampled Gaussian mechanism), Sec. 3",
    ),
    Assumption(
        id=DATASET_SIZE_PUBLIC,
        statement="The training-set size n is public: it sets q = B/n and the step count N, which are recorded. "
        "The guarantee covers add/remove neighbours D' of D run with these fixed (q, σ, N).",
        conditional=True,
        source="Ponomareva et al. 2023 (How to DP-fy ML, JAIR): the data set size is usually treated as public",
    ),
    Assumption(
        id="opacus-per-example-clipping",
        statement="Per-example gradients are computed by Opacus's GradSampleModule (hooks, strict mode: no buffers, "
        "ModuleValidator passed, so no layer mixes examples) and each is scaled to L2 norm at most C before "
        "summation (DPOptimizer flat clipping).",
        conditional=False,
        source="Abadi et al. 2016, Alg. 1; Yousefpour et al. 2021 (Opacus)",
    ),
    Assumption(
        id="fixed-step-count",
        statement="The step count N was fixed before training and is enforced by a step cap that refuses step N+1 "
        "before it clips or noises anything; training may stop earlier, never later.",
        conditional=False,
    ),
)


@dataclass(frozen=True)
class SamplingPlan:
    """The public schedule of a DP-SGD run, fixed before any noisy step.

    Attributes:
        dataset_size: n, the number of training records (public by assumption).
        sample_rate: q, each record's inclusion probability per step.
        steps_per_epoch: batches the ``DPDataLoader`` yields per pass (⌊1/q⌋ for Opacus's sampler).
        epochs: passes over the loader.
    """

    dataset_size: int
    sample_rate: float
    steps_per_epoch: int
    epochs: int

    @property
    def steps(self) -> int:
        """N, the total number of noisy steps charged."""
        return self.steps_per_epoch * self.epochs

    @property
    def expected_batch_size(self) -> float:
        """q·n, the public divisor of the noisy gradient sum."""
        return self.sample_rate * self.dataset_size


def plan_from_loader(loader: DataLoader, epochs: int) -> SamplingPlan:
    """Read the sampling plan off an Opacus Poisson ``DPDataLoader``.

    Raises:
        PluginError: the loader is not a single-process Opacus ``DPDataLoader`` whose batch sampler is the Poisson
            ``UniformWithReplacementSampler`` over the whole dataset (its sampling could not be accounted for).
    """
    check_count("epochs", epochs)
    if not isinstance(loader, DPDataLoader):
        raise PluginError(
            f"{TRAINER} needs an Opacus Poisson DPDataLoader; a {type(loader).__name__} samples batches in a "
            "way the Poisson-subsampled Gaussian accounting does not cover"
        )
    sampler = loader.batch_sampler
    if type(sampler) is not UniformWithReplacementSampler:
        raise PluginError(f"{TRAINER} accounts only for UniformWithReplacementSampler (Poisson) batches, "
                          f"got {type(sampler).__name__}")
    n = len(loader.dataset)  # type: ignore[arg-type]
    if sampler.num_samples != n or sampler.sample_rate != loader.sample_rate:
        raise PluginError(f"{TRAINER}: the loader's sampler does not cover its dataset at its stated rate")
    q = float(sampler.sample_rate)
    if not 0 < q <= 1:
        raise PluginError(f"{TRAINER}: sample rate {q} is not in (0, 1]")
    return SamplingPlan(dataset_size=n, sample_rate=q, steps_per_epoch=len(sampler), epochs=epochs)


def dp_sgd_event(plan: SamplingPlan, *, noise_multiplier: float, max_grad_norm: float, label: str,
                 assumptions: tuple[Assumption, ...] = ASSUMPTIONS) -> PoissonSubsampledGaussianEvent:
    """The single event that covers the whole run: N steps of the Poisson-subsampled Gaussian mechanism.

    Sensitivity: the sum of per-example gradients clipped to L2 norm C changes by at most C when one record is added
    or removed (Abadi et al. 2016, Alg. 1; the kernel formula ``clipped_gradient_sum``).
    """
    sensitivity = from_formula("clipped_gradient_sum", Neighbouring.ADD_REMOVE, clip_norm=max_grad_norm)
    return PoissonSubsampledGaussianEvent(
        neighbouring=Neighbouring.ADD_REMOVE,
        sensitivity=sensitivity,
        label=label,
        assumptions=assumptions,
        sample_rate=plan.sample_rate,
        noise_multiplier=noise_multiplier,
        steps=plan.steps,
    )


#: the relative gap below the target that :func:`calibrate_noise_multiplier` settles for
CALIBRATION_GAP = 0.005
_CALIBRATION_ROUNDS = 60


def calibrate_noise_multiplier(plan: SamplingPlan, *, target_epsilon: float, delta: float, accountant: Accountant,
                               max_grad_norm: float, label: str = "",
                               assumptions: tuple[Assumption, ...] = ASSUMPTIONS,
                               gap: float = CALIBRATION_GAP) -> tuple[float, float]:
    """The smallest σ found such that ``accountant`` bounds the run's event by ``target_epsilon`` at ``delta``.

    Root-finding on ε(σ) of :func:`dp_sgd_event` (decreasing in σ): a bracket [σ_lo, σ_hi] with
    ε(σ_lo) > target ≥ ε(σ_hi) is narrowed by false position on (log σ, log ε), halving the weight of the end kept,
    falling back to geometric bisection, until ε(σ_hi) ≥ (1 − ``gap``)·target or σ_hi/σ_lo − 1 < ``gap``/10. The
    answer is always σ_hi, whose ε the accountant itself computed to be ≤ the target, so the result is conservative
    even where the accountant's numerics are not exactly monotone. (Opacus's ``get_noise_multiplier`` searches with
    Opacus's own accountant and a sample rate of 1/len(loader), so its σ need not meet the target under the bound
    dpaudit certifies.)

    Returns:
        (σ, ε(σ)), with ε(σ) ≤ ``target_epsilon``.

    Raises:
        InvalidParameter: a bad target or δ.
        AccountingError: no σ up to 10⁶ meets the target (the target is too small for this plan).
    """
    target = check_positive("target_epsilon", target_epsilon)
    delta = check_delta(delta, "target_delta", allow_zero=False)

    def epsilon(sigma: float) -> float:
        event = dp_sgd_event(plan, noise_multiplier=sigma, max_grad_norm=max_grad_norm, label=label,
                             assumptions=assumptions)
        try:
            return accountant.epsilon(event, delta)
        except DeltaUnreachable:
            return math.inf

    lo, hi = 0.0, 1.0
    eps_lo, eps_hi = math.inf, epsilon(hi)
    while eps_hi > target:
        lo, eps_lo = hi, eps_hi
        hi *= 2.0
        if hi > 1e6:
            raise AccountingError(f"no noise multiplier up to 1e6 brings epsilon to {target:g} at delta {delta:g} "
                                  f"for {plan.steps} steps at sample rate {plan.sample_rate:g}")
        eps_hi = epsilon(hi)
    if lo == 0.0:  # σ = 1 already meets the target: bracket from below
        lo = 0.5
        eps_lo = epsilon(lo)
        while eps_lo <= target:
            hi, eps_hi = lo, eps_lo
            lo /= 2.0
            if lo < 1e-3:
                return hi, eps_hi
            eps_lo = epsilon(lo)
    side = 0
    for _ in range(_CALIBRATION_ROUNDS):
        if eps_hi >= (1.0 - gap) * target or hi / lo - 1.0 < gap / 10:
            break
        if math.isfinite(eps_lo) and eps_hi > 0:
            # false position on log ε against log σ (Illinois: halve the stale end's weight)
            f_lo, f_hi = math.log(eps_lo / target), math.log(eps_hi / target)
            w_lo, w_hi = (f_lo / 2 if side == 1 else f_lo), (f_hi / 2 if side == -1 else f_hi)
            x_lo, x_hi = math.log(lo), math.log(hi)
            x = x_hi - w_hi * (x_hi - x_lo) / (w_hi - w_lo)
            mid = math.exp(min(max(x, x_lo + 0.01 * (x_hi - x_lo)), x_hi - 0.01 * (x_hi - x_lo)))
        else:
            mid = math.sqrt(lo * hi)
        eps_mid = epsilon(mid)
        if eps_mid <= target:
            hi, eps_hi, side = mid, eps_mid, 1
        else:
            lo, eps_lo, side = mid, eps_mid, -1
    return hi, eps_hi


class CappedDPOptimizer(DPOptimizer):
    """Opacus's ``DPOptimizer`` with a hard cap on the number of noisy steps, each over exactly one Poisson batch.

    The checks run at the top of :meth:`pre_step`, before the step's per-example gradients are clipped and before
    its noise is drawn, so a refused step releases nothing. Only steps that add noise count (a step skipped by
    ``BatchMemoryManager`` only clips and accumulates). A skipped step merges its batch's clipped gradients into
    the next noisy step, so :meth:`signal_skip_step` accepts a skip only from Opacus's ``BatchSplittingSampler``
    splitting one batch of ``poisson_batches`` (the run's own sampler): a skip that merged two Poisson batches under
    one noise draw would be a mechanism the N-step event does not describe.

    The charge was computed for one mechanism, so a step is refused if σ, C, the divisor, the loss reduction or the
    sampler's (q, n) changed since construction; and the wrapped optimizer carries a step pre-hook
    (``step_guard``) that refuses any update of it other than the one each counted noisy :meth:`step` makes, so the
    user's own handle on it cannot apply an unclipped, un-noised gradient.

    Args:
        optimizer: the wrapped torch optimizer.
        max_steps: N, the noisy steps charged.
        poisson_batches: the Poisson batch sampler of the run's loader (None: no step may be skipped).
        on_last_step: called once, after the N-th noisy step's parameter update.
        **kwargs: ``DPOptimizer``'s.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *, max_steps: int, poisson_batches: object = None,
                 on_last_step: Callable[[], None] | None = None, **kwargs: Any) -> None:
        super().__init__(optimizer, **kwargs)
        self.max_steps = check_count("max_steps", max_steps)
        self.steps_taken = 0
        self.poisson_batches = poisson_batches
        self.on_last_step = on_last_step
        self.stopped: str | None = None
        self._charged = self._mechanism()
        self._in_step = self._stepping = False
        self.step_guard = optimizer.register_step_pre_hook(self._refuse_outside_step)

    def _mechanism(self) -> tuple[Any, ...]:
        """The parameters the charge was computed from: σ, C, the divisor, the reduction, and the loader's q, n."""
        sampler = self.poisson_batches
        return (self.noise_multiplier, self.max_grad_norm, self.expected_batch_size, self.loss_reduction,
                getattr(sampler, "sample_rate", None), getattr(sampler, "num_samples", None))

    def _refuse_outside_step(self, *_: Any) -> None:
        """Step pre-hook of the wrapped optimizer: one update per counted noisy step, inside :meth:`step`."""
        if not self._stepping:
            raise AccountingError(
                "the wrapped optimizer was stepped directly, with the unclipped, un-noised gradient; step the "
                "optimizer make_private returned (its step clips, noises and counts)")
        self._stepping = False

    def stop(self, reason: str) -> None:
        """Refuse every later step with ``reason`` (e.g. the model was released)."""
        self.stopped = reason

    def pre_step(self, closure: Any = None) -> bool:
        """Refuse the step past the cap (or after :meth:`stop`), then clip, noise and count.

        Raises:
            AccountingError: this step would exceed the number of steps charged, or the run was stopped.
        """
        if self.stopped is not None:
            raise AccountingError(self.stopped)
        if not self._in_step:
            raise AccountingError("pre_step runs inside step() only: call optimizer.step()")
        if self._mechanism() != self._charged:
            raise AccountingError(
                "noise_multiplier, max_grad_norm, expected_batch_size, loss_reduction or the loader's sample rate "
                f"changed after the charge (charged {self._charged}, now {self._mechanism()}); the charge covers "
                "the mechanism it was computed for: make a new PrivacyEngine for other parameters")
        if self.steps_taken >= self.max_steps:
            raise AccountingError(
                f"noisy step {self.steps_taken + 1} exceeds the {self.max_steps} steps charged; the accounting "
                "never follows a data-dependent stopping time"
            )
        ran = super().pre_step(closure)
        if ran:
            self.steps_taken += 1
            self._stepping = True  # the one update of the wrapped optimizer this noisy step allows
        return ran

    def step(self, closure: Any = None) -> Any:
        """``DPOptimizer.step``; after the N-th noisy update, ``on_last_step`` runs once."""
        self._in_step = True
        try:
            result = super().step(closure)
        finally:
            self._in_step = self._stepping = False
        if self.steps_taken == self.max_steps and self.on_last_step is not None and self.stopped is None:
            self.on_last_step()
        return result

    def signal_skip_step(self, do_skip: bool = True) -> None:
        """Accept a skip only from a ``BatchSplittingSampler`` over this run's Poisson batches (class docstring).

        Raises:
            AccountingError: any other caller asks to skip (nothing is queued).
        """
        if do_skip and not splitting(sys._getframe(1), self.poisson_batches):
            raise AccountingError(
                "a skipped step would add this batch's clipped gradients to the next noisy step; each noisy step is "
                "accounted for exactly one Poisson batch, so only BatchMemoryManager splitting one batch of this "
                "run's data loader may skip (use BatchMemoryManager(data_loader=<the loader make_private returned>, "
                "...) for virtual steps)")
        super().signal_skip_step(do_skip)


def splitting(frame: Any, poisson_batches: object) -> bool:
    """Whether ``frame`` is Opacus's own ``BatchSplittingSampler.__iter__`` (that code object, with that module's
    globals) splitting a Poisson batch (``batch_idxs``) of ``poisson_batches``: the one caller that may ask a run's
    optimizer to skip a step. Another function, even one whose local ``self`` is such a sampler, is not."""
    caller = frame.f_locals.get("self")
    splitter = BatchSplittingSampler.__iter__
    return (frame.f_code is splitter.__code__ and frame.f_globals is splitter.__globals__
            and frame.f_locals.get("batch_idxs") is not None and isinstance(caller, BatchSplittingSampler)
            and poisson_batches is not None and caller.sampler is poisson_batches)


class CappedGhostClippingOptimizer(CappedDPOptimizer, DPOptimizerFastGradientClipping):
    """:class:`CappedDPOptimizer` for ghost clipping (Li et al. 2022; Bu et al. 2023; Opacus ``grad_sample_mode=
    "ghost"``): the gradient it noises is the one the clipped second backward pass left in ``p.grad``.

    Ghost clipping computes each example's gradient norm ‖g_i‖ in a first backward pass, then backpropagates
    Σ_i min(1, C/(‖g_i‖ + 10⁻⁶))·ℓ_i with the norm hooks off, so ``p.grad`` holds the clipped sum: Opacus's flat
    clipping, the same mechanism as the hooks path. A ``p.grad`` left by any other backward pass (the user's own,
    unwrapped loss) is unclipped; :meth:`watch` marks every gradient accumulation with whether the norm hooks were
    off, and :meth:`pre_step` refuses a step unless every parameter's last accumulation was the clipped one.
    """

    def watch(self, module: Any) -> None:
        """Mark each accumulation into a parameter's ``.grad`` as clipped (``module``'s hooks off) or not."""
        def mark(param: torch.Tensor) -> None:
            param._dpaudit_clipped = not module.hooks_enabled  # type: ignore[attr-defined]

        self._watch_handles = [p.register_post_accumulate_grad_hook(mark) for p in self.params]

    def stop(self, reason: str) -> None:
        super().stop(reason)
        for handle in getattr(self, "_watch_handles", ()):
            handle.remove()

    def pre_step(self, closure: Any = None) -> bool:
        """Refuse a gradient that the clipped backward pass did not produce, then :meth:`CappedDPOptimizer.pre_step`.

        Raises:
            AccountingError: a parameter's gradient came from an unclipped backward pass.
        """
        if self.stopped is None and any(p.grad is not None and not getattr(p, "_dpaudit_clipped", False)
                                        for p in self.params):
            raise AccountingError(
                "ghost clipping: a gradient was not produced by the clipped backward pass; compute the loss with "
                "the criterion make_private returned (loss = criterion(output, target); loss.backward()), not "
                "with the original loss")
        return super().pre_step(closure)


def state_dict_sha256(model: nn.Module) -> str:
    """SHA-256 over the model's parameters and buffers, in a documented byte format.

    For each entry of ``state_dict()`` in sorted key order: the canonical JSON of
    ``{"name", "dtype", "shape"}`` followed by the tensor's raw little-endian bytes (C order, on the CPU).
    """
    h = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        t = state[name].detach().to("cpu").contiguous()
        h.update(canonical.encode({"name": name, "dtype": str(t.dtype), "shape": list(t.shape)}))
        arr = t.numpy()
        h.update(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
    return h.hexdigest()


def evaluate(model: nn.Module, X: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor,
             device: torch.device) -> dict[str, float]:
    """Accuracy and mean logistic loss of a one-logit classifier on (public) data."""
    Xt, yt = _as_tensors(X, y)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(Xt.to(device)).reshape(-1)
        target = yt.to(device)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, target).item()
        accuracy = ((logits > 0).float() == target).float().mean().item()
    model.train(was_training)
    return {"test_accuracy": accuracy, "test_loss": loss}


@dataclass(frozen=True)
class TrainResult:
    """Outcome of a private training run.

    Attributes:
        model: the trained module (Opacus hooks removed), on the session's device.
        steps: noisy steps realised (≤ ``planned_steps``).
        planned_steps: N, the steps charged.
        charge_seq: ledger sequence number of the charge.
        sample_rate: q.
        model_sha256: :func:`state_dict_sha256` of the final model (the recorded release).
        n_parameters: number of trainable scalars.
        train_loss: mean training loss over the examples seen (None if every batch was empty). CONFIDENTIAL:
            computed on private data without noise; this plugin never logs or releases it.
        pending: the run's record, for the caller to write (:meth:`RunRecord.write`) when it trained under a
            charge it ``claimed`` itself; None when the run wrote its own record or is a repetition.
    """

    model: nn.Module
    steps: int
    planned_steps: int
    charge_seq: int
    sample_rate: float
    model_sha256: str
    n_parameters: int
    train_loss: float | None
    pending: RunRecord | None = None


@dataclass(frozen=True)
class RunRecord:
    """What :func:`record_run` writes for one run: its plan, its model's digest and size, the steps taken and the
    public details (a run trained in a worker returns it; its driver writes it, :mod:`dpaudit.parallel`)."""

    plan: SamplingPlan
    digest: str
    n_parameters: int
    realised_steps: int
    details: Mapping[str, Any]

    def write(self, session: PluginSession, charge: Charge) -> None:
        """:func:`record_run` on ``charge``: the ``info`` record, then the model's release."""
        record_run(session, charge, self.plan, digest=self.digest, n_parameters=self.n_parameters,
                   realised_steps=self.realised_steps, details=self.details)


def _float_tensor(a: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a.detach().to(device="cpu", dtype=torch.float32)
    return torch.from_numpy(np.array(a, dtype=np.float32))  # a copy: the caller's (read-only) array is untouched


def _as_tensors(X: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    Xt, yt = _float_tensor(X), _float_tensor(y)
    if Xt.ndim != 2 or yt.ndim != 1 or len(Xt) != len(yt) or len(yt) == 0:
        raise InvalidParameter(f"need X of shape (n, d) and y of shape (n,), n >= 1; got {tuple(Xt.shape)} and "
                               f"{tuple(yt.shape)}")
    if not (torch.isfinite(Xt).all() and torch.isfinite(yt).all()):
        raise InvalidParameter("X and y must be finite (no NaN or infinity)")
    if not ((yt == 0) | (yt == 1)).all():
        raise InvalidParameter("labels y must be 0 or 1")
    return Xt, yt


def _torch_generator(session: PluginSession, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(draw_seed(session.rng))


def train_private(session: PluginSession, model: nn.Module, X: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor,
                  *, optimizer: str, lr: float, epochs: int, batch_size: int, max_grad_norm: float,
                  noise_multiplier: float, label: str,
                  public_eval: tuple[np.ndarray | torch.Tensor, np.ndarray | torch.Tensor] | None = None,
                  charge: Charge | None = None, inject: Injector | None = None, claimed: bool = False) -> TrainResult:
    """Train ``model`` on the private (X, y) with DP-SGD / DP-Adam, charged to ``session`` before the first step.

    Poisson sampling at ``q = batch_size / len(X)`` (Abadi et al. 2016, Sec. 3.1 "lots"; Mironov, Talwar & Zhang
    2019), drawn with a generator seeded from ``session.rng``.

    Args:
        session: a plugin's view of the open audited session (add/remove neighbours; ``Session.for_plugin``):
            the charge, the info record and the release are attributed to that plugin.
        model: a module mapping (batch, d) float inputs to (batch, 1) logits; trained in place.
        X, y: the private training features and 0/1 labels.
        optimizer: ``"sgd"`` (DP-SGD) or ``"adam"`` (DP-Adam).
        lr: learning rate.
        epochs: passes; N = epochs × ⌊len(X)/batch_size⌋ steps are charged.
        batch_size: expected batch size B.
        max_grad_norm: per-example clipping norm C.
        noise_multiplier: σ (noise standard deviation σ·C on the gradient sum).
        label: public description recorded with the event.
        public_eval: optional PUBLIC evaluation data; its metrics are logged unnoised after each epoch.
        charge: an existing charge that covers this run (module docstring): a repeat-and-select (nothing is
            charged or written to the ledger) or an unused envelope (the run is recorded and released against
            it). None: charge this run's own event.
        inject: called after each backward pass, before the step clips and noises, with the optimizer's
            parameters: it may append per-example gradient rows to each parameter's ``grad_sample`` (the white-box
            canaries of :mod:`dpaudit.audit.dpsgd`), which are then clipped, summed and noised with the batch's.
        claimed: ``charge`` is this run's own event, charged and claimed by the caller (:func:`charge_run`, e.g.
            the driver of parallel trials, :mod:`dpaudit.parallel`): the run neither claims nor records anything;
            its record comes back in :attr:`TrainResult.pending` for the caller to write.

    Raises:
        InvalidParameter: bad data or hyperparameters; ``public_eval`` together with a repeat-and-select ``charge``;
            ``claimed`` without a DP-SGD ``charge``.
        PluginError: the session is not add/remove or the model is incompatible with Opacus.
        BudgetExceeded: the session cannot pay for the N steps (nothing is trained).
    """
    Xt, yt = _as_tensors(X, y)
    n = len(yt)
    check_count("batch_size", batch_size)
    if batch_size > n:
        raise InvalidParameter(f"batch_size {batch_size} exceeds the {n} training records")
    loader = DPDataLoader(TensorDataset(Xt, yt), sample_rate=batch_size / n,
                          generator=_torch_generator(session, torch.device("cpu")))
    return train_private_loader(session, model, loader, optimizer=optimizer, lr=lr, epochs=epochs,
                                max_grad_norm=max_grad_norm, noise_multiplier=noise_multiplier, label=label,
                                public_eval=public_eval, charge=charge, inject=inject, claimed=claimed)


def train_private_loader(session: PluginSession, model: nn.Module, loader: DataLoader, *, optimizer: str, lr: float,
                         epochs: int, max_grad_norm: float, noise_multiplier: float, label: str,
                         public_eval: tuple[np.ndarray | torch.Tensor, np.ndarray | torch.Tensor] | None = None,
                         charge: Charge | None = None, inject: Injector | None = None,
                         multiclass: bool = False, claimed: bool = False) -> TrainResult:
    """:func:`train_private` for a caller-built loader, which must be an Opacus Poisson ``DPDataLoader``.

    The loader must yield ``(features, 0/1 labels)`` batches for a one-logit model (logistic loss), or, with
    ``multiclass``, ``(features, int64 class labels)`` for a model with one logit per class (cross-entropy: a sum of
    per-example terms, so the clipping and the event are unchanged). Its sample rate q and ⌊1/q⌋ batches per epoch
    are read off its sampler; the expected batch size q·n is the gradient divisor.

    Raises:
        InvalidParameter: bad hyperparameters; ``public_eval`` with ``multiclass``.
        PluginError: any other loader (its sampling cannot be accounted for), see :func:`plan_from_loader`; a
            ``charge`` that does not cover this run.
        UncoveredRelease: an envelope ``charge`` that already covered a run (nothing is trained).
    """
    plan = plan_from_loader(loader, epochs)
    check_positive("lr", lr)
    check_positive("max_grad_norm", max_grad_norm)
    check_positive("noise_multiplier", noise_multiplier)
    if optimizer not in OPTIMIZERS:
        raise InvalidParameter(f"unknown optimizer {optimizer!r}; choose one of {sorted(OPTIMIZERS)}")
    if multiclass and public_eval is not None:
        raise InvalidParameter("public_eval metrics are those of a one-logit classifier: pass none with multiclass")
    check_add_remove(session)
    device = session.device
    model.to(device).train()
    check_per_example(model)
    event = dp_sgd_event(plan, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm, label=label)
    repetition = charge is not None and isinstance(charge.event, RepeatAndSelectEvent)
    if claimed and (charge is None or repetition):
        raise InvalidParameter("claimed=True needs the run's own DP-SGD charge, charged and claimed by the caller")
    if charge is not None:
        if not session.holds(charge):
            raise PluginError(f"{TRAINER}: charge {charge.seq} was not made by this session")
        check_covered(charge.event, event)
        if repetition and public_eval is not None:
            raise InvalidParameter("a repetition under a repeat-and-select charge logs nothing: pass no public_eval")
        if not repetition and not claimed:
            session.claim(charge)  # atomic in the session: an envelope covers one run
        elif claimed:
            session.start_claimed_run(charge)  # the caller's claim starts one run, however often it is handed on
    enveloped = charge is not None and not repetition and not claimed

    gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum", strict=True)
    try:
        gsm.forbid_grad_accumulation()
        dp_optimizer = CappedDPOptimizer(
            OPTIMIZERS[optimizer](gsm.parameters(), lr=lr),
            max_steps=plan.steps,
            poisson_batches=loader.batch_sampler,
            noise_multiplier=noise_multiplier,
            max_grad_norm=max_grad_norm,
            expected_batch_size=plan.expected_batch_size,
            loss_reduction="mean",  # divide the noisy clipped sum by the public expected batch size
            generator=_torch_generator(session, device),
            secure_mode=False,
        )
        if charge is None:
            charge = charge_run(session, event, MECHANISMS[optimizer])
        train_loss = _train_loop(session, gsm, dp_optimizer, loader, plan, public_eval, inject, multiclass)
    finally:
        trained = gsm.to_standard_module()

    digest, n_parameters = state_dict_sha256(trained), count_parameters(trained)
    pending = None
    if not repetition:
        pending = RunRecord(plan=plan, digest=digest, n_parameters=n_parameters,
                            realised_steps=dp_optimizer.steps_taken,
                            details={"covered_by_envelope": enveloped, "mechanism": MECHANISMS[optimizer],
                                     "noise_multiplier": noise_multiplier, "max_grad_norm": max_grad_norm,
                                     "optimizer": optimizer, "lr": lr, "device": str(device)})
        if not claimed:
            pending.write(session, charge)
            pending = None
    return TrainResult(model=trained, steps=dp_optimizer.steps_taken, planned_steps=plan.steps,
                       charge_seq=charge.seq, sample_rate=plan.sample_rate, model_sha256=digest,
                       n_parameters=n_parameters, train_loss=train_loss, pending=pending)


def check_add_remove(session: PluginSession) -> None:
    """DP-SGD's event is analysed under add/remove neighbours only.

    Raises:
        PluginError: the session protects replace-one neighbours.
    """
    if Neighbouring(session.neighbouring) is not Neighbouring.ADD_REMOVE:
        raise PluginError(f"{TRAINER} is analysed under add/remove neighbours; the session uses "
                          f"{Neighbouring(session.neighbouring).value}")


def check_per_example(model: nn.Module) -> None:
    """No layer of ``model`` may mix examples (e.g. BatchNorm): per-example clipping would not bound sensitivity.

    Raises:
        PluginError: Opacus's ``ModuleValidator`` lists incompatible layers (``ModuleValidator.fix`` replaces most).
    """
    errors = ModuleValidator.validate(model, strict=False)
    if errors:
        raise PluginError(f"{TRAINER}: model is not compatible with per-example clipping: {errors} (Opacus's "
                          "ModuleValidator.fix(model) replaces BatchNorm by GroupNorm)")


def charge_run(session: PluginSession, event: PoissonSubsampledGaussianEvent, mechanism: str) -> Charge:
    """Charge the whole run's event before its first step and claim it: nothing else can run under it.

    Raises:
        BudgetExceeded: the session cannot pay for the N steps (nothing is charged).
    """
    charge = session.charge(event, mechanism=mechanism)
    session.claim(charge)
    return charge


def count_parameters(model: nn.Module) -> int:
    """The number of trainable scalars of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def record_run(session: PluginSession, charge: Charge, plan: SamplingPlan, *, digest: str, n_parameters: int,
               realised_steps: int, details: Mapping[str, Any]) -> None:
    """Write the run's ``info`` record (public schedule and hyperparameters), then release the model's digest.

    Args:
        digest: :func:`state_dict_sha256` of the model that leaves.
        n_parameters: its :func:`count_parameters`.
        realised_steps: the noisy steps taken (≤ N).
        details: further public facts of the run (mechanism, σ, C, optimizer, learning rate, device, ...).
    """
    session.record_info({
        "charge_seq": charge.seq,
        "planned_steps": plan.steps,
        "realised_steps": realised_steps,
        "sample_rate": plan.sample_rate,
        "dataset_size": plan.dataset_size,
        "expected_batch_size": plan.expected_batch_size,
        "epochs": plan.epochs,
        "opacus_version": opacus.__version__,
        "secure_mode": False,
        **details,
    })
    session.record_release(charge, {"model_sha256": digest, "n_parameters": n_parameters})


def check_covered(charged: PrivacyEvent, run: PoissonSubsampledGaussianEvent) -> None:
    """Refuse to run ``run`` under ``charged`` unless it covers it (:func:`dpaudit.accounting.dominance.covers`).

    Raises:
        PluginError: ``charged`` is of a kind that covers no run, or does not dominate ``run``.
    """
    if not isinstance(charged, (RepeatAndSelectEvent, PoissonSubsampledGaussianEvent)):
        raise PluginError(f"{TRAINER}: only a repeat_and_select or poisson_subsampled_gaussian charge can cover a "
                          f"run, got {charged.kind}")
    if not covers(charged, run):
        raise PluginError(f"{TRAINER}: this run (q={run.sample_rate}, sigma={run.noise_multiplier}, "
                          f"steps={run.steps}) is not dominated by the charged {charged.kind} event")


def _train_loop(session: PluginSession, gsm: GradSampleModule, dp_optimizer: CappedDPOptimizer, loader: DataLoader,
                plan: SamplingPlan, public_eval: tuple[Any, Any] | None,
                inject: Injector | None = None, multiclass: bool = False) -> float | None:
    """Run the planned epochs; returns the (confidential) mean training loss."""
    device = session.device
    criterion = nn.CrossEntropyLoss(reduction="sum") if multiclass else nn.BCEWithLogitsLoss(reduction="sum")
    loss_sum, seen = torch.zeros((), device=device), 0  # summed on the device: no host sync per step
    for _ in range(plan.epochs):
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            dp_optimizer.zero_grad(set_to_none=True)
            out = gsm(xb)
            loss = criterion(out, yb) if multiclass else criterion(out.reshape(-1), yb)
            with warnings.catch_warnings():
                # expected: Opacus computes per-sample gradients with full backward hooks and the inputs need no
                # gradient, which torch reports on every backward pass (the gradients are unaffected)
                warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
                loss.backward()
            if inject is not None:
                inject(dp_optimizer.params)
            dp_optimizer.step()
            loss_sum += loss.detach()
            seen += len(yb)
        if public_eval is not None:
            session.log_public_metrics(evaluate(gsm, public_eval[0], public_eval[1], device),
                                       step=dp_optimizer.steps_taken)
    return loss_sum.item() / seen if seen else None
