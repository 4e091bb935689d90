"""Which peaks runs give a device's ceilings: the one rule the analysis (analysis/join.py
measured_roofs) and a run's own roofline (roofline/store.py, drawn when a train run ends) share.

A peaks run is quiet when the machine was lightly loaded while it measured, busy when other work
competed with it, or 'not recorded' (runs made before peaks runs logged their load). The ceilings
come from the quiet runs when there are any, else those that recorded no load, else the busy ones;
among them each ceiling is the highest measured: a busy machine measures a ceiling too low, never
too high. A load figure that is no measurement (negative, not finite, 1e9 CPUs) is read as not
recorded, by the one value rule `load_value` that analysis/screen.py applies too: main's run page
took a run with a load average of -1 or 1e9 CPUs for a quiet one while the analysis blanked the
value, and the two named different ceilings. Pure: no store, no plotting.
"""

from __future__ import annotations

import math
from typing import Callable

from roofline.ceilings import roof_from_peaks_row
from roofline.model import Roof

PEAKS_LOAD_METRICS = ["load_average_1m_start", "load_average_1m_max", "cpu_count"]
"""what a peaks run logs of the machine's load while it measured (profiling/peaks/load.py)"""
LOAD_QUIET_START = 0.5
"""a peaks run is trusted when the 1-minute load average when it started measuring was at most
this many times the machine's logical CPUs (other work was light) ..."""
LOAD_QUIET_MAX = 1.5
"""... and the highest load while it measured at most this many times the CPUs (a CPU peaks run
itself loads every core, about 1 x the CPUs; more means other work competed with it)."""
TRUST_ORDER = ("quiet", "not recorded", "busy")
"""which peaks runs give a device's ceilings: the quiet ones when there are any, else those that
recorded no load, else the busy ones; among them, each ceiling is the highest measured."""


MAX_LOAD_AVERAGE = 1e6
"""The highest load average a machine reports: a million runnable tasks (Linux's 1-minute load
average counts the tasks running or waiting to run)."""
MAX_CPU_COUNT = 65536
"""The most logical CPUs a machine has: 8x Linux's largest NR_CPUS configuration (8,192)."""
LOAD_BOUNDS: dict[str, tuple[float, bool, float]] = {
    "load_average_1m_start": (0.0, False, MAX_LOAD_AVERAGE),
    "load_average_1m_max": (0.0, False, MAX_LOAD_AVERAGE),
    "cpu_count": (1.0, False, MAX_CPU_COUNT),
}
"""What each of PEAKS_LOAD_METRICS may be (least, whether only above it, most): the value rule of
every reader (this module for a run's own roofline, analysis/screen.py for the analysis)."""


def load_value(key: str, value) -> float:
    """`value` of load metric `key` as a float, NaN when it is absent or no measurement
    (LOAD_BOUNDS): such a run's load is 'not recorded' in every reader."""
    v = _float(value)
    low, strict, high = LOAD_BOUNDS[key]
    if not math.isfinite(v) or v < low or (strict and v <= low) or v > high:
        return math.nan
    return v


def load_trust(start: float, top: float, cpus: float) -> str:
    """quiet | busy | not recorded, from the load averages at the start and at most, and the CPUs."""
    if not (math.isfinite(start) and math.isfinite(top) and math.isfinite(cpus) and cpus > 0):
        return "not recorded"
    if start <= LOAD_QUIET_START * cpus and top <= LOAD_QUIET_MAX * cpus:
        return "quiet"
    return "busy"


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def load_metrics(row: dict) -> dict[str, float]:
    """A peaks run's PEAKS_LOAD_METRICS from its row (`metrics.<key>`), NaN where it lacks one or
    holds no measurement (load_value)."""
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
    rows = [r for r in rows if not roof_from_peaks_row(r, dev).is_empty()]
    return highest(trusted(rows), dev) if rows else None
