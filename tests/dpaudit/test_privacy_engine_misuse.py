"""make_private misused (dpaudit.privacy_engine): an optimizer over part of the trainable model, a parameter
unfrozen or frozen behind the optimizer's back (also only for the backward pass), a buffer or an added parameter
trained outside, a BatchMemoryManager pass abandoned in the middle of a Poisson batch, a skip signal from code other
than Opacus's BatchSplittingSampler, a layer unfrozen that Opacus never hooked, an Opacus DPDataLoader sampling from
a generator the user seeded. Each is refused before a noisy step covers more than
the charge describes; the legitimate shapes next to them (frozen layers, param groups, progressive freezing, a pass
stopped at a batch boundary) still train."""

from __future__ import annotations

import pytest
import torch
from opacus.data_loader import DPDataLoader
from opacus.utils.batch_memory_manager import BatchMemoryManager
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import PrivacyEngine
from dpaudit.errors import AccountingError, InvalidParameter, UncoveredRelease
from tests.dpaudit.test_privacy_engine import _params, _records

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

N_RECORDS, BATCH = 120, 40  # q = 1/3: 3 steps per epoch


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body, self.head = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


def _data(n: int = N_RECORDS) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g))


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _private(session, model: nn.Module, optimizer=None, loader=None, epochs: int = 1):
    engine = PrivacyEngine(session)
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.5)
    wrapped, dp, returned = engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader or DataLoader(_data(), batch_size=BATCH),
        epochs=epochs, max_grad_norm=1.0, noise_multiplier=1.0)
    return engine, wrapped, dp, returned


def _backward(wrapped, dp, x, y, scale: float = 1.0) -> None:
    dp.zero_grad()
    (scale * nn.functional.cross_entropy(wrapped(x), y)).backward()


# --- 1. every trainable parameter is the DP optimizer's --------------------------------------------------------


def test_an_optimizer_over_part_of_the_trainable_model_is_refused(make_session):
    """Reviewer's f10: the head's optimizer goes to make_private, a plain one trains the body by its raw gradient."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    with pytest.raises(InvalidParameter, match=r"does not update the trainable parameters \['body.weight', "):
        _private(s, net, torch.optim.SGD(net.head.parameters(), lr=0.5))
    assert _records(s, "charge") == []
    assert not any(m._forward_hooks for m in net.modules())  # left unwrapped


def test_frozen_layers_and_param_groups_are_accepted(make_session):
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    net.body.requires_grad_(False)
    body = _params(net.body)
    engine, wrapped, dp, loader = _private(s, net, torch.optim.SGD(net.head.parameters(), lr=0.5))
    for x, y in loader:
        _backward(wrapped, dp, x, y)
        dp.step()
    assert engine.released_sha256 is not None and _same(_params(net.body), body)
    net = Net()
    groups = [{"params": net.body.parameters(), "lr": 0.1}, {"params": net.head.parameters(), "lr": 1.0}]
    engine, wrapped, dp, loader = _private(s, net, torch.optim.SGD(groups))
    for x, y in loader:
        _backward(wrapped, dp, x, y)
        dp.step()
    assert engine.steps_taken == 3


def test_a_parameter_unfrozen_after_make_private_outside_the_optimizer_is_refused(make_session):
    """The body is frozen at make_private (so left out of the optimizer legitimately), then unfrozen and trained by a
    second, plain optimizer: the DP step refuses, the run stops and its model is not released."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    net.body.requires_grad_(False)
    engine, wrapped, dp, loader = _private(s, net, torch.optim.SGD(net.head.parameters(), lr=0.5))
    net.body.requires_grad_(True)
    x, y = next(iter(loader))
    _backward(wrapped, dp, x, y)
    head, noise_state = _params(net.head), dp.generator.get_state()
    with pytest.raises(AccountingError, match=r"\['body.weight', 'body.bias'\] .* not updated by the optimizer"):
        dp.step()
    assert _same(_params(net.head), head) and torch.equal(dp.generator.get_state(), noise_state)
    assert engine.steps_taken == 0
    with pytest.raises(UncoveredRelease, match="does not cover"):
        engine.release_model()
    net.body.requires_grad_(False)
    _backward(wrapped, dp, x, y)
    with pytest.raises(AccountingError, match="not updated by the optimizer"):  # stopped for good
        dp.step()
    assert _records(s, "release") == [] and len(_records(s, "charge")) == 1


