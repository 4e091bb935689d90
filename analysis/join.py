"""Pure DataFrame joins: runs (as analysis/fetch reads them) -> one row per train run, and those
rows pooled into one roofline point per environment, device and configuration.

Input contract: a pandas DataFrame with MLflow's search_runs layout: `run_id`, `status`,
`start_time` (epoch ms, or datetimes as mlflow.search_runs has them), and one column per key
prefixed `metrics.`, `params.`, `tags.` (READ_KEYS lists every key analysis reads). Absent
columns are treated as missing values, so hand-made frames in tests need only the columns they
use. The key lists and the column access at the top are shared by the profile and peaks joins
(analysis/roofs.py) and by analysis/fetch; the tables beside the points are in analysis/tables.py.

Nothing here imports mlflow, reads files or plots.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from common import schema
from common.stats import mean_ci95_rel
from common.fmt import short_id
from roofline.ceilings import PEAKS_LOAD_METRICS
from train.config import data_kind

GROUP_KEYS = list(schema.POINT_KEYS)
# the config params kept on a point: the fields config_key hashes (one list, so a new key field reaches the join)
CONFIG_PARAMS = list(schema.CONFIG_KEY_FIELDS)
TRAIN_METRICS = [
    "throughput_samples_per_s",
    "throughput_std_samples_per_s",
    "step_time_mean_s",
    "step_time_std_s",
    "train_flops_per_step",
    "achieved_flops_per_s",
    "modeled_intensity_flops_per_byte",
    "step_time_ci95_rel",  # flagged when wider than ±50 % (common.plausible)
]
ENV_TAGS = [
    "device_type",
    "host",
    "torch_version",
    "cuda_version",
    "cudnn_version",
    "driver_version",
    "python_version",
    "os",
    "cpu_model",
]

# data-parallel runs (docs/distributed.md): the fields their config key adds, and what they measure
DIST_PARAMS = [*schema.DISTRIBUTED_KEY_FIELDS, "nodes"]
DIST_METRICS = [
    "compute_only_step_time_mean_s",
    "exposed_comm_time_s",
    "exposed_comm_time_share",
]
DIST_CARRIED = [
    *DIST_PARAMS,
    "base_config_key",
]  # on each point (distributed = "none": one process)

# what analysis/findings reads from each train run besides (docs/analysis.md, "Findings"): the
# step-time CI, energy (train/energy.py), device memory and the NVML samples' summaries
FINDINGS_METRICS = [
    "step_time_ci95_rel",
    "load_average_1m_start",  # the machine's load while a train run measured (common/load.py)
    "load_average_1m_max",
    "cpu_count",
    "measured_iters",
    "energy_j_per_sample",
    "device_peak_mem_bytes",
    "device_mem_total_bytes",
    "gpu_nvml_samples",
    "gpu_sm_clock_min_hz",
    "gpu_sm_clock_median_hz",
    "gpu_sm_clock_base_hz",
    "gpu_temperature_max_c",
    "gpu_temperature_slowdown_c",
    "gpu_power_max_w",
    "gpu_power_limit_w",
    "gpu_throttled_sample_share",
    schema.METRIC_UNCOUNTED_BYTES_SHARE,
]
FINDINGS_TAGS = [
    "energy_source",
    "energy_note",
    "gpu_throttle_reasons",
    schema.TAG_FLOPS_COVERAGE,
    schema.TAG_FLOPS_UNCOUNTED,
]
# what the history (analysis/history.py) reads besides: the tags that can change under a series
# (torch's intra-op threads, the project's commit) and the machine's load while a run measured
# (common/load.py; train runs log it as peaks runs do)
HISTORY_TAGS = {"torch_threads": "torch_threads", "git_commit": "mlflow.source.git.commit"}
HISTORY_METRICS = PEAKS_LOAD_METRICS
FINDINGS_PARAMS = ["workers"]

PROFILE_METRICS = [
    "ncu_flops_total",
    "ncu_dram_bytes",
    "ncu_l2_bytes",
    "ncu_l1_bytes",
    "ncu_intensity_dram_flops_per_byte",
    "ncu_kernel_time_s",  # read for analysis/screen.py: counts no GPU makes in that time
]
# Every key analysis reads from a run, by prefix of its column: analysis/fetch reads and caches these
# and no others. Peaks metrics go by name prefix (peak_flops_per_s_<dtype>, peak_<level>_bytes_per_s).
READ_KEYS = {
    "tags": [
        schema.TAG_RUN_KIND,
        schema.TAG_ENV_LABEL,
        schema.TAG_DEVICE_NAME,
        schema.TAG_CONFIG_KEY,
        schema.TAG_ERROR,
        schema.TAG_NCU_TRUNCATED,
        schema.TAG_NCU_MISSING_PHASE,
        schema.TAG_BASE_CONFIG_KEY,
        schema.TAG_CONFIG_LABEL,
        "roofline_roof",  # the ceilings of the run's roofline.png (analysis/run_rooflines.py)
        "mlflow.runName",
        "mlflow.parentRunId",
        *ENV_TAGS,
        *FINDINGS_TAGS,
        *HISTORY_TAGS.values(),
    ],
    "params": [
        *CONFIG_PARAMS,
        *DIST_PARAMS,
        *FINDINGS_PARAMS,
        "repeat",
        "device_memory_source",
        "profile_steps",
        "data",
        "workload",  # an imported profile of a program that is not a torchvision model
    ],
    "metrics": [
        *TRAIN_METRICS,
        *DIST_METRICS,
        *PROFILE_METRICS,
        *FINDINGS_METRICS,
        *PEAKS_LOAD_METRICS,
    ],
}
READ_PREFIXES = {"tags": [], "params": [], "metrics": ["peak_"]}


# ------------------------------------------------------------------------------- column access
def col(df: pd.DataFrame, name: str, default: Any = np.nan) -> pd.Series:
    """Column `name` of `df`, or a column of `default` when MLflow returned none (no run logged it)."""
    if name in df.columns:
        return df[name]
    return pd.Series(
        [default] * len(df), index=df.index, dtype=object if isinstance(default, str) else float
    )


def numeric(df: pd.DataFrame, name: str) -> pd.Series:
    """Column `name` of `df` as floats; what is missing or not a number is NaN."""
    return pd.to_numeric(col(df, name), errors="coerce").astype(float)


def text(df: pd.DataFrame, name: str) -> pd.Series:
    return col(df, name, "").fillna("").astype(str)


def of_kind(runs: pd.DataFrame, kind: str, status: str | None = "FINISHED") -> pd.DataFrame:
    mask = text(runs, f"tags.{schema.TAG_RUN_KIND}") == kind
    if status is not None:
        mask &= text(runs, "status") == status
    return runs[mask]


def config_keys(runs: pd.DataFrame) -> pd.Series:
    """The config_key tag, or the key computed from the params when a run lacks the tag."""
    keys = text(runs, f"tags.{schema.TAG_CONFIG_KEY}")
    missing = keys == ""
    if missing.any():
        params = {f: col(runs, f"params.{f}") for f in schema.CONFIG_FIELDS}
        for idx in keys.index[missing]:
            values = {f: params[f].loc[idx] for f in schema.CONFIG_FIELDS}
            if not (isinstance(values["distributed"], str) and schema.is_distributed(values)):
                values = {f: values[f] for f in schema.CONFIG_KEY_FIELDS}
            if all(isinstance(v, str) and v != "" for v in values.values()):
                keys.loc[idx] = schema.config_key(values)
    return keys


def start_ms(runs: pd.DataFrame) -> pd.Series:
    s = col(runs, "start_time")
    if pd.api.types.is_datetime64_any_dtype(s):
        return s.astype("int64").astype(float)
    return pd.to_numeric(s, errors="coerce").astype(float)


# ------------------------------------------------------------------------------- train runs
def train_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One flat row per FINISHED train run: identity, config params, the summary metrics."""
    tr = of_kind(runs, "train")
    out = pd.DataFrame(index=tr.index)
    out["run_id"] = text(tr, "run_id")
    out["run_name"] = text(tr, "tags.mlflow.runName")
    out["config_label"] = text(tr, f"tags.{schema.TAG_CONFIG_LABEL}")
    out["data_kind"] = [data_kind(d) for d in text(tr, "params.data")]
    out["roofline_roof"] = text(tr, "tags.roofline_roof")
    out["start_time"] = start_ms(tr)
    out["env_label"] = text(tr, f"tags.{schema.TAG_ENV_LABEL}").replace("", "(no env_label)")
    out["device_name"] = text(tr, f"tags.{schema.TAG_DEVICE_NAME}").replace("", "(unknown device)")
    for tag in ENV_TAGS:
        out[tag] = text(tr, f"tags.{tag}")
    out["config_key"] = config_keys(tr)
    for p in CONFIG_PARAMS:
        out[p] = text(tr, f"params.{p}")
    out["precision"] = out["precision"].str.lower()
    out["batch_size"] = pd.to_numeric(out["batch_size"], errors="coerce")
    out["image_size"] = pd.to_numeric(out["image_size"], errors="coerce")
    out["num_classes"] = pd.to_numeric(out["num_classes"], errors="coerce")
    out["repeat"] = pd.to_numeric(col(tr, "params.repeat"), errors="coerce")
    out["parent_run_id"] = text(tr, "tags.mlflow.parentRunId")
    # a single-process run (or one logged before distributed runs existed): one process, no engine
    out["distributed"] = text(tr, "params.distributed").str.lower().replace("", "none")
    for p, one in (("world_size", 1), ("zero_stage", 0), ("nodes", 1)):
        out[p] = pd.to_numeric(col(tr, f"params.{p}"), errors="coerce").fillna(one)
    out["backend"] = text(tr, "params.backend").mask(out["distributed"] == "none", "none")
    base = text(tr, f"tags.{schema.TAG_BASE_CONFIG_KEY}")
    out["base_config_key"] = base.where(base != "", out["config_key"])
    for name, tag in HISTORY_TAGS.items():
        out[name] = text(tr, f"tags.{tag}")
    for m in [*TRAIN_METRICS, *DIST_METRICS, *FINDINGS_METRICS, *HISTORY_METRICS]:
        out[m] = numeric(tr, f"metrics.{m}")
    ci = out["step_time_ci95_rel"]
    out["step_time_ci95_rel"] = ci.where(ci.notna(), own_ci(out))
    for t in FINDINGS_TAGS:
        out[t] = text(tr, f"tags.{t}")
    for p in FINDINGS_PARAMS:
        out[p] = text(tr, f"params.{p}")
    return run_rates(out.reset_index(drop=True))


