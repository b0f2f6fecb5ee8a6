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

from dpaudit.cli_account import account, examples
from dpaudit.cli_audit import audit
from dpaudit.display import plural
from dpaudit.errors import BudgetExceeded, DPAuditError, InvalidParameter, PluginError, VerificationError
from dpaudit.gcpause import cyclic_gc_paused
from dpaudit.tracking.store import redact_credentials

USAGE_ERRORS = (InvalidParameter, PluginError, VerificationError)
#: Commands that import the numerics stack, write nothing but stdout and end: run with the cyclic garbage collector
#: paused (:func:`dpaudit.gcpause.cyclic_gc_paused`, frozen at the end under :func:`program`).
PAUSED_GC_COMMANDS = frozenset({"verify", "account"})
PROGRAM = "program"


def _fail(exc: DPAuditError) -> None:
    click.echo(f"error: {' '.join(redact_credentials(str(exc)).split())}", err=True)
    sys.exit(2 if isinstance(exc, USAGE_ERRORS) else 1)


#: exceptions that hostile input can raise deep inside a computation (a bound that overflows, a huge integer, an
#: unreadable file): reported as bad input, exit 2
_INPUT_FAULTS = (ArithmeticError, RecursionError, MemoryError, ValueError, UnicodeError, OSError)


def _one_line(exc: BaseException) -> str:
    text = " ".join(redact_credentials(str(exc)).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


class _GuardedGroup(click.Group):
    """The top-level group: every error ends in one line on stderr and exit 1 or 2, never a traceback.

    A :class:`~dpaudit.errors.DPAuditError` that a command did not handle goes through :func:`_fail`; an input fault
    (:data:`_INPUT_FAULTS`) exits 2; anything else is an internal error, exit 1. ``DPAUDIT_DEBUG=1`` re-raises, for
    the traceback. A usage error (unknown option, a value of the wrong type) is one line too, exit 2, instead of
    click's usage block.
    """

    def main(self, *args, **kwargs):
        if kwargs.get("standalone_mode", True) is False:
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:  # no arguments: the help text, as click prints it
            click.echo(exc.format_message(), err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.ClickException as exc:
            click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            if os.environ.get("DPAUDIT_DEBUG") == "1":
                raise
            if isinstance(exc, DPAuditError):
                _fail(exc)
            if isinstance(exc, BrokenPipeError):  # `dpaudit ... | head`: the reader left, nothing is wrong here
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
                sys.exit(1)
            if isinstance(exc, _INPUT_FAULTS):
                click.echo(f"error: cannot handle this input ({_one_line(exc)})", err=True)
                sys.exit(2)
            click.echo(f"error: internal error ({_one_line(exc)}); set DPAUDIT_DEBUG=1 for the traceback", err=True)
            sys.exit(1)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from dpaudit.provenance import code_version, dpaudit_version

    click.echo(f"dpaudit {dpaudit_version()} ({code_version()})")
    ctx.exit()


@click.group(cls=_GuardedGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=examples(
    "dpaudit demo",
    "dpaudit verify <run id>",
    "dpaudit report <run id> --format html > report.html",
    "dpaudit account ledger <run id>",
    "dpaudit --store /data/runs verify <run id> --json"))
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), default=None, envvar="DPAUDIT_HOME",
              help="Run store root (default ./dpaudit_runs).")
@click.option("--tracking-uri", default=None, help="MLflow tracking URI (default $MLFLOW_TRACKING_URI or the "
              "embedded SQLite store under ./mlruns).")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print dpaudit's version (and the git commit of a checkout) and exit.")
@click.pass_context
def main(ctx: click.Context, store: Path | None, tracking_uri: str | None) -> None:
    """dpaudit: audited differential privacy for tuning-plus-training runs."""
    from dpaudit.scipy_startup import skip_array_api_notes

    skip_array_api_notes()  # SciPy imports without rewriting docstrings (dpaudit/scipy_startup.py): start-up time
    if ctx.invoked_subcommand in PAUSED_GC_COMMANDS:  # start-up time (dpaudit/gcpause.py)
        ctx.with_resource(cyclic_gc_paused(freeze=isinstance(ctx.obj, dict) and ctx.obj.get(PROGRAM) is True))
    ctx.obj = {"store": store, "tracking_uri": tracking_uri}


