"""The report's tables (and the summary as a CSV-ready frame): pure, DataFrames in, `Table`s of
text cells out; numbers are rounded here, for reading, and nowhere before. `md_table` writes a Table
as Markdown; analysis/report.py assembles the tables into report.md and analysis/html.py into
report.html.
"""

from __future__ import annotations

import html
import math
from typing import NamedTuple

import pandas as pd

from roofline.model import Roof
from analysis.tables import engine_label
from common import schema
from common.fmt import ci95, num, pct, short_id, si
from common.stats import excludes_one

SUMMARY_COLUMNS = [
    *schema.WHERE_KEYS,
    *schema.CONFIG_FIELDS,
    schema.TAG_CONFIG_KEY,
    "n_runs",
    "throughput_mean_samples_per_s",
    "throughput_sd_samples_per_s",
    "throughput_sd_kind",
    "throughput_min_run_samples_per_s",
    "throughput_max_run_samples_per_s",
    "throughput_spread_ratio",
    "achieved_flops_per_s",
    "step_time_mean_s",
    "step_time_ci95_rel",
    "measured_steps",
    "train_flops_per_step",
    "intensity_flops_per_byte",
    "intensity_source",
    "modeled_intensity_flops_per_byte",
    "profile_run_id",
    "intensity_l2_flops_per_byte",
    "intensity_l1_flops_per_byte",
    "ceiling_dtype",
    "peak_flops_per_s",
    "dram_bytes_per_s",
    "ridge_flops_per_byte",
    "attainable_flops_per_s",
    "bound",
    "fraction_of_roof",
    "roof_source",
    "hier_limiter",
    "run_ids",
]


def md_text(value) -> str:
    """Text from runs (labels, device names, errors, filters) as Markdown shows it: HTML's
    `& < >` escaped, so a label such as `<img src=x onerror=...>` is read, never rendered."""
    return html.escape(str(value), quote=False)


class Table(NamedTuple):
    """A table for reading: column headers and rows of plain-text cells (rounded for display)."""

    headers: list[str]
    rows: list[list]


