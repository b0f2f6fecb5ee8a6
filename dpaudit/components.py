"""The cost of each component of a run: its charges composed alone with the run's accountant at the run's δ.

A component is a (plugin, mechanism) pair of the ledger's charges, keyed ``"plugin/mechanism"`` (the certificate's
``mechanisms`` keys). Its ε is an upper bound on the privacy loss of its charges alone, rounded *up* to
:data:`~dpaudit.display.COMPONENT_DIGITS` significant digits. The certificate carries these costs, signed
(``components``), so the report reads them instead of importing the accountants; ``dpaudit verify`` recomputes them
and refuses a certificate whose component ε is below its recomputation. Composition is not a sum: the certified
total is the composition of every charge together (Dwork & Roth 2014, Thm. 3.16 and 3.20; the run's accountant).

verify recomputes a component with the accountant the certificate says attained its ε (``attained_by``) when the
run's accountant uses that one (the run's own, or a member of the tightest), else with the run's accountant. Every
accountant returns an upper bound on ε, so a claim at least its recomputation is an upper bound whichever
accountant recomputed it; naming a looser member only makes the check stricter, and the tightest's other members
need not run (docs/auditor-guide.md, "Reading the certificate").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit.display import COMPONENT_DIGITS, round_up
from dpaudit.errors import DPAuditError
from dpaudit.events import PrivacyEvent, compose
from dpaudit.ledger import Record
from dpaudit.record_index import of_type
from dpaudit.records import CHARGE, ChargeBody, OpenBody

ADAPTIVE_NOTE = "n/a: adaptive session, only the Rényi filter's budget is certified (parameters were not fixed)"


def component_key(plugin: str, mechanism: str) -> str:
    """The component a charge belongs to: ``"plugin/mechanism"``."""
    return f"{plugin}/{mechanism}"


def group_charges(records: Sequence[Record], decoded: Mapping[int, PrivacyEvent] | None = None,
                  ) -> OrderedDict[str, list[PrivacyEvent]]:
    """The charges' events by component, in the order components first charge. ``decoded``: the events by seq
    when already decoded (else decoded here).

    Raises:
        DPAuditError: a charge body or event does not decode.
    """
    groups: OrderedDict[str, list[PrivacyEvent]] = OrderedDict()
    for r in of_type(records, CHARGE):
        body = ChargeBody.from_dict(r.body)
        event = body.privacy_event() if decoded is None else decoded[r.seq]
        groups.setdefault(component_key(body.plugin, body.mechanism), []).append(event)
    return groups


def recomputing_accountant(run_accountant: str, attained_by: Any) -> str:
    """The accountant that recomputes a component (module docstring): the member named by the certificate's
    ``attained_by`` (a source such as ``"rdp (pld outside ...)"`` names ``rdp``) when the run's accountant is that
    one or the tightest and it is a member, else the run's accountant."""
    from dpaudit.accounting.tightest import MEMBERS, TightestAccountant, member_name

    if not isinstance(attained_by, str):
        return run_accountant
    named = member_name(attained_by)
    uses = {m.name for m in MEMBERS} if run_accountant == TightestAccountant.name else {run_accountant}
    return named if named in uses else run_accountant


def _component_epsilon(opened: OpenBody, event: PrivacyEvent, attained_by: Any,
                       recorded_version: str | None) -> tuple[float, str]:
    """(ε, source) of one component: with :func:`recomputing_accountant` when ``attained_by`` is a usable name and
    that accountant bounds the event, else with the run's accountant (so that naming an accountant that fails
    cannot leave a component unchecked); either composes as the claim's ``recorded_version`` says (its PLD fold,
    :func:`dpaudit.accounting.get_accountant`)."""
    # the accountants import the numerics stack: only for a run with several components (or still open)
    from dpaudit.accounting import get_accountant

    run_accountant = opened.accountant["name"]
    named = recomputing_accountant(run_accountant, attained_by)
    if named != run_accountant:
        try:
            return get_accountant(named, recorded_version).epsilon_with_source(event, opened.delta)
        except DPAuditError:
            pass  # the run's accountant decides
    return get_accountant(run_accountant, recorded_version).epsilon_with_source(event, opened.delta)


def component_costs(opened: OpenBody, components: Sequence[Sequence[PrivacyEvent]], total_charges: int,
                    claim: Mapping[str, Any] | None, attained: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """Each component's own ε: its charges composed alone with the run's accountant at the run's δ.

    A component holding every charge of a closed run costs exactly the claim (the same composition), which is reused
    rather than recomputed. ε is rounded up to :data:`COMPONENT_DIGITS` significant digits, so the report stays
    byte-identical wherever it is regenerated.

    Args:
        opened: the ledger's open record (accountant, δ, adaptivity).
        components: the events of each component.
        total_charges: how many charges the run made.
        claim: the run's (recomputed or certified) claim, None while the run is open; its ``accountant_version``
            names the PLD fold components are recomputed with.
        attained: per component, the accountant a certificate says attained its ε (verify); each component is then
            recomputed with :func:`recomputing_accountant` instead of the run's accountant.

    Returns:
        ``{"epsilon", "attained_by", "note"}`` per component; ``epsilon`` None (with the reason in ``note``) where no
        bound applies: an adaptive session (only its filter's budget is certified) or an accountant error.
    """
    if opened.adaptive is not None:
        return [{"epsilon": None, "attained_by": None, "note": ADAPTIVE_NOTE} for _ in components]
    costs = []
    recorded_version = None if claim is None else claim.get("accountant_version")
    if recorded_version is not None:
        from dpaudit.accounting.pld import recorded_fold  # deferred: the report reads components, never accountants

        recorded_fold(recorded_version)  # an unreadable version fails the whole check, never one component's "n/a"
    for i, events in enumerate(components):
        if claim is not None and len(events) == total_charges:
            epsilon, source = claim["epsilon"], claim["attained_by"]
        else:
            try:
                epsilon, source = _component_epsilon(opened, compose(events), None if attained is None else attained[i],
                                                     recorded_version)
            except DPAuditError as exc:
                costs.append({"epsilon": None, "attained_by": None, "note": f"n/a: {exc}"})
                continue
        costs.append({"epsilon": round_up(epsilon, COMPONENT_DIGITS), "attained_by": source, "note": None})
    return costs


def certified_components(records: Sequence[Record], claim: Mapping[str, Any],
                         decoded: Mapping[int, PrivacyEvent] | None = None,
                         attained: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The certificate's ``components``: ``{"component", "epsilon", "attained_by", "note"}`` per component of the
    closed ledger ``records`` whose claim is ``claim``, in the order components first charge. ``attained``: the
    certificate's ``attained_by`` by component key, when verify recomputes them (:func:`component_costs`).

    Raises:
        DPAuditError: a record body does not decode.
    """
    groups = group_charges(records, decoded)
    costs = component_costs(OpenBody.from_dict(records[0].body), list(groups.values()),
                            sum(len(events) for events in groups.values()), claim,
                            None if attained is None else [attained.get(key) for key in groups])
    return [{"component": key, **cost} for key, cost in zip(groups, costs, strict=True)]
