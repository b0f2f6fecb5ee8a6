"""make_private inside a Session (dpaudit.privacy_engine): the user's own model, loss, optimizer and loop; the whole
plan charged before the first step; step N + 1 refused; BatchMemoryManager's virtual steps; loaders that cannot be
accounted for refused; target_epsilon calibrated by the session's accountant; ghost clipping is the same mechanism;
the ledger verifies."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from opacus.accountants.utils import get_noise_multiplier
from opacus.data_loader import DPDataLoader
from opacus.utils.batch_memory_manager import BatchMemoryManager
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset, WeightedRandomSampler

import dpaudit.privacy_engine as privacy_engine
from dpaudit import BudgetExceeded, PluginError, PrivacyEngine
from dpaudit.errors import AccountingError, DPAuditError, InvalidParameter, UncoveredRelease
from dpaudit.events import PoissonSubsampledGaussianEvent
from dpaudit.ledger import read_records
from dpaudit.registry import DATASET_SIZE_PUBLIC
from dpaudit.tuning import state_dict_sha256
from dpaudit.verify import verify_bundle

# Opacus hooks the first layer, whose input needs no gradient; torch notes it once per module (harmless).
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

N_RECORDS, BATCH = 200, 32  # q = 0.16, ⌊1/q⌋ = 6 steps per epoch


def _images(n: int = N_RECORDS, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g))


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 10))


def _records(session, kind: str) -> list:
    records, problems = read_records(session.ledger_path)
    assert not problems
    return [r for r in records if r.type == kind]


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _train(model, optimizer, loader, epochs: int, criterion=None) -> int:
    """The user's own loop (the Opacus tutorial shape); returns the batches seen."""
    criterion = criterion or nn.CrossEntropyLoss()
    seen = 0
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
            seen += 1
    return seen


def _private(session, model=None, *, engine=None, **kwargs):
    model = model if model is not None else _cnn()
    kwargs.setdefault("optimizer", torch.optim.SGD(model.parameters(), lr=0.1))
    kwargs.setdefault("data_loader", DataLoader(_images(), batch_size=BATCH))
    kwargs.setdefault("epochs", 2)
    kwargs.setdefault("max_grad_norm", 1.0)
    if "target_epsilon" not in kwargs:
        kwargs.setdefault("noise_multiplier", 1.0)
    engine = engine or PrivacyEngine(session)
    return engine, engine.make_private(module=model, **kwargs)


def test_multiclass_cnn_is_charged_before_the_first_step_released_at_the_cap_and_verifies(make_session, monkeypatch):
    """B = 32 does not divide n = 200: q = 32/200, N = 2 × ⌊200/32⌋ = 12 (Opacus's make_private: q = 1/7)."""
    model = _cnn()
    initial = _params(model)
    s = make_session(epsilon=20.0, delta=1e-5, protected=("images",))
    charged_with = []
    real_charge = s.charge

    def spy(event, *, plugin, mechanism):
        charged_with.append((event, plugin, mechanism, _params(model)))
        return real_charge(event, plugin=plugin, mechanism=mechanism)

    monkeypatch.setattr(s, "charge", spy)
    engine, (wrapped, optimizer, loader) = _private(s, model)
    assert len(charged_with) == 1
    event, plugin, mechanism, at_charge = charged_with[0]
    assert (plugin, mechanism) == ("session", "dp-sgd")
    assert all(torch.equal(a, b) for a, b in zip(at_charge, initial, strict=True))  # charged before any step
    assert isinstance(event, PoissonSubsampledGaussianEvent)
    assert (event.sample_rate, event.steps, event.noise_multiplier) == (BATCH / N_RECORDS, 12, 1.0)
    ids = {a.id for a in event.assumptions}
    assert {DATASET_SIZE_PUBLIC, "per-example-loss", "opacus-per-example-clipping"} <= ids

    assert _train(wrapped, optimizer, loader, epochs=2) == 12
    assert engine.steps_taken == 12
    assert not all(torch.equal(a, b) for a, b in zip(_params(model), initial, strict=True))
    release, = _records(s, "release")
    assert release.body["output"]["model_sha256"] == state_dict_sha256(model) == engine.released_sha256
    info = [r.body["info"] for r in _records(s, "info") if "realised_steps" in r.body["info"]]
    assert info[0]["realised_steps"] == 12 and info[0]["optimizer"] == "SGD"
    certificate = s.close()
    assert engine.get_epsilon() == pytest.approx(certificate["claim"]["epsilon"], rel=1e-9)  # the only charge
    assert DATASET_SIZE_PUBLIC in {a["id"] for a in certificate["assumptions"]}
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    assert report.valid, report.reasons


