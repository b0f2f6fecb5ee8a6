"""The base event of a random-repetition tuning run: one DP-SGD run that dominates every candidate's run.

Each repetition trains a candidate drawn uniformly at random from the grid, so one repetition is the mixture,
with public data-independent weights, of the candidates' DP-SGD runs. Papernot & Steinke's bounds need only RDP
bounds on one repetition at the grid's orders (and, for the Poisson law, a (ε̂, δ̂) bound derived from them).
If every candidate's RDP curve is at most the base's at every order, the mixture satisfies the base's bounds too
(Rényi divergence of order λ > 1 is jointly quasi-convex, van Erven & Harremoës 2014, Thm. 13), so the base may
stand for the repetition.

The base is the envelope of the grid: the largest sample rate q, the smallest noise multiplier σ and the largest
step count N among the candidates (the common event when they share (q, σ, N)). Dominance is then *checked*, not
assumed, on the accountant's whole order grid and at α = ∞; a grid it fails for is refused. The clipping norm C
does not enter: a candidate's noise is σ·C for its own C, so its privacy depends on (q, σ, N) alone; the base
records the largest C of the grid as its sensitivity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dpaudit.accounting.rdp import rdp_dominated
from dpaudit.errors import PluginError
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.sensitivity import Assumption
from dpaudit.tuning import envelope_event

REPETITION_ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(
        id="randtune-hidden-repetitions",
        statement="Only the best repetition's output is released. The realised number of repetitions K, the other "
        "repetitions' models and scores, and the run's duration are kept secret. The exported evidence does not "
        "reveal K: the ledger records none of them (K only as a hiding commitment) and its clock is frozen at the "
        "repeat-and-select charge, so every later record and the certificate's closed_at carry the charge's time. "
        "Outside the evidence, timing grows with K: the wall-clock time at which the run ends or its results "
        "appear, the MLflow run's own start and end times, its metric and artifact upload times, and the resources "
        "used. The guarantee holds only if these are kept from whoever receives the release.",
        conditional=True,
        source="Papernot & Steinke 2022, Thm. 2 and 6 (A outputs the best of K runs only); Liu & Talwar 2019",
    ),
    Assumption(
        id="randtune-base-dominates-candidates",
        statement="Every candidate's DP-SGD run has an RDP curve at most the base event's at every order of the "
        "accountant's grid (checked by the randtune plugin on the public grid it records), so a repetition, a "
        "uniform mixture of candidate runs, satisfies the base event's RDP bounds.",
        conditional=False,
        source="van Erven & Harremoës 2014, Thm. 13 (joint quasi-convexity of Rényi divergence)",
    ),
)


def dominating_event(events: Sequence[PoissonSubsampledGaussianEvent], label: str) -> PoissonSubsampledGaussianEvent:
    """The envelope (max q, min σ, max N; :func:`~dpaudit.tuning.candidates.envelope_event`) of the
    candidates' events, checked to dominate each of them in RDP.

    Raises:
        PluginError: no candidate, or a candidate whose RDP curve exceeds the envelope's at some order.
    """
    if not events:
        raise PluginError("randtune needs at least one candidate")
    envelope = envelope_event(events, label)
    base = dataclasses.replace(envelope, assumptions=envelope.assumptions + REPETITION_ASSUMPTIONS)
    for i, e in enumerate(events):
        if not rdp_dominated(e, base):
            raise PluginError(f"randtune: candidate {i} (q={e.sample_rate}, sigma={e.noise_multiplier}, "
                              f"steps={e.steps}) is not dominated by the grid's envelope; split the grid")
    return base