def mixed_data_notes(train: pd.DataFrame) -> list[str]:
    """A point averages the runs of one config_key (the same work per step), which leaves out the
    data source; runs whose data sources differ (and so their names and config_labels) are said
    to be averaged together, with how to keep them apart."""
    keyed = train[train["config_key"] != ""]
    if keyed.empty or "data_kind" not in keyed:
        return []
    kinds = keyed.groupby(["env_label", "device_name", "config_key"])["data_kind"].unique()
    notes = []
    for (env, _, key), found in kinds.items():
        if len(found) > 1:
            notes.append(
                f"{env}: config {key} averages runs of different data sources "
                f"({', '.join(sorted(found))}): a loader's cost is in some of them; analyse one "
                "source at a time with --filter \"params.data = 'synthetic'\""
            )
    return notes


def train_notes(train: pd.DataFrame) -> list[str]:
    """One line per missing metric saying how many runs lack it and what that costs, and one per
    point that averages runs of different data sources."""
    notes = mixed_data_notes(train)
    consequence = {
        "throughput_samples_per_s": "no samples/s for them",
        "achieved_flops_per_s": "derived as train_flops_per_step / step_time_mean_s where possible, else no roofline point",
        "modeled_intensity_flops_per_byte": "no intensity unless a profile run of the same config and device exists",
        "throughput_std_samples_per_s": "single runs among them have no SD",
    }
    for m, what in consequence.items():
        lack = train[train[m].isna()]
        if len(lack):
            ex = ", ".join(short_id(r) for r in lack["run_id"].head(3))
            notes.append(f"{len(lack)} train run(s) lack metric {m} (e.g. {ex}): {what}")
    no_key = train[train["config_key"] == ""]
    if len(no_key):
        notes.append(
            f"{len(no_key)} train run(s) have no config_key tag and incomplete config params: each is "
            "its own point (never averaged with another run), without a profile run or a speed-up "
            f"(e.g. {', '.join(short_id(r) for r in no_key['run_id'].head(3))})"
        )
    return notes


