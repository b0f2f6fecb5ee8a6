"""``dpaudit audit``: one-run audits from the command line (docs/audit.md).

``dpaudit audit mechanism gaussian|laplace`` opens a session in the run store whose budget is the mechanism's
claim, releases the canary histogram through the session's own mechanism (charged, ledgered, certified like any
release: canary i adds one to coordinate i, the idealised setting of Mahloujifar et al. 2025, Algorithm 4) and
prints both tests' ε_lb beside the release's certified ε; the design and evidence go to the ledger
(:mod:`dpaudit.audit.in_session`), so ``dpaudit verify`` recomputes them. ``dpaudit audit dpsgd`` trains an MLP
on a shipped data set with DP-SGD and white-box (:mod:`dpaudit.audit.dpsgd`) or black-box input canaries
(:mod:`dpaudit.audit.blackbox`) in its own certified run and prints both ε_lb beside the run's certified ε, with
the last-iterate heuristic (labelled as one). Exit 0: no detectable leakage above the claim; 1: the claim is
refuted; 2: bad options.
"""

from __future__ import annotations

import json
import sys

import click

from dpaudit.cli_account import examples

#: --family choices → the f-DP family the f-DP test's ε assumes
FAMILIES = ("epsilon-delta", "gaussian")


@click.group(epilog=examples("dpaudit audit mechanism gaussian --epsilon 1 --delta 1e-5 --canaries 1000"))
def audit() -> None:
    """One-run privacy audits: an empirical lower bound on ε beside the claimed ε (never a proof of privacy)."""


@audit.command("mechanism", epilog=examples(
    "dpaudit audit mechanism gaussian --epsilon 1 --delta 1e-5",
    "dpaudit audit mechanism laplace --epsilon 0.5 --canaries 5000 --json",
    "dpaudit audit mechanism gaussian --family gaussian --seed 0   # reproducible, NOT FOR RELEASE"))
@click.argument("mechanism", type=click.Choice(["gaussian", "laplace"]))
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="The claimed ε of one release.")
@click.option("--delta", type=float, default=1e-5, show_default=True,
              help="The δ of the claim and of both tests (the Laplace mechanism's own δ is 0).")
@click.option("--canaries", type=int, default=1000, show_default=True, help="Number of canaries m.")
@click.option("--family", type=click.Choice(FAMILIES), default="epsilon-delta", show_default=True,
              help="Curves the f-DP test's ε assumes: epsilon-delta (no assumption) or gaussian (mu-GDP; for the "
              "gaussian mechanism only).")
@click.option("--seed", type=int, default=None, help="Seeded randomness (reproducible, NOT FOR RELEASE).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of the statement.")
@click.pass_obj
def audit_mechanism_command(obj: dict, mechanism: str, epsilon: float, delta: float, canaries: int, family: str,
                            seed: int | None, as_json: bool) -> None:
    """Audit one of the session's mechanisms on m canaries and print ε_lb of both tests beside the claim."""
    from dpaudit import Session
    from dpaudit.audit import MechanismAudit
    from dpaudit.audit.in_session import audit_in_session
    from dpaudit.audit.mechanism import family_of
    from dpaudit.mechanisms.randomness import SeededRandom
    from dpaudit.validation import check_delta

    # before the session opens: a bad option (a family the mechanism does not belong to) leaves no run behind
    check_delta(delta, allow_zero=False)  # the audit's δ: the one message of every audit entry point
    design = MechanismAudit(canaries, epsilon, delta, family=family_of(mechanism, family, delta))
    session_delta = delta if mechanism == "gaussian" else 0.0
    rng = None if seed is None else SeededRandom(seed)  # None: audit_in_session draws from the OS CSPRNG
    with Session(epsilon=epsilon, delta=max(session_delta, delta), name=f"audit-{mechanism}", store=obj["store"],
                 tracking_uri=obj["tracking_uri"], protected=("canaries",), mirror=False,
                 rng=None if seed is None else SeededRandom(seed + 1)) as session:
        if mechanism == "gaussian":
            report = audit_in_session(session, lambda x: session.gaussian(
                x, sensitivity=1.0, epsilon=epsilon, delta=delta, label="audit: canary histogram"), design, rng)
        else:
            report = audit_in_session(session, lambda x: session.laplace(
                x, sensitivity=1.0, epsilon=epsilon, label="audit: canary histogram"), design, rng)
        run_id = session.run_id
    if as_json:
        click.echo(json.dumps({
            "run_id": run_id, "mechanism": mechanism, "claimed_epsilon": epsilon,
            "epsilon_cert": report.audit.claimed_epsilon, "delta": delta,
            "canaries": canaries, "epsilon_lb_steinke": report.steinke.epsilon, "epsilon_lb_fdp": report.fdp.epsilon,
            "fdp_assumes": report.fdp.assumes, "ceiling_steinke": report.ceiling_steinke,
            "ceiling_fdp": report.ceiling_fdp, "guess_rules": report.steinke.tried, "level": design.level,
            "refuted": report.refuted, "statement": report.statement()}))
    else:
        click.echo(f"run {run_id} ({mechanism}): {report.statement()}")
    sys.exit(1 if report.refuted else 0)


