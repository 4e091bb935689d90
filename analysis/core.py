"""The analysis as one pure function: runs DataFrame -> points, roofs, tables and notes.

`build()` takes the runs (mlflow.search_runs layout, see analysis/join.py) and an injected vendor
lookup, so tests can pass a stub and nothing here touches MLflow, files or plots. The Analysis it
returns is frozen: the findings, the figures and the report read it and never change it (what
they add to the report is theirs: analysis/report.py's Report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import pandas as pd

from analysis import join, roofs, scaling, screen, tables
from common import plausible
from common.fmt import short_id
from roofline.model import TENSOR_PRECISIONS, Roof


@dataclass(frozen=True)
class Analysis:
    """The joined numbers every figure, finding and table is drawn from, built once."""

    points: pd.DataFrame
    """one row per (env_label, device_name, config_key): samples/s mean ± SD, achieved FLOP/s,
    intensity and its source, ceiling, bound, fraction of roof (raw SI values)."""
    train: pd.DataFrame
    """one row per FINISHED train run, with its own rates (join.RUN_RATE_COLUMNS)."""
    roofs: dict[tuple[str, str], dict[str, Roof | None]]
    """(env_label, device_name) -> {'measured', 'vendor', 'roof', 'peaks_runs'} (roof = used for
    the fraction of roof; analysis/roofs.py choose_roofs)."""
    environments: pd.DataFrame
    failed: pd.DataFrame
    speedups: pd.DataFrame
    notes: tuple[str, ...] = ()
    """what is missing, one line each: what the fetch said, then the screen's and the joins'."""
    counts: dict[str, int] = field(default_factory=dict)
    complexity: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rows of the latest complexity run's models.csv per environment (tables.complexity_table)."""
    scaling: pd.DataFrame = field(default_factory=pd.DataFrame)
    """one row per data-parallel point: samples/s, ideal, scaling efficiency, exposed
    communication against world size (analysis/scaling.py)."""
    flags: tuple[str, ...] = ()
    """implausible values (common.plausible): a point above its roof, scaling over 100 %, a wide CI"""
    runs: pd.DataFrame | None = None
    """the fetched runs without those analysis/screen.py left out: what the findings read"""


def build(
    runs: pd.DataFrame,
    vendor_lookup: roofs.VendorLookup | None = None,
    complexity: list[dict] | None = None,
    use_incomplete_profiles: bool = False,
    notes: tuple[str, ...] | list[str] = (),
) -> Analysis:
    """Join train, profile and peaks runs into roofline points; `complexity` are the models.csv
    tables of complexity runs (fetch.fetch_complexity); `use_incomplete_profiles` lets a profile
    that missed a training phase give its intensity; `notes`: what the fetch said, first in the
    analysis' notes. Never raises on missing data: what is missing ends up in `notes` and as
    empty cells. Runs holding a value that is not a measurement are left out first
    (analysis/screen.py), each named in `notes`."""
    fetched = list(notes)
    runs, notes = screen.runs(runs)
    n_screened = len(notes)
    runs, value_notes = screen.values(runs)  # a bad value of a key that leaves its run in
    notes += value_notes
    counts, running_notes = _run_counts(runs)
    notes += running_notes
    train = join.train_runs(runs)
    notes += join.train_notes(train)
    points, env_roofs, point_notes = _roofline_points(
        runs, train, vendor_lookup, use_incomplete_profiles
    )
    notes += point_notes
    counts.update(
        points=len(points),
        measured_points=int((points["intensity_source"] == "measured").sum()),
        modeled_points=int((points["intensity_source"] == "modeled").sum()),
    )
    speedups, speedup_notes = tables.speedups(points)
    notes += speedup_notes
    scaled, scaling_notes = scaling.scaling(points)
    notes += scaling_notes
    complexity_rows, complexity_notes = tables.complexity_table(
        complexity or [], set(points["model"])
    )
    notes += complexity_notes
    complexity_rows, screened = screen.complexity(complexity_rows)
    notes += screened
    failed = tables.failed_runs(runs, set(train["device_name"]) or None)
    counts["failed"] = len(failed)
    counts["screened"] = n_screened
    return Analysis(
        points=points.sort_values(
            ["env_label", "device_name", "model", "precision", "batch_size"]
        ).reset_index(drop=True),
        train=train,
        roofs=env_roofs,
        environments=tables.environments(train),
        failed=failed,
        speedups=speedups,
        notes=tuple(fetched + notes),
        counts=counts,
        complexity=complexity_rows,
        scaling=scaled,
        flags=tuple(implausible(points, scaled, train)),
        runs=runs,
    )


def _run_counts(runs: pd.DataFrame) -> tuple[dict[str, int], list[str]]:
    """FINISHED runs per kind, and a note on the runs still running (left out)."""
    status = join.text(runs, "status")
    kind = join.text(runs, "tags.run_kind")
    counts = {
        k: int(((kind == k) & (status == "FINISHED")).sum()) for k in ("train", "profile", "peaks")
    }
    running = int(
        (
            kind.isin(["train", "profile", "peaks"])
            & ~status.isin(["FINISHED", "FAILED", "KILLED"])
        ).sum()
    )
    notes = [f"{running} run(s) not finished (RUNNING/SCHEDULED) ignored"] if running else []
    return counts, notes


