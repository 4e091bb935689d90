"""The roofline figures: one per environment and all environments on one (PNG, matplotlib's Agg
canvas). Styles and helpers come from analysis/plots.py, label placement from analysis/labels.py.
Over 400 lines because both figures share every drawing step here (roofs, points, labels, axes,
legend); the two builders at the end read best next to the steps they compose.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis import plots
from analysis.labels import ABOVE_RIGHT_END, POINT, POINT_FONT, RIDGE, SLOPE, Labels
from analysis.plots import (
    DTYPE_COLORS,
    LEVEL_STYLE,
    PRECISION_COLORS,
    SOURCE_MARKER,
    env_colors,
    env_title,
    flops_label,
    log_ticks,
    new_figure,
)
from analysis.roofline import LEVELS, Roof
from common.fmt import si

MAX_LABELS = 40  # point labels per roofline panel; beyond that the table carries them
LEGEND_IN = 3.4  # inches right of a roofline's axes for its legend


def source_kind(roof: Roof, key: str) -> str:
    """'measured' or 'vendor': where ceiling `key` ('flops:fp32', 'bytes:dram') of `roof` came from."""
    return "measured" if roof.sources.get(key, "").startswith("measured") else "vendor"


def source_style(roof: Roof, key: str) -> str:
    """The line style of one ceiling: solid when a peaks run measured it, dashed otherwise."""
    return "-" if source_kind(roof, key) == "measured" else "--"


def _who(tag: str, kind: str) -> str:
    """'measured', 'vendor', 'l4; vendor', 'vendor, not used': the source said once."""
    return kind if not tag else tag if kind in tag else f"{tag}; {kind}"


def _draw_roof(
    ax,
    roof: Roof,
    x_lo: float,
    x_hi: float,
    *,
    dtypes: set[str] | None,
    ridge_dtypes: set[str],
    color: str | None,
    tag: str,
    labels: Labels | None,
    ridge_lines: bool = True,
    gid: str = "",
    lw: float = 1.6,
    alpha: float = 0.85,
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
    top = max(peaks.values()) if peaks else None
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
            color=color or "black",
            ls=ls,
            lw=lw,
            alpha=alpha,
            gid=f"{gid}{key}",
        )
        if labels is not None:
            labels.place(
                f"{level.upper()} {si(bw, 'B/s')} ({_who(tag, source_kind(roof, key))})",
                (x_lo, bw * x_lo),
                SLOPE,
                color=color or "black",
            )
    bw = roof.bytes_per_s.get("dram")
    groups: dict[tuple[float, str], list[str]] = {}
    for dtype, peak in peaks.items():
        groups.setdefault((peak, source_kind(roof, f"flops:{dtype}")), []).append(dtype)
    for (peak, kind), dts in sorted(groups.items()):
        dts = sorted(dts, key=lambda d: list(DTYPE_COLORS).index(d) if d in DTYPE_COLORS else 99)
        name = "/".join(dts)
        c = color or DTYPE_COLORS.get(dts[0], "black")
        x_start = peak / bw if bw else x_lo
        ls = "-" if kind == "measured" else "--"
        ax.plot(
            [max(x_start, x_lo), x_hi],
            [peak, peak],
            color=c,
            ls=ls,
            lw=lw,
            alpha=alpha,
            gid=f"{gid}flops:{name}",
        )
        ridge = peak / bw if bw else math.nan
        show_ridge = bool(bw) and bool(set(dts) & ridge_dtypes) and x_lo < ridge < x_hi
        if labels is not None:
            text = f"{name} {si(peak, 'FLOP/s')}" + (
                f", ridge {ridge:.3g} FLOP/B" if show_ridge and not ridge_lines else ""
            )
            labels.place(
                f"{text} ({_who(tag, kind)})", (x_hi, peak), ABOVE_RIGHT_END, ha="right", color=c
            )
        if show_ridge and ridge_lines:
            ax.axvline(ridge, color=c, ls=":", lw=1.0, alpha=0.7, gid=f"{gid}ridge:{name}")
            if labels is not None:
                labels.place(
                    f"ridge {name}\n{ridge:.3g} FLOP/B", (ridge, peak), RIDGE, color=c, fontsize=7
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
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
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
    fig, axes = new_figure(10 + LEGEND_IN, 6.5, left=1.3, right=LEGEND_IN, top=0.75)
    ax = axes[0][0]
    pts = _plotted(points)
    measured, vendor = roofset.get("measured"), roofset.get("vendor")
    roof = roofset["roof"]  # join.roofs: measured ceilings, the vendor table filling the others
    roofs = [r for r in (roof, vendor) if r is not None]
    x_lo, x_hi = _x_range(pts, roofs)
    _axes_roofline(ax, x_lo, x_hi, pts, roofs)
    labels = Labels(ax)
    labels.block(pts["intensity_flops_per_byte"], pts["achieved_flops_per_s"])
    used = set(pts["ceiling_dtype"].dropna()) if "ceiling_dtype" in pts else set()
    if roof is not None:
        shown = used | {
            d for d in roof.flops_per_s if source_kind(roof, f"flops:{d}") == "measured"
        }
        if not shown & set(roof.flops_per_s):
            shown = set(roof.flops_per_s)
        _draw_roof(
            ax,
            roof,
            x_lo,
            x_hi,
            dtypes=shown,
            ridge_dtypes=used,
            color=None,
            tag="",
            labels=labels,
            gid="roof|",
        )
        if measured is not None and vendor is not None:  # the vendor values a measured one replaced
            replaced = Roof(vendor.device_name, sources=vendor.sources)
            replaced.flops_per_s = {
                d: v
                for d, v in vendor.flops_per_s.items()
                if d in shown and source_kind(roof, f"flops:{d}") == "measured"
            }
            if source_kind(roof, "bytes:dram") == "measured" and "dram" in vendor.bytes_per_s:
                replaced.bytes_per_s = {"dram": vendor.bytes_per_s["dram"]}
            if not replaced.is_empty():
                _draw_roof(
                    ax,
                    replaced,
                    x_lo,
                    x_hi,
                    dtypes=None,
                    ridge_dtypes=set(),
                    color=None,
                    tag="vendor, not used",
                    labels=labels,
                    gid="vendor|",
                    lw=1.0,
                    alpha=0.5,
                )
    _draw_points(ax, pts, [PRECISION_COLORS.get(p, "black") for p in pts["precision"]], levels=True)
    if any(
        c in pts and pts[c].gt(0).any()
        for c in ("intensity_l2_flops_per_byte", "intensity_l1_flops_per_byte")
    ):
        ax.set_xlabel(
            "arithmetic intensity (FLOP per DRAM byte; hollow squares/diamonds: per L2/L1 byte)"
        )
    n_lab = _label_points(labels, pts)
    extra = [
        Line2D([], [], ls="none", marker="o", color=c, label=p)
        for p, c in PRECISION_COLORS.items()
        if (pts["precision"] == p).any()
    ]
    _legend_roofline(ax, pts, extra, levels=True, roofs=roofs)
    title = f"Roofline: {env_title(env, device)}"
    if roof is None:
        title += f"\nno peaks for {device}: no ceilings drawn"
    if len(pts) > n_lab:
        title += (
            f"\n{n_lab} of {len(pts)} points labelled (the others overlap; all are in summary.csv)"
        )
    ax.set_title(title, fontsize=11)
    return fig, len(pts)


def roofline_env(
    points: pd.DataFrame, env: str, device: str, roofset: dict, path: Path
) -> tuple[Path, int]:
    fig, n = draw_roofline_env(points, env, device, roofset)
    return plots.save(fig, path), n


def draw_roofline_combined(points: pd.DataFrame, roofs: dict) -> tuple[Figure, int]:
    """All environments on one roofline (color = environment): each environment's roof (the one its
    efficiencies use) for the dtypes its points use, each ceiling solid or dashed by its own source,
    ridges named in the ceiling labels. Returns (figure, points drawn)."""
    fig, axes = new_figure(11 + LEGEND_IN, 7, left=1.3, right=LEGEND_IN, top=0.75)
    ax = axes[0][0]
    pts = _plotted(points)
    envs = sorted(roofs)
    colors = env_colors([f"{e} | {d}" for e, d in envs])
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
        _draw_roof(
            ax,
            only,
            x_lo,
            x_hi,
            dtypes=used,
            ridge_dtypes=used,
            color=colors[f"{env} | {dev}"],
            tag=env,
            labels=labels if len(envs) <= 6 else None,
            ridge_lines=False,
            gid=f"{env}|{dev}|",
        )
    _draw_points(
        ax,
        pts,
        [colors[f"{e} | {d}"] for e, d in zip(pts["env_label"], pts["device_name"])],
        levels=False,
    )
    n_lab = _label_points(labels, pts) if len(pts) <= 3 * MAX_LABELS else 0
    extra = [
        Line2D([], [], color=colors[f"{e} | {d}"], marker="o", label=env_title(e, d))
        for e, d in envs
    ]
    _legend_roofline(ax, pts, extra, levels=False)
    title = "Roofline: all environments"
    if len(pts) > n_lab:
        title += f"\n{n_lab} of {len(pts)} points labelled (per-environment figures and summary.csv name them)"
    ax.set_title(title, fontsize=11)
    return fig, len(pts)


def roofline_combined(points: pd.DataFrame, roofs: dict, path: Path) -> tuple[Path, int]:
    fig, n = draw_roofline_combined(points, roofs)
    return plots.save(fig, path), n
