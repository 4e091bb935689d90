"""What would move a configuration, each with its number: the measured speed-up of a run of the same
config that differs in one knob (precision, channels_last, compile, batch size; loader workers
within the point's runs), else, for precision, the ratio of the device's measured ceilings; the
share of the step fusion could remove and the data wait more workers could remove (breakdown)."""

from __future__ import annotations

import math

from analysis.findings import breakdown as bd
from analysis.findings.facts import Facts, Peers, run_step
from analysis.findings.records import KNOB_TEXT, Finding
from common import schema
from common.stats import as_float, excludes_one, ratio_interval
from train.config import data_kind

KNOBS = ("precision", "batch_size", "channels_last", "compile")
PRECISIONS = ("fp32", "fp16", "bf16")
MIN_WAIT_SHARE = 0.0005
"""The least data wait offered as a move: a smaller one prints as 0.0 %."""


def knob_moves(f: Facts, peers: Peers, missing: list[str]) -> list[Finding]:
    """Measured one-knob speed-ups from `f` to its stable siblings (same place, model and config
    but one knob; for the batch size, the fastest other batch only), each claimed only when its
    95 % interval excludes 1 (else a line in `missing`)."""
    out = []
    if not f.throughput or f.unstable:
        return out
    for knob in KNOBS:
        sibs = [g for g in peers.like(f, schema.comparison_keys(knob)) if g.throughput]
        sibs = [g for g in sibs if not g.unstable]
        if knob == "batch_size" and sibs:
            sibs = [max(sibs, key=lambda g: g.throughput)]
        for g in sibs:
            side = (f.throughput, f.ratio_ci, g.throughput, g.ratio_ci)
            found = speedup(knob, f.point.get(knob), g.point.get(knob), side, f.run_ids + g.run_ids)
            out += _claimed(found, f"{f.env}: {f.label}", missing)
    return out


def speedup(knob, frm, to, side: tuple, run_ids) -> Finding:
    """samples/s at `to` over samples/s at `frm`; side = (t0, ci0, t1, ci1): the two samples/s
    and the relative 95 % half-widths of their mean step times; the interval on the log scale
    (common.stats.ratio_interval)."""
    t0, ci0, t1, ci1 = side
    s = t1 / t0
    return Finding(
        "speedup",
        "move",
        {
            "knob": knob,
            "from": _show(frm),
            "to": _show(to),
            "speedup": s,
            "speedup_ci95": ratio_interval(s, ci0, ci1),
            "throughput_from": t0,
            "throughput_to": t1,
        },
        list(run_ids),
        weight=math.log(s) if s > 1 else 0.0,
    )


def _claimed(found: Finding, where: str, missing: list[str]) -> list[Finding]:
    """[found] when its interval excludes 1; else [] and, from the faster side only (one line a
    pair), a line saying why no speed-up is claimed."""
    v = found.values
    if excludes_one(v["speedup_ci95"]):
        return [found]
    if v["speedup"] > 1:
        ci = v["speedup_ci95"]
        why = (
            f"its 95% interval {ci[0]:.3g}-{ci[1]:.3g} includes 1"
            if ci
            else "no step-time CI to give it an interval"
        )
        missing.append(
            f"{where}: {KNOB_TEXT[v['knob']](v['from'], v['to'])} measured ×{v['speedup']:.3g} "
            f"but no speed-up is claimed: {why} (more runs or --iters auto would narrow it)"
        )
    return []


def _show(v):
    try:
        x = float(v)
        return int(x) if x.is_integer() else x
    except (TypeError, ValueError):
        return str(v)


def worker_moves(f: Facts, missing: list[str]) -> list[Finding]:
    """Within one stable point's runs (workers is not part of config_key): each other `workers`
    value's samples/s (batch x world size / the pooled mean step time of its runs) over that of
    the fewest workers measured, claimed when its interval excludes 1."""
    groups: dict[int, list[dict]] = {}
    for r in f.runs:
        w = r.get("workers")
        if run_step(r) and str(w or "").strip().isdigit():
            groups.setdefault(int(str(w).strip()), []).append(r)
    if len(groups) < 2 or f.unstable or not f.throughput:
        return []
    per_step = f.throughput * f.step_s
    stats = {w: _pooled(g) for w, g in groups.items()}
    base = min(groups)
    out = []
    for w in sorted(groups)[1:]:
        (m0, ci0), (m1, ci1) = stats[base], stats[w]
        ids = [r["run_id"] for r in groups[base] + groups[w]]
        found = speedup("workers", base, w, (per_step / m0, ci0, per_step / m1, ci1), ids)
        out += _claimed(found, f"{f.env}: {f.label}", missing)
    return out


def _pooled(runs: list[dict]) -> tuple[float, float | None]:
    """(mean step time over the runs' measured steps, the relative 95 % CI: the one run's own, or
    the largest of several runs' own: a conservative stand-in for the CI of their pool)."""
    n = [1.0 if (k := as_float(r.get("measured_iters"))) is None else k for r in runs]
    mean = sum(k * run_step(r) for k, r in zip(n, runs)) / sum(n)
    cis = [r.get("step_time_ci95_rel") for r in runs]
    return mean, max(cis) if all(as_float(c) is not None for c in cis) else None


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
    # synthetic data has no loader (main offered "more workers could remove up to 0.0 %"); a wait
    # that rounds to 0.0 % is nothing to remove
    if wait is not None and MIN_WAIT_SHARE <= wait < 1 and not _synthetic(b):
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


def _synthetic(b: bd.Breakdown) -> bool:
    """The breakdown ran on synthetic data (its `data` param says so: one resident batch)."""
    return bool(b.data) and data_kind(b.data) == "synthetic"


def breakdown_facts(b: bd.Breakdown) -> list[Finding]:
    """Where the step goes: its parts, the rows that take the most time with their bound (in
    the breakdown's own ranking), and its rows above their roof."""
    out = []
    if b.fractions and b.step_s:
        parts = dict(sorted(b.fractions.items(), key=lambda kv: -kv[1]))
        out.append(
            Finding(
                "parts",
                "breakdown",
                {"parts": parts, "step_s": b.step_s, "breakdown_run": b.run_id, "clock": b.clock},
                [b.run_id],
            )
        )
    top = bd.top_layers(b)
    if top:
        values = {"layers": top, "breakdown_run": b.run_id, "clock": b.clock}
        out.append(Finding("top_layers", "breakdown", values, [b.run_id]))
    if b.above_roof:
        values = {"sentence": b.above_roof, "breakdown_run": b.run_id}
        out.append(Finding("breakdown_above_roof", "breakdown", values, [b.run_id]))
    return out
