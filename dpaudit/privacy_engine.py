"""Opacus's ``make_private`` inside an audited session: the user's own model, loss, optimizer and training loop.

``PrivacyEngine(session).make_private(module=…, optimizer=…, data_loader=…, epochs=…, max_grad_norm=…,
noise_multiplier=… | target_epsilon=…)`` returns what Opacus's ``PrivacyEngine.make_private`` returns (the wrapped
module, a DP optimizer, a Poisson data loader; and for ghost clipping the criterion wrapper), and the user trains
with any loss and any torch optimizer. What differs from Opacus is when the privacy is paid for and what can
happen afterwards; the kit is the one the plugins use (:mod:`dpaudit.tuning.training`):

1. The plan is fixed from public quantities before anything is wrapped: Poisson sampling at ``q = B / n`` (B the
   loader's ``batch_size``, n ``len(dataset)``, treated as public and listed as such in the certificate) and
   ``N = epochs × ⌊1/q⌋`` noisy steps. A loader whose sampling cannot be accounted for is refused with the fix
   (:func:`poisson_loader`): fixed-size shuffled batches (``poisson_sampling=False``), a custom sampler or
   batch sampler, an iterable dataset, an Opacus ``DPDataLoader`` whose sampler is not the single-process Poisson
   one. The run's loader always samples with a generator seeded from the session's randomness: an Opacus
   ``DPDataLoader`` is rebuilt (same dataset, rate, batches per pass, collate function, workers) without its own
   generator, which the user may have seeded publicly (``torch.manual_seed(42)``).
   The optimizer must update every parameter of the module that requires gradients (frozen ones may be left
   out; several learning rates are param groups of the one optimizer): one that leaves a trainable parameter
   out is refused, since that parameter would be trained outside the mechanism by its raw gradient; so is a module
   with a buffer that requires gradients (Opacus computes per-example gradients for parameters only).
2. The whole plan, one :class:`~dpaudit.events.PoissonSubsampledGaussianEvent`, is charged before
   ``make_private`` returns, so a plan the budget cannot pay for raises
   :class:`~dpaudit.errors.BudgetExceeded` before any training (the user's module is left unwrapped).
   ``target_epsilon`` calibrates σ with the session's own accountant
   (:func:`~dpaudit.tuning.training.calibrate_noise_multiplier`): the certified ε of the run is at most the target.
3. The optimizer refuses noisy step N + 1 before it clips or noises anything. Only steps that add noise count:
   ``BatchMemoryManager``'s virtual steps (which only clip and accumulate) do not, and a skip that does not come
   from ``BatchMemoryManager`` splitting one of the run's Poisson batches is refused
   (the caller must run exactly Opacus's ``BatchSplittingSampler.__iter__``;
   :class:`~dpaudit.tuning.training.CappedDPOptimizer`). In ghost mode a gradient that the clipped backward pass
   did not produce is refused (:class:`~dpaudit.tuning.training.CappedGhostClippingOptimizer`). Each step is also
   refused, before anything is clipped or noised, and the run stopped (:class:`_PlanGuard`):

   * when a parameter or buffer of the module requires gradients but is not the optimizer's (unfrozen after
     ``make_private``), one required gradients in a forward pass since the last step and is not the optimizer's or
     is frozen again now (unfrozen for ``backward()`` only, so another optimizer could apply its raw gradient), or
     a parameter of the optimizer is frozen while holding a nonzero gradient (frozen between ``backward()`` and
     ``step()``: Opacus would neither clip nor noise it, the optimizer would apply it); the model is then never
     released under the charge (it may carry such updates already);
   * when a parameter of the optimizer was unfrozen after ``make_private`` in a layer Opacus did not hook (no
     trainable parameter when it wrapped the module): its gradient cannot be clipped (the model may be released);
   * when it would put two Poisson batches under one noise draw: ``BatchMemoryManager`` left a Poisson batch
     partly accumulated (a ``break`` after a skipped physical batch) and a new pass over the loader begins or a
     step on another batch comes, or (single-process loader) a physical batch was drawn and not stepped. The
     model, which never saw the partial batch, may still be released.
4. The model leaves as one release on the charge: the SHA-256 of its ``state_dict`` (with an ``info`` record of the
   public schedule). The release is recorded automatically right after the N-th noisy step, or earlier by
   :meth:`PrivacyEngine.release_model` (early stopping); after it the optimizer refuses every step. A run that
   stops early without ``release_model`` keeps its charge in the certificate (all N steps are paid for), with no
   release record. Whatever is derived from the noisy steps is covered by the charge; the release record says
   which model left.

The guarantee is add/remove DP of the noisy gradient sequence, under the conditional assumptions the event lists:
Opacus's floating-point noise and PRNG sampling, a public n, a per-example loss, and the training data reaching the
model only through the returned loader and optimizer (as Opacus's own ``make_private`` notes).
"""

from __future__ import annotations

import functools
import itertools
import sys
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from opacus.data_loader import CollateFnWithEmpty, DPDataLoader
from opacus.grad_sample import AbstractGradSampleModule, prepare_module
from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping
from opacus.utils.module_utils import trainable_modules
from opacus.utils.uniform_sampler import UniformWithReplacementSampler
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler

from dpaudit.errors import AccountingError, DPAuditError, InvalidParameter, UncoveredRelease
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.plugin_session import SESSION_ATTRIBUTION, PluginSession
from dpaudit.sensitivity import Assumption
from dpaudit.session import Charge, Session
from dpaudit.tuning.seeds import draw_seed
from dpaudit.tuning.training import (
    ASSUMPTIONS,
    CappedDPOptimizer,
    CappedGhostClippingOptimizer,
    SamplingPlan,
    calibrate_noise_multiplier,
    charge_run,
    check_add_remove,
    check_per_example,
    count_parameters,
    dp_sgd_event,
    plan_from_loader,
    record_run,
    splitting,
    state_dict_sha256,
)
from dpaudit.validation import check_count, check_delta, check_positive

