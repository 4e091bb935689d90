"""The project's statistics, in one room: a value read as a number (`as_float`, one meaning for a
missing value), Student's t, the 95 % interval of a mean, and the 95 % interval of a ratio taken on
the log scale. Every package reads numbers and computes intervals through here (docs/schema.md,
"Definitions"). Pure: the standard library only.
"""

from __future__ import annotations

import math


def as_float(value, *, positive: bool = False, nonnegative: bool = False) -> float | None:
    """`value` as a float, or None when it is missing: None, a bool, text that is no number, NaN or
    an infinity (a value that is not a finite number is never computed with). Numbers written as
    text ("2.5") and numpy numbers read as their value. `nonnegative`: a negative value is missing
    too; `positive`: zero and negatives are. Frames keep pandas' own mark (NaN) for a missing cell;
    this is the reading of one value."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(x) or ((positive or nonnegative) and x < 0) or (positive and x == 0):
        return None
    return x


# two-sided 95 % Student t quantiles for 1..30 degrees of freedom
# fmt: off
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)
# fmt: on


def t_quantile_975(dof: int) -> float:
    """The 97.5 % quantile of Student's t with `dof` degrees of freedom (table, then 1.96 + 2.4 / dof)."""
    return _T975[dof - 1] if dof <= len(_T975) else 1.960 + 2.4 / dof


def mean_ci95_rel(n: float, sd: float, mean: float) -> float:
    """Half-width of the 95 % confidence interval of a mean of `n` values whose SD (ddof = 1) is
    `sd`, relative to the mean: Student t with n - 1 degrees of freedom (normal beyond 30, accurate
    to < 1 % of the width), t x sd / sqrt(n) / mean. Infinite below two values (no interval)."""
    if n < 2:
        return math.inf
    return t_quantile_975(int(n) - 1) * sd / math.sqrt(n) / mean


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
