#!/usr/bin/env bash
# GPU check of the kusner-bo GP path on a lent device machine (no internet there): wheels carried in .whl/.
set -x
python3 -m pip install -q --no-deps .whl/*.whl
python3 -m pip install -q --no-deps --no-build-isolation -e . || true
nvidia-smi --query-gpu=name,memory.total --format=csv
python3 -c "import torch, gpytorch; print(torch.__version__, gpytorch.__version__, torch.cuda.is_available())"
python3 -m pytest -q -p no:cacheprovider tests/plugins/kusner_bo/test_gp.py tests/plugins/kusner_bo/test_gp_algorithms.py tests/dpaudit/accounting/test_high_probability_sensitivity.py 2>&1 | tail -15
python3 benchmarks/bench_gp.py
python3 - <<'PY'
import json, tempfile, time
from dpaudit import Session
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.verify import verify_bundle
from dpaudit_plugins.kusner_bo import PLUGIN
from dpaudit_plugins.kusner_bo.plugin import TRAINING_NAME, VALIDATION_NAME
for algorithm, extra in ((1, {"sigma": 0.1}), (2, {"A": 1.0, "tau": 0.1})):
    store = tempfile.mkdtemp()
    t = time.perf_counter()
    with Session(epsilon=2.1, delta=2e-5, rng=SeededRandom(0), mirror=False, store=store, protected=(VALIDATION_NAME,),
                 public=(TRAINING_NAME,)) as s:
        out = PLUGIN.run(s, {"algorithm": algorithm, "epsilon": 1.0, "delta": 1e-5, "T": 20, **extra})
    report = verify_bundle(s.run_dir, allow_not_for_release=True)
    print(json.dumps({"algorithm": algorithm, "device": out["device"], "wall_s": round(time.perf_counter() - t, 2),
                      "released": out["released_hyperparameters"], "valid": report.valid, "reasons": report.reasons}))
PY
