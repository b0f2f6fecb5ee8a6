"""What the MLflow run page says: the session run's params and tags, a trial's hyperparameters, and the certified claim.

Pure functions of the ledger's ``open`` record and of the signed certificate, so that a session (at open and at
close) and ``dpaudit mirror sync`` (into a rebuilt store) write the same run page. No MLflow import: a session
builds these before its mirror has connected (:mod:`dpaudit.tracking.session_mirror`).

What a reviewer sees at a glance (docs/mlflow.md, "The run page"):

* tags ``dpaudit.certified_epsilon``, ``dpaudit.certified_delta``, ``dpaudit.accountant`` (the accountant whose
  bound the certificate claims, and the one that attained it), ``dpaudit.release_status`` and ``dpaudit.verdict``;
* the run description (MLflow's ``mlflow.note.content`` tag), one paragraph saying what was certified, for which
  data, under which conditions, and where the signed evidence is.

The verdict is ``INVALID: ...`` when the certificate itself says that the run is not for release (``dpaudit
verify`` refuses such a run by default), ``signed, not yet verified`` at close otherwise (verifying needs every
plugin loaded, seconds that close must not spend), and the result of ``dpaudit verify`` once ``dpaudit mirror sync``
has verified the run.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from dpaudit.display import plural, show, show_delta
from dpaudit.errors import InvalidParameter
from dpaudit.public_values import CONFIDENTIAL_KEYS, check_public

RUN_ID_TAG = "dpaudit.run_id"
"""Run tag holding the dpaudit run id: the MLflow run is found by it (MLflow makes its own run ids)."""
KEY_FINGERPRINT_TAG = "dpaudit.key_fingerprint"
"""Run tag naming the fingerprint of the key that signs the run's certificate (set when the run is created)."""
FOR_RELEASE_TAG = "dpaudit.for_release"
CERTIFIED_EPSILON_TAG = "dpaudit.certified_epsilon"
CERTIFIED_DELTA_TAG = "dpaudit.certified_delta"
ACCOUNTANT_TAG = "dpaudit.accountant"
RELEASE_STATUS_TAG = "dpaudit.release_status"
VERDICT_TAG = "dpaudit.verdict"
NOTE_TAG = "mlflow.note.content"
"""MLflow's run description (``mlflow.utils.mlflow_tags.MLFLOW_RUN_NOTE``), shown at the top of the run page."""
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
"""Experiment tag read by the MLflow 3.x UI (``ExperimentKind`` in its JavaScript bundle) to choose between the
classic runs view (``custom_model_development``) and the GenAI traces view."""
EXPERIMENT_KIND = "custom_model_development"

NOT_VERIFIED = "signed, not yet verified"
MAX_PARAM_LENGTH = 6000
"""MLflow's limit on a param value (``mlflow.utils.validation.MAX_PARAM_VAL_LENGTH``; a test checks they agree)."""
_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-/ ]*$")
_MAX_KEY = 250


def check_key(what: str, key: Any) -> str:
    """``key`` if MLflow accepts it as a metric or param key as it is (no renaming behind the caller's back).

    Raises:
        InvalidParameter: not a string, a character MLflow refuses, a ``..`` or leading ``/``, or too long.
    """
    if not isinstance(key, str) or not _KEY.match(key) or posixpath.normpath(key) != key or len(key) > _MAX_KEY:
        raise InvalidParameter(f"{what} {key!r} is not a valid MLflow key (letters, digits, _ . - / and spaces, "
                               f"starting with a letter, digit or _; a normal path; at most {_MAX_KEY} characters)")
    return key


