"""``dpaudit account``: an auditor's calculator, ε from public parameters for every event the kernel supports.

Each mechanism command builds the event a session would record, through the mechanism module's own event
constructor (``dpaudit/mechanisms/<name>.py``: the session's calibration), evaluates that module's privacy map, and
composes ``--count`` applications with a chosen accountant (:mod:`dpaudit.accounting`) at ``--delta``.
``events FILE`` recomposes a JSON list of events in the ledger's format, ``ledger RUN`` every charge of a run's
ledger exactly as its certificate does (:func:`dpaudit.certificate.compute_claim`). Every command prints the
formula and paper it applied: the docstrings of the maps and accountants it called (:func:`formulas`), so that
nothing here restates, or could drift from, the mathematics.

Every ε printed is an upper bound. Imports are lazy: ``dpaudit --help`` loads this module, and only the command
that computes loads numpy, scipy and dp_accounting.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from dpaudit.display import plural, show, show_delta

#: the names of :data:`dpaudit.accounting.ACCOUNTANTS`, spelled out so that ``--help`` imports no accountant (a test
#: checks that the two agree)
ACCOUNTANT_NAMES = ("tightest", "rdp", "pld", "prv", "advanced", "basic")
DECLARED_REASON = "given to dpaudit account"
EXAMPLES = "\b\nExamples:\n"


def examples(*lines: str) -> str:
    """An ``Examples:`` block for a command's help, kept verbatim by click (the ``\\b`` marker)."""
    return EXAMPLES + "\n".join(f"  {line}" for line in lines)


def _doc(obj: Any) -> str:
    return inspect.getdoc(obj) or ""


def _formula_of_unit(unit: Any) -> list[tuple[str, str]]:
    """(where, text) of the privacy statement for one accounting unit and, for repeat-and-select, its base."""
    from dpaudit.events import (
        GaussianEvent,
        PoissonSubsampledGaussianEvent,
        RepeatAndSelectEvent,
        SampledWithoutReplacementGaussianEvent,
    )
    from dpaudit.mechanisms import gaussian, subsampled_gaussian
    from dpaudit.mechanisms.registry import entry_for

    if isinstance(unit, RepeatAndSelectEvent):
        from dpaudit.accounting import repeat_select

        text = _doc(repeat_select).split("Both bounds")[0].strip()
        return [("dpaudit.accounting.repeat_select", text)] + [
            item for leaf, _ in unit.event.accounting_units() for item in _formula_of_unit(leaf)]
    entry = entry_for(unit)
    if entry is not None and entry.pure_epsilon is not None:
        fn = entry.pure_epsilon
        return [(f"{fn.__module__}.{fn.__qualname__}", _doc(fn))]
    if isinstance(unit, GaussianEvent):
        fn = gaussian.discrete_gaussian_delta
        return [(f"{fn.__module__}.{fn.__qualname__}", _doc(fn).split("\n\nArgs:")[0])]
    if isinstance(unit, (PoissonSubsampledGaussianEvent, SampledWithoutReplacementGaussianEvent)):
        return [(subsampled_gaussian.__name__, _doc(subsampled_gaussian))]
    return [(type(unit).__module__, _doc(type(unit)))]


def formulas(event: Any, accountant: Any) -> list[dict[str, str]]:
    """The privacy statements applied to ``event``: each distinct mechanism map (its docstring, with its paper),
    then the accountant that composed them (its docstring and version)."""
    seen: dict[str, str] = {}
    for unit, _ in event.accounting_units():
        for where, text in _formula_of_unit(unit):
            seen.setdefault(where, text)
    out = [{"source": where, "text": text} for where, text in seen.items()]
    cls = type(accountant)
    out.append({"source": f"{cls.__module__}.{cls.__qualname__} ({accountant.version()})", "text": _doc(cls)})
    return out


