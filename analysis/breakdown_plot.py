"""The breakdown section's figure: one stacked bar per breakdown run, its step cut into parts."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from common import fmt
from profiling.breakdown.figures import PART_COLORS
from profiling.breakdown.names import PARTS

MAX_BARS = 40  # the latest runs beyond this are in the table, not the figure


def parts_by_run(runs: pd.DataFrame, path: Path) -> Path:
    """Horizontal bars (environment and config on the left, the step's time on the right, in s or ms), each split
    into the step's parts as shares of the step. Writes `path` (PNG) and returns it."""
    from matplotlib.figure import Figure

    from roofline.style import write_png

    runs = runs.sort_values(["env_label", "config_label"]).head(MAX_BARS).reset_index(drop=True)
    n = len(runs)
    height = 1.6 + 0.32 * n  # inches: the legend above, the axis label below, a row per bar
    fig = Figure(figsize=(8.4, height), dpi=100)
    fig.subplots_adjust(left=0.38, right=0.88, top=1 - 0.75 / height, bottom=0.7 / height)
    ax = fig.add_subplot()
    y = list(range(n))[::-1]
    left = [0.0] * n
    for part in PARTS:
        w = [
            f if isinstance(f, float) and math.isfinite(f) else 0.0
            for f in runs[f"{part}_fraction"]
        ]
        if not any(w):
            continue
        ax.barh(y, w, left=left, color=PART_COLORS[part], edgecolor="white", label=part, height=0.7)
        left = [a + b for a, b in zip(left, w)]
    ax.set_yticks(y)
    ax.set_yticklabels(
        [f"{e} · {c}"[:44] for e, c in zip(runs["env_label"], runs["config_label"])], fontsize=8.2
    )
    for yi, t in zip(y, runs["step_s"]):
        ax.text(
            1.01,
            yi,
            fmt.duration(t),
            va="center",
            fontsize=8.2,
            transform=ax.get_yaxis_transform(),
        )
    ax.set_xlim(0, 1)
    ax.set_xlabel(
        "share of the step by each run's share clock (the main thread's CPU clock on the CPU, "
        "else the wall clock; mean of the recorded steps)",
        fontsize=8.2,
    )
    ax.tick_params(axis="x", labelsize=8.2)
    ax.legend(fontsize=8.2, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_png(fig, path)
    return path
