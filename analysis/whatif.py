"""The what-if checks in the report (docs/whatif.md): each configuration's checks as its latest
what-if run logged them (whatif/table.json, read as it is: a later analysis never recomputes a
checked prediction), the check beside each move of "What would move it", and the section "How good
is the advice": per knob the verdicts, the median |log(measured / predicted midpoint)| and the
median width of the predicted intervals (roofline/scoring.py), the knobs that keep missing with
what the model assumed, and the figure of predicted against measured speed-ups.
"""

from __future__ import annotations

import math
from pathlib import Path

from common import fmt
from common.stats import as_float
from roofline.scoring import VERDICTS, Calibration, calibration, check_text


def by_point(whatifs: list[dict]) -> dict[tuple[str, str, str], list[dict]]:
    """(env_label, device_name, config_key) -> the check rows of its latest what-if run
    (`whatifs` newest first, as fetched)."""
    out: dict[tuple[str, str, str], list[dict]] = {}
    for w in whatifs:
        out.setdefault((w["env_label"], w["device_name"], w["config_key"]), w["rows"])
    return out


def line(row: dict) -> str:
    """The check as the what-if run's description prints it (`bf16: predicted x1.3-1.9,
    measured x1.52 (1.44-1.6), held`)."""
    return check_text(
        row["move"],
        row.get("predicted_low"),
        row.get("predicted_high"),
        row.get("measured"),
        row.get("measured_low"),
        row.get("measured_high"),
        row["verdict"],
    )


def matching(rows: list[dict], knob: str, to=None) -> list[dict]:
    """The checks of moves of `knob` (to `to` when given: a precision, a batch size)."""
    return [r for r in rows if r["knob"] == knob and (to is None or _same(r.get("to"), to))]


def _same(a, b) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a).strip().lower() == str(b).strip().lower()


def knobs(whatifs: list[dict]) -> list[Calibration]:
    return calibration([r for w in whatifs for r in w["rows"]])


def attach(found: list, rows: list[dict]) -> None:
    """Give each "What would move it" finding of a configuration (analysis/findings/moves.py) the
    check of the what-if move it names, where its latest what-if run checked one: the finding's
    `check` value, which its sentence ends with."""
    for f in found:
        if f.topic != "move" or not rows:
            continue
        v = f.values
        knob, to = MOVE_KNOBS.get(f.kind, (v.get("knob"), None))
        hit = matching(rows, knob, v.get("to") if to is None else to)
        if hit:
            v["check"] = line(hit[0])


MOVE_KNOBS = {
    "peak_ratio": ("precision", None),
    "fusion": ("compile", True),
    "data_wait": ("workers", None),
}
"""the what-if knob (and the value it moves to; None: the finding's `to`) of each move finding
that is not a measured one-knob speed-up (`speedup` findings name their knob)"""

INTRO = (
    "{n} checks of predictions in {runs} what-if run(s) (`python -m train.whatif`, "
    "docs/whatif.md): {counts}. Each prediction was logged before its move ran; it holds when the "
    "measured speed-up's 95% interval overlaps the predicted interval; a predicted interval wider "
    "than x2 counts as not predicted, unstable runs or a measured interval wider than x2 as not "
    "judged (docs/schema.md, Definitions)."
)
CAL_HEADERS = [
    "knob",
    "checks",
    "held",
    "beaten",
    "missed",
    "not predicted",
    "not judged",
    "median abs. log error",
    "median width",
]
NONE_YET = (
    "No what-if run in these experiments: `python -m train.whatif RUN_ID` predicts each move of a "
    "configuration, runs it and scores the prediction (docs/whatif.md)."
)


def section(whatifs: list[dict], figure: tuple[str, str] | None = None) -> list[tuple]:
    """The blocks of "How good is the advice" (analysis/report.py): the counts, the table per
    knob, the knobs that keep missing, the figure, then each what-if run's checks."""
    from analysis.markdown import Table

    rows = [r for w in whatifs for r in w["rows"]]
    if not rows:
        return [("p", NONE_YET)]
    counts = ", ".join(f"{n} {v}" for v in VERDICTS if (n := sum(r["verdict"] == v for r in rows)))
    out: list[tuple] = [("p", INTRO.format(n=len(rows), runs=len(whatifs), counts=counts))]
    cals = knobs(whatifs)
    out.append(("table", Table(CAL_HEADERS, [_cal_row(c) for c in cals])))
    out += [("p", text) for text in _missing_knobs(cals, rows)]
    if figure:
        out.append(("figure", *figure))
    for w in whatifs:
        head = (
            f"**{w['env_label']}, {w['config_label']}** (what-if run {fmt.short_id(w['run_id'])}):"
        )
        out += [("p", head), ("list", [_listed(r) for r in w["rows"]])]
    return out