POINT_COLUMNS = [
    *GROUP_KEYS,
    *[c for c in CONFIG_PARAMS if c not in GROUP_KEYS],
    "n_runs",
    "run_ids",
    "throughput_mean_samples_per_s",
    "throughput_sd_samples_per_s",
    "throughput_sd_kind",
    "throughput_min_run_samples_per_s",
    "throughput_max_run_samples_per_s",
    "throughput_spread_ratio",
    "achieved_flops_per_s",
    "achieved_sd_flops_per_s",
    "step_time_mean_s",
    "step_time_ci95_rel",
    "measured_steps",
    "train_flops_per_step",
    "modeled_intensity_flops_per_byte",
    *DIST_CARRIED,
    *DIST_METRICS,
]
"""The columns of aggregate_repeats' rows, in order."""


RUN_RATE_COLUMNS = [
    "run_step_time_s",
    "run_samples_per_step",
    "run_measured_steps",
    "run_train_flops_per_step",
    "run_samples_per_s",
]
"""what `run_rates` adds to each train run, computed once: what a configuration pools and what the
findings read of a run."""


def run_rates(train: pd.DataFrame) -> pd.DataFrame:
    """`train` with, per run, the numbers a configuration pools (docs/schema.md, "Definitions"):
    its mean step time `run_step_time_s` (step_time_mean_s; batch x world size / throughput where
    only the rate was logged), its measured steps `run_measured_steps` (measured_iters; NaN when
    not logged), its samples per step `run_samples_per_step` (batch x world size), its training
    FLOPs per step `run_train_flops_per_step` (train_flops_per_step, else achieved FLOP/s x step
    time) and its own rate `run_samples_per_s`, samples per step / its mean step time."""
    t = train.copy()
    step = t["step_time_mean_s"].where(t["step_time_mean_s"].gt(0))
    per_step = t["batch_size"] * t["world_size"]
    per_step = per_step.where(per_step.gt(0), t["throughput_samples_per_s"] * step)
    from_rate = (per_step / t["throughput_samples_per_s"]).where(
        t["throughput_samples_per_s"].gt(0)
    )
    t["run_step_time_s"] = step.where(step.notna(), from_rate)
    t["run_samples_per_step"] = per_step
    t["run_measured_steps"] = t["measured_iters"].where(t["measured_iters"].gt(0))
    flops = t["train_flops_per_step"].where(t["train_flops_per_step"].gt(0))
    t["run_train_flops_per_step"] = flops.where(
        flops.notna(), t["achieved_flops_per_s"] * t["run_step_time_s"]
    )
    rate = schema.rate_per_s(per_step, t["run_step_time_s"])
    # a run that logged its rate but neither a batch size nor a step time: the rate as logged
    t["run_samples_per_s"] = rate.where(
        rate.notna(), t["throughput_samples_per_s"].where(t["throughput_samples_per_s"].gt(0))
    )
    return t


