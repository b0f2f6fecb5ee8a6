"""The certificate's answers to NIST SP 800-226's checklist, derived from the ledger (never typed in twice).

NIST SP 800-226 (*Guidelines for Evaluating Differential Privacy Guarantees*, final, March 2025) asks whoever reports
a differential-privacy guarantee to state its unit of privacy, neighbouring relation, trust and query models, the
guarantee in its native form (not only a converted (ε, δ)), how randomness and floating point were handled, whether
hyperparameter tuning was accounted, which other releases were made from the same data, and who holds the data.
:func:`nist_fields` builds that section (the certificate field :data:`FIELD`) from the closed ledger and the claim
alone, so ``dpaudit verify`` rebuilds it from the same records and compares (:func:`field_problems`): a field that
differs from its recomputation is a forged certificate. Two answers only the user knows, the other releases from the
same data and the data custody, are Session options written into the ``open`` record (:func:`declarations`) before any
data is touched, and copied from there.

The native guarantee is the composed Rényi-DP curve (Mironov 2017, Prop. 1; curves of :mod:`dpaudit.accounting.rdp`)
at :data:`NATIVE_ORDERS`, every value rounded up, beside the accountant that attained the (ε, δ) claim (for a PLD or
PRV claim the curve is an independent, looser description of the same charges); an adaptive session's native
guarantee is its Rényi filter (the claim's ``filter``). :func:`guarantee_warnings` flags a weak guarantee the way the
guidelines do (δ > 1/n², ε ≥ 10): warnings, not failures, because the claim is still a true upper bound.
docs/auditor-guide.md, "NIST SP 800-226 fields", lists every field and where it comes from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit import canonical
from dpaudit.display import CLAIM_DIGITS, round_up, show, show_delta
from dpaudit.errors import DPAuditError, InvalidParameter
from dpaudit.events import PrivacyEvent, compose
from dpaudit.ledger import Record
from dpaudit.record_index import of_type
from dpaudit.records import INFO, RELEASE, InfoBody, OpenBody
from dpaudit.tolerance import within

FIELD = "nist_sp_800_226"
"""The certificate field holding the section."""

NOT_DECLARED = "none declared"
"""The default of ``Session(other_releases=...)``."""
NOT_STATED = "not stated"
"""The default of ``Session(data_custody=...)``, and what the report says of a certificate made before the fields."""

MAX_DECLARATION_CHARS = 2000
"""The longest declaration accepted (a statement, not a document)."""

#: the orders of the composed RDP curve the certificate states (a compact subset of the accountant's grid,
#: :data:`dpaudit.accounting.rdp.ORDERS`, which a test checks)
NATIVE_ORDERS: tuple[float, ...] = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 128.0, 256.0,
                                    1024.0)

#: the guidelines' thresholds for a weak guarantee
EPSILON_WARN = 10.0

TRUST_MODEL = ("central: the dpaudit session runs where the raw protected data is held (a trusted curator) and "
               "releases only noised outputs; whoever runs it and holds the signing key is trusted not to look at or "
               "publish anything else")

UNIT_STATEMENT = ("one record of the protected data sets, each record's contribution bounded by the sensitivity "
                  "bound of every charge; a person with k records is protected at (kε, k·e^((k-1)ε)·δ) by group "
                  "privacy, not at (ε, δ)")

EXACT_SAMPLING = ("kernel noise is drawn by exact samplers on rational parameters (discrete Laplace and Gaussian, "
                  "Canonne, Kamath & Steinke 2020; the exponential mechanism on exact rationals, "
                  "dpaudit/mechanisms/exponential.py) from the session's random source, so the floating-point attack "
                  "of Mironov 2012 does not apply to them")


def declarations(other_releases: str, data_custody: str) -> dict[str, str]:
    """The ``open`` record's ``declarations``: what only the user knows about the data outside this run.

    Args:
        other_releases: the other releases made from the same data (default :data:`NOT_DECLARED`).
        data_custody: who holds the raw data, where, and who may access it (default :data:`NOT_STATED`).

    Raises:
        InvalidParameter: an empty or over-long statement, or not a string.
    """
    out = {}
    for name, value in (("other_releases", other_releases), ("data_custody", data_custody)):
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_DECLARATION_CHARS:
            raise InvalidParameter(f"{name} must be a non-empty statement of at most {MAX_DECLARATION_CHARS} "
                                   f"characters, got {value!r:.60}")
        out[name] = value.strip()
    return out


def _tally(events: Sequence[PrivacyEvent]) -> tuple[Any, dict[Any, int]]:
    """:func:`dpaudit.accounting.charges.tally` of the composition of ``events`` (non-empty)."""
    from dpaudit.accounting.charges import tally  # deferred: the report imports FIELD without the accountants

    return tally(compose(list(events)))


def _native_guarantee(claim: Mapping[str, Any], tallied: tuple[Any, dict[Any, int]] | None) -> dict[str, Any]:
    """The guarantee in the form the accountant works in (see the module docstring); ``tallied``: :func:`_tally`
    of the charged events (None where there are none)."""
    from dpaudit.accounting.rdp import ORDERS, composed_rdp, unsupported_reason

    if "filter" in claim:
        return {"kind": "renyi_filter", "statement": "Renyi filter (Feldman & Zrnic 2021): every charge was admitted "
                "while the running RDP sum stayed within the filter's budget at some order; the filter is the "
                "claim's 'filter'"}
    if tallied is None:
        return {"kind": "none", "statement": "no charges: nothing was released from the protected data"}
    relation, counts = tallied
    reason = unsupported_reason(counts)
    if reason is not None:
        return {"kind": "approximate_dp", "statement": f"no Renyi-DP curve: {reason}; the (epsilon, delta) claim "
                f"attained by {claim.get('attained_by')} is the native guarantee"}
    curve, at_inf = composed_rdp(counts)
    index = [ORDERS.index(a) for a in NATIVE_ORDERS]
    return {"kind": "rdp", "relation": relation.value, "orders": list(NATIVE_ORDERS),
            "rdp_epsilon": [round_up(float(curve[i]), CLAIM_DIGITS) for i in index],
            "rdp_epsilon_inf": round_up(at_inf, CLAIM_DIGITS) if math.isfinite(at_inf) else None,
            "claim_attained_by": claim.get("attained_by"),
            "statement": "Renyi DP (Mironov 2017): the composition of every charge is (alpha, rdp_epsilon)-RDP at "
                         "each order alpha listed (rounded up); the (epsilon, delta) claim is the tightest bound of "
                         "the accountant named by claim_attained_by, which may be tighter than this curve's "
                         "conversion"}


def _floating_point(assumptions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    floating = sorted(a["id"] for a in assumptions if "floating-point" in a["id"])
    return {"floating_point_noise": floating,
            "statement": EXACT_SAMPLING + ("" if not floating else "; conditional on the floating-point noise of "
                                           f"{', '.join(floating)} (stated as assumptions)")}


def _tuning(records: Sequence[Record], tallied: tuple[Any, dict[Any, int]] | None) -> dict[str, Any]:
    from dpaudit.accounting.charges import RepeatSelectSpec

    selectors = sorted({body.plugin for body in (InfoBody.from_dict(r.body) for r in of_type(records, INFO))
                        if isinstance(body.info.get("selected"), Mapping)})
    repeat = tallied is not None and any(isinstance(spec, RepeatSelectSpec) for spec in tallied[1])
    if not selectors and not repeat:
        return {"recorded": False, "statement": "no hyperparameter selection recorded in the ledger; tuning on the "
                "protected data outside this session is NOT covered by the claim"}
    how = f"hyperparameters selected inside the session by {', '.join(selectors)}" if selectors else \
        "a repeat-and-select charge (Papernot & Steinke 2022)"
    return {"recorded": True, "selected_by": selectors, "repeat_and_select": repeat,
            "statement": f"accounted: {how}, through charges of this session; a selection made outside the session "
                         "is not covered"}


def data_size(events: Sequence[PrivacyEvent]) -> int | None:
    """The smallest public data size any charge declares (its ``dataset_size``), or None where none does."""
    distinct = {id(event): event for event in events}.values()  # equal charges share one event object: each once
    sizes = [leaf.dataset_size for event in distinct for leaf, _ in event.leaves() if hasattr(leaf, "dataset_size")]
    return min(sizes) if sizes else None


def warning_size(records: Sequence[Record], events: Sequence[PrivacyEvent]) -> int | None:
    """The n of the δ > 1/n² warning: the smallest of :func:`data_size` and every ``dataset_size`` a training run
    writes in its info record (:func:`dpaudit.tuning.training.record_run`), since a Poisson DP-SGD charge declares
    no data size. Only the warning reads the recorded sizes: the certificate's ``data_size`` field stays the
    charges' (so that certificates made before keep verifying)."""
    recorded = [size for r in of_type(records, INFO)
                for size in [InfoBody.from_dict(r.body).info.get("dataset_size")]
                if isinstance(size, int) and not isinstance(size, bool) and size > 0]
    sizes = [n for n in (data_size(events), *recorded) if n is not None]
    return min(sizes) if sizes else None


