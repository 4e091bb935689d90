"""The breakdown's text: the summary line, the run's description, layers.csv, breakdown.json and
the default view as the command prints it. Pure: rows and metrics in, text out."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from common import fmt
from profiling.breakdown import names
from profiling.breakdown.above import AboveRoof
from profiling.breakdown.attribute import Attribution
from profiling.breakdown.recording import Recording
from profiling.breakdown.roof import Ceilings
from profiling.breakdown.table import (
    COLUMNS,
    VIEW_LEAVES,
    ModuleTree,
    answer_rows,
    move_hint,
    row_phrase,
    share_clock_name,
    top_rows,
    view_top,
)
from profiling.breakdown.trace import kept_phrase


@dataclass(frozen=True)
class BreakdownResult:
    """A recording attributed, placed on the roofline and described: everything the run logs
    (profiling/breakdown/cli.py: analyse makes it, log_result logs it)."""

    config_label: str
    config_key: str
    device_name: str
    rec: Recording
    att: Attribution
    tree: ModuleTree
    table: list[dict]
    """one row per module and phase (table.COLUMNS)."""
    ceilings: Ceilings
    metrics: dict[str, float]
    trace_gz: bytes
    summary: str
    """the summary line (summary_line)."""
    about: str
    """what the figures are titled: the config, the device (and the rank)."""
    counts_check: str
    """why the module rows do not add up to the step's counted work; empty when they do."""
    trace: dict
    """which recorded steps trace.json.gz holds (trace.bound_trace's facts)."""
    above: AboveRoof | None = None
    """the rows above their roof and why (profiling.breakdown.above), None when none is."""

    @property
    def share_clock(self) -> str:
        """The clock every share of the run is by, as the text names it."""
        return share_clock_name(self.att.share_clock, self.rec.time_source)


def summary_line(label: str, device_name, table, tree, metrics, clock: str) -> str:
    """`<config> on <device>: <ms>/step (mean of K); largest, by <clock>: <the 3 rows a user acts
    on, each with its share, bound, intensity and what would move it>. Stage totals: <the top
    level's 3>`. `clock`: what every share is of (BreakdownResult.share_clock)."""
    steps = int(metrics["breakdown_recorded_steps"])
    phrases, said = [], set()
    for r in answer_rows(table):
        hint = move_hint(r)
        phrases.append(row_phrase(r) + (f" ({hint})" if hint and hint not in said else ""))
        said.add(hint)  # a hint said once
    largest = "; ".join(phrases)
    stages = ", ".join(
        f"{r['module']} {r['phase']} {fmt.pct(r['share'])}" for r in top_rows(table, tree)
    )
    return (
        f"{label} on {device_name}: {fmt.duration(metrics['breakdown_step_s'])}"
        f"/step (mean of {steps} recorded); largest, shares by {clock}: {largest}. "
        f"Stage totals: {stages}."
    )


def largest_tags(table: list[dict], clock: str) -> dict[str, str]:
    """The largest rows as the run's tags (columns of the breakdowns' saved view, short enough to
    read there): `breakdown_largest` the largest (`optimizer 9.5% (CPU clock)`),
    `breakdown_largest_3` the three, each with the clock of its share."""
    rows = [
        f"{names.row_label(r['module'], r['phase'])} {fmt.pct(r['share'])}"
        for r in answer_rows(table)
    ]
    if not rows:
        return {}
    short = names.SHORT_CLOCKS.get(clock, clock)
    return {
        "breakdown_largest": f"{rows[0]} ({short})",
        "breakdown_largest_3": f"{'; '.join(rows)} (by {clock})",
    }


def description(result: BreakdownResult) -> str:
    """The run's description: the summary line, the parts, coverage, where the ceilings came from."""
    m, c = result.metrics, result.ceilings
    parts = ", ".join(
        f"{p} {fmt.pct(m[f'breakdown_{p}_fraction'])}"
        for p in names.PARTS
        if m.get(f"breakdown_{p}_s", 0) > 0
    )
    roof = f"Ceilings: {c.dtype}, {c.source}." if c.known else f"Bound unknown: {c.why}."
    lines = [
        result.summary,
        *([result.above.sentence] if result.above else []),
        "",
        f"Step parts, by {result.share_clock} as every share here: {parts} (by the wall clock "
        f"they add up to {fmt.pct(m['breakdown_parts_sum_fraction'])} of breakdown_step_s).",
        f"Rows: {fmt.pct(m['breakdown_attributed_fraction'])} of the step named, "
        f"{fmt.pct(m['breakdown_module_fraction'])} in the model's modules; "
        f"{fmt.si(m['breakdown_flops_per_step'], 'FLOP')} counted per step, "
        f"{fmt.si(m['breakdown_bytes_per_step'], 'B')} modeled.",
        roof,
        f"Times: {_clock_phrase(result)}.",
        f"Trace: trace.json.gz holds {kept_phrase(result.trace)}. Open it at "
        "https://ui.perfetto.dev (Open trace file; the .gz as it is) or chrome://tracing; "
        "modules are the `module: <path>` ranges, backward nodes carry their module as an "
        "argument.",
    ]
    if result.counts_check:
        lines.append(f"Warning: {result.counts_check}.")
    return "\n".join(lines)


