"""The one relative tolerance between a recomputed privacy quantity and the value it is compared with.

A privacy map re-evaluated from a recorded event (by an accountant, the budget filter or ``dpaudit verify``) may
exceed the charge the event declares by float rounding alone: the session calibrates the noise from the declared
value, and the map reads it back through a few correctly rounded operations. :data:`REL_TOL` is the slack allowed
for that (far above the few ulp such rounding produces, far below any real under-charge). Every comparison of a
map with a declared charge, of a recomputed sensitivity with a recorded one, and of a composed ε with the budget
uses this constant, so there is one number to audit (docs/constants.md).
"""

from __future__ import annotations

#: relative slack attributed to float rounding when a recomputed value is compared with a recorded one
REL_TOL = 1e-9


def within(value: float, bound: float) -> bool:
    """Whether ``value`` ≤ ``bound`` up to the relative rounding slack :data:`REL_TOL` (False for a NaN)."""
    return value <= bound * (1.0 + REL_TOL)