def _listed(row: dict) -> str:
    why = row.get("why") if row["verdict"] in ("not predicted", "not judged") else ""
    return line(row) + (f" ({why})" if why else "")


def _cal_row(c: Calibration) -> list:
    n = c.counts
    err = "" if c.median_abs_log_error is None else fmt.num(c.median_abs_log_error)
    width = "" if c.median_width is None else f"x{fmt.num(c.median_width)}"
    return [c.knob, c.n, n["held"], n["beaten"], n["missed"], n["not predicted"]] + [
        n["not judged"],
        err,
        width,
    ]


def _missing_knobs(cals: list[Calibration], rows: list[dict]) -> list[str]:
    out = []
    for c in cals:
        if not c.keeps_missing:
            continue
        assumed = next((r.get("assumes") for r in reversed(rows) if r["knob"] == c.knob), "")
        wrong = c.judged - c.counts["held"]
        out.append(
            f"**{c.knob} keeps missing**: {wrong} of its {c.judged} judged predictions did not "
            f"hold (median abs. log error {fmt.num(c.median_abs_log_error)}). The model assumed: "
            f"{assumed}."
        )
    return out


def draw(whatifs: list[dict]):
    """Predicted against measured speed-up, one point per check with both: x the predicted
    interval's geometric midpoint with the interval as a horizontal bar, y the measured speed-up
    with its 95 % interval; the y = x line; colour by knob, marker by verdict."""
    from matplotlib.figure import Figure

    from roofline.style import distinct_colors

    pts = [r for w in whatifs for r in w["rows"] if _pos(r.get("predicted_low"))]
    pts = [r for r in pts if _pos(r.get("measured"))]
    fig = Figure(figsize=(6.4, 5.2), dpi=100)
    fig.subplots_adjust(left=0.14, right=0.97, top=0.9, bottom=0.12)
    ax = fig.add_subplot()
    color = distinct_colors(list(dict.fromkeys(r["knob"] for r in pts)))
    marker = {"held": "o", "beaten": "^", "missed": "v", "not judged": "x"}
    for r in pts:
        lo, hi, m = r["predicted_low"], r["predicted_high"], r["measured"]
        x = math.sqrt(lo * hi)
        ok = _pos(r.get("measured_low"))
        ax.errorbar(
            [x],
            [m],
            xerr=[[x - lo], [hi - x]],
            yerr=[[m - r["measured_low"]], [r["measured_high"] - m]] if ok else None,
            fmt=marker.get(r["verdict"], "s"),
            color=color[r["knob"]],
            capsize=3,
            ms=6,
            label=f"{r['knob']}: {r['verdict']}",
        )
    _axes(ax, pts)
    return fig


def _axes(ax, pts: list[dict]) -> None:
    """Equal log axes over every value drawn (and 1), the y = x line, the labels, the legend."""
    from roofline.style import log_ticks

    keys = ("predicted_low", "predicted_high", "measured", "measured_low", "measured_high")
    values = [r[k] for r in pts for k in keys if _pos(r.get(k))] + [1.0]
    lo, hi = min(values) / 1.2, max(values) * 1.2
    ax.plot([lo, hi], [lo, hi], color="0.5", lw=1, ls="--", label="measured = predicted")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
    for axis in (ax.xaxis, ax.yaxis):
        log_ticks(axis, lambda v: f"x{v:g}")
    ax.set_xlabel("predicted speed-up (interval)")
    ax.set_ylabel("measured speed-up (95% interval)")
    ax.set_title(f"What-if checks: predicted against measured ({len(pts)} checks)", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="upper left")


def save_figure(whatifs: list[dict], path: Path) -> Path:
    from analysis.plots import save

    return save(draw(whatifs), path)


def figures(whatifs: list[dict], out_dir: Path, files: list[Path]) -> list[tuple[str, str]]:
    """The section's figure under out_dir/figures, when there are what-if runs: [(title, path
    relative to the report)], its file appended to `files`."""
    if not whatifs:
        return []
    png = save_figure(whatifs, out_dir / "figures" / "whatif_checks.png")
    files.append(png)
    return [("What-if checks: predicted against measured", str(png.relative_to(out_dir)))]


def _pos(x) -> bool:
    return as_float(x, positive=True) is not None
