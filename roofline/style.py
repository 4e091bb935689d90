"""The look every figure of the project shares: a canvas with fixed margins, plain log ticks and one
encoding (roofline/plot.py, roofline/run_plot.py and analysis's figures draw with it):

  colour       = the compute dtype of a ceiling (DTYPE_COLORS), the precision of a run
                 (PRECISION_COLORS) or the environment and series (distinct_colors);
  marker shape = where an intensity came from (SOURCE_MARKER): filled circle = measured (ncu
                 counters), hollow triangle = modeled (byte model);
  line style   = where a ceiling came from (Roof.sources): solid = measured peaks run, dashed =
                 vendor / peaks file; L2 and L1 slopes have their own dash pattern (LEVEL_STYLE).

matplotlib's object API on the Agg canvas: no pyplot, no global state.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter

from common.fmt import si

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


def plain_text(fig) -> None:
    """Draw every text of `fig` as written. Titles, legends and notes carry user text (env labels,
    model and module names) and matplotlib parses `$...$` in any text as mathtext: an env label
    `$\\foo{$` ended every analysis in `ParseFatalException: Unknown symbol`. The project's own
    text uses no mathtext; tick labels, set when the figure is drawn, keep it. Call before saving."""
    for text in fig.findobj(Text):
        if "$" in text.get_text():
            text.set_parse_math(False)


VIEWER_PX = 600.0
"""the width MLflow's artifact viewer shows a figure at on a first visit (the Assistant panel open;
about 950 px once it is closed): every figure is drawn to be read there"""
LEGIBLE_PX = 8.0
"""the smallest text height, in pixels at VIEWER_PX, that a figure may carry"""
FIGURE_WIDTH_IN = 8.4
"""the widest figure the project draws, in inches: at VIEWER_PX its 8-point text is LEGIBLE_PX"""


def min_font_pt(fig, shown_px: float = VIEWER_PX) -> float:
    """The smallest font size (points) legible in `fig` shown `shown_px` wide: LEGIBLE_PX there."""
    return LEGIBLE_PX * 72.0 * fig.get_size_inches()[0] / shown_px


def _texts(fig) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def legible(fig) -> None:
    """Raise every text of `fig` below `min_font_pt` to it (tick labels through tick_params, which
    keeps it for ticks made later): a figure shrunk to the viewer's width stays readable. The
    figures are drawn at most FIGURE_WIDTH_IN wide, so this moves little."""
    low = min_font_pt(fig)
    FigureCanvasAgg(fig).draw()  # tick labels exist once drawn
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            for which, ticks in (
                ("major", axis.get_majorticklabels()),
                ("minor", axis.get_minorticklabels()),
            ):
                if ticks and ticks[0].get_fontsize() < low:
                    ax.tick_params(axis=name, which=which, labelsize=low)
    for text in _texts(fig):
        if text.get_fontsize() < low:
            text.set_fontsize(low)


def smallest_text_px(fig, shown_px: float = VIEWER_PX) -> tuple[float, str]:
    """The smallest text of `fig` as pixels high when the figure is shown `shown_px` wide, and
    that text (what tests hold against LEGIBLE_PX)."""
    FigureCanvasAgg(fig).draw()
    scale = shown_px / fig.get_size_inches()[0] / 72.0
    return min(((t.get_fontsize() * scale, t.get_text()) for t in _texts(fig)), default=(99.0, ""))


def finish(fig) -> None:
    """What every figure gets before it is saved: its text drawn as written (`plain_text`) and
    legible at the viewer's width (`legible`)."""
    plain_text(fig)
    legible(fig)


def titles(fig) -> list[str]:
    """The figure's title and each panel's, as drawn (empty ones left out)."""
    heads = [fig.get_suptitle()]
    for ax in fig.axes:
        heads += [ax.get_title(loc) for loc in ("left", "center", "right")]
    return [h for h in heads if h.strip()]


def _words(fig) -> list[str]:
    """Every text the figure says but its ticks: titles, axis labels, legends, notes."""
    out = [t.get_text() for t in fig.texts]
    out += [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    for ax in fig.axes:
        out += [ax.get_xlabel(), ax.get_ylabel(), *(t.get_text() for t in ax.texts)]
        legend = ax.get_legend()
        out += [t.get_text() for t in legend.get_texts()] if legend else []
    heads = set(titles(fig))
    return [t for t in out if t.strip() and t not in heads]


def write_png(fig, target=None, dpi: float | None = None):
    """`fig` finished (`finish`) and written as PNG to `target` (a path, returned), or returned
    as bytes when there is none; its titles in the PNG's `Title` text and its other words in
    `Description`: what a figure says can be read back without looking at it
    (tests/test_ui_browser.py holds a figure's title to the run page's numbers). Every figure the
    project draws is written here."""
    import io

    finish(fig)
    meta = {"Title": "\n".join(titles(fig)), "Description": "\n".join(_words(fig))}
    out = io.BytesIO() if target is None else Path(target)
    fig.savefig(out, format="png", dpi=dpi or fig.dpi, metadata=meta)
    return out.getvalue() if target is None else out


def new_figure(
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


def distinct_colors(names: list[str]) -> dict[str, str]:
    """One colour per name (environments, series), from tab10, or tab20 beyond ten names."""
    cmap = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {n: matplotlib.colors.to_hex(cmap(i % cmap.N)) for i, n in enumerate(names)}


def log_ticks(axis, fmt=lambda v: f"{v:g}") -> None:
    """Log axis ticks as `fmt(v)` (plain 200, not 2 x 10^2); minor ticks at 2 and 5 labelled too."""
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))

    def minor(v, _):
        mantissa = round(v / 10 ** math.floor(math.log10(v)), 6) if v > 0 else 0
        return fmt(v) if mantissa in (2, 5) else ""

    axis.set_minor_formatter(FuncFormatter(minor))


def flops_label(v: float) -> str:
    return si(v, "FLOP/s", 3)


def env_title(env: str, device: str) -> str:
    return f"{env} ({device})" if device and device not in env else env
