"""The breakdown's two figures (PNG bytes; matplotlib's Agg canvas, no display needed).

* `layer_roofline`: one point per leaf module and phase at (intensity, achieved FLOP/s), its
  area proportional to its time, coloured by phase, under the device's ceilings for the run's
  dtype (when known: the compute roof and the DRAM slope, labelled with their source); the
  largest rows numbered in the order the description lists them, points above their roof ringed.
  Rows with no counted FLOPs (the optimizer's update, batch norm, ReLU, pooling: elementwise work
  is not counted, as in train_flops_per_step) cannot sit on a log axis: a panel below draws them
  as bars of their share, under the same numbers.
* `parts_bar`: the step as one stacked bar of its parts (names.PARTS), each with its share by
  the clock every share of the run is by (the description's).
"""

from __future__ import annotations

import math
import textwrap

from common import fmt
from profiling.breakdown import names
from profiling.breakdown.above import AboveRoof
from profiling.breakdown.roof import Ceilings
from profiling.breakdown.table import answer_rows, move_hint

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
LABELS = 10  # rows numbered, with a key naming them: the description's largest rows, in its order
MAX_AREA_PT2 = 1200.0  # the largest point's marker area
FLAT_ROWS = 8  # rows without counted FLOPs drawn as bars (largest share first)
FONT = 9.0  # body text; every text is at least MIN_FONT (legible at the artifact viewer's 600 px)
MIN_FONT = 8.0
ABOVE_EDGE = "crimson"  # the ring of a point above its roof


def _png(fig) -> bytes:
    from roofline.style import write_png

    return write_png(fig)