@audit.command("dpsgd", epilog=examples(
    "dpaudit audit dpsgd --epsilon 4",
    "dpaudit audit dpsgd --epsilon 8 --data mnist-5000 --canaries 5000 --json",
    "dpaudit audit dpsgd --canary-type input --canaries 1000 --epsilon 8",
    "dpaudit audit dpsgd --canaries 500 --hidden 64 --seed 0   # reproducible, NOT FOR RELEASE"))
@click.option("--epsilon", type=float, default=4.0, show_default=True,
              help="The certified ε of the audited run (σ is calibrated to it).")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="The δ of the run and of both tests.")
@click.option("--data", "dataset", type=click.Choice(["digits", "mnist-5000"]), default="digits", show_default=True,
              help="Shipped data set; its protected training part is used, label 'digit >= 5'.")
@click.option("--canaries", type=int, default=5000, show_default=True, help="Number of canaries m.")
@click.option("--canary-type", type=click.Choice(["dirac", "input"]), default="dirac", show_default=True,
              help="dirac: white-box gradient canaries; input: black-box canary examples (random binary images with "
              "random labels) scored from the released model only.")
@click.option("--hidden", type=int, default=1536, show_default=True,
              help="Hidden width of the MLP (1536 on digits: 101,377 parameters).")
@click.option("--batch-size", type=int, default=730, show_default=True, help="Expected batch size B (q = B/n).")
@click.option("--epochs", type=int, default=5, show_default=True, help="Epochs (N = epochs x floor(1/q) steps).")
@click.option("--lr", type=float, default=0.5, show_default=True, help="Learning rate of plain DP-SGD.")
@click.option("--clip", type=float, default=1.0, show_default=True, help="Clip norm C (and the canaries' norm).")
@click.option("--seed", type=int, default=None, help="Seeded randomness (reproducible, NOT FOR RELEASE).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of the statement.")
@click.pass_obj
def audit_dpsgd_command(obj: dict, epsilon: float, delta: float, dataset: str, canaries: int, canary_type: str,
                        hidden: int, batch_size: int, epochs: int, lr: float, clip: float, seed: int | None,
                        as_json: bool) -> None:
    """Train an MLP with DP-SGD and m canaries in its own certified run; print ε_lb beside ε_cert.

    The canaries, their membership bits and scores go to the run's ledger: `dpaudit verify RUN` recomputes ε_lb.
    """
    from dpaudit import Session
    from dpaudit.audit.dpsgd import audit_shipped
    from dpaudit.mechanisms.randomness import SeededRandom
    from dpaudit.provenance import dpaudit_version
    from dpaudit.validation import check_count, check_delta, check_positive

    for name, count in (("canaries", canaries), ("hidden", hidden), ("batch_size", batch_size), ("epochs", epochs)):
        check_count(name, count)  # before the session opens: a bad option leaves no run behind
    check_positive("lr", lr)
    check_positive("clip", clip)
    check_delta(delta, allow_zero=False)  # the audit's δ: the one message of every audit entry point
    # more canaries than parameters, a batch larger than the data set or a run the accountant cannot bound shows
    # only once the data and model are loaded inside the session: that run then closes with nothing charged and no
    # commitment written (dpaudit.audit.dpsgd.planned_audit)
    with Session(epsilon=epsilon, delta=delta, name=f"audit-dpsgd-{dataset}", store=obj["store"],
                 tracking_uri=obj["tracking_uri"], protected=(f"{dataset}-train",), mirror=False,
                 rng=None if seed is None else SeededRandom(seed)) as session:
        result = audit_shipped(session.for_plugin("dpaudit-audit", dpaudit_version()), dataset, target_epsilon=epsilon,
                               delta=delta, canaries=canaries, hidden=hidden, batch_size=batch_size, epochs=epochs,
                               lr=lr, max_grad_norm=clip, canary_type=canary_type)
        run_id = session.run_id
    report = result.report
    if as_json:
        click.echo(json.dumps({
            "run_id": run_id, "data": dataset, "canaries": canaries, "canary_type": canary_type,
            "n_parameters": result.train.n_parameters,
            "sample_rate": result.train.sample_rate, "steps": result.train.steps,
            "epsilon_cert": report.audit.claimed_epsilon, "delta": delta,
            "epsilon_lb_steinke": report.steinke.epsilon, "epsilon_lb_fdp": report.fdp.epsilon,
            "fdp_assumes": report.fdp.assumes, "ceiling_steinke": report.ceiling_steinke,
            "ceiling_fdp": report.ceiling_fdp, "epsilon_last_iterate_heuristic": report.last_iterate,
            "guess_rules": report.steinke.tried, "level": report.audit.level,
            "refuted": report.refuted, "statement": report.statement()}))
    else:
        kind = "white-box" if canary_type == "dirac" else "black-box input"
        click.echo(f"run {run_id} (DP-SGD, {result.train.n_parameters} parameters, {canaries} {kind} canaries): "
                   f"{report.statement()}")
    sys.exit(1 if report.refuted else 0)
