"""Breakdown rows above their roof, named as a train point above its roof is (analysis's
`ceiling_low`): which rows, by how much, and which evidence says why.

A row's achieved FLOP/s (its counted FLOPs over its time) above the ceiling that bounds it is no
measurement of the row: either the ceiling is too low (a peaks run measured on a busy machine,
below the vendor's figure, or too short to reach the device's peak) or the row's time is too short
(a few microseconds per call, where the clocks' offset and the attribution's edges are a large
part of it). The record says which evidence points where, and the verdict follows it: the
description, layer_roofline.png and the analysis report all print `sentence`. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common import fmt
from profiling.breakdown.names import row_label
from profiling.breakdown.roof import Ceilings, roof_fraction

SHORT_CALL_S = 50e-6
"""a row whose time per call is under this is short enough for its edges to matter: the stamps'
clock offset is 1-3 us here (docs/breakdown.md) and every call has two edges"""
MANY_ROWS = 3
"""this many rows above one ceiling, none of them short, point at the ceiling rather than at
each row's time"""
SHOWN = 3
"""rows named in the sentence (the rest counted)"""


@dataclass(frozen=True)
class AboveRoof:
    """The rows above their roof and why (see the module docstring)."""

    rows: list[dict]
    """module, phase, share, roof_fraction, achieved_flops_per_s, time_per_call_s: largest
    excess first"""
    ceiling: str
    """the ceilings they exceed, as text: `fp32 41.3 GFLOP/s compute (measured: peaks run
    f755fa19)`"""
    verdict: str
    """ceiling | time | either | unknown: where the evidence points"""
    ceiling_evidence: list[str] = field(default_factory=list)
    time_evidence: list[str] = field(default_factory=list)

    @property
    def sentence(self) -> str:
        """One paragraph: the rows, the ceiling, the evidence, what to do."""
        lo = min(r["roof_fraction"] for r in self.rows)
        hi = max(r["roof_fraction"] for r in self.rows)
        span = f"{hi:.1f}x" if len(self.rows) == 1 else f"{lo:.1f}x to {hi:.1f}x"
        named = ", ".join(
            f"{row_label(r['module'], r['phase'])} {r['roof_fraction']:.1f}x "
            f"({fmt.si(r['achieved_flops_per_s'], 'FLOP/s')})"
            for r in self.rows[:SHOWN]
        )
        more = f" and {len(self.rows) - SHOWN} more" if len(self.rows) > SHOWN else ""
        n = len(self.rows)
        head = (
            f"Above the roof: {n} row{'s' if n > 1 else ''} reach{'' if n > 1 else 'es'} {span} "
            f"{'its' if n == 1 else 'their'} ceiling, {self.ceiling}: {named}{more}."
        )
        return f"{head} {VERDICTS[self.verdict](self)}"


def _ceiling_side(a: AboveRoof) -> str:
    return (
        f"The ceiling looks too low: {'; '.join(a.ceiling_evidence)}"
        + (f"; against that, {'; '.join(a.time_evidence)}" if a.time_evidence else "")
        + ". Rerun `python -m profiling.peaks` on a quiet machine, or give the device's figure "
        "with --peaks-file; no fraction of roof above 100 % is a measurement."
    )


def _time_side(a: AboveRoof) -> str:
    return (
        f"The rows' times look too short: {'; '.join(a.time_evidence)}. Their FLOP/s are not "
        "measurements of the kernels; compare shares, or record more steps (--iters)."
    )


def _either(a: AboveRoof) -> str:
    return (
        f"Either the ceiling is too low ({'; '.join(a.ceiling_evidence)}) or the rows' times "
        f"are too short ({'; '.join(a.time_evidence)}): rerun `python -m profiling.peaks` on a "
        "quiet machine first; no fraction of roof above 100 % is a measurement."
    )


def _unknown(a: AboveRoof) -> str:
    return (
        "Nothing measured says whether the ceiling is too low (a peaks run on a busy machine, "
        "a vendor figure above it) or the rows' times too short (their calls take "
        f"{fmt.duration(min(r['time_per_call_s'] for r in a.rows))} or more): rerun `python -m "
        "profiling.peaks` on a quiet machine; no fraction of roof above 100 % is a measurement."
    )


VERDICTS = {"ceiling": _ceiling_side, "time": _time_side, "either": _either, "unknown": _unknown}