def test_regression_mlp_with_mse_and_adamw_learns_through_functorch(make_session):
    """A regression target, MSE loss, AdamW, functorch per-example gradients: the user's loop lowers the public MSE."""
    g = torch.Generator().manual_seed(1)
    X = torch.randn(2000, 5, generator=g)
    w = torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0])
    y = X @ w + 0.1 * torch.randn(2000, generator=g)
    X_test, y_test = X[:200], y[:200]  # stands in for a public validation set
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1))
    mse = nn.MSELoss()
    before = mse(model(X_test).squeeze(1), y_test).item()
    s = make_session(epsilon=50.0, delta=1e-5)
    engine, (wrapped, optimizer, loader) = _private(
        s, model, optimizer=torch.optim.AdamW(model.parameters(), lr=0.05),
        data_loader=DataLoader(TensorDataset(X, y), batch_size=200), epochs=5, noise_multiplier=0.5,
        max_grad_norm=5.0, grad_sample_mode="functorch")
    _train(wrapped, optimizer, loader, epochs=5, criterion=lambda out, target: mse(out.squeeze(1), target))
    assert engine.steps_taken == engine.run.plan.steps == 50
    after = mse(model(X_test).squeeze(1), y_test).item()
    assert after < 0.5 * before
    charge, = _records(s, "charge")
    assert charge.body["mechanism"] == "dp-adamw"
    s.close()
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_step_n_plus_one_is_refused_before_any_noise(make_session):
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, (wrapped, optimizer, loader) = _private(s, epochs=1)
    _train(wrapped, optimizer, loader, epochs=1)
    assert engine.steps_taken == 6
    after_cap = _params(wrapped)
    noise_state = optimizer.generator.get_state()
    x, y = next(iter(DataLoader(_images(), batch_size=8)))
    optimizer.zero_grad()
    nn.functional.cross_entropy(wrapped(x), y).backward()
    with pytest.raises(AccountingError, match="released after 6 noisy steps"):
        optimizer.step()
    assert torch.equal(optimizer.generator.get_state(), noise_state)  # no noise drawn for the refused step
    assert all(torch.equal(a, b) for a, b in zip(_params(wrapped), after_cap, strict=True))
    assert engine.steps_taken == 6 and len(_records(s, "release")) == 1


def test_the_cap_holds_without_the_release_too(make_session, monkeypatch):
    """Broken release hook (never fires): the cap alone still refuses step N + 1."""
    monkeypatch.setattr(PrivacyEngine, "_release_at_cap", lambda self: None)
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, (wrapped, optimizer, loader) = _private(s, epochs=1)
    _train(wrapped, optimizer, loader, epochs=1)
    with pytest.raises(AccountingError, match="exceeds the 6 steps charged"):
        _train(wrapped, optimizer, loader, epochs=1)
    assert engine.steps_taken == 6


def test_batch_memory_manager_virtual_steps_are_not_counted(make_session):
    """Physical batches of at most 4 records: many more optimizer.step() calls, exactly N noisy steps."""
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, (wrapped, optimizer, loader) = _private(s, epochs=2)
    physical = 0
    with BatchMemoryManager(data_loader=loader, max_physical_batch_size=4, optimizer=optimizer) as memory_loader:
        physical = _train(wrapped, optimizer, memory_loader, epochs=2)
    assert physical > 2 * engine.run.plan.steps
    assert engine.steps_taken == engine.run.plan.steps == 12
    assert len(_records(s, "release")) == 1


