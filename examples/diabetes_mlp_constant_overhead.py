"""(b) A regression MLP on scikit-learn's diabetes set, selected by RMSE through constant-overhead selection
(Ding et al. 2023) and trained with DP-SGD, its certificate verified.

    python examples/diabetes_mlp_constant_overhead.py            # full size
    python examples/diabetes_mlp_constant_overhead.py --smoke    # seconds (run by the test suite, seeded)

The objective is RMSE on the PUBLIC test split with a declared range [0, 200] (smaller is better): constant-overhead
rescales it to a utility in [0, 1] whose partition average has sensitivity 1/k, so the range, not the data, fixes
the scale of the AboveThreshold noise. The same run as a study file: examples/diabetes_study.toml.
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

#: public constants: the diabetes target (disease progression) lies in [25, 346] per its documentation; the model
#: predicts (y - centre) / scale, with the centre the documented range's midpoint (never a statistic of the data)
TARGET_CENTRE, TARGET_SCALE = 185.5, 100.0


def main(smoke: bool, seed: int | None) -> dict:
    space = dpaudit.SearchSpace.from_mapping({"design": "sobol", "samples": 3 if smoke else 8, "parameters": {
        "lr": {"low": 1e-3, "high": 3e-2, "log": True}, "hidden": {"choices": [16, 64]},
        "max_grad_norm": {"low": 0.5, "high": 5.0, "log": True},
        "batch_size": 64, "epochs": 2 if smoke else 10, "noise_multiplier": 1.0 if smoke else 2.0}})
    with dpaudit.Session(epsilon=8.0, delta=1e-5, name="diabetes-mlp", protected=["diabetes-train"],
                         public=["diabetes-test"], rng=None if seed is None else SeededRandom(seed),
                         mirror=not smoke) as session:
        X_test, y_test = session.data("diabetes-test").tensors()

        def train(trial):
            hidden = trial.params["hidden"]
            model = nn.Sequential(nn.Linear(10, hidden), nn.ReLU(), nn.Linear(hidden, 1))
            optimizer = torch.optim.Adam(model.parameters(), lr=trial.params["lr"])
            model, optimizer, loader = trial.make_private(
                module=model, optimizer=optimizer,
                data_loader=DataLoader(trial.dataset, batch_size=trial.params["batch_size"]))
            for _ in range(trial.params["epochs"]):
                for x, y in loader:
                    optimizer.zero_grad()
                    # features in original units (public constants only): scale inputs and target by constants
                    nn.functional.mse_loss(model(x / 100.0).reshape(-1), (y - TARGET_CENTRE) / TARGET_SCALE).backward()
                    optimizer.step()
            return model

        def rmse(model) -> float:
            with torch.no_grad():
                predicted = model(X_test / 100.0).reshape(-1) * TARGET_SCALE + TARGET_CENTRE
                return (predicted - y_test).pow(2).mean().sqrt().item()

        result = dpaudit.tune(session, "constant-overhead", space=space, train=train, score=rmse,
                              score_range=(0.0, 200.0), maximize=False, dataset="diabetes-train",
                              k=3 if smoke else 5, t_max=3 if smoke else 6, u0=0.5, granularity=0.02,
                              epsilon_round=0.5)
    report = verify_bundle(session.run_dir, allow_not_for_release=seed is not None)
    assert report.valid, report.reasons
    claim = report.claim
    print(f"selected {result.selected}\ntest RMSE {result.score:.2f} (fallback used: "
          f"{result.public['fallback_used']})\ncertified ({show(claim['epsilon'])}, {claim['delta']:g})-DP, "
          f"verified: {report.valid}\nrun {session.run_dir}")
    return {"score": result.score, "epsilon": claim["epsilon"], "run_dir": str(session.run_dir)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny run (seconds)")
    parser.add_argument("--seed", type=int, default=None, help="seeded randomness (reproducible, NOT FOR RELEASE)")
    args = parser.parse_args()
    main(args.smoke, args.seed)
