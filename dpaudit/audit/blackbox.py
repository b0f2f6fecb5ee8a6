"""Black-box input canaries: a one-run audit of a DP-SGD run from its released model alone (docs/audit.md).

Protocol (Steinke, Nasr & Jagielski 2023, Sec. 5, input-space canaries scored from the final model; both tests
as in :mod:`dpaudit.audit.dpsgd`):

1. m canary *examples*, out of distribution: each a random binary image (every feature 0 or 1 independently: the
   public [0, 1] range of the shipped pixel data) with a random 0/1 label, and m membership bits (each canary in
   with probability ½), all from the session's randomness. SHA-256 of the canaries, the bits and the design is
   written to the ledger before the run is charged (:func:`~dpaudit.audit.dpsgd.commit_design`).
2. The run is an ordinary DP-SGD run (:func:`~dpaudit.tuning.training.train_private_loader`) on the real records
   plus the included canaries, with everything public fixed from the public (n, m) before the bits are drawn: the
   plan of n + m records (q = B / (n + m), N = epochs × ⌊1/q⌋, the gradient divisor B = q·(n + m)) and σ. Its
   Poisson loader ranges over n + m slots (:class:`CanarySlots`): the n records, then one slot per canary, empty
   when the canary is out, so each of the n + Σ x_i ≤ n + m actual records is in a step's batch independently with
   probability q, as charged, and canary i in or out is an add/remove pair run with the same (q, σ, N, B): the
   neighbours the certificate covers (docs/audit.md, "Black-box input canaries").
3. Score of canary i: the logit margin (2 y_i − 1)·f(x_i) of its label under the released model (the same order
   as −loss for the logistic loss): black-box, a post-processing of the released model only.
4. Both tests on a Bonferroni-corrected sweep against the run's certified ε, the last-iterate heuristic beside
   them, and the evidence in the ledger (:func:`~dpaudit.audit.dpsgd.finish_audit`).

Black-box one-run audits are known to be loose (an example's influence on the final model is diluted by every
other example's and by the non-linear training dynamics): ε_lb ≤ ε_cert then says "no detectable leakage", never
"private".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from opacus.data_loader import DPDataLoader
from torch import nn
from torch.utils.data import Dataset, default_collate

from dpaudit import canonical
from dpaudit.audit.dpsgd import commit_design, finish_audit, planned_audit, sampling_plan
from dpaudit.audit.evidence import INPUT
from dpaudit.audit.mechanism import AuditReport, membership
from dpaudit.errors import InvalidParameter
from dpaudit.tuning.seeds import draw_seed
from dpaudit.tuning.training import TrainResult, calibrate_noise_multiplier, train_private_loader
from dpaudit.validation import check_count, check_delta

if TYPE_CHECKING:
    from dpaudit.mechanisms.randomness import RandomSource
    from dpaudit.plugin_session import PluginSession

#: how the evidence names this kind of audit
KIND = INPUT


@dataclass(frozen=True, eq=False)
class InputCanaries:
    """m canary examples and their membership bits.

    Attributes:
        X: (m, d) float32 features.
        y: (m,) float32 0/1 labels.
        members: the membership bits (bool): canary i is in the training set iff ``members[i]``.
    """

    X: np.ndarray
    y: np.ndarray
    members: np.ndarray

    def __post_init__(self) -> None:
        X, y, members = np.asarray(self.X), np.asarray(self.y), np.asarray(self.members)
        if X.ndim != 2 or y.shape != (len(X),) or members.shape != y.shape:
            raise InvalidParameter("input canaries need one feature row, one label and one membership bit each")

    def digest(self) -> str:
        """SHA-256 of the canaries' shape, features and labels (float32 bytes): what the commitment fixes."""
        X, y = np.ascontiguousarray(self.X, dtype=np.float32), np.ascontiguousarray(self.y, dtype=np.float32)
        return canonical.sha256_hex(f"{X.shape[0]}x{X.shape[1]}:".encode() + X.tobytes() + y.tobytes())


def draw_input_canaries(canaries: int, n_features: int, rng: RandomSource) -> InputCanaries:
    """m random binary images (each feature 0 or 1 with probability ½) with random 0/1 labels, and m fair
    membership bits, all from ``rng`` (module docstring, step 1)."""
    check_count("canaries", canaries)
    check_count("n_features", n_features)
    draws = np.random.default_rng(draw_seed(rng))
    X = draws.integers(0, 2, size=(canaries, n_features)).astype(np.float32)
    y = draws.integers(0, 2, size=canaries).astype(np.float32)
    return InputCanaries(X, y, membership(canaries, rng))


class CanarySlots(Dataset):
    """n + m slots for a Poisson loader: the n real records, then one slot per canary, holding the canary's example
    when it is in and nothing when it is out (module docstring, step 2).

    The loader's sampler draws every slot with the run's q; :meth:`collate` drops the empty slots of a batch, so the
    batches are Poisson samples at rate q of the n + Σ x_i actual records, while the plan (q, N and the divisor B)
    is that of the public n + m.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, canaries: InputCanaries) -> None:
        inside = np.flatnonzero(canaries.members)
        self.X = torch.as_tensor(np.concatenate([X, canaries.X[inside]]), dtype=torch.float32)
        self.y = torch.as_tensor(np.concatenate([y, canaries.y[inside]]), dtype=torch.float32)
        self.rows = np.full(len(X) + len(canaries.members), -1, dtype=np.int64)
        self.rows[:len(X)] = np.arange(len(X))
        self.rows[len(X) + inside] = len(X) + np.arange(len(inside))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, slot: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        row = int(self.rows[slot])
        return None if row < 0 else (self.X[row], self.y[row])

    def collate(self, batch: list[tuple[torch.Tensor, torch.Tensor] | None]) -> list[torch.Tensor]:
        """The batch's records (features, labels), the empty slots dropped."""
        present = [item for item in batch if item is not None]
        return default_collate(present) if present else [self.X[:0], self.y[:0]]