def test_a_skip_that_would_merge_poisson_batches_is_refused(make_session):
    """Skipping outside BatchMemoryManager (or over another loader) would put two Poisson batches under one noise
    draw, a mechanism the N-step event does not describe."""
    s = make_session(epsilon=20.0, delta=1e-5)
    _, (wrapped, optimizer, loader) = _private(s, epochs=1)
    with pytest.raises(AccountingError, match="exactly one Poisson batch"):
        optimizer.signal_skip_step(do_skip=True)
    other = DataLoader(_images(), batch_size=BATCH)
    with (BatchMemoryManager(data_loader=other, max_physical_batch_size=4, optimizer=optimizer) as memory_loader,
          pytest.raises(AccountingError, match="exactly one Poisson batch")):
        next(iter(memory_loader))


@pytest.mark.parametrize("loader, match", [
    (DataLoader(_images(), batch_size=BATCH, shuffle=True), "poisson_sampling=False"),
    (DataLoader(_images(), batch_sampler=[[0, 1], [2, 3]]), "batch_sampler"),
    (DataLoader(_images(), batch_size=BATCH, sampler=WeightedRandomSampler([1.0] * N_RECORDS, N_RECORDS)),
     "WeightedRandomSampler"),
])
def test_loaders_whose_sampling_cannot_be_accounted_are_refused_before_anything(make_session, loader, match):
    s = make_session(epsilon=20.0, delta=1e-5)
    model = _cnn()
    poisson = "poisson_sampling=False" not in match
    with pytest.raises(InvalidParameter, match=match):
        _private(s, model, data_loader=loader, poisson_sampling=poisson)
    assert _records(s, "charge") == []
    assert not model._forward_hooks and not any(m._forward_hooks for m in model.modules())  # not wrapped


def test_an_iterable_dataset_is_refused(make_session):
    class Stream(IterableDataset):
        def __iter__(self):
            yield from _images()

    with pytest.raises(InvalidParameter, match="IterableDataset"):
        _private(make_session(epsilon=20.0, delta=1e-5), data_loader=DataLoader(Stream(), batch_size=BATCH))


def test_budget_refusal_before_any_training_leaves_the_module_unwrapped(make_session):
    s = make_session(epsilon=0.1, delta=1e-5)
    model = _cnn()
    initial = _params(model)
    with pytest.raises(BudgetExceeded):
        _private(s, model, epochs=20, noise_multiplier=0.5)
    assert _records(s, "charge") == []
    assert not any(m._forward_hooks or m._backward_hooks for m in model.modules())
    assert all(torch.equal(a, b) for a, b in zip(_params(model), initial, strict=True))
    nn.functional.cross_entropy(model(_images()[:4][0]), _images()[:4][1]).backward()  # a plain module again
    assert not hasattr(next(model.parameters()), "grad_sample")


def test_budget_refusal_leaves_the_users_optimizer_steppable(make_session):
    s = make_session(epsilon=0.1, delta=1e-5)
    model = _cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(BudgetExceeded):
        _private(s, model, optimizer=optimizer, epochs=20, noise_multiplier=0.5)
    nn.functional.cross_entropy(model(_images()[:4][0]), _images()[:4][1]).backward()
    optimizer.step()  # the step guard left with the refused run


def _backward_on_a_batch(wrapped, optimizer, loader) -> None:
    x, y = next(iter(loader))
    optimizer.zero_grad()
    nn.functional.cross_entropy(wrapped(x), y).backward()


@pytest.mark.parametrize("handle", ["user's optimizer", "original_optimizer", "pre_step then user's optimizer",
                                    "closure"])