def _pooled_weights(t: pd.DataFrame, group: list[str]) -> pd.Series:
    """Each run's share of its configuration's measured steps: measured_iters over the group's
    total; a run that logged no measured_iters counts as many steps as the group's runs that did
    on average (every run alike when none did). Runs without a step time weigh 0."""
    steps = t["run_measured_steps"]
    steps = steps.fillna(t.groupby(group)["run_measured_steps"].transform("mean")).fillna(1.0)
    steps = steps.where(t["run_step_time_s"].notna(), 0.0)
    total = steps.groupby([t[g] for g in group]).transform("sum")
    return (steps / total).where(total > 0, 0.0)


def aggregate_repeats(train: pd.DataFrame) -> pd.DataFrame:
    """One row per (env_label, device_name, config_key); a run without a config_key (no tag and
    incomplete params: nothing says which runs did the same work) is a row of its own.

    The configuration's numbers (docs/schema.md, "Definitions"): its mean step time is the mean
    over all measured steps of its runs (each run's mean weighted by its measured steps: the steps
    are pooled, the per-run rates are never averaged); samples/s = batch x world size / that mean;
    achieved FLOP/s = training FLOPs per step / that mean. A configuration of one run has exactly
    its run's numbers. Its spread: the SD of its runs' own rates (one run: its within-run SD), the
    lowest and highest run rate and their ratio, and the 95 % CI of its mean step time
    (`step_time_ci95` below).
    """
    if train.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    t = train.sort_values("start_time", kind="stable")
    t = t.assign(_within=t["throughput_std_samples_per_s"].where(t["run_samples_per_s"].notna()))
    t["_group"] = t["config_key"].where(t["config_key"] != "", "~run " + t["run_id"])
    group = ["env_label", "device_name", "_group"]
    w = _pooled_weights(t, group)
    t["_w_step"] = w * t["run_step_time_s"].fillna(0.0)
    params = [c for c in CONFIG_PARAMS if c not in GROUP_KEYS]
    agg = (
        t.groupby(group, sort=True)
        .agg(
            config_key=("config_key", "last"),
            n_runs=("run_id", "size"),
            run_ids=("run_id", list),
            _n_thr=("run_samples_per_s", "count"),
            _sd_across=("run_samples_per_s", "std"),
            _within=("_within", "max"),
            throughput_min_run_samples_per_s=("run_samples_per_s", "min"),
            throughput_max_run_samples_per_s=("run_samples_per_s", "max"),
            _step=("_w_step", "sum"),
            _flops=("run_train_flops_per_step", "mean"),
            _per_step=("run_samples_per_step", "last"),
            _rate_only=("run_samples_per_s", "mean"),
            measured_steps=("run_measured_steps", "sum"),
            achieved_sd_flops_per_s=("achieved_flops_per_s", "std"),
            modeled_intensity_flops_per_byte=("modeled_intensity_flops_per_byte", "mean"),
            **{p: (p, "last") for p in params},  # latest run's params (equal within a config_key)
            **{p: (p, "last") for p in DIST_CARRIED},
            **{m: (m, "mean") for m in DIST_METRICS},
        )
        .reset_index()
    )
    agg = agg.join(step_time_ci95(t, group), on=group)
    return _with_throughput_sd(_pooled(agg))[POINT_COLUMNS]