def _compose(event: Any, delta: float, accountant_name: str) -> dict[str, Any]:
    """ε of ``event`` at ``delta`` with the named accountant, and which member attained it.

    Raises:
        InvalidParameter: δ out of range, or no finite bound (numerics overflow for extreme parameters).
    """
    from dpaudit.accounting import get_accountant
    from dpaudit.errors import InvalidParameter
    from dpaudit.validation import check_delta

    delta = check_delta(delta)
    accountant = get_accountant(accountant_name)
    try:
        epsilon, source = accountant.epsilon_with_source(event, delta)
    except (ArithmeticError, ValueError, MemoryError) as exc:  # e.g. σ = 1e-300 or 10**30 steps
        raise InvalidParameter(f"no finite bound for these parameters ({type(exc).__name__}: {exc})") from exc
    return {"epsilon": epsilon, "delta": delta, "accountant": accountant.name, "attained_by": source,
            "accountant_version": accountant.version(), "upper_bound": True,
            "formulas": formulas(event, accountant)}


def _emit(out: dict[str, Any], as_json: bool, headline: str, details: list[str]) -> None:
    """Print ``out`` as one JSON object, or the headline, the details and the formulas as text."""
    if as_json:
        click.echo(json.dumps(out))
        return
    click.echo(f"epsilon <= {show(out['epsilon'])} at delta = {show_delta(out['delta'])} "
               f"({out['accountant']} accountant, attained by {out['attained_by']}; {headline})")
    for line in details:
        click.echo(f"  {line}")
    for item in out["formulas"]:
        click.echo(f"formula ({item['source']}):")
        for line in item["text"].splitlines():
            click.echo(f"    {line}".rstrip())


def _account_event(leaf: Any, count: int, delta: float, accountant: str, as_json: bool, mechanism: dict[str, Any],
                   details: list[str]) -> None:
    """Compose ``count`` applications of ``leaf`` and print the result with the mechanism's own numbers."""
    from dpaudit.events import SelfComposedEvent
    from dpaudit.validation import check_count

    count = check_count("count", count)
    event = leaf if count == 1 else SelfComposedEvent(event=leaf, count=count)
    out = _compose(event, delta, accountant)
    out.update({"count": count, "neighbouring": _neighbouring_of(event), "mechanism": mechanism,
                "event": event.to_dict()})
    _emit(out, as_json, f"{plural(count, 'application')}, {out['neighbouring'].replace('_', '/')} neighbours",
          details)


def _neighbouring_of(event: Any) -> str:
    from dpaudit.events import neighbouring_of

    return neighbouring_of(event).value


def _common(delta_required: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options every mechanism command shares: composition (δ, accountant, count), relation and output."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option("--delta", type=float, required=delta_required, default=None if delta_required else 0.0,
                         show_default=not delta_required,
                         help="δ at which the composed ε is stated (0 < δ < 1; 0 only for pure-DP events)."),
            click.option("--accountant", type=click.Choice(ACCOUNTANT_NAMES), default="tightest", show_default=True,
                         help="Composition: tightest (minimum of the others that apply), rdp, pld, prv, advanced or "
                         "basic (docs/accounting.md)."),
            click.option("--count", type=int, default=1, show_default=True,
                         help="Applications of the mechanism composed (each with these parameters)."),
            click.option("--neighbouring", type=click.Choice(["add_remove", "replace_one"]), default="add_remove",
                         show_default=True, help="Which data sets are neighbours."),
            click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the event included)."),
        ]
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


@click.group(epilog=examples(
    "dpaudit account laplace --sensitivity 1 --epsilon 0.5",
    "dpaudit account dpsgd --sample-rate 0.0157 --noise-multiplier 1.0 --steps 192 --delta 1e-5",
    "dpaudit account ledger <run id>"))
def account() -> None:
    """An auditor's calculator: ε of a mechanism, an event list or a whole ledger, from public parameters.

    Every command prints the formula and paper it applies; every ε printed is an upper bound.
    """


@account.command("laplace", epilog=examples(
    "dpaudit account laplace --sensitivity 1 --epsilon 0.5",
    "dpaudit account laplace --sensitivity 1 --scale 2 --count 10 --delta 1e-6"))
