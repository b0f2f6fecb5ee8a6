"""``dpaudit demo``: private hyperparameter selection plus DP-SGD training on UCI Adult, ending in a verified
certificate, on the embedded default store.

What it does, all inside one session (add/remove neighbours of the Adult training split; the Adult test split is
public: its first half validates the candidates, its second half tests the final model):

1. runs the ``constant-overhead`` plugin (Ding, Wu, Xu & Pan 2023, Alg. 1): 8 candidates (learning rate ×
   clipping norm, shared σ, epochs and batch size), k = 10 record-keyed partitions with non-private partition
   models, at most T_max = 8 AboveThreshold rounds of ϵ = 0.5 each (kϵ = 5, the paper's k ≥ 5/ϵ), charged up
   front; then DP-SGD on the full training set with the selected candidate (the tuning kit, ``dpaudit.tuning``);
2. closes the session, writes and signs its certificate, and verifies the run folder offline exactly as
   ``dpaudit verify`` does (it prints that command; a ``--seed`` run is NOT FOR RELEASE, so it is verified with
   ``--allow-not-for-release`` and the demo says so). An interrupted demo closes ``ABORTED`` and prints its run id.

The training-set size n is **public** in this demo, and only here is it printed: DP-SGD with Poisson sampling
computes its rate q = B/n from n (and q is in the ledger), so the plugin's DP-SGD charges carry the conditional
assumption ``dataset-size-public`` and the certificate lists it. Paying for a noisy count of n as well would buy
nothing (an earlier version did). The size is printed only once the signed certificate lists that assumption.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dpaudit.data.catalog import TRAIN_NAME
from dpaudit.display import show
from dpaudit.lifecycle import announced
from dpaudit.mechanisms.randomness import SeededRandom
from dpaudit.registry import DATASET_SIZE_PUBLIC, get_plugin
from dpaudit.session import Session
from dpaudit.trust import KeyTrust
from dpaudit.verify import verify_bundle

BUDGET = (5.0, 1e-5)
#: the demo's search space: 4 learning rates × 2 clipping norms, shared (σ, epochs, batch size)
DEMO_CANDIDATES = tuple({"lr": lr, "max_grad_norm": clip, "noise_multiplier": 1.0, "epochs": 3, "batch_size": 256}
                        for lr in (0.5, 1.0, 2.0, 4.0) for clip in (0.5, 2.0))
DEMO_TUNING = {"k": 10, "epsilon_round": 0.5, "t_max": 8, "u0": 0.5, "granularity": 0.05,
               "partition_training": "train", "proposer": "grid", "fallback": 5, "model": "logreg"}


def demo_config(epochs: int | None = None, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``constant-overhead`` configuration of the demo, with optional epochs and key overrides."""
    config: dict[str, Any] = {**DEMO_TUNING, "candidates": [dict(c) for c in DEMO_CANDIDATES], **(overrides or {})}
    if epochs is not None:
        config["candidates"] = [{**c, "epochs": epochs} for c in config["candidates"]]
    return config


def verify_command(run_id: str, *, store: Path | None, allow_not_for_release: bool, trusted_key: str | None) -> str:
    """The ``dpaudit verify`` command line whose verdict the demo prints (its exit status: 0 iff the demo says VALID).

    Args:
        run_id: the demo's run.
        store: the run store given to the demo (None: the default, which ``dpaudit verify`` uses too).
        allow_not_for_release: a seeded run: the flag that accepts a run NOT FOR RELEASE.
        trusted_key: the fingerprint of a key given with ``--signing-key`` (pinned with ``--trusted-key``).
    """
    words = ["dpaudit"] + (["--store", str(store)] if store is not None else []) + ["verify", run_id]
    words += (["--allow-not-for-release"] if allow_not_for_release else []) + (
        ["--trusted-key", trusted_key] if trusted_key else [])
    return shlex.join(words)


