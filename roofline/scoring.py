"""How a measured check scores a prediction (roofline/whatif.py), and how good the predictions of
one knob are over many checks. Pure: numbers in, words and numbers out.

The verdict of one move (docs/schema.md, "Definitions"), first rule that applies:

* **not predicted**: nothing was predicted, or the predicted interval is wider than MAX_WIDTH
  (its high end more than twice its low end);
* **not judged**: the original's or the move's runs are unstable (they disagree: samples/s
  spread over common.plausible.UNSTABLE_SPREAD, or a mean step time whose 95 % CI is wider than
  ±CI_WIDE_REL), have no interval (fewer than two finished runs), or the measured interval is
  wider than MAX_WIDTH: a vague measurement cannot tell held from missed either;
* **held**: the measured speed-up's 95 % interval (log scale) overlaps the predicted interval;
* **beaten**: the measured interval lies wholly above the predicted one (the move did better);
* **missed**: it lies wholly below (the move did worse than predicted).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from common.stats import as_float
from roofline.whatif import MAX_WIDTH

VERDICTS = ("held", "beaten", "missed", "not predicted", "not judged")
JUDGED = ("held", "beaten", "missed")
KEEPS_MISSING_MIN = 2
"""a knob 'keeps missing' when at least this many of its predictions were judged ..."""
KEEPS_MISSING_SHARE = 0.5
"""... and more than this share of those were missed or beaten (not held)."""


@dataclass(frozen=True)
class Measured:
    """A move's measured speed-up over the original (samples/s over samples/s) and its 95 %
    interval on the log scale; `unstable` says why either side's runs are not to be judged."""

    speedup: float | None
    low: float | None = None
    high: float | None = None
    unstable: str = ""


def verdict(low: float | None, high: float | None, why_not: str, m: Measured) -> tuple[str, str]:
    """(verdict, why) for the predicted interval [low, high] against the measurement `m`."""
    if low is None or high is None or not low > 0:
        return "not predicted", why_not or "nothing was predicted"
    if high / low > MAX_WIDTH:
        return "not predicted", (
            f"its interval x{low:.3g}-x{high:.3g} is wider than x{MAX_WIDTH:g}: too vague to check"
        )
    if m.unstable:
        return "not judged", m.unstable
    if m.speedup is None or m.low is None or m.high is None:
        return "not judged", "no measured interval (fewer than two finished runs on a side)"
    if m.high / m.low > MAX_WIDTH:
        return "not judged", (
            f"the measured interval x{m.low:.3g}-x{m.high:.3g} is wider than x{MAX_WIDTH:g}: "
            "more repeats or a quieter machine would narrow it"
        )
    if m.low > high:
        return "beaten", f"measured x{m.low:.3g}-x{m.high:.3g}, above x{low:.3g}-x{high:.3g}"
    if m.high < low:
        return "missed", f"measured x{m.low:.3g}-x{m.high:.3g}, below x{low:.3g}-x{high:.3g}"
    return "held", f"measured x{m.low:.3g}-x{m.high:.3g} overlaps x{low:.3g}-x{high:.3g}"


def check_text(name: str, low, high, speedup, m_low, m_high, verdict_: str) -> str:
    """`bf16: predicted x1.3-1.9, measured x1.52 (1.44-1.60), held` (what the report and the
    whatif table print beside a move)."""
    pred = (
        f"predicted x{low:.3g}-{high:.3g}"
        if low is not None and high is not None
        else "nothing predicted"
    )
    if speedup is None:
        meas = "not measured"
    elif m_low is None or m_high is None:
        meas = f"measured x{speedup:.3g}"
    else:
        meas = f"measured x{speedup:.3g} ({m_low:.3g}-{m_high:.3g})"
    return f"{name}: {pred}, {meas}, {verdict_}"


@dataclass(frozen=True)
class Calibration:
    """How good the predictions of one knob were over checks (the report's "How good is the
    advice"): counts per verdict, the median |log(measured / predicted midpoint)| over the judged
    checks (held, beaten, missed: nothing is concluded from a check not judged), the median width
    (high / low) of the predicted intervals."""

    knob: str
    n: int
    counts: dict
    median_abs_log_error: float | None
    median_width: float | None
    keeps_missing: bool

    @property
    def judged(self) -> int:
        return sum(self.counts[v] for v in JUDGED)


def calibration(checks: list[dict]) -> list[Calibration]:
    """Per knob (in first-seen order), from check records with keys knob, verdict,
    predicted_low, predicted_high, measured (the whatif table's rows)."""
    by_knob: dict[str, list[dict]] = {}
    for c in checks:
        by_knob.setdefault(str(c["knob"]), []).append(c)
    return [_one(knob, rows) for knob, rows in by_knob.items()]


def _one(knob: str, rows: list[dict]) -> Calibration:
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    errors, widths = [], []
    for r in rows:
        lo, hi, m = r.get("predicted_low"), r.get("predicted_high"), r.get("measured")
        if _pos(lo) and _pos(hi):
            widths.append(hi / lo)
            if _pos(m) and r["verdict"] in JUDGED:
                errors.append(abs(math.log(m / math.sqrt(lo * hi))))
    judged = sum(counts[v] for v in JUDGED)
    keeps = judged >= KEEPS_MISSING_MIN and (judged - counts["held"]) / judged > KEEPS_MISSING_SHARE
    return Calibration(
        knob,
        len(rows),
        counts,
        statistics.median(errors) if errors else None,
        statistics.median(widths) if widths else None,
        keeps,
    )


def _pos(x) -> bool:
    return as_float(x, positive=True) is not None
