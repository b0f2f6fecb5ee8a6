"""The records of given types, selected once per record list within ``records_indexed`` (dpaudit/record_index.py)."""

from __future__ import annotations

from dpaudit.ledger import Record
from dpaudit.record_index import of_type, records_indexed

TYPES = ["open", "charge", "release", "info", "charge", "release", "info", "close"]


def _records(types: list[str]) -> list[Record]:
    return [Record(seq=i, type=t, time=float(i), prev="0" * 64, body={"i": i}, hash="0" * 64)
            for i, t in enumerate(types)]


def _selected(records: list[Record], *types: str) -> list[int]:
    return [r.seq for r in of_type(records, *types)]


def test_a_selection_is_the_records_of_those_types_in_file_order() -> None:
    records = _records(TYPES)
    expected = {("charge",): [1, 4], ("info",): [3, 6], ("info", "charge"): [1, 3, 4, 6], ("missing",): [],
                ("close", "open"): [0, 7]}
    for types, seqs in expected.items():
        assert _selected(records, *types) == seqs  # outside the block: a plain filter
        with records_indexed():
            assert _selected(records, *types) == seqs
            assert _selected(records, *types) == seqs  # the kept selection


def test_within_the_block_a_selection_is_made_once_per_list() -> None:
    records, other = _records(TYPES), _records(list(reversed(TYPES)))
    with records_indexed():
        assert of_type(records, "charge") is of_type(records, "charge")
        assert of_type(records, "info", "charge") is of_type(records, "charge", "info")
        assert _selected(other, "charge") == [3, 6]  # another list: its own selection
    assert of_type(records, "charge") is not of_type(records, "charge")  # the block ended: nothing kept


def test_blocks_are_independent() -> None:
    """A nested block starts empty, and the outer one's selections are back when it ends."""
    records = _records(TYPES)
    with records_indexed():
        outer = of_type(records, "release")
        with records_indexed():
            assert of_type(records, "release") is not outer
        assert of_type(records, "release") is outer


def test_another_thread_selects_for_itself() -> None:
    """The kept selections belong to the block's thread (a context variable): a thread started inside the block,
    as a verify running beside another, selects afresh and gets the same records, and both threads' blocks stay
    apart."""
    import threading

    records = _records(TYPES)
    seen: dict[str, object] = {}

    def other() -> None:
        with records_indexed():
            seen["inside"] = of_type(records, "charge")
            seen["again"] = of_type(records, "charge")
        seen["seqs"] = _selected(records, "info", "charge")

    with records_indexed():
        mine = of_type(records, "charge")
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert of_type(records, "charge") is mine
    assert seen["inside"] is seen["again"] and seen["inside"] is not mine
    assert [r.seq for r in seen["inside"]] == [1, 4] and seen["seqs"] == [1, 3, 4, 6]