@click.option("--sensitivity", type=float, required=True, help="L1 sensitivity Δ of the released value(s).")
@click.option("--epsilon", type=float, default=None, help="Target ε: the session's calibration picks the scale.")
@click.option("--scale", type=float, default=None, help="Noise scale b (value units) instead of --epsilon.")
@click.option("--grid", type=float, default=None, help="Grid spacing γ (default Δ/2^10, the session's).")
@click.option("--dimension", type=int, default=1, show_default=True, help="Number of coordinates d.")
@_common(delta_required=False)
def account_laplace(sensitivity: float, epsilon: float | None, scale: float | None, grid: float | None,
                    dimension: int, delta: float, accountant: str, count: int, neighbouring: str,
                    as_json: bool) -> None:
    """ε of the discrete Laplace mechanism (Canonne, Kamath & Steinke 2020) from its scale or target ε."""
    from dpaudit.events import LaplaceEvent
    from dpaudit.mechanisms.grid import default_grid
    from dpaudit.mechanisms.laplace import laplace_epsilon, laplace_event
    from dpaudit.sensitivity import Neighbouring, Norm, declared

    sens = declared(sensitivity, Norm.L1 if dimension > 1 else Norm.ABS, DECLARED_REASON)
    relation = Neighbouring(neighbouring)
    if (epsilon is None) == (scale is None):
        raise click.UsageError("give exactly one of --epsilon and --scale")
    if epsilon is not None:
        leaf = laplace_event(relation, sens, epsilon, dimension=dimension, grid=grid)
    else:
        gamma = grid if grid is not None else default_grid(sens.value)
        probe = LaplaceEvent(neighbouring=relation, sensitivity=sens, epsilon=1.0, scale=scale, grid=gamma,
                             dimension=dimension)
        leaf = LaplaceEvent(neighbouring=relation, sensitivity=sens, epsilon=laplace_epsilon(probe), scale=scale,
                            grid=gamma, dimension=dimension)
    per = laplace_epsilon(leaf)
    _account_event(leaf, count, delta, accountant, as_json,
                   {"scale": leaf.scale, "grid": leaf.grid, "dimension": leaf.dimension, "epsilon_map": per},
                   [f"discrete Laplace: scale b = {leaf.scale:.6g}, grid γ = {leaf.grid:g}, d = {leaf.dimension}; "
                    f"privacy map ε = {show(per)} per application"])


@account.command("gaussian", epilog=examples(
    "dpaudit account gaussian --sensitivity 1 --epsilon 0.5 --event-delta 1e-6 --delta 1e-5",
    "dpaudit account gaussian --sensitivity 1 --sigma 4 --epsilon 1 --count 20 --delta 1e-5"))
@click.option("--sensitivity", type=float, required=True, help="L2 sensitivity Δ of the released value(s).")
@click.option("--epsilon", type=float, required=True, help="The release's ε (with --event-delta: its target).")
@click.option("--event-delta", type=float, default=None,
              help="Target δ of one release: the session's calibration picks σ.")
@click.option("--sigma", type=float, default=None, help="Noise σ (value units) instead of --event-delta.")
@click.option("--grid", type=float, default=None, help="Grid spacing γ (default Δ/2^10, the session's).")
@click.option("--dimension", type=int, default=1, show_default=True, help="Number of coordinates d.")
@_common(delta_required=True)
def account_gaussian(sensitivity: float, epsilon: float, event_delta: float | None, sigma: float | None,
                     grid: float | None, dimension: int, delta: float, accountant: str, count: int, neighbouring: str,
                     as_json: bool) -> None:
    """(ε, δ) of the discrete Gaussian mechanism (Canonne, Kamath & Steinke 2020), composed at --delta."""
    from dpaudit.events import GaussianEvent
    from dpaudit.mechanisms.gaussian import gaussian_event, gaussian_event_delta
    from dpaudit.mechanisms.grid import default_grid
    from dpaudit.sensitivity import Neighbouring, Norm, declared

    sens = declared(sensitivity, Norm.L2 if dimension > 1 else Norm.ABS, DECLARED_REASON)
    relation = Neighbouring(neighbouring)
    if (event_delta is None) == (sigma is None):
        raise click.UsageError("give exactly one of --event-delta and --sigma")
    if event_delta is not None:
        leaf = gaussian_event(relation, sens, epsilon, event_delta, dimension=dimension, grid=grid)
    else:
        gamma = grid if grid is not None else default_grid(sens.value)
        probe = GaussianEvent(neighbouring=relation, sensitivity=sens, epsilon=epsilon, delta=0.5, sigma=sigma,
                              grid=gamma, dimension=dimension)
        leaf = GaussianEvent(neighbouring=relation, sensitivity=sens, epsilon=epsilon,
                             delta=gaussian_event_delta(probe), sigma=sigma, grid=gamma, dimension=dimension)
    own = gaussian_event_delta(leaf)
    _account_event(leaf, count, delta, accountant, as_json,
                   {"sigma": leaf.sigma, "grid": leaf.grid, "dimension": leaf.dimension, "epsilon": leaf.epsilon,
                    "delta_map": own},
                   [f"discrete Gaussian: σ = {leaf.sigma:.6g}, grid γ = {leaf.grid:g}, d = {leaf.dimension}; "
                    f"privacy map: (ε = {show(leaf.epsilon)}, δ <= {show(own)}) per application"])