def test_a_parameter_unfrozen_and_trained_outside_then_released_early_is_refused(make_session):
    """No noisy step after the body was unfrozen and stepped by a plain optimizer: the release checks too."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    net.body.requires_grad_(False)
    engine, wrapped, dp, loader = _private(s, net, torch.optim.SGD(net.head.parameters(), lr=0.5))
    batches = iter(loader)
    x, y = next(batches)
    _backward(wrapped, dp, x, y)
    dp.step()
    net.body.requires_grad_(True)
    body_optimizer = torch.optim.SGD(net.body.parameters(), lr=0.5)
    x, y = next(batches)
    _backward(wrapped, dp, x, y)
    body_optimizer.step()  # the raw gradient: nothing of dpaudit's runs here
    with pytest.raises(UncoveredRelease, match="not updated by the optimizer"):
        engine.release_model()
    with pytest.raises(AccountingError, match="not updated by the optimizer"):
        dp.step()
    assert _records(s, "release") == [] and engine.steps_taken == 1


def test_freezing_a_parameter_between_backward_and_step_is_refused(make_session):
    """Reviewer's f6 (b): Opacus neither clips nor noises a parameter frozen after backward(), but the wrapped optimizer
    applies its raw gradient, and the step counted as a noisy one."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    engine, wrapped, dp, loader = _private(s, net)
    x, y = next(iter(loader))
    _backward(wrapped, dp, x, y, scale=1000.0)
    before, noise_state = _params(net), dp.generator.get_state()
    net.body.requires_grad_(False)
    with pytest.raises(AccountingError, match="frozen .* while holding a gradient"):
        dp.step()
    assert _same(_params(net), before) and torch.equal(dp.generator.get_state(), noise_state)
    assert engine.steps_taken == 0
    with pytest.raises(UncoveredRelease):
        engine.release_model()


