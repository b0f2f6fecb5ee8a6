"""The closed-form linear DP-SGD / DP-Adam trainer: ℓ' equals autograd's derivative, the compiled step kernel equals a
direct transcription of the math (per-example gradients, flat clipping, noise, SGD / Adam) on small cases and a kernel
with a broken clip or without noise fails that comparison, the trainer equals the transcription on the batches and
noise replayed from its seed, Poisson sampling is the geometric-gap construction and has the Binomial law (and a
fixed-size sampler is caught), and every run is charged and claimed before it touches a record, never runs past its
charged steps, and is recorded."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpaudit.coverage import UncoveredRelease
from dpaudit.errors import AccountingError, InvalidParameter, PluginError
from dpaudit.ledger import read_records
from dpaudit_plugins.dpareto.linear_dpsgd import (
    LinearJob,
    LinearTrial,
    SparseRows,
    StepCap,
    fit_linear,
    poisson_epoch,
    train_linear,
)
from dpaudit_plugins.dpareto.linear_kernel import LOSS_CODES, loss_slope, run_epoch

PUBLIC = "adult-a1a-test (public)"
PROTECTED = "adult-a1a-train"
EXACT = 1e-12  # the kernel and the transcription do the same float64 arithmetic, up to the order of sums


@pytest.mark.parametrize("loss", ["logistic", "hinge"])
def test_loss_slope_equals_autograd(loss):
    gen = torch.Generator().manual_seed(0)
    z = torch.cat([torch.randn(64, generator=gen, dtype=torch.float64) * 4, torch.tensor([-800.0, 800.0, 0.3])])
    y = (torch.rand(len(z), generator=gen) < 0.5).to(torch.float64)
    for zi, yi in zip(z, y, strict=True):
        v = zi.clone().requires_grad_(True)
        if loss == "logistic":
            value = torch.nn.functional.binary_cross_entropy_with_logits(v, yi)
        else:
            value = torch.clamp(1 - (2 * yi - 1) * v, min=0)
        (grad,) = torch.autograd.grad(value, v)
        assert loss_slope(float(zi), float(yi), LOSS_CODES[loss]) == pytest.approx(float(grad), abs=1e-15)


def _transcription(X, y, batches, noise, *, loss, optimizer, lr, sigma, clip, batch_size, R):
    """Abadi et al. 2016, Alg. 1 (and Adam, Avent et al. 2020, Alg. 4) written out: each included record's gradient
    ℓ'·x̃ formed, scaled to norm ≤ C, summed; σC·ξ added; divided by B; SGD or Adam. ``batches[t]``: the step's
    (replication, record) pairs; ``noise[t]``: its (R, d + 1) standard normal draws."""
    Xt = np.hstack([np.asarray(X, dtype=np.float64), np.ones((len(X), 1))])
    y = np.asarray(y, dtype=np.float64)
    W, mu, nu = np.zeros((R, Xt.shape[1])), np.zeros((R, Xt.shape[1])), np.zeros((R, Xt.shape[1]))
    for t, batch in enumerate(batches):
        step = t + 1
        for r in range(R):
            total = np.zeros(Xt.shape[1])
            for i in [i for rr, i in batch if rr == r]:
                z = float(Xt[i] @ W[r])
                if loss == "logistic":
                    slope = 1 / (1 + math.exp(-z)) - y[i]
                else:
                    sign = 2 * y[i] - 1
                    slope = -sign if sign * z < 1 else 0.0
                g = slope * Xt[i]
                norm = float(np.linalg.norm(g))
                total += g * min(1.0, clip / norm) if norm > 0 else g
            g = (total + sigma * clip * noise[t][r]) / batch_size
            if optimizer == "sgd":
                W[r] -= lr * g
            else:
                mu[r] = 0.9 * mu[r] + 0.1 * g
                nu[r] = 0.999 * nu[r] + 0.001 * g * g
                W[r] -= lr * (mu[r] / (1 - 0.9**step)) / (np.sqrt(nu[r] / (1 - 0.999**step)) + 1e-8)
    return W


def _small_case(seed: int, binary: bool):
    rng = np.random.default_rng(seed)
    n, d, R, steps = 40, 6, 3, 7
    X = (rng.random((n, d)) < 0.4).astype(np.float64)
    if not binary:
        X *= rng.normal(size=(n, d)) * 2
    y = (rng.random(n) < 0.5).astype(np.float64)
    batches = []
    for _ in range(steps):
        pairs = sorted({(int(rng.integers(R)), int(rng.integers(n))) for _ in range(int(rng.integers(0, 12)))})
        batches.append(pairs)
    noise = rng.normal(size=(steps, R, d + 1))
    return X, y, batches, noise, R


def _kernel(X, y, batches, noise, R, *, loss, optimizer, lr, sigma, clip, batch_size, binary=None, bounds=None):
    rows = SparseRows.from_dense(X)
    W = np.zeros((R, rows.width))
    mu, nu = np.zeros_like(W), np.zeros_like(W)
    offsets = np.cumsum([0] + [len(b) for b in batches]).astype(np.int64)
    replication = np.array([r for b in batches for r, _ in b], dtype=np.int64)
    record = np.array([i for b in batches for _, i in b], dtype=np.int64)
    run_epoch(W, mu, nu, 1, rows.cols, rows.vals, rows.lengths, rows.binary if binary is None else binary, y,
              clip / rows.norms() if bounds is None else bounds, offsets, replication, record, noise, sigma * clip,
              float(batch_size), lr, LOSS_CODES[loss], optimizer == "adam")
    return W


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("loss", ["logistic", "hinge"])
def test_the_kernel_equals_the_transcription_and_a_broken_kernel_does_not(loss, optimizer, binary):
    """Same batches, same noise: the same weights to 1e-12. Attack: the kernel run with the clamp at C instead of
    C/‖x̃‖ (gradients of norm up to C·‖x̃‖ > C), or without the noise, is off by far more than the tolerance; so is
    the general (non-binary) path if it disagreed with the binary one."""
    X, y, batches, noise, R = _small_case(seed=11 + binary, binary=binary)
    hyper = {"loss": loss, "optimizer": optimizer, "lr": 0.3, "sigma": 0.8, "clip": 0.4, "batch_size": 4}
    expected = _transcription(X, y, batches, noise, R=R, **hyper)
    assert SparseRows.from_dense(X).binary is binary
    np.testing.assert_allclose(_kernel(X, y, batches, noise, R, **hyper), expected, rtol=0, atol=EXACT)
    if binary:  # the general path on the same binary rows: the same weights
        np.testing.assert_allclose(_kernel(X, y, batches, noise, R, binary=False, **hyper), expected, rtol=0,
                                   atol=EXACT)
    broken_clip = _kernel(X, y, batches, noise, R, bounds=np.full(len(X), hyper["clip"]), **hyper)
    no_noise = _kernel(X, y, batches, np.zeros_like(noise), R, **hyper)
    for broken in (broken_clip, no_noise):
        assert np.abs(broken - expected).max() > 1e-4


def _replayed_batches(seed, trial, n, R, width):
    """The batches and noise ``fit_linear`` draws from its seed, epoch by epoch, in its order."""
    plan = trial.plan(n)
    generator = torch.Generator().manual_seed(seed)
    batches, noise = [], []
    for _ in range(plan.epochs):
        offsets, replication, record = poisson_epoch(generator, steps=plan.steps_per_epoch, replications=R, n=n,
                                                     q=plan.sample_rate)
        noise.append(torch.randn(plan.steps_per_epoch, R, width, generator=generator, dtype=torch.float64).numpy())
        batches += [list(zip(replication[a:b].tolist(), record[a:b].tolist(), strict=True))
                    for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    return batches, np.concatenate(noise)


@pytest.mark.parametrize(("loss", "optimizer"),
                         [("logistic", "sgd"), ("logistic", "adam"), ("hinge", "sgd"), ("hinge", "adam")])
def test_the_trainer_equals_the_transcription_on_its_seeded_batches_and_noise(loss, optimizer):
    """End to end (sparse rows, bounds C/‖x̃‖, noise σC, divisor B, Adam's step count across epochs): the trainer's
    weights are the transcription's on the batches and noise replayed from the seed, the noise drawn in float64 (a
    float32 draw, whose pairs come from 24-bit uniforms and never pass √(48 ln 2) ≈ 5.77σ, fails this: found in
    review). Attack: a trainer that dropped
    the noise or clamped at C would be that far from them."""
    X, y = _separable(n=120)
    trial = LinearTrial(loss, optimizer, epochs=3, batch_size=10, lr=0.2, noise_multiplier=0.7, max_grad_norm=0.5)
    R = 2
    fit = fit_linear(LinearJob(trial, trial.plan(len(X)), R, X, y, X, y), seed=9)
    batches, noise = _replayed_batches(9, trial, len(X), R, X.shape[1] + 1)
    assert fit.steps == len(batches) == 36
    hyper = {"loss": loss, "optimizer": optimizer, "lr": 0.2, "sigma": 0.7, "clip": 0.5, "batch_size": 10, "R": R}
    expected = _transcription(X, y, batches, noise, **hyper)
    np.testing.assert_allclose(fit.weights, expected, rtol=0, atol=EXACT)
    assert np.abs(_transcription(X, y, batches, 0 * noise, **hyper) - fit.weights).max() > 1e-4


def test_sparse_rows_hold_each_row_and_its_bias():
    rng = np.random.default_rng(2)
    X = (rng.random((30, 9)) < 0.3) * rng.normal(size=(30, 9))
    X[4] = 0
    rows = SparseRows.from_dense(X.astype(np.float32))
    dense = np.zeros((30, 10))
    for i in range(30):
        np.add.at(dense[i], rows.cols[i, :rows.lengths[i]], rows.vals[i, :rows.lengths[i]])
    np.testing.assert_array_equal(dense, np.hstack([X.astype(np.float32), np.ones((30, 1))]))
    assert rows.cols.dtype == np.uint8 and rows.lengths[4] == 1 and not rows.binary
    np.testing.assert_allclose(rows.norms(), np.linalg.norm(dense, axis=1), rtol=1e-15)
    assert SparseRows.from_dense((X != 0).astype(np.float64)).binary


def _geometric_reference(generator, *, steps, replications, n, q):
    """The construction written with torch alone: Geometric(q) gaps by ``torch.Tensor.geometric_`` from the same
    generator, their cumulative sums, decoded into (step, replication, record)."""
    total = steps * replications * n
    positions, last = [], -1
    while last < total:
        expected = (total - last) * q
        gaps = torch.empty(int(expected + 6 * math.sqrt(expected) + 16), dtype=torch.float64).geometric_(
            q, generator=generator)
        positions.append(last + torch.cumsum(gaps.to(torch.int64), 0))
        last = int(positions[-1][-1])
    pos = torch.cat(positions)
    pos = pos[pos < total]
    step, rest = pos // (replications * n), pos % (replications * n)
    offsets = torch.searchsorted(step, torch.arange(steps + 1, dtype=torch.int64))
    return offsets.numpy(), (rest // n).numpy(), (rest % n).numpy()


@pytest.mark.parametrize(("steps", "replications", "n", "q"),
                         [(60, 10, 3000, 0.017), (5, 3, 7, 0.3), (40, 2, 500, 1e-3)])
def test_poisson_sampling_is_the_geometric_gap_construction(steps, replications, n, q):
    """The same pairs, in the same order, as ``geometric_``'s gaps from the same seeded generator."""
    ours = poisson_epoch(torch.Generator().manual_seed(4), steps=steps, replications=replications, n=n, q=q)
    reference = _geometric_reference(torch.Generator().manual_seed(4), steps=steps, replications=replications, n=n,
                                     q=q)
    for a, b in zip(ours, reference, strict=True):
        np.testing.assert_array_equal(a, b)


