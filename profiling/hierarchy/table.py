"""The hierarchical roofline of a profile: per kernel name, FLOPs split into CUDA-core and
tensor-core work, bytes and intensity at DRAM, L2 and L1, time and its share of the phase, which
ceiling bounds it; per phase, time-weighted intensity at each level.

After Yang, Kurth & Williams ("Hierarchical Roofline analysis for GPUs", CCPE 2020) and NERSC's
DeepCAM tables (Yang et al., arXiv 2009.05257): a name's launches are summed, its intensity at a
level is its FLOPs over its bytes at that level. Pure: pandas in, pandas out (the figure is
profiling/hierarchy/figure.py, the logging profiling/hierarchy/log.py).

Half precision: ncu's counters cannot tell a packed half instruction (HFMA2: two useful lanes)
from a scalar one (NVIDIA's metric database has one raw counter each for hadd, hmul and hfma on
every chip it knows; docs/profiling.md, "Half precision"), so half FLOPs follow a convention: the
project's (each half instruction is two lanes, counting.HALF_LANES) everywhere, and NERSC's (each
instruction once) in the convention table when asked (TableOptions.half_convention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from common import flags
from profiling.ncu.counting import HALF_LANES
from roofline.model import LEVELS, Roof, hierarchical_limiter, is_finite_positive

HALF_CONVENTIONS = ("lanes", "instruction")
UNITS_CONVENTIONS = ("si", "binary")
GIGA = {"si": 1e9, "binary": 1024.0**3}
SUMMED = (
    "time_s",
    "cuda_core_flops",
    "cuda_core_fp16_flops",
    "tensor_flops",
    "flops",
    "dram_bytes",
    "l2_bytes",
    "l1_bytes",
)
"""Columns of kernels_by_name summed over a name's launches."""


@dataclass
class TableOptions:
    """The per-kernel-name table in a published table's conventions, for comparison (the run's
    kernels_by_name.csv and figures stay SI with half instructions as two lanes)."""

    half_convention: str = field(default="lanes", metadata={"choices": HALF_CONVENTIONS})
    """half-precision FLOPs of the convention table: lanes (each half instruction counts two
    lanes, the project's) or instruction (each half instruction once, as NERSC's DeepCAM tables);
    ncu cannot tell packed from scalar half instructions."""
    units_convention: str = field(default="si", metadata={"choices": UNITS_CONVENTIONS})
    """giga in the convention table's FLOP/s: si (1e9) or binary (1024^3, as NERSC's tables)."""
    peaks_file: str = flags.peaks_file()

    def __post_init__(self) -> None:
        flags.check_choices(self)

    @property
    def asked(self) -> bool:
        """True when a convention other than the project's was asked for."""
        return (self.half_convention, self.units_convention) != ("lanes", "si")

    @property
    def table_name(self) -> str:
        return f"kernels_by_name_half-{self.half_convention}_giga-{self.units_convention}.csv"


def _sum(g, col: str) -> pd.Series:
    return g[col].sum(min_count=1)


