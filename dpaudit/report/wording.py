"""Plain-language wording of the report: the first section's sentences and the glossary.

Numbers are formatted by :mod:`dpaudit.display` (every ε rounded up, every δ exact). The sentences are built from
the report model only, so every format (text, Markdown, JSON, HTML) says the same thing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit import canonical
from dpaudit.display import CLAIM_DIGITS, COMPONENT_DIGITS, plural, round_up, show, show_delta, show_lower
from dpaudit.nist_fields import FIELD
from dpaudit.records import FINISHED


def compact(value: Any) -> str:
    """A released value in one line: an object as ``k=v`` pairs, anything else as JSON (no ``\\u`` escapes)."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={compact(v) if isinstance(v, Mapping) else _json(v)}" for k, v in value.items())
    return _json(value)


#: ``json.dumps(value, ensure_ascii=False, sort_keys=True)``, built once (dumps builds an encoder per call)
_json = canonical.acyclic_encode(json.JSONEncoder(ensure_ascii=False, sort_keys=True))


def neighbours_in_words(relation: str, protected: Sequence[str]) -> str:
    """The neighbouring relation as a sentence about one record of the protected data."""
    data = " and ".join(protected) or "the protected data"
    if relation == "add_remove":
        change = f"adding one record to, or removing one record from, {data}"
    elif relation == "replace_one":
        change = f"replacing one record of {data} by any other record"
    else:
        change = f"changing {data} under the {relation.replace('_', '/')} relation"
    return change


def status_sentence(close_status: str | None, certificate: Mapping[str, Any] | None) -> tuple[bool, str]:
    """(releasable, the sentence saying whether the run finished and whether its outputs are for release).

    Releasable means closed ``FINISHED`` with a certificate that says ``for_release``; anything else is said plainly.
    """
    if close_status is None or certificate is None:
        return False, ("NOT CLOSED: the run has no certificate yet (it is still running, or its process died before "
                       "it closed). Nothing in this report is for release.")
    stated = f" The certificate says: {certificate.get('release_status', 'not for release')}."
    if close_status != FINISHED:
        return False, (f"NOT FOR RELEASE: the run did not finish (it closed {close_status}). The guarantee below "
                       "still covers every charge it made, but its outputs must not be published or used as a "
                       f"finished result.{stated}")
    if not certificate.get("for_release"):
        return False, f"NOT FOR RELEASE: the run finished, but its outputs are not for release.{stated}"
    return True, "FINISHED and for release: the run closed normally and its noise came from secure randomness."


def guarantee_sentence(claim: Mapping[str, Any], relation: str, protected: Sequence[str]) -> str:
    """The certified claim in one sentence, with what ε and δ mean for one person in the data."""
    epsilon, delta = claim["epsilon"], claim["delta"]
    try:
        factor = show(math.exp(round_up(epsilon, CLAIM_DIGITS)), 4)
    except OverflowError:
        factor = "more than 10^308"
    return (f"({show(epsilon)}, {show_delta(delta)})-differential privacy: {neighbours_in_words(relation, protected)} "
            f"— for example one person's record — changes the probability of any outcome of this run (everything "
            f"released above, and anything computed from it) by at most a factor e^ε = e^{show(epsilon)} ≤ {factor}, "
            f"except with probability at most δ = {show_delta(delta)}.")


def conditions_sentence(assumptions: Sequence[Mapping[str, Any]]) -> str:
    """Whether the guarantee is conditional, and on what."""
    conditional = [a["id"] for a in assumptions if a["conditional"]]
    enforced = len(assumptions) - len(conditional)
    if not assumptions:
        return "No assumptions recorded (there is no certificate yet)."
    if not conditional:
        return (f"Unconditional: all {plural(enforced, 'assumption')} the guarantee rests on "
                f"{'is' if enforced == 1 else 'are'} enforced by the code.")
    return (f"CONDITIONAL on {plural(len(conditional), 'assumption')} that dpaudit cannot check and a reviewer must "
            f"accept: {', '.join(conditional)} (see Assumptions); {enforced} more "
            f"{'is' if enforced == 1 else 'are'} enforced by the code.")


