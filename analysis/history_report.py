"""The report's section "What changed over time" and findings.json's `changes`: the change points
analysis/history.py found, one figure per series with a change (analysis/history_plot.py draws
it), one table row per change, every sentence naming its numbers. Pure but for `figures` (the
edge that draws)."""

from __future__ import annotations

from pathlib import Path

from analysis import history
from analysis.markdown import Table
from common import fmt
from common.fmt import short_id, slug

MAX_FIGURES = 12
"""series drawn at most (the largest slowdowns first); every change is in the table and the JSON"""
INTRO = (
    "Each series is the train runs of one environment, device and configuration in run order "
    "({order}). A change point is where the mean step time steps: binary segmentation on the runs' "
    "log mean step times, each run weighted by its own CI and the run-to-run noise, every split "
    'tested by a permutation test at p < {alpha} (docs/analysis.md, "What changed over time"). '
    "Per change: the two levels (pooled mean step time of the runs on each side), their ratio with "
    "its 95 % interval, the p-value, and what changed between the last run before and the first "
    "after. {counts}"
)


def counts_line(h: history.History) -> str:
    by = {
        k: sum(s.status == k for s in h.series)
        for k in ("change", "no change", "insufficient data")
    }
    return (
        f"{len(h.series)} series: {by['change']} with a change, {by['no change']} without, "
        f"{by['insufficient data']} with too few runs to tell (fewer than "
        f"{history.cp.needed()})."
    )


def changes_table(h: history.History) -> Table:
    headers = [
        "Series",
        "From run",
        "Mean step time",
        "Ratio (95 % CI)",
        "p",
        "Runs",
        "What changed",
    ]
    rows = []
    for s in h.series:
        for c in s.changes:
            iv = c.ratio_ci95
            what = [f"{t['name']} {t['before']} → {t['after']}" for t in c.changed]
            what += [x for x in (c.machine, c.load) if x]
            rows.append(
                [
                    s.name,
                    short_id(c.at_run_id),
                    f"{fmt.duration(c.before.step_time_mean_s)} → {fmt.duration(c.after.step_time_mean_s)}",
                    f"{fmt.num(c.ratio)}×"
                    + (f" ({fmt.num(iv[0])}–{fmt.num(iv[1])})" if iv else ""),
                    fmt.num(c.p_value, 2),
                    f"{len(c.before.run_ids)} → {len(c.after.run_ids)}",
                    "; ".join(what) or "no recorded tag changed",
                ]
            )
    return Table(headers, rows)


def body(h: history.History, figure_blocks: list[tuple]) -> list[tuple]:
    """The blocks of the section (analysis/report.py's Block format; the heading is SECTIONS'):
    what it is, the changes' table, each changed series' sentence, then `figure_blocks`."""
    order = "start time" if h.order_by == history.START else f"by tag {h.order_by}"
    out: list[tuple] = [
        ("p", INTRO.format(order=order, alpha=history.cp.ALPHA, counts=counts_line(h)))
    ]
    changed = [s for s in h.series if s.changes]
    if not changed:
        return out + [("p", "No series has a change point.")]
    out.append(("table", changes_table(h)))
    out += [("p", s.summary()) for s in changed]
    return out + list(figure_blocks)


def figures(h: history.History, folder: Path) -> list[tuple[str, Path]]:
    """(title, path) of one figure per series with a change, the largest slowdowns first."""
    from analysis import history_plot

    changed = sorted(
        (s for s in h.series if s.changes),
        key=lambda s: -max(c.ratio for c in s.changes),
    )[:MAX_FIGURES]
    out = []
    for i, s in enumerate(changed):
        path = folder / f"history_{i:02d}_{slug(s.env_label)}_{s.config_key}.png"
        out.append((f"Step time over time: {s.name}", history_plot.series_figure(s, path)))
    return out


def to_json(h: history.History) -> list[dict]:
    """findings.json's `changes`: one record per change point, raw SI values."""
    out = []
    for s in h.series:
        for c in s.changes:
            out.append(
                {
                    "env_label": s.env_label,
                    "device_name": s.device_name,
                    "config_key": s.config_key,
                    "config_label": s.label,
                    "order_by": s.order_by,
                    "at_run_id": c.at_run_id,
                    "last_before_run_id": c.last_before_run_id,
                    "index": c.index,
                    "p_value": c.p_value,
                    "before": _level(c.before),
                    "after": _level(c.after),
                    "ratio": c.ratio,
                    "ratio_ci95": c.ratio_ci95,
                    "changed": c.changed,
                    "machine": c.machine,
                    "load": c.load,
                    "modules": c.modules,
                    "text": c.sentence(),
                }
            )
    return out


def _level(lv: history.Level) -> dict:
    return {
        "run_ids": lv.run_ids,
        "step_time_mean_s": lv.step_time_mean_s,
        "step_time_ci95_rel": lv.step_time_ci95_rel,
        "throughput_samples_per_s": lv.samples_per_s,
    }
