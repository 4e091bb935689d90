"""Intervals of ratios of positive quantities, on the log scale so they never leave (0, inf): the
one rule the findings (analysis/findings), the tables beside them (analysis/tables.py speed-ups)
and the what-if checks (train/whatif) share. Pure; imports nothing of the project.
"""

from __future__ import annotations

import math


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
