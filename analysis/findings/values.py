"""Reading numbers the findings rest on, and intervals of ratios. Every value from the tracking store
is untrusted, and analysis/screen.py is the one gate: it leaves out a run, or only a value, that is
not a measurement, with a line naming it; the findings read plain numbers (`num`)."""

from __future__ import annotations

import math


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


def ratio_interval(ratio: float, rel_a: float | None, rel_b: float | None) -> list[float] | None:
    """The 95 % interval of `ratio` = a / b (or b / a) of two independent means whose 95 % CIs
    have relative half-widths rel_a and rel_b: on the log scale (delta method: the half-width of
    log a is rel_a), log ratio ± sqrt(rel_a² + rel_b²). Never below 0; None when either is unknown."""
    if rel_a is None or rel_b is None:
        return None
    return log_interval(ratio, math.hypot(rel_a, rel_b))


def log_interval(x: float, rel: float) -> list[float]:
    """[x / e^rel, x x e^rel]: a relative 95 % half-width `rel` taken on the log scale."""
    return [x * math.exp(-rel), x * math.exp(rel)]


def excludes_one(interval: list[float] | None) -> bool:
    return interval is not None and (interval[0] > 1 or interval[1] < 1)
