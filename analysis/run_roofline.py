"""One train run's own roofline: a small PNG on the run's page that answers "how close to the roof?"
without running the analysis (train/roofline_figure.py logs it as `roofline.png`).

The ceilings are the latest peaks run of the device on the same server (analysis/fetch/peaks.py),
each ceiling it lacks taken from the vendor table (profiling/peak_table.py), as analysis does. A
train run has counted FLOPs but no measured DRAM bytes (those need an ncu profile): its point sits
at the byte model's *modeled* intensity (hollow triangle, as in the analysis figures), and the
achieved FLOP/s is also drawn as a horizontal line across the compute roofs, which holds whatever
the true intensity is. Both are labelled so.
"""

from __future__ import annotations

import io
import math

from analysis import join, roofline
from analysis.plots import DTYPE_COLORS, LEVEL_STYLE, SOURCE_MARKER, flops_label, log_ticks
from analysis.roofline import Roof
from analysis.roofline_plot import source_kind, source_style
from common.fmt import pct, si


def run_roof(device_name: str, peaks_row: dict | None, vendor_entry) -> Roof | None:
    """The ceilings for a run on `device_name`: the peaks run's where it measured them, else the
    vendor entry's; None when neither knows the device."""
    vendor = join.roof_from_vendor(vendor_entry, device_name)
    measured = join.roof_from_peaks_row(peaks_row, device_name) if peaks_row else None
    if measured is None or measured.is_empty():
        return vendor
    return measured.merged_over(vendor)


def draw(roof: Roof, precision: str, achieved_flops_per_s: float, intensity: float, title: str):
    """The figure (a matplotlib Figure on the Agg canvas): the compute roof of the run's ceiling
    dtype and fp32, the bandwidth slopes, the run's point at its modeled intensity and its achieved
    FLOP/s as a line."""
    from matplotlib.figure import Figure

    dtype = roofline.ceiling_dtype(precision, set(roof.flops_per_s))
    peak = roof.peak(dtype)
    dtypes = [d for d in dict.fromkeys([dtype, "fp32"]) if roofline._ok(roof.peak(d))]
    fig = Figure(figsize=(6.4, 4.2), dpi=100)
    fig.subplots_adjust(left=0.14, right=0.97, top=0.84, bottom=0.13)
    ax = fig.add_subplot()
    ridges = [
        roofline.ridge_intensity(roof.peak(d), bw)
        for d in dtypes
        for bw in roof.bytes_per_s.values()
        if roofline._ok(bw)
    ]
    xs = [v for v in [intensity, *ridges] if roofline._ok(v)] or [1.0]
    x_lo, x_hi = min(xs) / 10, max(xs) * 10
    top = max([roof.peak(d) for d in dtypes] + [achieved_flops_per_s])
    for d in dtypes:
        ax.hlines(
            roof.peak(d),
            x_lo,
            x_hi,
            color=DTYPE_COLORS.get(d, "k"),
            linestyles=source_style(roof, f"flops:{d}"),
            label=f"{d} peak {flops_label(roof.peak(d))} ({source_kind(roof, f'flops:{d}')})",
        )
    for level, bw in roof.bytes_per_s.items():
        if not (roofline._ok(bw) and roofline._ok(peak)):
            continue
        ridge = roofline.ridge_intensity(peak, bw)
        ax.plot(
            [x_lo, ridge],
            [x_lo * bw, peak],
            color="0.35",
            linestyle=LEVEL_STYLE.get(level, "-"),
            label=f"{level.upper()} {si(bw, 'B/s')} ({source_kind(roof, f'bytes:{level}')})",
        )
    ax.axhline(
        achieved_flops_per_s,
        color="tab:red",
        linestyle=":",
        label=f"achieved {flops_label(achieved_flops_per_s)}",
    )
    if roofline._ok(intensity):
        ax.plot(
            [intensity],
            [achieved_flops_per_s],
            color="tab:red",
            markersize=9,
            linestyle="none",
            label=f"this run at modeled intensity {intensity:.3g} FLOP/B",
            **SOURCE_MARKER["modeled"],
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(min(achieved_flops_per_s, top) / 30, top * 3)
    log_ticks(ax.xaxis)
    ax.set_xlabel(
        "arithmetic intensity (FLOP/byte; run's point: modeled, not measured)", fontsize=8
    )
    ax.set_ylabel("FLOP/s", fontsize=9)
    ax.tick_params(labelsize=8)
    share = achieved_flops_per_s / peak if roofline._ok(peak) else math.nan
    fig.suptitle(title, fontsize=10)
    ax.set_title(
        f"{pct(share)} of the {dtype} peak" if math.isfinite(share) else "no compute peak known",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="lower right")
    return fig


def png(
    roof: Roof, precision: str, achieved_flops_per_s: float, intensity: float, title: str
) -> bytes:
    """`draw` as PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = draw(roof, precision, achieved_flops_per_s, intensity, title)
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    return buf.getvalue()
