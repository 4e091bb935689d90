"""The scaling figure: per environment, global samples/s against world size with each series'
ideal line (top), and scaling efficiency with the exposed-communication share (bottom). Drawn from
the rows of analysis/scaling.py; helpers and conventions from analysis/plots.py.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.lines import Line2D

from analysis.plots import LEGEND_ROW_IN, bottom_legend, legend_rows, save
from analysis.scaling import BASE_SAME_ENGINE
from roofline.style import FIGURE_WIDTH_IN, distinct_colors, env_title, log_ticks, new_figure

PANEL_H = 3.4


def scaling_vs_world_size(rows: pd.DataFrame, path: Path) -> Path:
    """Top: samples/s (filled, solid) and the ideal (world size × the baseline, dashed; the
    baseline at world size 1 drawn hollow when it is a single-process run). Bottom: scaling
    efficiency (filled, solid) and exposed-communication share (hollow, dotted), with 1 = ideal."""
    envs = sorted({(e, d) for e, d in zip(rows["env_label"], rows["device_name"])}) or [("", "")]
    names = sorted(set(rows["series"]))
    color_of = distinct_colors(names)
    handles = _legend_handles(names, color_of)
    bottom = 0.95 + LEGEND_ROW_IN * legend_rows(handles)
    fig, axes = new_figure(
        FIGURE_WIDTH_IN,
        2 * PANEL_H + 0.75 + bottom,
        2,
        len(envs),
        left=0.9,
        right=0.3,
        top=0.75,
        bottom=bottom,
    )
    for i, (env, dev) in enumerate(envs):
        sub = rows[(rows["env_label"] == env) & (rows["device_name"] == dev)]
        _draw_env(axes[0][i], axes[1][i], sub, color_of)
        axes[0][i].set_title(env_title(env, dev), fontsize=10)
    bottom_legend(fig, handles)
    fig.suptitle(
        "Data-parallel scaling: samples/s, efficiency and exposed communication", fontsize=11
    )
    return save(fig, path)


def _draw_env(top, bottom, sub: pd.DataFrame, color_of: dict[str, str]) -> None:
    """One environment's two panels: samples/s with each series' ideal (top), efficiency and
    exposed-communication share (bottom)."""
    for series, g in sub.groupby("series", sort=True):
        g = g.sort_values("world_size")
        color = color_of[series]
        ws = g["world_size"].astype(float)
        top.plot(ws, g["throughput_mean_samples_per_s"], "o-", color=color, ms=5, lw=1.4)
        base = float(g["baseline_samples_per_s"].iloc[0])
        if base > 0:  # NaN compares False: no baseline, no ideal
            span = [1.0, float(ws.max())]
            top.plot(span, [base * w for w in span], "--", color=color, lw=1)
            if g["baseline"].iloc[0] != BASE_SAME_ENGINE:
                top.plot([1], [base], "o", color=color, fillstyle="none", ms=6)
        bottom.plot(ws, g["scaling_efficiency"], "o-", color=color, ms=5, lw=1.4)
        bottom.plot(ws, g["exposed_comm_time_share"], "^:", color=color, fillstyle="none")
    bottom.axhline(1.0, color="gray", lw=1, ls="--")
    sizes = sorted({1, *(int(w) for w in sub["world_size"].dropna())})
    for ax in (top, bottom):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_xlabel("world size (processes)")
        ax.grid(True, alpha=0.3)
    top.set_yscale("log")
    log_ticks(top.yaxis)
    top.set_ylabel("samples/s (global)")
    bottom.set_ylabel("fraction (1 = ideal)")
    lowest = sub["exposed_comm_time_share"].min()  # a share within the noise may be < 0
    bottom.set_ylim(bottom=min(0.0, float(lowest)) if pd.notna(lowest) else 0.0)


def _legend_handles(names: list[str], color_of: dict[str, str]) -> list[Line2D]:
    handles = [Line2D([], [], color=color_of[n], marker="o", ms=5, label=n) for n in names]
    return handles + [
        Line2D([], [], color="black", ls="--", label="ideal: world size × baseline"),
        Line2D(
            [],
            [],
            color="black",
            marker="o",
            fillstyle="none",
            ls="",
            label="single-process baseline",
        ),
        Line2D([], [], color="black", marker="o", label="samples/s; scaling efficiency"),
        Line2D(
            [], [], color="black", marker="^", fillstyle="none", ls=":", label="exposed comm. share"
        ),
    ]
