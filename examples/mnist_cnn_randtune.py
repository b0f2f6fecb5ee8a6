"""(a) A 10-class CNN on MNIST-5000, tuned with randtune and trained with DP-SGD, its certificate verified.

    python examples/mnist_cnn_randtune.py            # full size
    python examples/mnist_cnn_randtune.py --smoke    # a few seconds (the test suite runs this, seeded)

The user writes two functions: ``train(trial)`` (build the model, ``trial.make_private``, the usual loop) and
``score(model)`` (accuracy on the PUBLIC test split). ``dpaudit.tune`` draws the candidates, charges one
repeat-and-select before anything is trained (Papernot & Steinke 2022), runs K hidden repetitions and releases the
best; the session's certificate states the (ε, δ) of the whole run.
"""

from __future__ import annotations

import argparse
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader

import dpaudit
from dpaudit.display import show
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.verify import verify_bundle

warnings.filterwarnings("ignore", message="Full backward hook is firing")  # Opacus on a first layer (harmless)


class CNN(nn.Module):
    """Two 5x5 convolutions and a linear head; no batch-mixing layer (Opacus ModuleValidator accepts it)."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, channels, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(channels, 2 * channels, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Flatten(), nn.Linear(2 * channels * 7 * 7, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.reshape(-1, 1, 28, 28))


def main(smoke: bool, seed: int | None) -> dict:
    space = dpaudit.SearchSpace.from_mapping({"design": "sobol", "samples": 2 if smoke else 8, "parameters": {
        "lr": {"low": 1e-3, "high": 1e-2, "log": True},
        "max_grad_norm": {"low": 0.5, "high": 2.0, "log": True},
        "batch_size": 512 if smoke else 128, "epochs": 1 if smoke else 4, "noise_multiplier": 1.0}})
    with dpaudit.Session(epsilon=10.0, delta=1e-5, name="mnist-cnn-randtune", protected=["mnist-5000-train"],
                         public=["mnist-5000-test"], rng=None if seed is None else SeededRandom(seed),
                         mirror=not smoke) as session:
        X_test, y_test = (t.to(session.device) for t in session.data("mnist-5000-test").tensors())

        def train(trial):
            model = CNN(channels=4 if smoke else 16).to(trial.device)
            optimizer = torch.optim.Adam(model.parameters(), lr=trial.params["lr"])
            model, optimizer, loader = trial.make_private(
                module=model, optimizer=optimizer,
                data_loader=DataLoader(trial.dataset, batch_size=trial.params["batch_size"]))
            for _ in range(trial.params["epochs"]):
                for x, y in loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x.to(trial.device)), y.to(trial.device)).backward()
                    optimizer.step()
            return model

        def accuracy(model) -> float:
            with torch.no_grad():
                return (model(X_test).argmax(1) == y_test).float().mean().item()

        result = dpaudit.tune(session, "randtune", space=space, train=train, score=accuracy, score_range=(0.0, 1.0),
                              dataset="mnist-5000-train", gamma=0.8 if smoke else 0.2)
    report = verify_bundle(session.run_dir, allow_not_for_release=seed is not None)
    assert report.valid, report.reasons
    claim = report.claim
    print(f"selected {result.selected}\ntest accuracy {result.score:.3f}\ncertified ({show(claim['epsilon'])}, "
          f"{claim['delta']:g})-DP, verified: {report.valid}\nrun {session.run_dir}")
    return {"score": result.score, "epsilon": claim["epsilon"], "run_dir": str(session.run_dir)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny run (seconds)")
    parser.add_argument("--seed", type=int, default=None, help="seeded randomness (reproducible, NOT FOR RELEASE)")
    args = parser.parse_args()
    main(args.smoke, args.seed)