def _pooled(agg: pd.DataFrame) -> pd.DataFrame:
    """The configuration's rates from its pooled mean step time."""
    step = agg["_step"].where(agg["_step"] > 0)
    agg["step_time_mean_s"] = step
    agg["train_flops_per_step"] = agg["_flops"]
    thr = schema.rate_per_s(agg["_per_step"], step)
    agg["throughput_mean_samples_per_s"] = thr.where(thr.notna(), agg["_rate_only"])
    agg["achieved_flops_per_s"] = schema.rate_per_s(agg["_flops"], step)
    agg["throughput_spread_ratio"] = (
        agg["throughput_max_run_samples_per_s"] / agg["throughput_min_run_samples_per_s"]
    )
    agg["measured_steps"] = agg["measured_steps"].where(agg["measured_steps"] > 0)
    return agg


def step_time_ci95(t: pd.DataFrame, group: list[str]) -> pd.Series:
    """Relative half-width of the 95 % CI of each configuration's mean step time: over its runs'
    mean step times (Student t: the runs are the independent repeats) where two or more runs have
    one, else the one run's step_time_ci95_rel (train_runs: as logged, else own_ci)."""
    t = t.assign(_ci1=t["step_time_ci95_rel"].where(t["step_time_ci95_rel"].ge(0)))
    g = t.groupby(group, sort=True)["run_step_time_s"]
    n, mean, sd = g.count(), g.mean(), g.std()
    across = pd.Series(map(mean_ci95_rel, n, sd, mean), index=n.index, dtype=float)
    single = t.loc[t["run_step_time_s"].notna()].groupby(group, sort=True)["_ci1"].max()
    single = single.reindex(across.index)
    return across.where(n >= 2, single).rename("step_time_ci95_rel")


def own_ci(t: pd.DataFrame) -> pd.Series:
    """Each run's relative 95 % CI of its mean step time from its SD and steps (Student t), NaN
    when it lacks them (for runs that logged no step_time_ci95_rel)."""
    n, sd, m = t["measured_iters"], t["step_time_std_s"], t["step_time_mean_s"]
    ok = n.ge(2) & sd.ge(0) & m.gt(0)
    ci = [mean_ci95_rel(*x) if k else np.nan for *x, k in zip(n, sd, m, ok)]
    return pd.Series(ci, index=t.index, dtype=float)


def _with_throughput_sd(agg: pd.DataFrame) -> pd.DataFrame:
    """The samples/s SD of each point and its kind: across runs (of their own rates) when two or
    more have one, else the one run's own within-run SD."""
    across = agg["_n_thr"] >= 2
    agg["throughput_sd_samples_per_s"] = np.where(across, agg["_sd_across"], agg["_within"]).astype(
        float
    )
    agg["throughput_sd_kind"] = np.where(
        across,
        "across " + agg["_n_thr"].astype(str) + " runs",
        np.where((agg["_n_thr"] == 1) & agg["_within"].notna(), "within run", ""),
    )
    return agg
