"""What would move a configuration, each with its number: the measured speed-up of a run of the same
config that differs in one knob (precision, channels_last, compile, batch size; loader workers
within the point's runs), else, for precision, the ratio of the device's measured ceilings; the
share of the step fusion could remove and the data wait more workers could remove (breakdown)."""

from __future__ import annotations

import math

from analysis.findings import breakdown as bd
from analysis.findings.records import Finding
from analysis.findings.values import Clean
from common import schema

KNOBS = ("precision", "batch_size", "channels_last", "compile")
SAME = schema.comparison_keys()
"""a point's identity: two points differ in one knob when all of these but that one are equal."""
PRECISIONS = ("fp32", "fp16", "bf16")


def _norm(v) -> str:
    """A knob's value for comparing: numbers as numbers ('32' == '32.0'), text lower-case."""
    try:
        x = float(v)
        return repr(x) if math.isfinite(x) else str(v)
    except (TypeError, ValueError):
        return str(v).strip().lower()


def index_by_all_but(points: list[dict], knob: str) -> dict[tuple, list[int]]:
    keys = [k for k in SAME if k != knob]
    out: dict[tuple, list[int]] = {}
    for idx, p in enumerate(points):
        out.setdefault(tuple(_norm(p.get(k, "")) for k in keys), []).append(idx)
    return out


def knob_moves(
    points: list[dict], idx: int, groups: dict[str, dict], thr: dict[int, tuple]
) -> list[Finding]:
    """Measured one-knob speed-ups from point `idx` to its siblings (for the batch size, the
    fastest other batch only). `thr`: point index -> (samples/s, relative 95 % CI half-width of
    its mean step time or None, run ids)."""
    p = points[idx]
    out = []
    if idx not in thr:
        return out
    t0, ci0, runs0 = thr[idx]
    for knob in KNOBS:
        key = tuple(_norm(p.get(k, "")) for k in SAME if k != knob)
        sibs = [j for j in groups[knob].get(key, []) if j != idx and j in thr]
        sibs = [j for j in sibs if _norm(points[j][knob]) != _norm(p.get(knob))]
        if knob == "batch_size" and sibs:
            sibs = [max(sibs, key=lambda j: thr[j][0])]
        for j in sibs:
            t1, ci1, runs1 = thr[j]
            out.append(
                speedup_finding(knob, p.get(knob), points[j][knob], t0, ci0, t1, ci1, runs0 + runs1)
            )
    return out


def speedup_finding(knob, frm, to, t0, ci0, t1, ci1, run_ids) -> Finding:
    """samples/s at `to` over samples/s at `frm`, with a 95 % interval from the two means'
    relative CIs combined to first order (sqrt(ci0² + ci1²)) where both are known."""
    s = t1 / t0
    ci = math.hypot(ci0, ci1) if ci0 is not None and ci1 is not None else None
    return Finding(
        "speedup",
        "move",
        {
            "knob": knob,
            "from": _show(frm),
            "to": _show(to),
            "speedup": s,
            "speedup_ci95": [s * (1 - ci), s * (1 + ci)] if ci is not None else None,
            "throughput_from": t0,
            "throughput_to": t1,
        },
        list(run_ids),
        weight=math.log(s) if s > 1 else 0.0,
    )


def _show(v):
    try:
        x = float(v)
        return int(x) if x.is_integer() else x
    except (TypeError, ValueError):
        return str(v)


def worker_moves(runs: list[dict], clean: Clean) -> list[Finding]:
    """Within one point's runs (workers is not part of config_key): each other `workers` value's
    mean samples/s over that of the fewest workers measured."""
    groups: dict[int, list[dict]] = {}
    for r in runs:
        where = f"train run {str(r['run_id'])[:8]}"
        w = clean.value(r.get("workers") or None, "workers", where)
        t = clean.value(r.get("throughput_samples_per_s"), "throughput_samples_per_s", where, True)
        if w is not None and t:
            groups.setdefault(int(w), []).append({"t": t, "id": r["run_id"]})
    if len(groups) < 2:
        return []
    mean = {w: sum(x["t"] for x in g) / len(g) for w, g in groups.items()}
    ids = {w: [x["id"] for x in g] for w, g in groups.items()}
    base = min(groups)
    return [
        speedup_finding("workers", base, w, mean[base], None, mean[w], None, ids[base] + ids[w])
        for w in sorted(groups)
        if w != base
    ]


def peak_ratio_moves(precision: str, device_type: str, measured, have: set[str]) -> list[Finding]:
    """For each other precision without a run of this config: the ratio of the device's measured
    peaks (`measured`: the Roof of its latest peaks run, or None), where both were measured."""
    if measured is None:
        return []
    out = []
    run = measured.sources.get(f"flops:{precision}", "").rsplit(" ", 1)[-1]
    for other in PRECISIONS:
        if other == precision or other in have or (device_type == "cpu" and other == "fp16"):
            continue
        a, b = measured.flops_per_s.get(precision), measured.flops_per_s.get(other)
        if not (a and b and math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0):
            continue
        ratio = b / a
        out.append(
            Finding(
                "peak_ratio",
                "move",
                {
                    "from": precision,
                    "to": other,
                    "ratio": ratio,
                    "peak_from": a,
                    "peak_to": b,
                    "peaks_run": run,
                },
                [],
                weight=0.25 * math.log(ratio) if ratio > 1 else 0.0,  # measured runs rank first
            )
        )
    return out


def breakdown_moves(b: bd.Breakdown, workers: str) -> list[Finding]:
    """Fusion (memory-bound normalisation/elementwise layers) and data wait, each an upper bound."""
    out = []
    share, n = bd.fusable_share(b.layers)
    if n and 0 < share < 1:
        out.append(
            Finding(
                "fusion",
                "move",
                {
                    "share": share,
                    "layers": n,
                    "max_speedup": 1 / (1 - share),
                    "breakdown_run": b.run_id,
                },
                [b.run_id],
                weight=math.log(1 / (1 - share)),
            )
        )
    wait = b.share(bd.DATA_PARTS)
    if wait is not None and 0 < wait < 1:
        out.append(
            Finding(
                "data_wait",
                "move",
                {
                    "share": wait,
                    "max_speedup": 1 / (1 - wait),
                    "breakdown_run": b.run_id,
                    "workers": workers,
                },
                [b.run_id],
                weight=math.log(1 / (1 - wait)),
            )
        )
    return out


def breakdown_facts(b: bd.Breakdown) -> list[Finding]:
    """Where the step goes: its parts, and the layers that take the most time with their bound."""
    out = []
    if b.fractions and b.step_s:
        parts = dict(sorted(b.fractions.items(), key=lambda kv: -kv[1]))
        out.append(
            Finding(
                "parts",
                "breakdown",
                {"parts": parts, "step_s": b.step_s, "breakdown_run": b.run_id},
                [b.run_id],
            )
        )
    top = bd.top_layers(b.layers)
    if top:
        out.append(
            Finding(
                "top_layers", "breakdown", {"layers": top, "breakdown_run": b.run_id}, [b.run_id]
            )
        )
    return out
