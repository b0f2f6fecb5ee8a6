"""The sparse vector technique example of DPareto (Avent et al. 2020, Sec. 2.2 "Sparse Vector Technique", Alg. 1,
App. B): a two-hyperparameter task whose privacy–utility front can be computed almost exactly on a fine grid.

Algorithm 1 answers m binary queries q_i ∈ {0, 1} (sensitivity Δ = 1) against the threshold T = 1/2 with a total
noise level b and a cap C on the number of positive answers:

    b1 = b / (1 + (2C)^{1/3}),  b2 = b − b1,  ρ ~ Lap(b1);
    for i = 1..m: ν_i ~ Lap(b2); if q_i + ν_i ≥ 1/2 + ρ then w_i = 1, c += 1, and stop once c ≥ C.

**Privacy oracle** (App. B): Alg. 1 is Lyu, Su & Li 2017 (PVLDB), Alg. 7 with ε3 = 0, Δ = 1, T_i = 1/2,
ε1 = 1/b1 and ε2 = 2C/b2, which their Thm. 4 proves (ε1 + ε2, 0)-DP, so

    ε(C, b) = 1/b1 + 2C/b2 = (1 + (2C)^{1/3})(1 + (2C)^{2/3}) / b.

(With k = (2C)^{1/3}: 1/b1 = (1 + k)/b and 2C/b2 = k³(1 + k)/(k b) = k²(1 + k)/b. App. B's middle line writes
(1 + 2C)^{1/3} for (1 + (2C)^{1/3}), a typo; its final line is right.) This is an **upper bound** on the privacy
loss of the idealised, real-valued Alg. 1 for any neighbouring relation under which every query changes by at
most 1 (the factor 2 in ε2 covers queries that move in opposite directions; monotone queries would need only C/b2,
so the bound is not tight for them). ``tests/plugins/dpareto/test_tasks_svt.py`` checks it against the exact output
distribution of small instances (every output, every pair of query vectors), and that the same check refuses the
monotone-query oracle 1/b1 + C/b2. The split b1/b2 is Lyu et al.'s Sec. 4.2 ratio
ε1 : ε2 = 1 : (2C)^{2/3}, which minimises the threshold-plus-query noise for a given ε.

**Utility oracle**: 1 − F1 between the true answer vector and w, averaged over R = 50 random query orders
(Sec. 2.2: m = 100 queries of which exactly 10 are ones). The queries are **synthetic public data**: no protected
record is involved, the ε values are the oracle's (nothing is charged for them), and the Laplace draws come from a
seeded numpy generator (not an exact sampler: this noise protects nothing). The orders and the standard Laplace
draws are fixed by the task's seed and reused at every (C, b) (common random numbers), so the oracle is a
deterministic function of (C, b) and the "exact" front of a grid is reproducible. Everything is vectorised over
points × orders × queries: one (C, b) point costs microseconds (:func:`svt_error`).

Domain (Sec. 3.3): C an integer in [1, 30], b in [10⁻², 10²] on a log scale.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import Neighbouring
from dpaudit.validation import check_count, check_known_keys
from dpaudit_plugins.dpareto.domain import Domain, Parameter
from dpaudit_plugins.dpareto.pareto import pareto_mask
from dpaudit_plugins.dpareto.task import EpsilonOracle, Params, TrialPlan

if TYPE_CHECKING:
    from dpaudit.events import PrivacyEvent
    from dpaudit.plugin_session import PluginSession
    from dpaudit.session import Charge

QUERIES = 100
ONES = 10
THRESHOLD = 0.5
ORDERS = 50
C_RANGE = (1, 30)
B_RANGE = (1e-2, 1e2)
ORACLE = "svt-closed-form"
ORACLE_SOURCE = "Avent et al. 2020 (PoPETs), App. B; Lyu, Su & Li 2017 (PVLDB), Alg. 7 with eps3 = 0, Thm. 4"
#: points evaluated per vectorised chunk (points × orders × queries floats stay near 8 MB)
_CHUNK = 200


def _check_domain(C: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    C_arr, b_arr = np.broadcast_arrays(np.asarray(C, dtype=float), np.asarray(b, dtype=float))
    if not (np.all(np.isfinite(C_arr)) and np.all(C_arr >= 1) and np.all(C_arr == np.round(C_arr))):
        raise InvalidParameter("the SVT cap C must be a whole number >= 1")
    if not (np.all(np.isfinite(b_arr)) and np.all(b_arr > 0)):
        raise InvalidParameter("the SVT noise level b must be finite and > 0")
    return C_arr, b_arr


def svt_budget_split(C: ArrayLike, b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(b1, b2): the threshold's and the queries' Laplace scales (Avent et al. 2020, Alg. 1, l. 3).

    Raises:
        InvalidParameter: C not a whole number ≥ 1 or b not > 0.
    """
    C_arr, b_arr = _check_domain(C, b)
    b1 = b_arr / (1.0 + np.cbrt(2.0 * C_arr))
    return b1, b_arr - b1