def test_the_wrapped_optimizer_cannot_apply_an_unnoised_gradient(make_session, handle):
    """Attack: keep the plain optimizer passed to make_private (or reach it as ``original_optimizer``) and step it
    after backward: the model would move by the unclipped, un-noised gradient with no noisy step counted."""
    s = make_session(epsilon=20.0, delta=1e-5)
    model = _cnn()
    plain = torch.optim.SGD(model.parameters(), lr=0.1)
    engine, (wrapped, optimizer, loader) = _private(s, model, optimizer=plain, epochs=1)
    before = _params(wrapped)
    _backward_on_a_batch(wrapped, optimizer, loader)
    with pytest.raises(AccountingError, match="stepped directly|inside step"):
        if handle == "user's optimizer":
            plain.step()
        elif handle == "original_optimizer":
            optimizer.original_optimizer.step()
        elif handle == "pre_step then user's optimizer":
            optimizer.pre_step()
        else:
            optimizer.step(closure=lambda: plain.step())
    assert all(torch.equal(a, b) for a, b in zip(_params(wrapped), before, strict=True))
    assert engine.steps_taken == 0
    x, y = next(iter(loader))  # the run itself still trains: one update per noisy step
    optimizer.zero_grad()
    optimizer.step(closure=lambda: nn.functional.cross_entropy(wrapped(x), y).backward())
    assert engine.steps_taken == 1
    with pytest.raises(AccountingError, match="stepped directly"):
        plain.step()  # the noisy step's one update is spent


@pytest.mark.parametrize(("attribute", "value"), [("noise_multiplier", 0.0), ("max_grad_norm", 1e6),
                                                  ("expected_batch_size", 1), ("loss_reduction", "sum"),
                                                  ("sample_rate", 1.0)])
def test_changing_the_charged_mechanism_after_make_private_is_refused(make_session, attribute, value):
    """Attack: lower σ, raise C, shrink the divisor or raise the loader's q after the charge was computed."""
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, (wrapped, optimizer, loader) = _private(s, epochs=1)
    setattr(loader.batch_sampler if attribute == "sample_rate" else optimizer, attribute, value)
    before = _params(wrapped)
    _backward_on_a_batch(wrapped, optimizer, loader)
    noise_state = optimizer.generator.get_state()
    with pytest.raises(AccountingError, match="changed after the charge"):
        optimizer.step()
    assert torch.equal(optimizer.generator.get_state(), noise_state)
    assert all(torch.equal(a, b) for a, b in zip(_params(wrapped), before, strict=True))
    assert engine.steps_taken == 0


@pytest.mark.parametrize("target", [1.0, 4.0])
def test_target_epsilon_is_met_by_the_certified_bound(make_session, target):
    """The certified ε (session accountant, session δ) is ≤ the target and within 1 % of it. Broken variant (the
    lower end of the final bracket) is caught by the same assertion: ε at σ_lo exceeds the target by construction."""
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, _ = _private(s, epochs=3, target_epsilon=target)
    certified = s.close()["claim"]["epsilon"]
    assert 0.99 * target <= certified <= target
    sigma = engine.run.noise_multiplier
    below = replace(engine.run.charge.event, noise_multiplier=0.99 * sigma)
    assert s.accountant.epsilon(below, 1e-5) > certified  # a smaller σ would certify more
    assert engine.run.target == (target, 1e-5)


@pytest.mark.filterwarnings("ignore:Optimal order is the largest alpha:UserWarning")
def test_target_epsilon_spends_the_budget_opacus_rdp_search_leaves_unused(make_session):
    """On the same plan (q, N), Opacus's get_noise_multiplier with its RDP accountant returns a larger σ: under the
    bound dpaudit certifies, that σ leaves part of the target unused; dpaudit's σ is smaller and still ≤ target."""
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, _ = _private(s, epochs=3, target_epsilon=2.0)
    event = engine.run.charge.event
    opacus_sigma = get_noise_multiplier(target_epsilon=2.0, target_delta=1e-5, sample_rate=event.sample_rate,
                                        steps=event.steps, accountant="rdp")
    theirs = s.accountant.epsilon(replace(event, noise_multiplier=opacus_sigma), 1e-5)
    assert engine.run.noise_multiplier < opacus_sigma
    assert theirs < engine.get_epsilon() <= 2.0


