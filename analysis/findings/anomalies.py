"""Anomalies (docs/analysis.md, "Findings"): throughput falling as batch grows, a device far below
its peers' fraction of the roof, variable or bimodal steps, clock throttling, device memory near
capacity, profile and train runs that disagree, a point above its roof. Each rule's threshold is
in analysis/findings/rules.py. Pure."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis import join
from analysis.findings import rules
from common import schema
from analysis.findings.facts import SERIES_KEYS, Facts, Peers
from analysis.findings.records import Finding
from common.stats import as_float, ratio_interval


def batch_drop(f: Facts, peers: Peers) -> list[Finding]:
    """A drop from the next smaller batch of `f`'s series (stable points of the same place, model
    and config) to `f` (rules.BATCH_DROP), claimed when the interval of the ratio of the two
    samples/s lies below 1 (noise is not a drop)."""
    if not f.throughput or f.unstable:
        return []
    smaller = [
        g
        for g in peers.like(f, SERIES_KEYS)
        if g.throughput and not g.unstable and _batch(g) < _batch(f)
    ]
    if not smaller:
        return []
    a = max(smaller, key=_batch)
    ratio = f.throughput / a.throughput
    ci = ratio_interval(ratio, a.ratio_ci, f.ratio_ci)
    drop = 1 - ratio
    if drop < rules.BATCH_DROP or (ci is not None and ci[1] >= 1):
        return []
    values = {
        "batch_small": _batch(a),
        "batch_large": _batch(f),
        "throughput_small": a.throughput,
        "throughput_large": f.throughput,
        "drop": drop,
    }
    return [Finding("batch_drop", "anomaly", values, a.run_ids + f.run_ids, weight=1 + drop)]


def _batch(f: Facts) -> float:
    return float(f.point["batch_size"])


def peer_gap(f: Facts, peers: Peers) -> list[Finding]:
    """`f`'s fraction of the roof under rules.PEER_GAP x the best fraction another environment
    reaches on the same config and the same device name (both stable, neither above its roof: a
    ceiling that is too low says nothing about the point)."""
    if f.fraction is None or f.unstable or f.above_roof:
        return []
    same = [
        g
        for g in peers.like(f, ["config_key", "device_name"])
        if g.fraction is not None and not g.unstable and not g.above_roof
    ]
    if not same:
        return []
    best = max(same, key=lambda g: g.fraction)
    if not f.fraction < rules.PEER_GAP * best.fraction:
        return []
    values = {
        "fraction_of_roof": f.fraction,
        "peer_env": best.env,
        "peer_device": best.device,
        "peer_fraction": best.fraction,
    }
    weight = 1 + best.fraction / max(f.fraction, 1e-9) / 10
    return [Finding("peer_gap", "anomaly", values, f.run_ids + best.run_ids, weight=weight)]


def bimodality(times) -> dict | None:
    """Two modes in a run's step times, or None (fewer than 10 steps, or one mode).

    A Gaussian kernel density of the times (Silverman's rule-of-thumb bandwidth, floored at 0.1 %
    of the mean step) has two peaks with a valley between them at most rules.BIMODAL_DIP of the
    smaller peak, and each side of the valley holds rules.BIMODAL_MIN_SHARE of the steps (and 3
    steps). On drawn samples normal and uniform steps never passed, exponential ones 4 to 13 % of
    the time at 20-50 steps and never from 200 (docs/analysis.md)."""
    positive = [x for x in times if as_float(x, positive=True) is not None]
    t = np.sort(np.asarray(positive, dtype=float))
    n = t.size
    if n < 10:
        return None
    q75, q25 = np.percentile(t, [75, 25])
    spread = min(t.std(ddof=1), (q75 - q25) / 1.34) or t.std(ddof=1)
    h = max(0.9 * spread * n**-0.2, 1e-3 * t.mean())
    grid = np.linspace(t[0] - 3 * h, t[-1] + 3 * h, 512)
    dens = np.exp(-0.5 * ((grid[:, None] - t) / h) ** 2).sum(axis=1)
    peaks = [i for i in range(1, len(grid) - 1) if dens[i - 1] < dens[i] >= dens[i + 1]]
    if len(peaks) < 2:
        return None
    top = max(peaks, key=lambda i: dens[i])
    best = None
    for p in peaks:
        if p == top:
            continue
        a, b = sorted((p, top))
        valley = a + int(np.argmin(dens[a : b + 1]))
        depth = float(dens[valley] / min(dens[p], dens[top]))
        fast, slow = t[t < grid[valley]], t[t >= grid[valley]]
        small = min(len(fast), len(slow))
        if depth > rules.BIMODAL_DIP or small < max(3, rules.BIMODAL_MIN_SHARE * n):
            continue
        if best is None or depth < best["valley_depth"]:
            best = {
                "valley_depth": depth,
                "fast_mean_s": float(fast.mean()),
                "slow_mean_s": float(slow.mean()),
                "slow_share": len(slow) / n,
                "steps": n,
            }
    return best


def run_anomalies(
    run: dict, series: list[float] | None, uncounted_time_share: float | None = None
) -> list[Finding]:
    """Variability, bimodal steps, throttling, memory near capacity and counted FLOPs that left
    ops out (`uncounted_time_share`: a breakdown's, flops_incomplete) of one train run."""
    rid = run["run_id"]
    out = []
    mean = as_float(run.get("step_time_mean_s"), positive=True)
    std = as_float(run.get("step_time_std_s"), nonnegative=True)
    steps = as_float(run.get("measured_iters"), nonnegative=True)
    if mean and std is not None and std / mean > rules.STEP_CV:
        out.append(
            Finding(
                "variability",
                "anomaly",
                {
                    "cv": std / mean,
                    "std_s": std,
                    "mean_s": mean,
                    "steps": steps or 0,
                    "run_id": rid,
                },
                [rid],
                weight=1 + std / mean,
            )
        )
    if series:
        bi = bimodality(series)
        if bi:
            out.append(Finding("bimodal", "anomaly", {**bi, "run_id": rid}, [rid], weight=1.5))
    th = throttling(run)
    if th:
        out.append(th)
    uncounted = flops_incomplete(run, uncounted_time_share)
    if uncounted:
        out.append(uncounted)
    peak = as_float(run.get("device_peak_mem_bytes"), nonnegative=True)
    total = as_float(run.get("device_mem_total_bytes"), positive=True)
    if peak is not None and total and peak / total >= rules.MEMORY_NEAR_CAPACITY:
        out.append(
            Finding(
                "memory_near_capacity",
                "anomaly",
                {"peak_bytes": peak, "total_bytes": total, "share": peak / total, "run_id": rid},
                [rid],
                weight=1 + peak / total,
            )
        )
    return out


def flops_incomplete(run: dict, time_share: float | None = None) -> Finding | None:
    """A train run whose counted FLOPs leave out ops with no formula (tag flops_coverage,
    train/ledger.py) when their share of the step is at least rules.UNCOUNTED_SHARE: their time
    share where a breakdown of the config measured it (`time_share`: the own time of the rows
    that ran them), else their share of the run's modeled bytes."""
    if str(run.get(schema.TAG_FLOPS_COVERAGE) or "") != "incomplete":
        return None
    of = "of the step's time (the breakdown's rows that ran them)"
    share = as_float(time_share, nonnegative=True)
    if share is None:
        of = "of the step's modeled bytes"
        share = as_float(run.get(schema.METRIC_UNCOUNTED_BYTES_SHARE), nonnegative=True)
    if share is None or share < rules.UNCOUNTED_SHARE:
        return None
    ops = str(run.get(schema.TAG_FLOPS_UNCOUNTED) or "").replace(",", ", ") or "unnamed ops"
    rid = run["run_id"]
    values = {"ops": ops, "share": share, "of": of, "run_id": rid}
    return Finding("flops_incomplete", "anomaly", values, [rid], weight=2 + share)


def quiet_runs(train: pd.DataFrame, series: dict | None = None) -> set:
    """Run ids of `train` for which run_anomalies finds nothing and notes nothing, by whole
    columns (calling it on each of 10,000 runs took 0.1 s here): every value it reads missing or
    clean, a step-time CV within rules.STEP_CV, memory below rules.MEMORY_NEAR_CAPACITY, no NVML
    sample, no step-time series. Conservative: a run it leaves out is judged one by one."""
    if train.empty or "run_id" not in train:
        return set()

    ok = pd.Series(True, index=train.index)
    for name, positive in (
        ("step_time_mean_s", True),
        ("step_time_std_s", False),
        ("measured_iters", False),
        ("device_peak_mem_bytes", False),
        ("device_mem_total_bytes", True),
    ):
        x = join.numeric(train, name)
        good = np.isfinite(x) & (x.gt(0) if positive else x.ge(0))
        ok &= join.col(train, name).isna() | good
    for k in THROTTLE_KEYS:
        ok &= join.col(train, f"gpu_{k}").isna()
    mean, std = join.numeric(train, "step_time_mean_s"), join.numeric(train, "step_time_std_s")
    ok &= ~(std / mean).gt(rules.STEP_CV)
    peak = join.numeric(train, "device_peak_mem_bytes")
    total = join.numeric(train, "device_mem_total_bytes")
    ok &= ~(peak / total).ge(rules.MEMORY_NEAR_CAPACITY)
    ok &= join.col(train, schema.TAG_FLOPS_COVERAGE, "").astype(str) != "incomplete"
    ids = set(train.loc[ok, "run_id"].tolist())
    return ids - set(series or {})


THROTTLE_KEYS = (
    "sm_clock_median_hz",
    "sm_clock_base_hz",
    "temperature_max_c",
    "temperature_slowdown_c",
    "power_max_w",
    "power_limit_w",
    "throttled_sample_share",
)


_GPU_KEYS = [f"gpu_{k}" for k in THROTTLE_KEYS]


def throttling(run: dict) -> Finding | None:
    """Clock throttling from a run's NVML sample summaries (train/energy.py), or None."""
    if all(not isinstance(v := run.get(k), (int, float)) or v != v for k in _GPU_KEYS):
        return None  # no NVML samples (not a CUDA run, or logged before runs kept them)
    v = {k: as_float(run.get(f"gpu_{k}"), nonnegative=True) for k in THROTTLE_KEYS}
    hits = []
    if v["sm_clock_median_hz"] and v["sm_clock_base_hz"]:
        hits.append(v["sm_clock_median_hz"] < rules.THROTTLE_CLOCK * v["sm_clock_base_hz"])
    if v["throttled_sample_share"]:
        hits.append(True)
    if v["temperature_max_c"] is not None and v["temperature_slowdown_c"]:
        hits.append(
            v["temperature_max_c"] >= v["temperature_slowdown_c"] - rules.THROTTLE_TEMP_MARGIN_C
        )
    if v["power_max_w"] is not None and v["power_limit_w"]:
        hits.append(v["power_max_w"] >= rules.THROTTLE_POWER * v["power_limit_w"])
    if not any(hits):
        return None
    vals = {
        "run_id": run["run_id"],
        "sm_clock_median_hz": v["sm_clock_median_hz"],
        "sm_clock_base_hz": v["sm_clock_base_hz"],
        "throttled_share": v["throttled_sample_share"],
        "reasons": str(run.get("gpu_throttle_reasons") or ""),
        "temperature_max_c": v["temperature_max_c"],
        "temperature_slowdown_c": v["temperature_slowdown_c"],
        "power_max_w": v["power_max_w"],
        "power_limit_w": v["power_limit_w"],
    }
    return Finding("throttle", "anomaly", vals, [run["run_id"]], weight=2.0)


def profile_disagreement(p: dict, profile: dict | None) -> Finding | None:
    """The profile run's FLOPs per step against the train runs' counted training FLOPs per step."""
    if not profile:
        return None
    flops = as_float(profile.get("flops_total"), positive=True)
    steps = as_float(profile.get("steps"), positive=True)
    train = as_float(p.get("train_flops_per_step"), positive=True)
    if not (flops and steps and train):
        return None
    per_step = flops / steps
    ratio = per_step / train
    lo, hi = rules.PROFILE_TRAIN_AGREE
    if lo <= ratio <= hi:
        return None
    return Finding(
        "profile_disagrees",
        "anomaly",
        {
            "profile_flops_per_step": per_step,
            "train_flops_per_step": train,
            "ratio": ratio,
            "profile_run": profile["run_id"],
        },
        [profile["run_id"], *p["run_ids"]],
        weight=1 + abs(math.log(ratio)),
    )