def program() -> None:
    """The ``dpaudit`` console script: :func:`main` as the whole process, which ends when the command does, so that
    the commands of :data:`PAUSED_GC_COMMANDS` may leave their objects to the interpreter's exit uncollected
    (``cyclic_gc_paused(freeze=True)``). Called in-process (tests, notebooks), :func:`main` collects as usual."""
    main(obj={PROGRAM: True})


@main.group(epilog=examples("dpaudit plugins list"))
def plugins() -> None:
    """Inspect the plugin registry."""


@plugins.command("list", epilog=examples("dpaudit plugins list", "dpaudit plugins list --json"))
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


main.add_command(account)
main.add_command(audit)


@main.command("run", epilog=examples(
    "dpaudit run opacus-training --epsilon 5 --delta 1e-5",
    "dpaudit run constant-overhead --epsilon 5 --delta 1e-5 --config config.json --json",
    "dpaudit run randtune --epsilon 8 --delta 1e-5 --seed 0   # reproducible, NOT FOR RELEASE",
    "dpaudit run randtune --epsilon 8 --delta 1e-5 --workers 2   # the repetitions in 2 processes",
    "dpaudit run --config study.toml   # a study file: data, model, space, method, budget (docs/user-guide.md)"))
@click.argument("plugin", required=False)
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The plugin's configuration, a TOML or JSON object (default: the plugin's smoke configuration); "
              "or a study file (a [study] table), which names the method and budget itself.")
@click.option("--epsilon", type=float, default=None, help="Session budget ε, fixed before any data is touched "
              "(required unless a study file gives it).")
@click.option("--delta", type=float, default=None, help="Session budget δ (required unless a study file gives it).")
@click.option("--name", default=None, help="Run name (default: the plugin name).")
@click.option("--seed", type=int, default=None, help="Seeded randomness (reproducible, NOT FOR RELEASE).")
@click.option("--adaptive", is_flag=True, help="Admit charges through a Renyi filter, valid when privacy parameters "
              "depend on earlier outputs; the certificate claims the budget (docs/accounting.md).")
@click.option("--neighbouring", type=click.Choice(["add_remove", "replace_one"]), default="add_remove",
              show_default=True, help="The neighbouring relation the certificate is about (e.g. replace_one for "
              "dp-gp, which protects outputs at public inputs).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Run the plugin's trials in N parallel "
              "worker processes (its `workers` config key; randtune, naive, constant-overhead and dpareto); every "
              "charge and release stays in this process's ledger.")
@click.option("--ray-address", default=None, help="Run the trials as Ray tasks: `local` (a local Ray with --workers "
              "CPUs) or a cluster address (the `ray_address` config key; needs the `ray` extra).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: run id, paths, claim, results.")