def _fraction(r: dict, ceilings: Ceilings) -> float:
    """The row's fraction of its roof (its own `roof_fraction`, or computed as the table computes
    it for a row that lacks one: a kernel point)."""
    frac = r.get("roof_fraction")
    if isinstance(frac, float) and math.isfinite(frac):
        return frac
    ach, ai = r.get("achieved_flops_per_s", math.nan), r.get("intensity_flops_per_byte", math.nan)
    if not (isinstance(ach, float) and ach > 0 and isinstance(ai, float) and ai > 0):
        return math.nan
    return roof_fraction(ach, ai, ceilings)


def above_roof(
    table: list[dict], ceilings: Ceilings, time_source: str = "host"
) -> AboveRoof | None:
    """The rows of `table` above their roof with the evidence (module docstring); None when none
    is (or there are no ceilings). The rows a ceiling bounds: leaf modules (or kernels) and the
    step's own rows with counted FLOPs (a container's FLOP/s is its children's)."""
    if not ceilings.known:
        return None
    over = []
    for r in table:
        if not ((r.get("kind") == "module" and r.get("leaf")) or r.get("kind") == "step"):
            continue
        frac = _fraction(r, ceilings)
        if math.isfinite(frac) and frac > 1.0:
            calls = r["calls"] if r.get("calls", 0) > 0 else 1.0
            ai = r["intensity_flops_per_byte"]
            over.append(
                {
                    "module": r["module"],
                    "phase": r["phase"],
                    "share": r["share"],
                    "roof_fraction": frac,
                    "achieved_flops_per_s": r["achieved_flops_per_s"],
                    "time_per_call_s": r["time_s"] / calls,
                    "bounded_by": "dram"
                    if ai * ceilings.dram_bytes_per_s < ceilings.peak_flops_per_s
                    else "compute",
                }
            )
    if not over:
        return None
    over.sort(key=lambda r: -r["roof_fraction"])
    sides = {r["bounded_by"] for r in over}
    which = []
    if "compute" in sides:
        which.append(f"{ceilings.dtype} {fmt.si(ceilings.peak_flops_per_s, 'FLOP/s')} compute")
    if "dram" in sides:
        which.append(f"DRAM {fmt.si(ceilings.dram_bytes_per_s, 'B/s')}")
    ceiling = f"{' and '.join(which)} ({ceilings.source})"
    c_ev, t_ev = _ceiling_evidence(over, ceilings), _time_evidence(over, time_source)
    verdict = "either" if c_ev and t_ev else "ceiling" if c_ev else "time" if t_ev else "unknown"
    return AboveRoof(over, ceiling, verdict, c_ev, t_ev)


def _ceiling_evidence(over: list[dict], c: Ceilings) -> list[str]:
    out = []
    load = c.load_phrase()
    if load.startswith("busy"):
        out.append(f"the peaks run that measured it ran on a busy machine ({load})")
    if math.isfinite(c.vendor_flops_per_s) and c.vendor_flops_per_s > c.peak_flops_per_s:
        top = max(r["achieved_flops_per_s"] for r in over)
        under = (
            "every row is under it" if top <= c.vendor_flops_per_s else "some rows exceed it too"
        )
        out.append(
            f"the vendor figure is {fmt.si(c.vendor_flops_per_s, 'FLOP/s')} "
            f"({c.vendor_flops_per_s / c.peak_flops_per_s:.1f}x the measured one; {under})"
        )
    short = [r for r in over if r["time_per_call_s"] < SHORT_CALL_S]
    if len(over) >= MANY_ROWS and not short:
        fastest = min(r["time_per_call_s"] for r in over)
        out.append(
            f"{len(over)} rows exceed it, each {fmt.duration(fastest)} or more per call: "
            "one ceiling, not one row's clock"
        )
    return out


def _time_evidence(over: list[dict], time_source: str) -> list[str]:
    short = [r for r in over if r["time_per_call_s"] < SHORT_CALL_S]
    if not short:
        return []
    what = "the host clocks' offset (1-3 us) and each call's two edges"
    if time_source != "host":
        what = "a kernel's launch and timing granularity"
    quickest = min(r["time_per_call_s"] for r in short)
    return [
        f"{len(short)} of them take under {fmt.duration(SHORT_CALL_S)} per call (down to "
        f"{fmt.duration(quickest)}), where {what} are a large part of the time"
    ]
