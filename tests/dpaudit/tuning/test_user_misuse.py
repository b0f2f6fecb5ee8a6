"""A user's ``train`` that breaks the independence a tuning method's guarantee rests on (dpaudit/tuning/user.py and
the plugins' ``user`` modules): constant-overhead puts back the objects a partition model trained, so a model
shared across calls never carries unnoised partition training into another partition or the released run, and a
warm start from a partition model is refused; randtune refuses a repetition that warm-starts from, or shares a
trained tensor with, an earlier one, and a second DP-SGD run under one repetition's cover; weights loaded after
trial.make_private are refused at the first optimizer step (or at the step after an in-place load); partition
models take BatchMemoryManager's virtual steps; naive, where every run is charged and released, accepts warm starts.
Each method lists the conditional assumption it cannot check."""

from __future__ import annotations

import contextlib
import copy
import json

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import dpaudit
from dpaudit.errors import PluginError, UncoveredRelease
from dpaudit.ledger import read_records
from dpaudit.privacy_engine import PrivacyEngine
from dpaudit.tuning.user import TrialHistory
from dpaudit.verify import verify_bundle
from tests.dpaudit.test_tuner import SPACE, N, X, Y, accuracy, fit
from tests.dpaudit.test_tuner import train as _fresh  # the same small task, a new model per call

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")


def _tune(session, method: str, train, **kwargs):
    options = {"randtune": {"gamma": 0.5}, "constant-overhead": {"record_ids": np.arange(N), "k": 3, "t_max": 2},
               "naive": {}}[method]
    return dpaudit.tune(session, method, space=SPACE, train=train, score=accuracy, score_range=(0.0, 1.0),
                        dataset=(X, Y), **{**options, **kwargs})


def _records(session, kind: str) -> list:
    records, problems = read_records(session.ledger_path)
    assert not problems
    return [r for r in records if r.type == kind]


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- constant-overhead: partition models --------------------------------------------------------------------------


def test_constant_overhead_puts_a_shared_model_back_after_each_partition_model(make_session):
    """The reviewer's attack: a model (and a momentum optimizer) made once outside train() was trained without
    clipping or noise on every partition, and the released run continued from it. Now every partition model and
    the final run start from the state it had before tuning."""
    torch.manual_seed(0)
    shared = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(shared.parameters(), lr=0.5, momentum=0.9)
    initial = _state(shared)
    starts = []

    def train(trial):
        starts.append((trial.mode, _same(_state(shared), initial), len(optimizer.state)))
        return fit(trial, shared, optimizer)

    with make_session(20.0, 1e-5, seed=3) as session:
        result = _tune(session, "constant-overhead", train=train)
    assert [mode for mode, _, _ in starts] == ["partition"] * 6 + ["covered"]
    assert all(fresh for _, fresh, _ in starts)  # no partition's training reached a later trial
    assert all(momenta == 0 for _, _, momenta in starts)  # nor its optimizer's momentum
    assert result.model_sha256 in {r.body["output"].get("model_sha256") for r in _records(session, "release")}
    assert "independent-partition-models" in json.dumps([r.body for r in _records(session, "charge")])
    assert verify_bundle(session.run_dir, allow_not_for_release=True).valid


def test_constant_overhead_refuses_a_warm_start_from_a_partition_model(make_session):
    saved: dict[str, torch.Tensor] = {}

    def final_from_partition(trial):
        model = nn.Linear(4, 2)
        if trial.mode == "covered":
            model.load_state_dict(saved)  # continue from a partition model: unnoised training on the data
        model = fit(trial, model)
        if trial.mode == "partition":
            saved.update(_state(model))
        return model

    def across_partitions(trial):
        model = nn.Linear(4, 2)
        if saved:
            model.load_state_dict(saved)  # partition i's model from partition i-1's: sensitivity 1/k fails
        saved.update(_state(fit(trial, model)))
        return model

    for train in (final_from_partition, across_partitions):
        saved.clear()
        with make_session(20.0, 1e-5, seed=3) as session, pytest.raises(PluginError, match="warm start"):
            _tune(session, "constant-overhead", train=train)
        assert "model_sha256" not in json.dumps([r.body for r in _records(session, "release")])  # no model leaves


def test_constant_overhead_partition_model_must_be_the_module_handed_over(make_session):
    shadow = nn.Linear(4, 2)

    def returns_another(trial):
        _fresh(trial)
        return shadow

    with make_session(20.0, 1e-5, seed=3) as session, pytest.raises(PluginError, match="handed to"):
        _tune(session, "constant-overhead", train=returns_another)


