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
    """(env_label, device_name, config_key) -> the check rows of its latest what-if run."""
    return {(w["env_label"], w["device_name"], w["config_key"]): w["rows"] for w in whatifs}


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


def section_lines(whatifs: list[dict], figure: str | None = None) -> list[str]:
    """The Markdown of "How good is the advice" (the report's section body)."""
    rows = [r for w in whatifs for r in w["rows"]]
    if not rows:
        return [
            "No what-if run in these experiments: `python -m train.whatif RUN_ID` predicts each "
            "move of a configuration, runs it and scores the prediction (docs/whatif.md)."
        ]
    counts = ", ".join(f"{n} {v}" for v in VERDICTS if (n := sum(r["verdict"] == v for r in rows)))
    out = [
        f"{len(rows)} checks of predictions in {len(whatifs)} what-if run(s): {counts}. A "
        "prediction holds when the measured speed-up's 95% interval overlaps the predicted one; "
        "one wider than x2 counts as not predicted, a measurement of unstable runs (or wider than "
        "x2) as not judged (docs/schema.md, Definitions).",
        "",
        "| knob | checks | held | beaten | missed | not predicted | not judged | median abs. log "
        "error | median width |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cals = knobs(whatifs)
    for c in cals:
        n = c.counts
        err = "" if c.median_abs_log_error is None else fmt.num(c.median_abs_log_error)
        width = "" if c.median_width is None else f"x{fmt.num(c.median_width)}"
        out.append(
            f"| {c.knob} | {c.n} | {n['held']} | {n['beaten']} | {n['missed']} | "
            f"{n['not predicted']} | {n['not judged']} | {err} | {width} |"
        )
    out.append("")
    out += _missing_knobs(cals, rows)
    for w in whatifs:
        out.append(f"- **{w['env_label']}, {w['config_label']}** (what-if run {w['run_id'][:8]}):")
        out += [f"  - {line(r)}" for r in w["rows"]]
    if figure:
        out += ["", f"![Predicted against measured speed-ups]({figure})"]
    return out


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
    return out + ([""] if out else [])


def draw(whatifs: list[dict]):
    """Predicted against measured speed-up, one point per check with both: x the predicted
    interval's geometric midpoint with the interval as a horizontal bar, y the measured speed-up
    with its 95 % interval; the y = x line; colour by knob, marker by verdict."""
    from matplotlib.figure import Figure

    from roofline.style import distinct_colors, log_ticks

    pts = [
        r
        for w in whatifs
        for r in w["rows"]
        if _pos(r.get("predicted_low")) and _pos(r.get("measured"))
    ]
    fig = Figure(figsize=(6.4, 5.2), dpi=100)
    fig.subplots_adjust(left=0.14, right=0.97, top=0.9, bottom=0.12)
    ax = fig.add_subplot()
    knob_list = list(dict.fromkeys(r["knob"] for r in pts))
    color = distinct_colors(knob_list)
    marker = {"held": "o", "beaten": "^", "missed": "v", "not predicted": "s", "not judged": "x"}
    for r in pts:
        lo, hi, m = r["predicted_low"], r["predicted_high"], r["measured"]
        x = math.sqrt(lo * hi)
        yerr = (
            [[m - r["measured_low"]], [r["measured_high"] - m]]
            if _pos(r.get("measured_low"))
            else None
        )
        ax.errorbar(
            [x],
            [m],
            xerr=[[x - lo], [hi - x]],
            yerr=yerr,
            fmt=marker.get(r["verdict"], "o"),
            color=color[r["knob"]],
            capsize=3,
            ms=6,
            label=f"{r['knob']}: {r['verdict']}",
        )
    values = [
        v
        for r in pts
        for v in (
            r["predicted_low"],
            r["predicted_high"],
            r["measured"],
            r.get("measured_low"),
            r.get("measured_high"),
        )
        if _pos(v)
    ] or [0.5, 2.0]
    lo_ax, hi_ax = min(values + [1.0]) / 1.2, max(values + [1.0]) * 1.2
    ax.plot(
        [lo_ax, hi_ax], [lo_ax, hi_ax], color="0.5", lw=1, ls="--", label="measured = predicted"
    )
    ax.set(xscale="log", yscale="log", xlim=(lo_ax, hi_ax), ylim=(lo_ax, hi_ax))
    for axis in (ax.xaxis, ax.yaxis):
        log_ticks(axis, lambda v: f"x{v:g}")
    ax.set_xlabel("predicted speed-up (interval)")
    ax.set_ylabel("measured speed-up (95% interval)")
    ax.set_title(f"What-if checks: predicted against measured ({len(pts)} checks)", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="upper left")
    return fig


def save_figure(whatifs: list[dict], path: Path) -> Path:
    from analysis.plots import save

    return save(draw(whatifs), path)


def _pos(x) -> bool:
    return as_float(x, positive=True) is not None
