"""The ``constant-overhead`` plugin's entry: Ding et al. 2023, Alg. 1, end to end inside an audited session.

Order of operations (docs/plugins/constant-overhead.md):

1. checks: the session protects the Adult training set under add/remove neighbours and lists both public halves
   of the Adult test split;
2. data-independent randomness from ``session.rng``: the partition key, the partition-model seed, the proposer's
   seed and the final model's initialisation seed;
3. the charges, before any record is used (only the public training-set size n is read): first the final training's
   envelope (:func:`~dpaudit.tuning.candidates.grid_envelope` of the grid on n records: largest q,
   smallest σ, most steps), then ONE charge for ``t_max`` AboveThreshold rounds (ϵ each, sensitivity 1/k); both are
   checked together with ``Session.check_affordable`` first, so a session that cannot pay for both refuses before
   charging either;
4. partitions by keyed hash of the record id; the utilities u_s of the grid (Alg. 1 l. 1-11);
5. the elastic loop (l. 12-34), at most ``t_max`` rounds; the realised T is recorded as information;
6. DP-SGD on the full training set with the selected candidate (or the fallback, if nothing passed) through
   :func:`dpaudit.tuning.train_private` under the envelope charge, which dominates the selected candidate's
   run parameter-wise (docs/accounting.md, "Envelope charges"), so the final training's privacy parameters are
   fixed before the selection;
7. accuracy of the final model on the public final-test half.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dpaudit.data.catalog import FINAL_TEST_NAME, TRAIN_NAME, VALIDATION_NAME
from dpaudit.sensitivity import from_formula
from dpaudit.tuning import (
    MECHANISMS,
    TUNING_PROTECTED,
    TUNING_PUBLIC,
    Candidate,
    draw_seed,
    evaluate,
    grid_envelope,
    require_data,
    seeded_model,
    train_private,
    tuning_data,
)
from dpaudit_plugins.constant_overhead.config import ConstantOverheadConfig
from dpaudit_plugins.constant_overhead.formulas import FORMULA_ID
from dpaudit_plugins.constant_overhead.loop import LoopResult, run_elastic_loop
from dpaudit_plugins.constant_overhead.partition import (
    assign_partitions,
    draw_partition_key,
    key_fingerprint,
    partition_members,
)
from dpaudit_plugins.constant_overhead.partition_training import ValidationScorer, as_float_tensor
from dpaudit_plugins.constant_overhead.proposers import GridProposer, LocalPerturbationProposer
from dpaudit_plugins.constant_overhead.utility import PartitionUtilities

if TYPE_CHECKING:
    from dpaudit.session import Session

PLUGIN_NAME = "constant-overhead"
VERSION = "0.1.0"


def _iteration_info(result: LoopResult[Candidate]) -> list[dict[str, Any]]:
    return [{"t": it.t, "threshold": it.threshold, "batch_size": len(it.batch),
             "passed": None if it.passed is None else it.passed.to_dict(),
             "units_after": it.state.units, "step_after": it.state.step} for it in result.iterations]


def run(session: Session, config: Mapping[str, Any]) -> dict[str, Any]:
    """Select hyperparameters privately (Alg. 1) and train the selected candidate with DP-SGD; public results only.

    Args:
        session: an open add/remove session protecting ``"adult-train"`` with both public test halves listed.
        config: :class:`~dpaudit_plugins.constant_overhead.config.ConstantOverheadConfig` fields.

    Returns:
        The selected hyperparameters, whether the fallback was used, the realised and charged iteration counts,
        the charge sequence numbers, the model digest and the metrics on the public final-test half. No utility
        value (unnoised) is included.

    Raises:
        PluginError: the session does not name the data sets or uses replace-one neighbours.
        BudgetExceeded: the session cannot pay for the final training's envelope or for the tuning rounds
            (nothing is computed).
    """
    cfg = ConstantOverheadConfig.from_mapping(config)
    view = session.for_plugin(PLUGIN_NAME, VERSION)
    require_data(view, protected=TUNING_PROTECTED, public=TUNING_PUBLIC, add_remove=True)

    key = draw_partition_key(view.rng)
    partition_seed, proposer_seed, init_seed = (draw_seed(view.rng) for _ in range(3))
    data = tuning_data(view, cfg.train_rows, cfg.test_rows)
    training_label = f"DP-SGD {cfg.model} on {TRAIN_NAME} with the selected hyperparameters (the grid's envelope)"
    training_event = grid_envelope(cfg.candidates, len(data.y_train), training_label)
    sensitivity = from_formula(FORMULA_ID, view.neighbouring, k=cfg.k)
    rounds_label = f"elastic AboveThreshold over partition-average utilities (Ding et al. 2023, Alg. 1), k={cfg.k}"
    view.check_affordable([training_event, view.above_threshold_rounds_event(
        sensitivity, cfg.epsilon_round, max_queries=cfg.max_batch, rounds=cfg.t_max, label=rounds_label)])
    envelope = view.charge(training_event, mechanism=MECHANISMS["sgd"])
    rounds = view.above_threshold_rounds(sensitivity, cfg.epsilon_round, max_queries=cfg.max_batch,
                                         rounds=cfg.t_max, label=rounds_label)
    view.record_info({
        "charge_seq": rounds.charge.seq, "training_charge_seq": envelope.seq, "t_max": cfg.t_max,
        "epsilon_round": cfg.epsilon_round, "k": cfg.k,
        "u0": cfg.u0, "granularity": cfg.granularity, "partition_training": cfg.partition_training,
        "proposer": cfg.proposer, "max_batch": cfg.max_batch, "candidates": [c.to_dict() for c in cfg.candidates],
        "fallback": cfg.fallback_candidate.to_dict(), "partition_key_sha256": key_fingerprint(key),
        "validation_data": VALIDATION_NAME, "final_test_data": FINAL_TEST_NAME,
    })

    X_test, y_test = data.X_test, data.y_test
    V_X, V_y = as_float_tensor(data.X_val), as_float_tensor(data.y_val)
    n_features = data.X_train.shape[1]
    members = partition_members(assign_partitions(key, data.record_ids, cfg.k), data.record_ids, cfg.k)

    score = ValidationScorer(mode=cfg.partition_training, model_kind=cfg.model, hidden=cfg.hidden,
                             n_features=n_features, X_val=V_X, y_val=V_y)
    utilities = PartitionUtilities(data.X_train, data.y_train, members, score, partition_seed)
    with cfg.parallel.executor() as executor:  # Alg. 1 l. 2-11, before the loop; k·|S| independent models
        utilities.precompute(cfg.candidates, executor)
    proposer = (GridProposer(cfg.candidates) if cfg.proposer == "grid" else
                LocalPerturbationProposer(cfg.candidates, seed=proposer_seed, batch_size=cfg.proposer_batch,
                                          scale=cfg.proposer_scale))
    result = run_elastic_loop(proposer, utilities, rounds.next_round, u0=cfg.u0, g=cfg.granularity,
                              t_max=cfg.t_max, max_batch=cfg.max_batch)
    chosen = result.selected if result.selected is not None else cfg.fallback_candidate
    view.record_info({
        "realised_iterations": result.realised_iterations, "charged_iterations": cfg.t_max,
        "stopped_by": result.stopped_by, "selected": chosen.to_dict(), "fallback_used": result.selected is None,
        "iterations": _iteration_info(result), "utilities_computed": utilities.computed(),
        "note": "information only: the charge covers t_max rounds whatever the realised count",
    })

    model = seeded_model(cfg.model, n_features, cfg.hidden, init_seed)
    trained = train_private(
        view, model, data.X_train, data.y_train, optimizer="sgd", lr=chosen.lr, epochs=chosen.epochs,
        batch_size=chosen.batch_size, max_grad_norm=chosen.max_grad_norm, noise_multiplier=chosen.noise_multiplier,
        label=training_label, public_eval=(X_test, y_test), charge=envelope)
    metrics = evaluate(trained.model, X_test, y_test, view.device)
    return {
        "selected": chosen.to_dict(),
        "fallback_used": result.selected is None,
        "realised_iterations": result.realised_iterations,
        "charged_iterations": cfg.t_max,
        "stopped_by": result.stopped_by,
        "tuning_charge_seq": rounds.charge.seq,
        "training_charge_seq": trained.charge_seq,
        "utilities_computed": utilities.computed(),
        "model_sha256": trained.model_sha256,
        "validation_data": VALIDATION_NAME,
        "public_data": FINAL_TEST_NAME,
        **metrics,
    }
