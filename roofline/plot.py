"""The rooflines of an analysis: one per environment and all environments on one (matplotlib
Figures on the Agg canvas; analysis/plots.py saves them as PNG). Canvas and encodings come from
roofline/style.py, label placement from roofline/labels.py. The points are analysis's rows
(`intensity_flops_per_byte`, `achieved_flops_per_s`, `intensity_source`, `ceiling_dtype`, ...:
analysis/join.py and analysis/roofs.py), the roofs `Roof`s (roofline/ceilings.py). Both figures
share every drawing step here (roofs, points, labels, axes, legend); the two builders are at the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from roofline.labels import ABOVE_RIGHT_END, CEILING_FONT, POINT, POINT_FONT, RIDGE, SLOPE, Labels
from roofline.model import LEVELS, Roof
from roofline.style import (
    DTYPE_COLORS,
    LEVEL_STYLE,
    PRECISION_COLORS,
    SOURCE_MARKER,
    distinct_colors,
    env_title,
    FIGURE_WIDTH_IN,
    flops_label,
    log_ticks,
    new_figure,
)
from common.fmt import si

LEGEND_FONT = 8.2  # legible at the viewer's width (roofline.style.min_font_pt of these figures)

MAX_LABELS = 40  # point labels per roofline panel; beyond that the table carries them
LEGEND_IN = 2.3  # inches below a roofline's axes for its axis label and legend (two columns)


def source_style(roof: Roof, key: str) -> str:
    """The line style of one ceiling: solid when a peaks run measured it, dashed otherwise."""
    return "-" if roof.source_kind(key) == "measured" else "--"


def _who(tag: str, kind: str) -> str:
    """'measured', 'vendor', 'l4; vendor', 'vendor, not used': the source said once."""
    return kind if not tag else tag if kind in tag else f"{tag}; {kind}"


@dataclass(frozen=True)
class _Pen:
    """How one roof is drawn: its colour (None: each ceiling in its dtype's), the tag its labels
    carry, where labels go (None: no labels), the gid prefix, line width and opacity."""

    color: str | None
    tag: str
    labels: Labels | None
    gid: str = ""
    lw: float = 1.6
    alpha: float = 0.85


def _draw_roof(
    ax,
    roof: Roof,
    x_span: tuple[float, float],
    dtypes: set[str] | None,
    ridge_dtypes: set[str],
    pen: _Pen,
    ridge_lines: bool = True,
) -> None:
    """Bandwidth slopes (one per memory level), compute ceilings of `dtypes` (all when None; equal
    ones with the same source merged: vendor fp16 = bf16) and, for `ridge_dtypes`, the ridge point.

    Each ceiling's line style comes from its own source in `roof.sources` (solid measured, dashed
    vendor); L2/L1 slopes have their own pattern. Lines carry a gid '<gid>flops:<dtypes>' (dtypes
    joined by '/' where merged), '<gid>bytes:<level>', '<gid>ridge:<dtype>' so tests can find them.
    """
    peaks = {
        d: v for d, v in roof.flops_per_s.items() if v and v > 0 and (dtypes is None or d in dtypes)
    }
    _draw_slopes(ax, roof, x_span, max(peaks.values()) if peaks else None, pen)
    groups: dict[tuple[float, str], list[str]] = {}
    for dtype, peak in peaks.items():
        groups.setdefault((peak, roof.source_kind(f"flops:{dtype}")), []).append(dtype)
    for (peak, kind), dts in sorted(groups.items()):
        dts = sorted(dts, key=lambda d: list(DTYPE_COLORS).index(d) if d in DTYPE_COLORS else 99)
        ridge_here = bool(set(dts) & ridge_dtypes)
        _draw_ceiling(ax, roof, peak, kind, dts, x_span, ridge_here, ridge_lines, pen)


def draw_ceilings(
    ax, roof: Roof, x_span: tuple[float, float], dtypes: set[str], ridge_dtype: str
) -> None:
    """The ceilings of `roof` for `dtypes` and its DRAM slope (and the others' it has), unlabelled,
    each styled by its source, the ridge of `ridge_dtype` dotted: the drawer the analysis's
    rooflines use, for a figure that labels its lines in its own legend (the breakdown's)."""
    _draw_roof(ax, roof, x_span, dtypes, {ridge_dtype}, _Pen(color=None, tag="", labels=None))


def _draw_slopes(ax, roof: Roof, x_span: tuple[float, float], top: float | None, pen: _Pen):
    """One bandwidth slope per memory level, from the left edge up to the highest ceiling drawn."""
    x_lo, x_hi = x_span
    for level in LEVELS:
        bw = roof.bytes_per_s.get(level)
        if not bw:
            continue
        y_hi = top if top else bw * x_hi
        x_end = min(x_hi, y_hi / bw)
        key = f"bytes:{level}"
        ls = source_style(roof, key) if level == "dram" else LEVEL_STYLE[level]
        ax.plot(
            [x_lo, x_end],
            [bw * x_lo, bw * x_end],
            color=pen.color or "black",
            ls=ls,
            lw=pen.lw,
            alpha=pen.alpha,
            gid=f"{pen.gid}{key}",
        )
        if pen.labels is not None:
            pen.labels.place(
                f"{level.upper()} {si(bw, 'B/s')} ({_who(pen.tag, roof.source_kind(key))})",
                (x_lo, bw * x_lo),
                SLOPE,
                color=pen.color or "black",
            )


def _draw_ceiling(ax, roof, peak, kind, dts, x_span, ridge_here: bool, ridge_lines: bool, pen):
    """One compute ceiling (the dtypes `dts` share it) from the DRAM ridge rightwards, labelled,
    and its ridge: a dotted line, or with `ridge_lines` off a figure in the ceiling's label."""
    x_lo, x_hi = x_span
    bw = roof.bytes_per_s.get("dram")
    name = "/".join(dts)
    c = pen.color or DTYPE_COLORS.get(dts[0], "black")
    x_start = peak / bw if bw else x_lo
    ax.plot(
        [max(x_start, x_lo), x_hi],
        [peak, peak],
        color=c,
        ls="-" if kind == "measured" else "--",
        lw=pen.lw,
        alpha=pen.alpha,
        gid=f"{pen.gid}flops:{name}",
    )
    ridge = peak / bw if bw else math.nan
    show_ridge = bool(bw) and ridge_here and x_lo < ridge < x_hi
    if pen.labels is not None:
        text = f"{name} {si(peak, 'FLOP/s')}" + (
            f", ridge {ridge:.3g} FLOP/B" if show_ridge and not ridge_lines else ""
        )
        pen.labels.place(
            f"{text} ({_who(pen.tag, kind)})", (x_hi, peak), ABOVE_RIGHT_END, ha="right", color=c
        )
    if show_ridge and ridge_lines:
        ax.axvline(ridge, color=c, ls=":", lw=1.0, alpha=0.7, gid=f"{pen.gid}ridge:{name}")
        if pen.labels is not None:
            pen.labels.place(
                f"ridge {name}\n{ridge:.3g} FLOP/B",
                (ridge, peak),
                RIDGE,
                color=c,
                fontsize=CEILING_FONT,
            )


def _x_range(points: pd.DataFrame, roofs: list[Roof], levels: bool = True) -> tuple[float, float]:
    cols = ["intensity_flops_per_byte"] + (
        ["intensity_l2_flops_per_byte", "intensity_l1_flops_per_byte"] if levels else []
    )
    xs = [v for c in cols if c in points for v in points[c].dropna() if v > 0]
    for roof in roofs:
        bw = roof.bytes_per_s.get("dram")
        xs += [p / bw for p in roof.flops_per_s.values() if bw and p]
    if not xs:
        return 0.1, 1000.0
    return 10 ** math.floor(math.log10(min(xs) / 2)), 10 ** math.ceil(math.log10(max(xs) * 2))


def _draw_points(ax, pts: pd.DataFrame, colors: list[str], levels: bool) -> None:
    """Points, one artist per (color, marker) with gid 'points:<source>'; with `levels`, the same
    points at their L2/L1 intensities (hierarchical roofline, gid 'points:l2'/'points:l1') joined
    by a thin line."""
    pts = pts.assign(_color=list(colors))
    for level, marker in (("l2", "s"), ("l1", "D")) if levels else ():
        col = f"intensity_{level}_flops_per_byte"
        if col not in pts:
            continue
        for color, g in pts[pts[col].gt(0)].groupby("_color", sort=False):
            gap = np.full(len(g), np.nan)
            xs = np.column_stack([g["intensity_flops_per_byte"], g[col], gap]).ravel()
            ys = np.column_stack(
                [g["achieved_flops_per_s"], g["achieved_flops_per_s"], gap]
            ).ravel()
            ax.plot(xs, ys, color=color, lw=0.6, alpha=0.5)
            ax.plot(
                g[col],
                g["achieved_flops_per_s"],
                marker=marker,
                ms=5,
                color=color,
                fillstyle="none",
                ls="none",
                gid=f"points:{level}",
            )
    for (color, source), g in pts.groupby(["_color", "intensity_source"], sort=False):
        style = SOURCE_MARKER.get(source, SOURCE_MARKER["modeled"])
        ax.plot(
            g["intensity_flops_per_byte"],
            g["achieved_flops_per_s"],
            ls="none",
            ms=7,
            color=color,
            markeredgewidth=1.4,
            gid=f"points:{source}",
            **style,
        )


def _label_points(labels: Labels, pts: pd.DataFrame) -> int:
    """Label points whose label would not overlap a label placed before (ceilings first). Returns
    the number labelled."""
    n = 0
    for xi, yi, text in zip(
        pts["intensity_flops_per_byte"], pts["achieved_flops_per_s"], pts["label"]
    ):
        if labels.place(text, (xi, yi), POINT, color="#333333", fontsize=POINT_FONT, always=False):
            n += 1
            if n >= MAX_LABELS:
                break
    return n


def _axes_roofline(ax, x_lo, x_hi, pts, roofs: list[Roof]) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ys = list(pts["achieved_flops_per_s"].dropna())
    for r in roofs:
        ys += [v for v in r.flops_per_s.values() if v]
        ys += [bw * x_lo for bw in r.bytes_per_s.values() if bw]
    ys = [y for y in ys if y > 0]
    if ys:
        ax.set_ylim(
            10 ** math.floor(math.log10(min(ys) / 1.5)), 10 ** math.ceil(math.log10(max(ys) * 1.5))
        )
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("achieved FLOP/s (training FLOPs / mean step time)")
    log_ticks(ax.yaxis, flops_label)
    log_ticks(ax.xaxis)
    ax.grid(True, which="major", alpha=0.3)


def _legend_roofline(ax, pts, extra_handles, levels: bool, roofs: list[Roof] = ()) -> None:
    handles = [
        Line2D(
            [],
            [],
            ls="none",
            color="black",
            ms=7,
            label="intensity measured\n(Nsight Compute counters)",
            **SOURCE_MARKER["measured"],
        ),
        Line2D(
            [],
            [],
            ls="none",
            color="black",
            ms=7,
            label="intensity modeled\n(byte model, no counters)",
            **SOURCE_MARKER["modeled"],
        ),
        Line2D([], [], color="black", ls="-", label="ceiling: measured (peaks run)"),
        Line2D([], [], color="black", ls="--", label="ceiling: vendor / peaks file"),
    ]
    for level in ("l2", "l1"):
        if any(r.bytes_per_s.get(level) for r in roofs):
            handles.append(
                Line2D(
                    [],
                    [],
                    color="black",
                    ls=LEVEL_STYLE[level],
                    label=f"{level.upper()} bandwidth ceiling\n(source in its label)",
                )
            )
    for level, marker in (("l2", "s"), ("l1", "D")) if levels else ():
        c = f"intensity_{level}_flops_per_byte"
        if c in pts and pts[c].notna().any():
            handles.append(
                Line2D(
                    [],
                    [],
                    marker=marker,
                    ls="none",
                    color="black",
                    fillstyle="none",
                    label=f"same point at its {level.upper()}\nintensity (hierarchical)",
                )
            )
    ax.legend(
        handles=handles + extra_handles,
        fontsize=LEGEND_FONT,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.11),
        ncol=2,
        borderaxespad=0,
        framealpha=0.9,
    )


def _plotted(points: pd.DataFrame) -> pd.DataFrame:
    return points[points["intensity_flops_per_byte"].gt(0) & points["achieved_flops_per_s"].gt(0)]


def draw_roofline_env(
    points: pd.DataFrame, env: str, device: str, roofset: dict
) -> tuple[Figure, int]:
    """The roofline of one environment (color = precision): the roof its efficiencies are computed
    against (`roofset['roof']`: measured ceilings, the vendor table filling the others) for the
    ceiling dtypes its points use plus every measured one, with the ridges of the dtypes in use; and,
    thinner, the vendor values a measured ceiling replaced. Returns (figure, points drawn)."""
    fig, axes = new_figure(
        FIGURE_WIDTH_IN, 5.6 + LEGEND_IN, left=1.25, right=0.3, bottom=LEGEND_IN, top=0.85
    )
    ax = axes[0][0]
    pts = _plotted(points)
    roof = roofset["roof"]  # measured ceilings, the vendor table filling the others
    roofs = [r for r in (roof, roofset.get("vendor")) if r is not None]
    x_lo, x_hi = _x_range(pts, roofs)
    _axes_roofline(ax, x_lo, x_hi, pts, roofs)
    labels = Labels(ax)
    labels.block(pts["intensity_flops_per_byte"], pts["achieved_flops_per_s"])
    used = set(pts["ceiling_dtype"].dropna()) if "ceiling_dtype" in pts else set()
    if roof is not None:
        _draw_env_roof(ax, roofset, used, (x_lo, x_hi), labels)
    _draw_points(ax, pts, [PRECISION_COLORS.get(p, "black") for p in pts["precision"]], levels=True)
    if any(
        c in pts and pts[c].gt(0).any()
        for c in ("intensity_l2_flops_per_byte", "intensity_l1_flops_per_byte")
    ):
        ax.set_xlabel(
            "arithmetic intensity (FLOP per DRAM byte; hollow squares/diamonds: per L2/L1 byte)"
        )
    n_lab = _label_points(labels, pts)
    _legend_roofline(ax, pts, _precision_handles(pts), levels=True, roofs=roofs)
    title = f"Roofline: {env_title(env, device)}"
    if roof is None:
        title += f"\nno peaks for {device}: no ceilings drawn"
    if len(pts) > n_lab:
        title += (
            f"\n{n_lab} of {len(pts)} points labelled (the others overlap; all are in summary.csv)"
        )
    ax.set_title(title, fontsize=10.5)
    return fig, len(pts)


def _draw_env_roof(ax, roofset: dict, used: set[str], x_span, labels: Labels) -> None:
    """An environment's roof for the dtypes its points use plus every measured one (all when none
    of those has a ceiling), ridges of the dtypes in use; and, thinner, the vendor values a
    measured ceiling replaced."""
    roof, measured, vendor = roofset["roof"], roofset.get("measured"), roofset.get("vendor")
    shown = used | {d for d in roof.flops_per_s if roof.source_kind(f"flops:{d}") == "measured"}
    if not shown & set(roof.flops_per_s):
        shown = set(roof.flops_per_s)
    _draw_roof(ax, roof, x_span, shown, used, _Pen(None, "", labels, "roof|"))
    if measured is None or vendor is None:
        return
    replaced = Roof(vendor.device_name, sources=vendor.sources)  # the vendor values not used
    replaced.flops_per_s = {
        d: v
        for d, v in vendor.flops_per_s.items()
        if d in shown and roof.source_kind(f"flops:{d}") == "measured"
    }
    if roof.source_kind("bytes:dram") == "measured" and "dram" in vendor.bytes_per_s:
        replaced.bytes_per_s = {"dram": vendor.bytes_per_s["dram"]}
    if not replaced.is_empty():
        pen = _Pen(None, "vendor, not used", labels, "vendor|", lw=1.0, alpha=0.5)
        _draw_roof(ax, replaced, x_span, None, set(), pen)


def draw_roofline_combined(points: pd.DataFrame, roofs: dict) -> tuple[Figure, int]:
    """All environments on one roofline (color = environment): each environment's roof (the one its
    efficiencies use) for the dtypes its points use, each ceiling solid or dashed by its own source,
    ridges named in the ceiling labels. Returns (figure, points drawn)."""
    fig, axes = new_figure(
        FIGURE_WIDTH_IN, 5.8 + LEGEND_IN, left=1.25, right=0.3, bottom=LEGEND_IN, top=0.85
    )
    ax = axes[0][0]
    pts = _plotted(points)
    envs = sorted(roofs)
    colors = distinct_colors([f"{e} | {d}" for e, d in envs])
    all_roofs = [r["roof"] for r in roofs.values() if r.get("roof") is not None]
    x_lo, x_hi = _x_range(pts, all_roofs, levels=False)
    _axes_roofline(ax, x_lo, x_hi, pts, all_roofs)
    labels = Labels(ax)
    labels.block(pts["intensity_flops_per_byte"], pts["achieved_flops_per_s"])
    for env, dev in envs:
        roof = roofs[(env, dev)].get("roof")
        if roof is None:
            continue
        sub = pts[(pts["env_label"] == env) & (pts["device_name"] == dev)]
        used = set(sub["ceiling_dtype"].dropna()) or {"fp32"}
        dram = {"dram": roof.dram_bytes_per_s} if math.isfinite(roof.dram_bytes_per_s) else {}
        only = Roof(roof.device_name, dict(roof.flops_per_s), dram, roof.sources)
        pen = _Pen(
            colors[f"{env} | {dev}"], env, labels if len(envs) <= 6 else None, f"{env}|{dev}|"
        )
        _draw_roof(ax, only, (x_lo, x_hi), used, used, pen, ridge_lines=False)
    by_precision = len(envs) == 1  # one environment: colour = precision, as its own figure
    _draw_points(
        ax,
        pts,
        [PRECISION_COLORS.get(p, "black") for p in pts["precision"]]
        if by_precision
        else [colors[f"{e} | {d}"] for e, d in zip(pts["env_label"], pts["device_name"])],
        levels=False,
    )
    n_lab = _label_points(labels, pts) if len(pts) <= 3 * MAX_LABELS else 0
    extra = [
        Line2D([], [], color=colors[f"{e} | {d}"], marker="o", label=env_title(e, d))
        for e, d in envs
    ]
    if by_precision:
        extra = [
            Line2D([], [], color=colors[f"{e} | {d}"], label=f"ceilings: {env_title(e, d)}")
            for e, d in envs
        ] + _precision_handles(pts)
    _legend_roofline(ax, pts, extra, levels=False)
    title = "Roofline: all environments" + (
        "" if by_precision else " (colour: environment; each label names its precision)"
    )
    if len(pts) > n_lab:
        title += f"\n{n_lab} of {len(pts)} points labelled (per-environment figures and summary.csv name them)"
    ax.set_title(title, fontsize=10.5)
    return fig, len(pts)


def _precision_handles(pts: pd.DataFrame) -> list:
    """One legend entry per precision the points use, in its colour."""
    return [
        Line2D([], [], ls="none", marker="o", color=c, label=p)
        for p, c in PRECISION_COLORS.items()
        if (pts["precision"] == p).any()
    ]