def _fixed_size_epoch(generator, *, steps, replications, n, q):
    """A deliberately broken sampler: exactly round(q·n) records per step (the paper's fixed-size batches)."""
    b = round(q * n)
    record = torch.cat([torch.randperm(n, generator=generator)[:b] for _ in range(steps * replications)])
    replication = torch.arange(replications).repeat_interleave(b).repeat(steps)
    return torch.arange(steps + 1) * replications * b, replication, record


def _dispersion(sampler, seed: int) -> tuple[float, float]:
    """(z-score of the total count against Binomial(S·R·n, q), variance/mean(1−q) of the per-(step, replication)
    counts) over 200 steps × 4 replications of n = 1000 records at q = 0.02."""
    n, q, steps, reps = 1000, 0.02, 200, 4
    offsets, replication, record = (torch.as_tensor(a) for a in sampler(
        torch.Generator().manual_seed(seed), steps=steps, replications=reps, n=n, q=q))
    step = torch.repeat_interleave(torch.arange(steps), offsets[1:] - offsets[:-1])
    counts = torch.bincount(step * reps + replication, minlength=steps * reps).double()
    total = steps * reps * n
    z = (float(counts.sum()) - total * q) / math.sqrt(total * q * (1 - q))
    assert len(torch.unique(step * reps * n + replication * n + record)) == len(record)  # no pair twice
    return z, float(counts.var() / (counts.mean() * (1 - q)))


