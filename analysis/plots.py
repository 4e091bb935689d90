"""Figures as PNG files (matplotlib's Agg canvas; no pyplot, no global state).

Every function takes the DataFrames built by analysis/core.py and a path, draws one figure and
returns the path. Encodings used throughout:
  marker shape  = where the intensity came from: filled circle = measured (ncu counters),
                  hollow triangle = modeled (byte model);
  line style    = where a ceiling came from: solid = measured peaks run, dashed = vendor / peaks file.
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

from analysis.fmt import si  # noqa: E402
from analysis.roofline import LEVELS, Roof  # noqa: E402

MAX_LABELS = 40  # point labels per roofline panel; beyond that the table carries them
DPI = 110
PRECISION_COLORS = {"fp32": "#1f77b4", "fp16": "#ff7f0e", "bf16": "#2ca02c"}
DTYPE_COLORS = {"fp64": "#7f7f7f", "fp32": "#1f77b4", "tf32": "#9467bd", "fp16": "#ff7f0e", "bf16": "#2ca02c"}
LEVEL_STYLE = {"dram": "-", "l2": (0, (4, 1, 1, 1)), "l1": (0, (1, 1))}
SOURCE_MARKER = {"measured": dict(marker="o", fillstyle="full"), "modeled": dict(marker="^", fillstyle="none")}


def _new(width: float = 9.0, height: float = 6.0, nrows: int = 1, ncols: int = 1, *, left: float = 1.0,
         right: float = 0.25, bottom: float = 0.7, top: float = 0.6, wspace: float = 0.25, hspace: float = 0.45):
    """A figure with fixed margins in inches (a layout engine costs more than all the drawing)."""
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                        wspace=wspace, hspace=hspace)
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
    fig, axes = _new(width_each * ncols + right, height_each * nrows, nrows, ncols, left=0.9, right=right,
                     top=0.75, bottom=0.65)
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


def _draw_roof(ax, roof: Roof, x_lo: float, x_hi: float, color: str | None, style: str, tag: str,
               dtypes_used: set[str], label_ceilings: bool, ridge_lines: bool = True) -> None:
    """Bandwidth slopes (one per memory level), compute ceilings (equal ones merged: vendor fp16 =
    bf16) and, for the dtypes in `dtypes_used`, the ridge point."""
    peaks = {d: v for d, v in roof.flops_per_s.items() if v and v > 0}
    top = max(peaks.values()) if peaks else None
    for level in LEVELS:
        bw = roof.bytes_per_s.get(level)
        if not bw:
            continue
        y_hi = top if top else bw * x_hi
        x_end = min(x_hi, y_hi / bw)
        ls = style if level == "dram" else LEVEL_STYLE[level]
        ax.plot([x_lo, x_end], [bw * x_lo, bw * x_end], color=color or "black", ls=ls, lw=1.6, alpha=0.85)
        if label_ceilings:
            ax.annotate(f"{level.upper()} {si(bw, 'B/s')} ({tag})", xy=(x_lo, bw * x_lo), xytext=(3, 4),
                        textcoords="offset points", fontsize=8, color=color or "black")
    bw = roof.bytes_per_s.get("dram")
    groups: dict[float, list[str]] = {}
    for dtype, peak in peaks.items():
        groups.setdefault(peak, []).append(dtype)
    for peak, dts in sorted(groups.items()):
        dts = sorted(dts, key=lambda d: list(DTYPE_COLORS).index(d) if d in DTYPE_COLORS else 99)
        name = "/".join(dts)
        c = color or DTYPE_COLORS.get(dts[0], "black")
        x_start = peak / bw if bw else x_lo
        ax.plot([max(x_start, x_lo), x_hi], [peak, peak], color=c, ls=style, lw=1.6, alpha=0.85)
        ridge = peak / bw if bw else math.nan
        show_ridge = bool(bw) and bool(set(dts) & dtypes_used) and x_lo < ridge < x_hi
        if label_ceilings:
            text = f"{name} {si(peak, 'FLOP/s')}" + (f", ridge {ridge:.3g} FLOP/B" if show_ridge and not ridge_lines else "")
            ax.annotate(f"{text} ({tag})", xy=(x_hi, peak), xytext=(-3, 3), textcoords="offset points",
                        ha="right", fontsize=8, color=c)
        if show_ridge and ridge_lines:
            ax.axvline(ridge, color=c, ls=":", lw=1.0, alpha=0.7)
            if label_ceilings:
                ax.annotate(f"ridge {name}\n{ridge:.3g} FLOP/B", xy=(ridge, peak), xytext=(3, -24),
                            textcoords="offset points", fontsize=7, color=c)


def _x_range(points: pd.DataFrame, roofs: list[Roof], levels: bool = True) -> tuple[float, float]:
    cols = ["intensity_flops_per_byte"] + (["intensity_l2_flops_per_byte", "intensity_l1_flops_per_byte"] if levels else [])
    xs = [v for c in cols if c in points for v in points[c].dropna() if v > 0]
    for roof in roofs:
        bw = roof.bytes_per_s.get("dram")
        xs += [p / bw for p in roof.flops_per_s.values() if bw and p]
    if not xs:
        return 0.1, 1000.0
    return 10 ** math.floor(math.log10(min(xs) / 2)), 10 ** math.ceil(math.log10(max(xs) * 2))


def _draw_points(ax, pts: pd.DataFrame, colors: list[str], levels: bool) -> None:
    """Points, one artist per (color, marker); with `levels`, the same points at their L2/L1
    intensities (hierarchical roofline) joined by a thin line."""
    pts = pts.assign(_color=list(colors))
    for level, marker in (("l2", "s"), ("l1", "D")) if levels else ():
        col = f"intensity_{level}_flops_per_byte"
        if col not in pts:
            continue
        for color, g in pts[pts[col].gt(0)].groupby("_color", sort=False):
            gap = np.full(len(g), np.nan)
            xs = np.column_stack([g["intensity_flops_per_byte"], g[col], gap]).ravel()
            ys = np.column_stack([g["achieved_flops_per_s"], g["achieved_flops_per_s"], gap]).ravel()
            ax.plot(xs, ys, color=color, lw=0.6, alpha=0.5)
            ax.plot(g[col], g["achieved_flops_per_s"], marker=marker, ms=5, color=color, fillstyle="none", ls="none")
    for (color, source), g in pts.groupby(["_color", "intensity_source"], sort=False):
        style = SOURCE_MARKER.get(source, SOURCE_MARKER["modeled"])
        ax.plot(g["intensity_flops_per_byte"], g["achieved_flops_per_s"], ls="none", ms=7, color=color,
                markeredgewidth=1.4, **style)


def _label_points(ax, pts: pd.DataFrame, fontsize: float = 7.0) -> int:
    """Label points whose label box would not overlap an earlier one (axis limits must be final).
    Returns the number labelled."""
    if pts.empty:
        return 0
    dpi = ax.figure.dpi
    char_w, h = 0.6 * fontsize * dpi / 72, 1.25 * fontsize * dpi / 72
    off = 4 * dpi / 72
    xy = ax.transData.transform(np.column_stack([pts["intensity_flops_per_byte"], pts["achieved_flops_per_s"]]))
    placed: list[tuple[float, float, float, float]] = []
    n = 0
    for (px, py), (xi, yi, text) in zip(xy, zip(pts["intensity_flops_per_byte"], pts["achieved_flops_per_s"], pts["label"])):
        box = (px + off, py + off * 0.7, px + off + char_w * len(text), py + off * 0.7 + h)
        if any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
            continue
        placed.append(box)
        ax.annotate(text, xy=(xi, yi), xytext=(4, 3), textcoords="offset points", fontsize=fontsize, color="#333333")
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
        ax.set_ylim(10 ** math.floor(math.log10(min(ys) / 1.5)), 10 ** math.ceil(math.log10(max(ys) * 1.5)))
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("achieved FLOP/s (training FLOPs / median step time)")
    _log_ticks(ax.yaxis, _flops_label)
    _log_ticks(ax.xaxis)
    ax.grid(True, which="major", alpha=0.3)


def _legend_roofline(ax, pts, extra_handles, levels: bool) -> None:
    handles = [
        Line2D([], [], ls="none", color="black", ms=7, label="intensity measured\n(Nsight Compute counters)", **SOURCE_MARKER["measured"]),
        Line2D([], [], ls="none", color="black", ms=7, label="intensity modeled\n(byte model, no counters)", **SOURCE_MARKER["modeled"]),
        Line2D([], [], color="black", ls="-", label="ceiling: measured (peaks run)"),
        Line2D([], [], color="black", ls="--", label="ceiling: vendor / peaks file"),
    ]
    for level, marker in (("l2", "s"), ("l1", "D")) if levels else ():
        c = f"intensity_{level}_flops_per_byte"
        if c in pts and pts[c].notna().any():
            handles.append(Line2D([], [], marker=marker, ls="none", color="black", fillstyle="none",
                                  label=f"same point at its {level.upper()}\nintensity (hierarchical)"))
    ax.legend(handles=handles + extra_handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0, framealpha=0.9)


def roofline_env(points: pd.DataFrame, env: str, device: str, roofset: dict, path: Path) -> tuple[Path, int]:
    """The roofline of one environment: its ceilings and its points (color = precision)."""
    fig, axes = _new(10 + LEGEND_IN, 6.5, left=1.3, right=LEGEND_IN, top=0.75)
    ax = axes[0][0]
    pts = points[points["intensity_flops_per_byte"].gt(0) & points["achieved_flops_per_s"].gt(0)]
    measured, vendor = roofset.get("measured"), roofset.get("vendor")
    roofs = [r for r in (measured, vendor) if r is not None]
    x_lo, x_hi = _x_range(pts, roofs)
    _axes_roofline(ax, x_lo, x_hi, pts, roofs)
    used = set(pts["ceiling_dtype"]) if "ceiling_dtype" in pts else {"fp32"}
    if measured is not None:
        _draw_roof(ax, measured, x_lo, x_hi, None, "-", "measured", used, True)
    if vendor is not None:
        _draw_roof(ax, vendor, x_lo, x_hi, None, "--", "vendor", used if measured is None else set(), True)
    _draw_points(ax, pts, [PRECISION_COLORS.get(p, "black") for p in pts["precision"]], levels=True)
    n_lab = _label_points(ax, pts)
    extra = [Line2D([], [], ls="none", marker="o", color=c, label=p) for p, c in PRECISION_COLORS.items()
             if (pts["precision"] == p).any()]
    _legend_roofline(ax, pts, extra, levels=True)
    title = f"Roofline: {_env_title(env, device)}"
    if not roofs:
        title += f"\nno peaks for {device}: no ceilings drawn"
    if len(pts) > n_lab:
        title += f"\n{n_lab} of {len(pts)} points labelled (the others overlap; all are in summary.csv)"
    ax.set_title(title, fontsize=11)
    return _save(fig, path), len(pts)


def roofline_combined(points: pd.DataFrame, roofs: dict, path: Path) -> tuple[Path, int]:
    """All environments on one roofline (color = environment; each env's ceilings for the dtypes its
    points use: solid where measured, dashed where vendor; ridges named in the ceiling labels)."""
    fig, axes = _new(11 + LEGEND_IN, 7, left=1.3, right=LEGEND_IN, top=0.75)
    ax = axes[0][0]
    pts = points[points["intensity_flops_per_byte"].gt(0) & points["achieved_flops_per_s"].gt(0)]
    envs = sorted(roofs)
    colors = _env_colors([f"{e} | {d}" for e, d in envs])
    all_roofs = [r["roof"] for r in roofs.values() if r.get("roof") is not None]
    x_lo, x_hi = _x_range(pts, all_roofs, levels=False)
    _axes_roofline(ax, x_lo, x_hi, pts, all_roofs)
    for env, dev in envs:
        rs = roofs[(env, dev)]
        roof = rs.get("roof")
        if roof is None:
            continue
        sub = pts[(pts["env_label"] == env) & (pts["device_name"] == dev)]
        used = set(sub["ceiling_dtype"]) or {"fp32"}
        only = Roof(roof.device_name, {d: v for d, v in roof.flops_per_s.items() if d in used},
                    {"dram": roof.dram_bytes_per_s} if math.isfinite(roof.dram_bytes_per_s) else {},
                    roof.sources)
        style = "-" if rs.get("measured") is not None else "--"
        _draw_roof(ax, only, x_lo, x_hi, colors[f"{env} | {dev}"], style, env, used, len(envs) <= 6, ridge_lines=False)
    _draw_points(ax, pts, [colors[f"{e} | {d}"] for e, d in zip(pts["env_label"], pts["device_name"])], levels=False)
    n_lab = _label_points(ax, pts) if len(pts) <= 3 * MAX_LABELS else 0
    extra = [Line2D([], [], color=colors[f"{e} | {d}"], marker="o", label=_env_title(e, d)) for e, d in envs]
    _legend_roofline(ax, pts, extra, levels=False)
    title = "Roofline: all environments"
    if len(pts) > n_lab:
        title += f"\n{n_lab} of {len(pts)} points labelled (per-environment figures and summary.csv name them)"
    ax.set_title(title, fontsize=11)
    return _save(fig, path), len(pts)


# ------------------------------------------------------------------------------- per-env panels
def _per_env_lines(points: pd.DataFrame, y: str, yerr: str | None, path: Path, ylabel: str, title: str,
                   logy: bool, marker_by_source: bool = False, hline: float | None = None) -> Path:
    """One panel per environment, one line per series (model/precision/options) in the same color in
    every panel, and one legend for the figure."""
    envs = sorted({(e, d) for e, d in zip(points["env_label"], points["device_name"])})
    pts = points[points[y].notna() & pd.to_numeric(points["batch_size"], errors="coerce").gt(0)]  # no batch: no x
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
                ax.errorbar(g["batch_size"], g[y], yerr=err, capsize=3, marker="o", ms=5, lw=1.4, color=color)
                continue
            # one line per intensity source: a measured and a modeled value are never joined
            for source, gs in g.groupby("intensity_source", sort=True):
                style = SOURCE_MARKER.get(source, SOURCE_MARKER["modeled"])
                ax.plot(gs["batch_size"], gs[y], lw=1.4, ms=7, markeredgewidth=1.4, color=color,
                        ls="-" if source == "measured" else "--", **style)
        if hline is not None:
            ax.axhline(hline, color="gray", lw=1, ls="--")
        batches = sorted(set(int(b) for b in sub["batch_size"].dropna()))
        if not batches:
            ax.text(0.5, 0.5, "no run with a batch_size param", ha="center", va="center", transform=ax.transAxes)
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
        handles += [Line2D([], [], ls="-", color="black", label="measured (ncu)", **SOURCE_MARKER["measured"]),
                    Line2D([], [], ls="--", color="black", label="modeled (byte model)", **SOURCE_MARKER["modeled"])]
    if handles:
        width, height = fig.get_size_inches()
        fig.legend(handles=handles, fontsize=8, loc="upper left", frameon=False,
                   bbox_to_anchor=(1 - (legend_in - 0.15) / width, 1 - 0.75 / height))
    fig.suptitle(title, fontsize=12)
    return _save(fig, path)


def throughput_vs_batch(points: pd.DataFrame, path: Path) -> Path:
    return _per_env_lines(points, "throughput_mean_samples_per_s", "throughput_sd_samples_per_s", path,
                          "throughput (samples/s)", "Training throughput vs batch size (error bars: ±1 SD; "
                          "across runs where repeated, else within the run)", logy=False)


def intensity_vs_batch(points: pd.DataFrame, path: Path) -> Path:
    return _per_env_lines(points, "intensity_flops_per_byte", None, path, "arithmetic intensity (FLOP/byte)",
                          "Arithmetic intensity vs batch size", logy=True, marker_by_source=True)


def speedup_vs_batch(speedups: pd.DataFrame, path: Path) -> Path:
    return _per_env_lines(speedups, "speedup", "speedup_sd", path, "speed-up over fp32 (samples/s ratio)",
                          "fp16/bf16 autocast speed-up over fp32 (error bars: ±1 SD, propagated)",
                          logy=False, hline=1.0)


def step_time_variability(series: dict[tuple[str, str], list[float]], title: str, path: Path) -> Path:
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
            names.append(f"{name}\nn={len(d)}, median {si(float(np.median(d)), 's')}"
                         + (f"\nCV {100 * cv:.1f}%" if np.isfinite(cv) else ""))
        ax.set_xticks(range(1, len(keys) + 1), names, fontsize=8)
        lo, hi = min(float(d.min()) for d in data), max(float(d.max()) for d in data)
        if lo > 0 and hi / lo > 20:  # environments orders of magnitude apart: log scale
            ax.set_yscale("log")
    else:
        ax.text(0.5, 0.5, "no step_time_s series logged", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("step time (all measured steps)")
    ax.yaxis.set_major_formatter(EngFormatter(unit="s"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(title, fontsize=11)
    return _save(fig, path)
