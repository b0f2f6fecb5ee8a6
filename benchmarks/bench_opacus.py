"""DP-SGD epochs: plain Opacus against the same epoch audited by dpaudit, as ratios measured in the same run.

Three comparisons, each the median of ``--repeats`` alternating runs (1 and 2: in the order plain, audited,
audited, plain, ..., so that neither always runs first) with the same data, initial weights, hyperparameters and
seeded generators:

1. ``make_private`` (issue 10): an MLP (``--features`` → 256 → 256 → 10, multi-class cross-entropy, SGD) on
   synthetic data, n = ``--records``, B = 256, C = 1, σ = 1, one epoch, for Opacus's ``grad_sample_mode`` "hooks" and
   "ghost". Plain: ``opacus.PrivacyEngine().make_private`` to the end of the epoch. Audited:
   ``dpaudit.PrivacyEngine(session).make_private`` (plan, the fsynced charge record) to the end of the epoch
   (including the release after the last step: model digest, info and release records). n is a multiple of B, so
   both loaders draw n/B Poisson batches at q = B/n. The user's loop is the same function for both; it makes no
   host synchronisation per step.
2. The same for the tuning kit's CNN (``build_network("cnn", 784, 10)``: two 5x5 convolutions with 16 and 32
   channels, max-pooling, a linear head; the model of ``examples/mnist_cnn_randtune.py``) on the protected part of
   MNIST-5000, cut to a multiple of B (issue 10, item 6), hooks and ghost (Opacus 1.6 has ghost norms for Linear
   and Embedding only: in ghost mode it still computes the convolutions' per-example gradients to take their norms,
   then runs the second, clipped backward pass).
3. The tuning kit's ``train_private`` on Adult (logistic regression, B = 256, σ = 1, lr = 2) against plain Opacus.

Opening and closing the Session (ledger, certificate, signature, reports) are outside the ratios and printed
separately. Goal: ratios ≤ 1.05. On a CUDA machine the MLP and the CNN run there (``--device``). For 1 and 2
the process CPU time (all threads) of the same spans and its ratio are printed too: on a shared machine it moves
far less than wall time.

Run: ``.venv/bin/python benchmarks/bench_opacus.py [--repeats R] [--records N] [--features D] [--device DEV]
[--threads T] [--only mlp,cnn,adult]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from opacus import PrivacyEngine as OpacusEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import PrivacyEngine, Session
from dpaudit.data import load_adult
from dpaudit.data.catalog import load
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.tuning import build_model, evaluate, train_private
from dpaudit.tuning.networks import build_network

BATCH, CLIP, SIGMA, LR = 256, 1.0, 1.0, 2.0


HIDDEN = 256


def mlp(features: int) -> nn.Module:
    return nn.Sequential(nn.Linear(features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, 10))


def epoch(module: nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader, criterion: Callable,
          device: torch.device) -> None:
    """The user's loop: no ``loss.item()``, so no host synchronisation per step."""
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        criterion(module(x), y).backward()
        optimizer.step()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cnn() -> nn.Module:
    return build_network("cnn", 28 * 28, 10)


def _clock() -> tuple[float, float]:
    """(wall, process CPU) seconds: CPU time (all threads) moves less than wall time on a shared machine."""
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    return tuple(b - a for a, b in zip(start, _clock(), strict=True))


def plain_run(build: Callable[[], nn.Module], initial: dict, data: TensorDataset, mode: str,
              device: torch.device) -> tuple[float, float]:
    model = build().to(device)
    model.load_state_dict(initial)
    _sync(device)
    start = _clock()
    made = OpacusEngine(accountant="rdp").make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=DataLoader(data, batch_size=BATCH), noise_multiplier=SIGMA, max_grad_norm=CLIP,
        poisson_sampling=True, noise_generator=torch.Generator(device=device).manual_seed(0),
        grad_sample_mode=mode, criterion=nn.CrossEntropyLoss())
    criterion = made[2] if mode == "ghost" else nn.CrossEntropyLoss()
    epoch(made[0], made[1], made[-1], criterion, device)
    _sync(device)
    return _since(start)


