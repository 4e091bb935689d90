"""The report's hierarchical roofline section: for the latest FINISHED profile run of
each (environment, device, configuration) that logged `ncu/kernels_by_name.csv`, its kernels drawn
at DRAM, L2 and L1 intensity under the ceilings analysis holds that environment to (the measured
peaks run over the vendor table, as for every other figure; the vendor table alone for a profile
with no train run), its heaviest kernel names with the ceiling that bounds each under that roof
(recomputed here: the run's own table used the ceilings known when it was logged), and its
per-phase time-weighted intensities.

`collect` is the edge (reads the artifacts, draws the PNGs; it imports matplotlib only when it
draws, so an analysis without such profiles stays free of it, tests/test_analysis_sqlite.py);
`section` is pure (items -> report blocks, analysis/report.py's Block).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis import join
from analysis.markdown import Table
from common import schema
from common.errors import one_line
from common.fmt import short_id, si
from profiling.hierarchy.table import add_bounds
from roofline.ceilings import roof_from_vendor
from roofline.model import LEVELS

TABLE = "ncu/kernels_by_name.csv"
PHASES = "ncu/phase_levels.csv"
MAX_PROFILES = 8
"""profile runs drawn at most (the latest ones)."""
TOP = 8
"""kernel names listed per profile, longest time first."""
INTRO = (
    "Each kernel of a profile run (launches of one name summed) placed at its intensity at DRAM/HBM, "
    "L2 and L1 (FLOPs over the bytes that level moved) at its achieved FLOP/s under ncu, one point "
    "per level, area proportional to its time; against the bandwidth ceiling of each level and "
    "the compute ceilings per precision. Which ceiling is lowest at a kernel's intensities bounds "
    "it (`bound`). Half-precision CUDA-core FLOPs count each half instruction as two lanes "
    '(docs/profiling.md, "Half precision"). Raw values: the profile run\'s artifact '
    f"`{TABLE}` and `{PHASES}`."
)


def _latest_profiles(runs: pd.DataFrame | None) -> pd.DataFrame:
    if runs is None or runs.empty:
        return pd.DataFrame()
    kind, status = join.text(runs, f"tags.{schema.TAG_RUN_KIND}"), join.text(runs, "status")
    prof = runs[(kind == "profile") & (status == "FINISHED")].copy()
    if prof.empty:
        return prof
    if "start_time" in prof:
        prof = prof.sort_values("start_time", ascending=False)
    keys = [
        f"tags.{k}" for k in (schema.TAG_ENV_LABEL, schema.TAG_DEVICE_NAME, schema.TAG_CONFIG_KEY)
    ]
    for k in keys:
        prof[k] = join.text(prof, k)
    return prof.groupby(keys, sort=False).head(1).head(MAX_PROFILES)


def collect(runs, roofs: dict, vendor_lookup, folder: Path) -> tuple[list[dict], list[str]]:
    """([{run_id, label, device, title, path, figure, table, phases}] of the profile runs whose
    tables can be read, each figure drawn into `folder` (`figure`: its path relative to the
    report, folder's parent), one note per run whose table cannot be read)."""
    from analysis.fetch import _download_text

    items, notes = [], []
    for r in _latest_profiles(runs).to_dict("records"):
        env, dev = r[f"tags.{schema.TAG_ENV_LABEL}"], r[f"tags.{schema.TAG_DEVICE_NAME}"]
        try:
            table = pd.read_csv(io.StringIO(_download_text(r["run_id"], TABLE)))
            phases = pd.read_csv(io.StringIO(_download_text(r["run_id"], PHASES)))
        except Exception as exc:  # noqa: BLE001 - a profile made before these tables, a server error
            notes.append(
                f"profile run {short_id(r['run_id'])} has no readable {TABLE} ({one_line(exc)[:120]}): "
                "no hierarchical roofline for it (profiles logged before this version have none)"
            )
            continue
        roof = (roofs.get((env, dev)) or {}).get("roof")
        if roof is None and vendor_lookup is not None:
            roof = roof_from_vendor(vendor_lookup(dev), dev)
        table = add_bounds(table.drop(columns=["bound", "compute_ceiling"], errors="ignore"), roof)
        label = r.get(f"tags.{schema.TAG_CONFIG_LABEL}") or short_id(r["run_id"])
        title = f"Hierarchical roofline: {label} on {dev} ({env or 'no env_label'})"
        n_over = int((pd.to_numeric(table["roof_fraction"], errors="coerce") > 1).sum())
        if n_over:
            title += f": {n_over} kernel name(s) above their roof (the report says why)"
        from profiling.hierarchy.figure import hierarchical_png  # matplotlib: only when drawing

        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"hierarchical_{r['run_id'][:12]}.png"
        path.write_bytes(hierarchical_png(table, roof, title))
        items.append(
            dict(
                run_id=r["run_id"],
                label=label,
                device=dev,
                title=title,
                path=path,
                figure=str(path.relative_to(folder.parent)),
                table=table,
                phases=phases,
            )
        )
    return items, notes


def _num(v, unit: str = "") -> str:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return ""
    return si(v, unit) if math.isfinite(v) else ""


def kernels_table(table: pd.DataFrame, top: int = TOP) -> Table:
    """The `top` kernel names by time: name, phase, launches, time share, FLOPs, intensity per
    level, bound."""
    rows = []
    for r in table.sort_values("time_s", ascending=False).head(top).to_dict("records"):
        share = r.get("time_share")
        rows.append(
            [
                str(r["kernel_name"])[:90],
                r.get("phase") if isinstance(r.get("phase"), str) else "",
                int(r["count"]),
                f"{100 * share:.1f} %" if isinstance(share, float) and math.isfinite(share) else "",
                _num(r.get("flops"), "FLOP"),
                *[_num(r.get(f"intensity_{lv}_flops_per_byte")) for lv in LEVELS],
                _bound(r),
            ]
        )
    heads = ["kernel", "phase", "launches", "time share", "FLOPs", "AI DRAM", "AI L2", "AI L1"]
    return Table([*heads, "bound"], rows)


def _bound(r: dict) -> str:
    """The ceiling that bounds a kernel, and `above its roof (2.1x)` when its FLOP/s exceed it."""
    bound = r.get("bound") if isinstance(r.get("bound"), str) else ""
    frac = r.get("roof_fraction")
    if isinstance(frac, float) and math.isfinite(frac) and frac > 1:
        return f"{bound}, above its roof ({frac:.1f}x)"
    return bound


def above_roof(table: pd.DataFrame) -> str:
    """One sentence naming a profile's kernels above their roof and which evidence says why ('' when
    none is): ncu replays each kernel at locked clocks with flushed caches, which only slows it,
    so a kernel above its roof points at the ceiling, as a train point above its roof does."""
    if "roof_fraction" not in table:
        return ""
    over = table[pd.to_numeric(table["roof_fraction"], errors="coerce") > 1]
    if over.empty:
        return ""
    over = over.sort_values("roof_fraction", ascending=False)
    named = ", ".join(
        f"{str(r['kernel_name'])[:40]} {r['roof_fraction']:.1f}x ({r['bound']})"
        for r in over.head(3).to_dict("records")
    )
    more = f" and {len(over) - 3} more" if len(over) > 3 else ""
    return (
        f"Above the roof: {len(over)} kernel name(s) exceed the ceiling that bounds them: {named}"
        f"{more}. The ceiling looks too low: ncu times each kernel at locked clocks with flushed "
        "caches, which only lowers its FLOP/s; measure the device's ceilings with `python -m "
        "profiling.peaks` on a quiet machine (or give them with --peaks-file)."
    )


def phases_table(phases: pd.DataFrame) -> Table:
    """Per phase: launches, kernel time, FLOPs, time-weighted intensity per level (FLOP/byte)."""
    rows = [
        [
            r["phase"],
            int(r["launches"]),
            _num(r["time_s"], "s"),
            _num(r["flops"], "FLOP"),
            *[_num(r.get(f"time_weighted_intensity_{lv}_flops_per_byte")) for lv in LEVELS],
        ]
        for r in phases.to_dict("records")
    ]
    heads = ["phase", "launches", "kernel time", "FLOPs"]
    return Table([*heads, "time-weighted AI DRAM", "AI L2", "AI L1"], rows)


def section(items: Sequence[dict]) -> list[tuple] | None:
    """The section's body: the intro, per profile its line, figure and two tables; None without
    profiles (no section)."""
    if not items:
        return None
    out: list[tuple] = [("p", INTRO)]
    for it in items:
        out.append(
            ("p", f"**{it['label']}** on {it['device']}, profile run `{short_id(it['run_id'])}`:")
        )
        above = above_roof(it["table"])
        if above:
            out.append(("p", above))
        out.append(("figure", it["title"], it["figure"]))
        out.append(("table", kernels_table(it["table"])))
        out.append(("table", phases_table(it["phases"])))
    return out