__all__ = ["GRAD_SAMPLE_MODES", "PrivacyEngine", "poisson_loader", "training_assumptions"]

#: per-example gradient modes: Opacus's hooks, functorch (``torch.func``) and ghost clipping
GRAD_SAMPLE_MODES = ("hooks", "functorch", "ghost")

PER_EXAMPLE_LOSS = Assumption(
    id="per-example-loss",
    statement="The user's loss is a sum (or mean, as loss_reduction says) of per-example terms, the model treats "
    "each example of a batch independently, the private training data reach the model only through the data loader "
    "make_private returned, each optimizer step is computed on exactly the one batch the loader yielded before it "
    "(in order: no batch concatenated with another, drawn and left unstepped, or chosen after looking at it), and "
    "the model is updated only by the optimizer it returned. A loss coupling examples (contrastive, batch "
    "statistics, a data-dependent normaliser) or another path to the data is outside the analysis.",
    conditional=True,
    source="Abadi et al. 2016, Alg. 1 (per-example gradients); Opacus PrivacyEngine.make_private notes",
)

GHOST_CLIPPING = Assumption(
    id="opacus-ghost-clipping",
    statement="Per-example gradient norms are computed by Opacus's ghost clipping "
    "(GradSampleModuleFastGradientClipping, strict mode: no layer mixes examples); a second backward pass of "
    "sum_i min(1, C/(norm_i + 1e-6)) * loss_i leaves the sum of per-example gradients each clipped to L2 norm at "
    "most C, the same flat clipping as the hooks path; a gradient from any other backward pass is refused.",
    conditional=False,
    source="Li et al. 2022 (ICLR, ghost clipping); Bu et al. 2023 (book-keeping); Opacus 1.6 fast gradient clipping",
)


def training_assumptions(grad_sample_mode: str) -> tuple[Assumption, ...]:
    """The assumptions of a ``make_private`` run: the DP-SGD kit's, with ghost clipping's instead of the hooks'
    per-example clipping where it applies, and the user's loss and loop (:data:`PER_EXAMPLE_LOSS`)."""
    kit = ASSUMPTIONS if grad_sample_mode != "ghost" else tuple(
        GHOST_CLIPPING if a.id == "opacus-per-example-clipping" else a for a in ASSUMPTIONS)
    return (*kit, PER_EXAMPLE_LOSS)


class _RunLoader(DPDataLoader):
    """The run's Poisson loader: Opacus's ``DPDataLoader`` that tells the run's optimizer when a pass over it
    begins (:meth:`_PlanGuard.new_pass`), so that a Poisson batch left half-accumulated by ``BatchMemoryManager`` is
    never merged into a batch of the next pass."""

    on_pass: Callable[[], None] | None = None

    def __iter__(self) -> Any:
        if self.on_pass is not None:
            self.on_pass()
        return super().__iter__()


def poisson_loader(data_loader: DataLoader, *, poisson_sampling: bool,
                   generator: torch.Generator) -> DPDataLoader:
    """The Poisson loader of a run, sampling with ``generator`` (drawn from the session's randomness): each record
    joins each batch independently with probability ``q = batch_size / len(dataset)`` (``batch_size`` records
    expected per batch), keeping the loader's collate function, workers and memory pinning. An Opacus
    ``DPDataLoader`` is rebuilt over its dataset at its own sample rate and number of batches per pass, with
    ``generator`` instead of its own: which records are in which step must not follow from a generator the user
    seeded (``torch.manual_seed(42)``) or from torch's global one.

    Raises:
        InvalidParameter: a loader whose sampling could not be accounted for; the message names the fix.
    """
    if isinstance(data_loader, DPDataLoader):
        return _rebuild(data_loader, generator)
    if not isinstance(data_loader, DataLoader):
        raise InvalidParameter(f"data_loader must be a torch DataLoader, got {type(data_loader).__name__}")
    if not poisson_sampling:
        raise InvalidParameter(
            "poisson_sampling=False keeps the loader's fixed-size shuffled batches, which the DP-SGD accounting "
            "(Poisson-subsampled Gaussian) does not cover: certifying them as Poisson batches could understate "
            "epsilon. Pass poisson_sampling=True (the default): each record then joins each batch independently "
            "with probability batch_size/n")
    if isinstance(data_loader.dataset, IterableDataset):
        raise InvalidParameter("the loader iterates an IterableDataset, which has no fixed size n to sample from; "
                               "wrap the records in a map-style Dataset (e.g. TensorDataset)")
    if data_loader.batch_size is None:
        raise InvalidParameter(
            f"the loader draws its batches with its own batch_sampler ({type(data_loader.batch_sampler).__name__}), "
            "which the accounting cannot model and make_private would silently replace; build the DataLoader with "
            "batch_size=B and no sampler or batch_sampler: each record then joins each batch with probability B/n")
    if type(data_loader.sampler) not in (RandomSampler, SequentialSampler):
        raise InvalidParameter(
            f"the loader samples with a {type(data_loader.sampler).__name__}, which make_private would silently "
            "replace by uniform Poisson sampling over the whole dataset; pass the records to train on as the "
            "dataset (e.g. torch.utils.data.Subset) with no sampler")
    n = len(data_loader.dataset)  # type: ignore[arg-type]
    batch_size = check_count("batch_size", data_loader.batch_size)
    if batch_size > n:
        raise InvalidParameter(f"batch_size {batch_size} exceeds the {n} records of the dataset")
    return _RunLoader(
        data_loader.dataset, sample_rate=batch_size / n, collate_fn=data_loader.collate_fn, generator=generator,
        **_loader_options(data_loader))


