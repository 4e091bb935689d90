"""A device's `Roof` from where its ceilings come from: a measured peaks run, the vendor table.

The rule (docs/analysis.md, "Ceilings"): each ceiling comes from the device's measured peaks run
when it measured it, else from the vendor table (with the user's --peaks-file), and `Roof.sources`
says which for every ceiling. Pure: a peaks run arrives as a row of analysis's runs layout
(`run_id`, `metrics.<key>`; roofline/store.py reads one, analysis/fetch reads many), a vendor entry
as roofline/vendor.py's VendorPeaks (or a dict with its fields).
"""

from __future__ import annotations

import math
from typing import Any

from common import bounds
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
    a run out whole). Every reader of peaks runs leaves it out then (roofline/trust.best_roof for a
    run's own roofline), so that no reader takes its other ceilings while another does not."""
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
