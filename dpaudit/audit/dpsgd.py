"""White-box ("Dirac") gradient canaries: a one-run audit of a DP-SGD run (docs/audit.md, "Auditing DP-SGD").

Protocol (Steinke, Nasr & Jagielski 2023, Sec. 5, white-box canaries; tested also with the f-DP audit of
Mahloujifar, Melis & Chaudhuri 2025):

1. m canaries, each a coordinate c_i of the model's flat trainable-parameter vector (m distinct coordinates drawn
   from the session's randomness) and a membership bit drawn from the same randomness (each canary in with
   probability ½, :func:`~dpaudit.audit.mechanism.membership`). A digest of both is written to the ledger before
   the run is charged (:mod:`dpaudit.audit.evidence`), so they cannot be chosen after the scores are seen.
2. The run is an ordinary DP-SGD run of :func:`~dpaudit.tuning.training.train_private`, charged through the session
   (q, σ, N): its training set is the real records plus the included canaries. At every step each included canary
   is sampled independently with the run's Poisson rate q (the same rate as a real record) and, when sampled,
   contributes the per-example gradient C·e_{c_i} (the clip norm times the unit vector of its coordinate). The rows
   are appended to the per-example gradients Opacus computed for the batch *before* the step, so they are clipped,
   summed and noised by the same optimizer step as the real examples' (:class:`CanaryInjector`); a canary of norm
   above C is clipped to C like any example.
3. Score of canary i: −(θ_N − θ_0)[c_i], the sum over steps of the (negated) plain-SGD update of its coordinate, a
   post-processing of the released model and of the public initial model.
4. Both tests of :func:`~dpaudit.audit.guesses.sweep_bounds` on a Bonferroni-corrected sweep of guess rules; the
   f-DP test against the Poisson-subsampled-Gaussian curves for the run's own q and N
   (:class:`~dpaudit.audit.tradeoff.SubsampledGaussianFamily`); the claim is the run's certified ε at δ
   (the session's accountant on the charged event). Beside them, labelled as such, the last-iterate HEURISTIC ε
   of Steinke et al. 2024 for the run's (q, N, σ) (:mod:`dpaudit.audit.last_iterate`); never in the verdict.

Steps 1 and 4 (:func:`commit_design`, :func:`finish_audit`) are shared with the black-box input canaries of
:mod:`dpaudit.audit.blackbox`.

Only plain SGD is audited this way: with Adam the update of a coordinate is not the sum of its noisy gradients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from dpaudit.audit.evidence import DIRAC, check_level, commit, record_evidence, subsampled_design
from dpaudit.audit.guesses import default_rules
from dpaudit.audit.last_iterate import last_iterate_epsilon
from dpaudit.audit.mechanism import AuditReport, MechanismAudit, membership, report_of
from dpaudit.audit.tradeoff import SubsampledGaussianFamily
from dpaudit.errors import InvalidParameter
from dpaudit.tuning.seeds import draw_seed
from dpaudit.tuning.training import (
    SamplingPlan,
    TrainResult,
    calibrate_noise_multiplier,
    check_add_remove,
    check_per_example,
    dp_sgd_event,
    train_private,
)
from dpaudit.validation import check_count, check_delta, check_positive

if TYPE_CHECKING:
    from dpaudit.audit.blackbox import BlackBoxAuditResult
    from dpaudit.mechanisms.randomness import RandomSource
    from dpaudit.plugin_session import PluginSession

#: how the evidence names this kind of audit
KIND = DIRAC


@dataclass(frozen=True, eq=False)
class DiracCanaries:
    """m white-box canaries: one coordinate each of the flat trainable-parameter vector and a membership bit.

    Attributes:
        coordinates: m distinct flat indices (int64).
        members: the membership bits (bool): canary i is in the training set iff ``members[i]``.
        magnitude: the norm of each canary's gradient (the run's clip norm C).
    """

    coordinates: np.ndarray
    members: np.ndarray
    magnitude: float

    def __post_init__(self) -> None:
        coords, members = np.asarray(self.coordinates), np.asarray(self.members)
        if coords.ndim != 1 or coords.shape != members.shape or len(np.unique(coords)) != len(coords):
            raise InvalidParameter("canaries need one distinct coordinate and one membership bit each")
        check_positive("magnitude", self.magnitude)


def sampling_plan(n: int, batch_size: int, epochs: int) -> SamplingPlan:
    """The (q, N) :func:`~dpaudit.tuning.training.train_private` charges for n records: q = B/n, ⌊1/q⌋ steps per
    epoch (Opacus's Poisson sampler), known before the run so that the commitment can fix them.

    Raises:
        InvalidParameter: a batch size or epoch count that is not a positive count, or B > n.
    """
    check_count("batch_size", batch_size)
    if batch_size > n:
        raise InvalidParameter(f"batch_size {batch_size} exceeds the {n} training records")
    q = batch_size / n
    return SamplingPlan(n, q, int(1 / q), check_count("epochs", epochs))


def draw_canaries(canaries: int, n_parameters: int, magnitude: float, rng: RandomSource) -> DiracCanaries:
    """m distinct coordinates (uniform without replacement) and m fair membership bits, all from ``rng``.

    Raises:
        InvalidParameter: more canaries than trainable parameters.
    """
    check_count("canaries", canaries)
    if canaries > n_parameters:
        raise InvalidParameter(f"{canaries} canaries need as many distinct coordinates; the model has {n_parameters}")
    coordinates = np.random.default_rng(draw_seed(rng)).choice(n_parameters, size=canaries, replace=False)
    return DiracCanaries(coordinates.astype(np.int64), membership(canaries, rng), float(magnitude))


class CanaryInjector:
    """The ``inject`` hook of :func:`~dpaudit.tuning.training.train_private` (module docstring, step 2).

    Each call samples every included canary with probability ``sample_rate`` and appends one per-example gradient
    row C·e_{c_i} per sampled canary to every parameter's ``grad_sample`` (zero in all other parameters), so that
    the optimizer step clips, sums and noises them with the batch. ``sampled`` counts, per canary, the steps it
    was sampled in.
    """

    def __init__(self, canaries: DiracCanaries, sample_rate: float, generator: torch.Generator) -> None:
        self.canaries = canaries
        self.sample_rate = sample_rate
        self.generator = generator
        self.sampled = np.zeros(len(canaries.members), dtype=np.int64)
        self.steps = 0

    def __call__(self, params: list[torch.Tensor]) -> None:
        draws = torch.rand(len(self.canaries.members), generator=self.generator).numpy()
        chosen = np.flatnonzero(self.canaries.members & (draws < self.sample_rate))
        self.sampled[chosen] += 1
        self.steps += 1
        coords = self.canaries.coordinates[chosen]
        offset = 0
        for p in params:
            grad_sample = p.grad_sample
            if not isinstance(grad_sample, torch.Tensor):
                raise InvalidParameter("white-box canaries need one per-example gradient tensor per parameter")
            rows = torch.zeros((len(chosen), p.numel()), dtype=grad_sample.dtype, device=grad_sample.device)
            inside = np.flatnonzero((coords >= offset) & (coords < offset + p.numel()))
            rows[torch.as_tensor(inside), torch.as_tensor(coords[inside] - offset)] = self.canaries.magnitude
            p.grad_sample = torch.cat([grad_sample, rows.view(len(chosen), *p.shape)])
            offset += p.numel()


def flat_parameters(model: nn.Module) -> np.ndarray:
    """The trainable parameters of ``model`` as one float64 vector, in the optimizer's order."""
    return np.concatenate([p.detach().to("cpu", torch.float64).reshape(-1).numpy()
                           for p in model.parameters() if p.requires_grad])


def dirac_scores(initial: np.ndarray, final: np.ndarray, canaries: DiracCanaries) -> np.ndarray:
    """Score of each canary: −(θ_N − θ_0)[c_i] (higher = more likely in; module docstring, step 3)."""
    return -(final[canaries.coordinates] - initial[canaries.coordinates])


@dataclass(frozen=True)
class DpSgdAuditResult:
    """A white-box audit of one DP-SGD run.

    Attributes:
        report: both tests' ε_lb beside the run's certified ε (``report.audit.claimed_epsilon``).
        train: the training run (its charge, release and model).
        canaries: the canaries (coordinates and membership bits).
        scores: one score per canary.
        sampled: per canary, the number of steps it was sampled in (0 for canaries left out).
    """

    report: AuditReport
    train: TrainResult
    canaries: DiracCanaries = field(repr=False)
    scores: np.ndarray = field(repr=False)
    sampled: np.ndarray = field(repr=False)


def planned_audit(session: PluginSession, model: nn.Module, plan: SamplingPlan, *, canaries: int, lr: float,
                  noise_multiplier: float, max_grad_norm: float, delta: float, level: float,
                  label: str) -> MechanismAudit:
    """The audit of a planned DP-SGD run against its certified ε at δ, all of it checked from the plan before the
    commitment is written or the run charged (a bad option then leaves nothing in the ledger).

    Raises:
        InvalidParameter: a bad δ, level, learning rate, σ or C.
        PluginError: the session is not add/remove, or the model mixes examples.
        AccountingError: the accountant cannot bound the planned run at δ.
    """
    delta = check_delta(delta, allow_zero=False)
    check_positive("lr", lr)
    check_add_remove(session)
    check_per_example(model)
    event = dp_sgd_event(plan, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm, label=label)
    return MechanismAudit(canaries, session.accountant.epsilon(event, delta), delta, level=check_level(level),
                          family=SubsampledGaussianFamily(plan.sample_rate, plan.steps), rules=default_rules(canaries))


def commit_design(session: PluginSession, kind: str, members: np.ndarray, canaries: dict[str, Any],
                  plan: SamplingPlan, *, level: float, delta: float) -> tuple[str, dict[str, Any]]:
    """Write the commitment to a DP-SGD audit's design (before the run is charged): (commitment, design fields)."""
    design = subsampled_design(canaries, plan.sample_rate, plan.steps)
    commitment = commit(kind, members, rules=default_rules(len(members)), level=level, delta=delta, **design)
    session.record_info({"audit_commitment": commitment})
    return commitment, design


def finish_audit(session: PluginSession, kind: str, audit: MechanismAudit, *, commitment: str, design: dict[str, Any],
                 plan: SamplingPlan, train: TrainResult, members: np.ndarray, scores: np.ndarray,
                 noise_multiplier: float) -> AuditReport:
    """Both tests on a finished DP-SGD audit run against its certified ε (``audit``, :func:`planned_audit`), the
    last-iterate heuristic beside them, and the evidence written to the ledger (module docstring, step 4).

    Raises:
        InvalidParameter: the run charged another (q, N) than the committed one.
    """
    if (train.sample_rate, train.planned_steps) != (plan.sample_rate, plan.steps):
        raise InvalidParameter(f"the run charged (q={train.sample_rate}, N={train.planned_steps}), not the committed "
                               f"(q={plan.sample_rate}, N={plan.steps})")
    report = report_of(audit, members, scores, session.rng.describe(),
                       last_iterate_epsilon(plan.sample_rate, plan.steps, noise_multiplier, audit.delta))
    record_evidence(session, kind, charge_seq=train.charge_seq, commitment=commitment, report=report, members=members,
                    scores=scores, design=design)
    return report


def audit_dpsgd(session: PluginSession, model: nn.Module, X: np.ndarray, y: np.ndarray, *, canaries: int, lr: float,
                epochs: int, batch_size: int, max_grad_norm: float, noise_multiplier: float, delta: float,
                level: float = 0.05, label: str = "white-box audit run") -> DpSgdAuditResult:
    """Train ``model`` with DP-SGD on (X, y) plus m white-box canaries and audit the run (module docstring).

    Args:
        session: a plugin's view of the open session; the run is charged, recorded and released through it.
        model: a binary classifier as for :func:`~dpaudit.tuning.training.train_private` (initial weights public).
        X, y: the private training set.
        canaries: m (at most the number of trainable parameters).
        lr, epochs, batch_size, max_grad_norm, noise_multiplier: the DP-SGD run (plain SGD).
        delta: the δ of the certified ε and of both tests.
        level: the verdict's significance level, in [0.001, 0.05] (each test runs at half of it).
        label: public description of the charged event.

    Raises:
        InvalidParameter: bad parameters, or more canaries than parameters (nothing is written).
        BudgetExceeded: the session cannot pay for the run (nothing is trained, the commitment is written).
    """
    n_parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    plan = sampling_plan(len(X), batch_size, epochs)
    audit = planned_audit(session, model, plan, canaries=canaries, lr=lr, noise_multiplier=noise_multiplier,
                          max_grad_norm=max_grad_norm, delta=delta, level=level, label=label)
    drawn = draw_canaries(canaries, n_parameters, max_grad_norm, session.rng)
    commitment, design = commit_design(session, KIND, drawn.members,
                                       {"coordinates": [int(c) for c in drawn.coordinates]}, plan,
                                       level=audit.level, delta=audit.delta)
    injector = CanaryInjector(drawn, plan.sample_rate,
                              torch.Generator(device="cpu").manual_seed(draw_seed(session.rng)))
    initial = flat_parameters(model)
    train = train_private(session, model, X, y, optimizer="sgd", lr=lr, epochs=epochs, batch_size=batch_size,
                          max_grad_norm=max_grad_norm, noise_multiplier=noise_multiplier, label=label,
                          inject=injector)
    scores = dirac_scores(initial, flat_parameters(train.model), drawn)
    report = finish_audit(session, KIND, audit, commitment=commitment, design=design, plan=plan, train=train,
                          members=drawn.members, scores=scores, noise_multiplier=noise_multiplier)
    return DpSgdAuditResult(report, train, drawn, scores, injector.sampled)


#: shipped data sets ``dpaudit audit dpsgd`` trains on (their ``-train`` part, protected), labels binarised
SHIPPED = ("digits", "mnist-5000")
#: canary types of ``dpaudit audit dpsgd --canary-type``: white-box gradients, black-box input examples
CANARY_TYPES = ("dirac", "input")


def audit_shipped(session: PluginSession, dataset: str, *, target_epsilon: float, delta: float, canaries: int,
                  hidden: int, batch_size: int, epochs: int, lr: float, max_grad_norm: float = 1.0,
                  level: float = 0.05, canary_type: str = "dirac") -> DpSgdAuditResult | BlackBoxAuditResult:
    """:func:`audit_dpsgd` (``canary_type="dirac"``) or :func:`~dpaudit.audit.blackbox.audit_dpsgd_blackbox`
    (``"input"``) of a one-hidden-layer MLP on a shipped data set, σ calibrated to ``target_epsilon``.

    The label is the public rule "digit ≥ 5"; the initial model is seeded from the session's randomness (it is
    public: the white-box scores are differences from it); σ is the smallest found whose certified ε at ``delta``
    is at most ``target_epsilon`` (:func:`~dpaudit.tuning.training.calibrate_noise_multiplier`) for the run's own
    (q, N): over the n real records (white-box), over the n + m records and canaries whatever the bits (input).

    Raises:
        InvalidParameter: an unknown data set or canary type, or bad parameters.
        PluginError: the session does not protect ``<dataset>-train``.
    """
    from dpaudit.audit.blackbox import audit_dpsgd_blackbox
    from dpaudit.data.access import require_data
    from dpaudit.tuning.models import seeded_model

    if dataset not in SHIPPED:
        raise InvalidParameter(f"unknown data set {dataset!r}; choose one of {SHIPPED}")
    if canary_type not in CANARY_TYPES:
        raise InvalidParameter(f"unknown canary type {canary_type!r}; choose one of {CANARY_TYPES}")
    require_data(session, protected=(f"{dataset}-train",), public=())
    data = session.data(f"{dataset}-train")
    X, y = np.asarray(data.X, dtype=np.float32), (np.asarray(data.y) >= 5).astype(np.float32)
    model = seeded_model("mlp", X.shape[1], hidden, draw_seed(session.rng))
    run = {"lr": lr, "epochs": epochs, "batch_size": batch_size, "max_grad_norm": max_grad_norm, "delta": delta,
           "level": level}
    if canary_type == "input":
        return audit_dpsgd_blackbox(session, model, X, y, canaries=canaries, noise_multiplier=None,
                                    target_epsilon=target_epsilon, **run,
                                    label=f"black-box audit run: MLP({hidden}) on {dataset}-train")
    sigma, _ = calibrate_noise_multiplier(sampling_plan(len(X), batch_size, epochs), target_epsilon=target_epsilon,
                                          delta=delta, accountant=session.accountant, max_grad_norm=max_grad_norm)
    return audit_dpsgd(session, model, X, y, canaries=canaries, noise_multiplier=sigma, **run,
                       label=f"white-box audit run: MLP({hidden}) on {dataset}-train")