def _loader_options(data_loader: DataLoader) -> dict[str, Any]:
    """The options of ``data_loader`` that do not touch sampling (workers, pinning, ...)."""
    return {"num_workers": data_loader.num_workers, "pin_memory": data_loader.pin_memory,
            "timeout": data_loader.timeout, "worker_init_fn": data_loader.worker_init_fn,
            "multiprocessing_context": data_loader.multiprocessing_context,
            "prefetch_factor": data_loader.prefetch_factor, "persistent_workers": data_loader.persistent_workers}


def _rebuild(data_loader: DPDataLoader, generator: torch.Generator) -> DPDataLoader:
    """``data_loader`` (an Opacus ``DPDataLoader``) over the same dataset, rate, batches per pass and collate
    function, sampling with ``generator``.

    Raises:
        InvalidParameter: its sampler is not Opacus's ``UniformWithReplacementSampler`` over the whole dataset.
    """
    sampler = data_loader.batch_sampler
    if isinstance(data_loader.dataset, IterableDataset):
        raise InvalidParameter("the loader iterates an IterableDataset, which has no fixed size n to sample from; "
                               "wrap the records in a map-style Dataset (e.g. TensorDataset)")
    n = len(data_loader.dataset)  # type: ignore[arg-type]
    if (type(sampler) is not UniformWithReplacementSampler or sampler.num_samples != n
            or sampler.sample_rate != data_loader.sample_rate):
        raise InvalidParameter(
            f"the DPDataLoader samples with a {type(sampler).__name__} that is not Opacus's Poisson "
            "UniformWithReplacementSampler over its whole dataset at its sample rate (distributed sampling is not "
            "modelled); pass DataLoader(dataset, batch_size=B)")
    collate = data_loader.collate_fn
    wrapped = isinstance(collate, CollateFnWithEmpty)
    loader = _RunLoader(
        data_loader.dataset, sample_rate=sampler.sample_rate, generator=generator,
        collate_fn=collate.wrapped_collator_fn if wrapped else collate,
        batch_first=collate.batch_first if wrapped else True,
        rand_on_empty=collate.rand_on_empty if wrapped else False, **_loader_options(data_loader))
    loader.batch_sampler.steps = sampler.steps  # batches per pass, as the user's loader had them
    return loader


