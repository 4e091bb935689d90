"""Tables (CSV with raw SI values, Markdown for reading) and report.md.

`summary_frame`, `summary_markdown` and `report_markdown` are pure (DataFrames in, text out);
`write_outputs` is the edge that writes them.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis.core import Analysis
from common.fmt import num, pct, si
from analysis.roofline import Roof

SUMMARY_COLUMNS = [
    "env_label",
    "device_name",
    "model",
    "precision",
    "batch_size",
    "image_size",
    "num_classes",
    "channels_last",
    "compile",
    "optimizer",
    "config_key",
    "n_runs",
    "throughput_mean_samples_per_s",
    "throughput_sd_samples_per_s",
    "throughput_sd_kind",
    "achieved_flops_per_s",
    "step_time_median_s",
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
    "efficiency",
    "roof_source",
    "hier_limiter",
    "run_ids",
]


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub Markdown table ('|' in cells escaped)."""

    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
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


def summary_markdown(points: pd.DataFrame) -> str:
    headers = [
        "environment",
        "device",
        "model",
        "precision",
        "batch",
        "classes",
        "runs",
        "samples/s (mean ± SD)",
        "achieved GFLOP/s",
        "intensity (FLOP/B)",
        "intensity source",
        "ceiling",
        "bound",
        "efficiency",
    ]
    rows = []
    for p in points.to_dict("records"):
        thr, sd = _f(p["throughput_mean_samples_per_s"]), _f(p["throughput_sd_samples_per_s"])
        thr_txt = num(thr, 4)
        if math.isfinite(sd):
            thr_txt += f" ± {num(sd, 2)}" + (
                " (within run)" if p["throughput_sd_kind"] == "within run" else ""
            )
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
        rows.append(
            [
                p["env_label"],
                p["device_name"],
                p["model"],
                p["precision"],
                _int(p["batch_size"]),
                _int(p.get("num_classes")),
                int(p["n_runs"]),
                thr_txt,
                num(ach / 1e9, 4) if math.isfinite(ach) else "",
                num(_f(p["intensity_flops_per_byte"]), 3),
                p["intensity_source"],
                ceiling,
                bound,
                pct(_f(p.get("efficiency"))),
            ]
        )
    return md_table(headers, rows)


def roofs_markdown(roofs: dict[tuple[str, str], dict[str, Roof | None]]) -> str:
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
    return md_table(headers, rows)


def environments_markdown(envs: pd.DataFrame) -> str:
    headers = [
        "environment",
        "device",
        "type",
        "host",
        "torch",
        "CUDA",
        "cuDNN",
        "driver",
        "Python",
        "OS",
        "train runs",
    ]
    rows = [
        [
            e["env_label"],
            e["device_name"],
            e["device_type"],
            e["host"],
            e["torch_version"],
            e["cuda_version"],
            e["cudnn_version"],
            e["driver_version"],
            e["python_version"],
            e["os"],
            int(e["n_train_runs"]),
        ]
        for e in envs.to_dict("records")
    ]
    return md_table(headers, rows)


def speedups_markdown(sp: pd.DataFrame) -> str:
    headers = [
        "environment",
        "device",
        "model",
        "batch",
        "classes",
        "precision",
        "speed-up over fp32 (± SD)",
    ]
    rows = [
        [
            r["env_label"],
            r["device_name"],
            r["model"],
            _int(r["batch_size"]),
            _int(r["num_classes"]),
            r["precision"],
            f"{r['speedup']:.2f}×"
            + (f" ± {r['speedup_sd']:.2f}" if math.isfinite(_f(r["speedup_sd"])) else ""),
        ]
        for r in sp.to_dict("records")
    ]
    return md_table(headers, rows)


def complexity_markdown(cx: pd.DataFrame) -> str:
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
    return md_table(headers, rows)


COMPLEXITY_INTRO = (
    "From the latest `complexity` run per environment (`python -m train.complexity`, docs/complexity.md): "
    "forward FLOPs count 2 per multiply-add plus elementwise work, MACs are multiply-adds, training FLOPs "
    "are forward + backward + optimizer; activations are the bytes saved for backward per sample; the "
    "largest batch is predicted from weights, gradients, optimizer state and activations, not measured."
)


def failed_markdown(failed: pd.DataFrame) -> str:
    headers = ["run", "kind", "status", "environment", "device", "name", "error"]
    rows = [
        [
            r["run_id"][:8],
            r["run_kind"],
            r["status"],
            r["env_label"],
            r["device_name"],
            r["run_name"],
            r["error"][:300],
        ]
        for r in failed.to_dict("records")
    ]
    return md_table(headers, rows)


