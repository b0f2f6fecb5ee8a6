"""``mentions_number``: finds a whole number in a published value, and only that number."""

from __future__ import annotations

import pytest

from dpaudit.testing import mentions_number


@pytest.mark.parametrize("value", [32561, 32561.0, "n = 32561 records", ["x", {"size": 32561}], {"32561": 1},
                                   ("32561",), "32561", "n=32561."])
def test_the_number_is_found(value):
    assert mentions_number(value, 32561)


@pytest.mark.parametrize("value", [32560, 32561.5, "a32561", "32561.5", "132561", "325610", "0x32561b", True, None,
                                   {"rows": None}, [], "3256"])
def test_other_values_are_not_taken_for_it(value):
    assert not mentions_number(value, 32561)