def nist_fields(records: Sequence[Record], claim: Mapping[str, Any], assumptions: Sequence[Mapping[str, Any]],
                events: Sequence[PrivacyEvent]) -> dict[str, Any]:
    """The certificate's :data:`FIELD` section, a pure function of the closed ledger and its claim.

    Args:
        records: the closed ledger.
        claim: the certificate's claim (:func:`dpaudit.certificate.compute_claim`).
        assumptions: the certificate's assumptions (:func:`dpaudit.certificate.collect_assumptions`).
        events: every charge's event, in ledger order.

    Raises:
        DPAuditError: a record that does not decode, or charges the accountants cannot tally.
    """
    opened = OpenBody.from_dict(records[0].body if records else None)
    declared = opened.declarations or {}
    releases = len(of_type(records, RELEASE))
    adaptive = opened.adaptive is not None
    tallied = _tally(events) if events else None  # composed and tallied once, for the guarantee and the tuning
    return {
        "unit_of_privacy": {"unit": "record", "contribution_bound": "1 record per neighbouring change",
                            "statement": UNIT_STATEMENT},
        "neighbouring_relation": opened.neighbouring,
        "trust_model": TRUST_MODEL,
        "query_model": {"adaptive_parameters": adaptive, "charges": len(events), "releases": releases,
                        "statement": "interactive: queries may be chosen after earlier outputs; "
                        + ("their privacy parameters too, admitted by a Renyi filter" if adaptive else
                           "their privacy parameters fixed in advance (an assumption of the certificate)")},
        "native_guarantee": _native_guarantee(claim, tallied),
        "randomness": {"source": dict(opened.randomness), **_floating_point(assumptions)},
        "tuning": _tuning(records, tallied),
        "other_releases": declared.get("other_releases", NOT_STATED),
        "data_custody": declared.get("data_custody", NOT_STATED),
        "data_size": data_size(events),
    }