def test_constant_overhead_final_cover_pays_for_one_run(make_session):
    def extra_engine(trial):
        if trial.mode == "covered":
            model = nn.Linear(4, 2)
            PrivacyEngine(trial.view).make_private(
                module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
                data_loader=DataLoader(trial.dataset, batch_size=40), epochs=1, noise_multiplier=1.0,
                max_grad_norm=1.0)
        return _fresh(trial)

    with make_session(20.0, 1e-5, seed=3) as session, pytest.raises(UncoveredRelease, match="one DP-SGD run"):
        _tune(session, "constant-overhead", train=extra_engine)


# --- randtune: repetitions ----------------------------------------------------------------------------------------


def _randtune(make_session, train, seed: int = 0):
    """A randtune run that draws K >= 2 repetitions (seed 0, gamma 0.1: K = 2 with a fresh model each)."""
    with make_session(20.0, 1e-5, seed=seed) as session:
        return session, _tune(session, "randtune", train=train, gamma=0.1)


def test_randtune_draws_several_repetitions_with_fresh_models(make_session):
    calls = []

    def counted(trial):
        calls.append(trial)
        return _fresh(trial)

    session, result = _randtune(make_session, counted)
    assert len(calls) >= 2 and result.selected is not None  # the refusals below happen at a second repetition
    assert "independent-repetitions" in json.dumps([r.body for r in _records(session, "charge")])


def test_randtune_refuses_a_warm_start_from_an_earlier_repetition(make_session):
    """The reviewer's attack: each repetition loads the previous one's weights, so the selected model composes
    several repetitions' DP-SGD runs while the charge covers one run per repetition."""
    saved: dict[str, torch.Tensor] = {}
    calls = []

    def warm(trial):
        calls.append(trial)
        model = nn.Linear(4, 2)
        if saved:
            model.load_state_dict(saved)
        model = fit(trial, model)
        saved.update(_state(model._module))
        return model

    with pytest.raises(PluginError, match="warm start"):
        _randtune(make_session, warm)
    assert len(calls) == 2


def test_randtune_refuses_a_warm_start_through_the_optimizer(make_session):
    saved: dict = {}

    def momentum(trial):
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        if saved:
            optimizer.load_state_dict(saved)
        model = fit(trial, model, optimizer)
        saved.clear()
        saved.update(optimizer.state_dict())
        return model

    with pytest.raises(PluginError, match="optimizer starts from"):
        _randtune(make_session, momentum)


def test_randtune_refuses_a_model_kept_across_repetitions(make_session):
    """A module made once and reset to its initial weights in each call: its repetitions' models are one object,
    so a later repetition would retrain the (possibly selected) earlier model after its release."""
    torch.manual_seed(0)
    shared = nn.Linear(4, 2)
    initial = _state(shared)

    def reset(trial):
        shared.load_state_dict(initial)
        return fit(trial, shared)

    with pytest.raises(PluginError, match="holds a tensor an earlier repetition trained"):
        _randtune(make_session, reset)


def test_randtune_accepts_a_shared_frozen_backbone(make_session):
    torch.manual_seed(0)
    backbone = nn.Linear(4, 4).requires_grad_(False)  # public and never trained: sharing it is independence

    def head_only(trial):
        model = nn.Sequential(backbone, nn.Linear(4, 2))
        return fit(trial, model, torch.optim.SGD(model[1].parameters(), lr=trial.params["lr"]))

    session, result = _randtune(make_session, head_only)
    assert result.selected is not None and verify_bundle(session.run_dir, allow_not_for_release=True).valid


@pytest.mark.parametrize("how", ["extra engine", "reset trial"])
def test_randtune_cover_pays_for_one_run_per_repetition(make_session, how):
    """The reviewer's attack: PrivacyEngine(trial.view), or make_private again after resetting trial._called,
    trained further DP-SGD models under one repetition's charge."""
    def extra(trial):
        if how == "extra engine":
            model = nn.Linear(4, 2)
            PrivacyEngine(trial.view).make_private(
                module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
                data_loader=DataLoader(trial.dataset, batch_size=40), epochs=1, noise_multiplier=1.0,
                max_grad_norm=1.0)
            return _fresh(trial)
        _fresh(trial)
        trial._called = False
        return _fresh(trial)

    with make_session(20.0, 1e-5, seed=1) as session, pytest.raises(UncoveredRelease, match="one DP-SGD run"):
        _tune(session, "randtune", train=extra)
    assert len(_records(session, "charge")) == 1 and _records(session, "release") == []


# --- naive: every run charged and released ------------------------------------------------------------------------


def test_naive_accepts_a_warm_start(make_session):
    """Each setting's run is charged and released before the next starts from it: adaptive composition covers it."""
    saved: dict[str, torch.Tensor] = {}

    def warm(trial):
        model = nn.Linear(4, 2)
        if saved:
            model.load_state_dict(saved)
        model = fit(trial, model)
        saved.update(_state(model._module))
        return model

    with make_session(20.0, 1e-5, seed=1) as session:
        result = _tune(session, "naive", train=warm)
    assert len(_records(session, "charge")) == 2 and result.model_sha256 is not None
    assert verify_bundle(session.run_dir, allow_not_for_release=True).valid


