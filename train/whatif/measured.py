"""The measured side of a what-if: each configuration's numbers from its runs, as docs/schema.md
("Definitions") defines a configuration's numbers, whether they are stable, and a move's speed-up
over the original with its 95 % interval on the log scale. Pure.

* the mean step time: pooled over the runs' measured steps (each run's mean weighted by its steps);
  samples/s = batch / that mean;
* its 95 % CI: Student t over the runs' mean step times (the runs are the independent repeats),
  relative to their mean; a single run has no interval here;
* unstable: the runs' samples/s range wider than x UNSTABLE_SPREAD (highest over lowest), or a CI
  wider than ±CI_WIDE_REL (common.plausible, the findings' rule);
* the speed-up: samples/s of the move over samples/s of the original; its interval
  common.stats.ratio_interval (log ratio ± the two relative half-widths added in quadrature).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from common import plausible
from common.stats import as_float, mean_ci95_rel, ratio_interval
from roofline.scoring import Measured


@dataclass(frozen=True)
class Side:
    """One configuration of a what-if (the original, or a move) as its runs measured it."""

    label: str
    run_ids: tuple[str, ...]
    per_step: float
    """samples per step (the batch)"""
    step_s: float | None
    ci_rel: float | None
    spread: float | None
    """highest over lowest run samples/s"""

    @property
    def throughput(self) -> float | None:
        return self.per_step / self.step_s if self.step_s else None

    @property
    def unstable(self) -> str:
        """why its runs disagree too much to judge it ('' when they agree)."""
        why = []
        if self.spread is not None and self.spread > plausible.UNSTABLE_SPREAD:
            why.append(
                f"its runs' samples/s differ x{self.spread:.3g} (over x{plausible.UNSTABLE_SPREAD:g})"
            )
        if self.ci_rel is not None and self.ci_rel > plausible.CI_WIDE_REL:
            why.append(
                f"the 95% CI of its mean step time is ±{self.ci_rel:.0%} (over "
                f"±{plausible.CI_WIDE_REL:.0%})"
            )
        return f"{self.label} is unstable: {'; '.join(why)}" if why else ""


def side(label: str, runs: list[dict], per_step: float) -> Side:
    """A configuration's numbers from its FINISHED runs (dicts with run_id, step_time_mean_s and
    measured_iters; those without a positive step time are left out)."""
    ok = [r for r in runs if as_float(r.get("step_time_mean_s"), positive=True)]
    ids = tuple(str(r["run_id"]) for r in ok)
    if not ok:
        return Side(label, ids, per_step, None, None, None)
    means = [float(r["step_time_mean_s"]) for r in ok]
    steps = [as_float(r.get("measured_iters"), positive=True) or 1.0 for r in ok]
    pooled = sum(m * n for m, n in zip(means, steps)) / sum(steps)
    ci = None
    if len(means) >= 2:
        ci = mean_ci95_rel(len(means), statistics.stdev(means), statistics.fmean(means))
    return Side(label, ids, per_step, pooled, ci, max(means) / min(means))


def measured(orig: Side, move: Side) -> Measured:
    """The move's speed-up over the original, its 95 % interval (None without a CI on both sides)
    and why either side is unstable."""
    why = "; ".join(u for u in (orig.unstable, move.unstable) if u)
    if orig.throughput is None or move.throughput is None:
        return Measured(None, None, None, why)
    s = move.throughput / orig.throughput
    interval = ratio_interval(s, orig.ci_rel, move.ci_rel)
    lo, hi = interval if interval else (None, None)
    return Measured(s, lo, hi, why)
