"""(c) Your own data, model and training loop with ``make_private`` (the shape of Opacus's tutorial).

    python examples/own_loop_make_private.py            # full size
    python examples/own_loop_make_private.py --smoke    # seconds (run by the test suite, seeded)

The data are the user's own CSV files (written here from scikit-learn's bundled digits, with a stable record id
column); the session loads and checks them when it opens. Opacus users change two lines: ``PrivacyEngine()``
becomes ``dpaudit.PrivacyEngine(session)`` and the data set is read through the session. The whole plan is charged
before the first step; the certificate states the run's (ε, δ) and ``dpaudit verify`` checks it.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader

import dpaudit
from dpaudit.data import as_torch
from dpaudit.display import show
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.verify import verify_bundle

warnings.filterwarnings("ignore", message="Full backward hook is firing")  # Opacus on a first layer (harmless)


def write_csv_files(folder: Path) -> tuple[Path, Path]:
    """The user's files: digits as CSV with an ``id`` column, every fifth record in a public test file."""
    digits = load_digits()
    header = ",".join(["id", *(f"p{i}" for i in range(64)), "label"])
    rows = np.column_stack([np.arange(len(digits.target)), digits.data / 16.0, digits.target])
    test = np.arange(len(rows)) % 5 == 0
    paths = folder / "train.csv", folder / "test.csv"
    for path, part in zip(paths, (rows[~test], rows[test]), strict=True):
        np.savetxt(path, part, delimiter=",", header=header, comments="", fmt="%.6g")
    return paths


def main(smoke: bool, seed: int | None) -> dict:
    epochs = 2 if smoke else 15
    with tempfile.TemporaryDirectory() as folder:
        train_csv, test_csv = write_csv_files(Path(folder))
        data = [dpaudit.data.csv("my-digits", train_csv, target="label", id_column="id", classes=10),
                dpaudit.data.csv("my-digits-test", test_csv, target="label", id_column="id", classes=10,
                                 role="public")]
        with dpaudit.Session(epsilon=3.0, delta=1e-5, name="own-loop", data=data,
                             rng=None if seed is None else SeededRandom(seed), mirror=not smoke) as session:
            train_set = as_torch(session.data("my-digits"))
            X_test, y_test = session.data("my-digits-test").tensors()

            model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
            criterion = nn.CrossEntropyLoss()
            engine = dpaudit.PrivacyEngine(session)
            model, optimizer, train_loader = engine.make_private_with_epsilon(
                module=model, optimizer=optimizer, data_loader=DataLoader(train_set, batch_size=128),
                epochs=epochs, target_epsilon=2.0, max_grad_norm=1.0)
            for _ in range(epochs):
                for x, y in train_loader:
                    optimizer.zero_grad()
                    criterion(model(x), y).backward()
                    optimizer.step()
            with torch.no_grad():
                accuracy = (model(X_test).argmax(1) == y_test).float().mean().item()
            session.log_public_metrics({"test_accuracy": accuracy})
            sigma, run_epsilon = engine.run.noise_multiplier, engine.get_epsilon()
    report = verify_bundle(session.run_dir, allow_not_for_release=seed is not None)
    assert report.valid, report.reasons
    print(f"sigma {sigma:.3f} for target epsilon 2.0 (this run: {show(run_epsilon)})\ntest accuracy {accuracy:.3f}\n"
          f"certified ({show(report.claim['epsilon'])}, {report.claim['delta']:g})-DP, verified: {report.valid}\n"
          f"run {session.run_dir}")
    return {"score": accuracy, "epsilon": report.claim["epsilon"], "run_dir": str(session.run_dir)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny run (seconds)")
    parser.add_argument("--seed", type=int, default=None, help="seeded randomness (reproducible, NOT FOR RELEASE)")
    args = parser.parse_args()
    main(args.smoke, args.seed)