def test_freezing_a_layer_between_steps_is_accepted(make_session):
    """Progressive freezing: after zero_grad() (which leaves zero gradients) the frozen layer stays where it is."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    engine, wrapped, dp, loader = _private(s, net, epochs=2)
    for step, (x, y) in enumerate(loader):
        _backward(wrapped, dp, x, y)
        dp.step()
        if step == 0:
            dp.zero_grad()
            net.body.requires_grad_(False)
            body = _params(net.body)
    for x, y in loader:
        _backward(wrapped, dp, x, y)
        dp.step()
    assert engine.steps_taken == 6 and engine.released_sha256 is not None
    assert _same(_params(net.body), body)


# --- 2. BatchMemoryManager: one noisy step, one Poisson batch ------------------------------------------------


@pytest.mark.parametrize("next_pass", ["BatchMemoryManager", "the loader itself", "held iterator"])
def test_a_pass_abandoned_after_a_skipped_physical_batch_is_not_merged_into_the_next(make_session, next_pass):
    """Reviewer's f6 (a): break out of a BatchMemoryManager pass after a skipped physical batch, then start a new pass:
    the partial Poisson batch's clipped gradients would join the next noisy step. Refused before that step's noise;
    the model (which never saw the partial batch) can still be released."""
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, wrapped, dp, loader = _private(s, Net(), epochs=2)
    with BatchMemoryManager(data_loader=loader, max_physical_batch_size=4, optimizer=dp) as memory_loader:
        held = iter(memory_loader)
        for _ in range(3):  # three physical batches of the first Poisson batch (≈ 40 records): all skipped
            x, y = next(held)
            _backward(wrapped, dp, x, y)
            dp.step()
    assert engine.steps_taken == 0
    if next_pass != "held iterator":
        del held  # the pass is abandoned, as after a break
    before, noise_state = _params(wrapped), dp.generator.get_state()
    with pytest.raises(AccountingError, match="only partly stepped"):
        if next_pass == "BatchMemoryManager":
            with BatchMemoryManager(data_loader=loader, max_physical_batch_size=4, optimizer=dp) as again:
                for x, y in again:
                    _backward(wrapped, dp, x, y)
                    dp.step()
        else:
            for x, y in loader:
                _backward(wrapped, dp, x, y)
                dp.step()
    assert engine.steps_taken == 0
    assert _same(_params(wrapped), before) and torch.equal(dp.generator.get_state(), noise_state)
    x, y = next(iter(DataLoader(_data(), batch_size=8)))
    _backward(wrapped, dp, x, y)
    with pytest.raises(AccountingError, match="only partly stepped"):  # the run stays stopped
        dp.step()
    assert engine.release_model() and len(_records(s, "release")) == 1


def test_a_physical_batch_drawn_and_not_stepped_is_refused(make_session):
    """Skipping a physical batch (e.g. an empty one) shifts the skip signals: a later noisy step could span two
    Poisson batches. With a single-process loader this is seen at the next step."""
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, wrapped, dp, loader = _private(s, Net())
    with BatchMemoryManager(data_loader=loader, max_physical_batch_size=4, optimizer=dp) as memory_loader:
        batches = iter(memory_loader)
        next(batches)  # drawn, never stepped
        x, y = next(batches)
        _backward(wrapped, dp, x, y)
        with pytest.raises(AccountingError, match="was not stepped"):
            dp.step()
    assert engine.steps_taken == 0


def test_a_pass_stopped_at_a_poisson_batch_boundary_may_be_followed_by_another(make_session):
    """Breaking right after a noisy step leaves nothing accumulated: the next pass trains on."""
    s = make_session(epsilon=20.0, delta=1e-5)
    engine, wrapped, dp, loader = _private(s, Net(), epochs=2)
    with BatchMemoryManager(data_loader=loader, max_physical_batch_size=4, optimizer=dp) as memory_loader:
        for x, y in memory_loader:
            _backward(wrapped, dp, x, y)
            dp.step()
            if engine.steps_taken == 1 and not dp._is_last_step_skipped:
                break
    assert engine.steps_taken == 1
    with BatchMemoryManager(data_loader=loader, max_physical_batch_size=4, optimizer=dp) as memory_loader:
        for _ in range(2):
            for x, y in memory_loader:
                _backward(wrapped, dp, x, y)
                if engine.steps_taken < 6:
                    dp.step()
    assert engine.steps_taken == 6 and engine.released_sha256 is not None


# --- 3. the run samples with the session's generator -------------------------------------------------------


def _first_batches(make_session, seed: int, loader: DataLoader) -> list[list[int]]:
    s = make_session(epsilon=20.0, delta=1e-5, seed=seed)
    _, _, _, returned = _private(s, Net(), loader=loader, epochs=1)
    return [sorted(int(i) for i in batch) for batch in returned.batch_sampler]


@pytest.mark.parametrize("generator", ["global, seeded", "the user's"])
def test_an_opacus_dpdataloader_samples_with_the_sessions_generator(make_session, generator):
    """Reviewer's f9: after torch.manual_seed(42) a user-built DPDataLoader drew the same batches in every session,
    so which records were in which step followed from a public seed. The run's loader is rebuilt at the same rate,
    number of batches and collate function, sampling with a generator seeded from the session."""

    def user_loader() -> DPDataLoader:
        torch.manual_seed(42)
        user = torch.Generator().manual_seed(42) if generator == "the user's" else None
        return DPDataLoader(_data(), sample_rate=0.25, generator=user, collate_fn=lambda b: torch.utils.data
                            .default_collate(b))

    a, b = _first_batches(make_session, 1, user_loader()), _first_batches(make_session, 2, user_loader())
    assert a != b
    assert a == _first_batches(make_session, 1, user_loader())  # a function of the session's randomness
    s = make_session(epsilon=20.0, delta=1e-5)
    loader = user_loader()
    loader.batch_sampler.steps = 5
    engine, wrapped, dp, returned = _private(s, Net(), loader=loader, epochs=2)
    assert returned is not loader and returned.batch_sampler.generator is not loader.batch_sampler.generator
    assert (engine.run.charge.event.sample_rate, engine.run.charge.event.steps, len(returned)) == (0.25, 10, 5)
    assert returned.collate_fn.wrapped_collator_fn is loader.collate_fn.wrapped_collator_fn
    x, y = next(iter(returned))
    _backward(wrapped, dp, x, y)
    dp.step()
    assert engine.steps_taken == 1


# --- 4. training outside the DP optimizer, toggled or through buffers ----------------------------------------


@pytest.mark.parametrize("body_in_optimizer", [False, True])
def test_a_layer_unfrozen_for_backward_and_refrozen_before_the_step_is_refused(make_session, body_in_optimizer):
    """Reviewer's bypass_toggle_frozen: the body is unfrozen for the forward and backward pass, frozen again before
    the step, a plain optimizer applies its raw gradient and the gradient is zeroed before the DP step, so neither
    "requires gradients but not the optimizer's" nor "frozen while holding a gradient" saw it."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    if body_in_optimizer:  # trainable at make_private (hooked), frozen now
        engine, wrapped, dp, loader = _private(s, net)
    else:  # frozen at make_private, left out of the optimizer
        net.body.requires_grad_(False)
        engine, wrapped, dp, loader = _private(s, net, torch.optim.SGD(net.head.parameters(), lr=0.5))
    plain = torch.optim.SGD(net.body.parameters(), lr=5.0)
    x, y = next(iter(loader))
    dp.zero_grad()
    net.body.requires_grad_(True)
    nn.functional.cross_entropy(wrapped(x), y).backward()
    net.body.requires_grad_(False)
    plain.step()  # the raw gradient
    plain.zero_grad()
    head, noise_state = _params(net.head), dp.generator.get_state()
    with pytest.raises(AccountingError, match=r"\['body.weight', 'body.bias'\] required gradients in a forward"):
        dp.step()
    assert _same(_params(net.head), head) and torch.equal(dp.generator.get_state(), noise_state)
    with pytest.raises(UncoveredRelease, match="required gradients in a forward"):
        engine.release_model()
    assert _records(s, "release") == []


