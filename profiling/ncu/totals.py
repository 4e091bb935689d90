"""A profile's counters summed: per-kernel table, totals, NVTX phase shares, and the MLflow
metrics and tags of a `profile` run (docs/profiling.md, docs/schema.md).

`summarize` applies the counting rules (profiling.ncu.counting) to every kernel of a parsed report.
Pure: no mlflow, no file writes (the dicts are logged by profiling.cli).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pandas as pd

from common import schema
from common.errors import BenchError
from profiling.ncu.chips.counters import ChipCounters
from profiling.ncu.counting import (
    HALF_LANES,
    device_from_report,
    kernel_quantities,
    tensor_inst_caution,
)
from profiling.ncu.names import PRECISIONS, TENSOR_INST, is_relevant
from profiling.ncu.parse import NcuKernel, NcuReport

QUANTITIES = (
    "flops_fp64",
    "flops_fp32",
    "flops_fp16",
    "flops_tensor",
    "dram_bytes",
    "l2_bytes",
    "l1_bytes",
    "time_s",
)


@dataclass
class NcuSummary:
    """Aggregated counters of one profile (all values raw SI)."""

    kernels: pd.DataFrame
    """one row per profiled kernel (see KERNEL_COLUMNS)."""
    totals: dict[str, float]
    """sum over kernels of every measured quantity; flops_total = sum of measured precisions."""
    measured: list[str]
    """quantities with counters in the input (others are absent, never zero-filled)."""
    sources: dict[str, str] = field(default_factory=dict)
    """quantity -> counters it came from."""
    phases: pd.DataFrame | None = None
    """per NVTX phase: kernels, time_s, flops_total, dram_bytes and their shares; None without NVTX."""
    partial: dict[str, str] = field(default_factory=dict)
    """quantity -> what it lacks, for quantities counted incompletely ("no hadd, hmul counters in
    3 of 98 kernels"): their totals, and ncu_flops_total, are lower bounds."""
    cautions: list[str] = field(default_factory=list)
    """assumptions behind a number that may not hold (tensor FLOPs from instructions on sm_80+)."""
    truncated: str = ""
    """why the input looks cut short (NcuReport.truncated; logged only with --allow-truncated):
    its totals cover only the results it holds, so it has no intensity and no roofline point."""

    @property
    def warnings(self) -> list[str]:
        """One line per partial quantity and per caution, for the CLI to print."""
        return [
            f"{q} is incomplete ({why}): ncu_{q} (where logged) and ncu_flops_total are lower bounds"
            for q, why in self.partial.items()
        ] + list(self.cautions)

    @property
    def missing(self) -> list[str]:
        return [q for q in QUANTITIES if q not in self.measured]

    def intensity(self, level: str) -> float | None:
        """FLOPs per byte at "dram", "l2" or "l1" (None when FLOPs or bytes were not measured)."""
        f, b = self.totals.get("flops_total"), self.totals.get(f"{level}_bytes")
        if f is None or b is None or b <= 0:
            return None
        return f / b

    def mlflow_metrics(self) -> dict[str, float]:
        """The `profile` run's metrics (docs/profiling.md): only measured quantities appear."""
        t, out = self.totals, {}
        for p in (*PRECISIONS, "tensor", "total"):
            if f"flops_{p}" in t:
                out[f"ncu_flops_{p}"] = t[f"flops_{p}"]
        for key, name in (
            ("dram_bytes", "ncu_dram_bytes"),
            ("dram_read_bytes", "ncu_dram_read_bytes"),
            ("dram_write_bytes", "ncu_dram_write_bytes"),
            ("l2_bytes", "ncu_l2_bytes"),
            ("l1_bytes", "ncu_l1_bytes"),
            ("time_s", "ncu_kernel_time_s"),
        ):
            if key in t:
                out[name] = t[key]
        out["ncu_kernels"] = float(len(self.kernels))
        for level in ("dram", "l2", "l1") if not self.truncated else ():
            ai = self.intensity(level)
            if ai is not None:
                out[f"ncu_intensity_{level}_flops_per_byte"] = ai
        if self.phases is not None:
            for phase, row in self.phases.iterrows():
                key = phase_key(str(phase))
                out[f"ncu_phase_{key}_kernels"] = float(row["kernels"])
                for col in ("time_share", "flops_share", "dram_bytes_share"):
                    if not math.isnan(row[col]):
                        out[f"ncu_phase_{key}_{col}"] = float(row[col])
        return out

    @property
    def roofline_missing(self) -> list[str]:
        """What a measured roofline point (FLOPs per DRAM byte) needs and this profile lacks:
        "FLOP counters", "DRAM bytes"; [] for a complete one."""
        have_flops = any(q.startswith("flops_") for q in self.measured)
        have_dram = "dram_bytes" in self.measured
        return [w for w, ok in (("FLOP counters", have_flops), ("DRAM bytes", have_dram)) if not ok]

    def mlflow_tags(self) -> dict[str, str]:
        lacking = self.roofline_missing + (["complete input"] if self.truncated else [])
        tags = {
            "ncu_roofline": "incomplete" if lacking else "complete",
            "ncu_roofline_missing": ",".join(lacking) or "none",
            "ncu_measured": ",".join(self.measured),
            "ncu_missing": ",".join(self.missing) or "none",
            "ncu_half_lanes": str(HALF_LANES),
            "ncu_partial": "; ".join(f"{q}: {why}" for q, why in self.partial.items()) or "none",
        }
        if self.truncated:
            tags[schema.TAG_NCU_TRUNCATED] = self.truncated
        if self.cautions:
            tags["ncu_caution"] = " | ".join(self.cautions)[:5000]
        for q, s in sorted(self.sources.items()):
            tags[f"ncu_source_{q}"] = s
        return tags


KERNEL_COLUMNS = (
    "id",
    "kernel",
    "phase",
    "block",
    "grid",
    "time_s",
    "flops_fp64",
    "flops_fp32",
    "flops_fp16",
    "flops_tensor",
    "flops_total",
    "dram_read_bytes",
    "dram_write_bytes",
    "dram_bytes",
    "l2_bytes",
    "l1_bytes",
    "intensity_dram_flops_per_byte",
    "intensity_l2_flops_per_byte",
    "intensity_l1_flops_per_byte",
)


def phase_key(phase: str) -> str:
    """A phase name as it appears inside metric keys ("optimizer step" -> "optimizer_step")."""
    return re.sub(r"[^\w.\-]", "_", phase) or "_"


def _used_metric(name: str) -> bool:
    return is_relevant(name) and not name.startswith("device__")


def summarize(
    report: NcuReport,
    capability: tuple[int, int] | None = None,
    counters: ChipCounters | None = None,
) -> NcuSummary:
    """Per-kernel table, totals and phase shares of a parsed report.

    `capability` (compute capability) chooses the FLOPs per tensor instruction; default: what
    the report says (device attributes or the CC column). `counters` (the chip's, from
    profiling.ncu.chips) makes the tensor-core sum follow NVIDIA's raw dependencies. Raises BenchError when the report has
    no kernels, or when ncu reported ``n/a`` for a counter that feeds a total (a total with holes
    would be silently wrong).
    """
    if capability is None:
        capability = device_from_report(report)[1]
    _refuse_unusable(report)
    df, sources, lacking = _kernel_table(report, capability, counters)
    measured = [q for q in QUANTITIES if df[q].notna().any()]
    totals = _totals(df, measured)
    labelled = report.has_nvtx or any(k.phase_label for k in report.kernels)
    phases = _phases(df, totals) if labelled and df["phase"].notna().any() else None
    n = len(report.kernels)
    partial = {
        quantity: "; ".join(f"{why} in {c} of {n} kernels" for why, c in by.items())
        for quantity, by in lacking.items()
    }
    cautions = []
    if sources.get("flops_tensor", "").startswith(TENSOR_INST[0].split(".")[0]) and totals.get(
        "flops_tensor"
    ):
        caution = tensor_inst_caution(capability)
        if caution:
            cautions.append(caution)
    return NcuSummary(
        kernels=df,
        totals=totals,
        measured=measured,
        sources=sources,
        phases=phases,
        partial=partial,
        cautions=cautions,
        truncated=report.truncated,
    )


def _refuse_unusable(report: NcuReport) -> None:
    """BenchError for a report without kernels, or with n/a for a counter that feeds a total."""
    if not report.kernels:
        raise BenchError(
            f"no kernels in {report.source or 'the ncu output'}: ncu profiled nothing "
            "(check --launch-skip/--launch-count and that the program ran its CUDA work)"
        )
    bad = {n: c for n, c in report.na.items() if _used_metric(n)}
    if bad:
        worst = ", ".join(
            f"{n} ({c} of {len(report.kernels)} kernels)" for n, c in sorted(bad.items())
        )
        raise BenchError(
            f"ncu reported n/a for {worst}: this GPU, driver or ncu version cannot collect it; "
            "profile without it (--tensor-counters none for tensor counters) or on a GPU that supports it"
        )


def _kernel_table(report: NcuReport, capability, counters: ChipCounters | None):
    """(one row per kernel, the counters each quantity came from, quantity -> {what it lacks:
    in how many kernels})."""
    rows, sources = [], {}
    lacking: dict[str, dict[str, int]] = {}
    for k in report.kernels:
        q, src, gaps = kernel_quantities(k.metrics, capability, counters)
        sources.update(src)
        for quantity, absent in gaps.items():
            lacking.setdefault(quantity, {}).setdefault(absent, 0)
            lacking[quantity][absent] += 1
        rows.append(_kernel_row(k, q))
    return pd.DataFrame.from_records(rows, columns=list(KERNEL_COLUMNS)), sources, lacking


def _totals(df: pd.DataFrame, measured: list[str]) -> dict[str, float]:
    """Sums over kernels of the measured quantities, DRAM read and write, and all FLOPs."""
    totals: dict[str, float] = {}
    for q in measured:
        totals[q] = float(df[q].sum(skipna=True))
    for extra in ("dram_read_bytes", "dram_write_bytes"):
        if df[extra].notna().any():
            totals[extra] = float(df[extra].sum(skipna=True))
    if any(q.startswith("flops_") for q in measured):
        totals["flops_total"] = float(df["flops_total"].sum(skipna=True))
    return totals


def _kernel_row(k: NcuKernel, q: dict[str, float]) -> dict:
    flops = [q[f"flops_{p}"] for p in (*PRECISIONS, "tensor")]
    have = [f for f in flops if not math.isnan(f)]
    total = sum(have) if have else math.nan
    return {
        "id": k.id,
        "kernel": k.name,
        "phase": k.phase,
        "block": k.attrs.get("Block Size", ""),
        "grid": k.attrs.get("Grid Size", ""),
        **{key: q[key] for key in q},
        "flops_total": total,
        **{
            f"intensity_{level}_flops_per_byte": _per_byte(total, q[f"{level}_bytes"])
            for level in ("dram", "l2", "l1")
        },
    }


def _per_byte(flops: float, nbytes: float) -> float:
    """FLOPs per byte; NaN where the bytes are not measured or not positive."""
    return flops / nbytes if nbytes and not math.isnan(nbytes) and nbytes > 0 else math.nan


def _grouped(g, count: str) -> pd.DataFrame:
    """Per group of kernel rows: their number (column `count`), kernel time, FLOPs and DRAM bytes
    (NaN where no kernel of the group measured one)."""
    sums = {col: g[col].sum(min_count=1) for col in ("time_s", "flops_total", "dram_bytes")}
    return pd.DataFrame({count: g.size(), **sums})


def _phases(df: pd.DataFrame, totals: dict[str, float]) -> pd.DataFrame:
    out = _grouped(
        df.assign(phase=df["phase"].fillna("none")).groupby("phase", sort=False), "kernels"
    )
    for col, share in (
        ("time_s", "time_share"),
        ("flops_total", "flops_share"),
        ("dram_bytes", "dram_bytes_share"),
    ):
        denom = totals.get(col)
        out[share] = out[col] / denom if denom else math.nan
    return out


def top_kernels(summary: NcuSummary, n: int = 25) -> pd.DataFrame:
    """Kernels grouped by name, heaviest kernel time first: launches, time and its share, FLOPs,
    DRAM bytes and DRAM intensity."""
    out = _grouped(summary.kernels.groupby("kernel", sort=False), "launches")
    total_t = summary.totals.get("time_s")
    out["time_share"] = out["time_s"] / total_t if total_t else math.nan
    out["intensity_dram_flops_per_byte"] = out["flops_total"] / out["dram_bytes"].where(
        out["dram_bytes"] > 0
    )
    out = out.sort_values(["time_s", "flops_total"], ascending=False, na_position="last").head(n)
    return out.reset_index()


def top_kernels_text(top: pd.DataFrame) -> str:
    """`top_kernels` as a fixed-width text table, the full kernel name last on each line: the
    UI's CSV view cuts names at its column width, its text view keeps the whole line."""
    head = (
        f"{'time share':>10}  {'time ms':>9}  {'launches':>8}  {'GFLOP':>9}  {'FLOP/B':>8}  kernel"
    )
    lines = [head]
    for r in top.to_dict("records"):
        cells = [
            f"{100 * r['time_share']:9.1f}%" if math.isfinite(r["time_share"]) else f"{'':>10}",
            f"{1e3 * r['time_s']:9.4g}" if math.isfinite(r["time_s"]) else f"{'':>9}",
            f"{int(r['launches']):8d}",
            f"{r['flops_total'] / 1e9:9.4g}" if math.isfinite(r["flops_total"]) else f"{'':>9}",
            f"{r['intensity_dram_flops_per_byte']:8.3g}"
            if math.isfinite(r["intensity_dram_flops_per_byte"])
            else f"{'':>8}",
        ]
        lines.append("  ".join([*cells, str(r["kernel"])]))
    return "\n".join(lines) + "\n"


def require_counters(summary: NcuSummary, source: str) -> None:
    """Raise BenchError when the input holds none of the quantities a profile run logs."""
    if summary.measured:
        return
    raise BenchError(
        f"{source} has none of the roofline counters (FLOPs, DRAM/L2/L1 bytes, kernel time): capture "
        "with `python -m profiling` (metric set roofline), or profile with `ncu --set roofline`/`--set "
        "full` and import the .ncu-rep"
    )


def roofline_warning(summary: NcuSummary, source: str) -> str | None:
    """The line for an incomplete profile (cut short, no FLOP counters and/or no DRAM bytes), else
    None."""
    if summary.truncated:
        return (
            f"{source} is truncated ({summary.truncated}), logged as --allow-truncated asks: an "
            "incomplete profile (tags ncu_roofline=incomplete, ncu_truncated) whose totals cover only "
            "the results it holds, without intensities; analysis lists it without a roofline point"
        )
    lacking = summary.roofline_missing
    if not lacking:
        return None
    return (
        f"{source} has no {' and no '.join(lacking)} (found: {', '.join(summary.measured)}): logged as "
        "an incomplete profile (tag ncu_roofline=incomplete) with what it holds; without both there is "
        "no measured DRAM intensity, so analysis lists it without a roofline point"
    )


TENSOR_CORE_WORK = {"fp16": "autocast", "bf16": "autocast", "tf32": "TF32 math"}
"""Precisions whose convolutions and matmuls run on tensor cores, and what puts them there."""


def tensor_flops_gap(summary: NcuSummary, precision: str) -> tuple[str, str] | None:
    """(tag value, one-line warning) when a tensor-core config (fp16/bf16 autocast, tf32) has no
    tensor-core FLOPs in its counters, else None. There the convolutions and matmuls run on tensor
    cores, so without tensor counters ncu_flops_total leaves out most of the work."""
    if precision not in TENSOR_CORE_WORK:
        return None
    if "flops_tensor" not in summary.measured:
        return (
            "no tensor-core counters",
            f"--precision {precision} but the input has no tensor-core counters: its tensor-core work is missing "
            "from ncu_flops_total, which is undercounted (profile with the chip's sm__ops_path_tensor_* "
            "counters, Turing on, or sm__inst_executed_pipe_tensor.sum on Volta)",
        )
    if not summary.totals.get("flops_tensor"):
        return (
            "tensor-core counters read 0",
            f"--precision {precision} but the tensor-core counters read 0: no kernel used tensor cores, which "
            f"{TENSOR_CORE_WORK[precision]} should; check that the input was profiled with this config",
        )
    return None
