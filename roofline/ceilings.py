"""A device's `Roof` from where its ceilings come from: a measured peaks run, the vendor table.

The rule (docs/analysis.md, "Ceilings"): each ceiling comes from the device's measured peaks run
when it measured it, else from the vendor table (with the user's --peaks-file), and `Roof.sources`
says which for every ceiling. Pure: a peaks run arrives as a row of analysis's runs layout
(`run_id`, `metrics.<key>`; roofline/store.py reads one, analysis/fetch reads many), a vendor entry
as roofline/vendor.py's VendorPeaks (or a dict with its fields).

Which peaks runs give the ceilings (best_roof) is the one rule the analysis (analysis/roofs.py)
and a run's own roofline (roofline/store.py, drawn when a train run ends) share. A peaks run is
quiet when the machine was lightly loaded while it measured, busy when other work competed with
it, or 'not recorded' (runs made before peaks runs logged their load). The ceilings come from the
quiet runs when there are any, else those that recorded no load, else the busy ones; among them
each ceiling is the highest measured: a busy machine measures a ceiling too low, never too high.
A load figure that is no measurement (negative, not finite, 1e9 CPUs) reads as not recorded, by
the one value rule common.load.load_value that analysis/screen.py applies too, so the run page
and the report name the same ceilings. Pure: no store, no plotting.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from common import bounds
from common.load import LOAD_METRICS, load_value
from common.stats import as_float
from common.fmt import short_id
from roofline.model import DTYPES, LEVELS, Roof, is_finite_positive


def roof_from_peaks_row(row: dict, device: str) -> Roof:
    """The ceilings a peaks run measured (`metrics.peak_flops_per_s_<dtype>`,
    `metrics.peak_<level>_bytes_per_s`), each sourced 'measured: peaks run <id>'; a value that is
    no device's peak (outside common.bounds: 1e-300 made the ridge point infinite) is left out."""
    roof = Roof(device)
    src = f"measured: peaks run {short_id(row['run_id'])}"
    for dtype in DTYPES:
        v = as_float(row.get(f"metrics.peak_flops_per_s_{dtype}"))
        if v is not None and bounds.MIN_RATE_PER_S <= v <= bounds.MAX_FLOPS_PER_S:
            roof.flops_per_s[dtype] = v
            roof.sources[f"flops:{dtype}"] = src
    for level in LEVELS:
        v = as_float(row.get(f"metrics.peak_{level}_bytes_per_s"))
        if v is not None and bounds.MIN_RATE_PER_S <= v <= _max_bytes_per_s(level):
            roof.bytes_per_s[level] = v
            roof.sources[f"bytes:{level}"] = src
    return roof


def _max_bytes_per_s(level: str) -> float:
    """The highest bandwidth a `level` ceiling may be (analysis/screen.py's bound for its key)."""
    return bounds.MAX_DRAM_BYTES_PER_S if level == "dram" else bounds.MAX_CACHE_BYTES_PER_S


def ceiling_problem(row: dict) -> str | None:
    """Why the peaks run `row` measured no ceilings at all, or None: one of its ceilings is there
    (not absent, not NaN) but no device's peak (not finite, or outside the bounds
    roof_from_peaks_row reads: those analysis/screen.py applies to the same keys, which leaves such
    a run out whole). Every reader of peaks runs leaves it out then (best_roof for a run's own
    roofline), so that no reader takes its other ceilings while another does not."""
    keys = [(f"peak_flops_per_s_{d}", bounds.MAX_FLOPS_PER_S) for d in DTYPES]
    keys += [(f"peak_{lv}_bytes_per_s", _max_bytes_per_s(lv)) for lv in LEVELS]
    for key, high in keys:
        value = row.get(f"metrics.{key}")
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        v = as_float(value)
        if v is None or not bounds.MIN_RATE_PER_S <= v <= high:
            return f"{key} = {value!r} is no peak"
    return None