def test_poisson_sampling_has_the_binomial_law():
    """Seeded test: per-(step, replication) counts are Binomial(n, q) (z of the total within ±4; variance ratio of
    800 counts within [0.8, 1.2], its standard error ≈ 0.05, so a false alarm has probability < 1e-4). The broken
    fixed-size sampler has variance ratio 0: caught with certainty."""
    z, ratio = _dispersion(poisson_epoch, seed=3)
    assert abs(z) < 4 and 0.8 < ratio < 1.2
    _, broken = _dispersion(_fixed_size_epoch, seed=3)
    assert broken < 0.8


def test_step_cap_refuses_the_step_past_the_charge():
    cap = StepCap(2)
    assert cap.take() == 1
    cap.take()
    with pytest.raises(AccountingError, match="exceeds the 2 steps charged"):
        cap.take()
    epochs = StepCap(5)
    assert epochs.take(3) == 1
    with pytest.raises(AccountingError, match="step 6 exceeds the 5 steps charged"):
        epochs.take(3)  # an epoch that would run past the charge is refused whole, before any of its steps
    assert epochs.taken == 3 and epochs.take(2) == 4


def _separable(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = (rng.random((n, 12)) < 0.4).astype(np.float32)
    y = (X[:, 0] > 0.5).astype(np.float32)
    return X, y


def _session(make_session, epsilon: float = 1e6):
    return make_session(epsilon, 1e-3, protected=(PROTECTED,), public=(PUBLIC,))


def test_a_run_is_charged_before_and_recorded_after(make_session):
    X, y = _separable()
    trial = LinearTrial("logistic", "sgd", epochs=3, batch_size=30, lr=0.5, noise_multiplier=0.5, max_grad_norm=1.0)
    with _session(make_session) as session:
        view = session.for_plugin("dpareto", "test")
        charges = tuple(view.charge(trial.event(len(X)), mechanism="dpareto-trial") for _ in range(2))
        run = train_linear(view, charges, trial, X, y, X, y, seed=5)
        assert run.steps == 3 * (600 // 30) and run.weights.shape == (2, 13)
        assert run.error < 0.2  # learns the one informative feature despite the noise
        with pytest.raises(UncoveredRelease, match="already ran"):
            train_linear(view, charges, trial, X, y, X, y, seed=6)  # a charge covers one run
    records, _ = read_records(session.ledger_path)
    charge_seqs = {c.seq for c in charges}
    charged = [r.seq for r in records if r.type == "charge" and r.seq in charge_seqs]
    infos = [r for r in records if r.type == "info" and r.body.get("info", {}).get("charge_seq") in charge_seqs]
    releases = [r for r in records if r.type == "release"]
    assert len(charged) == 2 and len(infos) == 2 and len(releases) == 2
    assert max(charged) < min(r.seq for r in infos + releases)  # charged before anything of the run is written
    assert {info.body["info"]["realised_steps"] for info in infos} == {60}


def test_a_charge_for_fewer_steps_is_refused_before_training(make_session):
    X, y = _separable()
    short = LinearTrial("hinge", "adam", epochs=1, batch_size=30, lr=0.01, noise_multiplier=1.0, max_grad_norm=1.0)
    long = LinearTrial("hinge", "adam", epochs=2, batch_size=30, lr=0.01, noise_multiplier=1.0, max_grad_norm=1.0)
    with _session(make_session) as session:
        view = session.for_plugin("dpareto", "test")
        charge = view.charge(short.event(len(X)), mechanism="dpareto-trial")
        with pytest.raises(PluginError, match="not dominated"):
            train_linear(view, (charge,), long, X, y, X, y, seed=0)
        run = train_linear(view, (charge,), short, X, y, X, y, seed=0)  # unclaimed: still usable for its own run
        assert run.steps == 20


def test_a_charge_of_another_session_is_refused(make_session):
    X, y = _separable()
    trial = LinearTrial("logistic", "adam", epochs=1, batch_size=30, lr=0.01, noise_multiplier=1.0,
                        max_grad_norm=1.0)
    with _session(make_session) as first:
        charge = first.for_plugin("dpareto", "test").charge(trial.event(len(X)), mechanism="dpareto-trial")
    with _session(make_session, 1e5) as second, pytest.raises(PluginError, match="not made by this session"):
        train_linear(second.for_plugin("dpareto", "test"), (charge,), trial, X, y, X, y, seed=0)


class _Untouchable:
    """Features whose shape is public but whose records must not be read (reading them fails the test)."""

    def __init__(self, X: np.ndarray) -> None:
        self.shape = X.shape

    def __array__(self, *args, **kwargs):
        raise AssertionError("a record was read before the charges were checked and claimed")


def test_no_record_is_read_before_the_charges_are_checked(make_session):
    X, y = _separable()
    trial = LinearTrial("logistic", "sgd", epochs=1, batch_size=30, lr=0.1, noise_multiplier=1.0, max_grad_norm=1.0)
    with _session(make_session) as first:
        charge = first.for_plugin("dpareto", "test").charge(trial.event(len(X)), mechanism="dpareto-trial")
    with _session(make_session, 1e5) as second, pytest.raises(PluginError, match="not made by this session"):
        train_linear(second.for_plugin("dpareto", "test"), (charge,), trial, _Untouchable(X), y, X, y, seed=0)


def test_a_full_batch_is_refused_before_anything_is_charged():
    """Review: B = n (q = 1) passed the plan and crashed after the charges were claimed (log1p(−1))."""
    trial = LinearTrial("logistic", "sgd", epochs=1, batch_size=120, lr=0.1, noise_multiplier=1.0, max_grad_norm=1.0)
    with pytest.raises(InvalidParameter, match="below the 120 training records"):
        trial.plan(120)
    assert trial.plan(121).sample_rate < 1
