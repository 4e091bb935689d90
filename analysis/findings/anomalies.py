"""Anomalies (docs/analysis.md, "Findings"): throughput falling as batch grows, a device far below
its peers' fraction of the roof, variable or bimodal steps, clock throttling, device memory near
capacity, profile and train runs that disagree, a point above its roof. Each rule's threshold is
in analysis/findings/rules.py. Pure."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.findings import rules
from analysis.findings.bound import series_key
from analysis.findings.records import Finding
from analysis.findings.values import Clean, finite


def batch_drops(points: list[dict], thr: dict[int, tuple]) -> dict[int, list[Finding]]:
    """Per point (index into `points`): a drop from the next smaller batch of its series to it
    (rules.BATCH_DROP)."""
    groups: dict[tuple, list[int]] = {}
    for idx, p in enumerate(points):
        if idx in thr and pd.notna(p.get("batch_size")):
            groups.setdefault(series_key(p), []).append(idx)
    out: dict[int, list[Finding]] = {}
    for members in groups.values():
        members.sort(key=lambda i: float(points[i]["batch_size"]))
        for a, b in zip(members, members[1:]):
            (t_a, ci_a, runs_a), (t_b, ci_b, runs_b) = thr[a], thr[b]
            drop = 1 - t_b / t_a
            # beyond noise: the two means' 95 % intervals do not overlap (where both are known)
            apart = ci_a is None or ci_b is None or t_a * (1 - ci_a) > t_b * (1 + ci_b)
            if drop >= rules.BATCH_DROP and apart:
                out.setdefault(b, []).append(
                    Finding(
                        "batch_drop",
                        "anomaly",
                        {
                            "batch_small": float(points[a]["batch_size"]),
                            "batch_large": float(points[b]["batch_size"]),
                            "throughput_small": t_a,
                            "throughput_large": t_b,
                            "drop": drop,
                        },
                        runs_a + runs_b,
                        weight=1 + drop,
                    )
                )
    return out


def peer_gaps(points: list[dict], fraction: dict[int, float]) -> dict[int, Finding]:
    """Per point: its fraction of the roof under rules.PEER_GAP x the best fraction another
    environment or device reaches on the same config_key."""
    out = {}
    by_key: dict[str, list[int]] = {}
    for idx, p in enumerate(points):
        if idx in fraction and p.get("config_key"):
            by_key.setdefault(str(p["config_key"]), []).append(idx)
    for members in by_key.values():
        if len(members) < 2:
            continue
        best = max(members, key=lambda i: fraction[i])
        for i in members:
            if i != best and fraction[i] < rules.PEER_GAP * fraction[best]:
                out[i] = Finding(
                    "peer_gap",
                    "anomaly",
                    {
                        "fraction_of_roof": fraction[i],
                        "peer_env": points[best]["env_label"],
                        "peer_device": points[best]["device_name"],
                        "peer_fraction": fraction[best],
                    },
                    list(points[i]["run_ids"]) + list(points[best]["run_ids"]),
                    weight=1 + fraction[best] / max(fraction[i], 1e-9) / 10,
                )
    return out


def bimodality(times) -> dict | None:
    """Two modes in a run's step times, or None (fewer than 10 steps, or one mode).

    A Gaussian kernel density of the times (Silverman's rule-of-thumb bandwidth, floored at 0.1 %
    of the mean step) has two peaks with a valley between them at most rules.BIMODAL_DIP of the
    smaller peak, and each side of the valley holds rules.BIMODAL_MIN_SHARE of the steps (and 3
    steps). On drawn samples normal and uniform steps never passed, exponential ones 4 to 13 % of
    the time at 20-50 steps and never from 200 (docs/analysis.md)."""
    t = np.sort(np.asarray([x for x in times if finite(x) and x > 0], dtype=float))
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


def run_anomalies(run: dict, series: list[float] | None, clean: Clean) -> list[Finding]:
    """Variability, bimodal steps, throttling and memory near capacity of one train run."""
    rid, where = run["run_id"], f"train run {str(run['run_id'])[:8]}"
    out = []
    mean = clean.value(run.get("step_time_mean_s"), "step_time_mean_s", where, positive=True)
    std = clean.value(run.get("step_time_std_s"), "step_time_std_s", where)
    steps = clean.value(run.get("measured_iters"), "measured_iters", where)
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
    th = throttling(run, clean)
    if th:
        out.append(th)
    peak = clean.value(run.get("device_peak_mem_bytes"), "device_peak_mem_bytes", where)
    total = clean.value(run.get("device_mem_total_bytes"), "device_mem_total_bytes", where, True)
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


def quiet_runs(train: pd.DataFrame, series: dict | None = None) -> set:
    """Run ids of `train` for which run_anomalies finds nothing and notes nothing, by whole
    columns (calling it on each of 10,000 runs took 0.1 s here): every value it reads missing or
    clean, a step-time CV within rules.STEP_CV, memory below rules.MEMORY_NEAR_CAPACITY, no NVML
    sample, no step-time series. Conservative: a run it leaves out is judged one by one."""
    if train.empty or "run_id" not in train:
        return set()

    def col(name: str) -> pd.Series:
        return train[name] if name in train else pd.Series(np.nan, index=train.index)

    def num(name: str) -> pd.Series:
        return pd.to_numeric(col(name), errors="coerce").astype(float)

    ok = pd.Series(True, index=train.index)
    for name, positive in (
        ("step_time_mean_s", True),
        ("step_time_std_s", False),
        ("measured_iters", False),
        ("device_peak_mem_bytes", False),
        ("device_mem_total_bytes", True),
    ):
        x = num(name)
        good = np.isfinite(x) & (x.gt(0) if positive else x.ge(0))
        ok &= col(name).isna() | good
    for k in THROTTLE_KEYS:
        ok &= col(f"gpu_{k}").isna()
    mean, std = num("step_time_mean_s"), num("step_time_std_s")
    ok &= ~(std / mean).gt(rules.STEP_CV)
    peak, total = num("device_peak_mem_bytes"), num("device_mem_total_bytes")
    ok &= ~(peak / total).ge(rules.MEMORY_NEAR_CAPACITY)
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


def throttling(run: dict, clean: Clean) -> Finding | None:
    """Clock throttling from a run's NVML sample summaries (train/energy.py), or None."""
    if all(not isinstance(v := run.get(k), (int, float)) or v != v for k in _GPU_KEYS):
        return None  # no NVML samples (not a CUDA run, or logged before runs kept them)
    where = f"train run {str(run['run_id'])[:8]}"
    v = {k: clean.value(run.get(f"gpu_{k}"), f"gpu_{k}", where) for k in THROTTLE_KEYS}
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


def profile_disagreement(p: dict, profile: dict | None, clean: Clean) -> Finding | None:
    """The profile run's FLOPs per step against the train runs' counted training FLOPs per step."""
    if not profile:
        return None
    where = f"profile run {str(profile['run_id'])[:8]}"
    flops = clean.value(profile.get("metrics.ncu_flops_total"), "ncu_flops_total", where, True)
    steps = clean.value(profile.get("params.profile_steps"), "profile_steps", where, True)
    train = clean.value(
        p.get("train_flops_per_step"), "train_flops_per_step", f"{p['label']}", True
    )
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
