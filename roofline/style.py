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