def _roofline_points(
    runs: pd.DataFrame,
    train: pd.DataFrame,
    vendor_lookup: roofs.VendorLookup | None,
    use_incomplete_profiles: bool = False,
) -> tuple[pd.DataFrame, dict, list[str]]:
    """(points, roofs, notes): the train runs' repeats averaged, placed at their intensity under
    their environment's roof, labelled; a profile that missed a training phase gives no intensity
    unless `use_incomplete_profiles`."""
    points = join.aggregate_repeats(train)
    measured = roofs.profile_intensities(runs, use_incomplete_profiles)
    notes = roofs.profile_notes(runs, use_incomplete_profiles)
    notes += tables.unplaced_notes(runs, points, measured)
    points = roofs.attach_intensity(points, measured)
    envs = sorted({(e, d) for e, d in zip(points["env_label"], points["device_name"])})
    env_roofs, roof_notes = roofs.choose_roofs(envs, runs, vendor_lookup)
    notes += roof_notes
    points = roofs.evaluate(points, env_roofs)
    sizes = points["image_size"] if "image_size" in points else pd.Series(dtype=float)
    differ = pd.to_numeric(sizes, errors="coerce").nunique() > 1
    points["label"] = [tables.point_label(r, differ) for r in points.to_dict("records")]
    return points, env_roofs, notes + _point_notes(points)


def _point_notes(points: pd.DataFrame) -> list[str]:
    """Points off the roofline or held against fp32 for want of their own ceiling (a point above
    its roof is a flag: `implausible`)."""
    notes = []
    missing = points[points["intensity_source"] == "missing"]
    if len(missing):
        notes.append(
            f"{len(missing)} point(s) have no intensity (no profile run and no modeled intensity): "
            f"not on the roofline, e.g. {', '.join(missing['label'].head(3))}"
        )
    fallback = points[
        points["precision"].isin(TENSOR_PRECISIONS)
        & (points["ceiling_dtype"] == "fp32")
        & points["peak_flops_per_s"].notna()
    ]
    for (env, dev), g in fallback.groupby(["env_label", "device_name"]):
        notes.append(
            f"{env}: no {'/'.join(sorted(set(g['precision'])))} ceiling for {dev}; "
            "those points are held against the fp32 ceiling"
        )
    return notes


MAX_FLAGS = 10
"""flag lines per kind in the report; the rest are counted"""


def implausible(points: pd.DataFrame, scaling_rows: pd.DataFrame, train: pd.DataFrame) -> list[str]:
    """One line per implausible value, in common.plausible's words (a train run's description
    says the same): points above their roof, scaling efficiencies over 100 %, runs whose mean
    step time has a 95 % confidence interval wider than ±50 %."""
    out: list[str] = []
    kinds = [
        (
            points,
            "fraction_of_roof",
            plausible.roof_flag,
            lambda r: f"{r['env_label']}: {r['label']}",
        ),
        (
            scaling_rows,
            "scaling_efficiency",
            plausible.scaling_flag,
            lambda r: f"{r['env_label']}: {r['label']}",
        ),
        (
            train,
            "step_time_ci95_rel",
            plausible.ci_flag,
            lambda r: f"{r['env_label']}: train run {short_id(r['run_id'])} ({r['run_name']})",
        ),
    ]
    for frame, column, flag, name in kinds:
        if frame.empty or column not in frame:
            continue
        lines = [
            f"{name(r)}: {flag(r[column])}" for r in frame.to_dict("records") if flag(r[column])
        ]
        out += lines[:MAX_FLAGS]
        if len(lines) > MAX_FLAGS:
            out.append(
                f"... and {len(lines) - MAX_FLAGS} more like these (summary.csv, scaling.csv)"
            )
    return out


def variability_config(analysis: Analysis, wanted: str | None = None) -> str | None:
    """The config_key for the step-time variability figure: `wanted` if given, else the config
    present in the most environments (ties: most runs, then the smallest key for stability)."""
    t = analysis.train
    if t.empty:
        return None
    if wanted:
        return wanted if (t["config_key"] == wanted).any() else None
    t = t[t["config_key"] != ""]
    if t.empty:
        return None
    stats = t.groupby("config_key").agg(envs=("env_label", "nunique"), runs=("run_id", "size"))
    stats = stats.reset_index().sort_values(
        ["envs", "runs", "config_key"], ascending=[False, False, True]
    )
    return str(stats.iloc[0]["config_key"])


def variability_runs(analysis: Analysis, key: str, per_env: int = 5) -> pd.DataFrame:
    """The train runs of config `key` whose step_time_s series are plotted (latest `per_env` per env)."""
    t = analysis.train
    t = t[t["config_key"] == key].sort_values("start_time")
    return t.groupby(["env_label", "device_name"]).tail(per_env).reset_index(drop=True)