def test_target_delta_above_the_session_delta_and_adaptive_sessions_are_refused(make_session):
    with pytest.raises(InvalidParameter, match="target_delta"):
        _private(make_session(epsilon=20.0, delta=1e-5), target_epsilon=2.0, target_delta=1e-4)
    adaptive = make_session(epsilon=20.0, delta=1e-5, adaptive=True)
    with pytest.raises(InvalidParameter, match="adaptive"):
        _private(adaptive, target_epsilon=2.0)
    _private(adaptive)  # σ given: admitted by the Rényi filter


def test_ghost_clipping_leaves_the_same_clipped_sum_as_the_hooks(make_session):
    """Same model, same batch: ghost clipping's second backward pass and the hooks' per-example clipping give the
    same Σ clip_C(∇ℓ_i) (C small, so every example is clipped)."""
    x, y = next(iter(DataLoader(_images(), batch_size=24)))
    sums = {}
    for mode in ("hooks", "ghost"):
        s = make_session(epsilon=20.0, delta=1e-5)
        model = _cnn()
        _, made = _private(s, model, grad_sample_mode=mode, max_grad_norm=0.05, loss_reduction="sum",
                           **({"criterion": nn.CrossEntropyLoss(reduction="sum")} if mode == "ghost" else {}))
        wrapped, optimizer = made[0], made[1]
        criterion = made[2] if mode == "ghost" else nn.CrossEntropyLoss(reduction="sum")
        criterion(wrapped(x), y).backward()
        if mode == "hooks":
            optimizer.clip_and_accumulate()
            sums[mode] = [p.summed_grad.clone() for p in optimizer.params]
        else:
            sums[mode] = [p.grad.clone() for p in optimizer.params]
    for a, b in zip(sums["hooks"], sums["ghost"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_ghost_clipping_trains_and_refuses_an_unclipped_gradient(make_session):
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, (wrapped, optimizer, criterion, loader) = _private(s, grad_sample_mode="ghost", epochs=1)
    x, y = next(iter(DataLoader(_images(), batch_size=8)))
    noise_state = optimizer.generator.get_state()
    optimizer.zero_grad()
    nn.functional.cross_entropy(wrapped(x), y).backward()  # the original loss: p.grad is not clipped
    with pytest.raises(AccountingError, match="clipped backward pass"):
        optimizer.step()
    assert torch.equal(optimizer.generator.get_state(), noise_state)
    optimizer.zero_grad()
    criterion(wrapped(x), y).backward()
    nn.functional.cross_entropy(wrapped(x), y).backward()  # clipped, then an unclipped pass on top
    with pytest.raises(AccountingError, match="clipped backward pass"):
        optimizer.step()
    assert engine.steps_taken == 0
    _train(wrapped, optimizer, loader, epochs=1, criterion=criterion)
    assert engine.steps_taken == 6 and len(_records(s, "release")) == 1
    s.close()
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def _noise_statistic(make_session, mode: str) -> float:
    """All-zero images: every convolution and linear weight gradient is 0, so those weights move by noise alone.

    After N steps of SGD (lr η, expected batch B), each weight has moved by −η Σ_t z_t / B, z_t ~ N(0, σ²C²): the
    d weights are independent N(0, N η² σ² C² / B²). Returns Σ displacement² / variance, χ²(d) when the optimizer
    adds exactly the charged noise.
    """
    d_in, lr, sigma, clip = 500, 1.0, 1.0, 1.0
    data = TensorDataset(torch.zeros(N_RECORDS, d_in), torch.randint(0, 4, (N_RECORDS,)))
    torch.manual_seed(0)
    model = nn.Linear(d_in, 4)
    w0 = model.weight.detach().clone()
    s = make_session(epsilon=50.0, delta=1e-5)
    engine, made = _private(s, model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                            data_loader=DataLoader(data, batch_size=BATCH), epochs=1, noise_multiplier=sigma,
                            max_grad_norm=clip, grad_sample_mode=mode)
    criterion = made[2] if mode == "ghost" else None
    _train(made[0], made[1], made[-1], epochs=1, criterion=criterion)
    displacement = (model.weight.detach() - w0).double().ravel()
    variance = engine.steps_taken * (lr * sigma * clip / BATCH) ** 2
    return float((displacement**2).sum() / variance)


def _chi2_accepts(statistic: float, dof: int = 2000, alpha: float = 1e-6) -> bool:
    from scipy.stats import chi2

    return chi2.ppf(alpha / 2, dof) <= statistic <= chi2.ppf(1 - alpha / 2, dof)


@pytest.mark.statistical
@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_the_noise_is_the_charged_noise(make_session, mode):
    """Two-sided χ²(2000) test; false-alarm rate α = 1e-6 if the noise is N(0, σ²C²) as charged (fixed seeds)."""
    assert _chi2_accepts(_noise_statistic(make_session, mode))


@pytest.mark.statistical
def test_noise_check_catches_a_ghost_optimizer_with_less_noise(make_session, monkeypatch):
    """Broken variant: σ/2 in the ghost optimizer. The statistic is ≈ χ²(2000)/4 ≈ 500 against an acceptance region
    of about [1 706, 2 325]: the miss rate is below 1e-12."""
    class HalfNoise(privacy_engine.CappedGhostClippingOptimizer):
        def __init__(self, optimizer, **kwargs):
            kwargs["noise_multiplier"] /= 2
            super().__init__(optimizer, **kwargs)

    monkeypatch.setattr(privacy_engine, "CappedGhostClippingOptimizer", HalfNoise)
    assert not _chi2_accepts(_noise_statistic(make_session, "ghost"))


def test_early_release_then_every_step_and_any_changed_model_are_refused(make_session):
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, (wrapped, optimizer, loader) = _private(s, epochs=2)
    batches = iter(loader)
    for _ in range(3):
        x, y = next(batches)
        optimizer.zero_grad()
        nn.functional.cross_entropy(wrapped(x), y).backward()
        optimizer.step()
    digest = engine.release_model()
    assert engine.release_model() == digest  # unchanged: the same release
    info = [r.body["info"] for r in _records(s, "info") if "realised_steps" in r.body["info"]]
    assert (info[0]["realised_steps"], info[0]["planned_steps"]) == (3, 12)
    x, y = next(batches)
    optimizer.zero_grad()
    nn.functional.cross_entropy(wrapped(x), y).backward()
    with pytest.raises(AccountingError, match="released after 3"):
        optimizer.step()
    with torch.no_grad():
        next(wrapped.parameters()).add_(1.0)
    with pytest.raises(UncoveredRelease, match="changed"):
        engine.release_model()
    assert len(_records(s, "release")) == 1


def test_session_and_plugin_view_shorthands_attribute_the_run(make_session):
    s = make_session(epsilon=20.0, delta=1e-5)
    model = _cnn()
    wrapped, optimizer, loader = s.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                                data_loader=DataLoader(_images(), batch_size=BATCH), epochs=1,
                                                max_grad_norm=1.0, noise_multiplier=1.0)
    _train(wrapped, optimizer, loader, epochs=1)
    view = s.for_plugin("my-trainer", "1.0")
    model = _cnn()
    view.make_private(module=model, optimizer=torch.optim.Adam(model.parameters()), epochs=1, max_grad_norm=1.0,
                      data_loader=DataLoader(_images(), batch_size=BATCH), noise_multiplier=1.0)
    assert [(r.body["plugin"], r.body["mechanism"]) for r in _records(s, "charge")] == [
        ("session", "dp-sgd"), ("my-trainer", "dp-adam")]
    assert _records(s, "release")[0].body["plugin"] == "session"


def test_bad_arguments_are_refused_before_anything_is_charged(make_session):
    s = make_session(epsilon=20.0, delta=1e-5)
    for bad, match in (({"noise_multiplier": 1.0, "target_epsilon": 1.0}, "exactly one"),
                       ({"grad_sample_mode": "ew"}, "grad_sample_mode"),
                       ({"clipping": "per_layer"}, "clipping"),
                       ({"criterion": nn.CrossEntropyLoss()}, "ghost mode only"),
                       ({"epochs": 0}, "epochs"),
                       ({"max_grad_norm": -1.0}, "max_grad_norm")):
        with pytest.raises(InvalidParameter, match=match):
            _private(s, **bad)
    model, stranger = _cnn(), nn.Linear(2, 2)
    with pytest.raises(InvalidParameter, match="not the module's"):
        _private(s, model, optimizer=torch.optim.SGD(stranger.parameters(), lr=0.1))
    with pytest.raises(PluginError, match="per-example"):
        norm = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(72, 10))
        _private(s, norm)
    with pytest.raises(PluginError, match="add/remove"):
        _private(make_session(epsilon=20.0, delta=1e-5, neighbouring="replace_one"))
    engine, _ = _private(s)
    with pytest.raises(InvalidParameter, match="already trains"):
        _private(s, engine=engine)
    with pytest.raises(DPAuditError, match="make_private first"):
        PrivacyEngine(s).release_model()
    assert len(_records(s, "charge")) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_trains_on_cuda_without_a_host_sync_per_step(make_session):
    """The module's device is the training device; between the charge and the last step the audited path makes no
    device-to-host synchronisation (torch's sync debug mode turns one into an error)."""
    s = make_session(epsilon=20.0, delta=1e-5)
    model = _cnn().cuda()
    engine, (wrapped, optimizer, loader) = _private(s, model, epochs=1)
    for steps, (x_cpu, y_cpu) in enumerate(loader):
        x, y = x_cpu.cuda(non_blocking=True), y_cpu.cuda(non_blocking=True)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(wrapped(x), y)
        loss.backward()
        if steps < engine.run.plan.steps - 1:  # the last step releases: the digest reads the weights once
            torch.cuda.set_sync_debug_mode("error")
        try:
            optimizer.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert engine.steps_taken == engine.run.plan.steps
    assert engine.released_sha256 == state_dict_sha256(model)
    s.close()
    assert verify_bundle(s.run_dir, allow_not_for_release=True).valid