def audited_run(build: Callable[[], nn.Module], initial: dict, data: TensorDataset, mode: str, device: torch.device,
                store: Path, protected: str) -> tuple[tuple[float, float], float]:
    model = build().to(device)
    model.load_state_dict(initial)
    t0 = time.perf_counter()
    session = Session(epsilon=10.0, delta=1e-5, name="bench-make-private", protected=(protected,),
                      rng=SeededRandom(0), store=store, mirror=False)
    _sync(device)
    t1 = time.perf_counter()
    start = _clock()
    engine = PrivacyEngine(session)
    made = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        data_loader=DataLoader(data, batch_size=BATCH), noise_multiplier=SIGMA, max_grad_norm=CLIP, epochs=1,
        grad_sample_mode=mode, **({"criterion": nn.CrossEntropyLoss()} if mode == "ghost" else {}))
    criterion = made[2] if mode == "ghost" else nn.CrossEntropyLoss()
    epoch(made[0], made[1], made[-1], criterion, device)
    _sync(device)
    span = _since(start)
    t2 = time.perf_counter()
    assert engine.released_sha256 is not None  # released after the last step, inside the timed span
    session.close()
    t3 = time.perf_counter()
    return span, (t1 - t0) + (t3 - t2)


def plain_adult(initial: dict, X: torch.Tensor, y: torch.Tensor) -> tuple[float, nn.Module]:
    model = build_model("logreg", X.shape[1], 1)
    model.load_state_dict(initial)
    start = time.perf_counter()
    module, optimizer, loader = OpacusEngine(accountant="rdp").make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
        data_loader=DataLoader(TensorDataset(X, y), batch_size=BATCH), noise_multiplier=SIGMA,
        max_grad_norm=CLIP, poisson_sampling=True, noise_generator=torch.Generator().manual_seed(0))
    criterion = nn.BCEWithLogitsLoss()
    epoch(module, optimizer, loader, lambda out, target: criterion(out.reshape(-1), target), torch.device("cpu"))
    return time.perf_counter() - start, module.to_standard_module()


def audited_adult(initial: dict, X: torch.Tensor, y: torch.Tensor, store: Path) -> tuple[float, float, nn.Module]:
    model = build_model("logreg", X.shape[1], 1)
    model.load_state_dict(initial)
    t0 = time.perf_counter()
    session = Session(epsilon=10.0, delta=1e-5, name="bench-opacus", protected=("adult-train",),
                      rng=SeededRandom(0), store=store, mirror=False)
    t1 = time.perf_counter()
    result = train_private(session.for_plugin("bench-opacus", "0"), model, X, y, optimizer="sgd", lr=LR, epochs=1,
                           batch_size=BATCH, max_grad_norm=CLIP, noise_multiplier=SIGMA, label="benchmark")
    t2 = time.perf_counter()
    session.close()
    t3 = time.perf_counter()
    return t2 - t1, (t1 - t0) + (t3 - t2), result.model


