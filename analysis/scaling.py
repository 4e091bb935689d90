"""Scaling with world size: the data-parallel points (`torchrun ... -m train --distributed`,
docs/distributed.md) against their world-size-1 baseline. A pure DataFrame like analysis/tables.py:
nothing here imports mlflow, reads files or plots.

One series per environment, device, model, per-process batch, precision, options, engine, ZeRO
stage and backend (SCALING_KEYS); its points differ only in world size. The baseline of a series
is, as a distributed run chooses its own (train/distributed/baseline.py): its world-size-1 point (the same
engine in one process: scaling alone), else the single-process point of the same work per process
(the point whose config_key is the series' base_config_key: scaling plus the engine's own cost).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.tables import engine_label, point_label
from common import schema

# a series: where it ran and every config field but the world size
SCALING_KEYS = schema.comparison_keys("world_size")
BASE_SAME_ENGINE = "same engine at world size 1"
BASE_SINGLE = "single-process run"
COLUMNS = [
    *SCALING_KEYS,
    "world_size",
    "nodes",
    "series",
    "label",
    "n_runs",
    "throughput_mean_samples_per_s",
    "throughput_sd_samples_per_s",
    "baseline",
    "baseline_samples_per_s",
    "ideal_samples_per_s",
    "scaling_efficiency",
    "step_time_mean_s",
    "compute_only_step_time_mean_s",
    "exposed_comm_time_s",
    "exposed_comm_time_share",
    "config_key",
    "run_ids",
]


def series_label(row: pd.Series | dict) -> str:
    """A series of the scaling figure: the point label without the world size, with the engine."""
    label = point_label({**row, "distributed": "none"})
    return f"{label}/{engine_label({**row, 'world_size': None})}"


def scaling(points: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """One row per data-parallel point: global samples/s, the ideal (world size x the baseline's
    samples/s), scaling efficiency = samples/s / ideal, and the communication the step exposes
    (step time minus the compute-only step time, and its share of the step). Returns (rows, notes).

    Both are raw means over the point's runs (analysis/join.py aggregate_repeats); the efficiency is
    recomputed from those means, not averaged from the runs' own `scaling_efficiency` (each of
    which compared with whichever baseline run was newest when it ran)."""
    if points.empty or "distributed" not in points:
        return pd.DataFrame(columns=COLUMNS), []
    dist = points[points["distributed"].fillna("none") != "none"]
    if dist.empty:
        return pd.DataFrame(columns=COLUMNS), []
    thr = "throughput_mean_samples_per_s"
    single = points[points["distributed"].fillna("none") == "none"]
    single = single.set_index(["env_label", "device_name", "config_key"])[thr]
    single = single[~single.index.duplicated(keep="last")]
    frames, notes = [], []
    group_keys = [k for k in SCALING_KEYS if k in dist]
    for _, g in dist.groupby(group_keys, sort=True, dropna=False):
        g = g.sort_values("world_size").copy()
        one = g[(g["world_size"] == 1) & g[thr].gt(0)]
        first = g.iloc[0]
        base_key = (first["env_label"], first["device_name"], first["base_config_key"])
        if len(one):
            g["baseline"], base = BASE_SAME_ENGINE, float(one[thr].iloc[-1])
        elif base_key in single.index and single[base_key] > 0:
            g["baseline"], base = BASE_SINGLE, float(single[base_key])
        else:
            g["baseline"], base = "none", np.nan
            notes.append(
                f"{first['env_label']}: {series_label(first)} has no world-size-1 run and no "
                "single-process run of the same config: no scaling efficiency (run it with "
                "--nproc-per-node 1, or `python -m train` with the same flags)"
            )
        g["baseline_samples_per_s"] = base
        g["ideal_samples_per_s"] = g["world_size"] * base
        g["scaling_efficiency"] = g[thr] / g["ideal_samples_per_s"]
        frames.append(g)
    out = pd.concat(frames, ignore_index=True)
    out["series"] = [series_label(r) for r in out.to_dict("records")]
    out["label"] = [point_label(r) for r in out.to_dict("records")]
    for c in COLUMNS:
        if c not in out:
            out[c] = np.nan
    no_comm = out[out["exposed_comm_time_s"].isna()]
    if len(no_comm):
        notes.append(
            f"{len(no_comm)} data-parallel point(s) have no compute-only step time (their engine "
            "has no step without gradient synchronisation, see the runs' `compute_only` tag): "
            f"no communication share, e.g. {', '.join(no_comm['label'].head(3))}"
        )
    return out[COLUMNS].reset_index(drop=True), notes


def scaling_csv(rows: pd.DataFrame) -> pd.DataFrame:
    """The scaling rows as scaling.csv holds them (run ids joined by ';')."""
    out = rows.copy()
    out["run_ids"] = [";".join(r) if isinstance(r, list) else str(r) for r in out["run_ids"]]
    return out
