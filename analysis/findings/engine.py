"""The findings engine: the joined points of an analysis (analysis/core.py) plus ceilings, breakdown
runs, step-time series and prices in, one record per configuration and environment out, each with
its bound, fraction of the roof, cost, energy and findings. Pure: no MLflow, no files, no plots."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from analysis import join
from analysis.findings import anomalies, bound, moves, rules
from analysis.findings import breakdown as bd
from analysis.findings import cost as costs
from analysis.findings.prices import PriceTable
from analysis.findings.records import Finding, plain
from analysis.findings.values import Clean
from common import schema

KNOB_FIELDS = list(schema.CONFIG_KEY_FIELDS)
RUN_COLUMNS = [
    "run_id",
    "start_time",
    "device_type",
    "throughput_samples_per_s",
    "step_time_mean_s",
    "step_time_std_s",
    *join.FINDINGS_METRICS,
    *join.FINDINGS_TAGS,
    *join.FINDINGS_PARAMS,
]
"""the train runs' columns the findings read (one dict per run, made once)."""
PROFILE_COLUMNS = ["run_id", "metrics.ncu_flops_total", "params.profile_steps"]
TOPIC_ORDER = {"bound": 0, "anomaly": 1, "move": 2, "breakdown": 3, "cost": 4}


@dataclass
class Findings:
    configs: list[dict] = field(default_factory=list)
    """one record per (environment, device, config): knobs, bound, fraction of roof, cost, energy
    and `findings` (Finding objects; `to_json` renders them)."""
    notes: list[str] = field(default_factory=list)
    """values left out (non-finite, negative) and inputs that could not be used."""

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
        return {"configs": configs, "notes": list(self.notes)}


def records(frame: pd.DataFrame, cols: list[str]) -> list[dict]:
    """frame[cols].to_dict("records"), the same values, by whole columns (to_dict boxes each value
    of a pyarrow-backed string column one at a time: 1 s over 100,000 runs here)."""
    values = [frame[c].tolist() for c in cols]
    return [dict(zip(cols, row)) for row in zip(*values)]


def series_wanted(train: pd.DataFrame, limit: int = 200) -> list[str]:
    """Runs whose step-time series the bimodality test needs: those with a CV over rules.STEP_CV
    (latest first, at most `limit`)."""
    if train.empty:
        return []
    cv = train["step_time_std_s"] / train["step_time_mean_s"]
    ok = cv.gt(rules.STEP_CV) & cv.lt(float("inf"))
    return list(train.loc[ok].sort_values("start_time", ascending=False)["run_id"].head(limit))


def build(
    analysis,
    runs: pd.DataFrame,
    prices: PriceTable | None = None,
    breakdowns: list[dict] | None = None,
    series: dict[str, list[float]] | None = None,
) -> Findings:
    """Findings for every point of `analysis` (core.Analysis); long: the engine's one pass
    (per-point numbers, the cross-point rules, then each record's findings). `runs`: the runs frame
    (profile runs are read from it); `breakdowns`: analysis.fetch.breakdowns.fetch_breakdowns'
    list (the latest breakdown run per env, device and config, with breakdown.json and layers.csv);
    `series`: train run id -> step times (for the runs `series_wanted` names)."""
    clean = Clean()
    prices = prices or PriceTable()
    points = analysis.points.to_dict("records")
    train = analysis.train
    cols = [c for c in RUN_COLUMNS if c in train.columns]
    by_run = {r["run_id"]: r for r in records(train, cols)}
    by_config = bd.latest(breakdowns or [], clean)
    pr = join.of_kind(runs, "profile")
    pr = pr[[c for c in PROFILE_COLUMNS if c in pr.columns]]
    profiles = {r["run_id"]: r for r in pr.to_dict("records")}

    thr, step_s, frac = {}, {}, {}
    point_runs = [[by_run[r] for r in p["run_ids"] if r in by_run] for p in points]
    for idx, (p, prs) in enumerate(zip(points, point_runs)):
        where = f"{p['env_label']}: {p['label']}"
        t = clean.value(p.get("throughput_mean_samples_per_s"), "samples/s", where, positive=True)
        if t:
            thr[idx] = (t, costs.ci95_rel(prs, clean) if prs else None, list(p["run_ids"]))
        means = [
            m
            for r in prs
            if (
                m := clean.value(
                    r.get("step_time_mean_s"),
                    "step_time_mean_s",
                    f"train run {r['run_id'][:8]}",
                    True,
                )
            )
        ]
        if means:
            step_s[idx] = sum(means) / len(means)
        f = clean.value(p.get("fraction_of_roof"), "fraction of roof", where, positive=True)
        if f is not None:
            frac[idx] = f
    fits = bound.fixed_time_fits(points, step_s)
    groups = {k: moves.index_by_all_but(points, k) for k in moves.KNOBS}
    drops = anomalies.batch_drops(points, thr)
    gaps = anomalies.peer_gaps(points, frac)

    quiet = anomalies.quiet_runs(train, series)
    configs = []
    for idx, (p, prs) in enumerate(zip(points, point_runs)):
        key = (p["env_label"], p["device_name"], p["config_key"])
        b = by_config.get(key)
        rec = _record(p, idx, prs, thr, step_s, frac, fits, b, analysis, prices, clean)
        fs: list[Finding] = rec["findings"]
        fs += drops.get(idx, []) + ([gaps[idx]] if idx in gaps else [])
        fs += moves.knob_moves(points, idx, groups, thr) + moves.worker_moves(prs, clean)
        same = tuple(moves._norm(p.get(k, "")) for k in moves.SAME if k != "precision")
        have = {str(points[j]["precision"]) for j in groups["precision"].get(same, [])}
        measured = analysis.roofs.get((p["env_label"], p["device_name"]), {}).get("measured")
        fs += moves.peak_ratio_moves(str(p["precision"]), rec["device_type"], measured, have)
        if b is not None:
            workers = ",".join(sorted({str(r.get("workers")) for r in prs if r.get("workers")}))
            fs += moves.breakdown_moves(b, workers) + moves.breakdown_facts(b)
        for r in prs:
            if r["run_id"] not in quiet:
                fs += anomalies.run_anomalies(r, (series or {}).get(r["run_id"]), clean)
        prof = anomalies.profile_disagreement(p, profiles.get(p.get("profile_run_id") or ""), clean)
        fs += [prof] if prof else []
        fs.sort(key=lambda f: (TOPIC_ORDER[f.topic], -f.weight))
        configs.append(rec)
    return Findings(configs, clean.notes)


