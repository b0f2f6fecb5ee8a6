"""Black-box input canaries (dpaudit.audit.blackbox): canaries drawn fairly, scored from the released model only,
trained as ordinary records (the charged q counts them), evidence recomputed by verify.

Statistical checks are exact binomial tests at level ALPHA = 1e-3 with their power stated where used.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from opacus.data_loader import DPDataLoader
from scipy import stats

from dpaudit.audit import blackbox
from dpaudit.audit.blackbox import CanarySlots, InputCanaries, audit_dpsgd_blackbox, draw_input_canaries, margin_scores
from dpaudit.audit.evidence import INPUT, audits
from dpaudit.certificate import charged_events
from dpaudit.ledger import read_records
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.tuning import training
from dpaudit.tuning.models import seeded_model
from dpaudit.verify import verify_bundle
from tests.dpaudit.audit._forge import add_less_noise, forger

ALPHA = 1e-3


def test_canaries_are_binary_images_with_fair_labels_and_bits():
    """m = 4000: a label or bit rate of 0.45 / 0.55 would be rejected with probability > 0.999 (6.3 sd)."""
    drawn = draw_input_canaries(4000, 64, SeededRandom(0))
    assert drawn.X.shape == (4000, 64) and set(np.unique(drawn.X)) == {0.0, 1.0}
    assert stats.binomtest(int(drawn.y.sum()), 4000, 0.5).pvalue > ALPHA
    assert stats.binomtest(int(drawn.members.sum()), 4000, 0.5).pvalue > ALPHA
    assert stats.binomtest(int(drawn.X.sum()), drawn.X.size, 0.5).pvalue > ALPHA
    assert np.array_equal(draw_input_canaries(4000, 64, SeededRandom(0)).X, drawn.X)  # from the rng alone
    flipped = drawn.X.copy()
    flipped[7, 3] = 1 - flipped[7, 3]
    assert InputCanaries(flipped, drawn.y, drawn.members).digest() != drawn.digest()  # the commitment fixes pixels
    assert InputCanaries(drawn.X, 1 - drawn.y, drawn.members).digest() != drawn.digest()   # and labels


def test_the_score_is_the_label_margin_of_the_released_model():
    """A linear model f(x) = w·x + b: the score is (2y − 1)(w·x + b) exactly (a scorer that ignores the label, or
    scores with the wrong sign, differs on the canaries labelled 0 / on all)."""
    model = torch.nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
        model.bias.fill_(0.25)
    X = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=np.float32)
    y = np.array([1, 0, 0], dtype=np.float32)
    scores = margin_scores(model, InputCanaries(X, y, np.array([True, False, True])))
    assert np.allclose(scores, [1.75, 1.25, 0.75])


def _audit(make_session, seed: int, spy=None):
    """Full-batch DP-SGD (q = 1), 100 steps at lr 1.5, of an MLP(64) on 64 digits plus the included ones of 100
    canaries, σ calibrated to ε = 0.5: long enough for a noiseless run to memorise its canaries' labels."""
    session = make_session(epsilon=0.5, delta=1e-5, seed=seed, protected=("digits-train",))
    view = session.for_plugin("dpaudit-audit", "0")
    data = view.data("digits-train")
    X, y = np.asarray(data.X[:64], dtype=np.float32), (np.asarray(data.y[:64]) >= 5).astype(np.float32)
    result = audit_dpsgd_blackbox(view, seeded_model("mlp", 64, 64, seed), X, y, canaries=100, lr=1.5, epochs=100,
                                  batch_size=None, max_grad_norm=1.0, noise_multiplier=None, target_epsilon=0.5,
                                  delta=1e-5)
    session.close()
    return session, result, X


def test_an_audited_run_trains_on_the_included_canaries_and_verifies(make_session, monkeypatch):
    """The run's training set is the real records plus exactly the included canaries (a run that left them out, or
    trained on all of them, is caught by the spy), it is not refuted, verify recomputes the evidence, and a forged
    canary digest or score is caught."""
    seen = {}

    def spy(session, model, loader, **kwargs):
        seen["batch"] = next(iter(loader))  # q = 1: every slot drawn, the empty ones dropped
        return training.train_private_loader(session, model, loader, **kwargs)

    monkeypatch.setattr(blackbox, "train_private_loader", spy)
    session, result, X = _audit(make_session, seed=0)
    canaries = result.canaries
    features, labels = (t.numpy() for t in seen["batch"])
    assert np.array_equal(features, np.concatenate([X, canaries.X[canaries.members]]))
    assert np.array_equal(labels[len(X):], canaries.y[canaries.members])
    report = result.report
    assert result.train.sample_rate == 1.0 and result.train.steps == 100
    assert not report.refuted and 0.49 < report.audit.claimed_epsilon <= 0.5 and report.last_iterate > 0
    verdict = verify_bundle(session.run_dir, allow_not_for_release=True)
    assert verdict.valid, verdict.reasons
    assert any(c.name == "audit" and c.ok for c in verdict.checks)

    records, _ = read_records(session.ledger_path)
    charges = charged_events(records)
    (seq, evidence), = audits(records)
    assert evidence["kind"] == INPUT and evidence["canary_digest"] == canaries.digest()
    forged = forger(records, charges, seq, evidence)

    assert forged() == []
    assert any("match a commitment" in p for p in forged(canary_digest="0" * 64))
    assert any("malformed" in p for p in forged(canary_digest="not hex"))
    perfect = [1.0 if b == "1" else -1.0 for b in evidence["members"]]
    assert any("epsilon_lb_steinke recorded" in p for p in forged(scores=perfect))
    assert any("is not the charged run's" in p for p in forged(steps=10))


