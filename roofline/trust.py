"""Which peaks runs give a device's ceilings: the one rule the analysis (analysis/roofs.py
measured_roofs) and a run's own roofline (roofline/store.py, drawn when a train run ends) share.

A peaks run is quiet when the machine was lightly loaded while it measured, busy when other work
competed with it, or 'not recorded' (runs made before peaks runs logged their load). The ceilings
come from the quiet runs when there are any, else those that recorded no load, else the busy ones;
among them each ceiling is the highest measured: a busy machine measures a ceiling too low, never
too high. A load figure that is no measurement (negative, not finite, 1e9 CPUs) reads as not
recorded, by the one value rule common.load.load_value that analysis/screen.py applies too, so
the run page and the report name the same ceilings. Pure: no store, no plotting.
"""

from __future__ import annotations

from typing import Callable

from common.load import LOAD_METRICS, load_value
from roofline.ceilings import ceiling_problem, roof_from_peaks_row
from roofline.model import Roof

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
