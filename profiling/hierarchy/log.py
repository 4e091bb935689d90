"""The hierarchical roofline logged with a `profile` run: `ncu/kernels_by_name.csv`
(profiling.hierarchy.table, with the ceiling that bounds each name), `ncu/phase_levels.csv` (per
phase: time-weighted intensity at each level), `ncu/hierarchical_roofline.png`
(profiling/hierarchy/figure.py) and, when a published table's conventions are asked
(--half-convention, --units-convention), the table in them. The ceilings are the device's peaks
runs on the same server chosen as analysis chooses them (roofline/ceilings.py), each one it lacks from the vendor table or --peaks-file, as
roofline/ceilings.py merges them.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from common import console
from common.errors import one_line
from profiling.hierarchy.table import (
    TableOptions,
    add_bounds,
    convention_table,
    kernels_by_name,
    phase_levels,
)
from profiling.ncu.totals import NcuSummary
from roofline.ceilings import measured_over_vendor, roof_from_vendor
from roofline.model import LEVELS, Roof

if TYPE_CHECKING:  # a type only: pandas costs seconds at startup
    import pandas as pd

FIGURE = "ncu/hierarchical_roofline.png"
TABLE = "ncu/kernels_by_name.csv"
PHASES = "ncu/phase_levels.csv"


def device_roof(session, device_name: str, env_label: str, peaks_file: str) -> Roof | None:
    """The ceilings of `device_name`: measured (roofline/store.py measured_roof) over vendor / --peaks-file."""
    from roofline.vendor import load_vendor_lookup

    measured = None
    if not session.offline:
        from roofline.store import measured_roof

        measured = measured_roof(device_name, env_label)
    vendor = roof_from_vendor(load_vendor_lookup(peaks_file)(device_name), device_name)
    return measured_over_vendor(measured, vendor)


def log_hierarchy(
    session,
    summary: NcuSummary,
    device_name: str,
    env_label: str,
    options: TableOptions,
    title: str,
) -> str:
    """Log the tables and the figure; the per-phase line for the run's description ("" when
    nothing could be drawn: one warning, never a failed run)."""
    table = kernels_by_name(summary.kernels)
    try:
        roof = device_roof(session, device_name, env_label, options.peaks_file)
    except Exception as exc:  # noqa: BLE001 - no ceilings is a figure without them, said once
        console.warn(f"no ceilings for the hierarchical roofline: {one_line(exc)[:300]}")
        roof = None
    table = add_bounds(table, roof)
    levels = phase_levels(table)
    session.log_text(TABLE, table.to_csv(index=False))
    session.log_text(PHASES, levels.to_csv(index=False))
    if options.asked:
        session.log_text(
            f"ncu/{options.table_name}", convention_table(table, options).to_csv(index=False)
        )
    from profiling.hierarchy.figure import hierarchical_png  # matplotlib: only when drawn

    _log_figure(session, hierarchical_png, table, roof, title)
    return levels_line(levels)


def _log_figure(session, draw, table: pd.DataFrame, roof: Roof | None, title: str) -> None:
    """Draw and log the figure. The session sends files when it flushes (or copies them into its
    spool when the store is out of reach), so the PNG's folder stays until then."""
    tmp = Path(tempfile.mkdtemp(prefix="hierarchical-"))
    try:
        path = tmp / "hierarchical_roofline.png"
        path.write_bytes(draw(table, roof, title))
        session.log_file(FIGURE, path)
        session.flush()
    except Exception as exc:  # noqa: BLE001 - a figure never fails the measured run
        console.warn(f"no {FIGURE}: {one_line(exc)[:300]}")
    if not session.offline:
        shutil.rmtree(tmp, ignore_errors=True)


def levels_line(levels: pd.DataFrame) -> str:
    """'Hierarchy: backward: time-weighted intensity DRAM 80.1, L2 20.3, L1 10.2 FLOP/byte; ...'."""
    parts = []
    for row in levels.to_dict("records"):
        ais = [
            f"{name} {row[f'time_weighted_intensity_{lv}_flops_per_byte']:.3g}"
            for lv, name in zip(LEVELS, ("DRAM", "L2", "L1"))
            if math.isfinite(row[f"time_weighted_intensity_{lv}_flops_per_byte"])
        ]
        if ais:
            parts.append(f"{row['phase']}: {', '.join(ais)}")
    if not parts:
        return ""
    return "Hierarchy (time-weighted intensity, FLOP/byte): " + "; ".join(parts)