def _param_value(key: str, value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameter(f"hyperparameter {key!r} must be finite, got {value!r}")
    if value is None or isinstance(value, (str, bool, int, float)):
        text = str(value)
    else:
        raise InvalidParameter(f"hyperparameter {key!r} must be a string, number, bool or None, got "
                               f"{type(value).__name__}")
    if len(text) > MAX_PARAM_LENGTH:
        raise InvalidParameter(f"hyperparameter {key!r} is longer than MLflow's {MAX_PARAM_LENGTH} characters")
    return text


def hyperparameters(params: Mapping[str, Any] | None) -> dict[str, str]:
    """A trial's hyperparameters as MLflow params (values as text), checked before anything is queued.

    Hyperparameters are public by construction (chosen before the data is seen, or from noisy outputs); a key
    listed as confidential (e.g. ``true_score``) is refused.

    Raises:
        InvalidParameter: not a mapping, a key MLflow refuses, a value that is not a finite number, string, bool or
            None, a value too long, or a confidential key.
    """
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise InvalidParameter(f"trial params must be a mapping of name -> value, got {type(params).__name__}")
    out = {check_key("hyperparameter name", key): _param_value(key, value) for key, value in params.items()}
    check_public(out, CONFIDENTIAL_KEYS, "trial params")
    return out


def session_run(run_id: str, opened: Mapping[str, Any]) -> tuple[str, dict[str, str], dict[str, str]]:
    """The session run's name, params and tags, from the ledger's ``open`` record body.

    Params: the budget (ε_B, δ_B), the neighbouring relation and the accountant. Tags: the dpaudit run id, the
    protected data sets, whether the randomness is fit for release, and the signing key's fingerprint.
    """
    budget = opened.get("budget") or {}
    accountant = opened.get("accountant") or {}
    params = {"budget_epsilon": str(float(budget["epsilon"])), "budget_delta": str(float(budget["delta"])),
              "neighbouring": str(opened.get("neighbouring")), "accountant": str(accountant.get("name"))}
    tags = {RUN_ID_TAG: run_id, "dpaudit.protected": ", ".join(opened.get("protected") or ()),
            FOR_RELEASE_TAG: str(bool((opened.get("randomness") or {}).get("for_release")))}
    if opened.get("signing_key_fingerprint"):
        tags[KEY_FINGERPRINT_TAG] = str(opened["signing_key_fingerprint"])
    return str(opened.get("name") or run_id), params, tags


def close_verdict(certificate: Mapping[str, Any]) -> str:
    """The verdict a session can state at close without verifying: INVALID when the certificate says the run is
    not for release (``dpaudit verify`` fails it by default), otherwise :data:`NOT_VERIFIED`."""
    if certificate.get("for_release") is True:
        return NOT_VERIFIED
    return f"INVALID: {certificate.get('release_status', 'not for release')}"


def checked_verdict(valid: bool, reasons: list[str]) -> str:
    """The verdict of ``dpaudit verify`` (``VALID`` or ``INVALID: reasons``) as the run tag states it."""
    return "VALID" if valid else "INVALID: " + "; ".join(reasons)


def _accountant(claim: Mapping[str, Any]) -> str:
    name, attained = str(claim.get("accountant", "?")), claim.get("attained_by")
    return f"{name} (attained by {attained})" if attained and attained != name else name


def certificate_tags(certificate: Mapping[str, Any], verdict: str, burn_down: str) -> dict[str, str]:
    """The run tags that state the certified claim, the release status and ``verdict``, with the description
    (:func:`certificate_note`; ``burn_down`` is the key of the run's burn-down metric)."""
    claim = certificate.get("claim") or {}
    tags = {CERTIFIED_EPSILON_TAG: show(float(claim['epsilon'])),
            CERTIFIED_DELTA_TAG: show_delta(float(claim['delta'])),
            ACCOUNTANT_TAG: _accountant(claim),
            RELEASE_STATUS_TAG: str(certificate.get("release_status", "")),
            FOR_RELEASE_TAG: str(certificate.get("for_release") is True),
            VERDICT_TAG: verdict}
    tags[NOTE_TAG] = certificate_note(certificate, verdict, burn_down)
    return tags


def certificate_note(certificate: Mapping[str, Any], verdict: str, burn_down: str) -> str:
    """The run description: one paragraph (Markdown) saying what was certified, on what conditions, and how to check.

    Example: "**Certified: (ε = 0.6, δ = 1e-06)-differential privacy** with respect to add/remove neighbours of
    patients, for everything this run released (3 charges, composed by the tightest accountant, attained by pld;
    not a sum of the charges). Conditional on 1 assumption: declared-sensitivity. ..."
    """
    claim = certificate.get("claim") or {}
    run = certificate.get("run") or {}
    relation = str(certificate.get("neighbouring", "")).replace("_", "/")
    protected = ", ".join(certificate.get("protected_datasets") or ()) or "the protected data"
    charges = sum((certificate.get("mechanisms") or {}).values())
    conditional = [a.get("id", "?") for a in certificate.get("assumptions") or () if a.get("conditional")]
    condition = (f"Conditional on {plural(len(conditional), 'assumption')}: "
                 f"{', '.join(conditional)} (listed in the certificate)." if conditional
                 else "Unconditional: every assumption is enforced by dpaudit.")
    return (f"**Certified: (ε = {show(float(claim['epsilon']))}, δ = {show_delta(float(claim['delta']))})"
            "-differential privacy** "
            f"with respect to {relation} neighbours of {protected}, for everything this run released "
            f"({plural(charges, 'charge')}, composed by the {_accountant(claim)} accountant; "
            f"composition is not a sum of the charges). {condition} Release status: "
            f"{certificate.get('release_status', '?')}. Verdict: {verdict}. The signed certificate, the ledger and "
            f"the public key (fingerprint {str(certificate.get('public_key_fingerprint', '?'))[:16]}…) are this "
            f"run's artifacts; check them offline with `dpaudit verify {run.get('id', 'RUN')}`. The metric "
            f"{burn_down} is the budget filter's running value, not the certified claim.")