def margin_scores(model: nn.Module, canaries: InputCanaries) -> np.ndarray:
    """Score of each canary: (2 y_i − 1)·f(x_i), its label's logit margin under ``model`` (higher = more likely in)."""
    parameter = next(model.parameters())
    with torch.no_grad():
        logits = model(torch.as_tensor(canaries.X, dtype=parameter.dtype, device=parameter.device)).reshape(-1)
    return (2.0 * canaries.y - 1.0) * logits.to("cpu", torch.float64).numpy()


@dataclass(frozen=True)
class BlackBoxAuditResult:
    """A black-box audit of one DP-SGD run.

    Attributes:
        report: both tests' ε_lb beside the run's certified ε, and the last-iterate heuristic.
        train: the training run (its charge, release and model).
        canaries: the canary examples and their membership bits.
        scores: one score per canary.
    """

    report: AuditReport
    train: TrainResult
    canaries: InputCanaries = field(repr=False)
    scores: np.ndarray = field(repr=False)


def audit_dpsgd_blackbox(session: PluginSession, model: nn.Module, X: np.ndarray, y: np.ndarray, *, canaries: int,
                         lr: float, epochs: int, batch_size: int | None, max_grad_norm: float,
                         noise_multiplier: float | None, delta: float, target_epsilon: float | None = None,
                         level: float = 0.05, label: str = "black-box audit run") -> BlackBoxAuditResult:
    """Train ``model`` with DP-SGD on (X, y) plus the included input canaries and audit it from the final model.

    Args:
        session: a plugin's view of the open session; the run is charged, recorded and released through it.
        model: a binary classifier as for :func:`~dpaudit.tuning.training.train_private` (initial weights public).
        X, y: the private training set (features in [0, 1], 0/1 labels).
        canaries: m.
        lr, epochs, batch_size, max_grad_norm, noise_multiplier: the DP-SGD run (plain SGD); q = B / (n + m) for
            n real records and m canaries, whatever the bits; ``batch_size`` None: full batch (B = n + m, q = 1, one
            step per epoch). ``noise_multiplier`` None: the smallest σ found whose certified ε at ``delta`` is at
            most ``target_epsilon`` for this (q, N), found before the bits are drawn
            (:func:`~dpaudit.tuning.training.calibrate_noise_multiplier`).
        delta: the δ of the certified ε and of both tests.
        target_epsilon: the ε σ is calibrated to when ``noise_multiplier`` is None.
        level: the verdict's significance level, in [0.001, 0.05] (each test runs at half of it).
        label: public description of the charged event.

    Raises:
        InvalidParameter: bad parameters, e.g. a batch larger than n + m (nothing is written).
        BudgetExceeded: the session cannot pay for the run (nothing is trained, the commitment is written).
    """
    delta = check_delta(delta, allow_zero=False)
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    if X.ndim != 2 or y.shape != (len(X),) or len(X) == 0:
        raise InvalidParameter(f"need one feature row per label, at least one: X {X.shape}, y {y.shape}")
    slots = len(X) + check_count("canaries", canaries)
    plan = sampling_plan(slots, slots if batch_size is None else batch_size, epochs)
    if noise_multiplier is None:
        if target_epsilon is None:
            raise InvalidParameter("give noise_multiplier or target_epsilon")
        noise_multiplier, _ = calibrate_noise_multiplier(plan, target_epsilon=target_epsilon, delta=delta,
                                                         accountant=session.accountant, max_grad_norm=max_grad_norm)
    audit = planned_audit(session, model, plan, canaries=canaries, lr=lr, noise_multiplier=noise_multiplier,
                          max_grad_norm=max_grad_norm, delta=delta, level=level, label=label)
    drawn = draw_input_canaries(canaries, X.shape[1], session.rng)  # the bits: after every public choice
    commitment, design = commit_design(session, KIND, drawn.members, {"canary_digest": drawn.digest()}, plan,
                                       level=audit.level, delta=audit.delta)
    data = CanarySlots(X, y, drawn)
    loader = DPDataLoader(data, sample_rate=plan.sample_rate, collate_fn=data.collate,
                          generator=torch.Generator(device="cpu").manual_seed(draw_seed(session.rng)))
    train = train_private_loader(session, model, loader, optimizer="sgd", lr=lr, epochs=epochs,
                                 max_grad_norm=max_grad_norm, noise_multiplier=noise_multiplier, label=label)
    scores = margin_scores(train.model, drawn)
    report = finish_audit(session, KIND, audit, commitment=commitment, design=design, plan=plan, train=train,
                          members=drawn.members, scores=scores, noise_multiplier=noise_multiplier)
    return BlackBoxAuditResult(report, train, drawn, scores)