@account.command("exponential", epilog=examples(
    "dpaudit account exponential --sensitivity 1 --epsilon 0.2 --candidates 8",
    "dpaudit account exponential --sensitivity 1 --epsilon 0.2 --candidates 8 --count 5 --delta 1e-6"))
@click.option("--sensitivity", type=float, required=True, help="Sensitivity Δ of every candidate's score.")
@click.option("--epsilon", type=float, required=True, help="ε of one selection.")
@click.option("--candidates", type=int, required=True, help="Number of candidates.")
@click.option("--monotone", is_flag=True, help="Scores move together between neighbours (rate ε/Δ; an assumption).")
@_common(delta_required=False)
def account_exponential(sensitivity: float, epsilon: float, candidates: int, monotone: bool, delta: float,
                        accountant: str, count: int, neighbouring: str, as_json: bool) -> None:
    """ε of the exponential mechanism (McSherry & Talwar 2007); composition uses its bounded range."""
    from dpaudit.mechanisms.exponential import exponential_epsilon, exponential_event
    from dpaudit.sensitivity import Neighbouring, Norm, declared

    leaf = exponential_event(Neighbouring(neighbouring), declared(sensitivity, Norm.ABS, DECLARED_REASON), epsilon,
                             n_candidates=candidates, monotone=monotone)
    per = exponential_epsilon(leaf)
    _account_event(leaf, count, delta, accountant, as_json,
                   {"n_candidates": candidates, "monotone": monotone, "epsilon_map": per},
                   [f"exponential mechanism over {plural(candidates, 'candidate')}"
                    f"{' (monotone scores)' if monotone else ''}; privacy map ε = {show(per)} per selection"])


@account.command("above-threshold", epilog=examples(
    "dpaudit account above-threshold --sensitivity 0.1 --epsilon 0.5 --rounds 8",
    "dpaudit account above-threshold --sensitivity 0.1 --epsilon 0.5 --rounds 8 --delta 1e-5 --accountant pld"))
@click.option("--sensitivity", type=float, required=True, help="Sensitivity Δ of each query.")
@click.option("--epsilon", type=float, required=True, help="ε of one round (one AboveThreshold run).")
@click.option("--rounds", type=int, default=1, show_default=True, help="Rounds charged (e.g. T_max, up front).")
@click.option("--max-queries", type=int, default=1, show_default=True,
              help="Queries one round may answer (recorded; ε does not depend on it).")
