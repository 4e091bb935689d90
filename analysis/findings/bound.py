"""What bounds a configuration: the rules (docs/analysis.md, "Findings"), first match wins.

1. data-bound: its breakdown run waits for data (data_wait + h2d_copy) >= DATA_BOUND_SHARE of the step;
2. host-bound: its breakdown run spends >= HOST_BOUND_SHARE of the step in host overhead
   (1 and 2 both true: the larger share wins);
3. latency/launch-bound: >= LATENCY_BOUND_SHARE of its step is fixed per-step time: the intercept
   of a least-squares line through (batch size, run mean step time) over the runs of the stable
   points of its batch series (same environment, device, model and config but the batch size; at
   least two batch sizes and FIT_MIN_RUNS runs), only where that line has a positive slope and an
   intercept inside [0, the step time] whose 95 % CI excludes zero;
4. compute- or memory-bound: the side of the ridge its intensity is on, under the roof its fraction
   of the roof is held against (roofline/model.py);
5. unknown: no ceiling and none of the above.
"""

from __future__ import annotations

import math

import numpy as np

from analysis.findings import rules
from analysis.findings.breakdown import DATA_PARTS, HOST_PARTS
from analysis.findings.facts import SERIES_KEYS, Facts, run_step
from common.stats import as_float
from roofline.model import COMPUTE_BOUND, MEMORY_BOUND
from train.batch_fit import line as _line
from train.batch_fit import unfit as _unfit


def fixed_time_fits(facts: list[Facts]) -> tuple[dict[int, dict], list[str]]:
    """Per point index: the fixed-time fit of its batch series where the fit holds, and one line
    per series whose fit does not hold but would have named a latency bound (for "What is
    missing"). The fit: least squares of each stable run's mean step time against its batch
    (step = fixed + per_sample x batch) over the stable points of the series (same place, model
    and config but the batch); it holds when its slope is positive and its intercept lies in
    [0, each point's step time] with a 95 % CI (Student t, n - 2) above zero."""
    groups: dict[tuple, list[Facts]] = {}
    for f in facts:
        if f.step_s and not f.unstable and math.isfinite(_batch(f)):
            groups.setdefault(f.key(SERIES_KEYS), []).append(f)
    fits, missing = {}, []
    for members in groups.values():
        xy = [(_batch(f), s) for f in members for r in f.runs if (s := run_step(r))]
        if len({x for x, _ in xy}) < 2:
            continue
        line = _line(np.array(xy, dtype=float))
        why = _unfit(line, len(xy), [f.step_s for f in members])
        batches = sorted({int(x) for x, _ in xy})
        if why is None:
            for f in members:
                fits[f.idx] = _fit_values(line, f.step_s, batches)
        elif any(line["fixed"] / f.step_s >= rules.LATENCY_BOUND_SHARE for f in members):
            missing.append(
                f"{members[0].env}: {members[0].point.get('model')} batch series "
                f"{', '.join(map(str, batches))}: no latency finding, {why}"
            )
    return fits, missing


def _batch(f: Facts) -> float:
    try:
        return float(f.point.get("batch_size"))
    except (TypeError, ValueError):
        return math.nan


def _fit_values(line: dict, step_s: float, batches: list[int]) -> dict:
    return {
        "fixed_step_s": line["fixed"],
        "fixed_step_ci95_s": line["ci"],
        "per_sample_s": line["per_sample"],
        "fixed_share": line["fixed"] / step_s,
        "step_time_s": step_s,
        "batches": batches,
        "fit_runs": line["n"],
    }


def classify(f: Facts) -> tuple[str, dict]:
    """(bound, the values it rests on): compute | memory | latency | data | host | unknown."""
    b, p = f.breakdown, f.point
    if b is not None:
        data, host = b.share(DATA_PARTS), b.share(HOST_PARTS)
        cands = []
        if data is not None and data >= rules.DATA_BOUND_SHARE:
            cands.append((data, "data", {"data_share": data}))
        if host is not None and host >= rules.HOST_BOUND_SHARE:
            cands.append((host, "host", {"host_share": host}))
        if cands:
            _, bound, vals = max(cands, key=lambda c: c[0])
            return bound, {**vals, "breakdown_run": b.run_id}
    if f.fit is not None and f.fit["fixed_share"] >= rules.LATENCY_BOUND_SHARE:
        return "latency", dict(f.fit)
    side = {COMPUTE_BOUND: "compute", MEMORY_BOUND: "memory"}.get(str(p.get("bound") or ""))
    if side:
        return side, {}
    why = (
        f"no ceiling for {p.get('device_name')} (no peaks run, no vendor entry)"
        if as_float(p.get("peak_flops_per_s")) is None
        else "no intensity (no profile run, no modeled intensity)"
    )
    return "unknown", {"why": why}