@click.pass_obj
def run_plugin(obj: dict, plugin: str | None, config_path: Path | None, epsilon: float | None,
               delta: float | None, name: str | None, seed: int | None, adaptive: bool, neighbouring: str,
               workers: int | None, ray_address: str | None, as_json: bool) -> None:
    """Run PLUGIN inside an audited session with budget (EPSILON, DELTA) and certify it; or run a study file.

    An unknown plugin, an unreadable config or one the plugin rejects, or a bad budget is refused before any run
    exists. A run that does not finish (Ctrl-C or SIGTERM: ABORTED; a plan the budget refuses: REFUSED; an error:
    FAILED) is closed with every charge counted, NOT FOR RELEASE, and its id is printed; `dpaudit verify` fails it.
    """
    from dataclasses import replace

    from dpaudit.lifecycle import announced, interrupt_exit_code, sigterm_as_interrupt
    from dpaudit.mechanisms.randomness import SeededRandom
    from dpaudit.registry import get_plugin
    from dpaudit.session import Session
    from dpaudit.study import is_study, load_study, read_config
    from dpaudit.study_run import open_session, run_study

    rng = SeededRandom(seed) if seed is not None else None
    study = None
    try:
        config = None if config_path is None else read_config(config_path)
        if config is not None and is_study(config):  # a study file names its method and budget itself
            study = load_study(config_path)  # validated in full before a run exists
            if plugin not in (None, study.method) or epsilon is not None or delta is not None or adaptive \
                    or neighbouring != "add_remove" or workers is not None or ray_address is not None:
                raise InvalidParameter(f"{config_path} is a study file: it fixes the method ({study.method}) and "
                                       "the budget; give no PLUGIN, --epsilon, --delta, --adaptive, --neighbouring, "
                                       "--workers or --ray-address")
            study, title = replace(study, name=name or study.name), study.method
        else:
            if plugin is None or epsilon is None or delta is None:
                raise InvalidParameter("give PLUGIN, --epsilon and --delta (or --config with a study file)")
            found = get_plugin(plugin)
            config = dict(found.smoke_config) if config is None else config
            config = {**config, **({} if workers is None else {"workers": workers}),
                      **({} if ray_address is None else {"ray_address": ray_address})}
            if found.check_config is not None:
                found.check_config(config)  # a bad config is refused here, before a run exists
            title = found.name
        with sigterm_as_interrupt():
            if study is None:
                protected, public = found.data_sets(config)  # the sets this configuration reads
                session = Session(epsilon=epsilon, delta=delta, name=name or found.name,
                                  protected=protected or ("private data set",), public=public, rng=rng,
                                  store=obj["store"], tracking_uri=obj["tracking_uri"], adaptive=adaptive,
                                  neighbouring=neighbouring)
            else:
                session = open_session(study, rng=rng, store=obj["store"], tracking_uri=obj["tracking_uri"])
            with announced(session, lambda line: click.echo(line, err=True)), session:
                if study is None:
                    session.register_plugin(found.name, found.version)
                    results = found.run(session, config)
                else:
                    results = run_study(study, session).public
    except KeyboardInterrupt as exc:
        sys.exit(interrupt_exit_code(exc))
    except DPAuditError as exc:
        _fail(exc)
    certificate = session.close()
    out = {"run_id": session.run_id, "run_dir": str(session.run_dir), "certificate": str(session.certificate_path),
           "ledger": str(session.ledger_path), "claim": certificate["claim"], "results": results}
    if as_json:
        click.echo(json.dumps(out, default=str))
    else:
        click.echo(f"{title}: {certificate['guarantee']}\nrun folder {session.run_dir}")
        for key, value in results.items():
            click.echo(f"  {key}: {value}")


@main.command(epilog=examples(
    "dpaudit report <run id>",
    "dpaudit report dpaudit_runs/<run id> --format markdown",
    "dpaudit report <run id> --format html > report.html"))
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


@main.command(epilog=examples(
    "dpaudit verify <run id>",
    "dpaudit verify evidence/ --trusted-key <fingerprint>",
    "dpaudit verify <run id> --json",
    "dpaudit verify --store dpaudit_runs --log-head SIZE:ROOT"))
@click.argument("run", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--allow-not-for-release", is_flag=True, help="Accept a run NOT FOR RELEASE: seeded (test) randomness, "
              "or a run that did not finish (aborted, refused, failed); the verdict says so.")
@click.option("--trusted-key", "trusted_keys", multiple=True, metavar="FINGERPRINT|PEMFILE",
              help="Trust this signing key (SHA-256 fingerprint of the raw Ed25519 key, or a PEM public-key file); "
              "repeatable. Get the fingerprint out of band.")
@click.option("--accept-bundle-key", is_flag=True,
              help="Accept a valid signature by an untrusted key; the verdict then says the key was not pinned.")
