"""One train run's own roofline: a small PNG on the run's page that answers "how close to the roof?"
without running the analysis (train/roofline_figure.py logs it as `roofline.png`).

The ceilings are the device's peaks runs on the same server chosen as analysis chooses them
(roofline/store.py, roofline/ceilings.py: each the highest of the most trusted runs), each ceiling
it lacks taken from the vendor table (roofline/vendor.py), as analysis does
(roofline/ceilings.py). A
train run has counted FLOPs but no measured DRAM bytes (those need an ncu profile): its point sits
at the byte model's *modeled* intensity (hollow triangle, as in the analysis figures), and the
achieved FLOP/s is also drawn as a horizontal line across the compute roofs, which holds whatever
the true intensity is. Both are labelled so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.fmt import pct, si
from common.plausible import roof_flag
from roofline.ceilings import measured_over_vendor, roof_from_vendor
from roofline.model import (
    PointEval,
    Roof,
    ceiling_dtype,
    evaluate_point,
    is_finite_positive,
    ridge_intensity,
)
from roofline.plot import source_style
from roofline.style import (
    DTYPE_COLORS,
    LEVEL_STYLE,
    SOURCE_MARKER,
    flops_label,
    log_ticks,
    write_png,
)


TAG_ROOF = "roofline_roof"
"""where the ceilings of a run's roofline.png came from, or why it has none"""
TAG_BOUND = "bound"
"""memory-bound | compute-bound at the run's modeled intensity (roofline.model.classify_bound)"""
METRIC_FRACTION = "fraction_of_roof"
"""achieved / attainable FLOP/s at the run's modeled intensity (roofline.model.fraction_of_roof)"""
NOTE_PREFIX = "Roofline: "
"""starts the line of a train run's description that gives its bound"""


@dataclass
class RunFigure:
    """What a train run gets from its roofline: the figure, tags, metrics, a description line."""

    png: bytes
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    line: str = ""


def run_figure(
    roof: Roof, precision: str, achieved_flops_per_s: float, intensity: float, title: str
) -> RunFigure:
    """The figure of a run and its record: tag `roofline_roof` (the ceilings' sources), tag `bound`
    and metric `fraction_of_roof` where known, and the description line, all from one PointEval
    (the train run at train time and analysis for runs made before their ceilings alike)."""
    ev = run_point(roof, precision, achieved_flops_per_s, intensity)
    tags = {TAG_ROOF: "; ".join(sorted(set(roof.sources.values())))}
    if ev.bound:
        tags[TAG_BOUND] = ev.bound
    values = {METRIC_FRACTION: ev.fraction_of_roof} if math.isfinite(ev.fraction_of_roof) else {}
    image = png(roof, precision, achieved_flops_per_s, intensity, title)
    flag = roof_flag(ev.fraction_of_roof)
    line = f"{NOTE_PREFIX}{verdict(ev)}; see roofline.png." + (f" Check: {flag}." if flag else "")
    return RunFigure(image, tags, values, line)


def with_line(note: str, line: str) -> str:
    """`note` with its 'Roofline: ' line replaced by `line`, or `line` put second (after the
    summary line) when it has none."""
    lines = (note or "").splitlines()
    at = next((i for i, x in enumerate(lines) if x.startswith(NOTE_PREFIX)), None)
    if at is None:
        return "\n".join([*lines[:1], line, *lines[1:]])
    return "\n".join([*lines[:at], line, *lines[at + 1 :]])


def run_roof(device_name: str, measured: Roof | None, vendor_entry) -> Roof | None:
    """The ceilings for a run on `device_name`: the measured ones (roofline/store.py measured_roof)
    where there are, else the vendor entry's; None when neither knows the device."""
    return measured_over_vendor(measured, roof_from_vendor(vendor_entry, device_name))


