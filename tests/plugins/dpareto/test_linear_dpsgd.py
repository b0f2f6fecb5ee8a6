"""The closed-form linear DP-SGD / DP-Adam trainer: per-example gradients equal autograd's, the clipped sum equals
explicit clipping, Poisson sampling has the Binomial law (and a fixed-size sampler is caught), and every run is
charged and claimed before it touches a record, never runs past its charged steps, and is recorded."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpaudit.coverage import UncoveredRelease
from dpaudit.errors import AccountingError, PluginError
from dpaudit.ledger import read_records
from dpaudit_plugins.dpareto.linear_dpsgd import (
    LinearTrial,
    SparseRows,
    StepCap,
    clipped_gradient_sums,
    per_example_gradients,
    poisson_epoch,
    train_linear,
)

PUBLIC = "adult-a1a-test (public)"
PROTECTED = "adult-a1a-train"


@pytest.mark.parametrize("loss", ["logistic", "hinge"])
def test_per_example_gradients_equal_autograd(loss):
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(32, 7, generator=gen, dtype=torch.float64)
    y = (torch.rand(32, generator=gen) < 0.5).to(torch.float64)
    w = torch.randn(8, generator=gen, dtype=torch.float64)
    ours = per_example_gradients(w, X, y, loss)
    for i in range(len(X)):
        v = w.clone().requires_grad_(True)
        z = X[i] @ v[:-1] + v[-1]
        if loss == "logistic":
            value = torch.nn.functional.binary_cross_entropy_with_logits(z, y[i])
        else:
            value = torch.clamp(1 - (2 * y[i] - 1) * z, min=0)
        (grad,) = torch.autograd.grad(value, v)
        torch.testing.assert_close(ours[i], grad)


@pytest.mark.parametrize("loss", ["logistic", "hinge"])
def test_clipped_sums_equal_explicit_clipping(loss):
    rng = np.random.default_rng(1)
    X = (rng.random((50, 9)) < 0.3).astype(np.float32) * rng.normal(size=(50, 9)).astype(np.float32)
    y = torch.from_numpy((rng.random(50) < 0.5).astype(np.float32))
    rows = SparseRows.from_dense(X)
    R, clip = 3, 0.7
    W = torch.from_numpy(rng.normal(size=(R, 10)).astype(np.float32))
    record = torch.from_numpy(rng.integers(0, 50, 40))
    replication = torch.from_numpy(rng.integers(0, R, 40))
    flat = replication[:, None] * rows.width + rows.cols[record]
    ours = clipped_gradient_sums(W, flat, rows.vals[record], y[record], clip / rows.norms()[record], loss)
    expected = torch.zeros(R, 10)
    for j in range(40):
        g = per_example_gradients(W[replication[j]], torch.from_numpy(X[record[j]][None]), y[record[j]][None], loss)[0]
        expected[replication[j]] += g * min(1.0, clip / max(float(g.norm()), 1e-30))
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


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
    offsets, replication, record = sampler(torch.Generator().manual_seed(seed), steps=steps, replications=reps,
                                           n=n, q=q)
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
    cap.take()
    cap.take()
    with pytest.raises(AccountingError, match="exceeds the 2 steps charged"):
        cap.take()


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
