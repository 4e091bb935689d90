"""How one kernel's counters become FLOPs, bytes and time.

Input is one kernel's metrics of a parsed report (profiling.ncu.parse.NcuReport, or the same
structure built from a .ncu-rep by profiling.ncu.report_import); `kernel_quantities` returns its
FLOPs per precision, tensor FLOPs, DRAM/L2/L1 bytes and time, the counters each came from and what
a quantity counted incompletely lacks. Pure: no mlflow, no file writes.

Counting rules (see docs/profiling.md for sources):

* FLOPs per precision = add + mul + 2 * fma, from the per-thread SASS instruction counters
  ``sm__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum`` (``smsp__`` counters
  and, in reports that only carry rates, ``<counter>.per_cycle_elapsed * smsp__cycles_elapsed.avg``
  are accepted too -- that is how Nsight Compute's own roofline chart gets counts).
* Packed FP32 (GB100, GB102, GB110, GB112, GR100): ``fadd2``, ``fmul2`` and ``ffma2`` count
  FADD2/FMUL2/FFMA2 thread instructions of two fp32 lanes each, apart from the scalar counters
  (disjoint raw counters in NVIDIA's metric database), so fp32 FLOPs add 2 * (fadd2 + fmul2) +
  4 * ffma2. A report of such a chip without them counts fp32 FLOPs only in part (a gap).
* Half precision: every h-instruction is counted as a packed HFMA2/HADD2/HMUL2 doing HALF_LANES = 2
  lanes of work, so fp16 FLOPs = 2 * (hadd + hmul) + 4 * hfma. This is what current Nsight Compute
  versions use in their half-precision roofline (``..._hfma_pred_on_x4``, ``..._hadd_pred_on_x2``);
  it over-counts by up to 2x when the compiler emits scalar half math (one useful lane).
* Tensor cores: the chip's ``sm__ops_path_tensor_*`` counters count math operations directly (2
  per multiply-add), each op once: which counter covers which comes from NVIDIA's metric database
  (profiling.ncu.chips), or from the names when the chip is not known. Where no ops counter exists
  (Volta), or with --tensor-counters inst, ``sm__inst_executed_pipe_tensor.sum`` times the FLOPs
  of one tensor instruction on that architecture (TENSOR_INST_FLOPS: 512 on sm_70, 2048 on sm_75,
  ...; cautioned on sm_75-89, none on sm_90+).
* DRAM bytes = ``dram__bytes_read.sum + dram__bytes_write.sum`` (``dram__bytes_op_*`` on GB20x,
  ``dram__bytes.sum`` alone), L2 = ``lts__t_bytes.sum`` (or 32-byte ``lts__t_sectors.sum``),
  L1 = ``l1tex__t_bytes.sum`` (or ``l1tex__t_sectors.sum``); kernel time = ``gpu__time_duration.sum``,
  else ``sm__cycles_elapsed.avg / sm__cycles_elapsed.avg.per_second`` (kernel_time).
"""

from __future__ import annotations

import math
import re

from profiling.ncu.chips.counters import ChipCounters
from profiling.ncu.names import (
    CC_METRICS,
    CHIP_METRIC,
    CYCLE_RATE,
    CYCLES,
    CYCLES_ELAPSED,
    DRAM_READ,
    DRAM_TOTAL,
    DRAM_WRITE,
    L1_BYTES,
    L1_SECTORS,
    L2_BYTES,
    L2_SECTORS,
    OPS,
    PACKED_LANES,
    PACKED_OPS,
    PRECISIONS,
    TENSOR_INST,
    TENSOR_PREFIX,
    TIME_METRIC,
    op_counter,
    parse_tensor_name,
)
from profiling.ncu.parse import NcuReport

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
OP_WEIGHT = {"add": 1.0, "mul": 1.0, "fma": 2.0}
LANES = {"fp64": 1, "fp32": 1, "fp16": HALF_LANES}


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
        if not name.startswith(TENSOR_PREFIX) or "_realtime" in name:
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
        packed, unpacked = _packed(m, p, counters) if how else (0.0, [])
        q[f"flops_{p}"] = total + packed if how else math.nan
        if how:
            src[f"flops_{p}"] = "sass_thread_inst_executed" + ("" if how == "count" else f"_{how}")
            if _any_packed(m, p):
                src[f"flops_{p}"] += f" (+ {', '.join(PACKED_OPS[p])})"
            if absent:
                gaps[f"flops_{p}"] = (
                    f"no {', '.join(absent)} counter{'s' if len(absent) > 1 else ''}"
                )
            elif unpacked:
                gaps[f"flops_{p}"] = (
                    f"no {', '.join(unpacked)} counter{'s' if len(unpacked) > 1 else ''} "
                    f"({counters.chip} has packed FP32)"
                )
    ops = _tensor_ops(m, counters)
    q["flops_tensor"] = math.nan
    _add_tensor_flops(q, src, gaps, ops, m, capability)
    _add_bytes_and_time(q, src, m)
    return q, src, gaps