METHOD = """\
- **Achieved FLOP/s** comes from the train runs only (unperturbed timing): training FLOPs per step
  (forward + backward + optimizer, counted at dispatch level) / median step time. Repeated runs of
  one environment and config are averaged.
- **Intensity** is *measured* when a profile run of the same `config_key` exists on the same device
  name (Nsight Compute: FLOPs / DRAM bytes, L2 and L1 bytes where counted); otherwise it is the train
  run's *modeled* intensity (bytes of every op's inputs and outputs, no reuse) and the point is drawn
  as a hollow triangle instead of a filled circle. The `intensity source` column says which.
- **Ceilings**: a measured peaks run of the same environment and device (else of another environment
  with the same device name) gives the roof; ceilings it lacks come from the vendor table
  (profiling.peak_table, with the entries of --peaks-file). Measured ceilings are drawn solid, vendor
  ones dashed. No ceiling: no bound and no efficiency (never a guessed number).
- **Ceiling per precision**: fp32 runs -> the fp32 ceiling; fp16/bf16 autocast runs -> the fp16/bf16
  (tensor-core) ceiling when known, else fp32. On Ampere and newer GPUs cuDNN convolutions in fp32 may
  use TF32 (torch.backends.cudnn.allow_tf32 is on by default), so fp32 runs can exceed the fp32 ceiling;
  the tf32 ceiling is drawn where measured for comparison.
- **Roofline**: attainable = min(intensity × DRAM bandwidth, peak); ridge = peak / bandwidth; a point
  left of the ridge is memory-bound, at or right of it compute-bound; efficiency = achieved / attainable.
  With L2/L1 intensities and ceilings (hierarchical roofline) the lowest bound over the levels names the
  limiting level.
- **Samples/s ± SD**: several runs of one config in one environment -> mean ± SD across runs (ddof = 1);
  one run -> its mean ± the SD over its measured steps (within run). Speed-up SDs are propagated to
  first order from both SDs.
"""


def report_markdown(
    analysis: Analysis,
    figures: dict[str, list[tuple[str, str]]],
    source: str,
    query: str,
    generated: str,
    variability_title: str = "",
) -> str:
    """report.md: figures are relative paths (title, path) grouped by section key."""
    c = analysis.counts
    out = [
        "# Training performance and roofline report",
        "",
        f"Generated {generated} from `{source}`; runs: {query}.",
        "",
        f"Runs used: {c.get('train', 0)} finished train, {c.get('profile', 0)} profile, {c.get('peaks', 0)} peaks; "
        f"{c.get('failed', 0)} failed (listed below). Points (environment × config): {c.get('points', 0)}, "
        f"{c.get('measured_points', 0)} with measured intensity, {c.get('modeled_points', 0)} with modeled intensity.",
        "",
        "## What is missing",
        "",
    ]
    out += [f"- {n}" for n in analysis.notes] or [
        "Nothing: every point has an intensity and a roof."
    ]
    out += [
        "",
        "## Environments",
        "",
        environments_markdown(analysis.environments),
        "",
        "## Ceilings",
        "",
        roofs_markdown(analysis.roofs),
        "",
    ]

    def figs(key: str) -> list[str]:
        return [f"![{t}]({p})\n" for t, p in figures.get(key, [])]

    out += [
        "## Rooflines",
        "",
        "Filled circles: intensity measured with Nsight Compute; hollow triangles: modeled intensity. "
        "Solid ceilings: measured peaks; dashed: vendor / peaks file.",
        "",
    ]
    out += figs("roofline")
    out += [
        "## Summary",
        "",
        "Raw SI values, run ids and every roofline quantity: [summary.csv](summary.csv).",
        "",
        summary_markdown(analysis.points),
        "",
    ]
    out += ["## Throughput vs batch size", ""] + figs("throughput")
    out += ["## Step-time variability", ""]
    out += ([variability_title, ""] if variability_title else []) + (
        figs("variability") or ["No step_time_s series to plot.", ""]
    )
    out += ["## Intensity vs batch size", ""] + figs("intensity")
    out += ["## fp16/bf16 speed-up over fp32", ""]
    if analysis.speedups.empty:
        out += [
            "No configuration has both an fp32 and an fp16/bf16 run in the same environment.",
            "",
        ]
    else:
        out += figs("speedup") + [speedups_markdown(analysis.speedups), ""]
    out += ["## Model complexity", ""]
    if analysis.complexity.empty:
        out += [
            "No `complexity` run in these experiments (`python -m train.complexity` logs one).",
            "",
        ]
    else:
        out += [COMPLEXITY_INTRO, "", complexity_markdown(analysis.complexity), ""]
    out += ["## Failed runs", ""]
    out += [failed_markdown(analysis.failed), ""] if not analysis.failed.empty else ["None.", ""]
    out += ["## Method", "", METHOD]
    return "\n".join(out)


def write_tables(analysis: Analysis, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv = out_dir / "summary.csv"
    summary_frame(analysis.points).to_csv(csv, index=False)
    md = out_dir / "summary.md"
    md.write_text(summary_markdown(analysis.points) + "\n")
    paths = [csv, md]
    if not analysis.speedups.empty:
        sp = out_dir / "speedups.csv"
        analysis.speedups.to_csv(sp, index=False)
        paths.append(sp)
    if not analysis.complexity.empty:
        cx = out_dir / "complexity.csv"
        analysis.complexity.to_csv(cx, index=False)
        paths.append(cx)
    if not analysis.failed.empty:
        fl = out_dir / "failed_runs.csv"
        analysis.failed.to_csv(fl, index=False)
        paths.append(fl)
    return paths
