"""Figures as PNG files (matplotlib's Agg canvas; no pyplot, no global state): `save`, the
per-environment batch-size panels, the step-time box plot, and the rooflines drawn by
roofline/plot.py saved. Canvas, ticks and encodings (colour, marker, line style) are
roofline/style.py's.

Every figure function takes the DataFrames built by analysis/core.py and a path, draws one figure
and returns the path.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import EngFormatter, NullFormatter  # noqa: E402

from common.fmt import si  # noqa: E402
from roofline import plot as roofline_plot  # noqa: E402
from roofline.style import (  # noqa: E402
    SOURCE_MARKER,
    distinct_colors,
    env_title,
    log_ticks,
    write_png,
    FIGURE_WIDTH_IN,
    new_figure,
)


DPI = 110


def save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_png(fig, path, dpi=DPI)
    return path


def _series_label(row: pd.Series) -> str:
    """A point label without the batch size: model/precision (+ options)."""
    parts = str(row["label"]).split("/")
    return "/".join(p for p in parts if not (p.startswith("b") and p[1:].isdigit()))


def wrap(text: str, width_in: float, fontsize: float) -> str:
    """`text` wrapped (each of its lines) to fit `width_in` inches at `fontsize` points; the width
    of a character is taken as 0.62 em, above DejaVu Sans's average, so that wrapped lines fit."""
    chars = max(10, int(width_in * 72 / (0.62 * fontsize)))
    return "\n".join(
        textwrap.fill(line, chars, break_on_hyphens=False) or line for line in text.split("\n")
    )


def _panels(n: int, height_each: float = 3.6, top=0.75, legend_rows: int = 0):
    """`n` panels, at most two a row, in a figure FIGURE_WIDTH_IN wide (legible at the viewer's
    width) with room below for an axis label and a legend of `legend_rows` rows."""
    ncols = 1 if n == 1 else 2
    nrows = math.ceil(n / ncols)
    bottom = 0.65 + (0.3 + LEGEND_ROW_IN * legend_rows if legend_rows else 0.0)
    fig, axes = new_figure(
        FIGURE_WIDTH_IN,
        height_each * nrows + top - 0.75 + bottom,
        nrows,
        ncols,
        left=0.9,
        right=0.3,
        top=top,
        bottom=bottom,
        wspace=0.32,
    )
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


LEGEND_ROW_IN = 0.24  # a legend row at 8 points
LEGEND_COLS = 3


def legend_rows(handles: list, ncol: int = LEGEND_COLS) -> int:
    return math.ceil(len(handles) / ncol) if handles else 0


def bottom_legend(fig: Figure, handles: list, ncol: int = LEGEND_COLS) -> None:
    """One legend for the figure in its bottom margin (`_panels(..., legend_rows)` made room)."""
    fig.legend(
        handles=handles,
        fontsize=8.2,
        loc="lower center",
        ncol=ncol,
        frameon=False,
        bbox_to_anchor=(0.5, 0.01),
    )