@click.option("--grid", type=float, default=None, help="Grid spacing γ (default Δ/2^10, the session's).")
@_common(delta_required=False)
def account_above_threshold(sensitivity: float, epsilon: float, rounds: int, max_queries: int, grid: float | None,
                            delta: float, accountant: str, count: int, neighbouring: str, as_json: bool) -> None:
    """ε of AboveThreshold (Dwork & Roth 2014, Alg. 1; Lyu, Su & Li 2017) charged for ROUNDS rounds."""
    from dpaudit.events import SelfComposedEvent
    from dpaudit.mechanisms.above_threshold import above_threshold_epsilon, above_threshold_event
    from dpaudit.sensitivity import Neighbouring, Norm, declared

    event = above_threshold_event(Neighbouring(neighbouring), declared(sensitivity, Norm.ABS, DECLARED_REASON),
                                  epsilon, max_queries=max_queries, rounds=rounds, grid=grid)
    leaf = event.event if isinstance(event, SelfComposedEvent) else event
    per = above_threshold_epsilon(leaf)
    _account_event(leaf, rounds * count, delta, accountant, as_json,
                   {"threshold_scale": leaf.threshold_scale, "query_scale": leaf.query_scale, "grid": leaf.grid,
                    "max_queries": max_queries, "rounds": rounds, "epsilon_map": per},
                   [f"AboveThreshold: threshold scale {leaf.threshold_scale:.6g}, query scale "
                    f"{leaf.query_scale:.6g}, grid γ = {leaf.grid:g}; privacy map ε = {show(per)} per round, "
                    f"{plural(rounds, 'round')}" + (f" × {count}" if count > 1 else "")])


def _dpsgd_event(sample_rate: float, noise_multiplier: float, steps: int, neighbouring: str) -> Any:
    from dpaudit.events import PoissonSubsampledGaussianEvent
    from dpaudit.sensitivity import from_formula

    return PoissonSubsampledGaussianEvent(
        neighbouring=neighbouring,
        sensitivity=from_formula("clipped_gradient_sum", neighbouring, clip_norm=1.0),
        sample_rate=sample_rate, noise_multiplier=noise_multiplier, steps=steps, label="dpsgd")


@account.command("dpsgd", epilog=examples(
    "dpaudit account dpsgd --sample-rate 0.0157 --noise-multiplier 1.0 --steps 192 --delta 1e-5",
    "dpaudit account dpsgd --sample-rate 0.004 --noise-multiplier 1.1 --steps 10000 --delta 1e-5 --accountant rdp"))
@click.option("--sample-rate", type=float, required=True, help="Poisson sampling rate q = B/n of one step.")
@click.option("--noise-multiplier", type=float, required=True,
              help="σ / C: noise standard deviation over the clipping norm C.")
@click.option("--steps", type=int, required=True, help="Number of noisy steps (epochs × n/B).")
@_common(delta_required=True)
def account_dpsgd(sample_rate: float, noise_multiplier: float, steps: int, delta: float, accountant: str,
                  count: int, neighbouring: str, as_json: bool) -> None:
    """ε of Poisson-subsampled Gaussian DP-SGD (Abadi et al. 2016); COUNT training runs composed."""
    if neighbouring != "add_remove":
        raise click.BadParameter("Poisson-sampled DP-SGD is accounted for add/remove neighbours only",
                                 param_hint="--neighbouring")
    leaf = _dpsgd_event(sample_rate, noise_multiplier, steps, neighbouring)
    _account_event(leaf, count, delta, accountant, as_json,
                   {"sample_rate": sample_rate, "noise_multiplier": noise_multiplier, "steps": steps},
                   [f"DP-SGD: q = {sample_rate:g}, σ/C = {noise_multiplier:g}, {plural(steps, 'step')}, "
                    "Poisson sampling"])


@account.command("repeat-and-select", epilog=examples(
    "dpaudit account repeat-and-select --distribution geometric --gamma 0.1 --sample-rate 0.0157 "
    "--noise-multiplier 1 --steps 192 --delta 1e-5",
    "dpaudit account repeat-and-select --distribution poisson --mu 8 --base base_event.json --delta 1e-5"))
@click.option("--distribution", type=click.Choice(["geometric", "truncated_negative_binomial", "poisson"]),
              required=True, help="The law of the number of repetitions K.")
