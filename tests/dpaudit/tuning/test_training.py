"""The tuning kit's DP-SGD (dpaudit.tuning.training): one charge before the first step, q = B/n, Poisson loaders
only, the step cap, budget refusal, runs covered by an envelope or a repeat-and-select charge, the exact noise."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from opacus import GradSampleModule
from opacus.data_loader import DPDataLoader
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import BudgetExceeded, PluginError
from dpaudit.data import load_adult
from dpaudit.errors import AccountingError, InvalidParameter, UncoveredRelease
from dpaudit.events import PoissonSubsampledGaussianEvent, SelfComposedEvent
from dpaudit.ledger import read_records
from dpaudit.parallel import DetachedView, ReplaySeeds
from dpaudit.sensitivity import Neighbouring
from dpaudit.tuning import (
    Candidate,
    CappedDPOptimizer,
    build_model,
    candidate_event,
    grid_envelope,
    state_dict_sha256,
    train_private,
    train_private_loader,
)
from dpaudit.tuning.training import charge_run

# Opacus hooks the first layer, whose input needs no gradient; torch notes it once per module (harmless).
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

HYPER = {"optimizer": "sgd", "lr": 2.0, "max_grad_norm": 1.0, "noise_multiplier": 1.0, "label": "test"}


@pytest.fixture(scope="module")
def small():
    return load_adult(train_rows=1000, test_rows=2000)


def _view(session):
    """The plugin view the kit trains through: its charge, info and release are attributed to "opacus-training"."""
    return session.for_plugin("opacus-training", "0.1.0")


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _records(session, kind: str) -> list:
    records, problems = read_records(session.ledger_path)
    assert not problems
    return [r for r in records if r.type == kind]


def test_one_charge_with_planned_steps_before_the_first_step(make_session, small, monkeypatch):
    """B = 64 does not divide n = 1000: q = 0.064 (not 1/len(loader) = 1/15), N = 2 × ⌊1/q⌋ = 30."""
    torch.manual_seed(0)
    model = build_model("logreg", small.X_train.shape[1], 1)
    initial = _params(model)
    s = make_session()
    calls = []
    real_charge = s.charge

    def spy(event, *, plugin, mechanism):
        calls.append((event, plugin, mechanism, _params(model)))
        return real_charge(event, plugin=plugin, mechanism=mechanism)

    monkeypatch.setattr(s, "charge", spy)
    result = train_private(_view(s), model, small.X_train, small.y_train, epochs=2, batch_size=64, **HYPER)

    assert len(calls) == 1
    event, plugin, mechanism, params_at_charge = calls[0]
    assert (plugin, mechanism) == ("opacus-training", "dp-sgd")
    assert all(torch.equal(a, b) for a, b in zip(params_at_charge, initial, strict=True))  # nothing trained yet
    assert isinstance(event, PoissonSubsampledGaussianEvent)
    assert event.sample_rate == 64 / 1000 and event.sample_rate != 1 / 15
    assert event.steps == 2 * 15 == result.planned_steps == result.steps
    assert event.noise_multiplier == 1.0 and event.neighbouring is Neighbouring.ADD_REMOVE
    assert event.sensitivity.formula == "clipped_gradient_sum" and event.sensitivity.value == 1.0
    assert {a.id for a in event.assumptions if a.conditional} >= {"opacus-floating-point-gaussian",
                                                                  "opacus-poisson-sampling", "dataset-size-public"}
    assert not all(torch.equal(a, b) for a, b in zip(_params(result.model), initial, strict=True))

    charge, = _records(s, "charge")
    release, = _records(s, "release")
    info = [r for r in _records(s, "info") if r.body["plugin"] == "opacus-training"]
    assert charge.seq < release.seq and release.body["charge_seq"] == charge.seq == result.charge_seq
    assert release.body["output"] == {"model_sha256": result.model_sha256, "n_parameters": 105}
    assert result.model_sha256 == state_dict_sha256(result.model)
    assert info[0].body["info"]["realised_steps"] == 30 and info[0].body["info"]["planned_steps"] == 30
    assert s.spent_epsilon() <= s.budget[0]
    s.close()


def test_user_dpdataloader_rate_is_read_off_its_sampler(make_session, small):
    s = make_session()
    ds = TensorDataset(torch.tensor(np.array(small.X_train)), torch.tensor(np.array(small.y_train)))
    loader = DPDataLoader(ds, sample_rate=0.05, generator=torch.Generator().manual_seed(1))
    result = train_private_loader(_view(s), build_model("logreg", ds.tensors[0].shape[1], 1), loader, epochs=1, **HYPER)
    assert result.sample_rate == 0.05 and result.planned_steps == 20
    s.close()


def test_refuses_a_plain_dataloader_and_charges_nothing(make_session, small):
    s = make_session()
    ds = TensorDataset(torch.tensor(np.array(small.X_train)), torch.tensor(np.array(small.y_train)))
    with pytest.raises(PluginError, match="needs an Opacus Poisson DPDataLoader; a DataLoader"):
        train_private_loader(_view(s), build_model("logreg", 104, 1), DataLoader(ds, batch_size=64, shuffle=True),
                             epochs=1, **HYPER)
    assert s.spent_epsilon() == 0.0 and not _records(s, "charge")
    s.close()


def test_step_cap_refuses_the_extra_step_before_any_noise():
    torch.manual_seed(0)
    gsm = GradSampleModule(nn.Linear(3, 1), loss_reduction="sum")
    generator = torch.Generator().manual_seed(7)
    opt = CappedDPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.1), max_steps=2, noise_multiplier=1.0,
                            max_grad_norm=1.0, expected_batch_size=4, generator=generator)
    x, y = torch.randn(4, 3), torch.randn(4)

    def step() -> None:
        opt.zero_grad()
        ((gsm(x).reshape(-1) - y) ** 2).sum().backward()
        opt.step()

    step()
    step()
    state, params = generator.get_state(), _params(gsm)
    with pytest.raises(AccountingError, match="noisy step 3 exceeds the 2 steps charged"):
        step()
    assert opt.steps_taken == 2
    assert torch.equal(generator.get_state(), state)  # no noise drawn for the refused step
    assert all(torch.equal(a, b) for a, b in zip(_params(gsm), params, strict=True))


def test_budget_exceeded_trains_nothing(make_session, small):
    torch.manual_seed(0)
    model = build_model("logreg", 104, 1)
    initial = _params(model)
    s = make_session(epsilon=0.05)
    with pytest.raises(BudgetExceeded):
        train_private(_view(s), model, small.X_train, small.y_train, epochs=5, batch_size=100,
                      **{**HYPER, "noise_multiplier": 0.5})
    assert all(torch.equal(a, b) for a, b in zip(_params(model), initial, strict=True))
    assert all(not hasattr(p, "grad_sample") for p in model.parameters())  # Opacus hooks removed
    assert s.spent_epsilon() == 0.0 and not _records(s, "charge") and not _records(s, "release")
    s.close()


def test_refuses_replace_one_session_and_bad_input(make_session, small):
    s = make_session(neighbouring="replace_one")
    with pytest.raises(PluginError, match="add/remove"):
        train_private(_view(s), build_model("logreg", 104, 1), small.X_train, small.y_train, epochs=1, batch_size=64,
                      **HYPER)
    s.close()
    s = make_session()
    bad = np.array(small.X_train)
    bad[3, 2] = np.nan
    with pytest.raises(InvalidParameter, match="finite"):
        train_private(_view(s), build_model("logreg", 104, 1), bad, small.y_train, epochs=1, batch_size=64, **HYPER)
    with pytest.raises(InvalidParameter, match="exceeds"):
        train_private(_view(s), build_model("logreg", 104, 1), small.X_train, small.y_train, epochs=1, batch_size=5000,
                      **HYPER)
    with pytest.raises(InvalidParameter, match="optimizer"):
        train_private(_view(s), build_model("logreg", 104, 1), small.X_train, small.y_train, epochs=1, batch_size=64,
                      **{**HYPER, "optimizer": "rmsprop"})
    assert s.spent_epsilon() == 0.0
    s.close()


def test_state_dict_digest_tracks_the_weights():
    torch.manual_seed(0)
    a = build_model("mlp", 4, 3)
    b = copy.deepcopy(a)
    assert state_dict_sha256(a) == state_dict_sha256(b)
    with torch.no_grad():
        b[0].weight[0, 0] += 1e-6
    assert state_dict_sha256(a) != state_dict_sha256(b)


def _weight_displacement_statistic(make_session, sigma: float = 1.0) -> float:
    """Train on all-zero features, so every weight gradient is 0 and the weights move by noise alone.

    After N steps of SGD (lr η, expected batch B), each weight has moved by −η Σ_t z_t / B with z_t ~ N(0, σ²C²), a
    N(0, N η² σ² C² / B²) draw; the d weights are independent. Returns Σ displacement² / that variance, which is
    χ²(d) when the optimizer adds exactly the charged noise.
    """
    n, d, batch, lr, clip = 1000, 2000, 100, 1.0, 1.0
    X = np.zeros((n, d), dtype=np.float32)
    y = (np.arange(n) % 2).astype(np.float32)
    torch.manual_seed(0)
    model = nn.Linear(d, 1)
    w0 = model.weight.detach().clone()
    s = make_session(epsilon=50.0)
    result = train_private(_view(s), model, X, y, optimizer="sgd", lr=lr, epochs=1, batch_size=batch,
                           max_grad_norm=clip, noise_multiplier=sigma, label="noise check")
    charged, = _records(s, "charge")
    s.close()
    assert charged.body["event"]["noise_multiplier"] == sigma
    displacement = (result.model.weight.detach() - w0).numpy().ravel().astype(np.float64)
    variance = result.steps * (lr * sigma * clip / batch) ** 2
    return float((displacement**2).sum() / variance)


def _chi2_accepts(statistic: float, dof: int = 2000, alpha: float = 1e-6) -> bool:
    from scipy.stats import chi2

    return chi2.ppf(alpha / 2, dof) <= statistic <= chi2.ppf(1 - alpha / 2, dof)


@pytest.mark.statistical
def test_optimizer_adds_exactly_the_charged_noise(make_session):
    """The noise in the model equals the σ·C of the charged event (two-sided χ²(2000) test).

    False-alarm rate: α = 1e-6 (two-sided χ² quantiles) if the noise is N(0, σ²C²) as charged. Fixed seeds make the
    outcome deterministic.
    """
    assert _chi2_accepts(_weight_displacement_statistic(make_session))


@pytest.mark.statistical
def test_noise_check_catches_an_optimizer_with_less_noise_than_charged(make_session, monkeypatch):
    """Broken variant: the event says σ but the optimizer adds σ/2. The statistic is then ≈ χ²(2000)/4 ≈ 500 ± 16
    against an acceptance region of about [1 706, 2 325], so the miss rate is below 1e-12."""
    import dpaudit.tuning.training as training

    class HalfNoise(training.CappedDPOptimizer):
        def __init__(self, optimizer, **kwargs):
            kwargs["noise_multiplier"] /= 2
            super().__init__(optimizer, **kwargs)

    monkeypatch.setattr(training, "CappedDPOptimizer", HalfNoise)
    assert not _chi2_accepts(_weight_displacement_statistic(make_session))


def _charged_repeat_and_select(session, base):
    charge, _ = session.repeat_and_select(base, "geometric", {"gamma": 0.5}, plugin="test", label="t")
    return charge


def test_run_under_a_repeat_and_select_charge_writes_nothing(make_session, small):
    """Under ``charge=`` the run charges nothing and writes no record (a repetition's output stays secret)."""
    s = make_session()
    base = candidate_event(Candidate(2.0, 1.0, 1.0, 1, 64), len(small.y_train), "base")
    charge = _charged_repeat_and_select(s, base)
    before = len(read_records(s.ledger_path)[0])
    model = build_model("logreg", small.X_train.shape[1], 1)
    result = train_private(_view(s), model, small.X_train, small.y_train, epochs=1, batch_size=64, charge=charge,
                           **{**HYPER, "max_grad_norm": 0.5})  # C varies freely: the noise is σ·C
    assert result.charge_seq == charge.seq and result.steps == result.planned_steps
    assert len(read_records(s.ledger_path)[0]) == before
    with pytest.raises(InvalidParameter):
        train_private(_view(s), model, small.X_train, small.y_train, epochs=1, batch_size=64, charge=charge,
                      public_eval=(small.X_test, small.y_test), **HYPER)
    s.close()


def test_a_charge_that_does_not_cover_the_run_is_refused(make_session, small):
    s = make_session()
    base = candidate_event(Candidate(2.0, 1.0, 1.0, 1, 64), len(small.y_train), "base")
    charge = _charged_repeat_and_select(s, base)
    model = build_model("logreg", small.X_train.shape[1], 1)
    for bad in ({"epochs": 2, "batch_size": 64, "noise_multiplier": 1.0},   # more steps
                {"epochs": 1, "batch_size": 64, "noise_multiplier": 0.9},   # less noise
                {"epochs": 1, "batch_size": 128, "noise_multiplier": 1.0}):  # larger q
        with pytest.raises(PluginError, match="not dominated"):
            train_private(_view(s), model, small.X_train, small.y_train, charge=charge,
                          **{**HYPER, **bad})
    twice = s.charge(SelfComposedEvent(event=base, count=2), plugin="test", mechanism="dp-sgd")
    with pytest.raises(PluginError, match="repeat_and_select or poisson_subsampled_gaussian"):
        train_private(_view(s), model, small.X_train, small.y_train, epochs=1, batch_size=64, charge=twice, **HYPER)
    other = make_session(name="other")
    with pytest.raises(PluginError, match="not made by this session"):
        train_private(_view(other), model, small.X_train, small.y_train, epochs=1, batch_size=64, charge=charge,
                      **HYPER)
    other.close()
    s.close()


def test_an_envelope_charge_covers_one_dominated_run_recorded_and_released_against_it(make_session, small):
    """A plain Poisson-subsampled Gaussian charge (the envelope of a grid, charged before the selection) covers one
    run it dominates parameter-wise: that run charges nothing more, logs and releases against the envelope."""
    s = make_session()
    grid = [Candidate(2.0, 1.0, 1.0, 1, 64), Candidate(0.5, 3.0, 2.0, 2, 32)]
    envelope = s.charge(grid_envelope(grid, len(small.y_train), "envelope"), plugin="test", mechanism="dp-sgd")
    assert (envelope.event.sample_rate, envelope.event.noise_multiplier, envelope.event.steps) == (
        64 / 1000, 1.0, 2 * (1000 // 32))
    assert envelope.event.sensitivity.value == 3.0
    spent = s.spent_epsilon()
    model = build_model("logreg", small.X_train.shape[1], 1)
    result = train_private(_view(s), model, small.X_train, small.y_train, epochs=2, batch_size=32, charge=envelope,
                           public_eval=(small.X_test, small.y_test), **{**HYPER, "noise_multiplier": 2.0})
    assert result.charge_seq == envelope.seq and s.spent_epsilon() == spent
    assert len(_records(s, "charge")) == 1
    (release,) = _records(s, "release")
    assert release.body["charge_seq"] == envelope.seq
    assert release.body["output"]["model_sha256"] == result.model_sha256
    with pytest.raises(UncoveredRelease, match=f"charge {envelope.seq} .*one run only"):
        train_private(_view(s), model, small.X_train, small.y_train, epochs=1, batch_size=64, charge=envelope, **HYPER)
    second = s.charge(envelope.event, plugin="test", mechanism="dp-sgd")
    with pytest.raises(PluginError, match="not dominated"):
        train_private(_view(s), model, small.X_train, small.y_train, epochs=1, batch_size=128, charge=second, **HYPER)
    s.close()


@pytest.mark.parametrize("attempt", range(3))
def test_racing_threads_train_under_one_envelope_exactly_once(make_session, small, attempt):
    """Attack: two threads both train under one envelope charge (a check-then-act before the session held the
    claim). The claim is atomic in the session: one thread trains and releases, the other is refused before it
    touches any data, every time (3 races of 4 threads; the claim race itself is repeated 50 times in
    tests/dpaudit/test_session.py)."""
    import threading

    s = make_session(seed=attempt)
    envelope = s.charge(grid_envelope([Candidate(2.0, 1.0, 1.0, 1, 64)], len(small.y_train), "envelope"),
                        plugin="test", mechanism="dp-sgd")
    barrier = threading.Barrier(4)
    outcomes: list = [None] * 4

    def worker(i: int) -> None:
        model = build_model("logreg", small.X_train.shape[1], 1)
        barrier.wait()
        try:
            outcomes[i] = train_private(_view(s), model, small.X_train, small.y_train, epochs=1, batch_size=64,
                                        charge=envelope, **HYPER)
        except UncoveredRelease as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(isinstance(o, UncoveredRelease) for o in outcomes) == 3
    (release,) = _records(s, "release")
    assert release.body["charge_seq"] == envelope.seq
    s.close()


def test_a_run_under_its_own_charge_claims_it(make_session, small):
    """The charge a run makes for itself is claimed by that run: no later run can be slipped in under it."""
    s = make_session()
    model = build_model("logreg", small.X_train.shape[1], 1)
    train_private(_view(s), model, small.X_train, small.y_train, epochs=1, batch_size=64, **HYPER)
    (charge_record,) = _records(s, "charge")
    charge = s._charges[charge_record.seq]
    assert s.coverage(charge).claims == 1 and s.coverage(charge).outputs == 1
    with pytest.raises(UncoveredRelease, match="one run only"):
        train_private(_view(s), model, small.X_train, small.y_train, epochs=1, batch_size=64, charge=charge, **HYPER)
    s.close()


def test_a_claimed_charge_trains_one_run_however_often_it_is_handed_on(make_session, small):
    """Attack (review, stop 27): ``claimed=True`` skipped the claim, so one charged and claimed DP-SGD event trained
    any number of models handed to the caller, and an envelope never claimed trained under ``claimed=True`` and
    then again under its own claim. Each claim now starts one run."""
    s = make_session()
    view = _view(s)
    n = len(small.y_train)
    event = candidate_event(Candidate(lr=2.0, max_grad_norm=1.0, noise_multiplier=1.0, epochs=1, batch_size=64), n,
                            "test")
    charge = charge_run(view, event, "DP-SGD")
    model = build_model("logreg", small.X_train.shape[1], 1)
    first = train_private(view, model, small.X_train, small.y_train, epochs=1, batch_size=64, charge=charge,
                          claimed=True, **HYPER)
    assert first.pending is not None
    with pytest.raises(UncoveredRelease, match="one run per claim"):
        train_private(view, build_model("logreg", small.X_train.shape[1], 1), small.X_train, small.y_train,
                      epochs=1, batch_size=64, charge=charge, claimed=True, **HYPER)
    envelope = view.charge(event, mechanism="DP-SGD")  # charged, never claimed
    with pytest.raises(UncoveredRelease, match="0 run\\(s\\) claimed"):
        train_private(view, build_model("logreg", small.X_train.shape[1], 1), small.X_train, small.y_train,
                      epochs=1, batch_size=64, charge=envelope, claimed=True, **HYPER)
    s.close()


def test_a_trial_view_trains_its_claimed_charge_once():
    view = DetachedView(ReplaySeeds((), for_release=False), "cpu", Neighbouring.ADD_REMOVE, (3,))
    charge = type("Charge", (), {"seq": 3})()
    view.start_claimed_run(charge)
    with pytest.raises(UncoveredRelease, match="one run per claimed charge"):
        view.start_claimed_run(charge)
    with pytest.raises(UncoveredRelease, match="not claimed for this trial"):
        DetachedView(ReplaySeeds((), for_release=False), "cpu", Neighbouring.ADD_REMOVE, (3,)).start_claimed_run(
            type("Charge", (), {"seq": 4})())


def test_only_opacus_batch_splitter_may_skip_a_step_of_the_plugins_optimizer():
    """Reviewer's spoof (stop 27), against the plugins' optimizer: a function whose local ``self`` is a
    BatchSplittingSampler over the run's batches is not Opacus's splitter, so its skip is refused."""
    from opacus.utils.batch_memory_manager import BatchSplittingSampler

    data = TensorDataset(torch.randn(40, 3), torch.randn(40))
    loader = DPDataLoader(data, sample_rate=0.25, generator=torch.Generator().manual_seed(1))
    gsm = GradSampleModule(nn.Linear(3, 1), loss_reduction="sum")
    opt = CappedDPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.1), max_steps=4, noise_multiplier=1.0,
                            max_grad_norm=1.0, expected_batch_size=10, poisson_batches=loader.batch_sampler,
                            generator=torch.Generator().manual_seed(7))

    def skip_next(self, optimizer) -> None:  # ``self`` is only a local name here
        optimizer.signal_skip_step(do_skip=True)

    fake = BatchSplittingSampler(sampler=loader.batch_sampler, max_batch_size=10**6, optimizer=opt)
    with pytest.raises(AccountingError, match="only BatchMemoryManager splitting one batch"):
        skip_next(fake, opt)
