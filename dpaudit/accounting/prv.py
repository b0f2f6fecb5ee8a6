"""Privacy-random-variable accountant: Opacus 1.6's implementation of Gopi, Lee & Wutschitz 2021.

Only the Poisson-subsampled Gaussian (add/remove) is modelled: it is the only PRV Opacus implements
(``PoissonSubsampledGaussianPRV``, Gopi et al. Props. B1 and B4). The composed PRV is discretised on a mesh chosen
from the error targets ε_err = 0.01 and δ_err = δ/1000 (Opacus's defaults) and
``DiscretePRV.compute_epsilon`` returns (ε_lower, ε_estimate, ε_upper), with

    ε_upper = ε̂(δ − δ_err) + ε_err,   ε_lower = ε̂(δ + δ_err) − ε_err    (Gopi et al. 2021, Thm. 5.5).

Only ε_upper is returned (Opacus's own ``PRVAccountant.get_epsilon`` does the same); ε_lower serves the verifier
as a lower bound (:mod:`dpaudit.accounting.recheck`).

Both directions. Opacus's PRV is the privacy loss of the *remove* direction only. Under add/remove neighbours
the worst case is the larger of the composed remove-direction and add-direction bounds (a given neighbouring
pair is one or the other for every step), and we know of no proof that the remove direction always dominates
after composition. So this accountant returns max(PRV ε_upper of the remove direction, dp_accounting's
pessimistic PLD ε of the add direction): an upper bound in both directions. Opacus's domain-size rule is the one
from the authors' code, which Opacus flags as differing subtly from Remark 5.6 of the paper for ε_err ≥ 1 (we
use ε_err = 0.01). The tightest accountant does not include this accountant (it would never beat the PLD
accountant it already runs by more than the discretisation error, and it costs ten times more); ε_lower of the
remove direction is a valid lower bound on the true ε and serves the verifier (:mod:`dpaudit.accounting.recheck`).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

from dpaudit.accounting.base import Accountant, DeltaUnreachable, package_versions
from dpaudit.accounting.charges import LeafSpec, PoissonGaussianSpec
from dpaudit.accounting.opacus_analysis import prv_analysis
from dpaudit.errors import AccountingError

EPS_ERROR = 0.01
DELTA_ERROR_FRACTION = 1e-3


@functools.lru_cache(maxsize=64)
def prv_bounds(history: tuple[tuple[float, float, int], ...], delta: float) -> tuple[float, float, float]:
    """(ε_lower, ε_estimate, ε_upper) for (sample rate, noise multiplier, steps) triples at ``delta`` > 0.

    The construction is that of Opacus's ``PRVAccountant._get_dprv`` through the public
    ``opacus.accountants.analysis.prv`` functions, loaded without Opacus's training stack
    (:func:`dpaudit.accounting.opacus_analysis.prv_analysis`).

    Raises:
        AccountingError: Opacus's discretisation or root search failed.
    """
    opacus = prv_analysis()  # Opacus's own files, without opacus/__init__ (torch)
    delta_error = delta * DELTA_ERROR_FRACTION
    prvs = [opacus.PoissonSubsampledGaussianPRV(q, sigma) for q, sigma, _ in history]
    steps = [k for _, _, k in history]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # Opacus's "optimal order is the largest alpha" note
            size = opacus.compute_safe_domain_size(prvs=prvs, max_self_compositions=steps, eps_error=EPS_ERROR,
                                                   delta_error=delta_error)
        mesh = EPS_ERROR / np.sqrt(sum(steps) * np.log(12 / delta_error) / 2)
        domain = opacus.Domain.create_aligned(-size, size, mesh)
        dprvs = [opacus.discretize(opacus.TruncatedPrivacyRandomVariable(p, domain.t_min, domain.t_max), domain)
                 for p in prvs]
        composed = opacus.compose_heterogeneous(dprvs=dprvs, num_self_compositions=steps)
        lower, estimate, upper = composed.compute_epsilon(delta, delta_error, EPS_ERROR)
    except (ValueError, RuntimeError, FloatingPointError, OverflowError) as exc:
        raise AccountingError(f"prv: Opacus's PRV computation failed: {exc}") from exc
    return float(lower), float(estimate), float(upper)


def history_of(counts: dict[LeafSpec, int]) -> tuple[tuple[float, float, int], ...]:
    """The tally as Opacus's (sample rate, noise multiplier, steps) history."""
    return tuple((s.sample_rate, s.noise_multiplier, k) for s, k in counts.items())


def unsupported_reason(counts: dict[LeafSpec, int]) -> str | None:
    """None when every leaf is a Poisson-subsampled Gaussian (the only PRV Opacus implements)."""
    for spec in counts:
        if not isinstance(spec, PoissonGaussianSpec):
            return f"Opacus implements the PRV of the Poisson-subsampled Gaussian only, not {type(spec).__name__}"
    return None


def add_direction_epsilon(counts: dict[LeafSpec, int], delta: float) -> float:
    """Pessimistic PLD ε of the add direction alone (dp_accounting keeps both directions of the subsampled
    Gaussian; ``_pmf_add`` is the add-direction privacy-loss PMF of the composed distribution)."""
    from dpaudit.accounting.pld import PldAccountant

    pmf_add = getattr(PldAccountant().composed(counts), "_pmf_add", None)
    if pmf_add is None:
        raise AccountingError("prv: this dp_accounting version does not expose the add-direction PLD")
    return float(pmf_add.get_epsilon_for_delta(delta))


class PrvAccountant(Accountant):
    """Opacus PRV accountant (remove direction) combined with the add direction's PLD bound; returns the max."""

    name = "prv"

    def version(self) -> str:
        return f"prv/1 (eps_error {EPS_ERROR:g}, delta_error delta/{1 / DELTA_ERROR_FRACTION:g}; " \
               f"{package_versions('opacus')})"

    def _unsupported_reason(self, counts: dict[LeafSpec, int]) -> str | None:
        return unsupported_reason(counts)

    def _epsilon_for(self, counts: dict[LeafSpec, int], delta: float) -> float:
        if delta == 0:
            raise DeltaUnreachable("prv: the subsampled Gaussian has no finite epsilon at delta = 0")
        return max(prv_bounds(history_of(counts), delta)[2], add_direction_epsilon(counts, delta))
