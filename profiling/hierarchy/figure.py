"""The hierarchical roofline of one profile: every kernel (name) placed at its intensity at DRAM,
L2 and L1, against the three bandwidth ceilings and the compute ceilings of the chip's precisions.

After Yang, Kurth & Williams ("Hierarchical Roofline analysis for GPUs", CCPE 2020) and NERSC's
DeepCAM figures (arXiv 2009.05257): one point per kernel per level at the kernel's achieved FLOP/s
(so a kernel's three points sit on one horizontal line; where each sits against its own level's
slope says which level bounds it), the point's area proportional to the kernel's time, the
biggest kernels labelled. Colour = memory level (points and slopes alike); horizontal lines =
compute ceilings, coloured by dtype as every figure of the project. A ceiling the roof lacks is
named in the legend ("no L1 ceiling known"), never invented.

Input is plain data (a DataFrame of kernel_name, time_s, flops_per_s and
intensity_<level>_flops_per_byte per row; a `Roof`): profiling/hierarchy/table.py builds it.
"""

from __future__ import annotations

import math
import re

import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter

from common.fmt import si
from roofline.labels import POINT_FONT, Labels
from roofline.model import LEVELS, Roof, is_finite_positive
from roofline.plot import source_style
from roofline.style import DTYPE_COLORS, flops_label, log_ticks, new_figure, write_png

LEVEL_COLORS = {"dram": "#d62728", "l2": "#bcbd22", "l1": "#17becf"}
"""one colour per memory level, none of them a dtype's (roofline/style.py DTYPE_COLORS)."""
LABEL_AT = [(-6, 3, "right"), (-6, -12, "right"), (6, 3), (6, -12), (-6, 14, "right"), (6, 14)]
"""label offsets from a kernel's leftmost point: to its left first, where its other levels are not."""
LEVEL_NAMES = {"dram": "DRAM/HBM", "l2": "L2", "l1": "L1"}
COMPUTE_NAMES = {
    "fp64": "FP64",
    "fp32": "FP32 (CUDA cores)",
    "tf32": "TF32 tensor",
    "fp16": "FP16 tensor",
    "bf16": "BF16 tensor",
}
MAX_AREA = 900.0
"""marker area (points^2) of the longest kernel; the others scale with their time."""
LABELLED = 6
"""kernels labelled, longest first."""


def short_name(name: str, width: int = 34) -> str:
    """A kernel's name for a label: without return type, template arguments, parameters and
    namespaces ("void at::native::vectorized_elementwise_kernel<4, ...>(...)" ->
    "vectorized_elementwise_kernel"), cut at `width` characters."""
    s = re.sub(r"^void\s+", "", str(name))
    depth, out = 0, []
    for ch in s:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip().split("::")[-1] or str(name)
    return s if len(s) <= width else s[: width - 1] + "…"


def _points(table: pd.DataFrame) -> pd.DataFrame:
    ok = table["flops_per_s"].map(is_finite_positive) & table["time_s"].map(is_finite_positive)
    return table[ok].sort_values("time_s", ascending=False)


def _spans(pts: pd.DataFrame, roof: Roof | None) -> tuple[tuple[float, float], tuple[float, float]]:
    xs = [
        v for lv in LEVELS for v in pts[f"intensity_{lv}_flops_per_byte"] if is_finite_positive(v)
    ]
    ys = [v for v in pts["flops_per_s"] if is_finite_positive(v)]
    peaks = [v for v in (roof.flops_per_s.values() if roof else ()) if is_finite_positive(v)]
    if roof is not None:
        for bw in roof.bytes_per_s.values():
            xs += [p / bw for p in peaks if is_finite_positive(bw)]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.1, 100.0)
    y_lo, y_hi = min(ys or [1e9]), max(ys + peaks or [1e12])
    return (x_lo / 3, x_hi * 3), (y_lo / 3, y_hi * 3)


def _draw_ceilings(ax, roof: Roof | None, x_span) -> list[str]:
    """Slopes per level and compute lines per dtype; the names of the levels without a ceiling."""
    if roof is None:
        return list(LEVELS)
    peaks = {d: v for d, v in roof.flops_per_s.items() if is_finite_positive(v)}
    top = max(peaks.values(), default=math.nan)
    lacking = []
    for level in LEVELS:
        bw = roof.bytes_per_s.get(level)
        if not is_finite_positive(bw):
            lacking.append(level)
            continue
        x_end = top / bw if math.isfinite(top) else x_span[1]
        ax.plot(
            [x_span[0], x_end],
            [x_span[0] * bw, x_end * bw],
            color=LEVEL_COLORS[level],
            linestyle=source_style(roof, f"bytes:{level}"),
            linewidth=1.6,
            label=f"{LEVEL_NAMES[level]} {si(bw, 'B/s')} ({roof.source_kind(f'bytes:{level}')})",
        )
    for dtype, peak in sorted(peaks.items(), key=lambda kv: -kv[1]):
        ax.plot(
            x_span,
            [peak, peak],
            color=DTYPE_COLORS.get(dtype, "black"),
            linestyle=source_style(roof, f"flops:{dtype}"),
            linewidth=1.4,
            label=f"{COMPUTE_NAMES.get(dtype, dtype)} {flops_label(peak)} "
            f"({roof.source_kind(f'flops:{dtype}')})",
        )
    return lacking