class _OwnView:
    """The session acting on its own behalf (attribution ``"session"``), with a plugin view's call signatures."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def __getattr__(self, name: str) -> Any:  # neighbouring, rng, budget, accountant, holds, claim, record_release
        return getattr(self._session, name)

    def charge(self, event: PoissonSubsampledGaussianEvent, *, mechanism: str) -> Charge:
        return self._session.charge(event, plugin=SESSION_ATTRIBUTION, mechanism=mechanism)

    def record_info(self, body: dict[str, Any]) -> None:
        self._session.record_info(SESSION_ATTRIBUTION, body)


_SKIP_REFUSED = (
    "a skipped step would add this batch's clipped gradients to the next noisy step; each noisy step is accounted "
    "for exactly one Poisson batch, so only BatchMemoryManager splitting one batch of this run's data loader may "
    "skip (use BatchMemoryManager(data_loader=<the loader make_private returned>, ...) for virtual steps)")


class _PlanGuard:
    """Mixed in before :class:`~dpaudit.tuning.training.CappedDPOptimizer` (or its ghost-clipping subclass) as the
    run's optimizer: each noisy step covers exactly the parameters and the one Poisson batch the plan charged.

    *Parameters.* At every step, before anything is clipped or noised (refusals stop the run and its model is not
    released: it may already carry updates the charge does not cover):

    * every parameter of the module with ``requires_grad``, every parameter added to the module after
      ``make_private`` (frozen or not: no hook of Opacus's or of this guard's sees it) and every buffer with
      ``requires_grad`` must be one the optimizer updates (a parameter unfrozen after ``make_private`` but left out
      of the optimizer would be trained by something else, with its raw gradient; Opacus computes no per-example
      gradient for a buffer, so a buffer that requires gradients is always refused);
    * every parameter or buffer that required gradients in a forward pass of one of the module's layers since the
      previous step (with gradients enabled: it could get a gradient from that pass) must be one the optimizer
      updates and still require gradients: unfreezing a layer for ``backward()`` and freezing it again before
      ``step()`` would let another optimizer apply its raw gradient, even if the gradient is zeroed before the DP
      step (a forward pass under ``torch.no_grad()``, e.g. an evaluation, is not counted);
    * no parameter of the optimizer that is frozen now may hold a nonzero gradient (Opacus clips and noises only
      parameters with ``requires_grad``, but the wrapped optimizer applies every ``p.grad``: a parameter frozen
      between ``backward()`` and ``step()`` would move by its unclipped, un-noised gradient).

    A parameter of the optimizer that was frozen when ``make_private`` wrapped the module, in a layer with no other
    trainable parameter, has no per-example gradient hooks (Opacus hooks the layers trainable at wrapping time):
    a step after it was unfrozen is refused naming it, before anything is clipped (where Opacus would fail with
    "Per sample gradient is not initialized", and ghost mode with a message about the criterion). The run is
    stopped; the model, which never received that step, may still be released.

    *The caller's checks.* ``step_checks`` (:meth:`PrivacyEngine.add_step_check`) run first at every step; one
    that raises a :class:`~dpaudit.errors.DPAuditError` stops the run, the model is not released, and the error
    propagates (``dpaudit.tune`` checks there that a trial did not load an earlier trial's weights after
    ``make_private``).

    *Poisson batches.* Opacus keeps one queue of skip signals, so a ``BatchMemoryManager`` pass abandoned after a
    skipped physical batch (``break``) leaves that Poisson batch's clipped gradients accumulated, and the next pass
    would add them to its first noisy step: two Poisson batches under one noise draw. Here each signal carries the
    Poisson batch it splits, and a step is refused (the run stopped) when the gradients already accumulated belong
    to another batch than the physical batch being stepped, when a new pass over the loader (the returned loader
    or a ``BatchMemoryManager`` over it) begins while a batch is partly accumulated, and, with a single-process
    loader (no prefetching), when a physical batch was drawn but not stepped. With workers prefetching, signals
    run ahead of steps and the check relies on the steps following the order in which the batches were drawn (the
    ``per-example-loss`` assumption). After such a stop ``release_model`` still releases the model as it was before
    the refused step (the accumulated gradients were never noised or applied).
    """

    stopped: str | None
    poisson_batches: object
    original_optimizer: torch.optim.Optimizer
    _in_step: bool

    def guard(self, module: nn.Module, *, prefetch: bool) -> None:
        """Start guarding the steps of ``module``'s run (already wrapped by Opacus); ``prefetch``: the loader has
        workers."""
        self._guarded = module
        self._prefetch = prefetch
        self._hooked = {id(p) for _, m in trainable_modules(module) for p in m.parameters(recurse=False)}
        self._known = {id(t): weakref.ref(t) for t in itertools.chain(module.parameters(), module.buffers())}
        self._forwarded: dict[int, tuple[str, torch.Tensor]] = {}  # required gradients in a forward since a step
        self._forward_hooks = [m.register_forward_pre_hook(self._forward_hook(prefix, m))
                               for prefix, m in module.named_modules()]
        self.step_checks: list[Callable[[], None]] = []
        self._signals: deque[tuple[Any, bool]] = deque()  # (the Poisson batch being split, skip)
        self._pending: Any = None  # the Poisson batch whose clipped gradients are accumulated, un-noised
        self._signal_frame: Any = None  # the BatchSplittingSampler iteration that signals
        self._popped = False
        self.violation: str | None = None

    def unguard(self) -> None:
        """Remove the forward hooks :meth:`guard` put on the module's layers (after the release, or a refusal)."""
        for handle in self._forward_hooks:
            handle.remove()
        self._forward_hooks = []

    def _was_there(self, t: torch.Tensor) -> bool:
        """Whether ``t`` is a tensor the module held when :meth:`guard` was called."""
        ref = self._known.get(id(t))
        return ref is not None and ref() is t

    def _forward_hook(self, prefix: str, layer: nn.Module) -> Callable[[nn.Module, Any], None]:
        """The forward pre-hook of ``layer``: remember its tensors that require gradients in a pass with gradients
        enabled. A plain function (``copy.deepcopy`` of the model shares it rather than copying this optimizer),
        which ignores the layers of such a copy."""
        guard, own = self, id(layer)

        def hook(module: nn.Module, _: Any) -> None:
            if id(module) != own or not torch.is_grad_enabled() or guard.stopped is not None:
                return
            for name, t in itertools.chain(module._parameters.items(), module._buffers.items()):
                if t is not None and t.requires_grad:
                    guard._forwarded.setdefault(id(t), (f"{prefix}.{name}" if prefix else name, t))

        return hook

    def _refuse(self, reason: str, *, covered: bool) -> None:
        """Stop the run (every later step refused) and raise; ``covered``: the model is still covered."""
        self.stop(reason)  # type: ignore[attr-defined]
        if not covered:
            self.violation = reason
        raise AccountingError(reason)

    def new_pass(self) -> None:
        """A pass over the run's Poisson batches begins: drop the signals of physical batches never stepped, and
        refuse if a Poisson batch is partly accumulated (it could only be merged into another).

        Raises:
            AccountingError: a Poisson batch is partly accumulated (the run is stopped).
        """
        if self.stopped is None and self._pending is not None:
            self._refuse(
                "a new pass over the data loader began while a Poisson batch split by BatchMemoryManager was only "
                "partly stepped (a break after a skipped physical batch); its clipped gradients would be added to "
                "the next noisy step, two Poisson batches under one noise draw. The run is stopped: release the "
                "model with release_model() (the partial batch was never applied), or finish each Poisson batch",
                covered=True)
        self._signals.clear()

    def signal_skip_step(self, do_skip: bool = True) -> None:
        """Queue the next step's skip flag with the Poisson batch it belongs to; a skip is accepted only from
        Opacus's own ``BatchSplittingSampler.__iter__`` (the caller's frame runs exactly that code object, with
        that module's globals, and holds the Poisson batch ``batch_idxs`` it splits) over this run's Poisson
        batches. Another function, even one whose local ``self`` is such a sampler, is refused.

        Raises:
            AccountingError: any other caller asks to skip (nothing is queued), or a new ``BatchMemoryManager``
                pass begins while a Poisson batch is partly accumulated.
        """
        frame = sys._getframe(1)
        from_run = splitting(frame, self.poisson_batches)
        if do_skip and not from_run:
            raise AccountingError(_SKIP_REFUSED)
        batch = None
        if from_run:
            if frame is not self._signal_frame:  # a new iteration of a BatchMemoryManager loader
                self.new_pass()
                self._signal_frame = frame
            batch = frame.f_locals.get("batch_idxs")
        self._signals.append((batch, bool(do_skip)))

    def _check_skip_next_step(self, pop_next: bool = True) -> bool:
        """Opacus's skip query, answered from this optimizer's own queue (batch-tagged)."""
        if not pop_next:
            return self._signals[0][1] if self._signals else False
        self._popped = True
        batch, skip = self._signals.popleft() if self._signals else (None, False)
        self._pending = batch if skip else None
        return skip

    def escaped(self) -> str | None:
        """Why the model is not covered, else None: a parameter or buffer of the module requires gradients but is
        not the optimizer's (unfrozen after ``make_private``), or one required gradients in a forward pass since
        the last step and is not the optimizer's or is frozen now (class docstring)."""
        optimized = {id(p) for group in self.original_optimizer.param_groups for p in group["params"]}
        outside = [name for name, p in self._guarded.named_parameters()
                   if id(p) not in optimized and (p.requires_grad or not self._was_there(p))]
        if outside:
            return (f"parameters {_names(outside)} of the module require gradients (or were added to it after "
                    "make_private) but are not updated by the optimizer make_private returned (unfrozen after "
                    "make_private?); they would be trained by their raw, unclipped gradient. The run is stopped and "
                    "its model is not released")
        buffers = [name for name, b in self._guarded.named_buffers() if b.requires_grad]
        if buffers:
            return (f"buffers {_names(buffers)} of the module require gradients: Opacus computes per-example "
                    "gradients for parameters only, so they would be trained by their raw, unclipped gradient. The "
                    "run is stopped and its model is not released")
        toggled = [name for name, t in self._forwarded.values() if id(t) not in optimized or not t.requires_grad]
        if toggled:
            return (f"{_names(toggled)} required gradients in a forward pass since the last step but are not "
                    "updated by the optimizer make_private returned, or were frozen again before the step: their "
                    "raw gradient from that pass could be applied by another optimizer, unclipped and un-noised. "
                    "The run is stopped and its model is not released (run evaluation passes under torch.no_grad(), "
                    "where nothing is recorded, before freezing layers)")
        return None

    def _check_parameters(self) -> None:
        frozen = [p for group in self.original_optimizer.param_groups for p in group["params"]
                  if not p.requires_grad and p.grad is not None]
        if frozen and any(bool(p.grad.any()) for p in frozen):  # a device sync only in this rare case
            self._refuse(
                "a parameter of the optimizer was frozen (requires_grad=False) while holding a gradient: Opacus "
                "neither clips nor noises it, but the optimizer would apply it. Freeze parameters between steps, "
                "after optimizer.zero_grad(). The run is stopped and its model is not released", covered=False)
        reason = self.escaped()
        if reason is not None:
            self._refuse(reason, covered=False)
        unhooked = {id(p) for group in self.original_optimizer.param_groups for p in group["params"]
                    if p.requires_grad and id(p) not in self._hooked}
        if unhooked:
            named = [name for name, p in self._guarded.named_parameters() if id(p) in unhooked]
            self._refuse(
                f"parameters {_names(named)} were unfrozen after make_private, in layers that had no trainable "
                "parameter when make_private wrapped the module: Opacus computes per-example gradients only for "
                "the layers trainable then, so their gradients cannot be clipped. Unfreeze them before make_private "
                "(and freeze layers between steps instead: progressive freezing). Nothing of this step was clipped "
                "or noised; the run is stopped: release the model with release_model()", covered=True)

    def _check_batch(self) -> None:
        if not self._prefetch and len(self._signals) > 1:
            self._refuse(
                "a physical batch drawn from BatchMemoryManager was not stepped (each one must be, in order): the "
                "skip signals no longer match the batches, and a noisy step could cover two Poisson batches. The "
                "run is stopped: release the model with release_model()", covered=True)
        batch = self._signals[0][0] if self._signals else None
        if self._pending is not None and batch is not self._pending:
            self._refuse(
                "this step would add a batch to the clipped gradients of a Poisson batch that BatchMemoryManager "
                "split and that was only partly stepped: two Poisson batches under one noise draw, which the "
                "N-step event does not describe. The run is stopped: release the model with release_model()",
                covered=True)

    def pre_step(self, closure: Any = None) -> bool:
        """Check the parameters and the Poisson batch of the step, then the capped optimizer's ``pre_step``.

        Raises:
            AccountingError: see the class docstring; and the capped optimizer's refusals.
        """
        if self.stopped is None and self._in_step:
            for check in self.step_checks:
                try:
                    check()
                except DPAuditError as exc:
                    self.stop(str(exc))  # type: ignore[attr-defined]
                    self.violation = str(exc)
                    raise
            self._check_parameters()
            self._check_batch()
            self._forwarded.clear()
        self._popped = False
        ran: bool = super().pre_step(closure)  # type: ignore[misc]
        if ran and not self._popped:  # Opacus's shortcut for an optimizer without trainable parameters
            self._check_skip_next_step()
            self._pending = None
        return ran


