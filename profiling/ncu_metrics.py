"""Which counters to ask ncu for, and how they become FLOPs, bytes, time and intensities.

Pure: no mlflow, no file writes. `plan_metrics` builds the metric list of a set for one chip.
Input of the counting is a parsed report (profiling.ncu_parse.NcuReport, or the same
structure built from a .ncu-rep by profiling.ncu_report_import); output is a per-kernel DataFrame,
totals, per-phase shares and the MLflow metric dict of a `profile` run (docs/profiling.md).

Counting rules (see docs/profiling.md for sources):

* FLOPs per precision = add + mul + 2 * fma, from the per-thread SASS instruction counters
  ``sm__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum`` (``smsp__`` counters
  and, in reports that only carry rates, ``<counter>.per_cycle_elapsed * smsp__cycles_elapsed.avg``
  are accepted too -- that is how Nsight Compute's own roofline chart gets counts).
* Half precision: every h-instruction is counted as a packed HFMA2/HADD2/HMUL2 doing HALF_LANES = 2
  lanes of work, so fp16 FLOPs = 2 * (hadd + hmul) + 4 * hfma. This is what current Nsight Compute
  versions use in their half-precision roofline (``..._hfma_pred_on_x4``, ``..._hadd_pred_on_x2``);
  it over-counts by up to 2x when the compiler emits scalar half math (one useful lane).
* Tensor cores: the chip's ``sm__ops_path_tensor_*`` counters count math operations directly (2
  per multiply-add), each op once: which counter covers which comes from NVIDIA's metric database
  (profiling.chips), or from the names when the chip is not known. Where no ops counter exists
  (Volta), or with --tensor-counters inst, ``sm__inst_executed_pipe_tensor.sum`` times the FLOPs
  of one tensor instruction on that architecture (TENSOR_INST_FLOPS: 512 on sm_70, 2048 on sm_75,
  ...; cautioned on sm_75-89, none on sm_90+).
* DRAM bytes = ``dram__bytes_read.sum + dram__bytes_write.sum`` (``dram__bytes_op_*`` on GB20x,
  ``dram__bytes.sum`` alone), L2 = ``lts__t_bytes.sum`` (or 32-byte ``lts__t_sectors.sum``),
  L1 = ``l1tex__t_bytes.sum`` (or ``l1tex__t_sectors.sum``); kernel time = ``gpu__time_duration.sum``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pandas as pd

from common.errors import BenchError, UsageError
from profiling.chips.counters import ChipCounters, parse_tensor_name
from profiling.ncu_parse import DEVICE_NAME_METRIC, NcuKernel, NcuReport  # noqa: F401

HALF_LANES = 2
"""Lanes per half-precision SASS instruction (HFMA2 packs two fp16 FMAs). See module docstring."""
TENSOR_INST_FLOPS: dict[tuple[int, int], tuple[int, str]] = {
    (7, 0): (
        512,
        "HMMA.884.F32.F32 (Volta): a warp's mma m8n8k4 with fp32 accumulation is 4 such "
        "instructions for 4 x 8x8x4 = 1024 FMA, i.e. 256 FMA = 512 FLOP each",
    ),
    (7, 2): (512, "HMMA.884.F32.F32 (Xavier, a Volta SM): 256 FMA = 512 FLOP each"),
    (7, 5): (
        2048,
        "HMMA.1688.F32 (Turing, cuBLAS/cuDNN *1688* kernels): one warp mma m16n8k8 = "
        "1024 FMA = 2048 FLOP",
    ),
    (8, 0): (4096, "HMMA.16816.F32 (Ampere): one warp mma m16n8k16 = 2048 FMA = 4096 FLOP"),
    (8, 6): (4096, "HMMA.16816.F32 (GA10x): one warp mma m16n8k16 = 2048 FMA = 4096 FLOP"),
    (8, 7): (4096, "HMMA.16816.F32 (Orin): one warp mma m16n8k16 = 2048 FMA = 4096 FLOP"),
    (8, 9): (4096, "HMMA.16816.F32 (Ada): one warp mma m16n8k16 = 2048 FMA = 4096 FLOP"),
}
"""FLOPs per tensor-pipe warp instruction (``sm__inst_executed_pipe_tensor.sum``) by compute
capability, with the SASS instruction assumed. One factor per architecture is an assumption:
the shape varies with the instruction (sm_80+: HMMA.1688/1684 for tf32, DMMA.884 for fp64, 8-bit
QMMA on sm_89, integer IMMA that is no FLOP at all; Volta with fp16 accumulation: 1024), which is
why ``sm__ops_path_tensor_*`` (exact op counts) are used wherever the chip has them (Turing on)
and inst warns on sm_75-89.
Hopper and newer (wgmma/tcgen05, shapes up to m64n256k16) have no entry: inst is refused there.
Sources and reasoning: docs/profiling.md, "Tensor-core FLOPs"."""
TENSOR_INST_EXACT_BEFORE = (8, 0)
"""From this capability on the tensor instruction shape varies within one architecture: inst warns
(sm_75 has its own caution; before it, Volta's fp32-accumulating HMMA.884 is the form in use)."""
SECTOR_BYTES = 32
"""Bytes per L1/L2 sector, to turn ``*_sectors.sum`` into bytes when ``*_bytes.sum`` is absent."""

PRECISIONS = ("fp64", "fp32", "fp16")
OPS = {
    "fp64": ("dadd", "dmul", "dfma"),
    "fp32": ("fadd", "fmul", "ffma"),
    "fp16": ("hadd", "hmul", "hfma"),
}
OP_WEIGHT = {"add": 1.0, "mul": 1.0, "fma": 2.0}
LANES = {"fp64": 1, "fp32": 1, "fp16": HALF_LANES}

TIME_METRIC = "gpu__time_duration.sum"
DRAM_READ = ("dram__bytes_read.sum", "dram__bytes_op_read.sum")
DRAM_WRITE = ("dram__bytes_write.sum", "dram__bytes_op_write.sum")
DRAM_TOTAL = "dram__bytes.sum"
L2_BYTES, L2_SECTORS = "lts__t_bytes.sum", "lts__t_sectors.sum"
L1_BYTES, L1_SECTORS = "l1tex__t_bytes.sum", "l1tex__t_sectors.sum"
TENSOR_OPS_PREFIX = "sm__ops_path_tensor_"
TENSOR_INST = ("sm__inst_executed_pipe_tensor.sum", "smsp__inst_executed_pipe_tensor.sum")
TENSOR_OPS_METRICS = (
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
)
CYCLES = {"sm": "sm__cycles_elapsed.avg", "smsp": "smsp__cycles_elapsed.avg"}

METRIC_SETS = ("roofline", "seed")
TENSOR_MODES = ("auto", "ops", "inst", "none")

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


def op_counter(op: str, unit: str = "sm") -> str:
    return f"{unit}__sass_thread_inst_executed_op_{op}_pred_on.sum"


def tensor_counters_for(capability: tuple[int, int] | None) -> str:
    """For a GPU whose chip is not known: "ops" (sm_75+, or unknown), "inst" (sm_70/72: Volta,
    which NVIDIA's metric database does not cover) or "none" (no tensor cores)."""
    if capability is None or tuple(capability) >= (7, 5):
        return "ops"
    return "inst" if tuple(capability) >= (7, 0) else "none"


@dataclass
class MetricPlan:
    """What to ask ncu for on one chip, and what that chip cannot count."""

    metrics: list[str]
    """the ``--metrics`` list, in order, no duplicates."""
    tensor: str
    """the tensor-core counters used: ops, inst or none."""
    chip: str | None = None
    """the chip the names were chosen for (None: generic names, not checked)."""
    missing: list[str] = field(default_factory=list)
    """quantities the chip has no counter for ("DRAM bytes", "tensor-core FLOPs", ...)."""
    notes: list[str] = field(default_factory=list)
    """lines for the user about choices made (substituted names, skipped counters)."""


def plan_metrics(
    metric_set: str,
    tensor: str = "auto",
    extra: tuple[str, ...] | list[str] = (),
    counters: ChipCounters | None = None,
    capability: tuple[int, int] | None = None,
) -> MetricPlan:
    """The metric list of `metric_set` for the chip `counters` describes (names that exist there,
    fallbacks chosen from what it has), plus `extra`. Without `counters` (a chip NVIDIA's database
    does not know), the generic names are used and not checked.

    roofline: the nine SASS op counters; tensor ops counters that count each op once
    (ChipCounters.tensor_sum), or ``sm__inst_executed_pipe_tensor.sum`` (inst), or none; DRAM read
    + write, else op_read + op_write, else ``dram__bytes.sum``, else none (then "DRAM bytes" is
    missing); L2 and L1 bytes (sectors where bytes do not exist); kernel time.
    seed: the course brief's quantities under names Nsight Compute has: fp32 and fp16 op counters
    for its ``flop_count_sp/hp`` (nvprof names that no current GPU has), DRAM bytes, PCIe bytes.
    Raises UsageError for a tensor mode the chip cannot count."""
    if metric_set not in METRIC_SETS:
        raise ValueError(f"metric_set must be one of {', '.join(METRIC_SETS)}, got {metric_set!r}")
    if tensor not in TENSOR_MODES:
        raise ValueError(
            f"tensor counters must be one of {', '.join(TENSOR_MODES)}, got {tensor!r}"
        )
    plan = MetricPlan([], "none", counters.chip if counters else None)
    has = counters.has if counters else (lambda name: True)
    where = counters.chip if counters else "this GPU"

    def ops(names) -> list[str]:
        kept = [n for n in names if has(n)]
        lacking = [n for n in names if not has(n)]
        if lacking:
            plan.missing.append(f"{', '.join(lacking)}")
        return kept

    if metric_set == "roofline":
        names = ops([op_counter(op) for p in PRECISIONS for op in OPS[p]])
        names += _tensor_names(tensor, counters, capability, plan)
    else:
        names = ops([op_counter(op) for p in ("fp32", "fp16") for op in OPS[p]])
        plan.notes.append(
            "seed set: the course brief's flop_count_sp/flop_count_hp are nvprof metric names no "
            "current GPU has; fp32/fp16 FLOPs are counted from sm__sass_thread_inst_executed_op_"
            "{f,h}{add,mul,fma}_pred_on.sum instead"
        )
    dram = counters.dram if counters else (DRAM_READ[0], DRAM_WRITE[0])
    if not dram:
        plan.missing.append("DRAM bytes")
        plan.notes.append(
            f"{where} has no DRAM counters (no dram__bytes* metric: its memory is shared with the "
            "CPU): the profile counts FLOPs, L2/L1 bytes and kernel time, but no DRAM bytes and so "
            "no DRAM intensity"
        )
    names += list(dram)
    if metric_set == "roofline":
        for choice, what in (
            ((L2_BYTES, L2_SECTORS), "L2 bytes"),
            ((L1_BYTES, L1_SECTORS), "L1 bytes"),
        ):
            found = counters.first(*((n,) for n in choice)) if counters else choice[:1]
            if not found:
                plan.missing.append(what)
            names += list(found)
        if has(TIME_METRIC):
            names.append(TIME_METRIC)
        else:
            plan.missing.append("kernel time")
    else:
        pcie = ("pcie__read_bytes.sum", "pcie__write_bytes.sum")
        if all(has(n) for n in pcie):
            names += list(pcie)
        else:
            plan.missing.append("PCIe bytes")
            plan.notes.append(
                f"{where} has no pcie__read/write_bytes counters: the seed set goes without"
            )
    for n in [*names, *extra]:
        n = n.strip()
        if n and n not in plan.metrics:
            plan.metrics.append(n)
    return plan


def _tensor_names(
    mode: str, counters: ChipCounters | None, capability, plan: MetricPlan
) -> list[str]:
    """The tensor-core counters of a roofline plan (sets plan.tensor, plan.missing)."""
    if counters is None:
        plan.tensor = tensor_counters_for(capability) if mode == "auto" else mode
        return {"ops": list(TENSOR_OPS_METRICS), "inst": [TENSOR_INST[0]], "none": []}[plan.tensor]
    summed = list(counters.tensor_sum())
    if mode == "auto":
        mode = "ops" if summed else "none"
        if not summed:
            plan.missing.append("tensor-core FLOPs")
            plan.notes.append(
                f"{counters.chip} has no sm__ops_path_tensor_* counters (no tensor cores): no tensor-core FLOPs"
            )
    if mode == "ops" and not summed:
        raise UsageError(
            f"--tensor-counters ops: {counters.chip} has no sm__ops_path_tensor_* counters (no tensor "
            "cores); use --tensor-counters auto or none"
        )
    if mode == "inst" and not counters.has(TENSOR_INST[0]):
        raise UsageError(f"--tensor-counters inst: {counters.chip} has no {TENSOR_INST[0]}")
    plan.tensor = mode
    return {"ops": summed, "inst": [TENSOR_INST[0]], "none": []}[mode]


_RELEVANT = re.compile(
    r"^(sm|smsp)__sass_thread_inst_executed_op_[dfh](add|mul|fma)_pred_on\.sum(\.per_cycle_elapsed)?$"
    r"|^(sm|smsp)__cycles_elapsed\.avg$"
    r"|^sm__ops_path_tensor_.*\.sum(\.per_cycle_elapsed)?$"
    r"|^(sm|smsp)__inst_executed_pipe_tensor\.sum(\.per_cycle_elapsed)?$"
    r"|^dram__bytes(_op)?_(read|write)\.sum$|^dram__bytes\.sum$"
    r"|^(lts|l1tex)__t_(bytes|sectors)\.sum$"
    r"|^gpu__time_duration\.sum$"
    r"|^device__attribute_(display_name|chip|compute_capability_major|compute_capability_minor)$"
)


def is_relevant(name: str) -> bool:
    """True for the metrics this module reads (used to keep big raw exports small in memory)."""
    return bool(_RELEVANT.match(name))


# ------------------------------------------------------------------------------------ per kernel
def _first(m: dict[str, float], names) -> float | None:
    for n in names:
        if n in m:
            return m[n]
    return None


def _count(m: dict[str, float], counter_sm: str) -> tuple[float | None, str]:
    """(count, how): the sm__/smsp__ counter, or rate * elapsed cycles when only the rate exists."""
    counter_smsp = counter_sm.replace("sm__", "smsp__", 1)
    for name in (counter_sm, counter_smsp):
        if name in m:
            return m[name], "count"
    for unit, counter in (("smsp", counter_smsp), ("sm", counter_sm)):
        rate = m.get(counter + ".per_cycle_elapsed")
        cyc = _cycles(m, unit)
        if rate is not None and cyc is not None:
            return rate * m[cyc], f"per_cycle_elapsed_x_{cyc}"
    return None, ""


def _cycles(m: dict[str, float], unit: str) -> str | None:
    """The elapsed-cycles metric that turns a ``<unit>__...per_cycle_elapsed`` rate into a count:
    the unit's own, else the other one. sm__ and smsp__ elapsed cycles tick on the same SM clock
    (the T4 fixture has both: 28,419.6 each), so either converts the rate; the source tag says
    which was used."""
    own, other = CYCLES[unit], CYCLES["sm" if unit == "smsp" else "smsp"]
    if own in m:
        return own
    return other if other in m else None


def _tensor_ops(
    m: dict[str, float], counters: ChipCounters | None = None
) -> tuple[float, str] | None:
    """(floating-point tensor ops, how) from ``sm__ops_path_tensor_*``, each op counted once.

    With the chip's counters known (`counters`), the sum is ChipCounters.tensor_sum of the
    counters present: from NVIDIA's raw dependencies, aggregates are never added to their parts.
    Otherwise by name, the counters form a hierarchy per source type: ``src_fp16`` covers
    ``src_fp16_dst_fp16`` and ``src_fp16_dst_fp32`` (Nsight Compute's own tensor roofline reads
    the ``src_fp16`` aggregate next to ``src_bf16_dst_fp32``, ``src_tf32_dst_fp32``,
    ``src_fp64``), and a name without ``_sparsity_on/off`` covers both variants. So per source
    type: the aggregate if present, else per destination type the dst counter (else its sparsity
    variants summed), else the sparsity variants of the source; instruction-specific
    ``op_<name>_`` counters (Blackwell) only when no generic counter of that source exists.
    Integer sources are not FLOPs; ``_realtime`` variants are skipped. Rates
    (``.per_cycle_elapsed``) are multiplied by sm__cycles_elapsed.avg (else
    smsp__cycles_elapsed.avg); a count wins over the rate of the same counter.
    """
    values: dict[str, float] = {}
    how = "count"
    for name, v in m.items():
        if not name.startswith(TENSOR_OPS_PREFIX) or "_realtime" in name:
            continue
        base = name.removesuffix(".per_cycle_elapsed")
        if base != name:
            cyc = _cycles(m, "sm")
            if cyc is None or base in values:
                continue
            values[base], how = v * m[cyc], f"per_cycle_elapsed_x_{cyc}"
        else:
            values[base] = v  # a count replaces the rate of the same counter
    rate = "" if how == "count" else f"_{how}"
    known = [n for n in values if counters is not None and n in counters.tensor]
    if known:
        chosen = counters.tensor_sum(known)
        return sum(
            values[n] for n in chosen
        ), f"sm__ops_path_tensor{rate} ({counters.chip} raw dependencies)"
    entries: dict[tuple[str, str | None, str | None, str | None], float] = {}
    for name, v in values.items():
        g = parse_tensor_name(name)
        if g is None or g.src.startswith("int") or g.src.startswith("b1"):
            continue
        entries[(g.src, g.op, g.dst, g.sp)] = v
    if not entries:
        return None
    total = 0.0
    for src in {k[0] for k in entries}:
        generic = {k[2:]: v for k, v in entries.items() if k[0] == src and k[1] is None}
        if generic:
            total += _one_source(generic)
        else:
            for op in {k[1] for k in entries if k[0] == src}:
                total += _one_source(
                    {k[2:]: v for k, v in entries.items() if k[0] == src and k[1] == op}
                )
    return total, f"sm__ops_path_tensor{rate}"


def _one_source(parts: dict[tuple[str | None, str | None], float]) -> float:
    """Ops of one source type from its (dst, sparsity) -> value counters, without overlaps."""
    if (None, None) in parts:
        return parts[(None, None)]
    dsts = {d for d, _ in parts if d is not None}
    if dsts:
        return sum(
            parts[(d, None)]
            if (d, None) in parts
            else sum(v for (dd, _), v in parts.items() if dd == d)
            for d in dsts
        )
    return sum(parts.values())


def tensor_inst_flops(capability: tuple[int, int] | None) -> int | None:
    """FLOPs per tensor-pipe instruction on this compute capability, None where no single factor
    is known (Hopper and newer, unknown GPUs). See TENSOR_INST_FLOPS."""
    entry = TENSOR_INST_FLOPS.get(tuple(capability)) if capability else None
    return entry[0] if entry else None


def inst_cautioned(capability: tuple[int, int] | None) -> bool:
    """True where tensor FLOPs from instruction counts need a caution (sm_75, sm_80+)."""
    return tensor_inst_caution(capability) is not None


def tensor_inst_caution(capability: tuple[int, int] | None) -> str | None:
    """Why tensor FLOPs counted from instructions may be wrong on this GPU, else None (sm_70/72,
    where PyTorch's fp32-accumulating HMMA.884 is the form in use; unknown GPUs: no factor, a gap)."""
    if capability is None:
        return None
    cc = f"sm_{capability[0]}{capability[1]}"
    if tuple(capability) == (7, 5):
        return (
            f"tensor FLOPs from sm__inst_executed_pipe_tensor.sum x 2048 assume every tensor instruction on {cc} "
            "is an HMMA.1688 (turing_*1688* kernels); Volta-form kernels (volta_*884*, which cuBLAS also runs on "
            "Turing) do 512 FLOP per instruction and are over-counted 4x"
        )
    if tuple(capability) < TENSOR_INST_EXACT_BEFORE:
        return None
    factor = tensor_inst_flops(capability)
    if factor is None:
        return (
            f"no FLOPs-per-instruction factor is known for {cc} tensor instructions (warpgroup/tcgen05 MMA "
            "shapes vary per kernel): use --tensor-counters ops (sm__ops_path_tensor_*)"
        )
    return (
        f"tensor FLOPs from sm__inst_executed_pipe_tensor.sum x {factor} assume every tensor instruction on "
        f"{cc} is an fp16/bf16 HMMA.16816 (2048 FMA); cuBLAS's *1688* kernels (HMMA.1688, 1024 FMA) make "
        "fp16/bf16 counts 2x high, tf32 kernels (HMMA.1684, 512 FMA) 4x, and the counter also counts DMMA "
        "(fp64) and IMMA (integer: no FLOPs) instructions: --tensor-counters ops counts the ops exactly"
    )


def kernel_quantities(
    m: dict[str, float],
    capability: tuple[int, int] | None = None,
    counters: ChipCounters | None = None,
) -> tuple[dict[str, float], dict[str, str], dict[str, str]]:
    """FLOPs by precision, tensor FLOPs, bytes and time of one kernel (NaN where not measured),
    the counters each came from, and the gaps: quantity -> what it lacks where a quantity was
    counted incompletely (fp16 with hfma but no hadd/hmul counter; tensor instructions without a
    FLOPs-per-instruction factor for `capability`), reported instead of passing for the whole."""
    q: dict[str, float] = {}
    src: dict[str, str] = {}
    gaps: dict[str, str] = {}
    for p in PRECISIONS:
        total, how, absent = 0.0, "", []
        for op in OPS[p]:
            c, h = _count(m, op_counter(op))
            if c is not None:
                how = how or h
                total += OP_WEIGHT[op[1:]] * LANES[p] * c
            else:
                absent.append(op)
        q[f"flops_{p}"] = total if how else math.nan
        if how:
            src[f"flops_{p}"] = "sass_thread_inst_executed" + ("" if how == "count" else f"_{how}")
            if absent:
                gaps[f"flops_{p}"] = (
                    f"no {', '.join(absent)} counter{'s' if len(absent) > 1 else ''}"
                )
    ops = _tensor_ops(m, counters)
    q["flops_tensor"] = math.nan
    if ops is not None:
        q["flops_tensor"], src["flops_tensor"] = ops
    else:
        inst, how = _count(m, TENSOR_INST[0])
        factor = tensor_inst_flops(capability)
        rate = "" if how == "count" else f"_{how}"
        if inst is not None and inst == 0:  # no tensor work: no factor needed
            q["flops_tensor"], src["flops_tensor"] = 0.0, f"sm__inst_executed_pipe_tensor{rate}"
        elif inst is not None and factor is None:
            cc = f"sm_{capability[0]}{capability[1]}" if capability else "an unknown GPU"
            gaps["flops_tensor"] = (
                f"tensor instructions without a FLOPs-per-instruction factor for {cc}"
            )
        elif inst is not None:
            q["flops_tensor"] = inst * factor
            src["flops_tensor"] = f"sm__inst_executed_pipe_tensor{rate}_x{factor}"
    rd, wr = _first(m, DRAM_READ), _first(m, DRAM_WRITE)
    q["dram_read_bytes"] = rd if rd is not None else math.nan
    q["dram_write_bytes"] = wr if wr is not None else math.nan
    if rd is not None and wr is not None:
        q["dram_bytes"], src["dram_bytes"] = rd + wr, "dram__bytes_read+write"
    elif DRAM_TOTAL in m:
        q["dram_bytes"], src["dram_bytes"] = m[DRAM_TOTAL], DRAM_TOTAL
    else:
        q["dram_bytes"] = math.nan
    for key, nb, ns in (("l2_bytes", L2_BYTES, L2_SECTORS), ("l1_bytes", L1_BYTES, L1_SECTORS)):
        if nb in m:
            q[key], src[key] = m[nb], nb
        elif ns in m:
            q[key], src[key] = m[ns] * SECTOR_BYTES, f"{ns}_x{SECTOR_BYTES}"
        else:
            q[key] = math.nan
    t = m.get(TIME_METRIC)
    q["time_s"] = t if t is not None else math.nan
    if t is not None:
        src["time_s"] = TIME_METRIC
    return q, src, gaps


# ------------------------------------------------------------------------------------ summary
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
        for level in ("dram", "l2", "l1"):
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
        tags = {
            "ncu_roofline": "incomplete" if self.roofline_missing else "complete",
            "ncu_roofline_missing": ",".join(self.roofline_missing) or "none",
            "ncu_measured": ",".join(self.measured),
            "ncu_missing": ",".join(self.missing) or "none",
            "ncu_half_lanes": str(HALF_LANES),
            "ncu_partial": "; ".join(f"{q}: {why}" for q, why in self.partial.items()) or "none",
        }
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
    profiling.chips) makes the tensor-core sum follow NVIDIA's raw dependencies. Raises BenchError when the report has
    no kernels, or when ncu reported ``n/a`` for a counter that feeds a total (a total with holes
    would be silently wrong).
    """
    if capability is None:
        capability = device_from_report(report)[1]
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
    rows, sources = [], {}
    lacking: dict[str, dict[str, int]] = {}
    for k in report.kernels:
        q, src, gaps = kernel_quantities(k.metrics, capability, counters)
        sources.update(src)
        for quantity, absent in gaps.items():
            lacking.setdefault(quantity, {}).setdefault(absent, 0)
            lacking[quantity][absent] += 1
        rows.append(_kernel_row(k, q))
    df = pd.DataFrame.from_records(rows, columns=list(KERNEL_COLUMNS))
    measured = [q for q in QUANTITIES if df[q].notna().any()]
    totals: dict[str, float] = {}
    for q in measured:
        totals[q] = float(df[q].sum(skipna=True))
    for extra in ("dram_read_bytes", "dram_write_bytes"):
        if df[extra].notna().any():
            totals[extra] = float(df[extra].sum(skipna=True))
    if any(q.startswith("flops_") for q in measured):
        totals["flops_total"] = float(df["flops_total"].sum(skipna=True))
    phases = _phases(df, totals) if report.has_nvtx and df["phase"].notna().any() else None
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
    )


def _kernel_row(k: NcuKernel, q: dict[str, float]) -> dict:
    flops = [q[f"flops_{p}"] for p in (*PRECISIONS, "tensor")]
    have = [f for f in flops if not math.isnan(f)]
    total = sum(have) if have else math.nan
    dram = q["dram_bytes"]
    return {
        "id": k.id,
        "kernel": k.name,
        "phase": k.phase,
        "block": k.attrs.get("Block Size", ""),
        "grid": k.attrs.get("Grid Size", ""),
        **{key: q[key] for key in q},
        "flops_total": total,
        "intensity_dram_flops_per_byte": total / dram
        if dram and not math.isnan(dram) and dram > 0
        else math.nan,
    }


def _phases(df: pd.DataFrame, totals: dict[str, float]) -> pd.DataFrame:
    g = df.assign(phase=df["phase"].fillna("none")).groupby("phase", sort=False)
    out = pd.DataFrame(
        {
            "kernels": g.size(),
            "time_s": g["time_s"].sum(min_count=1),
            "flops_total": g["flops_total"].sum(min_count=1),
            "dram_bytes": g["dram_bytes"].sum(min_count=1),
        }
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
    df = summary.kernels
    g = df.groupby("kernel", sort=False)
    out = pd.DataFrame(
        {
            "launches": g.size(),
            "time_s": g["time_s"].sum(min_count=1),
            "flops_total": g["flops_total"].sum(min_count=1),
            "dram_bytes": g["dram_bytes"].sum(min_count=1),
        }
    )
    total_t = summary.totals.get("time_s")
    out["time_share"] = out["time_s"] / total_t if total_t else math.nan
    out["intensity_dram_flops_per_byte"] = out["flops_total"] / out["dram_bytes"].where(
        out["dram_bytes"] > 0
    )
    out = out.sort_values(["time_s", "flops_total"], ascending=False, na_position="last").head(n)
    return out.reset_index()


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
    """The line for an incomplete profile (no FLOP counters and/or no DRAM bytes), else None."""
    lacking = summary.roofline_missing
    if not lacking:
        return None
    return (
        f"{source} has no {' and no '.join(lacking)} (found: {', '.join(summary.measured)}): logged as "
        "an incomplete profile (tag ncu_roofline=incomplete) with what it holds; without both there is "
        "no measured DRAM intensity, so analysis lists it without a roofline point"
    )


def tensor_flops_gap(summary: NcuSummary, precision: str) -> tuple[str, str] | None:
    """(tag value, one-line warning) when a half-precision config has no tensor-core FLOPs in its
    counters, else None. Under fp16/bf16 autocast the convolutions and matmuls run on tensor
    cores, so without tensor counters ncu_flops_total leaves out most of the work."""
    if precision not in ("fp16", "bf16"):
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
            "autocast should; check that the input was profiled with this config",
        )
    return None


def device_from_report(report: NcuReport) -> tuple[str | None, tuple[int, int] | None]:
    """(GPU name, compute capability) when the report carries them."""
    name = report.device_name
    cap = None
    for k in report.kernels:
        major = k.metrics.get("device__attribute_compute_capability_major")
        minor = k.metrics.get("device__attribute_compute_capability_minor")
        if major is not None and minor is not None:
            cap = (int(major), int(minor))
            break
        cc = k.attrs.get("CC", "")
        if re.fullmatch(r"\d+\.\d+", cc):
            a, b = cc.split(".")
            cap = (int(a), int(b))
            break
    return name, cap


def chip_id_from_report(report: NcuReport) -> int | None:
    """``device__attribute_chip`` (the chip number, e.g. 356 = 0x164 = TU104) when the report has it."""
    for k in report.kernels:
        v = k.metrics.get("device__attribute_chip")
        if v is not None and not math.isnan(v):
            return int(v)
    return None


__all__ = [
    "DEVICE_NAME_METRIC",
    "HALF_LANES",
    "TENSOR_INST_FLOPS",
    "tensor_inst_flops",
    "tensor_inst_caution",
    "NcuSummary",
    "plan_metrics",
    "summarize",
    "top_kernels",
    "require_counters",
    "roofline_warning",
]
