"""The fixed-time model of a batch series: step time = fixed + per_sample x batch, fitted by least
squares through (batch size, each run's mean step time), and when that model holds. One home for
the analysis's latency rule (analysis/findings/bound.py) and the what-if's batch moves
(train/whatif): pure numbers.
"""

from __future__ import annotations

import math

import numpy as np

from common.stats import t_quantile_975

MIN_RUNS = 3
"""a fixed-time fit needs at least this many runs (one more than the line's two parameters, for
the intercept's confidence interval)."""


def line(xy: np.ndarray) -> dict:
    """Least squares step = fixed + per_sample x batch over rows (batch, step s), with the
    intercept's 95 % half-width `ci` (Student t, n - 2; inf for two points)."""
    x, y = xy[:, 0], xy[:, 1]
    per_sample, fixed = np.polyfit(x, y, 1)
    n = len(x)
    se = math.inf
    if n > 2:
        resid = y - (fixed + per_sample * x)
        s2 = float(resid @ resid) / (n - 2)
        sxx = float(((x - x.mean()) ** 2).sum())
        se = math.sqrt(s2 * (1 / n + x.mean() ** 2 / sxx))
    q = t_quantile_975(n - 2) if n > 2 else math.inf
    return {"fixed": float(fixed), "per_sample": float(per_sample), "ci": q * se, "n": n}


def unfit(fit: dict, n: int, steps: list[float]) -> str | None:
    """Why the fixed-time model does not hold for the line `fit` over `n` runs whose
    configurations' mean step times are `steps`, or None when it does: a positive slope, an
    intercept inside [0, the step time] whose 95 % CI lies above zero."""
    if n < MIN_RUNS:
        return f"{n} runs are too few for a confidence interval of the fixed time (need {MIN_RUNS})"
    if fit["per_sample"] <= 0:
        return (
            f"step time falls as the batch grows (slope {fit['per_sample'] * 1e3:.3g} ms per "
            "sample): the runs were disturbed, not the model; rerun the series on a quiet machine"
        )
    if not 0 <= fit["fixed"] <= min(steps):
        return f"its intercept ({fit['fixed'] * 1e3:.3g} ms) lies outside [0, the step time]"
    if fit["fixed"] - fit["ci"] <= 0:
        return (
            f"the 95% CI of its intercept ({fit['fixed'] * 1e3:.3g} ± {fit['ci'] * 1e3:.3g} ms) "
            "includes zero; more runs per batch would narrow it"
        )
    return None
