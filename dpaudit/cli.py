"""The ``dpaudit`` command line (click).

Exit codes: 0 success / valid; 1 an invalid run or a refused operation; 2 a usage error (bad option values,
unknown plugin, unreadable input).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click

from dpaudit import canonical
from dpaudit.errors import BudgetExceeded, DPAuditError, InvalidParameter, PluginError, VerificationError

USAGE_ERRORS = (InvalidParameter, PluginError, VerificationError)


def _fail(exc: DPAuditError) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(2 if isinstance(exc, USAGE_ERRORS) else 1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), default=None, envvar="DPAUDIT_HOME",
              help="Run store root (default ./dpaudit_runs).")
@click.option("--tracking-uri", default=None, help="MLflow tracking URI (default $MLFLOW_TRACKING_URI or the "
              "embedded SQLite store under ./mlruns).")
@click.pass_context
def main(ctx: click.Context, store: Path | None, tracking_uri: str | None) -> None:
    """dpaudit: audited differential privacy for tuning-plus-training runs."""
    ctx.obj = {"store": store, "tracking_uri": tracking_uri}


@main.group()
def plugins() -> None:
    """Inspect the plugin registry."""


@plugins.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plugins_list(as_json: bool) -> None:
    """List installed plugins (entry-point group dpaudit.plugins)."""
    from dpaudit.registry import load_plugins

    try:
        found = load_plugins()
    except DPAuditError as exc:
        _fail(exc)
    rows = [{"name": p.name, "version": p.version, "summary": p.summary, "citation": p.citation,
             "event_kinds": list(p.event_kinds)} for p in found.values()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        click.echo(f"{r['name']} {r['version']}: {r['summary']}\n    {r['citation']}; events: "
                   f"{', '.join(r['event_kinds'])}")


@main.group()
def account() -> None:
    """An auditor's calculator: ε of a mechanism from its public parameters."""


@account.command("dpsgd")
@click.option("--sample-rate", type=float, required=True, help="Poisson sampling rate q.")
@click.option("--noise-multiplier", type=float, required=True, help="σ / clipping norm.")
@click.option("--steps", type=int, required=True, help="Number of DP-SGD steps.")
@click.option("--delta", type=float, required=True)
@click.option("--accountant", type=click.Choice(["rdp", "prv", "pld", "tightest"]), default="tightest",
              show_default=True)
@click.option("--json", "as_json", is_flag=True)
def account_dpsgd(sample_rate: float, noise_multiplier: float, steps: int, delta: float, accountant: str,
                  as_json: bool) -> None:
    """ε of Poisson-subsampled Gaussian DP-SGD (add/remove neighbours)."""
    from dpaudit.accounting import get_accountant
    from dpaudit.events import PoissonSubsampledGaussianEvent
    from dpaudit.sensitivity import from_formula
    from dpaudit.validation import check_delta

    try:
        check_delta(delta, allow_zero=False)
        event = PoissonSubsampledGaussianEvent(
            neighbouring="add_remove", sensitivity=from_formula("clipped_gradient_sum", "add_remove", clip_norm=1.0),
            sample_rate=sample_rate, noise_multiplier=noise_multiplier, steps=steps, label="dpsgd")
        acc = get_accountant(accountant)
        with_source = getattr(acc, "epsilon_with_source", None)
        eps, source = with_source(event, delta) if with_source else (acc.epsilon(event, delta), acc.name)
    except DPAuditError as exc:
        _fail(exc)
    out = {"epsilon": eps, "delta": delta, "accountant": acc.name, "attained_by": source,
           "accountant_version": acc.version(), "sample_rate": sample_rate, "noise_multiplier": noise_multiplier,
           "steps": steps, "neighbouring": "add_remove", "upper_bound": True}
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(f"epsilon <= {eps:.6g} at delta = {delta:g} ({acc.name} accountant, attained by {source}; "
                   f"add/remove neighbours, Poisson sampling)")