#: what the report's terms mean, shown by every format
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("ε (epsilon)", "how much any one person's record can change the probability of any outcome: by at most a "
     "factor e^ε. Smaller is more private; ε = 1 means a factor of at most 2.72."),
    ("δ (delta)", "the probability with which the ε bound may fail. It should be much smaller than 1 / (number of "
     "people in the data)."),
    ("add/remove", "the neighbouring relation: the guarantee compares the data with the same data plus or minus one "
     "record. replace-one: with one record replaced by another."),
    ("charge", "one privacy-relevant act (a noisy statistic, a training run, a selection) written to the ledger, "
     "with its noise parameters, before any noise is drawn."),
    ("release", "a noisy output of a charge, written to the ledger before it was returned."),
    ("accountant", "the method that composes the charges into one (ε, δ): pld (privacy loss distributions), rdp "
     "(Rényi DP), prv, advanced or basic composition; 'tightest' takes the smallest sound bound of these."),
    ("attained by pld", "the accountant that gave the smallest bound, here the one the certificate states."),
    ("filter bound ε", "the budget filter's upper bound on ε after each charge, computed fast (often by RDP) to "
     "admit or refuse it; the certified claim composes all charges again and is never larger."),
    ("composition", "combining the privacy losses of several charges. It is not a sum: composing charges together "
     "usually costs less ε than adding their separate ε values."),
    ("conditional / enforced", "an enforced assumption is checked by the code; a conditional one cannot be, and "
     "the guarantee holds only if it is true."),
    ("certificate", "the signed statement of the (ε, δ) claim, the budget, the assumptions and the ledger's head "
     "hash; `dpaudit verify` recomputes it from the ledger."),
    ("signing key fingerprint", "SHA-256 of the Ed25519 public key that signed the certificate; compare it with the "
     "one the run's owner published out of band."),
)

#: how many released values of one component the first section quotes (all are listed under "Released values")
QUOTED_VALUES = 4

COMPOSITION_NOTE = ("Composition is not a sum: each row is what that component's charges would cost alone, composed by "
                    "the run's accountant at the run's δ; the certified total composes every charge together, which is "
                    "usually less than the sum of the rows.")


def released_value(release: Mapping[str, Any]) -> str:
    """One released value in words: the value itself, or where its array file is and what it holds."""
    file = release["file"]
    if file is None:
        return compact(release["value"])
    shape = "×".join(str(d) for d in file["shape"]) or "scalar"
    return f"array of {shape} {file['dtype']} in {file['path']} (SHA-256 {file['sha256']})"


def _released_lines(model: Mapping[str, Any]) -> list[str]:
    lines = [f"Selected hyperparameters ({s['plugin']}): {compact(s['hyperparameters'])}" for s in model["selected"]]
    values: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for rel in model["released"]:
        value = rel["value"]
        # (a float or an int first: an ``isinstance`` with an abstract class per value of 10⁵ is not free)
        if type(value) is not float and type(value) is not int and isinstance(value, Mapping) \
                and "model_sha256" in value:
            n = value.get("n_parameters")
            size = f", {plural(n, 'parameter')}" if isinstance(n, int) else ""
            lines.append(f"Trained model ({rel['plugin']} / {rel['mechanism']}, charge {rel['charge_seq']}: "
                         f"{rel['label']}): SHA-256 {value['model_sha256']}{size}")
        else:
            values.setdefault((rel["plugin"], rel["mechanism"]), []).append(rel)
    for (plugin, mechanism), rels in values.items():
        quoted = "; ".join(released_value(r) for r in rels[:QUOTED_VALUES])
        more = f"; … (all {len(rels)} under Released values)" if len(rels) > QUOTED_VALUES else ""
        lines.append(f"{plural(len(rels), 'noisy value')} from {plugin} / {mechanism} ({rels[0]['label']}): "
                     f"{quoted}{more}")
    lines = lines or ["Nothing: the ledger holds no release record."]
    never = [str(seq) for seq in model.get("reserved_unreleased", ())]
    if never:  # a budget authority's grant whose worker died: its noise may exist, so it stays charged
        shown = ", ".join(never[:QUOTED_VALUES]) + (", …" if len(never) > QUOTED_VALUES else "")
        lines.append(f"Reserved, never released: {plural(len(never), 'charge')} (seq {shown}), each counted in the "
                     "guarantee like every other charge.")
    return lines