def svt_epsilon(C: ArrayLike, b: ArrayLike) -> np.ndarray:
    """The privacy oracle ε(C, b) = (1 + (2C)^{1/3})(1 + (2C)^{2/3}) / b of Alg. 1, pure ε-DP (δ = 0).

    Avent et al. 2020, App. B, from Lyu, Su & Li 2017, Thm. 4 (ε = ε1 + ε2 with ε1 = 1/b1, ε2 = 2C/b2).

    Raises:
        InvalidParameter: C not a whole number ≥ 1 or b not > 0.
    """
    C_arr, b_arr = _check_domain(C, b)
    k = np.cbrt(2.0 * C_arr)
    return (1.0 + k) * (1.0 + k * k) / b_arr


def svt_outputs(answers: np.ndarray, C: np.ndarray, b1: np.ndarray, b2: np.ndarray, threshold_noise: np.ndarray,
                query_noise: np.ndarray) -> np.ndarray:
    """Alg. 1's output vectors w for P points × R runs at once, from standard Laplace draws.

    Args:
        answers: (R, m) true answers in {0, 1}, one query order per run.
        C, b1, b2: (P,) caps and noise scales.
        threshold_noise: (R,) standard Laplace draws (ρ = b1 · draw).
        query_noise: (R, m) standard Laplace draws (ν_i = b2 · draw).

    Returns:
        (P, R, m) boolean w: the first C queries whose noisy answer reaches the noisy threshold (Alg. 1 stops
        after the C-th positive answer, so later queries stay 0).
    """
    above = (answers[None] + b2[:, None, None] * query_noise[None]
             >= THRESHOLD + b1[:, None, None] * threshold_noise[None, :, None])
    return above & (np.cumsum(above, axis=2) <= C[:, None, None])


def f1_scores(truth: np.ndarray, w: np.ndarray) -> np.ndarray:
    """F1 = 2TP / (2TP + FP + FN) of the predicted support ``w`` against ``truth`` along the last axis.

    0 where both are empty (no true one and nothing reported cannot occur in the task: it has 10 ones).
    """
    tp = np.sum(truth & w, axis=-1)
    denominator = np.sum(truth, axis=-1) + np.sum(w, axis=-1)  # 2TP + FP + FN
    return np.divide(2.0 * tp, denominator, out=np.zeros(np.shape(tp)), where=denominator > 0)


@dataclass(frozen=True)
class SVTTask:
    """The SVT example as a DPareto task (:class:`~dpaudit_plugins.dpareto.task.Task`): m synthetic binary queries,
    ``ones`` of them 1, utility averaged over R random orders.

    The trials touch no protected data (the queries are synthetic and public), so a trial charges nothing and its ε
    is the closed-form oracle's (:func:`svt_epsilon`, pure ε-DP, recorded with δ = 0).

    Attributes:
        queries: m.
        ones: how many queries answer 1.
        orders: R, the random query orders the utility averages over.
        seed: fixes the orders and the standard Laplace draws (common random numbers across points): the utility
            oracle is a fixed function of (C, b), so the trial seed of :meth:`evaluate` is not used.
    """

    queries: int = QUERIES
    ones: int = ONES
    orders: int = ORDERS
    seed: int = 0

    name: ClassVar[str] = "svt"
    domain: ClassVar[Domain] = Domain((Parameter("C", C_RANGE[0], C_RANGE[1], integer=True),
                                       Parameter("b", B_RANGE[0], B_RANGE[1], scale="log")))
    protected: ClassVar[tuple[str, ...]] = ()
    public: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        check_count("queries", self.queries)
        check_count("orders", self.orders)
        check_count("seed", self.seed, minimum=0)
        if not 1 <= check_count("ones", self.ones) <= self.queries:
            raise InvalidParameter(f"ones must be in [1, {self.queries}], got {self.ones}")

    def epsilon(self, C: ArrayLike, b: ArrayLike) -> np.ndarray:
        """The privacy oracle at each (C, b) (:func:`svt_epsilon`)."""
        return svt_epsilon(C, b)

    def error(self, C: ArrayLike, b: ArrayLike) -> np.ndarray:
        """The utility oracle 1 − mean F1 over the R orders at each (C, b), vectorised."""
        C_arr, b_arr = _check_domain(C, b)
        shape = C_arr.shape
        C_flat, b_flat = C_arr.reshape(-1), b_arr.reshape(-1)
        b1, b2 = svt_budget_split(C_flat, b_flat)
        truth, rho, nu = _draws(self)
        out = np.empty(len(C_flat))
        for start in range(0, len(C_flat), _CHUNK):
            part = slice(start, start + _CHUNK)
            w = svt_outputs(truth, C_flat[part], b1[part], b2[part], rho, nu)
            out[part] = 1.0 - f1_scores(truth[None], w).mean(axis=1)
        return out.reshape(shape)

    def _plan(self, C: float, b: float, view: PluginSession) -> TrialPlan:
        oracle = EpsilonOracle(accountant=ORACLE, version=ORACLE_SOURCE, sampling="none",
                               neighbouring=Neighbouring(view.neighbouring).value, delta=0.0)
        return TrialPlan(events=(), epsilon=float(svt_epsilon(C, b)), oracle=oracle)

    def plan(self, params: Params, view: PluginSession) -> TrialPlan:
        """No event (nothing protected is touched); ε from the closed-form oracle."""
        return self._plan(params["C"], params["b"], view)

    def worst_case(self, view: PluginSession) -> tuple[PrivacyEvent, ...]:
        """No event: no trial charges anything."""
        return ()

    def evaluate(self, params: Params, charges: tuple[Charge, ...], view: PluginSession, seed: int) -> float:
        """1 − mean F1 at (C, b) (:meth:`error`); no charge to claim, nothing released but the number."""
        return self.compute(params, seed)

    def prepare(self, params: Params, charges: tuple[Charge, ...], view: PluginSession) -> Params:
        """Parallel trials (:class:`~dpaudit_plugins.dpareto.trials.SplitTask`): the worker needs only the point."""
        return params

    def compute(self, params: Params, seed: int) -> float:
        """:meth:`evaluate`'s number, in a worker."""
        return float(self.error(params["C"], params["b"]))

    def finish(self, params: Params, charges: tuple[Charge, ...], view: PluginSession, computed: float) -> float:
        """Nothing to record: the error is the worker's number."""
        return computed

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "queries": self.queries, "ones": self.ones, "threshold": THRESHOLD,
                "orders": self.orders, "seed": self.seed, "data": "synthetic public queries (nothing protected)",
                "privacy_oracle": ORACLE, "oracle_source": ORACLE_SOURCE, "delta": 0.0}