def _draw_points(ax, pts: pd.DataFrame) -> None:
    t_max = float(pts["time_s"].max())
    for _, row in pts.head(LABELLED).iterrows():  # a labelled kernel's levels, joined
        xs = [row[f"intensity_{lv}_flops_per_byte"] for lv in LEVELS]
        xs = [x for x in xs if is_finite_positive(x)]
        if len(xs) > 1:
            y = row["flops_per_s"]
            ax.plot([min(xs), max(xs)], [y, y], color="0.6", linewidth=0.8, zorder=2)
    for level in LEVELS:
        x = pts[f"intensity_{level}_flops_per_byte"]
        ok = x.map(is_finite_positive)
        ax.scatter(
            x[ok],
            pts["flops_per_s"][ok],
            s=MAX_AREA * pts["time_s"][ok] / t_max,
            color=LEVEL_COLORS[level],
            alpha=0.45,
            edgecolors=LEVEL_COLORS[level],
            linewidths=0.8,
            zorder=3,
        )


def _label(ax, pts: pd.DataFrame) -> None:
    labels = Labels(ax)
    total = float(pts["time_s"].sum())
    for _, row in pts.head(LABELLED).iterrows():
        xs = [row[f"intensity_{lv}_flops_per_byte"] for lv in LEVELS]
        x = min((v for v in xs if is_finite_positive(v)), default=math.nan)
        if not math.isfinite(x):
            continue
        frac = row.get("time_share", math.nan)  # of its phase, as in the table
        frac = frac if is_finite_positive(frac) else (row["time_s"] / total if total > 0 else 0)
        share = f" {100 * frac:.0f}%" if frac else ""
        labels.place(
            short_name(row["kernel_name"]) + share,
            (x, row["flops_per_s"]),
            LABEL_AT,
            fontsize=POINT_FONT,
        )


def _legend(ax, lacking: list[str], unmeasured: list[str]) -> None:
    handles, _ = ax.get_legend_handles_labels()
    for level in LEVELS:
        handles.append(
            Line2D(
                [], [], linestyle="", marker="o", markersize=8, alpha=0.6,
                color=LEVEL_COLORS[level], label=f"kernel at {LEVEL_NAMES[level]} intensity",
            )
        )  # fmt: skip
    handles.append(Line2D([], [], linestyle="", label="marker area ∝ kernel time"))
    for level in unmeasured:
        handles.append(
            Line2D([], [], linestyle="", label=f"no {LEVEL_NAMES[level]} bytes in the input")
        )
    for level in lacking:
        handles.append(
            Line2D(
                [], [], linestyle="", label=f"no {LEVEL_NAMES[level]} ceiling known (--peaks-file)"
            )
        )
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False
    )


def draw_hierarchical(table: pd.DataFrame, roof: Roof | None, title: str):
    """The figure (matplotlib Figure) of `table`'s kernels under `roof` (may be None)."""
    pts = _points(table)
    fig, axes = new_figure(12.0, 6.5, right=3.6)
    ax = axes[0][0]
    ax.set_xscale("log")
    ax.set_yscale("log")
    x_span, y_span = _spans(pts, roof)
    lacking = _draw_ceilings(ax, roof, x_span)
    if len(pts):
        _draw_points(ax, pts)
    ax.set_xlim(*x_span)
    ax.set_ylim(*y_span)
    log_ticks(ax.xaxis)
    log_ticks(ax.yaxis, flops_label)
    for axis, span in ((ax.xaxis, x_span), (ax.yaxis, y_span)):
        if span[1] / span[0] > 1e4:  # wide: label the decades only
            axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("arithmetic intensity (FLOP/byte) at each memory level")
    ax.set_ylabel("achieved FLOP/s (kernel FLOPs / kernel time under ncu)")
    ax.grid(True, which="major", color="0.9", linewidth=0.6)
    ax.set_title(title, fontsize=10)
    if len(pts):
        _label(ax, pts)
    unmeasured = [
        lv
        for lv in LEVELS
        if not pts[f"intensity_{lv}_flops_per_byte"].map(is_finite_positive).any()
    ]
    _legend(ax, lacking, unmeasured)
    return fig


def hierarchical_png(table: pd.DataFrame, roof: Roof | None, title: str) -> bytes:
    """`draw_hierarchical` as PNG bytes."""
    return write_png(draw_hierarchical(table, roof, title))