@click.option("--trust-store", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Trust store file (default $DPAUDIT_TRUST_STORE or $XDG_CONFIG_HOME/dpaudit/trusted_keys.json).")
@click.option("--store", "store_option", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Without RUN: verify this whole store against its transparency log. With RUN: the store to find "
              "RUN in. Either way the store's own key is trusted.")
@click.option("--log-head", default=None, metavar="SIZE:ROOT",
              help="With --store and no RUN: a log head recorded earlier; the log must extend it.")
@click.option("--in-toto", "in_toto", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also check this in-toto DSSE envelope of RUN (`dpaudit export --format in-toto`); a bundle's own "
              "certificate.intoto.json is always checked.")
@click.pass_obj
def verify(obj: dict, run: str | None, as_json: bool, allow_not_for_release: bool, trusted_keys: tuple[str, ...],
           accept_bundle_key: bool, trust_store: Path | None, store_option: Path | None, log_head: str | None,
           in_toto: Path | None) -> None:
    """Verify RUN's certificate offline, or (--store STORE, no RUN) a whole store against its transparency log.

    Exit 0 valid, 1 invalid (every reason listed), 2 usage error.
    """
    from dpaudit.runs import locate_run
    from dpaudit.transparency import parse_head_token
    from dpaudit.trust import KeyTrust
    from dpaudit.verify import verify_bundle
    from dpaudit.verify_store import verify_store

    store = store_option if store_option is not None else obj["store"]
    try:
        trust = KeyTrust.default(store, trusted_keys=trusted_keys, trust_store=trust_store,
                                 accept_bundle_key=accept_bundle_key)
        if run is None:
            if store_option is None:
                raise InvalidParameter("give RUN, or --store STORE to verify a whole store")
            head = parse_head_token(log_head) if log_head is not None else None
            result = verify_store(store_option, trust=trust, log_head=head)
        else:
            if log_head is not None:
                raise InvalidParameter("--log-head checks a whole store: use it with --store STORE and no RUN")
            found = locate_run(run, store=store, tracking_uri=obj["tracking_uri"])
            result = verify_bundle(found.folder, allow_not_for_release=allow_not_for_release, trust=trust,
                                   in_toto=in_toto, run_id=found.run_id)
    except DPAuditError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        sys.exit(0 if result.valid else 1)
    for c in result.checks:
        click.echo(f"[{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}")
    for warning in getattr(result, "warnings", ()):  # a run's report; a store's has none
        click.echo(f"WARNING: {warning}")
    key = result.signing_key
    if key is not None:
        click.echo(f"signing key: {key.fingerprint or '(unparsable)'} " + (
            f"(trusted: {key.trusted_by})" if key.trusted else
            "(NOT PINNED: accepted with --accept-bundle-key)" if key.accepted_unpinned else "(UNTRUSTED)"))
    if not result.valid:
        click.echo(f"INVALID ({plural(len(result.reasons), 'reason')})")
    elif key is not None and not key.trusted:
        click.echo("VALID, but the signing key was NOT PINNED: this shows only that the bundle is consistent with "
                   "a key it carries itself")
    else:
        click.echo("VALID")
    if result.valid and getattr(result, "not_for_release", None):  # a run's report; a store's has no such list
        click.echo(f"NOT FOR RELEASE ({'; '.join(result.not_for_release)}): accepted only because of "
                   "--allow-not-for-release")
    sys.exit(0 if result.valid else 1)


@main.command(epilog=examples("dpaudit export <run id> evidence/", "dpaudit export <run id> evidence/ --force",
                              "dpaudit export <run id> evidence/ --format in-toto"))
@click.argument("run")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Write into a DIRECTORY that is not empty, replacing the bundle's files "
              "there (other files are left alone).")
@click.option("--format", "fmt", type=click.Choice(["bundle", "in-toto", "prov"]), default="bundle",
              show_default=True, help="in-toto: also write certificate.intoto.json, the certificate as an in-toto "
              "Statement v1 in a DSSE envelope signed with the run's key; prov: also write ledger.prov.json, the "
              "ledger as W3C PROV-JSON.")
@click.option("--signing-key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --format in-toto: the run's signing key (default <store>/keys/signing_key.pem).")
@click.pass_obj
def export(obj: dict, run: str, directory: Path, force: bool, fmt: str, signing_key: Path | None) -> None:
    """Write RUN's evidence bundle (ledger, certificate, report, public key) into DIRECTORY.

    DIRECTORY must be new or empty unless --force is given.
    """
    from dpaudit import store as run_store
    from dpaudit.intoto import ENVELOPE_FILE, envelope_of_run, write_envelope
    from dpaudit.prov import PROV_FILE, write_prov
    from dpaudit.runs import export_bundle, resolve_run

    if not force and directory.is_dir() and any(directory.iterdir()):
        raise click.UsageError(f"{directory} is not empty: choose a new folder, or --force to overwrite the bundle's "
                               "files in it")
    if signing_key is not None and fmt != "in-toto":
        raise click.UsageError("--signing-key signs the in-toto envelope: use it with --format in-toto")
    try:
        folder = resolve_run(run, store=obj["store"], tracking_uri=obj["tracking_uri"])
        envelope = None
        if fmt == "in-toto":  # signed (and the key checked) before anything is written
            home = folder.resolve().parent  # the run's own store, else the local one
            envelope = envelope_of_run(folder, signing_key or run_store.default_key_path(
                home if run_store.is_store(home) else run_store.store_root(obj["store"])))
        files = export_bundle(folder, directory)
        for name, kept in ((ENVELOPE_FILE, envelope is not None), (PROV_FILE, fmt == "prov")):
            stale = directory / name  # an earlier export's (--force): it would not verify against this bundle
            if not kept and (stale.is_symlink() or stale.is_file()):
                stale.unlink()
        if envelope is not None:
            files.append(write_envelope(directory, envelope))
        if fmt == "prov":
            files.append(write_prov(folder, directory))
    except DPAuditError as exc:
        _fail(exc)
    for f in files:
        click.echo(str(f))


