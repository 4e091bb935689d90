"""The figure of one series with a change (analysis/history.py): each run's mean step time against
its place in run order (start time, or a tag's order), the change points marked, each level drawn
across its runs with its 95 % interval (on the log scale, common/stats.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis import history
from common.stats import log_interval
from common import fmt


def series_figure(s: history.Series, path: Path) -> Path:
    """Writes `path` (PNG) and returns it."""
    from matplotlib.figure import Figure

    from roofline.style import write_png

    fig = Figure(figsize=(8.0, 3.6), dpi=100)
    ax = fig.add_subplot()
    x = np.arange(1, len(s.run_ids) + 1)
    y = np.array(s.step_time_mean_s) * 1e3
    ax.plot(x, y, "o", color="#333333", markersize=4, label="a run's mean step time")
    edges = [0, *(c.index for c in s.changes), len(x)]
    for k, (lv, a, b) in enumerate(zip(s.levels, edges, edges[1:])):
        level = lv.step_time_mean_s * 1e3
        rel = lv.step_time_ci95_rel if np.isfinite(lv.step_time_ci95_rel) else 0.0
        span = [a + 0.6, b + 0.4]
        ax.plot(
            span, [level, level], color="#1f77b4", linewidth=2, label="level" if k == 0 else None
        )
        lo, hi = log_interval(level, rel)  # on the log scale, as every interval here: never below 0
        ax.fill_between(span, lo, hi, color="#1f77b4", alpha=0.2,
                        label="95 % interval" if k == 0 else None)  # fmt: skip
        ax.annotate(fmt.duration(lv.step_time_mean_s), (span[1], level), fontsize=7,
                    xytext=(2, 3), textcoords="offset points")  # fmt: skip
    for c in s.changes:
        ax.axvline(c.index + 0.5, color="#d62728", linestyle="--", linewidth=1)
        ax.annotate(
            f"{fmt.num(c.ratio)}×, p = {fmt.num(c.p_value, 2)}",
            (c.index + 0.5, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
            xytext=(3, -10), textcoords="offset points", color="#d62728",
        )  # fmt: skip
    order = "start time" if s.order_by == history.START else s.order_by
    ax.set_xlabel(f"run, in order of {order}", fontsize=8)
    ax.set_ylabel("mean step time (ms)", fontsize=8)
    ax.set_title(s.name[:90], fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="best", frameon=True, framealpha=0.8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_png(fig, path)
    return path