# ------------------------------------------------------------------------------- per-env panels
def _per_env_lines(
    points: pd.DataFrame,
    y: str,
    yerr: str | tuple[str, str] | None,
    ylabel: str,
    title: str,
    logy: bool,
    marker_by_source: bool = False,
    hline: float | None = None,
) -> Figure:
    """One panel per environment, one line per series (model/precision/options) in the same color in
    every panel, and one legend for the figure. Error bars (`yerr`, a ± spread) never reach below
    zero: where the spread exceeds the value the lower bar stops at 0, and the title says so. A
    (low, high) pair of columns draws that interval instead (it never reaches below 0)."""
    envs = sorted({(e, d) for e, d in zip(points["env_label"], points["device_name"])})
    pts = points[
        points[y].notna() & pd.to_numeric(points["batch_size"], errors="coerce").gt(0)
    ]  # no batch: no x
    pts = pts.assign(series=[_series_label(r) for r in pts.to_dict("records")])
    names = sorted(set(pts["series"]))
    color_of = distinct_colors(names)
    clipped = isinstance(yerr, str) and bool((pts[yerr].fillna(0) > pts[y]).any())
    title += "; lower bars cut at 0 where the spread exceeds the value" if clipped else ""
    title = wrap(title, FIGURE_WIDTH_IN - 0.4, 11)
    handles = _series_handles(names, color_of, marker_by_source)
    fig, axes = _panels(
        max(len(envs), 1),
        top=0.5 + 0.22 * (title.count("\n") + 1),
        legend_rows=legend_rows(handles),
    )
    if not envs:
        axes[0].text(0.5, 0.5, "no data", ha="center", va="center", transform=axes[0].transAxes)
    for ax, (env, dev) in zip(axes, envs):
        sub = pts[(pts["env_label"] == env) & (pts["device_name"] == dev)].sort_values("batch_size")
        for series, g in sub.groupby("series", sort=True):
            _draw_series(ax, g, y, yerr, color_of[series], marker_by_source)
        if hline is not None:
            ax.axhline(hline, color="gray", lw=1, ls="--")
        _format_panel(ax, sub, env_title(env, dev), ylabel, logy)
    if handles:
        bottom_legend(fig, handles)
    fig.suptitle(title, fontsize=11)
    return fig


def _draw_series(ax, g: pd.DataFrame, y: str, yerr, color: str, by_source: bool):
    """One series of one panel: a line with error bars, or with `by_source` one line per intensity
    source (a measured and a modeled value are never joined)."""
    if not by_source:
        err = None
        if isinstance(yerr, tuple):
            v = g[y].to_numpy(dtype=float)
            lo, hi = (g[c].to_numpy(dtype=float) for c in yerr)
            err = np.vstack([np.nan_to_num(v - lo), np.nan_to_num(hi - v)])  # (below, above)
        elif yerr:
            sd = g[yerr].fillna(0).to_numpy()
            err = np.vstack([np.minimum(sd, g[y].to_numpy()), sd])  # (below, above)
        ax.errorbar(
            g["batch_size"], g[y], yerr=err, capsize=3, marker="o", ms=5, lw=1.4, color=color
        )
        return
    for source, gs in g.groupby("intensity_source", sort=True):
        style = SOURCE_MARKER.get(source, SOURCE_MARKER["modeled"])
        ax.plot(
            gs["batch_size"],
            gs[y],
            lw=1.4,
            ms=7,
            markeredgewidth=1.4,
            color=color,
            ls="-" if source == "measured" else "--",
            **style,
        )


def _format_panel(ax, sub: pd.DataFrame, title: str, ylabel: str, logy: bool) -> None:
    """Batch sizes on a log2 x axis (or a note that the panel has none), labels, title, grid; a
    log y axis with plain ticks when `logy` (what the figure's title then says)."""
    batches = sorted(set(int(b) for b in sub["batch_size"].dropna()))
    ax.set_title(title, fontsize=10)
    if not batches:
        ax.text(
            0.5,
            0.5,
            "no run with a batch_size param",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        return
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    if logy:
        ax.set_yscale("log")
        log_ticks(ax.yaxis)
    ax.set_xlabel("batch size (samples per step)")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)


def _series_handles(names: list[str], color_of: dict[str, str], by_source: bool) -> list:
    handles = [Line2D([], [], color=color_of[n], marker="o", ms=5, label=n) for n in names]
    if by_source:
        handles += [
            Line2D(
                [], [], ls="-", color="black", label="measured (ncu)", **SOURCE_MARKER["measured"]
            ),
            Line2D(
                [],
                [],
                ls="--",
                color="black",
                label="modeled (byte model)",
                **SOURCE_MARKER["modeled"],
            ),
        ]
    return handles