@main.command(epilog=examples("dpaudit recover <run id>", "dpaudit recover <run id> --abort"))
@click.argument("run")
@click.option("--abort", is_flag=True, help="The run has no close record (its process died): close it as ABORTED "
              "and certify every charge of its ledger as it stands.")
@click.option("--signing-key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The key that signs the run (default <store>/keys/signing_key.pem); it must be the one the run's "
              "open record names.")
@click.pass_obj
def recover(obj: dict, run: str, abort: bool, signing_key: Path | None) -> None:
    """Finish RUN's close after a crash (certificate, log entry, reports from its ledger), or close it as aborted.

    Says which it did. Exit 0 done (or nothing to do), 1 damaged evidence or a write failure, 2 an unclosed run
    without --abort, or a key other than the run's.
    """
    from dpaudit.recovery import local_run, recover_run

    try:
        run_dir, root = local_run(run, obj["store"])
        result = recover_run(run_dir, root, abort=abort, signing_key=signing_key)
    except DPAuditError as exc:
        _fail(exc)
    except OSError as exc:
        click.echo(f"error: cannot write the recovered files: {exc}", err=True)
        sys.exit(1)
    click.echo(result.summary())
    if result.aborted or result.done:
        click.echo(f"certificate: {run_dir / 'certificate.json'}; MLflow is not touched: run `dpaudit mirror sync "
                   f"{result.run_id}` to update the run there")


@main.group(epilog=examples("dpaudit mirror sync <run id>"))
def mirror() -> None:
    """The MLflow mirror of the run store (a view of the ledgers)."""


@mirror.command("sync", epilog=examples("dpaudit mirror sync <run id>"))
@click.argument("run")
@click.pass_obj
def mirror_sync(obj: dict, run: str) -> None:
    """Catch RUN's MLflow run up with its ledger, after an outage or into an empty or rebuilt store: the run is found
    by its tag dpaudit.run_id and created if absent; records, files, the certified claim with `dpaudit verify`'s
    verdict, end status (idempotent)."""
    from dpaudit.recovery import intact_records, local_run
    from dpaudit.store import LEDGER
    from dpaudit.tracking.session_mirror import sync_mirror

    try:
        run_dir, _ = local_run(run, obj["store"])
        records, _ = intact_records(run_dir / LEDGER)
        sent = sync_mirror(run_dir, records, obj["tracking_uri"])
    except DPAuditError as exc:
        _fail(exc)
    click.echo(f"mirrored {plural(sent, 'new record')} of run {run_dir.name} "
               f"({len(records)} in its ledger); files attached")


@main.group(epilog=examples(
    "dpaudit keys export",
    "dpaudit keys trust <fingerprint> --name \"ACME audit key\"",
    "dpaudit keys list"))