@click.option("--gamma", type=float, default=None, help="γ of the geometric or truncated negative binomial law.")
@click.option("--eta", type=float, default=None, help="η of the truncated negative binomial law (whole, >= 1).")
@click.option("--mu", type=float, default=None, help="μ (mean) of the Poisson law.")
@click.option("--base", "base_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSON file holding the base event (ledger format) instead of the DP-SGD options.")
@click.option("--sample-rate", type=float, default=None, help="DP-SGD base: Poisson sampling rate q.")
@click.option("--noise-multiplier", type=float, default=None, help="DP-SGD base: σ / C.")
@click.option("--steps", type=int, default=None, help="DP-SGD base: steps of one run.")
@_common(delta_required=True)
def account_repeat_and_select(distribution: str, gamma: float | None, eta: float | None, mu: float | None,
                              base_path: Path | None, sample_rate: float | None, noise_multiplier: float | None,
                              steps: int | None, delta: float, accountant: str, count: int, neighbouring: str,
                              as_json: bool) -> None:
    """ε of the best of K runs, K random (Liu & Talwar 2019; Papernot & Steinke 2022, Thms. 2 and 6)."""
    from dpaudit import canonical
    from dpaudit.errors import InvalidParameter
    from dpaudit.mechanisms.repeat_and_select import repeat_and_select_event

    dpsgd = (sample_rate, noise_multiplier, steps)
    if base_path is not None:
        if any(x is not None for x in dpsgd):
            raise click.UsageError("give the base as --base FILE or as the DP-SGD options, not both")
        base = _decode_event(canonical.read_object(base_path, InvalidParameter), str(base_path))
    elif all(x is not None for x in dpsgd):
        base = _dpsgd_event(sample_rate, noise_multiplier, steps, neighbouring)
    else:
        raise click.UsageError("give the base event: --base FILE, or --sample-rate, --noise-multiplier and --steps")
    params = {k: v for k, v in (("gamma", gamma), ("eta", eta), ("mu", mu)) if v is not None}
    leaf = repeat_and_select_event(base, distribution, params)
    _account_event(leaf, count, delta, accountant, as_json, {"distribution": distribution, **params},
                   [f"repeat-and-select: K ~ {distribution}({', '.join(f'{k}={v:g}' for k, v in params.items())}), "
                    "only the best output released"])


def _decode_event(data: Any, where: str) -> Any:
    """One event from its ledger form; anything malformed is bad input (exit 2), named with ``where``."""
    from dpaudit.errors import DPAuditError, InvalidParameter
    from dpaudit.events import PrivacyEvent

    if not isinstance(data, dict):
        raise InvalidParameter(f"{where}: an event must be a JSON object, got {type(data).__name__}")
    try:
        return PrivacyEvent.from_dict(data)
    except DPAuditError as exc:
        raise InvalidParameter(f"{where}: {exc}") from exc
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidParameter(f"{where}: not an event in the ledger's format ({type(exc).__name__}: {exc})") from exc


def read_events(path: Path) -> list[Any]:
    """The events of a JSON file holding a list of events in the ledger's format (or ``{"events": [...]}``).

    Raises:
        InvalidParameter: unreadable, not strict JSON, empty, or an entry that is not an event.
    """
    from dpaudit import canonical
    from dpaudit.errors import InvalidParameter
    from dpaudit.files import read_regular

    raw = read_regular(path, canonical.MAX_OBJECT_BYTES, InvalidParameter)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidParameter(f"{path}: not UTF-8 text: {exc}") from exc
    # a top-level list is parsed as the value of an object, so the one strict parser (canonical) reads it too
    data = canonical.loads_object(f'{{"events": {text}\n}}' if text.lstrip().startswith("[") else text, str(path),
                                  InvalidParameter)
    events = data.get("events")
    if not isinstance(events, list) or not events or set(data) != {"events"}:
        raise InvalidParameter(f"{path}: expected a non-empty JSON list of events (or {{\"events\": [...]}})")
    return [_decode_event(e, f"{path}: event {i}") for i, e in enumerate(events)]


def _kinds(events: list[Any]) -> str:
    from collections import Counter

    counts: Counter[str] = Counter()
    for event in events:
        for leaf, times in event.leaves():
            counts[leaf.kind] += times
    return ", ".join(f"{kind} × {n}" for kind, n in sorted(counts.items()))


