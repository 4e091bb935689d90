"""The breakdown's text: the summary line, the run's description, layers.csv, breakdown.json and
the default view as the command prints it. Pure: rows and metrics in, text out."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from common import fmt
from profiling.breakdown import names
from profiling.breakdown.attribute import Attribution
from profiling.breakdown.record import Recording
from profiling.breakdown.roof import Ceilings
from profiling.breakdown.table import COLUMNS, ModuleTree
from train.config import TrainConfig


@dataclass(frozen=True)
class BreakdownResult:
    """A recording attributed, placed on the roofline and described: everything the run logs
    (profiling/breakdown/cli.py: analyse makes it, log_result logs it)."""

    cfg: TrainConfig
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


def summary_line(cfg, device_name, table, tree, metrics) -> str:
    """`<config> on <device>: <ms>/step (mean of K); <top 3 modules with bound>`."""
    from profiling.breakdown.table import row_phrase, top_rows

    steps = int(metrics["breakdown_recorded_steps"])
    tops = "; ".join(row_phrase(r) for r in top_rows(table, tree))
    return (
        f"{cfg.config_label()} on {device_name}: {fmt.num(metrics['breakdown_step_s'] * 1e3)} "
        f"ms/step (mean of {steps} recorded); most time: {tops}"
    )


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
        "",
        f"Step parts: {parts} (they add up to {fmt.pct(m['breakdown_parts_sum_fraction'])} of "
        "breakdown_step_s).",
        f"Rows: {fmt.pct(m['breakdown_attributed_fraction'])} of the step named, "
        f"{fmt.pct(m['breakdown_module_fraction'])} in the model's modules; "
        f"{fmt.si(m['breakdown_flops_per_step'], 'FLOP')} counted per step, "
        f"{fmt.si(m['breakdown_bytes_per_step'], 'B')} modeled.",
        roof,
        f"Times: {'kernel time on the device' if result.rec.time_source == 'device' else 'host time'}; "
        f"trace.json.gz holds {int(m['breakdown_trace_steps'])} of "
        f"{int(m['breakdown_recorded_steps'])} recorded steps.",
    ]
    if result.counts_check:
        lines.append(f"Warning: {result.counts_check}.")
    return "\n".join(lines)


def layers_csv(table: list[dict]) -> str:
    import pandas as pd

    return pd.DataFrame(table, columns=list(COLUMNS)).to_csv(index=False)


def breakdown_json(result: BreakdownResult) -> str:
    """The run's record as JSON: config, device, ceilings, metrics, the default view, the top rows."""
    from profiling.breakdown.table import top_rows

    cfg, c = result.cfg, result.ceilings
    view = [r for r in result.table if r["view"]]
    body = {
        "config_label": cfg.config_label(),
        "config_key": cfg.config_key(),
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
            {k: r[k] for k in ("module", "phase", "share", "bound", "intensity_flops_per_byte")}
            for r in top_rows(result.table, result.tree)
        ],
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
    """The default view as a fixed-width text table (what the command prints): its top level,
    the leaf modules that take the most time, then the rows that are not modules."""
    from profiling.breakdown.table import view_top

    top = set(view_top(table, tree))
    sections = (
        ("top level", lambda r: r["module"] in top),
        (
            "leaf modules that take the most time",
            lambda r: r["view"] and r["kind"] == "module" and r["module"] not in top,
        ),
        ("the rest of the step", lambda r: r["kind"] == "step"),
    )
    lines = [f"{'module':<30} {'phase':<9} {'share':>7} {'ms':>9} {'FLOP/B':>8}  bound"]
    for title, chosen in sections:
        lines.append(f"-- {title}")
        for r in sorted(
            (r for r in table if chosen(r) and r["time_s"] > 0), key=lambda r: -r["time_s"]
        ):
            ai = r["intensity_flops_per_byte"]
            lines.append(
                f"{r['module'][:30]:<30} {r['phase']:<9} {fmt.pct(r['share']):>7} "
                f"{fmt.num(r['time_s'] * 1e3):>9} {fmt.num(ai) if math.isfinite(ai) else '':>8}  "
                f"{r['bound']}"
            )
    return "\n".join(lines)