def run_demo(*, store: Path | None = None, tracking_uri: str | None = None, seed: int | None = None,
             epochs: int | None = None, signing_key: Path | None = None,
             overrides: Mapping[str, Any] | None = None,
             echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the demo session and verify it; returns a JSON-able summary (run id, paths, certificate claim).

    Args:
        store, tracking_uri, signing_key: where the run goes and which key signs it.
        seed: seeded randomness (reproducible, NOT FOR RELEASE); None uses the OS CSPRNG.
        epochs: training epochs of every candidate (default 3).
        overrides: ``constant-overhead`` config keys replacing the demo's (e.g. a smaller grid for tests).
        echo: where progress lines go.
    """
    config = demo_config(epochs, overrides)
    plugin = get_plugin("constant-overhead")
    rng = SeededRandom(seed) if seed is not None else None
    s = Session(epsilon=BUDGET[0], delta=BUDGET[1], name="dpaudit-demo", neighbouring="add_remove",
                protected=(TRAIN_NAME,), public=plugin.public, rng=rng, store=store, tracking_uri=tracking_uri,
                signing_key=signing_key)
    with announced(s, echo), s:  # an interrupted demo closes ABORTED and says which run it was
        # the data through the session, like a plugin's: the access is recorded in the ledger
        train = s.data(TRAIN_NAME, rows=config.get("train_rows"))
        echo(f"dpaudit demo: UCI Adult, public test records split in half (validation, final test); budget "
             f"epsilon={BUDGET[0]}, delta={BUDGET[1]}")
        echo(f"  constant-overhead selection: {len(config['candidates'])} candidates, k={config['k']} partitions, "
             f"at most {config['t_max']} AboveThreshold rounds of epsilon={config['epsilon_round']} (charged up "
             "front), then DP-SGD")
        result = plugin.run(s, config)
        chosen = result["selected"]
        echo(f"  selected: lr={chosen['lr']}, max_grad_norm={chosen['max_grad_norm']}, noise_multiplier="
             f"{chosen['noise_multiplier']}, epochs={chosen['epochs']}, batch_size={chosen['batch_size']}"
             f"{' (fallback: no candidate passed)' if result['fallback_used'] else ''}; realised iterations "
             f"{result['realised_iterations']} of {result['charged_iterations']} charged")
        echo(f"  DP-SGD test accuracy on the public final-test half: {result['test_accuracy']:.3f}; budget filter's "
             f"bound so far {show(s.spent_epsilon(), 4)} (the certificate composes every charge more tightly)")
    certificate = s.close()
    # exactly what `dpaudit verify` does: the store's own key is trusted, a key given with --signing-key is pinned on
    # the command line; a seeded run is NOT FOR RELEASE and is accepted only with the flag that says so
    pinned = s.key_fingerprint if signing_key else None
    allow = seed is not None
    trust = KeyTrust.default(store, trusted_keys=(pinned,) if pinned else ())
    verification = verify_bundle(s.run_dir, allow_not_for_release=allow, trust=trust)
    command = verify_command(s.run_id, store=store, allow_not_for_release=allow, trusted_key=pinned)
    claim = certificate["claim"]
    echo(f"certificate: {certificate['guarantee']}")
    echo(f"  accountant {claim['accountant']} (attained by {claim['attained_by']}); {certificate['release_status']}")
    echo(f"  public data: {', '.join(certificate['public_datasets'])}")
    echo(f"  conditional on {sum(a['conditional'] for a in certificate['assumptions'])} assumptions "
         "(see the report)")
    size_public = any(a["id"] == DATASET_SIZE_PUBLIC for a in certificate["assumptions"])
    if size_public:  # public only because the certificate says so: q = B/n of DP-SGD
        echo(f"  training-set size n = {len(train)}: public under the assumption {DATASET_SIZE_PUBLIC} (DP-SGD's "
             "sampling rate q = B/n is computed from it)")
    for check in verification.checks:
        echo(f"  verify [{'ok' if check.ok else 'FAIL'}] {check.name}: {check.detail}")
    if allow:
        echo(f"  this run is {certificate['release_status']}: verified with --allow-not-for-release, which accepts "
             "it; `dpaudit verify` without that flag says INVALID")
    echo(f"verification: {'VALID' if verification.valid else 'INVALID'} (the verdict of `{command}`); run folder "
         f"{s.run_dir}; MLflow run {s.run_id} (dpaudit ui)")
    echo(f"  signing key fingerprint {s.key_fingerprint} (give it to auditors out of band: dpaudit keys export)")
    return {
        "run_id": s.run_id,
        "run_dir": str(s.run_dir),
        "certificate": str(s.certificate_path),
        "ledger": str(s.ledger_path),
        "epsilon": claim["epsilon"],
        "delta": claim["delta"],
        "selected": chosen,
        "fallback_used": result["fallback_used"],
        "realised_iterations": result["realised_iterations"],
        "charged_iterations": result["charged_iterations"],
        "test_accuracy": float(result["test_accuracy"]),
        "verified": verification.valid,
        "for_release": certificate["for_release"],
        "verify_command": command,
        "key_fingerprint": s.key_fingerprint,
        "dataset_size": len(train) if size_public else None,
    }