#: the RDP orders the privacy statement quotes from the certificate's native guarantee
QUOTED_ORDERS = (2.0, 8.0, 32.0, 128.0)


def _said(section: Any, key: str) -> str:
    """``section[key]`` as text: a string as it is, anything else as compact JSON ("not stated" when absent)."""
    value = section.get(key, "not stated") if isinstance(section, Mapping) else "not stated"
    return value if isinstance(value, str) else compact(value)


def _counted(section: Any, key: str, noun: str) -> str:
    """``section[key]`` counted ("1 charge", "3 charges") when it is a count, else as :func:`_said` says it."""
    value = section.get(key) if isinstance(section, Mapping) else None
    return plural(value, noun) if isinstance(value, int) and not isinstance(value, bool) else _said(section, key)


def _native_words(native: Any) -> str:
    if not isinstance(native, Mapping) or native.get("kind") != "rdp":
        return f"Native guarantee: {_said(native, 'statement')}."
    orders, values = native.get("orders"), native.get("rdp_epsilon")
    pairs = [f"ε({show(a, 4)}) ≤ {show(v)}" for a, v in zip(orders, values, strict=False)
             if a in QUOTED_ORDERS and isinstance(v, (int, float))] if isinstance(orders, list) and \
        isinstance(values, list) else []
    return (f"Native guarantee: Rényi DP of the composed charges, {'; '.join(pairs) or 'see the certificate'} "
            f"(every order in the certificate); the (ε, δ) above was attained by {_said(native, 'claim_attained_by')}.")


def privacy_statement(certificate: Mapping[str, Any] | None) -> list[str]:
    """What the guarantee covers and what it does not, from the certificate's NIST SP 800-226 fields (in the spirit of
    TF-Privacy's ``compute_dp_sgd_privacy_statement``); "not stated" for a certificate made before them."""
    if certificate is None:
        return ["Nothing yet: the run has no certificate."]
    fields = certificate.get(FIELD)
    if not isinstance(fields, Mapping):
        return ["Not stated: the certificate was made before dpaudit stated NIST SP 800-226's fields (unit of "
                "privacy, trust and query models, native guarantee, tuning, other releases, data custody)."]
    query = fields.get("query_model")
    return [
        f"Covers: everything this run released ({_counted(query, 'releases', 'release record')} from "
        f"{_counted(query, 'charges', 'charge')}) and anything computed from those outputs alone. Unit of privacy: "
        f"{_said(fields.get('unit_of_privacy'), 'statement')}. Neighbouring relation: "
        f"{_said(fields, 'neighbouring_relation')}. Query model: {_said(query, 'statement')}.",
        _native_words(fields.get("native_guarantee")),
        f"Randomness: {_said(fields.get('randomness'), 'statement')}. Tuning: "
        f"{_said(fields.get('tuning'), 'statement')}.",
        f"Does NOT cover: other releases from the same data (declared: {_said(fields, 'other_releases')}), whose "
        "privacy loss adds to this one; anything that left the run outside its ledger (prints, files, the "
        "confidential log, timing and other side channels); a person's several records beyond the unit above; the "
        "conditional assumptions below, if they fail.",
        f"Trust model: {_said(fields, 'trust_model')}. Data custody: {_said(fields, 'data_custody')}.",
    ]


