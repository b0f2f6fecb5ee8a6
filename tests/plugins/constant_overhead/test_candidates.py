"""Candidates and the configuration: the default grid, the candidate-set checks, mapping round trips."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.errors import InvalidParameter
from dpaudit.tuning import Candidate
from dpaudit_plugins.constant_overhead import PLUGIN
from dpaudit_plugins.constant_overhead.candidates import check_candidate_set, default_grid, perturb
from dpaudit_plugins.constant_overhead.config import ConstantOverheadConfig


def _privacy_fields(c: Candidate) -> tuple[float, int, int]:
    return c.noise_multiplier, c.epochs, c.batch_size


def test_default_grid_has_at_least_20_distinct_candidates():
    grid = default_grid()
    assert len(grid) >= 20 and len(set(grid)) == len(grid)
    assert check_candidate_set(grid) == grid


def test_mixed_privacy_parameters_are_accepted_but_empty_or_duplicate_sets_are_not():
    """(σ, epochs, B) may vary: the final training is charged as the grid's envelope, fixed in advance."""
    mixed = (Candidate(1.0, 1.0, 1.0, 1, 64), Candidate(1.0, 1.0, 2.0, 2, 32))
    assert check_candidate_set(mixed) == mixed
    for bad in ([], [Candidate(1.0, 1.0, 1.0, 1, 64)] * 2, ["x"]):
        with pytest.raises(InvalidParameter):
            check_candidate_set(bad)


def test_candidate_mapping_round_trip_and_bad_values():
    c = Candidate(lr=0.5, max_grad_norm=2.0, noise_multiplier=1.5, epochs=2, batch_size=64)
    assert Candidate.from_mapping(c.to_dict()) == c
    for bad in ({"lr": 1.0}, {**c.to_dict(), "momentum": 0.9}, {**c.to_dict(), "lr": -1.0},
                {**c.to_dict(), "epochs": 0}, "lr=1"):
        with pytest.raises(InvalidParameter):
            Candidate.from_mapping(bad)


def test_perturb_moves_only_lr_and_clip_norm():
    c = Candidate(lr=1.0, max_grad_norm=1.0, noise_multiplier=1.3, epochs=2, batch_size=32)
    gen = np.random.default_rng(0)
    moved = [perturb(c, gen, 0.5) for _ in range(20)]
    assert all(_privacy_fields(m) == _privacy_fields(c) for m in moved)
    assert len({(m.lr, m.max_grad_norm) for m in moved}) == 20


def test_config_from_mapping_and_refusals():
    cfg = ConstantOverheadConfig.from_mapping(PLUGIN.smoke_config)
    assert len(cfg.candidates) == 3 and cfg.max_batch == 3 and cfg.fallback_candidate == cfg.candidates[0]
    assert ConstantOverheadConfig.from_mapping({**PLUGIN.smoke_config, "proposer": "local"}).max_batch == 8
    assert len(ConstantOverheadConfig().candidates) >= 20
    for bad in ({"k": 0}, {"t_max": 0}, {"epsilon_round": 0.0}, {"u0": 1.0}, {"granularity": 1.0},
                {"partition_training": "dp"}, {"proposer": "bo"}, {"fallback": 3}, {"fallback": True},
                {"unknown": 1}, {"candidates": {"lr": 1.0}}, {"test_rows": 1}, {"model": "cnn"}):
        with pytest.raises(InvalidParameter):
            ConstantOverheadConfig.from_mapping({**PLUGIN.smoke_config, **bad})