def test_an_opacus_dpdataloader_is_read_off_its_sampler_and_rebuilt_on_the_sessions_generator(make_session):
    """Its rate and batches per pass are kept; its generator (here seeded by the user) is not: the run's batches
    follow from the session's randomness (tests/dpaudit/test_privacy_engine_misuse.py attacks this)."""
    loader = DPDataLoader(_images(), sample_rate=0.1, generator=torch.Generator().manual_seed(0))
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, (_, _, returned) = _private(s, data_loader=loader, epochs=3)
    assert isinstance(returned, DPDataLoader) and returned is not loader
    assert returned.batch_sampler.generator is not loader.batch_sampler.generator
    assert (engine.run.charge.event.sample_rate, engine.run.charge.event.steps) == (0.1, 30)


def test_the_plan_is_public_arithmetic():
    """Steps per epoch are ⌊1/q⌋ for q = B/n, the Opacus sampler's count, whatever B."""
    for n, b in ((200, 32), (1000, 64), (60000, 256), (10, 10)):
        loader = privacy_engine.poisson_loader(DataLoader(_images(n), batch_size=b), poisson_sampling=True,
                                               generator=torch.Generator().manual_seed(0))
        assert len(loader) == int(1 / (b / n)) == int(np.floor(n / b + 1e-12))