def test_a_layer_unfrozen_for_backward_then_released_early_is_refused(make_session):
    """No DP step after the outside update: the early release checks the forward passes since the last step too."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    net.body.requires_grad_(False)
    engine, wrapped, dp, loader = _private(s, net, torch.optim.SGD(net.head.parameters(), lr=0.5))
    batches = iter(loader)
    x, y = next(batches)
    _backward(wrapped, dp, x, y)
    dp.step()
    net.body.requires_grad_(True)
    x, y = next(batches)
    _backward(wrapped, dp, x, y)
    net.body.requires_grad_(False)
    torch.optim.SGD(net.body.parameters(), lr=5.0).step()
    with pytest.raises(UncoveredRelease, match="required gradients in a forward"):
        engine.release_model()
    assert _records(s, "release") == []


def test_an_evaluation_under_no_grad_before_freezing_a_layer_is_accepted(make_session):
    """Progressive freezing after a validation pass: a forward pass under torch.no_grad() gives no gradient."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    engine, wrapped, dp, loader = _private(s, net, epochs=2)
    for step, (x, y) in enumerate(loader):
        _backward(wrapped, dp, x, y)
        dp.step()
        if step == 0:
            dp.zero_grad()
            with torch.no_grad():
                wrapped(x)
            net.body.requires_grad_(False)
    for x, y in loader:
        _backward(wrapped, dp, x, y)
        dp.step()
    assert engine.steps_taken == 6 and engine.released_sha256 is not None


class _WithBuffer(Net):
    def __init__(self, requires_grad: bool) -> None:
        super().__init__()
        self.register_buffer("shift", torch.zeros(2, requires_grad=requires_grad))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.shift


