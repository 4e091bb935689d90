"""What bounds a configuration: the rules (docs/analysis.md, "Findings"), first match wins.

1. data-bound: its breakdown run waits for data (data_wait + h2d_copy) >= DATA_BOUND_SHARE of the step;
2. host-bound: its breakdown run spends >= HOST_BOUND_SHARE of the step in host overhead
   (1 and 2 both true: the larger share wins);
3. latency/launch-bound: >= LATENCY_BOUND_SHARE of its step is fixed per-step time: the intercept
   of a least-squares line through (batch size, mean step time) over the points of its batch
   series (same environment, device and config but the batch size; at least two batch sizes);
4. compute- or memory-bound: the side of the ridge its intensity is on, under the roof its fraction
   of the roof is held against (roofline/model.py);
5. unknown: no ceiling and none of the above.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.findings import rules
from analysis.findings.breakdown import DATA_PARTS, HOST_PARTS, Breakdown
from common import schema
from roofline.model import COMPUTE_BOUND, MEMORY_BOUND

SERIES_KEYS = schema.comparison_keys("batch_size")
"""a batch series: points equal in all of these, differing in batch size."""


def series_key(p: dict) -> tuple:
    return tuple(str(p.get(k, "")).lower() for k in SERIES_KEYS)


def fixed_time_fits(points: list[dict], step_s: dict[int, float]) -> dict[int, dict]:
    """Per point index with a batch series of >= 2 batch sizes: the straight line step time =
    fixed + per_sample x batch through the series (least squares), and the fixed share of this
    point's step, clipped to [0, 1]. `step_s`: point index -> mean step time (seconds)."""
    groups: dict[tuple, list[int]] = {}
    for idx, p in enumerate(points):
        if idx in step_s and pd.notna(p.get("batch_size")):
            groups.setdefault(series_key(p), []).append(idx)
    out = {}
    for members in groups.values():
        b = np.array([float(points[i]["batch_size"]) for i in members])
        t = np.array([step_s[i] for i in members])
        if len(set(b)) < 2:
            continue
        per_sample, fixed = np.polyfit(b, t, 1)
        for i, bi, ti in zip(members, b, t):
            out[i] = {
                "fixed_step_s": float(fixed),
                "per_sample_s": float(per_sample),
                "fixed_share": float(min(1.0, max(0.0, fixed / ti))),
                "step_time_s": float(ti),
                "batches": sorted({int(x) for x in b}),
            }
    return out


def classify(p: dict, breakdown: Breakdown | None, fit: dict | None) -> tuple[str, dict]:
    """(bound, the values it rests on): compute | memory | latency | data | host | unknown."""
    if breakdown is not None:
        data, host = breakdown.share(DATA_PARTS), breakdown.share(HOST_PARTS)
        cands = []
        if data is not None and data >= rules.DATA_BOUND_SHARE:
            cands.append((data, "data", {"data_share": data}))
        if host is not None and host >= rules.HOST_BOUND_SHARE:
            cands.append((host, "host", {"host_share": host}))
        if cands:
            _, bound, vals = max(cands, key=lambda c: c[0])
            return bound, {**vals, "breakdown_run": breakdown.run_id}
    if fit is not None and fit["fixed_share"] >= rules.LATENCY_BOUND_SHARE:
        return "latency", dict(fit)
    side = {COMPUTE_BOUND: "compute", MEMORY_BOUND: "memory"}.get(str(p.get("bound") or ""))
    if side:
        return side, {}
    why = (
        f"no ceiling for {p.get('device_name')} (no peaks run, no vendor entry)"
        if not _finite(p.get("peak_flops_per_s"))
        else "no intensity (no profile run, no modeled intensity)"
    )
    return "unknown", {"why": why}


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