def md_table(table: Table) -> str:
    """A GitHub Markdown table ('|' in cells escaped)."""

    def cell(v) -> str:
        return md_text(v).replace("|", "\\|").replace("\n", " ")

    headers, rows = table
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |"]
    lines += ["|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def _f(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _int(v) -> str:
    """A whole number for a table cell; '' when missing."""
    f = _f(v)
    return str(int(f)) if math.isfinite(f) else ""


def summary_frame(points: pd.DataFrame) -> pd.DataFrame:
    """The summary table with raw SI values (what summary.csv holds)."""
    df = points.copy()
    for c in SUMMARY_COLUMNS:
        if c not in df:
            df[c] = math.nan
    df["run_ids"] = [";".join(r) if isinstance(r, list) else str(r) for r in df["run_ids"]]
    df["batch_size"] = df["batch_size"].astype("Int64")
    df["image_size"] = df["image_size"].astype("Int64")
    df["num_classes"] = pd.to_numeric(df["num_classes"], errors="coerce").astype("Int64")
    return df[SUMMARY_COLUMNS]


def samples_phrase(thr, n_runs, lo=None, hi=None, ci_rel=None, unreliable=False) -> str:
    """A configuration's samples/s as every page writes it: `2.81 (1 run, 95% CI ±79.4%)`,
    `5.1 (3 runs 4.2–6.0, 95% CI ±12%)` (the runs' range, the spread shown, not averaged away,
    and the one uncertainty, named the same way everywhere), `, unreliable` when unstable."""
    runs = int(_f(n_runs)) if math.isfinite(_f(n_runs)) else 0
    lo, hi = _f(lo), _f(hi)
    spread = f" {num(lo)}–{num(hi)}" if runs > 1 and math.isfinite(lo) and hi > lo else ""
    ci = ci95(_f(ci_rel))
    inner = f"{runs} run{'s' if runs != 1 else ''}{spread}" + (f", {ci}" if ci else "")
    return f"{num(_f(thr))} ({inner})" + (", unreliable" if unreliable else "")


def _samples_text(p: dict, unreliable: bool = False) -> str:
    """A point's samples/s (samples_phrase)."""
    return samples_phrase(
        p["throughput_mean_samples_per_s"],
        p.get("n_runs"),
        p.get("throughput_min_run_samples_per_s"),
        p.get("throughput_max_run_samples_per_s"),
        p.get("step_time_ci95_rel"),
        unreliable,
    )


KNOB_COLUMNS = {
    "image_size": "image",
    "channels_last": "channels_last",
    "compile": "compile",
    "optimizer": "optimizer",
    "num_classes": "classes",
    "workers": "workers",
}
"""knobs the summary shows a column for when its points differ in them (beside model, precision,
batch and engine, always shown): two rows `resnet18 fp32 8` that differ in channels_last showed
nothing that told them apart"""


def knob_columns(points: pd.DataFrame) -> list[str]:
    """The KNOB_COLUMNS the points differ in."""
    return [k for k in KNOB_COLUMNS if k in points and points[k].astype(str).nunique() > 1]


def by_samples(points: pd.DataFrame) -> pd.DataFrame:
    """The points fastest first within each environment (and device)."""
    order = pd.to_numeric(points["throughput_mean_samples_per_s"], errors="coerce")
    return (
        points.assign(_order=-order.fillna(-1))
        .sort_values(["env_label", "device_name", "_order"], kind="stable")
        .drop(columns="_order")
    )


KNOB_UNITS = {"image_size": " px"}
"""the unit a knob's cell names after its value"""


def _knob(v, unit: str = "") -> str:
    """A knob's value for a cell: whole numbers without '.0' (then `unit`), '' when missing."""
    f = _f(v)
    if math.isfinite(f) and f.is_integer():
        return f"{int(f)}{unit}"
    return "" if str(v) in ("nan", "None", "<NA>", "") else str(v)


def summary_table(points: pd.DataFrame, unstable: frozenset = frozenset()) -> Table:
    """One row per point, fastest first within each environment, with every knob its points
    differ in; the bound and fraction of an unstable configuration (`unstable`: (env_label,
    device_name, config_key)) marked unreliable, as everywhere."""
    knobs = knob_columns(points)
    headers = [
        "environment",
        "device",
        "model",
        "precision",
        "batch",
        *(KNOB_COLUMNS[k] for k in knobs),
        "engine",
        "runs",
        "samples/s (runs, their range, 95% CI)",
        "achieved",
        "intensity (FLOP/B)",
        "intensity source",
        "ceiling",
        "bound",
        "fraction of roof",
    ]
    rows = []
    for p in by_samples(points).to_dict("records"):
        shaky = (p["env_label"], p["device_name"], p["config_key"]) in unstable
        thr_txt = _samples_text(p, shaky)
        ach = _f(p["achieved_flops_per_s"])
        peak = _f(p.get("peak_flops_per_s"))
        ceiling = (
            f"{p['ceiling_dtype']} {si(peak, 'FLOP/s')} ({p['roof_source']})"
            if math.isfinite(peak)
            else "no peaks"
        )
        bound = p["bound"] or ("no peaks" if not math.isfinite(peak) else "")
        if p.get("hier_limiter"):
            bound += f" (hierarchical: {p['hier_limiter']})"
        frac = pct(_f(p.get("fraction_of_roof")))
        if shaky:
            bound, frac = f"{bound} (unreliable: unstable)", f"{frac} (unreliable)" if frac else ""
        rows.append(
            [
                p["env_label"],
                p["device_name"],
                p["model"],
                p["precision"],
                _int(p["batch_size"]),
                *(_knob(p.get(k), KNOB_UNITS.get(k, "")) for k in knobs),
                engine_label(p) or "one process",
                int(p["n_runs"]),
                thr_txt,
                si(ach, "FLOP/s") if math.isfinite(ach) else "",
                num(_f(p["intensity_flops_per_byte"]), 3),
                p["intensity_source"],
                ceiling,
                bound,
                frac,
            ]
        )
    return Table(headers, rows)


def roofs_table(roofs: dict[tuple[str, str], dict[str, Roof | None]]) -> Table:
    headers = ["environment", "device", "ceiling", "value", "source"]
    rows = []
    for (env, dev), rs in sorted(roofs.items()):
        roof = rs.get("roof")
        if roof is None:
            rows.append([env, dev, "none", "", f"no peaks for {dev}"])
            continue
        for dtype, v in sorted(roof.flops_per_s.items()):
            rows.append(
                [
                    env,
                    dev,
                    f"{dtype} compute",
                    si(v, "FLOP/s"),
                    roof.sources.get(f"flops:{dtype}", ""),
                ]
            )
        for level, v in roof.bytes_per_s.items():
            rows.append(
                [
                    env,
                    dev,
                    f"{level.upper()} bandwidth",
                    si(v, "B/s"),
                    roof.sources.get(f"bytes:{level}", ""),
                ]
            )
        vendor, measured = rs.get("vendor"), rs.get("measured")
        if measured is not None and vendor is not None:  # the vendor values also drawn (dashed)
            for dtype, v in sorted(vendor.flops_per_s.items()):
                if roof.sources.get(f"flops:{dtype}") != vendor.sources.get(f"flops:{dtype}"):
                    rows.append(
                        [
                            env,
                            dev,
                            f"{dtype} compute (vendor, drawn dashed)",
                            si(v, "FLOP/s"),
                            vendor.sources.get(f"flops:{dtype}", ""),
                        ]
                    )
            if "dram" in vendor.bytes_per_s and "dram" in measured.bytes_per_s:
                rows.append(
                    [
                        env,
                        dev,
                        "DRAM bandwidth (vendor, drawn dashed)",
                        si(vendor.bytes_per_s["dram"], "B/s"),
                        vendor.sources.get("bytes:dram", ""),
                    ]
                )
    return Table(headers, rows)


ENVIRONMENT_COLUMNS = {
    "environment": "env_label",
    "device": "device_name",
    "type": "device_type",
    "host": "host",
    "torch": "torch_version",
    "CUDA": "cuda_version",
    "cuDNN": "cudnn_version",
    "driver": "driver_version",
    "Python": "python_version",
    "OS": "os",
}
"""the environments table's columns: header -> the column of Analysis.environments."""


def environments_table(envs: pd.DataFrame) -> Table:
    rows = [
        [e[c] for c in ENVIRONMENT_COLUMNS.values()] + [int(e["n_train_runs"])]
        for e in envs.to_dict("records")
    ]
    return Table([*ENVIRONMENT_COLUMNS, "train runs"], rows)


def speedups_table(sp: pd.DataFrame) -> Table:
    headers = [
        "environment",
        "device",
        "model",
        "batch",
        "classes",
        "precision",
        "speed-up over fp32 (95 % CI)",
    ]
    rows = [
        [
            r["env_label"],
            r["device_name"],
            r["model"],
            _int(r["batch_size"]),
            _int(r["num_classes"]),
            r["precision"],
            speedup_text(r["speedup"], r["speedup_ci95_low"], r["speedup_ci95_high"]),
        ]
        for r in sp.to_dict("records")
    ]
    return Table(headers, rows)


def speedup_text(speedup, low, high) -> str:
    """'2.00× (95 % CI 1.86–2.15)', '; interval includes 1' where it does (no speed-up shown),
    or '2.00× (no CI: a point lacks its step-time CI)'."""
    lo, hi = _f(low), _f(high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{_f(speedup):.2f}× (no CI: a point lacks its step-time CI)"
    both = f"{_f(speedup):.2f}× (95 % CI {lo:.2f}–{hi:.2f}"
    return both + (")" if excludes_one([lo, hi]) else "; interval includes 1)")


def complexity_table(cx: pd.DataFrame) -> Table:
    headers = [
        "environment",
        "device",
        "model",
        "image",
        "precision",
        "classes",
        "params",
        "fwd GFLOP/sample",
        "fwd GMAC/sample",
        "train GFLOP/sample",
        "activations/sample",
        "largest batch that fits",
        "device memory assumed",
    ]
    rows = []
    for r in cx.to_dict("records"):
        mem = si(_f(r["device_memory_bytes"]), "B")
        src = str(r.get("device_memory_source") or "").strip()
        rows.append(
            [
                r["env_label"],
                r["device_name"],
                r["model"],
                f"{_int(r['image_size'])} px",
                r["precision"],
                _int(r["num_classes"]),
                f"{num(_f(r['params']) / 1e6, 4)} M",
                num(_f(r["fwd_flops_per_sample"]) / 1e9, 4),
                num(_f(r["fwd_macs_per_sample"]) / 1e9, 4),
                num(_f(r["train_flops_per_sample"]) / 1e9, 4),
                si(_f(r["activation_bytes_per_sample"]), "B"),
                _int(r["max_batch_fit"]),
                f"{mem} ({src})" if src and mem else mem,
            ]
        )
    return Table(headers, rows)


def failed_table(failed: pd.DataFrame) -> Table:
    headers = ["run", "kind", "status", "environment", "device", "name", "error"]
    rows = [
        [
            short_id(r["run_id"]),
            r["run_kind"],
            r["status"],
            r["env_label"],
            r["device_name"],
            r["run_name"],
            r["error"][:300],
        ]
        for r in failed.to_dict("records")
    ]
    return Table(headers, rows)


def scaling_table(sc: pd.DataFrame) -> Table:
    """The scaling table: per data-parallel point, samples/s against the ideal, the efficiency and
    the communication the step exposes."""
    headers = [
        "environment",
        "device",
        "series",
        "world size",
        "nodes",
        "runs",
        "samples/s (global)",
        "ideal samples/s",
        "scaling efficiency",
        "baseline",
        "step time",
        "compute-only step",
        "exposed communication",
        "share of the step",
    ]
    rows = [
        [
            r["env_label"],
            r["device_name"],
            r["series"],
            _int(r["world_size"]),
            _int(r["nodes"]),
            int(r["n_runs"]),
            num(_f(r["throughput_mean_samples_per_s"]), 4),
            num(_f(r["ideal_samples_per_s"]), 4),
            pct(_f(r["scaling_efficiency"])),
            r["baseline"],
            si(_f(r["step_time_mean_s"]), "s"),
            si(_f(r["compute_only_step_time_mean_s"]), "s"),
            si(_f(r["exposed_comm_time_s"]), "s"),
            pct(_f(r["exposed_comm_time_share"])),
        ]
        for r in sc.to_dict("records")
    ]
    return Table(headers, rows)