def test_a_buffer_that_requires_gradients_is_refused(make_session):
    """Reviewer's bypass_buffer_trained_outside: a learnable tensor registered as a buffer (in the released
    state_dict) was trained by a plain optimizer with its raw gradient. Refused at make_private, and at the step when
    the buffer is made trainable afterwards."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = _WithBuffer(requires_grad=True)
    with pytest.raises(InvalidParameter, match=r"buffers \['shift'\] of the module require gradients"):
        _private(s, net)
    assert _records(s, "charge") == []
    net = _WithBuffer(requires_grad=False)
    engine, wrapped, dp, loader = _private(s, net)
    net.shift.requires_grad_(True)
    x, y = next(iter(loader))
    _backward(wrapped, dp, x, y)
    torch.optim.SGD([net.shift], lr=10.0).step()
    with pytest.raises(AccountingError, match=r"buffers \['shift'\] of the module require gradients"):
        dp.step()
    with pytest.raises(UncoveredRelease):
        engine.release_model()
    assert _records(s, "release") == []


# --- 5. skip signals come from Opacus's own BatchSplittingSampler ------------------------------------------------


def test_a_skip_signal_from_a_function_with_a_local_self_is_refused(make_session):
    """Reviewer's bypass_skip_spoof: any function whose local ``self`` was a BatchSplittingSampler over the run's
    sampler could skip, with no Poisson batch attached, so two Poisson batches shared one noise draw."""
    from opacus.utils.batch_memory_manager import BatchSplittingSampler

    s = make_session(epsilon=20.0, delta=1e-5)
    engine, wrapped, dp, loader = _private(s, Net())

    def skip_next(self, optimizer) -> None:  # ``self`` is only a local name here
        optimizer.signal_skip_step(do_skip=True)

    fake = BatchSplittingSampler(sampler=loader.batch_sampler, max_batch_size=10**6, optimizer=dp)
    x, y = next(iter(loader))
    _backward(wrapped, dp, x, y)
    with pytest.raises(AccountingError, match="only BatchMemoryManager splitting one batch"):
        skip_next(fake, dp)
    assert not dp._signals  # nothing queued
    dp.step()
    assert engine.steps_taken == 1  # the step was a noisy one


# --- 6. a layer unfrozen after make_private has no per-example gradient hooks -------------------------------------


def test_a_layer_frozen_at_make_private_and_unfrozen_later_is_refused_clearly(make_session):
    """Reviewer's legit_pe progressive_unfreeze_before: Opacus hooks the layers trainable when it wraps the module;
    an optimizer parameter unfrozen later crashed inside Opacus ("Per sample gradient is not initialized")."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    net.body.requires_grad_(False)
    engine, wrapped, dp, loader = _private(s, net, epochs=2)  # the optimizer holds the frozen body too
    batches = iter(loader)
    x, y = next(batches)
    _backward(wrapped, dp, x, y)
    dp.step()
    net.body.requires_grad_(True)
    x, y = next(batches)
    _backward(wrapped, dp, x, y)
    before, noise_state = _params(net), dp.generator.get_state()
    with pytest.raises(AccountingError, match=r"parameters \['body.weight', 'body.bias'\] were unfrozen after "
                                              r"make_private, in layers that had no trainable parameter"):
        dp.step()
    assert _same(_params(net), before) and torch.equal(dp.generator.get_state(), noise_state)
    assert engine.steps_taken == 1 and engine.release_model()  # the model never received that step


def test_a_parameter_added_to_the_module_after_make_private_is_refused(make_session):
    """A tensor attached after make_private has neither Opacus's hooks nor the guard's; outside the optimizer it could
    be trained by another one (even frozen again before each step), and it is in the released state_dict."""
    s = make_session(epsilon=20.0, delta=1e-5)
    net = Net()
    engine, wrapped, dp, loader = _private(s, net)
    net.head.extra = nn.Parameter(torch.zeros(2), requires_grad=False)
    x, y = next(iter(loader))
    _backward(wrapped, dp, x, y)
    with pytest.raises(AccountingError, match=r"\['head.extra'\] .* added to it after make_private"):
        dp.step()
    with pytest.raises(UncoveredRelease):
        engine.release_model()
