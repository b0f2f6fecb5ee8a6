"""The sensitivity of Algorithm 3's best validation score (Kusner et al. 2015, Theorem 7 and Corollary 4).

Registered as formula :data:`FORMULA_ID` so ``dpaudit verify`` recomputes it from its public inputs.
Derivation (docs/plugins/kusner-bo.md): for λ, λ' in [λ_min, λ_max] and neighbours V, V' whose fixed-size
evaluation sets of m records (:mod:`dpaudit_plugins.kusner_bo.validation_set`) differ in one record,

  |f_V(ŵ_λ) − f_V'(ŵ_λ')| ≤ |f_V(ŵ_λ) − f_V(ŵ_λ')| + |f_V(ŵ_λ') − f_V'(ŵ_λ')|
                          ≤ L(1/λ_min − 1/λ_max + 2τ/λ_min) + min{g*, 2L(1 + τ)/λ_min}/m.

The first term is Theorem 7's (λ' − λ)L/(λλ') at its maximum, plus 2Lτ/λ_min for the solver: ŵ_λ is within
τ/λ of the exact minimiser when ‖∇O_λ(ŵ_λ)‖ ≤ τ (λ-strong convexity). The second term replaces the paper's
min{g*/m, L/(mλ_min)} by min{g*, 2L‖ŵ‖}/m with ‖ŵ‖ ≤ (1 + τ)/λ_min: two records' margins at one w can be
−‖w‖ and +‖w‖, so their losses differ by up to 2L‖w‖ (the paper's L/(mλ_min) is attained at twice its value,
e.g. hinge training with λ > 1; tests/plugins/kusner_bo/test_algorithm3.py). τ = 0 and L/λ_min ≥ g* give the
paper's value exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import Formula, Neighbouring, Norm, register_formula
from dpaudit.validation import check_count, check_nonnegative, check_positive

FORMULA_ID = "kusner_alg3_best_validation"
SOURCE = ("Kusner, Gardner, Garnett & Weinberger 2015 (ICML), Theorem 7 and Corollary 4 (Algorithm 3), with the "
          "per-record term 2L/λ_min and a solver slack τ (docs/plugins/kusner-bo.md)")


def algorithm3_sensitivity(*, lambda_min: float, lambda_max: float, lipschitz: float, g_max: float, m: int,
                           solver_tolerance: float) -> float:
    """Δ_f = L(1/λ_min − 1/λ_max + 2τ/λ_min) + min{g*, 2L(1 + τ)/λ_min}/m.

    Args:
        lambda_min, lambda_max: the range of the regularisation weights BO may try, 0 < λ_min ≤ λ_max.
        lipschitz: L, the validation loss's Lipschitz constant in w.
        g_max: g*, the validation loss's upper bound (it takes values in [0, g*]).
        m: the public size m₀ of the fixed-size evaluation set (one neighbouring step swaps at most one of its
            records, under add/remove and replace-one alike).
        solver_tolerance: τ, the bound on ‖∇O_λ(ŵ_λ)‖₂ every fitted model met.
    """
    lo, hi = check_positive("lambda_min", lambda_min), check_positive("lambda_max", lambda_max)
    if hi < lo:
        raise InvalidParameter(f"need lambda_min <= lambda_max, got [{lo}, {hi}]")
    L, g = check_positive("lipschitz", lipschitz), check_positive("g_max", g_max)
    m = check_count("m", m)
    tau = check_nonnegative("solver_tolerance", solver_tolerance)
    between_lambdas = L * (1.0 / lo - 1.0 / hi + 2.0 * tau / lo)
    per_record = min(g, 2.0 * L * (1.0 + tau) / lo) / m
    return between_lambdas + per_record


def _compute(inputs: Mapping[str, Any], nb: Neighbouring) -> float:
    # the same value for both relations: the evaluation set has the public size m either way
    return algorithm3_sensitivity(**{k: inputs[k] for k in ("lambda_min", "lambda_max", "lipschitz", "g_max", "m",
                                                             "solver_tolerance")})


FORMULA = register_formula(Formula(FORMULA_ID, "best validation score of Bayesian optimisation over L2-regularised "
                                   "ERM (validation set protected, training set public)", SOURCE, Norm.ABS, _compute))
