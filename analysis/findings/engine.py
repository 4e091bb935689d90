"""The findings engine: the joined points of an analysis (analysis/core.py) plus ceilings, breakdown
runs, step-time series and prices in, one record per configuration and environment out, each with
its bound, fraction of the roof, cost, energy and findings. Pure: no MLflow, no files, no plots."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pandas as pd

from analysis import whatif
from analysis.findings import anomalies, bound, facts, moves, rules
from analysis.findings import breakdown as bd
from analysis.findings import cost as costs
from analysis.findings.prices import PriceTable
from analysis.findings.records import Finding, plain
from common import schema
from common.stats import as_float
from roofline.model import MEMORY_BOUND

KNOB_FIELDS = list(schema.CONFIG_KEY_FIELDS)
TOPIC_ORDER = {"bound": 0, "anomaly": 1, "move": 2, "breakdown": 3, "cost": 4}


@dataclass
class Findings:
    configs: list[dict] = field(default_factory=list)
    """one record per (environment, device, config): knobs, bound, fraction of roof, cost, energy
    and `findings` (Finding objects; `to_json` renders them)."""
    missing: list[str] = field(default_factory=list)
    """findings the numbers cannot carry, one line each with why (the report's "What is
    missing"): unstable configurations, fits that do not hold, speed-ups whose interval
    includes 1."""

    def headlines(self, n: int = 3) -> list[tuple[dict, Finding]]:
        """The `n` weightiest anomaly/move findings over all configs, one per kind before a second
        of any kind (ties: config order), then the first configs' bound findings."""
        ranked = [
            (f.weight, -i, c, f)
            for i, c in enumerate(self.configs)
            for f in c["findings"]
            if f.topic in ("anomaly", "move") and f.weight > 0
        ]
        ranked.sort(key=lambda t: (t[0], t[1]), reverse=True)
        seen: set[str] = set()  # a speed-up per knob counts as a kind of its own
        kinds = [f"{f.kind}:{f.values.get('knob', '')}" for _, _, _, f in ranked]
        first = [
            (c, f) for (_, _, c, f), k in zip(ranked, kinds) if k not in seen and not seen.add(k)
        ]
        rest = [(c, f) for _, _, c, f in ranked if not any(f is g for _, g in first)]
        out = (first + rest)[:n]
        for c in self.configs:
            if len(out) >= n:
                break
            out += [(c, f) for f in c["findings"] if f.kind == "bound"][:1]
        return out[:n]

    def to_json(self) -> dict:
        configs = []
        for c in self.configs:
            rec = {k: v for k, v in c.items() if k != "findings"}
            rec["findings"] = [f.to_json() for f in c["findings"]]
            configs.append(plain(rec))
        return {"configs": configs, "missing": list(self.missing)}


def series_wanted(train: pd.DataFrame, limit: int = 200) -> list[str]:
    """Runs whose step-time series the bimodality test needs: those with a CV over rules.STEP_CV
    (latest first, at most `limit`)."""
    if train.empty:
        return []
    cv = train["step_time_std_s"] / train["step_time_mean_s"]
    ok = cv.gt(rules.STEP_CV) & cv.lt(float("inf"))
    return list(train.loc[ok].sort_values("start_time", ascending=False)["run_id"].head(limit))


@dataclass
class Context:
    """What every configuration's rules share: the analysis, the peers, prices, step-time series,
    the runs that need no per-run look and the "What is missing" lines."""

    analysis: object
    peers: facts.Peers
    prices: PriceTable
    series: dict
    quiet: set
    missing: list[str]


def build(
    analysis,
    prices: PriceTable | None = None,
    breakdowns: list[dict] | None = None,
    series: dict[str, list[float]] | None = None,
    whatifs: list[dict] | None = None,
) -> Findings:
    """Findings for every point of `analysis` (core.Analysis, read and never changed): one record
    of facts per point (facts.py), the guarded fixed-time fits of the batch series, then each
    point's rules against its peers. `breakdowns`: analysis.fetch.breakdowns.fetch_breakdowns'
    list (screened); `series`: train run id -> step times (for the runs `series_wanted` names);
    `whatifs`: analysis.fetch.whatifs' list (screened): each move finding of a configuration a
    what-if checked carries that check (analysis/whatif.py attach)."""
    found = facts.build(analysis, bd.latest(breakdowns or []))
    fits, missing = bound.fixed_time_fits(found)
    found = [replace(f, fit=fits.get(f.idx)) for f in found]
    quiet = anomalies.quiet_runs(analysis.train, series)
    ctx = Context(
        analysis, facts.Peers(found), prices or PriceTable(), series or {}, quiet, missing
    )
    configs = [config_record(f, ctx) for f in found]
    checks = whatif.by_point(whatifs or [])
    for f, c in zip(found, configs):
        whatif.attach(c["findings"], checks.get((f.env, f.device, str(f.point["config_key"])), []))
    return Findings(configs, missing)


def config_record(f: facts.Facts, ctx: Context) -> dict:
    """One configuration's record (knobs, bound, roof, cost, energy) and its findings."""
    kind, fs = judged(f, ctx)
    p = f.point
    cost_fields, cost_finding = costs.cost(
        p["env_label"],
        p["device_name"],
        f.device_type,
        as_float(p.get("world_size"), positive=True) or 1,
        (f.throughput, f.step_ci_rel),
        ctx.prices,
    )
    energy_fields, energy_finding = costs.energy(list(f.runs))
    fs += [x for x in (cost_finding, energy_finding) if x is not None]
    fs.sort(key=lambda x: (TOPIC_ORDER[x.topic], -x.weight))
    return {**_fields(f, kind, ctx), **cost_fields, **energy_fields, "findings": fs}


def judged(f: facts.Facts, ctx: Context) -> tuple[str, list[Finding]]:
    """(its bound, its findings but cost and energy): an unstable configuration keeps the side of
    the ridge it sits on and its fraction of roof, shown as unreliable everywhere (the run's page
    shows them too), and gets only the finding that names it and its breakdown's facts."""
    b = f.breakdown
    if f.unstable:
        ctx.missing.append(
            f"{f.env}: {f.label} is unstable ({f.unstable}): its bound and fraction of roof are "
            "shown as unreliable; no move or anomaly finding is drawn from it"
        )
        side = ROOF_SIDE.get(str(f.point.get("bound") or ""), "unknown")
        return side, [unstable(f)] + (moves.breakdown_facts(b) if b is not None else [])
    kind, fs = roof_findings(f, ctx)
    peers = ctx.peers
    fs += anomalies.batch_drop(f, peers) + anomalies.peer_gap(f, peers)
    fs += moves.knob_moves(f, peers, ctx.missing) + moves.worker_moves(f, ctx.missing)
    fs += _peak_ratios(f, ctx)
    if b is not None:
        workers = ",".join(sorted({str(r.get("workers")) for r in f.runs if r.get("workers")}))
        fs += moves.breakdown_moves(b, workers) + moves.breakdown_facts(b)
    for r in f.runs:
        if r["run_id"] not in ctx.quiet:
            time_share = b.uncounted_time_share if b is not None else None
            fs += anomalies.run_anomalies(r, ctx.series.get(r["run_id"]), time_share)
    prof = anomalies.profile_disagreement(f.point, f.profile)
    return kind, fs + ([prof] if prof else [])


def _peak_ratios(f: facts.Facts, ctx: Context) -> list[Finding]:
    """The measured peak ratios for the precisions this config has no run of."""
    keys = [k for k in schema.comparison_keys("precision")]
    have = {str(g.point["precision"]) for g in ctx.peers.like(f, keys)}
    measured = ctx.analysis.roofs.get((f.env, f.device), {}).get("measured")
    precision = str(f.point["precision"])
    return moves.peak_ratio_moves(precision, f.device_type, measured, have | {precision})


def unstable(f: facts.Facts) -> Finding:
    """The finding that names an unstable configuration, its runs and what to do."""
    runs = [
        {"run_id": r["run_id"], "run_name": str(r.get("run_name") or ""), "samples_per_s": x}
        for r in f.runs
        if (x := facts.run_rate(r)) is not None
    ]
    values = {
        "why": f.unstable,
        "runs": runs,
        "spread": f.spread,
        "step_time_ci95_rel": f.step_ci_rel,
        "throughput_samples_per_s": f.throughput,
    }
    return Finding("unstable", "anomaly", values, f.run_ids, weight=1 + math.log(f.spread or 1))


def roof_findings(f: facts.Facts, ctx: Context) -> tuple[str, list[Finding]]:
    """(its bound, [the bound finding, and the ceiling-too-low or far-below-the-roof one])."""
    p = f.point
    kind, vals = bound.classify(f)
    frac = f.roof_fraction
    roof = {
        "fraction_of_roof": frac,
        "ceiling_kind": str(p.get("roof_source") or "none"),
        "ceiling_dtype": p.get("ceiling_dtype"),
    }
    values = {
        "bound": kind,
        **vals,
        **roof,
        "roof_side": ROOF_SIDE.get(str(p.get("bound") or "")),
        "ceiling_too_low": f.above_roof,
        "headroom_factor": f.headroom,
        **{k: p.get(k) for k in BOUND_POINT_KEYS},
    }
    out = [Finding("bound", "bound", values, f.run_ids)]
    if f.above_roof:
        out.append(ceiling_low(f, ctx.analysis.roofs.get((f.env, f.device), {})))
    elif frac is not None and frac < rules.FAR_BELOW_ROOF and kind in ("compute", "memory"):
        out.append(Finding("roof_far", "bound", {**roof, "headroom_factor": f.headroom}, f.run_ids))
    return kind, out


ROOF_SIDE = {"compute-bound": "compute", "memory-bound": "memory"}
BOUND_POINT_KEYS = (
    "intensity_flops_per_byte",
    "intensity_source",
    "ridge_flops_per_byte",
    "achieved_flops_per_s",
    "attainable_flops_per_s",
)


def ceiling_low(f: facts.Facts, roofs: dict) -> Finding:
    """A point above its roof: the ceiling it is held against is too low. Names that ceiling, the
    peaks run that measured it (when, under what load) and the vendor figure."""
    p = f.point
    memory = str(p.get("bound") or "") == MEMORY_BOUND
    key = "bytes:dram" if memory else f"flops:{p.get('ceiling_dtype')}"
    roof, vendor = roofs.get("roof"), roofs.get("vendor")
    source = roof.sources.get(key, "") if roof is not None else ""
    run = source.rsplit(" ", 1)[-1] if source.startswith("measured") else ""
    load = dict((roofs.get("peaks_runs") or {}).get(run) or {})
    intensity = p.get("intensity_flops_per_byte")
    values = {
        "ceiling": key,
        "ceiling_value": _ceiling(roof, key),
        "ceiling_source": source,
        "vendor_value": _ceiling(vendor, key),
        "achieved": p.get("achieved_flops_per_s") / intensity
        if memory
        else p.get("achieved_flops_per_s"),
        "unit": "B/s" if memory else "FLOP/s",
        "peaks_run": run,
        **{
            k: load.get(k)
            for k in (
                "start_time",
                "load_average_1m_start",
                "load_average_1m_max",
                "cpu_count",
                "trust",
            )
        },
    }
    return Finding("ceiling_low", "anomaly", values, f.run_ids, weight=1 + f.fraction)


def _ceiling(roof, key: str) -> float | None:
    if roof is None:
        return None
    kind, name = key.split(":", 1)
    v = (roof.bytes_per_s if kind == "bytes" else roof.flops_per_s).get(name)
    return float(v) if v is not None and math.isfinite(v) else None


def _fields(f: facts.Facts, kind: str, ctx: Context) -> dict:
    """The record's fields (knobs, where, the one statistic, spread, bound and roof)."""
    p = f.point
    roof = ctx.analysis.roofs.get((f.env, f.device), {}).get("roof")
    return {
        **{k: _value(p.get(k)) for k in KNOB_FIELDS},
        "env_label": f.env,
        "device_name": f.device,
        "device_type": f.device_type,
        "engine": str(p.get("distributed") or "none"),
        "world_size": _value(p.get("world_size")),
        "zero_stage": _value(p.get("zero_stage")),
        "config_key": p["config_key"],
        "label": f.label,
        "run_ids": f.run_ids,
        "throughput_samples_per_s": f.throughput,
        "step_time_mean_s": f.step_s,
        "step_time_ci95_rel": f.step_ci_rel,
        "throughput_spread_ratio": f.spread,
        "throughput_min_run_samples_per_s": p.get("throughput_min_run_samples_per_s"),
        "throughput_max_run_samples_per_s": p.get("throughput_max_run_samples_per_s"),
        "unstable": f.unstable or None,
        "bound": kind,
        "roof_side": ROOF_SIDE.get(str(p.get("bound") or "")),
        "fraction_of_roof": f.roof_fraction,
        "headroom_factor": f.headroom,
        "ceiling": {
            "dtype": p.get("ceiling_dtype"),
            "kind": str(p.get("roof_source") or "none"),
            "too_low": f.above_roof,
            "peak_flops_per_s": p.get("peak_flops_per_s"),
            "dram_bytes_per_s": p.get("dram_bytes_per_s"),
            "sources": dict(roof.sources) if roof is not None else {},
        },
        **{k: p.get(k) for k in BOUND_POINT_KEYS},
    }


def _value(v):
    """A knob as JSON shows it: whole numbers as ints, 'true'/'false' as booleans."""
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    x = as_float(v)
    if x is None:
        return None if isinstance(v, float) else v  # NaN: not logged; text: as it is
    return int(x) if x.is_integer() else x