def _add_tensor_flops(q, src, gaps, ops, m: dict[str, float], capability) -> None:
    """flops_tensor from the tensor ops counters (`ops`, _tensor_ops), else from the instruction
    count times the factor of `capability`, else a gap."""
    if ops is not None:
        q["flops_tensor"], src["flops_tensor"] = ops
    else:
        inst, how = _count(m, TENSOR_INST[0])
        factor = tensor_inst_flops(capability)
        rate = "" if how == "count" else f"_{how}"
        if inst is not None and inst == 0:  # no tensor work: no factor needed (named if known,
            # so that a profile's source tag does not depend on whether its last kernel used them)
            named = f"_x{factor}" if factor is not None else ""
            q["flops_tensor"] = 0.0
            src["flops_tensor"] = f"sm__inst_executed_pipe_tensor{rate}{named}"
        elif inst is not None and factor is None:
            cc = f"sm_{capability[0]}{capability[1]}" if capability else "an unknown GPU"
            gaps["flops_tensor"] = (
                f"tensor instructions without a FLOPs-per-instruction factor for {cc}"
            )
        elif inst is not None:
            q["flops_tensor"] = inst * factor
            src["flops_tensor"] = f"sm__inst_executed_pipe_tensor{rate}_x{factor}"


def _add_bytes_and_time(q, src, m: dict[str, float]) -> None:
    """DRAM bytes (read + write, else the total), L2 and L1 bytes (sectors where bytes do not
    exist) and kernel time."""
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
    q["time_s"], how = kernel_time(m)
    if how:
        src["time_s"] = how


TIME_FROM_CYCLES = f"{CYCLES_ELAPSED} / {CYCLE_RATE}"


def kernel_time(m: dict[str, float]) -> tuple[float, str]:
    """(kernel seconds, the counters they came from): gpu__time_duration.sum where the kernel has
    it, else its elapsed SM cycles over its SM clock rate (both of the same launch); (NaN, "")
    without either. The cycle form is what NERSC's DeepCAM tables use (their files have no
    gpu__time_duration); a zero or negative rate gives no time."""
    t = m.get(TIME_METRIC)
    if t is not None:
        return t, TIME_METRIC
    cycles, rate = m.get(CYCLES_ELAPSED), m.get(CYCLE_RATE)
    if cycles is not None and rate is not None and rate > 0:
        return cycles / rate, TIME_FROM_CYCLES
    return math.nan, ""


def _packed(
    m: dict[str, float], precision: str, counters: ChipCounters | None
) -> tuple[float, list[str]]:
    """(FLOPs of the packed instructions of `precision`, the packed ops the kernel lacks although
    its chip has them). Each packed instruction is PACKED_LANES lanes of its scalar op."""
    flops, lacking = 0.0, []
    for op in PACKED_OPS.get(precision, ()):
        c, _ = _count(m, op_counter(op))
        if c is not None:
            flops += OP_WEIGHT[op[1:-1]] * PACKED_LANES * c
        elif counters is not None and counters.has(op_counter(op)):
            lacking.append(op)
    return flops, lacking


def _any_packed(m: dict[str, float], precision: str) -> bool:
    return any(_count(m, op_counter(op))[0] is not None for op in PACKED_OPS.get(precision, ()))


def metrics_capability(m: dict[str, float]) -> tuple[int, int] | None:
    """The compute capability a kernel's device attributes give, None without them."""
    major, minor = (m.get(n) for n in CC_METRICS)
    return (int(major), int(minor)) if major is not None and minor is not None else None


def device_from_report(report: NcuReport) -> tuple[str | None, tuple[int, int] | None]:
    """(GPU name, compute capability) when the report carries them."""
    name = report.device_name
    cap = None
    for k in report.kernels:
        cap = metrics_capability(k.metrics)
        if cap is not None:
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
        v = k.metrics.get(CHIP_METRIC)
        if v is not None and not math.isnan(v):
            return int(v)
    return None
