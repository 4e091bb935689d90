"""The tables beside the roofline points, pure DataFrames like analysis/join.py: the fp16/bf16
speed-ups, model complexity (complexity runs' models.csv), environments, failed runs, and the
point labels they all use, and the profile and peaks runs that place nothing. Nothing here imports mlflow, reads files or plots.
"""

from __future__ import annotations

import io
from typing import Iterable

import numpy as np
import pandas as pd

from analysis.join import ENV_TAGS, of_kind, text
from common import schema
from common.stats import as_float, ratio_interval
from common.fmt import short_id

DEFAULT_NUM_CLASSES = 1000  # torchvision's ImageNet head; other values are named in labels

# ------------------------------------------------------------------------------- speed-ups
SPEEDUP_KEYS = schema.comparison_keys("precision")


def speedups(points: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """fp16/bf16 samples/s over fp32 samples/s for the same env, device and config otherwise
    (SPEEDUP_KEYS: every config field but the precision). Returns (speed-ups, notes).

    Points whose config is incomplete (a run without a batch_size or num_classes param, ...) are
    left out with a note: pandas would merge their missing values as equal and pair unrelated runs.
    The 95 % interval [speedup_ci95_low, speedup_ci95_high] is the findings' own
    (common.stats.ratio_interval): on the log scale from the two points' relative 95 %
    CIs of their mean step times (step_time_ci95_rel), so it never leaves (0, inf); NaN where
    either point lacks that CI.
    """
    cols = [*SPEEDUP_KEYS, "precision", "label", "speedup", "speedup_ci95_low", "speedup_ci95_high"]
    empty = pd.DataFrame(columns=cols)
    if points.empty:
        return empty, []
    keys = SPEEDUP_KEYS
    known = pd.Series(True, index=points.index)
    for k in keys:
        v = points[k]
        known &= v.notna() & (v.astype(str).str.strip() != "")
    candidates = points["precision"].isin(["fp32", "fp16", "bf16"])
    notes = []
    left_out = points[candidates & ~known]
    if len(left_out):
        missing = sorted(
            {k for k in keys for v in left_out[k] if pd.isna(v) or str(v).strip() == ""}
        )
        examples = ", ".join(
            f"{r['env_label']}: {point_label(r)}" for r in left_out.head(3).to_dict("records")
        )
        notes.append(
            f"{len(left_out)} point(s) left out of the fp16/bf16 speed-ups: their runs lack "
            f"{', '.join(missing)}, so no fp32 partner can be matched (e.g. "
            f"{examples})"
        )
    ok = points[known]
    base = ok[ok["precision"] == "fp32"][
        keys + ["throughput_mean_samples_per_s", "step_time_ci95_rel"]
    ]
    half = ok[ok["precision"].isin(["fp16", "bf16"])]
    m = half.merge(base, on=keys, suffixes=("", "_fp32"))
    if m.empty:
        return empty, notes
    h, f = m["throughput_mean_samples_per_s"], m["throughput_mean_samples_per_s_fp32"]
    m["speedup"] = h / f
    cis = [
        ratio_interval(s, as_float(a, nonnegative=True), as_float(b, nonnegative=True))
        or [np.nan, np.nan]
        for s, a, b in zip(m["speedup"], m["step_time_ci95_rel"], m["step_time_ci95_rel_fp32"])
    ]
    m["speedup_ci95_low"] = [c[0] for c in cis]
    m["speedup_ci95_high"] = [c[1] for c in cis]
    m["label"] = [point_label(r) for r in m.to_dict("records")]
    return m[cols].sort_values(keys + ["precision"]).reset_index(drop=True), notes


# ------------------------------------------------------------------------------- model complexity
# columns of complexity/models.csv (train/complexity/tables.py MODEL_COLUMNS, docs/complexity.md) the report uses
COMPLEXITY_COLUMNS = [
    "model",
    "image_size",
    "precision",
    "optimizer",
    "num_classes",
    "params",
    "fwd_flops_per_sample",
    "fwd_macs_per_sample",
    "train_flops_per_sample",
    "activation_bytes_per_sample",
    "device_memory_bytes",
    "max_batch_fit",
]


def complexity_table(entries: list[dict], models: Iterable[str]) -> tuple[pd.DataFrame, list[str]]:
    """Rows of the `complexity/models.csv` tables (one entry per environment: run_id, env_label,
    device_name, device_memory_source, csv text) for the `models` of the analysed runs, or for every
    model when none of them was measured. Returns (table, notes)."""
    cols = ["env_label", "device_name", *COMPLEXITY_COLUMNS, "device_memory_source", "run_id"]
    frames, notes = [], []
    for e in entries:
        try:
            df = pd.read_csv(io.StringIO(e["csv"]))
        except (ValueError, pd.errors.ParserError) as exc:
            notes.append(
                f"complexity run {short_id(e['run_id'])}: models.csv unreadable ({str(exc).splitlines()[0]}); "
                "not in the report"
            )
            continue
        missing = [c for c in COMPLEXITY_COLUMNS if c not in df.columns]
        if missing:
            notes.append(
                f"complexity run {short_id(e['run_id'])}: models.csv lacks {', '.join(missing)}; not in the report"
            )
            continue
        for k in ("env_label", "device_name", "device_memory_source", "run_id"):
            df[k] = e.get(k, "") or ""
        frames.append(df[cols])
    if not frames:
        return pd.DataFrame(columns=cols), notes
    table = pd.concat(frames, ignore_index=True)
    wanted = set(models)
    mine = table[table["model"].isin(wanted)]
    if mine.empty:
        notes.append(
            "no complexity run measured the analysed models "
            f"({', '.join(sorted(wanted)) or 'none'}); the Model complexity section lists every model it has"
        )
    else:
        table = mine
    return table.sort_values(["env_label", "model", "image_size"]).reset_index(drop=True), notes


# ------------------------------------------------------------------------------- environments, failures
def environments(train: pd.DataFrame) -> pd.DataFrame:
    """One row per (env_label, device_name) with its latest train run's environment tags."""
    cols = ["env_label", "device_name", *ENV_TAGS, "n_train_runs"]
    if train.empty:
        return pd.DataFrame(columns=cols)
    t = train.sort_values("start_time")
    last = (
        t.groupby(["env_label", "device_name"], sort=True)
        .tail(1)
        .set_index(["env_label", "device_name"])
    )
    counts = t.groupby(["env_label", "device_name"]).size().rename("n_train_runs")
    out = last[ENV_TAGS].join(counts).reset_index()
    return out[cols].sort_values(["env_label", "device_name"]).reset_index(drop=True)


def failed_runs(runs: pd.DataFrame, devices: set[str] | None = None) -> pd.DataFrame:
    """FAILED/KILLED train runs, and profile/peaks runs (of `devices` only, when given), with their
    `error` tag."""
    cols = ["run_id", "run_kind", "status", "env_label", "device_name", "run_name", "error"]
    if runs.empty:
        return pd.DataFrame(columns=cols)
    kind = text(runs, f"tags.{schema.TAG_RUN_KIND}")
    status = text(runs, "status")
    relevant = (kind == "train") | (
        kind.isin(["profile", "peaks"])
        & (text(runs, f"tags.{schema.TAG_DEVICE_NAME}").isin(devices) if devices else True)
    )
    bad = runs[relevant & status.isin(["FAILED", "KILLED"])]
    out = pd.DataFrame(
        {
            "run_id": text(bad, "run_id"),
            "run_kind": text(bad, f"tags.{schema.TAG_RUN_KIND}"),
            "status": text(bad, "status"),
            "env_label": text(bad, f"tags.{schema.TAG_ENV_LABEL}"),
            "device_name": text(bad, f"tags.{schema.TAG_DEVICE_NAME}"),
            "run_name": text(bad, "tags.mlflow.runName"),
            "error": text(bad, f"tags.{schema.TAG_ERROR}").replace("", "(no error tag)"),
        }
    )
    return out[cols].reset_index(drop=True)


def point_label(row: pd.Series | dict, sizes_differ: bool = False) -> str:
    """'model/b<batch>/<precision>' plus non-default options (image size, classes, channels_last,
    compile) and a data-parallel point's engine and world size; the image size always when
    `sizes_differ` (the points labelled together differ in it: 224 px is then said too)."""
    b = row.get("batch_size")
    b = int(b) if b is not None and pd.notna(b) else "?"
    label = f"{row.get('model') or '?'}/b{b}/{row.get('precision') or '?'}"
    size = row.get("image_size")
    if size is not None and pd.notna(size) and (sizes_differ or int(size) != 224):
        label += f"/{int(size)}px"
    classes = row.get("num_classes")
    if classes is not None and pd.notna(classes) and int(classes) != DEFAULT_NUM_CLASSES:
        label += f"/{int(classes)}cls"
    if str(row.get("channels_last", "")).lower() == "true":
        label += "/cl"
    if str(row.get("compile", "")).lower() == "true":
        label += "/compiled"
    return label + engine_label(row, "/")


def engine_label(row: pd.Series | dict, sep: str = "") -> str:
    """A data-parallel point's engine and world size, 'ddp×4' or 'zero2×8' (DeepSpeed, its ZeRO
    stage), after `sep`; '' for a single-process point."""
    engine = str(row.get("distributed") or "none").lower()
    if engine in ("none", "nan"):
        return ""
    if engine == "deepspeed":
        stage = row.get("zero_stage")
        engine = f"zero{int(stage)}" if stage is not None and pd.notna(stage) else engine
    ws = row.get("world_size")
    return f"{sep}{engine}" + (f"×{int(ws)}" if ws is not None and pd.notna(ws) else "")


# ------------------------------------------------------------------------------- runs that place nothing
def _train_command(params: dict, env: str) -> str:
    """The `python -m train` line that times the config of a run's params in environment `env`."""
    get = lambda k: str(params.get(f"params.{k}") or "")  # noqa: E731
    parts = [
        "python -m train",
        f"--model {get('model') or '?'}",
        f"--batch {get('batch_size') or '?'}",
    ]
    for flag, key in (("--precision", "precision"), ("--image-size", "image_size")):
        parts.append(f"{flag} {get(key) or '?'}")
    for flag, key in (("--num-classes", "num_classes"), ("--optimizer", "optimizer")):
        if get(key):
            parts.append(f"{flag} {get(key)}")
    parts += [
        f"--{k.replace('_', '-')}" for k in ("channels_last", "compile") if get(k).lower() == "true"
    ]
    return " ".join(parts + [f"--env-label {env or '<label>'}"])


def _how_to_place(row: dict, env: str) -> str:
    """What would give a profile run its point: timing its config with `python -m train`, or,
    for an imported --workload (no torchvision model; main suggested `python -m train --model
    <workload>`), nothing this project can time."""
    workload = str(row.get("params.workload") or "")
    if workload and workload == str(row.get("params.model") or ""):
        return (
            f"it profiles --workload {workload}, which python -m train cannot time (it times "
            "torchvision models): its counters are in the profile run, without a roofline point"
        )
    return f"time it there ({_train_command(row, env)})"


def unplaced_notes(runs: pd.DataFrame, points: pd.DataFrame, profiles: pd.DataFrame) -> list[str]:
    """Profile runs whose intensity joined no point, and peaks runs whose device has no point: each
    with what would place it (timing that config, or any config, on that device)."""
    placed = set(zip(points["config_key"], points["device_name"]))
    devices = set(points["device_name"])
    pr = of_kind(runs, "profile")
    pr = pr.set_index(text(pr, "run_id"))
    notes = []
    for p in profiles.to_dict("records"):
        if (p["config_key"], p["device_name"]) in placed:
            continue
        row = pr.loc[p["profile_run_id"]].to_dict()
        fields = {k.removeprefix("params."): v for k, v in row.items()}
        for k in ("batch_size", "image_size", "num_classes"):  # a hand-set param: '?', not a crash
            fields[k] = pd.to_numeric(fields.get(k), errors="coerce")
        label = point_label(fields)
        env = p["profile_env_label"]
        notes.append(
            f"profile run {short_id(p['profile_run_id'])} ({label} on {p['device_name']}"
            f"{', env ' + env if env else ''}) placed no point: no finished train run of that config "
            f"on that device; {_how_to_place(row, env)}"
        )
    pk = of_kind(runs, "peaks")
    for run_id, env, dev in zip(
        text(pk, "run_id"),
        text(pk, f"tags.{schema.TAG_ENV_LABEL}"),
        text(pk, f"tags.{schema.TAG_DEVICE_NAME}"),
    ):
        if dev not in devices:
            notes.append(
                f"peaks run {short_id(run_id)} ({dev or 'unknown device'}{', env ' + env if env else ''}) "
                f"gave no roof: no finished train run on {dev or 'its device'}; time a config there "
                f"(python -m train --env-label {env or '<label>'} ...)"
            )
    return notes