def _clock_phrase(result: BreakdownResult) -> str:
    """Which clock the times and the shares are."""
    if result.rec.time_source == "device":
        return "kernel time on the device; shares of breakdown_step_s"
    if result.att.share_clock == "thread_cpu":
        return (
            "host wall time (time_s); shares by the main thread's CPU clock (cpu_time_s), which "
            "does not count time the thread was preempted: steady on a busy machine"
        )
    return "host wall time; shares of breakdown_step_s"


def layers_csv(table: list[dict]) -> str:
    import pandas as pd

    return fmt.csv_frame(pd.DataFrame(table, columns=list(COLUMNS))).to_csv(index=False)


def breakdown_json(result: BreakdownResult) -> str:
    """The run's record as JSON: config, device, ceilings, metrics, the default view, the top rows."""
    c = result.ceilings
    view = [r for r in result.table if r["view"]]
    body = {
        "config_label": result.config_label,
        "config_key": result.config_key,
        "device_name": result.device_name,
        "time_source": result.rec.time_source,
        "step_wall_s": result.rec.step_wall_s,
        "step_window_s": result.att.step_window_s,
        "metrics": result.metrics,
        "ceilings": {
            "dtype": c.dtype,
            "peak_flops_per_s": c.peak_flops_per_s,
            "dram_bytes_per_s": c.dram_bytes_per_s,
            "source": c.source,
            "why_unknown": c.why,
        },
        "top": [
            {
                **{
                    k: r[k]
                    for k in ("module", "phase", "share", "bound", "intensity_flops_per_byte")
                },
                "move": move_hint(r),
            }
            for r in answer_rows(result.table)
        ],
        "stages": [
            {k: r[k] for k in ("module", "phase", "share", "bound", "intensity_flops_per_byte")}
            for r in top_rows(result.table, result.tree)
        ],
        "share_clock": result.att.share_clock,
        "share_clock_name": result.share_clock,
        "above_roof": None
        if result.above is None
        else {
            "rows": result.above.rows,
            "verdict": result.above.verdict,
            "sentence": result.above.sentence,
        },
        "trace": {k: v for k, v in result.trace.items() if k in ("kept", "kept_ms", "median_ms")},
        "view": view,
        "counts_check": result.counts_check or "ok",
    }
    return json.dumps(_finite(body), indent=1)


def _finite(value):
    """NaN and infinities as null (JSON has none)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def view_text(table: list[dict], tree) -> str:
    """What the command prints, the answer first: the rows a user acts on that take the most
    time (leaf modules and the step's own rows, with what would move each), then the top level
    (stage totals), then the rest of the step's own rows."""
    largest = answer_rows(table, VIEW_LEAVES)
    shown = {id(r) for r in largest}
    top = set(view_top(table, tree))
    sections = (
        ("largest rows: leaf modules and the step's own rows", largest, True),
        ("stage totals (top level)", _by_time(r for r in table if r["module"] in top), False),
        (
            "the rest of the step",
            _by_time(r for r in table if r["kind"] == "step" and id(r) not in shown),
            False,
        ),
    )
    cells = module_cells([r["module"] for _, rows, _ in sections for r in rows])
    width = max(len(c) for c in [*cells.values(), " " * MODULE_CHARS])
    lines = [f"{'module':<{width}} {'phase':<9} {'share':>7} {'ms':>9} {'FLOP/B':>8}  bound"]
    said: dict[str, str] = {}  # a hint said once -> the row that said it
    previous = ""
    for title, chosen, hints in sections:
        lines.append(f"-- {title}")
        for r in chosen:
            ai = r["intensity_flops_per_byte"]
            line = (
                f"{cells[r['module']]:<{width}} {r['phase']:<9} {fmt.pct(r['share']):>7} "
                f"{fmt.num(r['time_s'] * 1e3):>9} {fmt.num(ai) if math.isfinite(ai) else '':>8}  "
                f"{r['bound']}"
            )
            hint = full = move_hint(r) if hints else ""
            if hint and hint == previous:
                hint = "as above"
            elif hint and hint in said:  # said further up, with another hint between
                hint = f"as for {said[hint]}"
            said.setdefault(full, f"{r['module']} {r['phase']}")
            previous = full
            lines.append(f"{line}: {hint}" if hint else line)
    return "\n".join(lines)


MODULE_CHARS = 30
"""The module column's width on the console; a longer name keeps its end after '...'."""


def module_cells(names: list[str]) -> dict[str, str]:
    """Each module name as the console's column shows it: whole when it fits MODULE_CHARS, else
    '...' and its last characters (where names differ: `...er_layer_1.self_attention`); whole
    names for all when two shortened ones would read alike (main cut at 30 characters with no
    mark: two rows read `encoder.layers.encoder_layer_1`)."""
    short = {n: n if len(n) <= MODULE_CHARS else "..." + n[3 - MODULE_CHARS :] for n in names}
    if len(set(short.values())) < len(short):
        return {n: n for n in names}
    return short


def _by_time(rows) -> list[dict]:
    """Rows with time, largest share first (the share is what the table shows)."""
    share = lambda r: r["share"] if math.isfinite(r["share"]) else 0.0  # noqa: E731
    return sorted((r for r in rows if r["time_s"] > 0), key=lambda r: -share(r))