def build(config: Mapping[str, Any]) -> SVTTask:
    """The SVT task from its configuration section: optional ``queries``, ``ones``, ``orders``, ``seed``.

    Raises:
        InvalidParameter: unknown keys or bad values.
    """
    check_known_keys(config, ("queries", "ones", "orders", "seed"), "the dpareto svt task")
    return SVTTask(**dict(config))


@lru_cache(maxsize=8)
def _draws(task: SVTTask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(truth (R, m) bool, standard Laplace ρ draws (R,), ν draws (R, m)), read-only, fixed by ``task.seed``."""
    rng = np.random.default_rng(task.seed)
    base = np.zeros(task.queries, dtype=bool)
    base[:task.ones] = True
    truth = np.stack([rng.permutation(base) for _ in range(task.orders)])
    rho = rng.laplace(size=task.orders)
    nu = rng.laplace(size=(task.orders, task.queries))
    for a in (truth, rho, nu):
        a.setflags(write=False)
    return truth, rho, nu


def svt_error(C: ArrayLike, b: ArrayLike, *, seed: int = 0) -> np.ndarray:
    """1 − mean F1 of the paper's setting (m = 100, 10 ones, 50 orders) at each (C, b) (:meth:`SVTTask.error`)."""
    return SVTTask(seed=seed).error(C, b)


@dataclass(frozen=True)
class GridFront:
    """The oracles on a full grid and its non-dominated points (the "exact" front, Avent et al. 2020, Fig. 2).

    Attributes:
        C, b: (G,) the grid's hyperparameters.
        epsilon, error: (G,) the oracles' values.
        front: (G,) True on the points no other grid point dominates (minimising both ε and error).
    """

    C: np.ndarray
    b: np.ndarray
    epsilon: np.ndarray
    error: np.ndarray
    front: np.ndarray


def exact_front(task: SVTTask, *, b_points: int = 2000) -> GridFront:
    """Evaluate every integer C in [1, 30] × ``b_points`` log-spaced b in [10⁻², 10²]; mark the non-dominated ones.

    The front of a grid is a lower bound on the true front's hypervolume only up to the grid's resolution in b
    (ε is continuous in b); 2000 points per C put neighbouring b within 0.5 % of each other.
    """
    C_grid, b_grid = np.meshgrid(np.arange(C_RANGE[0], C_RANGE[1] + 1, dtype=float),
                                 np.geomspace(B_RANGE[0], B_RANGE[1], check_count("b_points", b_points, minimum=2)),
                                 indexing="ij")
    C_flat, b_flat = C_grid.reshape(-1), b_grid.reshape(-1)
    eps, err = task.epsilon(C_flat, b_flat), task.error(C_flat, b_flat)
    return GridFront(C=C_flat, b=b_flat, epsilon=eps, error=err, front=pareto_mask(np.column_stack([eps, err])))