@functools.cache
def _guarded(base: type) -> type:
    """The run's optimizer class: :class:`_PlanGuard` over ``base`` (looked up when make_private runs)."""
    return type(f"Guarded{base.__name__}", (_PlanGuard, base), {"__doc__": _PlanGuard.__doc__})


@dataclass(frozen=True)
class PrivateRun:
    """What ``make_private`` fixed and charged (all public).

    Attributes:
        plan: q, n, steps per epoch and epochs.
        charge: the charge of the whole plan.
        noise_multiplier: σ (given or calibrated).
        max_grad_norm: C.
        grad_sample_mode: ``"hooks"``, ``"functorch"`` or ``"ghost"``.
        target: ``(target_epsilon, target_delta)`` when σ was calibrated, else None.
    """

    plan: SamplingPlan
    charge: Charge
    noise_multiplier: float
    max_grad_norm: float
    grad_sample_mode: str
    target: tuple[float, float] | None


class PrivacyEngine:
    """Opacus's ``PrivacyEngine`` for one audited training run in ``session`` (a :class:`~dpaudit.session.Session`,
    attributed to the session, or a plugin's view, attributed to the plugin).

    One engine trains one model under one charge; train another model with another engine.

    Example:
        >>> engine = PrivacyEngine(session)                                        # doctest: +SKIP
        >>> model, optimizer, loader = engine.make_private(
        ...     module=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
        ...     data_loader=DataLoader(train_set, batch_size=256), epochs=5, max_grad_norm=1.0,
        ...     target_epsilon=3.0)
        >>> for _ in range(5):
        ...     for x, y in loader:
        ...         optimizer.zero_grad(); criterion(model(x), y).backward(); optimizer.step()
        >>> engine.release_model()   # only needed when stopping before the last step; returns the digest
    """

    def __init__(self, session: Session | PluginSession, *, assumptions: tuple[Assumption, ...] = ()) -> None:
        """``assumptions``: further assumptions of the run, listed with the kit's (:func:`training_assumptions`,
        which cannot be left out); ``dpaudit.tune`` adds :data:`dpaudit.tuning.user.PUBLIC_OBJECTIVE`."""
        self._assumptions = tuple(assumptions)
        if isinstance(session, PluginSession):
            self._view: Any = session
        elif isinstance(session, Session):
            self._view = _OwnView(session)
        else:
            raise InvalidParameter(f"PrivacyEngine needs a dpaudit Session or plugin view, got "
                                   f"{type(session).__name__}")
        self._run: PrivateRun | None = None
        self._module: AbstractGradSampleModule | None = None
        self._optimizer: Any = None  # the run's _PlanGuard over CappedDPOptimizer
        self._released: str | None = None

    # --- make_private -----------------------------------------------------------------------------------------

    def make_private(self, *, module: nn.Module, optimizer: torch.optim.Optimizer, data_loader: DataLoader,
                     epochs: int, max_grad_norm: float, noise_multiplier: float | None = None,
                     target_epsilon: float | None = None, target_delta: float | None = None,
                     criterion: Any = None, grad_sample_mode: str = "hooks", poisson_sampling: bool = True,
                     loss_reduction: str = "mean", batch_first: bool = True, clipping: str = "flat",
                     label: str = "make_private") -> tuple[Any, ...]:
        """Wrap the user's training objects, charge the whole plan, and return them (Opacus's order).

        Args:
            module: the user's model, on the device to train on (CUDA or CPU); not already wrapped.
            optimizer: any torch optimizer (SGD, Adam, AdamW, ...) over ``module``'s parameters: all of those with
                ``requires_grad=True`` (frozen ones may be left out; several learning rates: param groups).
            data_loader: a DataLoader with ``batch_size=B`` over a map-style dataset of n records (or an Opacus
                ``DPDataLoader``); see :func:`poisson_loader`.
            epochs: passes; N = epochs × ⌊n/B⌋ noisy steps are charged now.
            max_grad_norm: C, the per-example L2 clipping norm (flat clipping).
            noise_multiplier: σ. Exactly one of it and ``target_epsilon``.
            target_epsilon: calibrate σ so that the session's accountant bounds this run by ``target_epsilon`` at
                ``target_delta`` (:func:`~dpaudit.tuning.training.calibrate_noise_multiplier`); this run alone,
                not what the session has already spent.
            target_delta: the δ of ``target_epsilon`` (default and maximum: the session's δ, at which the
                certificate states ε).
            criterion: ghost mode only: the loss to wrap (default ``nn.CrossEntropyLoss()``, as in Opacus).
            grad_sample_mode: ``"hooks"``, ``"functorch"`` or ``"ghost"`` (ghost clipping; returns a criterion).
            poisson_sampling: must be True (fixed-size batches are refused).
            loss_reduction: ``"mean"`` or ``"sum"``, the reduction of the user's loss (as in Opacus).
            batch_first: whether the batch dimension comes first (as in Opacus).
            clipping: ``"flat"`` only (per-layer and adaptive clipping are not modelled).
            label: public description recorded with the event.

        Returns:
            ``(module, optimizer, data_loader)``, or ``(module, optimizer, criterion, data_loader)`` for ghost.

        Raises:
            InvalidParameter: bad arguments, a loader whose sampling cannot be accounted for, an optimizer that
                leaves a trainable parameter out, a buffer that requires gradients, a second call.
            PluginError: a replace-one session, a model with layers that mix examples.
            BudgetExceeded: the session cannot pay for the N steps (nothing is charged or wrapped).
            AccountingError: no σ meets ``target_epsilon``.
        """
        if self._run is not None:
            raise InvalidParameter("this PrivacyEngine already trains a model under its charge; make a new "
                                   "PrivacyEngine for another run")
        if grad_sample_mode not in GRAD_SAMPLE_MODES:
            raise InvalidParameter(f"grad_sample_mode must be one of {GRAD_SAMPLE_MODES}, got {grad_sample_mode!r}")
        if clipping != "flat":
            raise InvalidParameter(f"clipping={clipping!r} is not modelled: its noise is not calibrated to one "
                                   "L2 norm C; use clipping='flat'")
        if loss_reduction not in ("mean", "sum"):
            raise InvalidParameter(f"loss_reduction must be 'mean' or 'sum', got {loss_reduction!r}")
        if (noise_multiplier is None) == (target_epsilon is None):
            raise InvalidParameter("pass exactly one of noise_multiplier and target_epsilon")
        if criterion is not None and grad_sample_mode != "ghost":
            raise InvalidParameter("criterion is wrapped in ghost mode only; with hooks or functorch use any loss")
        max_grad_norm = check_positive("max_grad_norm", max_grad_norm)
        _check_objects(module, optimizer)
        check_add_remove(self._view)
        check_per_example(module)
        device = next(module.parameters()).device

        loader = poisson_loader(data_loader, poisson_sampling=poisson_sampling,
                                generator=torch.Generator().manual_seed(draw_seed(self._view.rng)))
        plan = plan_from_loader(loader, epochs)
        kit = training_assumptions(grad_sample_mode)
        assumptions = (*kit, *(a for a in self._assumptions if a not in kit))
        target = None
        if target_epsilon is not None:
            target = self._target(target_epsilon, target_delta)
            noise_multiplier, _ = calibrate_noise_multiplier(
                plan, target_epsilon=target[0], delta=target[1], accountant=self._accountant("target_epsilon"),
                max_grad_norm=max_grad_norm, label=label, assumptions=assumptions)
        elif target_delta is not None:
            raise InvalidParameter("target_delta goes with target_epsilon")
        noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
        event = dp_sgd_event(plan, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm, label=label,
                             assumptions=assumptions)

        ghost = grad_sample_mode == "ghost"
        wrapped = prepare_module(module, grad_sample_mode=grad_sample_mode, batch_first=batch_first,
                                 loss_reduction=loss_reduction, strict=True,
                                 **({"max_grad_norm": max_grad_norm} if ghost else {}))
        dp_optimizer = None
        try:
            wrapped.forbid_grad_accumulation()
            dp_optimizer = _guarded(CappedGhostClippingOptimizer if ghost else CappedDPOptimizer)(
                optimizer, max_steps=plan.steps, poisson_batches=loader.batch_sampler,
                on_last_step=self._release_at_cap, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                expected_batch_size=plan.expected_batch_size, loss_reduction=loss_reduction,
                generator=torch.Generator(device=device).manual_seed(draw_seed(self._view.rng)), secure_mode=False)
            dp_optimizer.guard(wrapped._module, prefetch=loader.num_workers > 0)
            wrapped_criterion = None
            if ghost:
                dp_optimizer.watch(wrapped)
                wrapped_criterion = DPLossFastGradientClipping(
                    wrapped, dp_optimizer, nn.CrossEntropyLoss() if criterion is None else criterion, loss_reduction)
            charge = charge_run(self._view, event, f"dp-{type(optimizer).__name__.lower()}")
        except BaseException:
            wrapped.to_standard_module()  # the user's module without Opacus's hooks, as it came
            if dp_optimizer is not None:  # and the user's optimizer and parameters as they came
                dp_optimizer.stop("make_private was refused")  # removes ghost mode's gradient hooks
                dp_optimizer.step_guard.remove()
                if hasattr(dp_optimizer, "_forward_hooks"):
                    dp_optimizer.unguard()
            raise
        self._run = PrivateRun(plan=plan, charge=charge, noise_multiplier=noise_multiplier,
                               max_grad_norm=max_grad_norm, grad_sample_mode=grad_sample_mode, target=target)
        self._module, self._optimizer = wrapped, dp_optimizer
        loader.on_pass = dp_optimizer.new_pass
        if ghost:
            return wrapped, dp_optimizer, wrapped_criterion, loader
        return wrapped, dp_optimizer, loader

    def make_private_with_epsilon(self, *, target_epsilon: float, target_delta: float | None = None,
                                  **kwargs: Any) -> tuple[Any, ...]:
        """Opacus's name for :meth:`make_private` with ``target_epsilon`` (``epochs`` among ``kwargs``)."""
        return self.make_private(target_epsilon=target_epsilon, target_delta=target_delta, **kwargs)

    # --- the run ----------------------------------------------------------------------------------------------

    @property
    def run(self) -> PrivateRun:
        """What :meth:`make_private` fixed and charged.

        Raises:
            DPAuditError: make_private was not called.
        """
        return self._state()[0]

    @property
    def steps_taken(self) -> int:
        """Noisy steps taken so far (≤ ``run.plan.steps``)."""
        return self._state()[2].steps_taken

    @property
    def released_sha256(self) -> str | None:
        """The digest of the released model, None before the release."""
        return self._released

    def get_epsilon(self, delta: float | None = None) -> float:
        """ε of this run's charge (all N planned steps) at ``delta`` (default: the session's δ), by the session's
        accountant: an upper bound whatever number of steps is realised (Opacus: ``PrivacyEngine.get_epsilon``)."""
        delta = self._view.budget[1] if delta is None else check_delta(delta, allow_zero=False)
        return self._accountant("get_epsilon").epsilon(self.run.charge.event, delta)

    def release_model(self) -> str:
        """Release the trained model: its digest as the release on the run's charge, with an ``info`` record of
        the schedule; every later step is refused. Done automatically after the N-th noisy step; call it to stop
        earlier. Calling it again returns the same digest while the model is unchanged.

        Returns:
            SHA-256 of the model's ``state_dict`` (:func:`~dpaudit.tuning.training.state_dict_sha256`; the user's
            module, without Opacus's wrapper).

        Raises:
            DPAuditError: make_private was not called.
            UncoveredRelease: the model changed after its release (the charge covers one model), or a parameter
                escaped the noisy steps (:class:`_PlanGuard`): one that requires gradients is not the optimizer's
                (checked here too), or a step was refused for a parameter frozen with a gradient.
        """
        run, wrapped, optimizer = self._state()
        if self._released is None and optimizer.violation is None:  # unfrozen and trained outside since a step?
            reason = optimizer.escaped()
            if reason is not None:
                optimizer.stop(reason)
                optimizer.violation = reason
        if optimizer.violation is not None:
            raise UncoveredRelease(f"charge {run.charge.seq} does not cover this model: {optimizer.violation}")
        model = wrapped._module
        digest = state_dict_sha256(model)
        if self._released is not None:
            if digest != self._released:
                raise UncoveredRelease(f"charge {run.charge.seq} covers one model, released with digest "
                                       f"{self._released}; this model has changed since")
            return digest
        optimizer.stop(f"the model was released after {optimizer.steps_taken} noisy steps; its charge covers one "
                       "model: train further with a new PrivacyEngine (and a new charge)")
        record_run(self._view, run.charge, run.plan, digest=digest, n_parameters=count_parameters(model),
                   realised_steps=optimizer.steps_taken, details=self._details())
        self._released = digest
        optimizer.unguard()
        return digest

    def add_step_check(self, check: Callable[[], None]) -> None:
        """Run ``check()`` at the top of every later step of the run's optimizer (skipped ``BatchMemoryManager``
        steps included), before the guard's own checks and before anything is clipped or noised. A
        :class:`~dpaudit.errors.DPAuditError` it raises stops the run (every later step is refused and the model is
        not released) and propagates from ``optimizer.step()``.

        Raises:
            DPAuditError: make_private was not called.
        """
        self._state()[2].step_checks.append(check)

    def _release_at_cap(self) -> None:
        self.release_model()

    def _state(self) -> tuple[PrivateRun, AbstractGradSampleModule, Any]:
        if self._run is None or self._module is None or self._optimizer is None:
            raise DPAuditError("call make_private first")
        return self._run, self._module, self._optimizer

    def _details(self) -> dict[str, Any]:
        run, wrapped, optimizer = self._state()
        details: dict[str, Any] = {
            "mechanism": run.charge.mechanism, "noise_multiplier": run.noise_multiplier,
            "max_grad_norm": run.max_grad_norm,
            "grad_sample_mode": run.grad_sample_mode, "loss_reduction": optimizer.loss_reduction,
            "optimizer": type(optimizer.original_optimizer).__name__,
            "lr": _public_number(optimizer.original_optimizer.param_groups[0].get("lr")),
            "device": str(next(wrapped.parameters()).device),
        }
        if run.target is not None:
            details["target_epsilon"], details["target_delta"] = run.target
        return details

    def _accountant(self, what: str) -> Any:
        accountant = self._view.accountant
        if accountant is None:
            raise InvalidParameter(f"{what}: an adaptive session certifies only its budget (its Renyi filter "
                                   "admits charges); pass noise_multiplier")
        return accountant

    def _target(self, target_epsilon: float, target_delta: float | None) -> tuple[float, float]:
        budget_delta = self._view.budget[1]
        delta = budget_delta if target_delta is None else check_delta(target_delta, "target_delta",
                                                                      allow_zero=False)
        if delta > budget_delta:
            raise InvalidParameter(f"target_delta {delta:g} exceeds the session's delta {budget_delta:g}, at which "
                                   "the certificate states epsilon; pass target_delta <= the session's delta")
        return check_positive("target_epsilon", target_epsilon), delta


