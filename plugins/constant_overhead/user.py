"""``constant-overhead`` over the user's trainer and objective (``dpaudit.tune(method="constant-overhead", ...)``).

The selection of :func:`dpaudit_plugins.constant_overhead.plugin.run` (Ding, Wu, Xu & Pan 2023, Alg. 1) with the
user's pieces: k record-keyed partitions (:mod:`~dpaudit_plugins.constant_overhead.partition`, keyed by the
user's record ids), each setting's partition models trained by the user's ``train`` in ``partition`` mode (Alg. 1
l. 5 "Train": unwrapped, seeded, never released), the elastic AboveThreshold loop charged for ``t_max`` rounds up
front, then the selected setting trained through ``trial.make_private`` under the settings' envelope, charged
before any data is used.

Sensitivity. The user's objective v has a declared range [lo, hi]; each partition's term is
u_i = clip((v_i − lo)/(hi − lo), 0, 1) (or clip((hi − v_i)/(hi − lo), 0, 1) when minimising), so u_i ∈ [0, 1] and
depends only on partition i's records (and public data, the setting, a public seed). The aggregate
u = (1/k) Σ u_i therefore has sensitivity 1/k under add/remove (Ding et al. Lemma 2; formula
``partition_average_utility``): the declared range only rescales, it does not enter Δ. A value outside the range is
clipped, never trusted; NaN counts as 0, the worst value (a fixed rule: a refusal would publish that a
partition's model diverged). u₀ and g live on the same unit scale.

Independence. Both halves need the trials to be independent: u_i may depend on partition i alone (else the
sensitivity 1/k fails), and the final run, covered by one envelope of DP-SGD, must not start from a partition
model (trained without clipping or noise). Partition-mode ``make_private`` snapshots the module and optimizer it is
handed and :meth:`~dpaudit.tuning.user.Trial.restore` puts them back once the utility is read, so a model created
outside ``train`` and shared across calls starts every partition model and the final run from its state before
tuning; the run's :class:`~dpaudit.tuning.user.TrialHistory` refuses a trial that starts from a tensor an earlier
trial trained (a warm start through a saved ``state_dict``, loaded before ``trial.make_private`` or after it: the
check runs again at the trial's first optimizer step, and later steps check tensors changed between steps); the
final run's cover pays for one DP-SGD run. What
cannot be checked (state kept elsewhere by ``train``) is the conditional assumption
``independent-partition-models`` (:data:`~dpaudit.tuning.user.INDEPENDENT_PARTITION_MODELS`), listed with the
envelope and the rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from torch import nn
from torch.utils.data import Subset

from dpaudit.errors import InvalidParameter
from dpaudit.sensitivity import from_formula
from dpaudit.session import Session
from dpaudit.tuning import draw_seed, envelope_event
from dpaudit.tuning.user import (
    INDEPENDENT_PARTITION_MODELS,
    CoveredView,
    Objective,
    Setting,
    Trial,
    TrialHistory,
    run_trial,
    seeded,
    setting_event,
)
from dpaudit.validation import check_count
from dpaudit_plugins.constant_overhead.formulas import FORMULA_ID
from dpaudit_plugins.constant_overhead.loop import run_elastic_loop
from dpaudit_plugins.constant_overhead.partition import (
    assign_partitions,
    draw_partition_key,
    key_fingerprint,
    partition_members,
)
from dpaudit_plugins.constant_overhead.plugin import PLUGIN_NAME, VERSION
from dpaudit_plugins.constant_overhead.proposers import GridProposer
from dpaudit_plugins.constant_overhead.utility import PartitionUtilities


def tune_user(session: Session, settings: Sequence[Setting], train: Callable[[Trial], nn.Module],
              objective: Objective, *, dataset: Any, record_ids: Any, k: int, epsilon_round: float, t_max: int,
              u0: float, granularity: float, fallback: int, grad_sample_mode: str,
              assumptions: tuple[Any, ...]) -> dict[str, Any]:
    """Select privately (Alg. 1 with the grid proposer) and train the selected setting (module docstring).

    Raises:
        InvalidParameter: record ids that are not one unique non-negative integer per record, a bad parameter.
        BudgetExceeded: the session cannot pay for the envelope and the rounds (nothing is computed).
        PluginError: a trial that continues an earlier one, or whose objects cannot be restored
            (:class:`~dpaudit.tuning.user.TrialHistory`, :meth:`~dpaudit.tuning.user.Trial.restore`).
    """
    n = len(dataset)
    ids = np.asarray(record_ids)
    if ids.shape != (n,):
        raise InvalidParameter(f"record_ids must hold one id per training record ({n}), got shape {ids.shape}")
    check_count("k", k)
    if not (isinstance(fallback, int) and 0 <= fallback < len(settings)):
        raise InvalidParameter(f"fallback must index the settings (0..{len(settings) - 1}), got {fallback!r}")
    view = session.for_plugin(PLUGIN_NAME, VERSION)
    assumptions = (*assumptions, INDEPENDENT_PARTITION_MODELS)
    key = draw_partition_key(view.rng)
    partition_seed, init_seed = draw_seed(view.rng), draw_seed(view.rng)
    training_label = f"DP-SGD ({grad_sample_mode}) user model with the selected setting (the settings' envelope)"
    training_event = envelope_event([setting_event(s.params, n, training_label, assumptions) for s in settings],
                                    training_label)
    sensitivity = from_formula(FORMULA_ID, view.neighbouring, assumptions=(INDEPENDENT_PARTITION_MODELS,), k=k)
    rounds_label = f"elastic AboveThreshold over partition-average objectives (Ding et al. 2023, Alg. 1), k={k}"
    view.check_affordable([training_event, view.above_threshold_rounds_event(
        sensitivity, epsilon_round, max_queries=len(settings), rounds=t_max, label=rounds_label)])
    envelope = view.charge(training_event, mechanism="dp-sgd")
    rounds = view.above_threshold_rounds(sensitivity, epsilon_round, max_queries=len(settings), rounds=t_max,
                                         label=rounds_label)
    view.record_info({"charge_seq": rounds.charge.seq, "training_charge_seq": envelope.seq, "t_max": t_max,
                      "epsilon_round": epsilon_round, "k": k, "u0": u0, "granularity": granularity,
                      "objective": objective.to_dict(), "fallback": settings[fallback].to_dict(),
                      "partition_key_sha256": key_fingerprint(key)})
    members = partition_members(assign_partitions(key, ids, k), ids, k)
    history = TrialHistory("trial", shared=True)  # partition objects are restored, so sharing them is sound

    def partition_utility(rows: np.ndarray, _: np.ndarray, setting: Setting, seed: int) -> float:
        trial = Trial(params=setting.params, dataset=Subset(dataset, rows.tolist()), device=session.device,
                      mode="partition", grad_sample_mode=grad_sample_mode, seed=seed, history=history)
        try:
            with seeded(seed):
                model, _ = run_trial(train, trial)
            return objective.utility(objective.value(model))
        finally:
            trial.restore()  # the user's objects as they came: no partition's training outlives its utility

    rows = np.arange(n)
    utilities = PartitionUtilities(rows, rows, members, partition_utility, partition_seed)
    for setting in settings:  # Alg. 1 l. 2-11, before the loop
        utilities(setting)
    result = run_elastic_loop(GridProposer(settings), utilities, rounds.next_round, u0=u0, g=granularity,
                              t_max=t_max, max_batch=len(settings))
    chosen = result.selected if result.selected is not None else settings[fallback]
    view.record_info({"realised_iterations": result.realised_iterations, "charged_iterations": t_max,
                      "stopped_by": result.stopped_by, "selected": chosen.to_dict(),
                      "fallback_used": result.selected is None,
                      "note": "information only: the charge covers t_max rounds whatever the realised count"})
    trial = Trial(params=chosen.params, dataset=dataset, device=session.device, mode="covered",
                  view=CoveredView(session, PLUGIN_NAME, VERSION, envelope), grad_sample_mode=grad_sample_mode,
                  history=history)
    with seeded(init_seed):
        model, digest = run_trial(train, trial)
    value = objective.value(model)
    view.log_public_metrics({"score": value})
    public = {"method": PLUGIN_NAME, "selected": chosen.to_dict(), "score": value, "model_sha256": digest,
              "fallback_used": result.selected is None, "realised_iterations": result.realised_iterations,
              "charged_iterations": t_max, "tuning_charge_seq": rounds.charge.seq,
              "training_charge_seq": envelope.seq}
    return {"public": public, "model": model}