def roof_from_vendor(entry: Any, device: str, label: str = "vendor") -> Roof | None:
    """Roof from a VendorPeaks-like object (flops_per_s, dram_bytes_per_s, source; optional
    l2_bytes_per_s / l1_bytes_per_s) or a dict with those keys; None when it gives no ceiling."""
    if entry is None:
        return None
    get = entry.get if isinstance(entry, dict) else (lambda k, d=None: getattr(entry, k, d))
    roof = Roof(device)
    src = f"{label}: {get('source', '') or 'no source given'}"
    for dtype, v in (get("flops_per_s", {}) or {}).items():
        if is_finite_positive(v):
            roof.flops_per_s[str(dtype)] = float(v)
            roof.sources[f"flops:{dtype}"] = src
    for level in LEVELS:
        v = get(f"{level}_bytes_per_s", None)
        if is_finite_positive(v):
            roof.bytes_per_s[level] = float(v)
            roof.sources[f"bytes:{level}"] = src
    return None if roof.is_empty() else roof


def measured_over_vendor(measured: Roof | None, vendor: Roof | None) -> Roof | None:
    """The roof a point is held against: every ceiling the peaks run measured, the vendor's for the
    others; None when neither knows the device."""
    if measured is None or measured.is_empty():
        return vendor
    return measured.merged_over(vendor)


PEAKS_LOAD_METRICS = list(LOAD_METRICS)
"""what a peaks run logs of the machine's load while it measured (common/load.py)"""
LOAD_QUIET_START = 0.5
"""a peaks run is trusted when the 1-minute load average when it started measuring was at most
this many times the machine's logical CPUs (other work was light) ..."""
LOAD_QUIET_MAX = 1.5
"""... and the highest load while it measured at most this many times the CPUs (a CPU peaks run
itself loads every core, about 1 x the CPUs; more means other work competed with it)."""
TRUST_ORDER = ("quiet", "not recorded", "busy")
"""which peaks runs give a device's ceilings: the quiet ones when there are any, else those that
recorded no load, else the busy ones; among them, each ceiling is the highest measured."""


def load_trust(start: float | None, top: float | None, cpus: float | None) -> str:
    """quiet | busy | not recorded, from the load averages at the start and at most, and the CPUs
    (None where not recorded)."""
    if start is None or top is None or cpus is None or cpus <= 0:
        return "not recorded"
    if start <= LOAD_QUIET_START * cpus and top <= LOAD_QUIET_MAX * cpus:
        return "quiet"
    return "busy"


def load_metrics(row: dict) -> dict[str, float | None]:
    """A peaks run's PEAKS_LOAD_METRICS from its row (`metrics.<key>`), None where it lacks one or
    holds no measurement (common.load.load_value)."""
    return {k: load_value(k, row.get(f"metrics.{k}")) for k in PEAKS_LOAD_METRICS}


def row_trust(row: dict) -> str:
    """The trust of a peaks run given as an analysis row (`metrics.<key>`)."""
    m = load_metrics(row)
    return load_trust(m["load_average_1m_start"], m["load_average_1m_max"], m["cpu_count"])


def trusted(rows: list[dict], trust_of: Callable[[dict], str] = row_trust) -> list[dict]:
    """The rows of the most trusted kind present (TRUST_ORDER)."""
    for kind in TRUST_ORDER:
        chosen = [r for r in rows if trust_of(r) == kind]
        if chosen:
            return chosen
    return []


def highest(rows: list[dict], dev: str) -> Roof:
    """Each ceiling the highest that the peaks runs `rows` measured, sourced to its run."""
    out = Roof(dev)
    for row in rows:
        roof = roof_from_peaks_row(row, dev)
        for d, v in roof.flops_per_s.items():
            if v > out.flops_per_s.get(d, 0.0):
                out.flops_per_s[d], out.sources[f"flops:{d}"] = v, roof.sources[f"flops:{d}"]
        for lv, v in roof.bytes_per_s.items():
            if v > out.bytes_per_s.get(lv, 0.0):
                out.bytes_per_s[lv], out.sources[f"bytes:{lv}"] = v, roof.sources[f"bytes:{lv}"]
    return out


def best_roof(rows: list[dict], dev: str) -> Roof | None:
    """The ceilings of `dev` from its peaks runs `rows` (analysis rows): each the highest among
    the most trusted runs that measured any; None when none measured one."""
    rows = [
        r for r in rows if ceiling_problem(r) is None and not roof_from_peaks_row(r, dev).is_empty()
    ]
    return highest(trusted(rows), dev) if rows else None
