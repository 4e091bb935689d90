"""The breakdown's two figures (PNG bytes; matplotlib's Agg canvas, no display needed).

* `layer_roofline`: one point per leaf module and phase at (intensity, achieved FLOP/s), its
  area proportional to its time, coloured by phase, under the device's ceilings for the run's
  dtype (when known: the compute roof and the DRAM slope, labelled with their source); labels on
  the biggest points. Modules with no counted FLOPs (batch norm, ReLU, pooling: elementwise work
  is not counted, as in train_flops_per_step) cannot sit on a log axis: a note lists them with
  their share of the step.
* `parts_bar`: the step as one stacked bar of its parts (names.PARTS), each with its share.
"""

from __future__ import annotations

import io
import math
import textwrap

from common import fmt
from profiling.breakdown import names
from profiling.breakdown.roof import Ceilings

PHASE_COLORS = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green"}
PART_COLORS = {
    "data_wait": "tab:purple",
    "h2d_copy": "tab:pink",
    "forward": "tab:blue",
    "backward": "tab:orange",
    "optimizer": "tab:green",
    "exposed_comm": "tab:red",
    "host_overhead": "0.6",
}
LABELS = 10  # points numbered, with a key naming their module
_SHORT = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}
MAX_AREA_PT2 = 1500.0  # the largest point's marker area


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from roofline.style import plain_text

    buf = io.BytesIO()
    plain_text(fig)
    FigureCanvasAgg(fig).print_png(buf)
    return buf.getvalue()