# --- the history itself -------------------------------------------------------------------------------------------


def test_history_refuses_copied_weights_but_not_common_initial_values():
    history = TrialHistory("trial", shared=True)
    trained = nn.Linear(3, 2)
    before = history.start(trained, torch.optim.SGD(trained.parameters(), lr=1.0))
    with torch.no_grad():
        trained.weight.add_(1.0)
        trained.bias.zero_()  # trained to all zeros: a value fresh models start from too
    history.finish(before, torch.optim.SGD(trained.parameters(), lr=1.0))
    fresh = nn.Linear(3, 2)
    nn.init.zeros_(fresh.bias)
    history.start(fresh, torch.optim.SGD(fresh.parameters(), lr=1.0))  # accepted
    warm = nn.Linear(3, 2)
    warm.load_state_dict(trained.state_dict())
    with pytest.raises(PluginError, match="warm start"):
        history.start(warm, torch.optim.SGD(warm.parameters(), lr=1.0))


# --- warm starts loaded after trial.make_private --------------------------------------------------------------------


def _loop(model: nn.Module, optimizer, loader, on_step=None) -> None:
    for step, (xb, yb) in enumerate(loader):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
        if on_step is not None:
            on_step(step)


@pytest.mark.parametrize("method", ["constant-overhead", "randtune"])
def test_a_warm_start_loaded_after_make_private_is_refused_at_the_first_step(make_session, method):
    """Reviewer's bypass_warm_after_make_private: the digests were compared only when make_private was called, so
    ``model.load_state_dict(saved)`` one line later passed (constant-overhead: the released run started from an
    unnoised partition model; randtune: the selected model composed several repetitions)."""
    saved: dict[str, torch.Tensor] = {}
    loaded = []

    def train(trial):
        model = nn.Linear(4, 2)
        wrapped, optimizer, loader = trial.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=trial.params["lr"]),
            data_loader=DataLoader(trial.dataset, batch_size=trial.params["batch_size"]))
        if saved and (method == "randtune" or trial.mode == "covered"):
            model.load_state_dict(saved)  # the warm start, after the check at make_private
            loaded.append(_state(model))
        _loop(wrapped, optimizer, loader)
        if method == "randtune" or trial.mode == "partition":
            saved.clear()
            saved.update(_state(model))
        return wrapped

    session = make_session(20.0, 1e-5, seed=0 if method == "randtune" else 3)
    with session, pytest.raises(PluginError, match=r"at an optimizer step: .*\(a warm start\)"):
        _tune(session, method, train=train, **({"gamma": 0.1} if method == "randtune" else {}))
    assert len(loaded) == 1
    assert "model_sha256" not in json.dumps([r.body for r in _records(session, "release")])  # no model leaves


def test_a_warm_start_across_partitions_after_make_private_is_refused(make_session):
    """Partition mode hands back the user's own optimizer: its first step checks the weights as they are then."""
    saved: dict[str, torch.Tensor] = {}
    at_refusal = []

    def train(trial):
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=trial.params["lr"])
        model, optimizer, loader = trial.make_private(
            module=model, optimizer=optimizer, data_loader=DataLoader(trial.dataset, batch_size=40))
        if saved:
            model.load_state_dict(saved)
        try:
            _loop(model, optimizer, loader)
        except PluginError:
            at_refusal.append(_same(_state(model), saved))
            raise
        saved.update(_state(model))
        return model

    with make_session(20.0, 1e-5, seed=3) as session, pytest.raises(PluginError, match="at an optimizer step"):
        _tune(session, "constant-overhead", train=train)
    assert at_refusal == [True]  # refused before the step applied anything


def test_a_warm_start_loaded_between_two_steps_is_refused(make_session):
    """Loading an earlier repetition's weights after the first step: the tensors changed outside the optimizer since
    the previous step are checked at the next one."""
    saved: dict[str, torch.Tensor] = {}

    def train(trial):
        model = nn.Linear(4, 2)
        wrapped, optimizer, loader = trial.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=trial.params["lr"]),
            data_loader=DataLoader(trial.dataset, batch_size=trial.params["batch_size"]))
        _loop(wrapped, optimizer, loader, on_step=lambda step: saved and step == 0 and model.load_state_dict(saved))
        saved.clear()
        saved.update(_state(model))
        return wrapped

    with pytest.raises(PluginError, match="after its first optimizer step"):
        _randtune(make_session, train)


