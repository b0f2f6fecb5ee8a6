"""A demo-like run for the report tests: every kind of record the demo's ledger holds, in a second."""

from __future__ import annotations

from dpaudit import Session, from_formula
from dpaudit.events import PoissonSubsampledGaussianEvent

#: what the demo-like run releases besides its noisy answers (checked in every format)
MODEL_SHA256 = "fde5be737477d26ad357b9c6c0d5fd62c963f7b506e3f94c8253cabfce948a29"
SELECTED = {"lr": 0.5, "max_grad_norm": 0.5, "noise_multiplier": 1.0}


def run_demo_like(session: Session) -> Session:
    """The demo's shape in a second: a DP-SGD charge with its model, AboveThreshold rounds with their answers, the
    selected hyperparameters as an info record, and a Laplace count. Closes the session."""
    with session as s:
        event = PoissonSubsampledGaussianEvent(
            neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
            sample_rate=0.0079, noise_multiplier=1.0, steps=381, label="DP-SGD logreg | selected hyperparameters")
        training = s.charge(event, plugin="constant-overhead", mechanism="dp-sgd")
        rounds = s.above_threshold_rounds(0.1, 0.5, max_queries=4, rounds=3, label="elastic AboveThreshold",
                                          plugin="constant-overhead")
        for threshold in (0.5, 0.6):
            round_ = rounds.next_round(threshold)
            for value in (0.1, 0.9, 0.2):
                if round_.halted:
                    break
                round_.test(value)
        s.record_info("constant-overhead", {"selected": SELECTED, "realised_iterations": 2})
        s.record_release(training, {"model_sha256": MODEL_SHA256, "n_parameters": 105})
        s.laplace(120.0, sensitivity=1.0, epsilon=0.1, label="count of records")
    return s