def draw(roof: Roof, precision: str, achieved_flops_per_s: float, intensity: float, title: str):
    """The figure (a matplotlib Figure on the Agg canvas): the compute roof of the run's ceiling
    dtype and fp32, the bandwidth slopes, the run's point at its modeled intensity and its achieved
    FLOP/s as a line."""
    from matplotlib.figure import Figure

    dtype = ceiling_dtype(precision, set(roof.flops_per_s))
    dtypes = [d for d in dict.fromkeys([dtype, "fp32"]) if is_finite_positive(roof.peak(d))]
    fig = Figure(figsize=(6.4, 4.2), dpi=100)
    fig.subplots_adjust(left=0.14, right=0.97, top=0.84, bottom=0.13)
    ax = fig.add_subplot()
    x_lo, x_hi = _x_span(roof, dtypes, intensity)
    _draw_ceilings(ax, roof, dtypes, roof.peak(dtype), x_lo, x_hi)
    _draw_run(ax, achieved_flops_per_s, intensity)
    top = max([roof.peak(d) for d in dtypes] + [achieved_flops_per_s])
    _axes(ax, (x_lo, x_hi), (min(achieved_flops_per_s, top) / 30, top * 3))
    fig.suptitle(title, fontsize=10)
    ax.set_title(verdict(run_point(roof, precision, achieved_flops_per_s, intensity)), fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def _x_span(roof: Roof, dtypes: list[str], intensity: float) -> tuple[float, float]:
    """A decade either side of the run's intensity and every ridge."""
    ridges = [
        ridge_intensity(roof.peak(d), bw)
        for d in dtypes
        for bw in roof.bytes_per_s.values()
        if is_finite_positive(bw)
    ]
    xs = [v for v in [intensity, *ridges] if is_finite_positive(v)] or [1.0]
    return min(xs) / 10, max(xs) * 10


def _draw_ceilings(ax, roof: Roof, dtypes: list[str], peak: float, x_lo: float, x_hi: float):
    """The compute roofs of `dtypes` and each bandwidth slope up to `peak` (the run's dtype's),
    each labelled with its value and source."""
    for d in dtypes:
        ax.hlines(
            roof.peak(d),
            x_lo,
            x_hi,
            color=DTYPE_COLORS.get(d, "k"),
            linestyles=source_style(roof, f"flops:{d}"),
            label=f"{d} peak {flops_label(roof.peak(d))} ({roof.source_kind(f'flops:{d}')})",
        )
    for level, bw in roof.bytes_per_s.items():
        if not (is_finite_positive(bw) and is_finite_positive(peak)):
            continue
        ridge = ridge_intensity(peak, bw)
        ax.plot(
            [x_lo, ridge],
            [x_lo * bw, peak],
            color="0.35",
            linestyle=LEVEL_STYLE.get(level, "-"),
            label=f"{level.upper()} {si(bw, 'B/s')} ({roof.source_kind(f'bytes:{level}')})",
        )


def _draw_run(ax, achieved_flops_per_s: float, intensity: float) -> None:
    """The run's achieved FLOP/s as a line, and its point at the modeled intensity."""
    ax.axhline(
        achieved_flops_per_s,
        color="tab:red",
        linestyle=":",
        label=f"achieved {flops_label(achieved_flops_per_s)}",
    )
    if is_finite_positive(intensity):
        ax.plot(
            [intensity],
            [achieved_flops_per_s],
            color="tab:red",
            markersize=9,
            linestyle="none",
            label=f"this run at modeled intensity {intensity:.3g} FLOP/B",
            **SOURCE_MARKER["modeled"],
        )


def _axes(ax, x_lim: tuple[float, float], y_lim: tuple[float, float]) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*x_lim)
    ax.set_ylim(*y_lim)
    log_ticks(ax.xaxis)
    ax.set_xlabel(
        "arithmetic intensity (FLOP/byte; run's point: modeled, not measured)", fontsize=8
    )
    ax.set_ylabel("FLOP/s", fontsize=9)
    ax.tick_params(labelsize=8)


def run_point(
    roof: Roof, precision: str, achieved_flops_per_s: float, intensity: float
) -> PointEval:
    """The run evaluated as analysis evaluates a point of modeled intensity (roofline.model
    .evaluate_point): bound, fraction of roof at its intensity, and which ceilings."""
    return evaluate_point(precision, achieved_flops_per_s, {"dram": intensity}, roof)


def verdict(ev: PointEval) -> str:
    """The bound and the project's one efficiency, worded the same on the figure and in the run's
    description: 'memory-bound, 4.1% of roof at its modeled intensity (measured ceilings)'; what
    is missing when there is no bound."""
    where = f"{ev.roof_source} ceilings" if ev.roof_source else "no ceilings"
    if not math.isfinite(ev.fraction_of_roof):
        if not math.isfinite(ev.peak_flops_per_s):
            return f"no bound: no {ev.ceiling_dtype} compute peak known ({where})"
        if not math.isfinite(ev.dram_bytes_per_s):
            return f"no bound: no DRAM bandwidth known ({where})"
        return f"no bound: no usable intensity or achieved FLOP/s ({where})"
    return f"{ev.bound}, {pct(ev.fraction_of_roof)} of roof at its modeled intensity ({where})"


def png(
    roof: Roof, precision: str, achieved_flops_per_s: float, intensity: float, title: str
) -> bytes:
    """`draw` as PNG bytes."""
    return write_png(draw(roof, precision, achieved_flops_per_s, intensity, title))