def test_a_run_with_almost_no_noise_is_refuted_from_the_final_model_alone(make_session, monkeypatch):
    """DP-SGD that charges σ but adds σ/1000: the model memorises its included canaries' random labels, so the
    label margins separate members from the rest. Measured: f-DP ε_lb 1.41 and 0.91, Steinke 0.84 and 0.55 against
    the certified 0.5 (seeds 0, 1); the verdict (either test) must refute in both."""
    add_less_noise(monkeypatch, 1000)
    for seed in (0, 1):
        _, result, _ = _audit(make_session, seed=seed)
        assert result.report.refuted, result.report.statement()


def _slots(members: np.ndarray) -> CanarySlots:
    """64 real records and 100 canaries, each row's single feature its own name (record i: i, canary j: 1000 + j)."""
    X, y = np.arange(64, dtype=np.float32)[:, None], np.zeros(64, dtype=np.float32)
    canaries = InputCanaries(1000 + np.arange(100, dtype=np.float32)[:, None], np.ones(100, dtype=np.float32), members)
    return CanarySlots(X, y, canaries)


@pytest.mark.parametrize("broken", [False, True])
def test_batches_are_poisson_samples_of_the_actual_records_at_the_public_rate(broken):
    """The loader ranges over n + m = 164 slots at q = 32/164 whatever the bits; its batches hold each of the
    n + Σx ≈ 114 actual records at rate q and never a canary left out. 300 steps: ≈ 6,700 draws (sd ≈ 73); the
    broken loader over the actual records only (the old q = B/(n + Σx) = 0.28) adds ≈ 2,900 draws and is rejected
    with probability ~1."""
    members = draw_input_canaries(100, 1, SeededRandom(7)).members
    data = _slots(members)
    actual = 64 + int(members.sum())
    rate = 32 / (actual if broken else 164)
    loader = DPDataLoader(data, sample_rate=rate, collate_fn=data.collate, generator=torch.Generator().manual_seed(3))
    assert len(data) == 164 and len(loader) == int(1 / rate)
    names = np.concatenate([features.numpy().ravel() for _ in range(60) for features, _ in loader])
    inside = set(range(64)) | {1000 + j for j in np.flatnonzero(members)}
    assert set(names.astype(int)) <= inside                      # a canary left out is never in a batch
    steps = 60 * len(loader)
    assert (stats.binomtest(len(names), steps * actual, 32 / 164).pvalue > ALPHA) == (not broken)
    empty = data.collate([None, None])                            # a batch of empty slots only is an empty batch
    assert empty[0].shape == (0, 1) and empty[1].shape == (0,)


def test_q_sigma_and_size_come_from_the_public_n_and_m_before_the_bits(make_session):
    """Two seeds include different numbers of canaries; both runs charge q = B/(n + m) and the same σ, and record
    the planned size n + m (the reviewer's finding: q = B/(n + Σx) and σ depended on the bits)."""
    charged = []
    for seed in (0, 1):
        session = make_session(epsilon=2.0, delta=1e-5, seed=seed, protected=("digits-train",))
        view = session.for_plugin("dpaudit-audit", "0")
        data = view.data("digits-train")
        X, y = np.asarray(data.X[:64], dtype=np.float32), (np.asarray(data.y[:64]) >= 5).astype(np.float32)
        result = audit_dpsgd_blackbox(view, seeded_model("mlp", 64, 8, seed), X, y, canaries=100, lr=0.5, epochs=1,
                                      batch_size=32, max_grad_norm=1.0, noise_multiplier=None, target_epsilon=2.0,
                                      delta=1e-5)
        session.close()
        records, _ = read_records(session.ledger_path)
        run = next(r.body["info"] for r in records if r.type == "info" and "planned_steps" in r.body["info"])
        charged.append((int(result.canaries.members.sum()), run["sample_rate"], run["noise_multiplier"],
                        run["dataset_size"], result.report.audit.claimed_epsilon))
        assert verify_bundle(session.run_dir, allow_not_for_release=True).valid
    (included_0, *public_0), (included_1, *public_1) = charged
    assert included_0 != included_1 and public_0 == public_1
    assert public_0[0] == 32 / 164 and public_0[2] == 164 and result.train.steps == 5
