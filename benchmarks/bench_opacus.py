"""One epoch of DP-SGD on Adult: plain Opacus versus the audited ``train_private`` inside a Session.

Both runs use the same data (all 32 561 training records), the same initial weights, the same hyperparameters
(logistic regression, B = 256, C = 1, σ = 1, lr = 2) and seeded generators. Plain Opacus is timed from
``PrivacyEngine.make_private`` to the end of the epoch; the audited run from ``train_private`` to its return
(wrapping, budget admission, the fsynced charge record, the epoch, the model digest, the info and release
records). Opening and closing the Session (ledger creation, certificate, signature, report) are timed separately.
Each measurement is the median of ``REPEATS`` alternating runs.

Run: ``.venv/bin/python benchmarks/bench_opacus.py``
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import Session
from dpaudit.data import load_adult
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.tuning import build_model, evaluate, train_private

BATCH, CLIP, SIGMA, LR, REPEATS = 256, 1.0, 1.0, 2.0, 5


def plain_opacus_epoch(initial: dict, X: torch.Tensor, y: torch.Tensor) -> tuple[float, nn.Module]:
    model = build_model("logreg", X.shape[1], 1)
    model.load_state_dict(initial)
    start = time.perf_counter()
    engine = PrivacyEngine(accountant="rdp")
    module, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
        data_loader=DataLoader(TensorDataset(X, y), batch_size=BATCH), noise_multiplier=SIGMA,
        max_grad_norm=CLIP, poisson_sampling=True, noise_generator=torch.Generator().manual_seed(0),
    )
    criterion = nn.BCEWithLogitsLoss()
    for xb, yb in loader:
        optimizer.zero_grad()
        criterion(module(xb).reshape(-1), yb).backward()
        optimizer.step()
    return time.perf_counter() - start, module.to_standard_module()


def audited_epoch(initial: dict, X: torch.Tensor, y: torch.Tensor, store: Path) -> tuple[float, float, nn.Module]:
    model = build_model("logreg", X.shape[1], 1)
    model.load_state_dict(initial)
    t0 = time.perf_counter()
    session = Session(epsilon=10.0, delta=1e-5, name="bench-opacus", protected=("adult-train",),
                      rng=SeededRandom(0), store=store, mirror=False)
    t1 = time.perf_counter()
    result = train_private(session.for_plugin("bench-opacus", "0"), model, X, y, optimizer="sgd", lr=LR, epochs=1,
                           batch_size=BATCH,
                           max_grad_norm=CLIP, noise_multiplier=SIGMA, label="benchmark")
    t2 = time.perf_counter()
    session.close()
    t3 = time.perf_counter()
    return t2 - t1, (t1 - t0) + (t3 - t2), result.model


def main() -> None:
    warnings.filterwarnings("ignore")  # Opacus's secure-RNG and full-backward-hook notices
    data = load_adult()
    X, y = torch.from_numpy(data.X_train.copy()), torch.from_numpy(data.y_train.copy())
    torch.manual_seed(0)
    initial = build_model("logreg", X.shape[1], 1).state_dict()
    plain, audited, session_overhead = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(REPEATS):
            t, plain_model = plain_opacus_epoch(initial, X, y)
            plain.append(t)
            t, overhead, audited_model = audited_epoch(initial, X, y, Path(tmp))
            audited.append(t)
            session_overhead.append(overhead)
    cpu = torch.device("cpu")
    acc_plain = evaluate(plain_model, data.X_test, data.y_test, cpu)["test_accuracy"]
    acc_audited = evaluate(audited_model, data.X_test, data.y_test, cpu)["test_accuracy"]
    p, a, o = (statistics.median(v) for v in (plain, audited, session_overhead))
    print(f"one epoch of DP-SGD on Adult (n={len(y)}, B={BATCH}, sigma={SIGMA}, C={CLIP}), median of {REPEATS}, "
          f"torch threads={torch.get_num_threads()}")
    print(f"  plain Opacus (make_private + epoch):   {p:.3f} s   test accuracy {acc_plain:.4f}")
    print(f"  audited train_private in a Session:    {a:.3f} s   test accuracy {acc_audited:.4f}")
    print(f"  ratio audited / plain:                 {a / p:.3f}")
    print(f"  session open + close (not in ratio):   {o:.3f} s")


if __name__ == "__main__":
    main()
