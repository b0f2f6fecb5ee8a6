"""The price of adaptivity: the Rényi filter's ε against the tightest fixed-parameter bound, on the same charges.

For each workload the charged events are rebuilt from public configuration only (nothing is trained):

* the demo (``dpaudit demo``): the constant-overhead grid's DP-SGD envelope and the T_max AboveThreshold rounds
  (dpaudit/demo.py; the training-set size is public there, so no noisy count);
* the side-by-side experiment (experiments/side_by_side.py, its defaults): constant-overhead (envelope + T_max
  rounds at the bisected ϵ per round), randtune (geometric repeat-and-select of the envelope at the bisected γ),
  naive (the 40 candidates with σ times the fitted factor).

Columns: the tightest accountant's ε at δ_B (what a fixed-parameter session certifies) and which member attained
it; RDP on the whole grid; RDP on the filter's orders only, δ unsplit (the same orders, fixed parameters); and the
filter's ε: the smallest ε_B under which the Rényi filter (default orders, δ_B split over them) admits the same
charges (:func:`dpaudit.accounting.filters.filter_epsilon`). An adaptive session needs a budget at least that.

Run: ``.venv/bin/python experiments/adaptive_price.py`` (about 8 s on 2 CPU cores, mostly the side-by-side knobs'
bisections); prints the markdown table of docs/accounting.md ("Adaptive parameters: the Rényi filter").
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence

import numpy as np
from side_by_side import Setup, constant_overhead_epsilon_round, dataset_size, default_grid, randtune_gamma

from dpaudit import Session
from dpaudit.accounting import get_accountant
from dpaudit.accounting.charges import tally
from dpaudit.accounting.filters import RenyiFilter, charge_rdp, filter_epsilon
from dpaudit.accounting.rdp import ORDERS, composed_rdp, rdp_to_epsilon
from dpaudit.data.adult import TRAIN_NAME
from dpaudit.demo import BUDGET, demo_config
from dpaudit.events import PrivacyEvent, RepeatAndSelectEvent, compose
from dpaudit.sensitivity import from_formula
from dpaudit.tuning import candidate_event, grid_envelope
from dpaudit_plugins.constant_overhead import FORMULA_ID
from dpaudit_plugins.constant_overhead.config import ConstantOverheadConfig
from dpaudit_plugins.naive.plugin import fitted_candidates
from dpaudit_plugins.randtune import dominating_event


def _dry_session(epsilon: float, delta: float, store: str) -> Session:
    return Session(epsilon, delta, protected=(TRAIN_NAME,), mirror=False, store=store)


def demo_events(n: int, store: str) -> list[PrivacyEvent]:
    """The demo's charges: envelope, AboveThreshold rounds (as the constant-overhead plugin charges them)."""
    cfg = ConstantOverheadConfig.from_mapping(demo_config())
    s = _dry_session(*BUDGET, store)
    events = [grid_envelope(cfg.candidates, n, "envelope"),
              s.above_threshold_rounds_event(from_formula(FORMULA_ID, "add_remove", k=cfg.k), cfg.epsilon_round,
                                             max_queries=cfg.max_batch, rounds=cfg.t_max)]
    s.close()
    return events


def side_by_side_events(setup: Setup, n: int, store: str) -> dict[str, list[PrivacyEvent]]:
    """Each method's charges with the knobs side_by_side.py fixes before its sessions open."""
    s = _dry_session(setup.epsilon, setup.delta, store)
    rounds = s.above_threshold_rounds_event(from_formula(FORMULA_ID, "add_remove", k=setup.k),
                                            constant_overhead_epsilon_round(setup, n), max_queries=len(setup.grid),
                                            rounds=setup.t_max)
    fitted, _ = fitted_candidates(s.for_plugin("naive", "experiment"), setup.grid, n)
    s.close()
    base = dominating_event([candidate_event(c, n, "one repetition") for c in setup.grid], "one repetition")
    return {
        "constant-overhead": [grid_envelope(setup.grid, n, "envelope"), rounds],
        "randtune": [RepeatAndSelectEvent(event=base, distribution="geometric", gamma=randtune_gamma(setup, n),
                                          label="")],
        "naive": [candidate_event(c, n, f"candidate {i}") for i, c in enumerate(fitted)],
    }


def price_row(name: str, events: Sequence[PrivacyEvent], epsilon_budget: float, delta: float) -> dict[str, object]:
    """The fixed-parameter bounds and the filter's ε for one workload."""
    composed = compose(list(events))
    tight, source = get_accountant("tightest").epsilon_with_source(composed, delta)
    rdp = get_accountant("rdp").epsilon(composed, delta)
    flt = RenyiFilter(epsilon_budget, delta)
    _, counts = tally(composed)
    on_orders = rdp_to_epsilon(np.array(flt.orders), *composed_rdp(counts, np.isin(np.array(ORDERS), flt.orders)),
                               delta)[0]
    curves = [charge_rdp(e, flt.orders) for e in events]
    needed = filter_epsilon(flt, sum(c[0] for c in curves), sum(c[1] for c in curves))
    return {"workload": name, "delta": delta, "tightest": tight, "attained_by": source, "rdp": rdp,
            "rdp_filter_orders": on_orders, "filter": needed, "ratio": needed / tight}


def main() -> None:
    with tempfile.TemporaryDirectory() as store:
        setup = Setup(default_grid(), 2.5, 1e-5, None, None, 20, 6)
        n = dataset_size(None)
        rows = [price_row("demo (budget 5, δ 1e-5)", demo_events(n, store), *BUDGET)]
        for method, events in side_by_side_events(setup, n, store).items():
            rows.append(price_row(f"side-by-side {method} (budget 2.5, δ 1e-5)", events, setup.epsilon, setup.delta))
    print("| workload | tightest fixed ε (attained by) | RDP fixed | RDP fixed, filter's orders | Rényi filter ε | "
          "filter / tightest |\n| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['workload']} | {r['tightest']:.3f} ({r['attained_by']}) | {r['rdp']:.3f} | "
              f"{r['rdp_filter_orders']:.3f} | {r['filter']:.3f} | {r['ratio']:.2f} |")


if __name__ == "__main__":
    main()