def _ok(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def layer_roofline(
    table: list[dict],
    ceilings: Ceilings,
    title: str,
    time_what: str,
    unit: str = "modules",
    bytes_what: str = "modeled byte",
) -> bytes:
    """See the module docstring. `time_what` says which clock the times are (host, kernels);
    `unit` what a point is (modules, kernels); `bytes_what` the bytes (modeled, DRAM measured)."""
    from matplotlib.figure import Figure

    leaves = [r for r in table if r["kind"] == "module" and r["leaf"] and _ok(r["time_s"])]
    pts = [r for r in leaves if _ok(r["flops"]) and _ok(r["intensity_flops_per_byte"])]
    flat = sorted((r for r in leaves if not _ok(r["flops"])), key=lambda r: -r["time_s"])
    fig = Figure(figsize=(10.0, 5.6), dpi=100)
    fig.subplots_adjust(left=0.09, right=0.74, top=0.87, bottom=0.2)
    ax = fig.add_subplot()
    _scatter(ax, pts, unit)
    sub = _axes(ax, pts, ceilings)
    _number(fig, ax, pts)
    ax.set_xlabel(f"arithmetic intensity (counted FLOP / {bytes_what})", fontsize=9)
    ax.set_ylabel(f"achieved FLOP/s ({time_what})", fontsize=9)
    ax.legend(fontsize=7, loc="lower right", markerscale=0.5)
    fig.suptitle(title, fontsize=10)
    ax.set_title(_wrap(f"point area: time; {sub}", 110), fontsize=8)
    if flat:
        _not_drawn(fig, flat)
    return _png(fig)


def _phase(r: dict) -> str:
    return _SHORT.get(r["phase"], r["phase"])


def _scatter(ax, pts: list[dict], unit: str) -> None:
    """The points, one colour per phase, the area of each proportional to its time."""
    biggest = max((r["time_s"] for r in pts), default=1.0)
    for phase, color in PHASE_COLORS.items():
        mine = [r for r in pts if r["phase"] == phase]
        if not mine:
            continue
        ax.scatter(
            [r["intensity_flops_per_byte"] for r in mine],
            [r["achieved_flops_per_s"] for r in mine],
            s=[max(6.0, MAX_AREA_PT2 * r["time_s"] / biggest) for r in mine],
            color=color,
            alpha=0.55,
            edgecolors="k",
            linewidths=0.4,
            label=f"{phase} ({len(mine)} {unit})",
        )


def _number(fig, ax, pts: list[dict]) -> None:
    """Numbers beside the LABELS biggest points, placed so that no two overlap (`label_offsets`;
    the axes' limits must be set), and a key naming them beside the axes: the rest of the points
    are named by the legend's phases and the key alone."""
    top = sorted(pts, key=lambda r: -r["time_s"])[:LABELS]
    at = [
        tuple(ax.transData.transform((r["intensity_flops_per_byte"], r["achieved_flops_per_s"])))
        for r in top
    ]
    dpi_scale = fig.dpi / 72.0  # display pixels per point
    key_lines = []
    for i, (r, (dx, dy)) in enumerate(zip(top, label_offsets(at, LABEL_PX)), 1):
        ax.annotate(
            str(i),
            (r["intensity_flops_per_byte"], r["achieved_flops_per_s"]),
            xytext=(dx / dpi_scale, dy / dpi_scale),
            textcoords="offset points",
            fontsize=7,
            fontweight="bold",
            ha="center",
            va="center",
            arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.3"} if (dx or dy) else None,
        )
        key_lines.append(f"{i:>2}  {r['module']} {_phase(r)} {fmt.pct(r['share'])}")
    if key_lines:
        fig.text(0.755, 0.85, "\n".join(key_lines), fontsize=7, va="top", family="monospace")


LABEL_PX = 14.0  # a number label's box, display pixels (two digits at 7 pt, 100 dpi, with room)
_RINGS = (0.0, 1.5, 3.0, 4.5)  # label distances tried, in boxes, each at 8 directions


def label_offsets(points: list[tuple[float, float]], box: float) -> list[tuple[float, float]]:
    """Display-pixel offsets from each point to its label, in order, so that no label's `box`
    square overlaps an earlier one's: on the point when free, else the first free place on rings
    of 8 directions further out (the last ring's first place when all are taken)."""
    placed: list[tuple[float, float]] = []
    out = []
    for x, y in points:
        choice = None
        for ring in _RINGS:
            for k in range(1 if ring == 0 else 8):
                angle = math.pi / 4 * k + math.pi / 8
                dx, dy = ring * box * math.cos(angle), ring * box * math.sin(angle)
                if all(abs(x + dx - px) >= box or abs(y + dy - py) >= box for px, py in placed):
                    choice = (dx, dy)
                    break
            if choice is not None:
                break
        if choice is None:
            choice = (
                _RINGS[-1] * box * math.cos(math.pi / 8),
                _RINGS[-1] * box * math.sin(math.pi / 8),
            )
        placed.append((x + choice[0], y + choice[1]))
        out.append(choice)
    return out


def _axes(ax, pts: list[dict], ceilings: Ceilings) -> str:
    """Log axes spanning the points and the ridge; the ceilings when known. Returns what the
    subtitle says about them."""
    xs = [r["intensity_flops_per_byte"] for r in pts] or [1.0]
    ys = [r["achieved_flops_per_s"] for r in pts] or [1.0]
    x_lo, x_hi = min(xs) / 4, max(xs) * 4
    if ceilings.known:
        x_lo = min(x_lo, ceilings.ridge_flops_per_byte / 30)
        x_hi = max(x_hi, ceilings.ridge_flops_per_byte * 4)
        _draw_ceilings(ax, ceilings, x_lo, x_hi)
        sub = f"ceilings: {ceilings.source}"
    else:
        sub = f"no ceilings: {ceilings.why}"
    top = max(ys + [ceilings.peak_flops_per_s if ceilings.known else 0.0])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(min(ys) / 5, top * 3)
    ax.tick_params(labelsize=8)
    ax.grid(True, which="major", alpha=0.3)
    return sub


def _not_drawn(fig, flat: list[dict]) -> None:
    """The note listing the modules without counted FLOPs, with their shares of the step."""
    listed = ", ".join(f"{r['module']} {_phase(r)} {fmt.pct(r['share'])}" for r in flat[:8])
    more = f" and {len(flat) - 8} more" if len(flat) > 8 else ""
    share = sum(r["share"] for r in flat if math.isfinite(r["share"]))
    fig.text(
        0.01,
        0.02,
        _wrap(
            f"Not drawn, no counted FLOPs (elementwise work; {fmt.pct(share)} of the step): "
            f"{listed}{more}",
            150,
        ),
        fontsize=7,
        va="bottom",
    )


def _draw_ceilings(ax, c: Ceilings, x_lo: float, x_hi: float) -> None:
    """The run dtype's ceiling and fp32's (where it differs), the DRAM slope and the ridge, by
    the roofline package's drawer (roofline.plot.draw_ceilings: solid measured, dashed vendor),
    and one legend entry naming them."""
    from matplotlib.lines import Line2D

    from roofline.plot import draw_ceilings

    roof = c.as_roof()
    dtypes = {c.dtype} | ({"fp32"} if _ok(roof.peak("fp32")) else set())
    draw_ceilings(ax, roof, (x_lo, x_hi), dtypes, c.dtype)
    peaks = ", ".join(f"{d} {fmt.si(roof.peak(d), 'FLOP/s')}" for d in sorted(dtypes))
    handle = Line2D([], [], color="k", lw=1.2)
    ax.add_artist(
        ax.legend(
            [handle],
            [f"roof: {peaks}; DRAM {fmt.si(c.dram_bytes_per_s, 'B/s')}"],
            fontsize=7,
            loc="upper left",
        )
    )


def parts_bar(parts_s: dict[str, float], step_s: float, title: str) -> bytes:
    """One horizontal bar: the step's parts left to right, each labelled when wide enough."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 3.0), dpi=100)
    fig.subplots_adjust(left=0.03, right=0.97, top=0.8, bottom=0.45)
    ax = fig.add_subplot()
    left = 0.0
    for part in names.PARTS:
        v = max(0.0, parts_s.get(part, 0.0))
        if v <= 0 and part not in ("forward", "backward", "optimizer"):
            continue
        frac = v / step_s if step_s > 0 else 0.0
        ax.barh(
            [0],
            [frac],
            left=left,
            color=PART_COLORS[part],
            edgecolor="white",
            label=f"{part} {fmt.duration(v)} ({fmt.pct(frac)})",
        )
        if frac >= 0.06:
            ax.text(
                left + frac / 2, 0, f"{part}\n{fmt.pct(frac)}", ha="center", va="center", fontsize=7
            )
        left += frac
    ax.set_xlim(0, max(1.0, left))
    ax.set_yticks([])
    ax.set_xlabel(
        f"share of the step ({fmt.duration(step_s)}, mean of the recorded steps)", fontsize=8
    )
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.5), ncol=3, frameon=False)
    fig.suptitle(title, fontsize=9)
    return _png(fig)


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width))