def _record(p, idx, prs, thr, step_s, frac, fits, b, analysis, prices, clean) -> dict:
    """One config record (knobs, bound, roof, cost, energy); long: the record's field list, one
    field a line. Cross-config findings are added by `build`."""
    device_type = next((r["device_type"] for r in prs if r.get("device_type")), "")
    f = frac.get(idx)
    kind, vals = bound.classify(p, b, fits.get(idx))
    roof_side = {"compute-bound": "compute", "memory-bound": "memory"}.get(
        str(p.get("bound") or "")
    )
    ceiling_kind = str(p.get("roof_source") or "none")
    headroom = 1 / f if f else None
    findings = [
        Finding(
            "bound",
            "bound",
            {
                "bound": kind,
                **vals,
                "roof_side": roof_side,
                "intensity_flops_per_byte": p.get("intensity_flops_per_byte"),
                "intensity_source": p.get("intensity_source"),
                "ridge_flops_per_byte": p.get("ridge_flops_per_byte"),
                "fraction_of_roof": f,
                "headroom_factor": headroom,
                "achieved_flops_per_s": p.get("achieved_flops_per_s"),
                "attainable_flops_per_s": p.get("attainable_flops_per_s"),
                "ceiling_dtype": p.get("ceiling_dtype"),
                "ceiling_kind": ceiling_kind,
            },
            list(p["run_ids"]),
        )
    ]
    roof_vals = {
        "fraction_of_roof": f,
        "ceiling_kind": ceiling_kind,
        "ceiling_dtype": p.get("ceiling_dtype"),
    }
    if f is not None and f > 1:
        findings.append(
            Finding("above_roof", "anomaly", roof_vals, list(p["run_ids"]), weight=1 + f)
        )
    elif f is not None and f < rules.FAR_BELOW_ROOF and kind in ("compute", "memory"):
        findings.append(
            Finding(
                "roof_far", "bound", {**roof_vals, "headroom_factor": headroom}, list(p["run_ids"])
            )
        )
    samples_per_s = thr.get(idx, (None,))[0]
    cost_fields, cost_finding = costs.cost(
        p["env_label"],
        p["device_name"],
        device_type,
        clean.value(p.get("world_size"), "world_size", p["label"]) or 1,
        samples_per_s,
        thr.get(idx, (None, None))[1],
        prices,
    )
    energy_fields, energy_finding = costs.energy(prs, clean)
    findings += [x for x in (cost_finding, energy_finding) if x is not None]
    roof = analysis.roofs.get((p["env_label"], p["device_name"]), {}).get("roof")
    return {
        **{k: _value(p.get(k)) for k in KNOB_FIELDS},
        "env_label": p["env_label"],
        "device_name": p["device_name"],
        "device_type": device_type,
        "engine": str(p.get("distributed") or "none"),
        "world_size": _value(p.get("world_size")),
        "zero_stage": _value(p.get("zero_stage")),
        "config_key": p["config_key"],
        "label": p["label"],
        "run_ids": list(p["run_ids"]),
        "throughput_samples_per_s": samples_per_s,
        "step_time_mean_s": step_s.get(idx),
        "bound": kind,
        "roof_side": roof_side,
        "fraction_of_roof": f,
        "headroom_factor": headroom,
        "ceiling": {
            "dtype": p.get("ceiling_dtype"),
            "kind": ceiling_kind,
            "peak_flops_per_s": p.get("peak_flops_per_s"),
            "dram_bytes_per_s": p.get("dram_bytes_per_s"),
            "sources": dict(roof.sources) if roof is not None else {},
        },
        "intensity_flops_per_byte": p.get("intensity_flops_per_byte"),
        "intensity_source": p.get("intensity_source"),
        "achieved_flops_per_s": p.get("achieved_flops_per_s"),
        "attainable_flops_per_s": p.get("attainable_flops_per_s"),
        **cost_fields,
        **energy_fields,
        "findings": findings,
    }


def _value(v):
    """A knob as JSON shows it: whole numbers as ints, 'true'/'false' as booleans."""
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    try:
        x = float(v)
    except (TypeError, ValueError):
        return v
    return int(x) if math.isfinite(x) and x.is_integer() else (x if math.isfinite(x) else None)