def _check_objects(module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """The module is a plain, unwrapped torch module with parameters, and the optimizer updates only them and all
    of them that require gradients (frozen ones, ``requires_grad=False``, may be left out)."""
    if not isinstance(module, nn.Module) or isinstance(module, AbstractGradSampleModule):
        raise InvalidParameter(f"module must be a plain torch nn.Module (not already wrapped by Opacus), got "
                               f"{type(module).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer) or hasattr(optimizer, "original_optimizer"):
        raise InvalidParameter(f"optimizer must be a plain torch optimizer, got {type(optimizer).__name__}")
    parameters = {id(p) for p in module.parameters()}
    if not parameters:
        raise InvalidParameter("the module has no parameters to train")
    optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if not optimized <= parameters:
        raise InvalidParameter("the optimizer updates parameters that are not the module's")
    outside = [name for name, p in module.named_parameters() if p.requires_grad and id(p) not in optimized]
    if outside:
        raise InvalidParameter(
            f"the optimizer does not update the trainable parameters {outside[:5]}{' ...' if len(outside) > 5 else ''}"
            " of the module: they would be trained outside make_private (another optimizer, with the raw, "
            "unclipped and un-noised gradient). Pass one optimizer over all trainable parameters (several learning "
            "rates: its param groups), or freeze the others with requires_grad_(False) before make_private")
    buffers = [name for name, b in module.named_buffers() if b.requires_grad]
    if buffers:
        raise InvalidParameter(
            f"the buffers {_names(buffers)} of the module require gradients: Opacus computes per-example gradients "
            "for parameters only, so they would be trained outside make_private (with the raw, unclipped and "
            "un-noised gradient). Register a trained tensor as an nn.Parameter (and pass it to the optimizer), or "
            "make the buffer constant with requires_grad_(False)")


def _names(names: list[str]) -> str:
    """At most five names for a message."""
    return f"{names[:5]}{' ...' if len(names) > 5 else ''}"


def _public_number(value: Any) -> float | None:
    """A hyperparameter as a JSON number (a tensor learning rate read once, at the release), else None."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
