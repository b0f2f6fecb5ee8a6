"""The tuning kit: what the DP-SGD tuning plugins share, so that no plugin imports another.

* :mod:`~dpaudit.tuning.training`: DP-SGD / DP-Adam through Opacus, charged (or covered) before the first step;
* :mod:`~dpaudit.tuning.candidates`: the candidate type, grid parsing, candidate and envelope events;
* :mod:`~dpaudit.tuning.data`: the tuning data through ``Session.data`` and the one protected-data check;
* :mod:`~dpaudit.tuning.models`, :mod:`~dpaudit.tuning.seeds`: seeded model construction, the one seed range;
* :mod:`~dpaudit.tuning.options`: the shared options with one set of defaults;
* :mod:`~dpaudit.tuning.space`, :mod:`~dpaudit.tuning.user`, :mod:`~dpaudit.tuning.networks`: search spaces, the
  user's trainer and objective (``dpaudit.tune``), the study file's built-in models (imported on use).

Every function that charges or records takes a plugin's view of the session
(:meth:`dpaudit.session.Session.for_plugin`), so everything is attributed to the calling plugin.
"""

from dpaudit.tuning.candidates import (
    SEEDS_PER_TRAINING,
    Candidate,
    accuracy,
    candidate_event,
    envelope_event,
    grid_envelope,
    parse_candidates,
    train_candidate,
)
from dpaudit.tuning.data import TUNING_PROTECTED, TUNING_PUBLIC, TuningData, require_data, tuning_data
from dpaudit.tuning.models import MODEL_KINDS, build_model, seeded_model
from dpaudit.tuning.options import DEFAULTS, OPTION_KEYS, ModelOptions
from dpaudit.tuning.seeds import SEED_RANGE, draw_seed
from dpaudit.tuning.training import (
    MECHANISMS,
    OPTIMIZERS,
    CappedDPOptimizer,
    SamplingPlan,
    TrainResult,
    check_covered,
    dp_sgd_event,
    evaluate,
    plan_from_loader,
    state_dict_sha256,
    train_private,
    train_private_loader,
)

__all__ = [
    "DEFAULTS", "MECHANISMS", "MODEL_KINDS", "OPTIMIZERS", "OPTION_KEYS", "SEED_RANGE", "SEEDS_PER_TRAINING",
    "TUNING_PROTECTED",
    "TUNING_PUBLIC", "Candidate", "CappedDPOptimizer", "ModelOptions", "SamplingPlan", "TrainResult", "TuningData",
    "accuracy", "build_model", "candidate_event", "check_covered", "dp_sgd_event", "draw_seed", "envelope_event",
    "evaluate", "grid_envelope", "parse_candidates", "plan_from_loader", "require_data",
    "seeded_model", "state_dict_sha256", "train_candidate", "train_private", "train_private_loader", "tuning_data",
]