def draw_throughput_vs_batch(points: pd.DataFrame) -> Figure:
    return _per_env_lines(
        points,
        "throughput_mean_samples_per_s",
        "throughput_sd_samples_per_s",
        "throughput (samples/s)",
        "Training throughput vs batch size (error bars: ±1 SD; "
        "across runs where repeated, else within the run)",
        logy=False,
    )


def throughput_vs_batch(points: pd.DataFrame, path: Path) -> Path:
    return save(draw_throughput_vs_batch(points), path)


def intensity_vs_batch(points: pd.DataFrame, path: Path) -> Path:
    fig = _per_env_lines(
        points,
        "intensity_flops_per_byte",
        None,
        "arithmetic intensity (FLOP/byte)",
        "Arithmetic intensity vs batch size",
        logy=True,
        marker_by_source=True,
    )
    return save(fig, path)


def draw_speedup_vs_batch(speedups: pd.DataFrame) -> Figure:
    return _per_env_lines(
        speedups,
        "speedup",
        ("speedup_ci95_low", "speedup_ci95_high"),
        "speed-up over fp32 (samples/s ratio, log axis)",
        "fp16/bf16 autocast speed-up over fp32 (log axis: 2x and 0.5x equally far from 1; "
        "error bars: the ratio's 95 % CI)",
        logy=True,
        hline=1.0,
    )


def speedup_vs_batch(speedups: pd.DataFrame, path: Path) -> Path:
    return save(draw_speedup_vs_batch(speedups), path)


def step_time_variability(
    series: dict[tuple[str, str], list[float]], title: str, path: Path
) -> Path:
    """Box plot of per-step times, one box per environment (all measured steps of the plotted runs)."""
    keys = [k for k in sorted(series) if series[k]]
    width = min(FIGURE_WIDTH_IN, max(6.0, 1.8 * len(keys) + 2))
    title = wrap(title, width - 0.4, 11)
    top = 0.3 + 0.2 * (title.count("\n") + 1)
    fig, axes = new_figure(width, 5.0 + top, left=0.9, bottom=1.0, top=top)
    ax = axes[0][0]
    if keys:
        data = [np.asarray(series[k], dtype=float) for k in keys]
        ax.boxplot(data, showfliers=True, widths=0.5)
        names = []
        for (env, dev), d in zip(keys, data):
            name = f"{env}\n{dev}" if dev and dev not in env else env
            cv = float(np.std(d, ddof=1) / np.mean(d)) if len(d) > 1 else float("nan")
            names.append(
                f"{name}\nn={len(d)}, median {si(float(np.median(d)), 's')}"
                + (f"\nCV {100 * cv:.1f}%" if np.isfinite(cv) else "")
            )
        ax.set_xticks(range(1, len(keys) + 1), names, fontsize=8.2)
        lo, hi = min(float(d.min()) for d in data), max(float(d.max()) for d in data)
        if lo > 0 and hi / lo > 20:  # environments orders of magnitude apart: log scale
            ax.set_yscale("log")
    else:
        ax.text(
            0.5,
            0.5,
            "no step_time_s series logged",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    ax.set_ylabel("step time (all measured steps)")
    ax.yaxis.set_major_formatter(EngFormatter(unit="s"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(title, fontsize=11)
    return save(fig, path)


def roofline_env(
    points: pd.DataFrame, env: str, device: str, roofset: dict, path: Path
) -> tuple[Path, int]:
    """roofline_<env>.png (roofline.plot.draw_roofline_env) and the number of points drawn."""
    fig, n = roofline_plot.draw_roofline_env(points, env, device, roofset)
    return save(fig, path), n


def roofline_combined(points: pd.DataFrame, roofs: dict, path: Path) -> tuple[Path, int]:
    """roofline_all.png (roofline.plot.draw_roofline_combined) and the number of points drawn."""
    fig, n = roofline_plot.draw_roofline_combined(points, roofs)
    return save(fig, path), n