def kernels_by_name(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per (phase, kernel name) of a summary's kernel table, phases in their order,
    heaviest time first within each: count,
    summed time, FLOPs (CUDA-core = fp64 + fp32 + fp16, tensor), bytes per level, intensity per
    level, FLOP/s and the share of its phase's time."""
    df = kernels.assign(
        phase=kernels["phase"].fillna(""),
        cuda_core_flops=kernels[["flops_fp64", "flops_fp32", "flops_fp16"]].sum(
            axis=1, min_count=1
        ),
        cuda_core_fp16_flops=kernels["flops_fp16"],
        tensor_flops=kernels["flops_tensor"],
        flops=kernels["flops_total"],
    )
    g = df.groupby(["phase", "kernel"], sort=False)
    out = pd.DataFrame({"count": g.size(), **{c: _sum(g, c) for c in SUMMED}}).reset_index()
    out = out.rename(columns={"kernel": "kernel_name"})
    phase_time = out.groupby("phase")["time_s"].transform(lambda s: s.sum(min_count=1))
    out["time_share"] = out["time_s"] / phase_time.where(phase_time > 0)
    for level in LEVELS:
        out[f"intensity_{level}_flops_per_byte"] = out["flops"] / out[f"{level}_bytes"].where(
            out[f"{level}_bytes"] > 0
        )
    out["flops_per_s"] = out["flops"] / out["time_s"].where(out["time_s"] > 0)
    order = {p: i for i, p in enumerate(pd.unique(out["phase"]))}  # phases as captured
    out["_order"] = out["phase"].map(order)
    out = out.sort_values(["_order", "time_s"], ascending=[True, False], na_position="last")
    return out.drop(columns="_order").reset_index(drop=True)


def ceiling_of(row: dict) -> str:
    """The compute ceiling a kernel meets: fp16 (tensor cores) when most of its FLOPs are tensor
    FLOPs, else fp32 (CUDA cores)."""
    tensor, cc = row.get("tensor_flops"), row.get("cuda_core_flops")
    tensor = tensor if is_finite_positive(tensor) else 0.0
    cc = cc if is_finite_positive(cc) else 0.0
    return "fp16" if tensor > cc else "fp32"


def add_bounds(table: pd.DataFrame, roof: Roof | None) -> pd.DataFrame:
    """`table` (kernels_by_name) with the compute ceiling each name meets, the ceiling that
    bounds it (`bound`: dram, l2, l1 or compute; "" where the roof or its intensities lack), as
    roofline.model.hierarchical_limiter says, and its achieved FLOP/s over that ceiling's
    attainable (`roof_fraction`: over 1 is a kernel above its roof)."""
    out = table.copy()
    ceilings, bounds, fractions = [], [], []
    for row in out.to_dict("records"):
        dtype = ceiling_of(row)
        peak = roof.peak(dtype) if roof is not None else math.nan
        if not is_finite_positive(peak) and roof is not None:
            dtype, peak = "fp32", roof.peak("fp32")
        ai = {lv: row[f"intensity_{lv}_flops_per_byte"] for lv in LEVELS}
        level, attainable = "", math.nan
        if roof is not None and is_finite_positive(peak):
            level, attainable = hierarchical_limiter(ai, roof.bytes_per_s, peak)
        ceilings.append(dtype)
        bounds.append(level)
        t, f = row.get("time_s"), row.get("flops")
        ok = is_finite_positive(t) and is_finite_positive(f) and is_finite_positive(attainable)
        fractions.append(f / t / attainable if ok else math.nan)
    out["compute_ceiling"] = ceilings
    out["bound"] = bounds
    out["roof_fraction"] = fractions
    return out


def phase_levels(table: pd.DataFrame) -> pd.DataFrame:
    """Per phase (and `step`, their sum, when there are several): launches, time, FLOPs, bytes
    and intensity per level, and time-weighted intensity per level = sum over names of time x
    intensity / the time of the names that have that intensity."""
    rows = [_level_row(name, g) for name, g in table.groupby("phase", sort=False)]
    if table["phase"].nunique() > 1:
        rows.append(_level_row("step", table))
    return pd.DataFrame(rows)


def _level_row(phase: str, g: pd.DataFrame) -> dict:
    row = {"phase": phase or "all", "launches": int(g["count"].sum())}
    for col in (
        "time_s",
        "cuda_core_flops",
        "tensor_flops",
        "flops",
        *(f"{lv}_bytes" for lv in LEVELS),
    ):
        row[col] = g[col].sum(min_count=1)
    for level in LEVELS:
        b = row[f"{level}_bytes"]
        row[f"intensity_{level}_flops_per_byte"] = row["flops"] / b if b and b > 0 else math.nan
        ai = g[f"intensity_{level}_flops_per_byte"]
        ok = ai.notna() & g["time_s"].notna()
        t = g["time_s"][ok].sum()
        row[f"time_weighted_intensity_{level}_flops_per_byte"] = (
            float((g["time_s"][ok] * ai[ok]).sum() / t) if t > 0 else math.nan
        )
    return row


def convention_table(table: pd.DataFrame, options: TableOptions) -> pd.DataFrame:
    """kernels_by_name in the asked conventions: CUDA-core FLOPs with half instructions counted
    once (`instruction`: the fp16 part divided by HALF_LANES) or as lanes, intensities from those
    FLOPs, and FLOP/s in SI or binary giga (column gflop_per_s_<si|binary>)."""
    out = table[["phase", "kernel_name", "count", "time_s"]].copy()
    fp16 = table["cuda_core_fp16_flops"].fillna(0.0)
    cc = table["cuda_core_flops"]
    if options.half_convention == "instruction":
        cc = cc - fp16 + fp16 / HALF_LANES
    out["cuda_core_flops"] = cc
    out["tensor_flops"] = table["tensor_flops"]
    out["flops"] = cc.fillna(0.0) + table["tensor_flops"].fillna(0.0)
    for level in LEVELS:
        b = table[f"{level}_bytes"]
        out[f"{level}_bytes"] = b
        out[f"intensity_{level}_flops_per_byte"] = out["flops"] / b.where(b > 0)
    giga = GIGA[options.units_convention]
    out[f"gflop_per_s_{options.units_convention}"] = (
        out["flops"] / table["time_s"].where(table["time_s"] > 0) / giga
    )
    return out