def summary(model: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The first section, in plain language: ``[{"question", "statements"}]``, the same in every format.

    Args:
        model: the report model (:func:`dpaudit.report.model.report_from`), everything but this summary.
    """
    protected = model["protected"]
    cert = model["certificate"]
    budget = model["budget"]
    unit = [f"The records of {', '.join(protected) or 'no named data set'}, one record at a time: the guarantee "
            f"compares this run with the same run after {neighbours_in_words(model['neighbouring'], protected)}. "
            "One record is one person when each person has a single record; a person with several records is "
            "protected less (group privacy).",
            f"Used without protection (public): {', '.join(model['public']) or 'nothing'}."]
    if cert is None:
        guarantee = ["No certificate yet: no guarantee is stated for this run."]
    else:
        claim = cert["claim"]
        # the share rounded up, like every ε shown (0.4 % reads 1 %, never 0 %)
        used = (f" ({math.ceil(100 * claim['epsilon'] / budget['epsilon'])}% of its ε)" if budget["epsilon"] > 0
                else "")
        how = ("by the Rényi filter of an adaptive session (every charge admitted while the filter held; the claim "
               "is its budget)" if "filter" in claim else
               f"by the {claim['accountant']} accountant (attained by {claim['attained_by']})")
        guarantee = [guarantee_sentence(claim, model["neighbouring"], protected),
                     f"Certified {how} from {plural(len(model['events']), 'charge')}, within the budget ε = "
                     f"{show_delta(budget['epsilon'])}, δ = {show_delta(budget['delta'])}{used}."]
    costs = [f"{g['plugin']} / {g['mechanism']}: "
             + (g["note"] if g["epsilon_alone"] is None else f"ε ≤ {show(g['epsilon_alone'], COMPONENT_DIGITS)} alone")
             for g in model["groups"]]
    total = "none yet" if cert is None else f"ε ≤ {show(cert['claim']['epsilon'])} (certified)"
    return [
        {"question": "Did the run finish?", "statements": [model["status"]["sentence"]]},
        {"question": "What is protected, and at what unit?", "statements": unit},
        {"question": "What was released?", "statements": _released_lines(model)},
        {"question": "What is guaranteed?", "statements": guarantee},
        {"question": "What does the guarantee cover, and what not?", "statements": privacy_statement(cert)},
        {"question": "Is the guarantee conditional?", "statements": [conditions_sentence(model["assumptions"])]},
        {"question": "What did it cost?",
         "statements": [f"{'; '.join(costs) or 'no charges'}; all together: {total}. {COMPOSITION_NOTE}"]},
        *([{"question": "Was the guarantee audited?", "statements": audits}]
          if (audits := audit_lines(model["info"])) else []),
    ]


def audit_lines(info: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per one-run audit in the ledger (:mod:`dpaudit.audit.evidence`): ε_cert beside both ε_lb."""
    lines = []
    for record in info:
        audit = record["info"].get("audit")
        if not isinstance(audit, Mapping):
            continue
        cert, delta, level, scores = (audit.get(k) for k in ("epsilon_cert", "delta", "level", "scores"))
        lines.append(
            f"Audit of charge {audit.get('charge_seq')} ({audit.get('kind')}, "
            f"{len(scores) if isinstance(scores, list) else 'n/a'} canaries): certified ε = "
            f"{show(cert) if _number(cert) else 'n/a'} at δ = {show_delta(delta) if _number(delta) else 'n/a'}; "
            f"empirical lower bounds (rounded down) at {f'{100 * (1 - level):g}%' if _number(level) else 'n/a'} "
            "confidence: "
            f"Steinke et al. ε_lb = {_lower(audit.get('epsilon_lb_steinke'))}, f-DP (Mahloujifar et al.) ε_lb = "
            f"{_lower(audit.get('epsilon_lb_fdp'))} (assumes {audit.get('fdp_assumes')})"
            + (f"; last-iterate heuristic ε = {show(audit['epsilon_last_iterate_heuristic'])} (Steinke et al. 2024: "
               "exact for linear losses only, a heuristic, not a bound in either direction)"
               if _number(audit.get("epsilon_last_iterate_heuristic")) else "")
            + ". An audit can refute a claim; it cannot show that a run is private.")
    return lines


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _lower(value: Any) -> str:
    """A lower bound for display: rounded down to three decimals."""
    return show_lower(value) if _number(value) else "n/a"
