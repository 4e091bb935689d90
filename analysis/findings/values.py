"""Reading numbers the findings rest on, and intervals of ratios. Every value from the tracking store
is untrusted, and analysis/screen.py is the one gate: it leaves out a run, or only a value, that is
not a measurement, with a line naming it; the findings read plain numbers (`num`)."""

from __future__ import annotations

import math

from common.intervals import excludes_one, log_interval, ratio_interval

__all__ = ["excludes_one", "finite", "log_interval", "num", "ratio_interval"]


def num(v, positive: bool = False) -> float | None:
    """`v` as a float, or None when it is missing or no number to compute with (NaN, infinite,
    negative, or zero when `positive`). analysis/screen.py has already left out every value of the
    store that is not a measurement, with its line; this only reads what passed."""
    if v is None or isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        return None
    return x


def finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)