@pytest.mark.parametrize("what", ["weights", "optimizer state"])
def test_a_partition_model_given_another_partitions_state_after_its_steps_is_refused(make_session, what):
    """Partition mode: loading the previous partition model's weights (or its optimizer's momentum) after the last
    step of the loop would make this partition's utility depend on another partition's records; checked when train
    returns, before the utility is read (and the optimizer state at the next step)."""
    saved: dict = {}
    scored = []

    def train(trial):
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=trial.params["lr"], momentum=0.9)
        model, optimizer, loader = trial.make_private(
            module=model, optimizer=optimizer, data_loader=DataLoader(trial.dataset, batch_size=40))
        if what == "optimizer state" and saved:
            optimizer.load_state_dict(saved["optimizer"])  # after make_private, before the loop
        _loop(model, optimizer, loader)
        if what == "weights" and saved:
            model.load_state_dict(saved["model"])
        saved.update({"model": _state(model), "optimizer": copy.deepcopy(optimizer.state_dict())})
        return model

    def score(model):
        scored.append(model)
        return accuracy(model)

    with make_session(20.0, 1e-5, seed=3) as session, pytest.raises(PluginError, match="warm start"):
        dpaudit.tune(session, "constant-overhead", space=SPACE, train=train, score=score, score_range=(0.0, 1.0),
                     dataset=(X, Y), record_ids=np.arange(N), k=3, t_max=2)
    assert len(scored) == 1  # the first partition model only


def test_a_refused_step_caught_by_train_still_fails_the_trial(make_session):
    saved: dict[str, torch.Tensor] = {}

    def swallow(trial):
        model = nn.Linear(4, 2)
        wrapped, optimizer, loader = trial.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=trial.params["lr"]),
            data_loader=DataLoader(trial.dataset, batch_size=trial.params["batch_size"]))
        if saved:
            model.load_state_dict(saved)
        with contextlib.suppress(PluginError):
            _loop(wrapped, optimizer, loader)
        saved.update(_state(model))
        return wrapped

    with pytest.raises((PluginError, UncoveredRelease), match="warm start"):
        _randtune(make_session, swallow)


# --- BatchMemoryManager in partition mode -------------------------------------------------------------------------


def test_constant_overhead_partition_models_take_batch_memory_manager(make_session):
    """Reviewer's crash_co_bmm: partition mode hands back the user's own optimizer, which had no signal_skip_step.
    Its virtual steps now accumulate as Opacus's do: one real step per batch of the partition loader."""
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    real_steps: list[tuple[str, int]] = []  # (mode, real steps - batches)
    optimizers = []

    def train(trial):
        model = nn.Linear(4, 2)
        optimizer = torch.optim.Adam(model.parameters(), lr=trial.params["lr"])
        optimizers.append(optimizer)
        model, optimizer, loader = trial.make_private(
            module=model, optimizer=optimizer, data_loader=DataLoader(trial.dataset, batch_size=40))
        counted = [0, -(-len(trial.dataset) // 40)]  # real steps, batches of the partition loader
        optimizers[-1].register_step_post_hook(lambda *_: counted.__setitem__(0, counted[0] + 1))
        with BatchMemoryManager(data_loader=loader, max_physical_batch_size=16, optimizer=optimizer) as memory:
            for xb, yb in memory:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                optimizer.step()
        real_steps.append((trial.mode, counted[0] - counted[1]))
        return model

    with make_session(20.0, 1e-5, seed=3) as session:
        result = _tune(session, "constant-overhead", train=train)
    assert result.selected is not None and result.model_sha256 is not None
    partitions = [extra for mode, extra in real_steps if mode == "partition"]
    assert partitions == [0] * 6  # one real step per batch of 40, whatever the physical batches of 16
    assert all("signal_skip_step" not in vars(o) and "step" not in vars(o) for o in optimizers)
    assert verify_bundle(session.run_dir, allow_not_for_release=True).valid


def test_constant_overhead_partition_models_take_an_lr_scheduler(make_session):
    """Reviewer's falserefusal_sched_partition (stop 27): torch's LR schedulers re-bind ``optimizer.step.__func__``
    to the optimizer, which broke the virtual steps installed for BatchMemoryManager ('SGD' object has no attribute
    '_skips'). A scheduler made on the optimizer trial.make_private returns works in every mode."""
    seen = []

    def train(trial):
        model = nn.Linear(4, 2)
        model, optimizer, loader = trial.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=trial.params["lr"]),
            data_loader=DataLoader(trial.dataset, batch_size=40))
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        for xb, yb in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
            schedule.step()
        seen.append(trial.mode)
        return model

    with make_session(20.0, 1e-5, seed=3) as session:
        result = _tune(session, "constant-overhead", train=train)
    assert result.selected is not None and "partition" in seen and "covered" in seen
    assert verify_bundle(session.run_dir, allow_not_for_release=True).valid