@account.command("events", epilog=examples(
    "dpaudit account events events.json --delta 1e-5",
    "dpaudit account events events.json --delta 1e-5 --accountant rdp --json"))
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--delta", type=float, required=True, help="δ at which the composed ε is stated.")
@click.option("--accountant", type=click.Choice(ACCOUNTANT_NAMES), default="tightest", show_default=True,
              help="Composition (docs/accounting.md).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def account_events(file: Path, delta: float, accountant: str, as_json: bool) -> None:
    """Compose the events in FILE (a JSON list, each in the ledger's event format) with one accountant."""
    from dpaudit.events import compose

    events = read_events(file)
    out = _compose(compose(events), delta, accountant)
    out["events"] = len(events)
    _emit(out, as_json, f"{plural(len(events), 'event')}: {_kinds(events)}", [])


@account.command("ledger", epilog=examples(
    "dpaudit account ledger dpaudit_runs/<run id>",
    "dpaudit account ledger <run id> --accountant rdp",
    "dpaudit account ledger <run id> --delta 1e-6 --json"))
@click.argument("run")
@click.option("--delta", type=float, default=None, help="δ of the claim (default: the session's δ, as certified).")
@click.option("--accountant", type=click.Choice(ACCOUNTANT_NAMES), default=None,
              help="Composition (default: the session's accountant, as certified).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def account_ledger(obj: dict, run: str, delta: float | None, accountant: str | None, as_json: bool) -> None:
    """Recompose every charge in RUN's ledger (charges never released included), as its certificate does.

    With the defaults the result is the certificate's claim, recomputed from the ledger alone. An adaptive run's
    claim is its Rényi filter's budget: the filter is re-run over the charges instead (no other accountant is valid
    for parameters chosen adaptively).
    """
    from dpaudit.certificate import charged_events, compute_claim, open_body
    from dpaudit.errors import InvalidParameter, LedgerError
    from dpaudit.events import compose
    from dpaudit.ledger import read_records
    from dpaudit.runs import resolve_run
    from dpaudit.store import CERTIFICATE, LEDGER

    folder = resolve_run(run, store=obj["store"], tracking_uri=obj["tracking_uri"])
    records, problems = read_records(folder / LEDGER)
    if problems:
        raise LedgerError(f"{folder / LEDGER}: {plural(len(problems), 'unreadable line')} ({problems[0]}); "
                          "run `dpaudit verify` for the whole story")
    opened = open_body(records)
    charges = charged_events(records)
    if opened.adaptive is not None:
        if accountant is not None or delta is not None:
            raise InvalidParameter("this run is adaptive: its claim is its Renyi filter's budget, at the filter's "
                                   "delta; --accountant and --delta do not apply")
        claim = compute_claim(records)
        out = {**claim, "upper_bound": True, "formulas": [], "charges": len(charges)}
        headline = f"adaptive run: Renyi filter budget, {plural(len(charges), 'charge')} admitted"
    elif not charges:
        out = {**compute_claim(records), "upper_bound": True, "formulas": [], "charges": 0}
        headline = "no charges"
    else:
        events = [e for _, e in charges]
        out = _compose(compose(events), opened.delta if delta is None else delta,
                       accountant or opened.accountant["name"])
        out["charges"] = len(charges)
        headline = f"{plural(len(charges), 'charge')}: {_kinds(events)}"
    details = []
    certificate = folder / CERTIFICATE
    if certificate.is_file() and delta is None and accountant is None:
        from dpaudit import canonical
        from dpaudit.errors import VerificationError

        claimed = canonical.read_object(certificate, VerificationError).get("claim", {})
        out["certificate_epsilon"] = claimed.get("epsilon")
        same = claimed.get("epsilon") == out["epsilon"] and claimed.get("delta") == out["delta"]
        details.append(f"certificate claims epsilon = {claimed.get('epsilon')} at delta = {claimed.get('delta')}: "
                       f"{'the same' if same else 'DIFFERENT: run dpaudit verify'}")
    _emit(out, as_json, headline, details)