def _numbers_cover(stated: Any, recomputed: Any) -> bool:
    """Each stated value is at least its recomputation (:func:`~dpaudit.tolerance.within`); None for None only."""
    if recomputed is None or stated is None:
        return stated is recomputed
    if isinstance(recomputed, list):
        return isinstance(stated, list) and len(stated) == len(recomputed) and all(
            _numbers_cover(s, r) for s, r in zip(stated, recomputed, strict=True))
    return isinstance(stated, (int, float)) and not isinstance(stated, bool) and within(recomputed, stated)


def field_problems(stated: Any, recomputed: Mapping[str, Any]) -> list[str]:
    """How the certificate's section differs from its recomputation from the ledger (empty when it does not).

    Every field must be equal, except the native RDP values, which must be upper bounds of their recomputation.
    """
    if not isinstance(stated, Mapping):
        return [f"{FIELD} is not an object"]
    problems = [f"{key}: stated {canonical.dumps(stated.get(key))[:120]}, the ledger gives "
                f"{canonical.dumps(value)[:120]}"
                for key, value in recomputed.items() if key != "native_guarantee" and stated.get(key) != value]
    problems += [f"unexpected field {key!r}" for key in sorted(set(stated) - set(recomputed))]
    native, expected = stated.get("native_guarantee"), recomputed["native_guarantee"]
    numeric = ("rdp_epsilon", "rdp_epsilon_inf")
    if not isinstance(native, Mapping) or {k: v for k, v in native.items() if k not in numeric} != \
            {k: v for k, v in expected.items() if k not in numeric} or set(native) != set(expected) \
            or not all(_numbers_cover(native[k], expected[k]) for k in numeric if k in expected):
        problems.append("native_guarantee: not the RDP curve recomputed from the ledger (or a value below it)")
    return problems


def guarantee_warnings(claim: Mapping[str, Any], n: int | None) -> list[str]:
    """Warnings for a weak guarantee (NIST SP 800-226): δ > 1/n² where the data size n is known, ε ≥ 10."""
    warnings = []
    epsilon, delta = claim.get("epsilon"), claim.get("delta")
    if isinstance(epsilon, (int, float)) and epsilon >= EPSILON_WARN:
        warnings.append(f"epsilon = {show(epsilon)} >= {EPSILON_WARN:g}: a weak guarantee (NIST SP 800-226 calls "
                        "such values hard to justify)")
    if n and isinstance(delta, (int, float)) and delta > 1.0 / n**2:
        warnings.append(f"delta = {show_delta(delta)} > 1/n^2 = {show_delta(1.0 / n**2)} for the declared data size "
                        f"n = {n}: a release of a few whole records would satisfy such a delta")
    return warnings


def checked_fields(cert: Mapping[str, Any], records: Sequence[Record], events: Sequence[PrivacyEvent],
                   assumptions: Sequence[Mapping[str, Any]]) -> tuple[bool, str, list[str]]:
    """(ok, detail, warnings) of the ``nist-fields`` check of ``dpaudit verify``.

    A certificate made before the section states nothing (ok, "not stated"); one that has it must match its
    recomputation from the ledger. The warnings (:func:`guarantee_warnings`) use the claim and the data size
    recomputed from the ledger (:func:`warning_size`), whatever the certificate says.
    """
    claim = cert.get("claim") if isinstance(cert.get("claim"), Mapping) else {}
    try:
        recomputed = nist_fields(records, claim, assumptions, events)
    except DPAuditError as exc:
        return False, f"not recomputable from the ledger: {exc}", []
    warnings = guarantee_warnings(claim, warning_size(records, events))
    if FIELD not in cert:
        return True, f"{NOT_STATED}: the certificate was made before the NIST SP 800-226 fields", warnings
    problems = field_problems(cert[FIELD], recomputed)
    return not problems, "; ".join(problems) or "every NIST SP 800-226 field matches the ledger", warnings
