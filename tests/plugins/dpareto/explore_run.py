"""Run the dpareto plugin in a fresh session and read back what it wrote (shared by the plugin's tests)."""

from __future__ import annotations

import json

from dpaudit.errors import BudgetExceeded, InvalidParameter
from dpaudit.ledger import read_records
from dpaudit_plugins.dpareto.plugin import explore


def explore_run(make_session, cfg, *, epsilon, protected, adaptive=True, public=()):
    """:func:`explore` ``cfg`` in a session (δ = 1e-5) protecting ``protected``.

    Returns:
        (the session, explore's output or the BudgetExceeded / InvalidParameter it raised, the ledger's records,
        which must read without problems, the certificate).
    """
    with make_session(epsilon, 1e-5, adaptive=adaptive, protected=protected, public=public) as session:
        try:
            out = explore(session, cfg)
        except (BudgetExceeded, InvalidParameter) as exc:
            out = exc
    records, problems = read_records(session.ledger_path)
    assert not problems
    certificate = json.loads(session.certificate_path.read_text(encoding="utf-8"))
    return session, out, records, certificate
