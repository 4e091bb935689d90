"""Pure DataFrame joins: runs (as analysis/fetch reads them) -> roofline points and roofs.

Input contract: a pandas DataFrame with MLflow's search_runs layout: `run_id`, `status`,
`start_time` (epoch ms, or datetimes as mlflow.search_runs has them), and one column per key
prefixed `metrics.`, `params.`, `tags.` (READ_KEYS lists every key read here). Absent columns are
treated as missing values, so hand-made frames in tests need only the columns they use.

Nothing here imports mlflow, reads files or plots. Over 400 lines because the train, profile and
roof joins share the key lists and column access at the top; the tables beside the points are in
analysis/tables.py.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from roofline import ceilings, trust
from roofline.trust import PEAKS_LOAD_METRICS, highest
from train.timing import t_quantile_975
from train.config import data_kind
from roofline.model import PointEval, Roof, evaluate_point
from common import schema

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
]
FINDINGS_TAGS = ["energy_source", "energy_note", "gpu_throttle_reasons"]
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
    ],
    "params": [
        *CONFIG_PARAMS,
        *DIST_PARAMS,
        *FINDINGS_PARAMS,
        "repeat",
        "device_memory_source",
        "profile_steps",
        "data",
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

VendorLookup = Callable[[str], Any]


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


def short(run_id: str) -> str:
    return str(run_id)[:8]


def of_kind(runs: pd.DataFrame, kind: str, status: str | None = "FINISHED") -> pd.DataFrame:
    mask = text(runs, f"tags.{schema.TAG_RUN_KIND}") == kind
    if status is not None:
        mask &= text(runs, "status") == status
    return runs[mask]


def _config_keys(runs: pd.DataFrame) -> pd.Series:
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


def _start(runs: pd.DataFrame) -> pd.Series:
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
    out["start_time"] = _start(tr)
    out["env_label"] = text(tr, f"tags.{schema.TAG_ENV_LABEL}").replace("", "(no env_label)")
    out["device_name"] = text(tr, f"tags.{schema.TAG_DEVICE_NAME}").replace("", "(unknown device)")
    for tag in ENV_TAGS:
        out[tag] = text(tr, f"tags.{tag}")
    out["config_key"] = _config_keys(tr)
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
    for m in [*TRAIN_METRICS, *DIST_METRICS, *FINDINGS_METRICS]:
        out[m] = numeric(tr, f"metrics.{m}")
    ci = out["step_time_ci95_rel"]
    out["step_time_ci95_rel"] = ci.where(ci.notna(), own_ci(out))
    for t in FINDINGS_TAGS:
        out[t] = text(tr, f"tags.{t}")
    for p in FINDINGS_PARAMS:
        out[p] = text(tr, f"params.{p}")
    return out.reset_index(drop=True)


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
            ex = ", ".join(short(r) for r in lack["run_id"].head(3))
            notes.append(f"{len(lack)} train run(s) lack metric {m} (e.g. {ex}): {what}")
    no_key = train[train["config_key"] == ""]
    if len(no_key):
        notes.append(
            f"{len(no_key)} train run(s) have no config_key tag and incomplete config params: each is "
            "its own point (never averaged with another run), without a profile run or a speed-up "
            f"(e.g. {', '.join(short(r) for r in no_key['run_id'].head(3))})"
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


def run_rates(train: pd.DataFrame) -> pd.DataFrame:
    """Per train run, the numbers a configuration pools (docs/schema.md, "Definitions"): its mean
    step time (step_time_mean_s; batch x world size / throughput where only the rate was logged),
    its measured steps (measured_iters; NaN when not logged), its samples per step (batch x world
    size), its training FLOPs per step (train_flops_per_step, else achieved FLOP/s x step time) and
    its own rate, samples per step / its mean step time."""
    t = train.copy()
    step = t["step_time_mean_s"].where(t["step_time_mean_s"].gt(0))
    per_step = t["batch_size"] * t["world_size"]
    per_step = per_step.where(per_step.gt(0), t["throughput_samples_per_s"] * step)
    from_rate = (per_step / t["throughput_samples_per_s"]).where(
        t["throughput_samples_per_s"].gt(0)
    )
    t["_step_s"] = step.where(step.notna(), from_rate)
    t["_per_step"] = per_step
    t["_steps"] = t["measured_iters"].where(t["measured_iters"].gt(0))
    flops = t["train_flops_per_step"].where(t["train_flops_per_step"].gt(0))
    t["_flops"] = flops.where(flops.notna(), t["achieved_flops_per_s"] * t["_step_s"])
    rate = schema.rate_per_s(per_step, t["_step_s"])
    # a run that logged its rate but neither a batch size nor a step time: the rate as logged
    t["_rate"] = rate.where(
        rate.notna(), t["throughput_samples_per_s"].where(t["throughput_samples_per_s"].gt(0))
    )
    return t


def _pooled_weights(t: pd.DataFrame, group: list[str]) -> pd.Series:
    """Each run's share of its configuration's measured steps: measured_iters over the group's
    total; a run that logged no measured_iters counts as many steps as the group's runs that did
    on average (every run alike when none did). Runs without a step time weigh 0."""
    steps = t["_steps"].fillna(t.groupby(group)["_steps"].transform("mean")).fillna(1.0)
    steps = steps.where(t["_step_s"].notna(), 0.0)
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
    t = run_rates(train.sort_values("start_time", kind="stable"))
    t["_within"] = t["throughput_std_samples_per_s"].where(t["_rate"].notna())
    t["_group"] = t["config_key"].where(t["config_key"] != "", "~run " + t["run_id"])
    group = ["env_label", "device_name", "_group"]
    w = _pooled_weights(t, group)
    t["_w_step"], t["_w_flops"] = w * t["_step_s"].fillna(0.0), w * t["_flops"]
    params = [c for c in CONFIG_PARAMS if c not in GROUP_KEYS]
    agg = (
        t.groupby(group, sort=True)
        .agg(
            config_key=("config_key", "last"),
            n_runs=("run_id", "size"),
            run_ids=("run_id", list),
            _n_thr=("_rate", "count"),
            _sd_across=("_rate", "std"),
            _within=("_within", "max"),
            throughput_min_run_samples_per_s=("_rate", "min"),
            throughput_max_run_samples_per_s=("_rate", "max"),
            _step=("_w_step", "sum"),
            _flops=("_flops", "mean"),
            _per_step=("_per_step", "last"),
            _rate_only=("_rate", "mean"),
            measured_steps=("_steps", "sum"),
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
    g = t.groupby(group, sort=True)
    n, mean, sd = g["_step_s"].count(), g["_step_s"].mean(), g["_step_s"].std()
    dof = (n - 1).clip(lower=1).astype(int)
    q = pd.Series([t_quantile_975(int(d)) for d in dof], index=dof.index)
    across = q * sd / np.sqrt(n) / mean
    single = t.loc[t["_step_s"].notna()].groupby(group, sort=True)["_ci1"].max()
    single = single.reindex(across.index)
    return across.where(n >= 2, single).rename("step_time_ci95_rel")


def own_ci(t: pd.DataFrame) -> pd.Series:
    """Each run's relative 95 % CI of its mean step time from its SD and steps (Student t), NaN
    when it lacks them (for runs that logged no step_time_ci95_rel)."""
    n, sd, m = t["measured_iters"], t["step_time_std_s"], t["step_time_mean_s"]
    ok = n.ge(2) & sd.ge(0) & m.gt(0)
    q = pd.Series(
        [t_quantile_975(int(x)) if k else np.nan for x, k in zip(n - 1, ok)], index=t.index
    )
    return (q * sd / np.sqrt(n) / m).where(ok)


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


# ------------------------------------------------------------------------------- profile runs
def profile_intensities(runs: pd.DataFrame, use_incomplete: bool = False) -> pd.DataFrame:
    """Measured intensities per (config_key, device_name) from the latest FINISHED profile run;
    a profile that missed a training phase (tag ncu_missing_phase) only with `use_incomplete`.

    DRAM intensity = ncu_flops_total / ncu_dram_bytes (the logged ncu_intensity_dram_flops_per_byte
    when ncu_flops_total or ncu_dram_bytes is absent); L2 and L1 likewise where their bytes exist.
    """
    cols = [
        "config_key",
        "device_name",
        "profile_run_id",
        "profile_env_label",
        "intensity_dram_flops_per_byte",
        "intensity_l2_flops_per_byte",
        "intensity_l1_flops_per_byte",
    ]
    pr = of_kind(runs, "profile")
    pr = pr[
        text(pr, f"tags.{schema.TAG_NCU_TRUNCATED}") == ""
    ]  # totals of part of a profile: no intensity
    if not use_incomplete:  # a forward-only capture's intensity is not the training step's
        pr = pr[text(pr, f"tags.{schema.TAG_NCU_MISSING_PHASE}") == ""]
    if pr.empty:
        return pd.DataFrame(columns=cols)
    flops = numeric(pr, "metrics.ncu_flops_total")

    def ratio(byte_col: str) -> pd.Series:
        b = numeric(pr, byte_col)
        return (flops / b).where((b > 0) & (flops > 0))

    dram = ratio("metrics.ncu_dram_bytes")
    dram = dram.where(dram.notna(), numeric(pr, "metrics.ncu_intensity_dram_flops_per_byte"))
    out = pd.DataFrame(
        {
            "config_key": _config_keys(pr),
            "device_name": text(pr, f"tags.{schema.TAG_DEVICE_NAME}"),
            "profile_run_id": text(pr, "run_id"),
            "profile_env_label": text(pr, f"tags.{schema.TAG_ENV_LABEL}"),
            "intensity_dram_flops_per_byte": dram,
            "intensity_l2_flops_per_byte": ratio("metrics.ncu_l2_bytes"),
            "intensity_l1_flops_per_byte": ratio("metrics.ncu_l1_bytes"),
            "_start": _start(pr),
        }
    )
    out = out[(out["config_key"] != "") & out["intensity_dram_flops_per_byte"].gt(0)]
    out = out.sort_values("_start").groupby(["config_key", "device_name"], sort=False).tail(1)
    return out[cols].reset_index(drop=True)


def profile_notes(runs: pd.DataFrame, use_incomplete: bool = False) -> list[str]:
    """Profile runs that cannot give an intensity (or give one only as asked), and why."""
    pr = of_kind(runs, "profile")
    if pr.empty:
        return []
    phase_notes = _missing_phase_notes(pr, use_incomplete)
    flops, dram = numeric(pr, "metrics.ncu_flops_total"), numeric(pr, "metrics.ncu_dram_bytes")
    logged = numeric(pr, "metrics.ncu_intensity_dram_flops_per_byte")
    unusable = pr[~(((flops > 0) & (dram > 0)) | (logged > 0))]
    notes = []
    cut = text(pr, f"tags.{schema.TAG_NCU_TRUNCATED}") != ""
    if cut.any():
        notes.append(
            f"{int(cut.sum())} profile run(s) were imported from a truncated ncu file "
            f"(--allow-truncated, tag {schema.TAG_NCU_TRUNCATED}; e.g. "
            f"{', '.join(short(r) for r in pr.loc[cut, 'run_id'].head(3))}): their totals cover only "
            "part of the profile, so they give no intensity; import the whole file to place them"
        )
    unusable = unusable[~cut.loc[unusable.index]]
    if len(unusable):
        notes.append(
            f"{len(unusable)} profile run(s) lack ncu_flops_total/ncu_dram_bytes (e.g. "
            f"{', '.join(short(r) for r in unusable['run_id'].head(3))}): their configs use the modeled intensity"
        )
    no_key = pr[_config_keys(pr) == ""]
    if len(no_key):
        notes.append(
            f"{len(no_key)} profile run(s) have no config_key: not joined "
            f"(e.g. {', '.join(short(r) for r in no_key['run_id'].head(3))})"
        )
    return phase_notes + notes


def _missing_phase_notes(pr: pd.DataFrame, use_incomplete: bool) -> list[str]:
    """One note on the profile runs that missed a training phase (tag ncu_missing_phase)."""
    missed = text(pr, f"tags.{schema.TAG_NCU_MISSING_PHASE}")
    phased = pr[missed != ""]
    if not len(phased):
        return []
    what = ", ".join(sorted(set(missed[missed != ""])))
    return [
        f"{len(phased)} profile run(s) missed a training phase (tag "
        f"{schema.TAG_NCU_MISSING_PHASE}: {what}; e.g. "
        f"{', '.join(short(r) for r in phased['run_id'].head(3))}): their intensity is "
        + (
            "used, as --use-incomplete-profiles asks"
            if use_incomplete
            else "left off the training point (python -m analysis --use-incomplete-profiles uses it)"
        )
    ]


def attach_intensity(points: pd.DataFrame, profiles: pd.DataFrame) -> pd.DataFrame:
    """Add `intensity_flops_per_byte` and `intensity_source` (measured | modeled | missing)."""
    out = points.merge(profiles, on=["config_key", "device_name"], how="left")
    for c in (
        "intensity_dram_flops_per_byte",
        "intensity_l2_flops_per_byte",
        "intensity_l1_flops_per_byte",
        "modeled_intensity_flops_per_byte",
        "achieved_flops_per_s",
    ):
        out[c] = pd.to_numeric(out[c], errors="coerce").astype(
            float
        )  # an empty merge leaves object columns
    measured = out["intensity_dram_flops_per_byte"].notna()
    modeled = out["modeled_intensity_flops_per_byte"].gt(0)
    out["intensity_flops_per_byte"] = np.where(
        measured,
        out["intensity_dram_flops_per_byte"],
        np.where(modeled, out["modeled_intensity_flops_per_byte"], np.nan),
    )
    out["intensity_source"] = np.where(
        measured, "measured", np.where(modeled, "modeled", "missing")
    )
    out["profile_run_id"] = out["profile_run_id"].fillna("")
    return out


# ------------------------------------------------------------------------------- roofs
def peaks_load(row: dict) -> dict:
    """A peaks run's record for the ceilings it gives: run id, start (epoch ms), the load average
    it logged at the start and at most while measuring (common/load.py), the CPUs, and
    `trust`: quiet | busy | not recorded (roofline/trust.py, the rule a run's own roofline uses)."""
    return {
        "run_id": str(row["run_id"]),
        "start_time": _float(row.get("_start")),
        "env_label": str(row.get(f"tags.{schema.TAG_ENV_LABEL}") or ""),
        **trust.load_metrics(row),
        "trust": trust.row_trust(row),
    }


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return np.nan


def _trusted(rows: list[dict]) -> list[dict]:
    """The rows of the most trusted kind present (roofline/trust.py TRUST_ORDER)."""
    return trust.trusted(rows, lambda r: r["_load"]["trust"])


def measured_roofs(
    runs: pd.DataFrame,
) -> tuple[dict[tuple[str, str], Roof], dict[str, tuple[str, Roof]], dict[str, dict]]:
    """Roofs from FINISHED peaks runs: per (env_label, device_name), and per device_name alone
    (with the environments it came from) for environments that measured none; each ceiling the
    highest of the most trusted runs (TRUST_ORDER). Also every peaks run's load record
    (`peaks_load`) by its short run id, for the findings that name a ceiling's run."""
    pk = of_kind(runs, "peaks")
    if pk.empty:
        return {}, {}, {}
    pk = pk.assign(_start=_start(pk)).sort_values("_start")
    rows = [r for r in pk.to_dict("records") if not ceilings.roof_from_peaks_row(r, "").is_empty()]
    for r in rows:
        r["_load"] = peaks_load(r)
    by_key: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        env = str(r.get(f"tags.{schema.TAG_ENV_LABEL}") or "")
        by_key.setdefault((env, str(r.get(f"tags.{schema.TAG_DEVICE_NAME}") or "")), []).append(r)
    by_env = {(e, d): highest(_trusted(rs), d) for (e, d), rs in by_key.items()}
    by_dev: dict[str, tuple[str, Roof]] = {}
    for dev in sorted({d for _, d in by_key}):
        chosen = _trusted([r for (_, d), rs in by_key.items() if d == dev for r in rs])
        envs = ", ".join(sorted({str(r.get(f"tags.{schema.TAG_ENV_LABEL}") or "") for r in chosen}))
        by_dev[dev] = (envs, highest(chosen, dev))
    return by_env, by_dev, {short(r["run_id"]): r["_load"] for r in rows}


def choose_roofs(
    envs: Iterable[tuple[str, str]],
    runs: pd.DataFrame,
    vendor_lookup: VendorLookup | None,
) -> tuple[dict[tuple[str, str], dict[str, Any]], list[str]]:
    """Per (env_label, device_name): {'measured', 'vendor', 'roof', 'peaks_runs'} where 'roof'
    (used for the fraction of roof) takes each ceiling from the measured peaks runs when they have
    it (measured_roofs: the highest of the most trusted), else from the vendor lookup (the peak
    table with the user's --peaks-file); 'peaks_runs': the load records of every peaks run (short
    run id -> peaks_load). Returns (roofs, notes)."""
    by_env, by_dev, loads = measured_roofs(runs)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    notes: list[str] = []
    vendor_cache: dict[str, Roof | None] = {}
    for env, dev in envs:
        measured = by_env.get((env, dev))
        if measured is None and dev in by_dev:
            other_env, measured = by_dev[dev]
            notes.append(
                f"{env}: no peaks run of its own; using the measured peaks of '{other_env}' (same device {dev})"
            )
        if dev not in vendor_cache:
            entry = vendor_lookup(dev) if vendor_lookup is not None else None
            vendor_cache[dev] = ceilings.roof_from_vendor(entry, dev)
        vendor = vendor_cache[dev]
        roof = ceilings.measured_over_vendor(measured, vendor)
        if roof is None:
            notes.append(
                f"no peaks for {dev} (env {env}): no peaks run and no vendor entry; fraction of roof and bound "
                "left empty (run `python -m profiling.peaks` there, or add the device with --peaks-file)"
            )
        out[(env, dev)] = {
            "measured": measured,
            "vendor": vendor,
            "roof": roof,
            "peaks_runs": loads,
        }
    return out, notes + busy_peaks_notes(loads, out)


def busy_peaks_notes(loads: dict[str, dict], roofs: dict) -> list[str]:
    """One line per peaks run measured on a busy machine whose ceilings are in use (no quiet or
    unrecorded run measured the device)."""
    used = {
        src.rsplit(" ", 1)[-1]
        for r in roofs.values()
        if r["roof"] is not None
        for src in r["roof"].sources.values()
        if src.startswith("measured")
    }
    return [
        f"peaks run {rid} ({r['env_label']}) measured while the machine was busy (1-minute load "
        f"average {r['load_average_1m_start']:.2f} at the start, up to {r['load_average_1m_max']:.2f}"
        f", on {r['cpu_count']:.0f} CPUs) and no quieter one measured the device: its ceilings may "
        "be low; rerun `python -m profiling.peaks` on a quiet machine"
        for rid, r in loads.items()
        if r["trust"] == "busy" and rid in used
    ]


def evaluate(
    points: pd.DataFrame, roofs: dict[tuple[str, str], dict[str, Roof | None]]
) -> pd.DataFrame:
    """Add ceiling_dtype, peak, bandwidth, ridge, attainable, bound, fraction_of_roof, roof_source."""
    evals = []
    for p in points.to_dict("records"):
        roof = roofs.get((p["env_label"], p["device_name"]), {}).get("roof")
        intens = {
            "dram": p.get("intensity_flops_per_byte"),
            "l2": p.get("intensity_l2_flops_per_byte"),
            "l1": p.get("intensity_l1_flops_per_byte"),
        }
        intens = {k: float(v) for k, v in intens.items() if v is not None and pd.notna(v)}
        ev = evaluate_point(p["precision"], p["achieved_flops_per_s"], intens, roof)
        evals.append(ev.__dict__)
    ev_df = pd.DataFrame(evals, index=points.index, columns=list(PointEval.__dataclass_fields__))
    return pd.concat([points, ev_df], axis=1)
