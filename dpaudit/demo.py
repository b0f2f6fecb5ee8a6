"""``dpaudit demo``: a full audited run on UCI Adult, from noisy statistics to DP-SGD training to a verified
certificate, on the embedded default store.

What it releases, all inside one session (add/remove neighbours of the Adult training split; the test split is
public evaluation data):

1. the number of training records (discrete Laplace, count query, sensitivity 1);
2. the number of records with income > 50K (discrete Laplace, count query);
3. the sum of ages scaled to [0, 1] with public bounds (discrete Gaussian, bounded sum, sensitivity 1), from which
   the mean age follows by post-processing with the noisy count;
4. the most common education level (exponential mechanism on counts, monotone, sensitivity 1);
5. a logistic-regression model trained with DP-SGD through the ``opacus-training`` plugin (Poisson sampling,
   Opacus's noise, RDP/PLD accounting of the fixed number of steps).

The session then closes, writes and signs its certificate, and the run folder is verified offline.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.data.adult import TEST_NAME, TRAIN_NAME, load_adult
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.registry import get_plugin
from dpaudit.sensitivity import from_formula
from dpaudit.session import Session
from dpaudit.verify import verify_bundle

BUDGET = (2.0, 1e-5)
AGE_LOW, AGE_HIGH = 17.0, 90.0  # public bounds used by the Adult loader's scaling


def run_demo(*, store: Path | None = None, tracking_uri: str | None = None, seed: int | None = None,
             epochs: int | None = None, signing_key: Path | None = None,
             echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the demo session and verify it; returns a JSON-able summary (run id, paths, certificate claim)."""
    data = load_adult()
    rng = SeededRandom(seed) if seed is not None else None
    training = get_plugin("opacus-training")
    config = {"data": "adult", "model": "logreg", "optimizer": "sgd", "lr": 1.0, "batch_size": 256,
              "epochs": epochs or 3, "max_grad_norm": 1.0, "noise_multiplier": 1.0}
    echo(f"dpaudit demo: UCI Adult, {len(data.y_train)} training / {len(data.y_test)} test records; "
         f"budget epsilon={BUDGET[0]}, delta={BUDGET[1]}")
    with Session(epsilon=BUDGET[0], delta=BUDGET[1], name="dpaudit-demo", neighbouring="add_remove",
                 protected=(TRAIN_NAME,), public=(TEST_NAME,),
                 rng=rng, store=store, tracking_uri=tracking_uri, signing_key=signing_key) as s:
        count = from_formula("count", "add_remove")
        n = s.laplace(float(len(data.y_train)), count, epsilon=0.05, label="number of training records")
        high = s.laplace(float(data.y_train.sum()), count, epsilon=0.05, label="records with income >50K")
        age_col = data.feature_names.index("age")
        age_sum = s.gaussian(float(data.X_train[:, age_col].sum()),
                             from_formula("bounded_sum", "add_remove", lower=0.0, upper=1.0), epsilon=0.1,
                             delta=1e-7, label="sum of ages scaled to [0, 1]")
        edu = [i for i, f in enumerate(data.feature_names) if f.startswith("education=")]
        counts = data.X_train[:, edu].sum(axis=0)
        best = s.exponential(counts.tolist(), count, epsilon=0.05, monotone=True,
                             label="most common education level")
        echo(f"  noisy count {n:.0f}; >50K share {high / n:.3f}; mean age "
             f"{AGE_LOW + (AGE_HIGH - AGE_LOW) * age_sum / n:.1f}; most common education: "
             f"{data.feature_names[edu[best]].split('=', 1)[1]}")
        result = training.run(s, config)
        echo(f"  DP-SGD ({config['epochs']} epochs, noise multiplier {config['noise_multiplier']}): "
             f"test accuracy {result['test_accuracy']:.3f}; epsilon spent so far {s.spent_epsilon():.4g}")
    certificate = s.close()
    verification = verify_bundle(s.run_dir, allow_not_for_release=seed is not None)
    claim = certificate["claim"]
    echo(f"certificate: {certificate['guarantee']}")
    echo(f"  accountant {claim['accountant']} (attained by {claim['attained_by']}); {certificate['release_status']}")
    echo(f"  conditional on {sum(a['conditional'] for a in certificate['assumptions'])} assumptions "
         "(see the report)")
    for check in verification.checks:
        echo(f"  verify [{'ok' if check.ok else 'FAIL'}] {check.name}: {check.detail}")
    echo(f"verification: {'VALID' if verification.valid else 'INVALID'}; run folder {s.run_dir}; MLflow run "
         f"{s.run_id} (dpaudit ui)")
    return {
        "run_id": s.run_id,
        "run_dir": str(s.run_dir),
        "certificate": str(s.certificate_path),
        "ledger": str(s.ledger_path),
        "epsilon": claim["epsilon"],
        "delta": claim["delta"],
        "test_accuracy": float(result["test_accuracy"]),
        "verified": verification.valid,
        "releases": {"n": float(n), "high_income": float(high), "age_sum": float(np.asarray(age_sum))},
    }
