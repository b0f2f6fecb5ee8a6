"""The cost of each component of a run: its charges composed alone with the run's accountant at the run's δ.

A component is a (plugin, mechanism) pair of the ledger's charges, keyed ``"plugin/mechanism"`` (the certificate's
``mechanisms`` keys). Its ε is an upper bound on the privacy loss of its charges alone, rounded *up* to
:data:`~dpaudit.display.COMPONENT_DIGITS` significant digits. The certificate carries these costs, signed
(``components``), so the report reads them instead of importing the accountants; ``dpaudit verify`` recomputes them
and refuses a certificate whose component ε is below its recomputation. Composition is not a sum: the certified
total is the composition of every charge together (Dwork & Roth 2014, Thm. 3.16 and 3.20; the run's accountant).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit.display import COMPONENT_DIGITS, round_up
from dpaudit.errors import DPAuditError
from dpaudit.events import PrivacyEvent, compose
from dpaudit.ledger import Record
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
    for r in records:
        if r.type == CHARGE:
            body = ChargeBody.from_dict(r.body)
            event = body.privacy_event() if decoded is None else decoded[r.seq]
            groups.setdefault(component_key(body.plugin, body.mechanism), []).append(event)
    return groups


def component_costs(opened: OpenBody, components: Sequence[Sequence[PrivacyEvent]], total_charges: int,
                    claim: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Each component's own ε: its charges composed alone with the run's accountant at the run's δ.

    A component holding every charge of a closed run costs exactly the claim (the same composition), which is reused
    rather than recomputed. ε is rounded up to :data:`COMPONENT_DIGITS` significant digits, so the report stays
    byte-identical wherever it is regenerated.

    Args:
        opened: the ledger's open record (accountant, δ, adaptivity).
        components: the events of each component.
        total_charges: how many charges the run made.
        claim: the run's (recomputed or certified) claim, None while the run is open.

    Returns:
        ``{"epsilon", "attained_by", "note"}`` per component; ``epsilon`` None (with the reason in ``note``) where no
        bound applies: an adaptive session (only its filter's budget is certified) or an accountant error.
    """
    if opened.adaptive is not None:
        return [{"epsilon": None, "attained_by": None, "note": ADAPTIVE_NOTE} for _ in components]
    costs = []
    for events in components:
        if claim is not None and len(events) == total_charges:
            epsilon, source = claim["epsilon"], claim["attained_by"]
        else:
            # the accountants import the numerics stack: only for a run with several components (or still open)
            from dpaudit.accounting import get_accountant

            try:
                epsilon, source = get_accountant(opened.accountant["name"]).epsilon_with_source(compose(events),
                                                                                                opened.delta)
            except DPAuditError as exc:
                costs.append({"epsilon": None, "attained_by": None, "note": f"n/a: {exc}"})
                continue
        costs.append({"epsilon": round_up(epsilon, COMPONENT_DIGITS), "attained_by": source, "note": None})
    return costs


def certified_components(records: Sequence[Record], claim: Mapping[str, Any],
                         decoded: Mapping[int, PrivacyEvent] | None = None) -> list[dict[str, Any]]:
    """The certificate's ``components``: ``{"component", "epsilon", "attained_by", "note"}`` per component of the
    closed ledger ``records`` whose claim is ``claim``, in the order components first charge.

    Raises:
        DPAuditError: a record body does not decode.
    """
    groups = group_charges(records, decoded)
    costs = component_costs(OpenBody.from_dict(records[0].body), list(groups.values()),
                            sum(len(events) for events in groups.values()), claim)
    return [{"component": key, **cost} for key, cost in zip(groups, costs, strict=True)]
