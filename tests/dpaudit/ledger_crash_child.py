"""Child process of the kill -9 test in test_ledger.py: append records forever, acknowledging each one.

Usage: ``python ledger_crash_child.py LEDGER``. Opens the ledger (creating it if absent), prints ``ready``, then
appends "charge" records in a loop and prints ``<seq> <hash>`` for each, flushed, only after ``append`` returned.
A printed line is therefore an acknowledgement: the record must survive any later kill.

Only ``dpaudit.ledger`` (and the two kernel modules it imports) is loaded, not ``dpaudit/__init__.py``, whose
eager imports of the session and accountants take seconds per process start; the test starts ten of these.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "dpaudit"


def main(path: Path) -> None:
    """Append until killed."""
    package = types.ModuleType("dpaudit")
    package.__path__ = [str(PACKAGE_DIR)]
    sys.modules["dpaudit"] = package
    from dpaudit.ledger import Ledger

    ledger = Ledger.open(path) if path.exists() else Ledger.create(path)
    print("ready", flush=True)
    i = 0
    while True:
        record = ledger.append("charge", {"i": i, "pad": "x" * (i % 97), "epsilon": 0.1})
        print(record.seq, record.hash, flush=True)
        i += 1


if __name__ == "__main__":
    main(Path(sys.argv[1]))