@click.option("--trust-store", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Trust store file (default $DPAUDIT_TRUST_STORE or $XDG_CONFIG_HOME/dpaudit/trusted_keys.json).")
@click.pass_obj
def keys(obj: dict, trust_store: Path | None) -> None:
    """Signing keys: the trust store of pinned keys, and the local store's own key."""
    from dpaudit.trust import default_trust_store_path

    obj["trust_store"] = trust_store if trust_store is not None else default_trust_store_path()


@keys.command("list", epilog=examples("dpaudit keys list", "dpaudit keys list --json"))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def keys_list(obj: dict, as_json: bool) -> None:
    """List the trusted keys: the trust store's, and the local store's own key."""
    from dpaudit.store import store_root
    from dpaudit.trust import BY_LOCAL_STORE, BY_TRUST_STORE, local_store_fingerprint, read_trust_store

    try:
        rows = [{**k.to_dict(), "source": BY_TRUST_STORE} for k in read_trust_store(obj["trust_store"]).values()]
        root = store_root(obj["store"])
        local = local_store_fingerprint(root)
    except DPAuditError as exc:
        _fail(exc)
    if local is not None:
        rows.append({"fingerprint": local, "name": str(root), "public_key": None, "source": BY_LOCAL_STORE})
    if as_json:
        click.echo(json.dumps({"trust_store": str(obj["trust_store"]), "keys": rows}, indent=2))
        return
    click.echo(f"trust store: {obj['trust_store']}")
    for r in rows:
        click.echo(f"{r['fingerprint']}  {r['source']}: {r['name']}")


@keys.command("trust", epilog=examples(
    "dpaudit keys trust <fingerprint> --name \"ACME audit key\"",
    "dpaudit keys trust acme_key.pem"))
@click.argument("key", metavar="FINGERPRINT|PEMFILE")
@click.option("--name", default=None, help="A name for people (default: the fingerprint's first 16 digits).")
@click.pass_obj
def keys_trust(obj: dict, key: str, name: str | None) -> None:
    """Pin KEY in the trust store; compare its fingerprint with one obtained out of band first."""
    from dpaudit.trust import trust_key

    try:
        entry = trust_key(obj["trust_store"], key, name)
    except DPAuditError as exc:
        _fail(exc)
    click.echo(f"trusted {entry.fingerprint} ({entry.name}) in {obj['trust_store']}")


@keys.command("untrust", epilog=examples("dpaudit keys untrust <fingerprint>"))
@click.argument("fingerprint")
@click.pass_obj
def keys_untrust(obj: dict, fingerprint: str) -> None:
    """Remove FINGERPRINT from the trust store (exit 1 if it was not there)."""
    from dpaudit.trust import untrust_key

    try:
        removed = untrust_key(obj["trust_store"], fingerprint)
    except DPAuditError as exc:
        _fail(exc)
    click.echo(f"{'removed' if removed else 'not in the trust store:'} {fingerprint}")
    sys.exit(0 if removed else 1)


@keys.command("export", epilog=examples("dpaudit keys export", "dpaudit keys export --store /data/runs --json"))
@click.option("--store", "store_option", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The store whose key to export (default: the local store).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def keys_export(obj: dict, store_option: Path | None, as_json: bool) -> None:
    """Print the local store's public key (PEM) and fingerprint, to hand to auditors out of band."""
    from dpaudit.signing import load_key, public_key_fingerprint, public_key_pem
    from dpaudit.store import default_key_path, store_root

    path = default_key_path(store_root(store_option if store_option is not None else obj["store"]))
    try:
        key = load_key(path)
        if key is None:
            raise VerificationError(f"no signing key at {path}: the store has not signed anything yet")
    except DPAuditError as exc:
        _fail(exc)
    fingerprint, pem = public_key_fingerprint(key), public_key_pem(key)
    if as_json:
        click.echo(json.dumps({"fingerprint": fingerprint, "public_key": pem}))
    else:
        click.echo(f"{pem}fingerprint (SHA-256 of the raw Ed25519 key): {fingerprint}")


@main.group("log", epilog=examples("dpaudit log head"))
def transparency_log() -> None:
    """The store's transparency log of closed certificates."""


@transparency_log.command("head", epilog=examples("dpaudit log head", "dpaudit log head --store /data/runs --json"))
@click.option("--store", "store_option", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The store (default: the local store).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def log_head(obj: dict, store_option: Path | None, as_json: bool) -> None:
    """Print the store's signed log head SIZE:ROOT, to record out of band for `verify --store --log-head`."""
    from dpaudit.store import store_root
    from dpaudit.transparency import current_head

    root = store_root(store_option if store_option is not None else obj["store"])
    try:
        head = current_head(root)
    except DPAuditError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps({"head": head.token, "size": head.size, "root": head.root, "store_id": head.store_id,
                               "key_fingerprint": head.key_fingerprint}))
    else:
        click.echo(f"{head.token}\nstore {head.store_id}, signed by key {head.key_fingerprint}")


def _check_listenable(host: str, port: int) -> None:
    """Refuse (exit 2, one line) when HOST:PORT cannot be listened on, before MLflow starts: a taken port would
    otherwise end in MLflow's own error output, and an exit status that does not say so.

    The probe sets SO_REUSEADDR as MLflow's server does, so only a port another socket listens on is refused.
    """
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise click.BadParameter(f"cannot resolve {host!r}: {exc}", param_hint="--host") from exc
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise click.UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): the port is taken, or "
                                   "the address is not this machine's; pick another --port or --host") from exc