def _ok(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def layer_roofline(
    table: list[dict],
    ceilings: Ceilings,
    title: str,
    time_what: str,
    unit: str = "modules",
    bytes_what: str = "modeled byte",
    above: AboveRoof | None = None,
    clock: str = "",
) -> bytes:
    """The layer roofline (module docstring) as PNG bytes. `time_what` says which clock the times
    are (host, kernels); `unit` what a point is (modules, kernels); `bytes_what` the bytes
    (modeled, DRAM measured); `above` the rows above their roof (ringed, and said in the
    subtitle); `clock` what the shares are of. The numbers are the largest rows in the order the
    description lists them (table.answer_rows): a row without counted FLOPs (the optimizer, batch
    norm) is a bar in the lower panel under its number."""
    from matplotlib.figure import Figure

    leaves = [r for r in table if r["kind"] == "module" and r["leaf"] and _ok(r["time_s"])]
    pts = [r for r in leaves if _ok(r["flops"]) and _ok(r["intensity_flops_per_byte"])]
    drawn = {id(r) for r in pts}
    flat = [
        r
        for r in table
        if id(r) not in drawn
        and _ok(r["time_s"])
        and ((r["kind"] == "module" and r["leaf"]) or (r["kind"] == "step" and move_hint(r)))
    ]
    flat.sort(key=lambda r: -_share(r))
    number = {id(r): i for i, r in enumerate(answer_rows(table, LABELS), 1)}
    fig = Figure(figsize=(8.4, 6.8 if flat else 5.4), dpi=100)
    ax = fig.add_axes((0.1, 0.40 if flat else 0.12, 0.56, 0.45 if flat else 0.70))
    _scatter(ax, pts, unit, above)
    sub = _axes(ax, pts, ceilings)
    _number(fig, ax, pts, number)
    ax.set_xlabel(f"arithmetic intensity (counted FLOP / {bytes_what})", fontsize=FONT)
    ax.set_ylabel(f"achieved FLOP/s ({time_what})", fontsize=FONT)
    ax.legend(fontsize=MIN_FONT, loc="lower right", markerscale=0.5)
    fig.suptitle(_wrap(title, 80), fontsize=10.5)
    said = f"point area: time; shares by {clock}; {sub}" if clock else f"point area: time; {sub}"
    if above is not None:
        said += f". Ringed: {len(above.rows)} above the roof, {ABOVE_VERDICT[above.verdict]}"
    ax.set_title(_wrap(said, 84), fontsize=MIN_FONT)
    _key(fig, table, number, above)
    if flat:
        _flat_bars(fig, flat[:FLAT_ROWS], len(flat), number)
    return _png(fig)


ABOVE_VERDICT = {
    "ceiling": "the ceiling looks too low (see the description)",
    "time": "their times look too short (see the description)",
    "either": "the ceiling is too low or their times too short (see the description)",
    "unknown": "nothing measured says why (see the description)",
}


def _share(r: dict) -> float:
    v = r.get("share", math.nan)
    return v if isinstance(v, (int, float)) and math.isfinite(v) else 0.0


def _label(r: dict, width: int = 22) -> str:
    """The row's name (names.row_label) with its module cut to `width` characters."""
    return names.row_label(r["module"][:width], r["phase"])


def _scatter(ax, pts: list[dict], unit: str, above: AboveRoof | None = None) -> None:
    """The points, one colour per phase, the area of each proportional to its time; those above
    their roof ringed."""
    biggest = max((r["time_s"] for r in pts), default=1.0)
    over = {(r["module"], r["phase"]) for r in (above.rows if above else [])}
    ringed = [r for r in pts if (r["module"], r["phase"]) in over]
    if ringed:
        ax.scatter(
            [r["intensity_flops_per_byte"] for r in ringed],
            [r["achieved_flops_per_s"] for r in ringed],
            s=[max(6.0, MAX_AREA_PT2 * r["time_s"] / biggest) * 1.6 + 40 for r in ringed],
            facecolors="none",
            edgecolors=ABOVE_EDGE,
            linewidths=1.6,
            label=f"above its roof ({len(ringed)})",
            zorder=3,
        )
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


def _number(fig, ax, pts: list[dict], number: dict[int, int]) -> None:
    """The numbers of the numbered points beside them, placed so that no two overlap
    (`label_offsets`; the axes' limits must be set)."""
    mine = sorted((r for r in pts if id(r) in number), key=lambda r: number[id(r)])
    at = [
        tuple(ax.transData.transform((r["intensity_flops_per_byte"], r["achieved_flops_per_s"])))
        for r in mine
    ]
    dpi_scale = fig.dpi / 72.0  # display pixels per point
    for r, (dx, dy) in zip(mine, label_offsets(at, LABEL_PX)):
        ax.annotate(
            str(number[id(r)]),
            (r["intensity_flops_per_byte"], r["achieved_flops_per_s"]),
            xytext=(dx / dpi_scale, dy / dpi_scale),
            textcoords="offset points",
            fontsize=MIN_FONT,
            fontweight="bold",
            ha="center",
            va="center",
            arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.3"} if (dx or dy) else None,
            zorder=4,
        )


def _key(fig, table: list[dict], number: dict[int, int], above: AboveRoof | None) -> None:
    """The key beside the axes: every numbered row, in the description's order, with its share
    (a row above its roof marked `^`)."""
    over = {(r["module"], r["phase"]) for r in (above.rows if above else [])}
    rows = sorted((r for r in table if id(r) in number), key=lambda r: number[id(r)])
    lines = ["largest rows, as the", "description lists them:"]
    for r in rows:
        mark = " ^" if (r["module"], r["phase"]) in over else ""
        lines.append(f"{number[id(r)]:>2} {_label(r)} {fmt.pct(r['share'])}{mark}")
    if any((r["module"], r["phase"]) in over for r in rows):
        lines.append(" ^ above its roof")
    fig.text(0.685, 0.86, "\n".join(lines), fontsize=MIN_FONT, va="top", family="monospace")


def _flat_bars(fig, flat: list[dict], total: int, number: dict[int, int]) -> None:
    """The rows without counted FLOPs (elementwise work, the optimizer's update: no point on a
    log axis) as bars of their share of the step, each named at its end, numbered as in the key."""
    ax = fig.add_axes((0.1, 0.06, 0.56, 0.23))
    y = list(range(len(flat)))[::-1]
    widths = [100 * _share(r) for r in flat]
    ax.barh(y, widths, color="0.6", height=0.7)
    top = max(widths, default=1.0) or 1.0
    for r, yi, w in zip(flat, y, widths):
        n = number.get(id(r))
        name = f"{f'{n}: ' if n else ''}{_label(r, 28)} {fmt.pct(r['share'])}"
        ax.text(w + top * 0.01, yi, name, va="center", fontsize=MIN_FONT)
    ax.set_xlim(0, top * 1.9)  # room for the names
    ax.set_yticks([])
    ax.tick_params(axis="x", labelsize=MIN_FONT)
    more = f" ({len(flat)} of {total} shown)" if total > len(flat) else ""
    ax.set_title(
        f"no counted FLOPs, so no point above: % of the step{more}, "
        f"{fmt.pct(sum(_share(r) for r in flat))} in these",
        fontsize=MIN_FONT,
    )
    ax.grid(True, axis="x", alpha=0.3)


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
    ax.tick_params(labelsize=MIN_FONT)
    ax.grid(True, which="major", alpha=0.3)
    return sub


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
    levels = "".join(
        f"; {lv.upper()} {fmt.si(v, 'B/s')} (dash-dot)"
        for lv, v in roof.bytes_per_s.items()
        if lv != "dram" and _ok(v)
    )
    handle = Line2D([], [], color="k", lw=1.2)
    ax.add_artist(
        ax.legend(
            [handle],
            [f"roof: {peaks}; DRAM {fmt.si(c.dram_bytes_per_s, 'B/s')}{levels}"],
            fontsize=MIN_FONT,
            loc="upper left",
        )
    )


def parts_bar(metrics: dict[str, float], title: str, clock: str) -> bytes:
    """One horizontal bar: the step's parts left to right by their logged shares
    (`breakdown_<part>_fraction`, by `clock`, as the description says them), each labelled when
    wide enough."""
    from matplotlib.figure import Figure

    step_s = metrics.get("breakdown_step_s", math.nan)
    fig = Figure(figsize=(8.0, 3.2), dpi=100)
    fig.subplots_adjust(left=0.03, right=0.97, top=0.78, bottom=0.5)
    ax = fig.add_subplot()
    left = 0.0
    for part in names.PARTS:
        frac = metrics.get(f"breakdown_{part}_fraction", 0.0)
        frac = frac if isinstance(frac, float) and math.isfinite(frac) and frac > 0 else 0.0
        if frac <= 0 and part not in ("forward", "backward", "optimizer"):
            continue
        ax.barh(
            [0],
            [frac],
            left=left,
            color=PART_COLORS[part],
            edgecolor="white",
            label=f"{part} {fmt.pct(frac)}",
        )
        if frac >= 0.08:
            ax.text(
                left + frac / 2,
                0,
                f"{part}\n{fmt.pct(frac)}",
                ha="center",
                va="center",
                fontsize=MIN_FONT,
            )
        left += frac
    ax.set_xlim(0, max(1.0, left))
    ax.set_yticks([])
    ax.set_xlabel(
        _wrap(
            f"share of the step by {clock} (the step: {fmt.duration(step_s)} of wall time, "
            "mean of the recorded steps)",
            90,
        ),
        fontsize=MIN_FONT,
    )
    ax.tick_params(labelsize=MIN_FONT)
    ax.legend(
        fontsize=MIN_FONT, loc="upper center", bbox_to_anchor=(0.5, -0.7), ncol=4, frameon=False
    )
    fig.suptitle(_wrap(title, 80), fontsize=10)
    return _png(fig)


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width))