def bench_make_private(label: str, build: Callable[[], nn.Module], data: TensorDataset, protected: str,
                       args: argparse.Namespace, store: Path) -> None:
    """Plain against audited ``make_private`` epochs of ``build()``'s model on ``data``, hooks then ghost."""
    device = torch.device(args.device)
    n = len(data)
    torch.manual_seed(0)
    initial = build().state_dict()
    print(f"one epoch of make_private on {label} (n={n}, B={BATCH}, {n // BATCH} steps, sigma={SIGMA}, C={CLIP}) "
          f"on {device}, median of {args.repeats}, torch threads={torch.get_num_threads()}", flush=True)
    for mode in ("hooks", "ghost"):
        plain, audited, overhead = [], [], []
        plain_run(build, initial, data, mode, device)  # warm-up (allocator, kernels), not timed
        for r in range(args.repeats):  # ABBA: plain first in even repeats, audited first in odd ones
            if r % 2 == 0:
                plain.append(plain_run(build, initial, data, mode, device))
            t, o = audited_run(build, initial, data, mode, device, store, protected)
            audited.append(t)
            overhead.append(o)
            if r % 2 == 1:
                plain.append(plain_run(build, initial, data, mode, device))
        p, pc = (statistics.median(span[i] for span in plain) for i in (0, 1))
        a, ac = (statistics.median(span[i] for span in audited) for i in (0, 1))
        print(f"  {mode:5s}  plain Opacus {p:.3f} s   audited {a:.3f} s   ratio audited / plain {a / p:.3f}   "
              f"CPU time {pc:.3f} s vs {ac:.3f} s, ratio {ac / pc:.3f}   "
              f"(session open + close, not in ratio: {statistics.median(overhead):.3f} s)", flush=True)


def bench_mlp(args: argparse.Namespace, store: Path) -> None:
    g = torch.Generator().manual_seed(0)
    n = args.records - args.records % BATCH
    data = TensorDataset(torch.randn(n, args.features, generator=g), torch.randint(0, 10, (n,), generator=g))
    bench_make_private(f"an MLP ({args.features}-{HIDDEN}-{HIDDEN}-10)", lambda: mlp(args.features), data,
                       "synthetic", args, store)


def bench_cnn(args: argparse.Namespace, store: Path) -> None:
    X, y = load("mnist-5000-train", {}).tensors()
    n = len(y) - len(y) % BATCH
    bench_make_private("the tuning kit's CNN on MNIST-5000 (16-32 channels)", cnn, TensorDataset(X[:n], y[:n]),
                       "mnist-5000-train", args, store)


def bench_adult(args: argparse.Namespace, store: Path) -> None:
    data = load_adult()
    X, y = torch.from_numpy(data.X_train.copy()), torch.from_numpy(data.y_train.copy())
    torch.manual_seed(0)
    initial = build_model("logreg", X.shape[1], 1).state_dict()
    plain, audited, overhead = [], [], []
    for _ in range(args.repeats):
        t, plain_model = plain_adult(initial, X, y)
        plain.append(t)
        t, o, audited_model = audited_adult(initial, X, y, store)
        audited.append(t)
        overhead.append(o)
    cpu = torch.device("cpu")
    acc_plain = evaluate(plain_model, data.X_test, data.y_test, cpu)["test_accuracy"]
    acc_audited = evaluate(audited_model, data.X_test, data.y_test, cpu)["test_accuracy"]
    p, a, o = (statistics.median(v) for v in (plain, audited, overhead))
    print(f"one epoch of train_private on Adult (n={len(y)}, B={BATCH}, sigma={SIGMA}, C={CLIP}), median of "
          f"{args.repeats}")
    print(f"  plain Opacus {p:.3f} s (test accuracy {acc_plain:.4f})   audited {a:.3f} s (test accuracy "
          f"{acc_audited:.4f})   ratio audited / plain {a / p:.3f}   (session open + close, not in ratio: {o:.3f} s)")


BENCHES = {"mlp": bench_mlp, "cnn": bench_cnn, "adult": bench_adult}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--records", type=int, default=5120)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default torch's; 1 on a loaded machine: no OpenMP spin-waiting)")
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated subset of: " + ", ".join(BENCHES))
    args = parser.parse_args()
    chosen = args.only.split(",")
    unknown = sorted(set(chosen) - set(BENCHES))
    if unknown:
        parser.error(f"--only: unknown {unknown}, choose from {list(BENCHES)}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # Opacus's secure-RNG and full-backward-hook notices
    with tempfile.TemporaryDirectory() as tmp:
        for name in BENCHES:
            if name in chosen:
                BENCHES[name](args, Path(tmp))


if __name__ == "__main__":
    main()