LOOPBACK = "127.0.0.1"
"""Where ``dpaudit ui`` binds by default: this machine only."""


def _is_loopback(host: str) -> bool:
    """Whether ``host`` names the loopback interface only (``localhost``, 127.0.0.0/8, ::1)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@main.command(epilog=examples(
    "dpaudit ui",
    "dpaudit ui --port 5055",
    "dpaudit ui --host 0.0.0.0 --port 8080   # the whole network: read the warning"))
@click.option("--port", type=click.IntRange(1, 65535), default=5000, show_default=True)
@click.option("--host", default=LOOPBACK, show_default=True,
              help="Interface to bind. Anything but loopback serves the whole tracking store to the network.")
@click.pass_obj
def ui(obj: dict, port: int, host: str) -> None:
    """Open the MLflow UI on the run store (budget burn-down: metric dpaudit.epsilon_spent), on loopback only unless
    --host says otherwise. Confidential values are never in that store (they have their own 0600 file)."""
    from dpaudit.tracking import resolve_tracking_uri
    from dpaudit.tracking.store import prepare_store

    if not host.strip() or any(c.isspace() for c in host):
        raise click.BadParameter(f"not a host name or address: {host!r}", param_hint="--host")
    uri = resolve_tracking_uri(obj["tracking_uri"])
    if not _is_loopback(host):
        click.echo(f"warning: --host {host} serves everything in the tracking store ({redact_credentials(uri)}): "
                   "released values, "
                   "ledgers, certificates and reports of every run, to whoever reaches port "
                   f"{port}. Confidential values are not in it (they stay in each run's confidential/log.sqlite).",
                   err=True)
    _check_listenable(host, port)
    artifacts = prepare_store(uri)  # create a missing embedded store under its lock, never by `mlflow ui` unlocked
    mlflow = Path(sys.executable).with_name("mlflow")
    cmd = [str(mlflow) if mlflow.exists() else "mlflow", "ui", "--backend-store-uri", uri, "--host", host,
           "--port", str(port)]
    if artifacts is not None:
        cmd += ["--default-artifact-root", artifacts]
    from dpaudit.tracking.mirror import runs_view_url

    click.echo(f"MLflow UI on {runs_view_url(uri, f'http://{host}:{port}')} for {redact_credentials(uri)}")
    sys.exit(subprocess.call(cmd, env=os.environ.copy()))


@main.command(epilog=examples(
    "dpaudit demo",
    "dpaudit demo --seed 0 --epochs 1 --json   # quick, reproducible, NOT FOR RELEASE"))
@click.option("--json", "as_json", is_flag=True, help="Last line: one JSON object (run_id, certificate, ledger).")
@click.option("--seed", type=int, default=None, help="Seeded randomness (reproducible, NOT FOR RELEASE).")
@click.option("--epochs", type=int, default=None, help="Training epochs (default: the demo's).")
@click.option("--signing-key", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Ed25519 key that signs the certificate (default <store>/keys/signing_key.pem; created if absent).")
@click.pass_obj
def demo(obj: dict, as_json: bool, seed: int | None, epochs: int | None, signing_key: Path | None) -> None:
    """Run the demo: DP statistics and DP-SGD training on UCI Adult inside one audited session, then verify.

    The verdict is that of the `dpaudit verify` command it prints (exit 0 iff VALID). Ctrl-C or SIGTERM closes the
    run ABORTED (NOT FOR RELEASE) and prints its id.
    """
    from dpaudit.demo import run_demo
    from dpaudit.lifecycle import interrupt_exit_code, sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():
            summary = run_demo(store=obj["store"], tracking_uri=obj["tracking_uri"], seed=seed, epochs=epochs,
                               signing_key=signing_key,
                               echo=(lambda s: click.echo(s, err=True)) if as_json else click.echo)
    except KeyboardInterrupt as exc:
        sys.exit(interrupt_exit_code(exc))
    except BudgetExceeded as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except DPAuditError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(summary))
    sys.exit(0 if summary["verified"] else 1)