@main.command("run")
@click.argument("plugin")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSON object of the plugin's configuration (default: the plugin's smoke configuration).")
@click.option("--epsilon", type=float, required=True, help="Session budget ε, fixed before any data is touched.")
@click.option("--delta", type=float, required=True, help="Session budget δ.")
@click.option("--name", default=None, help="Run name (default: the plugin name).")
@click.option("--seed", type=int, default=None, help="Seeded randomness (reproducible, NOT FOR RELEASE).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: run id, paths, claim, results.")
@click.pass_obj
def run_plugin(obj: dict, plugin: str, config_path: Path | None, epsilon: float, delta: float, name: str | None,
               seed: int | None, as_json: bool) -> None:
    """Run PLUGIN inside an audited session with budget (EPSILON, DELTA) and certify it."""
    from dpaudit.mechanisms.randomness import SeededRandom
    from dpaudit.registry import get_plugin
    from dpaudit.session import Session

    try:
        found = get_plugin(plugin)
        config = (dict(found.smoke_config) if config_path is None
                  else canonical.read_object(config_path, InvalidParameter))
        with Session(epsilon=epsilon, delta=delta, name=name or found.name, protected=found.protected or
                     ("private data set",), public=found.public, rng=SeededRandom(seed) if seed is not None else None,
                     store=obj["store"], tracking_uri=obj["tracking_uri"]) as session:
            session.register_plugin(found.name, found.version)
            results = found.run(session, config)
    except DPAuditError as exc:
        _fail(exc)
    certificate = session.close()
    out = {"run_id": session.run_id, "run_dir": str(session.run_dir), "certificate": str(session.certificate_path),
           "ledger": str(session.ledger_path), "claim": certificate["claim"], "results": results}
    if as_json:
        click.echo(json.dumps(out, default=str))
    else:
        click.echo(f"{found.name}: {certificate['guarantee']}\nrun folder {session.run_dir}")
        for key, value in results.items():
            click.echo(f"  {key}: {value}")


@main.command()
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json", "html"]), default="text",
              show_default=True)
@click.pass_obj
def report(obj: dict, run: str, fmt: str) -> None:
    """Budget report of RUN (a run folder, a local run id or an MLflow run id)."""
    from dpaudit.report import render
    from dpaudit.runs import resolve_run

    try:
        click.echo(render(resolve_run(run, store=obj["store"], tracking_uri=obj["tracking_uri"]), fmt), nl=False)
    except DPAuditError as exc:
        _fail(exc)


@main.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--allow-not-for-release", is_flag=True, help="Accept a run made with seeded (test) randomness.")
@click.pass_obj
def verify(obj: dict, run: str, as_json: bool, allow_not_for_release: bool) -> None:
    """Verify RUN's certificate offline: exit 0 valid, 1 invalid (every reason listed), 2 usage error."""
    from dpaudit.runs import resolve_run
    from dpaudit.verify import verify_bundle

    try:
        folder = resolve_run(run, store=obj["store"], tracking_uri=obj["tracking_uri"])
        result = verify_bundle(folder, allow_not_for_release=allow_not_for_release)
    except DPAuditError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        for c in result.checks:
            click.echo(f"[{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}")
        click.echo("VALID" if result.valid else f"INVALID ({len(result.reasons)} reasons)")
    sys.exit(0 if result.valid else 1)


@main.command()
@click.argument("run")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.pass_obj
def export(obj: dict, run: str, directory: Path) -> None:
    """Write RUN's evidence bundle (ledger, certificate, report, public key) into DIRECTORY."""
    from dpaudit.runs import export_bundle, resolve_run

    try:
        files = export_bundle(resolve_run(run, store=obj["store"], tracking_uri=obj["tracking_uri"]), directory)
    except DPAuditError as exc:
        _fail(exc)
    for f in files:
        click.echo(str(f))


@main.command()
@click.option("--port", type=int, default=5000, show_default=True)
@click.pass_obj
def ui(obj: dict, port: int) -> None:
    """Open the MLflow UI on the run store (budget burn-down: metric dpaudit.epsilon_spent)."""
    from dpaudit.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(obj["tracking_uri"])
    mlflow = Path(sys.executable).with_name("mlflow")
    cmd = [str(mlflow) if mlflow.exists() else "mlflow", "ui", "--backend-store-uri", uri, "--port", str(port)]
    click.echo(f"MLflow UI on http://127.0.0.1:{port} for {uri}")
    sys.exit(subprocess.call(cmd, env=os.environ.copy()))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Last line: one JSON object (run_id, certificate, ledger).")
@click.option("--seed", type=int, default=None, help="Seeded randomness (reproducible, NOT FOR RELEASE).")
@click.option("--epochs", type=int, default=None, help="Training epochs (default: the demo's).")
@click.option("--signing-key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Ed25519 key that signs the certificate (default <store>/keys/signing_key.pem; created if absent).")
@click.pass_obj
def demo(obj: dict, as_json: bool, seed: int | None, epochs: int | None, signing_key: Path | None) -> None:
    """Run the demo: DP statistics and DP-SGD training on UCI Adult inside one audited session, then verify."""
    from dpaudit.demo import run_demo

    try:
        summary = run_demo(store=obj["store"], tracking_uri=obj["tracking_uri"], seed=seed, epochs=epochs,
                           signing_key=signing_key,
                           echo=(lambda s: click.echo(s, err=True)) if as_json else click.echo)
    except BudgetExceeded as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except DPAuditError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(summary))
    sys.exit(0 if summary["verified"] else 1)
