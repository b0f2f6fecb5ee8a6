"""Coverage by dominance: when an event already charged pays for a later run that is charged nothing itself.

Two relations (docs/accounting.md, "Envelope charges"):

* **parameter-wise** (:func:`parameter_dominated`): a Poisson-subsampled Gaussian *envelope* with the largest
  sample rate, the smallest noise multiplier and the most steps dominates every run with smaller or equal q and N
  and larger or equal σ in every hockey-stick divergence, so whatever accountant composes the envelope (PLD
  included) also bounds the run;
* **RDP** (:func:`~dpaudit.accounting.rdp.rdp_dominated`): a run whose RDP curve lies below the base event of a
  repeat-and-select at every order; Papernot & Steinke's 2022 bounds use the base's RDP curve only.

:func:`covers` is the one rule the kernel and the tuning kit use; the session's ``claim`` makes "one charge covers
one later run" atomic.
"""

from __future__ import annotations

from dpaudit.accounting.rdp import rdp_dominated
from dpaudit.events import PoissonSubsampledGaussianEvent, PrivacyEvent, RepeatAndSelectEvent


def parameter_dominated(run: PoissonSubsampledGaussianEvent, by: PoissonSubsampledGaussianEvent) -> bool:
    """Whether ``by`` dominates ``run`` parameter-wise: same neighbouring relation, q_run ≤ q, σ_run ≥ σ, N_run ≤ N.

    Then every (ε, δ) (hockey-stick) bound of ``by`` holds for ``run``, whatever accountant derived it: a larger σ
    is post-processing by extra Gaussian noise; a smaller rate q' = (q'/q)·q makes each step's output law on the
    larger data set a convex combination of the q-mixture and the law without the differing record, and
    hockey-stick divergences are jointly convex; fewer steps drop outputs. The clipping norm does not enter: each
    event's noise is σ times its own sensitivity.
    """
    return (run.neighbouring is by.neighbouring and run.sample_rate <= by.sample_rate
            and run.noise_multiplier >= by.noise_multiplier and run.steps <= by.steps)


def covers(charged: PrivacyEvent, run: PrivacyEvent) -> bool:
    """Whether a run whose privacy is ``run`` may be paid for by the already charged ``charged``.

    A repeat-and-select covers each of its repetitions whose event its base RDP-dominates; a Poisson-subsampled
    Gaussian envelope covers a Poisson-subsampled Gaussian run it dominates parameter-wise (RDP dominance would not
    do there: the certificate may compose the envelope by PLD, which needs dominance of the privacy profile).
    Nothing else covers anything.

    Raises:
        UnsupportedEvent: a repeat-and-select whose base and ``run`` cannot be compared (other neighbouring
            relation, an event the accountants cannot tally).
    """
    if isinstance(charged, RepeatAndSelectEvent):
        return rdp_dominated(run, charged.event)
    if isinstance(charged, PoissonSubsampledGaussianEvent) and isinstance(run, PoissonSubsampledGaussianEvent):
        return parameter_dominated(run, charged)
    return False
