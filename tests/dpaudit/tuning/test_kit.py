"""The tuning kit's shared pieces: one set of option defaults that every tuning plugin uses, seeded models, the one
seed range, the protected-data check and the tuning data read through the session."""

from __future__ import annotations

import pytest
import torch

from dpaudit.data.catalog import FINAL_TEST_NAME, TRAIN_NAME, VALIDATION_NAME
from dpaudit.errors import InvalidParameter, PluginError
from dpaudit.ledger import read_records
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.tuning import (
    DEFAULTS,
    SEED_RANGE,
    TUNING_PUBLIC,
    ModelOptions,
    draw_seed,
    require_data,
    seeded_model,
    tuning_data,
)
from dpaudit_plugins.constant_overhead.config import ConstantOverheadConfig
from dpaudit_plugins.naive.config import NaiveConfig
from dpaudit_plugins.opacus_training.config import TrainingConfig
from dpaudit_plugins.randtune.config import RandTuneConfig

GRID = [{"lr": 1.0, "max_grad_norm": 1.0, "noise_multiplier": 1.0, "epochs": 1, "batch_size": 8}]


def test_every_tuning_plugin_parses_the_shared_options_with_the_same_defaults():
    """Attack: a plugin with its own default (constant-overhead used hidden=16, the others 64) makes the same
    configuration mean different models in different plugins."""
    naive = NaiveConfig.from_mapping({"candidates": GRID}).options
    randtune = RandTuneConfig.from_mapping({"candidates": GRID, "gamma": 0.5}).options
    overhead, training = ConstantOverheadConfig(), TrainingConfig()
    assert naive == randtune == DEFAULTS
    for cfg in (overhead, training):
        assert (cfg.model, cfg.hidden, cfg.train_rows, cfg.test_rows) == (
            DEFAULTS.model, DEFAULTS.hidden, DEFAULTS.train_rows, DEFAULTS.test_rows)
    assert training.optimizer == DEFAULTS.optimizer
    given = {"model": "mlp", "hidden": 8, "optimizer": "adam", "train_rows": 100, "test_rows": 10}
    assert NaiveConfig.from_mapping({"candidates": GRID, **given}).options == ModelOptions(**given)


@pytest.mark.parametrize("bad", [{"model": "cnn"}, {"optimizer": "rmsprop"}, {"hidden": 0}, {"hidden": True},
                                 {"train_rows": 0}, {"test_rows": 1}])
def test_bad_options_are_refused_in_every_plugin(bad):
    with pytest.raises(InvalidParameter):
        ModelOptions.from_mapping(bad)
    with pytest.raises(InvalidParameter):
        NaiveConfig.from_mapping({"candidates": GRID, **bad})
    with pytest.raises(InvalidParameter):
        RandTuneConfig.from_mapping({"candidates": GRID, "gamma": 0.5, **bad})


def test_seeded_models_depend_on_the_seed_alone_and_leave_torch_alone():
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    a, b, c = (seeded_model("mlp", 5, 3, seed) for seed in (7, 7, 8))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


def test_seeds_come_from_the_one_range():
    rng = SeededRandom(0)
    seeds = [draw_seed(rng) for _ in range(200)]
    assert all(0 <= s < SEED_RANGE for s in seeds) and max(seeds) > SEED_RANGE // 4 and SEED_RANGE == 2**63


def test_the_protected_data_check(make_session):
    s = make_session(protected=("other",), public=TUNING_PUBLIC)
    view = s.for_plugin("p", "1")
    with pytest.raises(PluginError, match="protects \\['adult-train'\\]"):
        require_data(view, protected=(TRAIN_NAME,))
    with pytest.raises(PluginError, match="uses public data"):
        require_data(view, public=("adult-test",))
    require_data(view, public=TUNING_PUBLIC)
    s.close()
    s = make_session(neighbouring="replace_one", public=TUNING_PUBLIC)
    with pytest.raises(PluginError, match="add/remove"):
        require_data(s.for_plugin("p", "1"), protected=(TRAIN_NAME,), add_remove=True)
    s.close()


def test_tuning_data_is_read_through_the_session_and_recorded(make_session):
    s = make_session(public=TUNING_PUBLIC)
    data = tuning_data(s.for_plugin("p", "1"), 300, 21)
    assert (len(data.y_train), len(data.y_val), len(data.y_test)) == (300, 10, 11)
    assert len(data.record_ids) == 300
    records, _ = read_records(s.ledger_path)
    accesses = [r.body["info"]["data_access"] for r in records if r.type == "info" and r.body["plugin"] == "p"]
    assert accesses == [TRAIN_NAME, VALIDATION_NAME, FINAL_TEST_NAME]
    s.close()
    s = make_session(public=())  # the halves undeclared: refused before anything is read
    with pytest.raises(PluginError, match="uses public data"):
        tuning_data(s.for_plugin("p", "1"), 300, 21)
    s.close()
