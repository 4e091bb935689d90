"""Figures as PNG files (matplotlib's Agg canvas; no pyplot, no global state).

Every function takes the DataFrames built by analysis/core.py and a path, draws one figure and
returns the path. Encodings used throughout:
  marker shape  = where the intensity came from: filled circle = measured (ncu counters),
                  hollow triangle = modeled (byte model);
  line style    = where each ceiling came from (Roof.sources): solid = measured peaks run,
                  dashed = vendor / peaks file; L2 and L1 slopes have their own dash pattern.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import EngFormatter, FuncFormatter, NullFormatter  # noqa: E402

from common.fmt import si  # noqa: E402
from analysis.roofline import LEVELS, Roof  # noqa: E402

MAX_LABELS = 40  # point labels per roofline panel; beyond that the table carries them
DPI = 110
PRECISION_COLORS = {"fp32": "#1f77b4", "fp16": "#ff7f0e", "bf16": "#2ca02c"}
DTYPE_COLORS = {
    "fp64": "#7f7f7f",
    "fp32": "#1f77b4",
    "tf32": "#9467bd",
    "fp16": "#ff7f0e",
    "bf16": "#2ca02c",
}
LEVEL_STYLE = {"dram": "-", "l2": (0, (4, 1, 1, 1)), "l1": (0, (1, 1))}
SOURCE_MARKER = {
    "measured": dict(marker="o", fillstyle="full"),
    "modeled": dict(marker="^", fillstyle="none"),
}


def _new(
    width: float = 9.0,
    height: float = 6.0,
    nrows: int = 1,
    ncols: int = 1,
    *,
    left: float = 1.0,
    right: float = 0.25,
    bottom: float = 0.7,
    top: float = 0.6,
    wspace: float = 0.25,
    hspace: float = 0.45,
):
    """A figure with fixed margins in inches (a layout engine costs more than all the drawing)."""
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        bottom=bottom / height,
        top=1 - top / height,
        wspace=wspace,
        hspace=hspace,
    )
    return fig, axes


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path


def _env_colors(envs: list[str]) -> dict[str, str]:
    cmap = matplotlib.colormaps["tab10" if len(envs) <= 10 else "tab20"]
    return {e: matplotlib.colors.to_hex(cmap(i % cmap.N)) for i, e in enumerate(envs)}


def _series_label(row: pd.Series) -> str:
    """A point label without the batch size: model/precision (+ options)."""
    parts = str(row["label"]).split("/")
    return "/".join(p for p in parts if not (p.startswith("b") and p[1:].isdigit()))


def _panels(n: int, width_each: float = 5.5, height_each: float = 4.0, right: float = 0.25):
    ncols = 1 if n == 1 else 2 if n <= 4 else 3
    nrows = math.ceil(n / ncols)
    fig, axes = _new(
        width_each * ncols + right,
        height_each * nrows,
        nrows,
        ncols,
        left=0.9,
        right=right,
        top=0.75,
        bottom=0.65,
    )
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _log_ticks(axis, fmt=lambda v: f"{v:g}") -> None:
    """Log axis ticks as `fmt(v)` (plain 200, not 2 x 10^2); minor ticks at 2 and 5 labelled too."""
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))

    def minor(v, _):
        mantissa = round(v / 10 ** math.floor(math.log10(v)), 6) if v > 0 else 0
        return fmt(v) if mantissa in (2, 5) else ""

    axis.set_minor_formatter(FuncFormatter(minor))


def _flops_label(v: float) -> str:
    return si(v, "FLOP/s", 3)


def _env_title(env: str, device: str) -> str:
    return f"{env} ({device})" if device and device not in env else env


# ------------------------------------------------------------------------------- roofline
LEGEND_IN = 3.4  # inches right of a roofline's axes for its legend
CEILING_FONT = 8.0
POINT_FONT = 7.0


def source_kind(roof: Roof, key: str) -> str:
    """'measured' or 'vendor': where ceiling `key` ('flops:fp32', 'bytes:dram') of `roof` came from."""
    return "measured" if roof.sources.get(key, "").startswith("measured") else "vendor"


def source_style(roof: Roof, key: str) -> str:
    """The line style of one ceiling: solid when a peaks run measured it, dashed otherwise."""
    return "-" if source_kind(roof, key) == "measured" else "--"


class _Labels:
    """Text placed in display space so that labels do not overlap each other or the points.

    Boxes are estimated from the font size (0.6 em per character), which is cheap and close enough
    for the short labels used here. Axis limits must be final before anything is placed.
    """

    def __init__(self, ax):
        self.ax = ax
        self.boxes: list[tuple[float, float, float, float]] = []
        self.px = ax.figure.dpi / 72  # display pixels per point

    def _box(self, x, y, dx, dy, text, ha, fontsize):
        lines = str(text).split("\n")
        w = 0.6 * fontsize * self.px * max(len(s) for s in lines)
        h = 1.25 * fontsize * self.px * len(lines)
        x0 = x + dx * self.px - (w if ha == "right" else 0)
        y0 = y + dy * self.px  # offsets are to the text's bottom (va="bottom")
        return (x0, y0, x0 + w, y0 + h)

    def _free(self, box) -> bool:
        return not any(
            box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in self.boxes
        )

    def block(self, xs, ys, half_px: float = 4.0) -> None:
        """Mark the markers at data (xs, ys) as taken."""
        for px, py in self.ax.transData.transform(np.column_stack([xs, ys])):
            self.boxes.append((px - half_px, py - half_px, px + half_px, py + half_px))

    def place(
        self,
        text: str,
        xy: tuple[float, float],
        offsets: list[tuple],
        *,
        ha: str = "left",
        color: str = "black",
        fontsize: float = CEILING_FONT,
        always: bool = True,
    ) -> bool:
        """Put `text` at the first offset (dx, dy[, ha]) in points from `xy` that overlaps nothing
        placed yet; with `always`, at the first offset when none is free. Returns whether it was placed."""
        x, y = self.ax.transData.transform([xy])[0]
        cands = [(o[0], o[1], o[2] if len(o) > 2 else ha) for o in offsets]
        boxes = [self._box(x, y, dx, dy, text, h, fontsize) for dx, dy, h in cands]
        free = [i for i, b in enumerate(boxes) if self._free(b)]
        if not free and not always:
            return False
        i = free[0] if free else 0
        self.boxes.append(boxes[i])
        self.ax.annotate(
            text,
            xy=xy,
            xytext=cands[i][:2],
            textcoords="offset points",
            ha=cands[i][2],
            va="bottom",
            fontsize=fontsize,
            color=color,
        )
        return True


_ABOVE_RIGHT_END = [(-3, 2), (-3, -11), (-120, 2), (-120, -11), (-240, 2), (-240, -11)]
_RIDGE = [(3, -22), (3, -44), (3, 4), (-60, -22)]
_SLOPE = [(3, 4), (3, 16), (3, -12), (40, 4)]
_POINT = [(4, 3), (4, -12), (-4, 3, "right"), (-4, -12, "right")]


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
    labels: _Labels | None,
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
                _SLOPE,
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
                f"{text} ({_who(tag, kind)})", (x_hi, peak), _ABOVE_RIGHT_END, ha="right", color=c
            )
        if show_ridge and ridge_lines:
            ax.axvline(ridge, color=c, ls=":", lw=1.0, alpha=0.7, gid=f"{gid}ridge:{name}")
            if labels is not None:
                labels.place(
                    f"ridge {name}\n{ridge:.3g} FLOP/B", (ridge, peak), _RIDGE, color=c, fontsize=7
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


def _label_points(labels: _Labels, pts: pd.DataFrame) -> int:
    """Label points whose label would not overlap a label placed before (ceilings first). Returns
    the number labelled."""
    n = 0
    for xi, yi, text in zip(
        pts["intensity_flops_per_byte"], pts["achieved_flops_per_s"], pts["label"]
    ):
        if labels.place(text, (xi, yi), _POINT, color="#333333", fontsize=POINT_FONT, always=False):
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
    ax.set_ylabel("achieved FLOP/s (training FLOPs / median step time)")
    _log_ticks(ax.yaxis, _flops_label)
    _log_ticks(ax.xaxis)
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
    fig, axes = _new(10 + LEGEND_IN, 6.5, left=1.3, right=LEGEND_IN, top=0.75)
    ax = axes[0][0]
    pts = _plotted(points)
    measured, vendor = roofset.get("measured"), roofset.get("vendor")
    roof = roofset["roof"]  # join.roofs: measured ceilings, the vendor table filling the others
    roofs = [r for r in (roof, vendor) if r is not None]
    x_lo, x_hi = _x_range(pts, roofs)
    _axes_roofline(ax, x_lo, x_hi, pts, roofs)
    labels = _Labels(ax)
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
    title = f"Roofline: {_env_title(env, device)}"
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
    return _save(fig, path), n


def draw_roofline_combined(points: pd.DataFrame, roofs: dict) -> tuple[Figure, int]:
    """All environments on one roofline (color = environment): each environment's roof (the one its
    efficiencies use) for the dtypes its points use, each ceiling solid or dashed by its own source,
    ridges named in the ceiling labels. Returns (figure, points drawn)."""
    fig, axes = _new(11 + LEGEND_IN, 7, left=1.3, right=LEGEND_IN, top=0.75)
    ax = axes[0][0]
    pts = _plotted(points)
    envs = sorted(roofs)
    colors = _env_colors([f"{e} | {d}" for e, d in envs])
    all_roofs = [r["roof"] for r in roofs.values() if r.get("roof") is not None]
    x_lo, x_hi = _x_range(pts, all_roofs, levels=False)
    _axes_roofline(ax, x_lo, x_hi, pts, all_roofs)
    labels = _Labels(ax)
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
        Line2D([], [], color=colors[f"{e} | {d}"], marker="o", label=_env_title(e, d))
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
    return _save(fig, path), n


# ------------------------------------------------------------------------------- per-env panels
def _per_env_lines(
    points: pd.DataFrame,
    y: str,
    yerr: str | None,
    path: Path,
    ylabel: str,
    title: str,
    logy: bool,
    marker_by_source: bool = False,
    hline: float | None = None,
) -> Path:
    """One panel per environment, one line per series (model/precision/options) in the same color in
    every panel, and one legend for the figure."""
    envs = sorted({(e, d) for e, d in zip(points["env_label"], points["device_name"])})
    pts = points[
        points[y].notna() & pd.to_numeric(points["batch_size"], errors="coerce").gt(0)
    ]  # no batch: no x
    pts = pts.assign(series=[_series_label(r) for r in pts.to_dict("records")])
    names = sorted(set(pts["series"]))
    cmap = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"]
    color_of = {n: matplotlib.colors.to_hex(cmap(i % cmap.N)) for i, n in enumerate(names)}
    legend_in = 2.6
    fig, axes = _panels(max(len(envs), 1), right=legend_in)
    if not envs:
        axes[0].text(0.5, 0.5, "no data", ha="center", va="center", transform=axes[0].transAxes)
    for ax, (env, dev) in zip(axes, envs):
        sub = pts[(pts["env_label"] == env) & (pts["device_name"] == dev)].sort_values("batch_size")
        for series, g in sub.groupby("series", sort=True):
            color = color_of[series]
            if not marker_by_source:
                err = g[yerr].fillna(0).to_numpy() if yerr else None
                ax.errorbar(
                    g["batch_size"],
                    g[y],
                    yerr=err,
                    capsize=3,
                    marker="o",
                    ms=5,
                    lw=1.4,
                    color=color,
                )
                continue
            # one line per intensity source: a measured and a modeled value are never joined
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
        if hline is not None:
            ax.axhline(hline, color="gray", lw=1, ls="--")
        batches = sorted(set(int(b) for b in sub["batch_size"].dropna()))
        if not batches:
            ax.text(
                0.5,
                0.5,
                "no run with a batch_size param",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
            ax.set_title(_env_title(env, dev), fontsize=10)
            continue
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        if logy:
            ax.set_yscale("log")
            _log_ticks(ax.yaxis)
        ax.set_xlabel("batch size (samples per step)")
        ax.set_ylabel(ylabel)
        ax.set_title(_env_title(env, dev), fontsize=10)
        ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color=color_of[n], marker="o", ms=5, label=n) for n in names]
    if marker_by_source:
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
    if handles:
        width, height = fig.get_size_inches()
        fig.legend(
            handles=handles,
            fontsize=8,
            loc="upper left",
            frameon=False,
            bbox_to_anchor=(1 - (legend_in - 0.15) / width, 1 - 0.75 / height),
        )
    fig.suptitle(title, fontsize=12)
    return _save(fig, path)


def throughput_vs_batch(points: pd.DataFrame, path: Path) -> Path:
    return _per_env_lines(
        points,
        "throughput_mean_samples_per_s",
        "throughput_sd_samples_per_s",
        path,
        "throughput (samples/s)",
        "Training throughput vs batch size (error bars: ±1 SD; "
        "across runs where repeated, else within the run)",
        logy=False,
    )


def intensity_vs_batch(points: pd.DataFrame, path: Path) -> Path:
    return _per_env_lines(
        points,
        "intensity_flops_per_byte",
        None,
        path,
        "arithmetic intensity (FLOP/byte)",
        "Arithmetic intensity vs batch size",
        logy=True,
        marker_by_source=True,
    )


def speedup_vs_batch(speedups: pd.DataFrame, path: Path) -> Path:
    return _per_env_lines(
        speedups,
        "speedup",
        "speedup_sd",
        path,
        "speed-up over fp32 (samples/s ratio)",
        "fp16/bf16 autocast speed-up over fp32 (error bars: ±1 SD, propagated)",
        logy=False,
        hline=1.0,
    )


def step_time_variability(
    series: dict[tuple[str, str], list[float]], title: str, path: Path
) -> Path:
    """Box plot of per-step times, one box per environment (all measured steps of the plotted runs)."""
    keys = [k for k in sorted(series) if series[k]]
    fig, axes = _new(max(6.0, 1.8 * len(keys) + 2), 5.5, left=0.9, bottom=1.0, top=0.5)
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
        ax.set_xticks(range(1, len(keys) + 1), names, fontsize=8)
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
    return _save(fig, path)
