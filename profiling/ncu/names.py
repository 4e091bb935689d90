"""The Nsight Compute metric names this project reads, each written once, and the grammar of the
tensor-core ops counter names.

Used by the metric plans (profiling.ncu.plan), the counting rules (profiling.ncu.counting), the
per-chip counter facts (profiling.ncu.chips.counters) and both readers (profiling.ncu.parse,
profiling.ncu.report_import). Pure: constants and name rules, no project imports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PRECISIONS = ("fp64", "fp32", "fp16")
OPS = {
    "fp64": ("dadd", "dmul", "dfma"),
    "fp32": ("fadd", "fmul", "ffma"),
    "fp16": ("hadd", "hmul", "hfma"),
}


def op_counter(op: str, unit: str = "sm") -> str:
    """The per-thread SASS instruction counter of `op` ("ffma") on the sm__ or smsp__ unit."""
    return f"{unit}__sass_thread_inst_executed_op_{op}_pred_on.sum"


OP_COUNTERS = tuple(op_counter(op) for p in PRECISIONS for op in OPS[p])
PACKED_OPS = {"fp32": ("fadd2", "fmul2", "ffma2")}
"""Packed FP32 SASS instructions (FADD2/FMUL2/FFMA2: two fp32 lanes per thread instruction) that
some chips count apart from the scalar ones: GB100, GB102, GB110, GB112 and GR100 in NVIDIA's
metric database. Each is built from a raw counter of its own (``ffma`` does not include ``ffma2``),
so they are added to the scalar counts; asked for only where the chip has them."""
PACKED_LANES = 2
"""fp32 lanes per packed instruction: fadd2 and fmul2 are 2 FLOPs per thread instruction, ffma2 4."""
PACKED_OP_COUNTERS = tuple(op_counter(op) for p in PACKED_OPS for op in PACKED_OPS[p])
TIME_METRIC = "gpu__time_duration.sum"
CYCLES_ELAPSED = "sm__cycles_elapsed.avg"
CYCLE_RATE = "sm__cycles_elapsed.avg.per_second"
"""Kernel time where gpu__time_duration.sum is absent (NERSC's DeepCAM captures): elapsed SM cycles
over the SM clock rate of the same launch."""
DRAM_READ = ("dram__bytes_read.sum", "dram__bytes_op_read.sum")
DRAM_WRITE = ("dram__bytes_write.sum", "dram__bytes_op_write.sum")
DRAM_TOTAL = "dram__bytes.sum"
DRAM_CHOICES = (*zip(DRAM_READ, DRAM_WRITE), (DRAM_TOTAL,))
"""DRAM byte counters in order of preference: read + write, else op_read + op_write (GB20x,
GR100), else the total; chips with none (GA10B, GB10B, GB20B, GB20C: memory shared with the CPU)
get no DRAM counter."""
L2_BYTES, L2_SECTORS = "lts__t_bytes.sum", "lts__t_sectors.sum"
L1_BYTES, L1_SECTORS = "l1tex__t_bytes.sum", "l1tex__t_sectors.sum"
L2_CHOICES = (L2_BYTES, L2_SECTORS)
L1_CHOICES = (L1_BYTES, L1_SECTORS)
TENSOR_PREFIX = "sm__ops_path_tensor_"
TENSOR_INST = ("sm__inst_executed_pipe_tensor.sum", "smsp__inst_executed_pipe_tensor.sum")
TENSOR_OPS_METRICS = (
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
)
"""The tensor ops counters asked for on a GPU whose chip is not known (names not checked)."""
PCIE = ("pcie__read_bytes.sum", "pcie__write_bytes.sum")
CYCLES = {"sm": "sm__cycles_elapsed.avg", "smsp": "smsp__cycles_elapsed.avg"}
DEVICE_NAME_METRIC = "device__attribute_display_name"
CHIP_METRIC = "device__attribute_chip"
CC_METRICS = (
    "device__attribute_compute_capability_major",
    "device__attribute_compute_capability_minor",
)


@dataclass(frozen=True)
class TensorName:
    """The parts of an ``sm__ops_path_tensor_[op_<op>_]src_<src>[_dst_<dst>][_sparsity_<sp>].sum`` name."""

    op: str | None
    src: str
    dst: str | None
    sp: str | None


_TENSOR_NAME = re.compile(
    rf"^{TENSOR_PREFIX}(?:op_(?P<op>[a-z0-9]+)_)?src_(?P<src>[a-z0-9_]+?)"
    r"(?:_dst_(?P<dst>[a-z0-9_]+?))?(?:_sparsity_(?P<sp>on|off))?\.sum$"
)


def parse_tensor_name(name: str) -> TensorName | None:
    """The parts of a tensor ops counter name (``.sum``), None for another name."""
    g = _TENSOR_NAME.match(name)
    return TensorName(g["op"], g["src"], g["dst"], g["sp"]) if g else None


_FLOAT_TENSOR = re.compile(rf"^{TENSOR_PREFIX}(?:op_[a-z0-9]+_)?src_(?!int|b1)[a-z0-9_]+$")


def is_float_tensor_counter(base: str) -> bool:
    """True for ``sm__ops_path_tensor_[op_X_]src_<float type>...`` base names (not integer
    sources, not ``_realtime`` variants)."""
    return bool(_FLOAT_TENSOR.match(base)) and not base.endswith("_realtime")


_RELEVANT = re.compile(
    r"^(sm|smsp)__sass_thread_inst_executed_op_([dfh](add|mul|fma)|f(add|mul|fma)2)_pred_on\.sum"
    r"(\.per_cycle_elapsed)?$"
    r"|^(sm|smsp)__cycles_elapsed\.avg$|^sm__cycles_elapsed\.avg\.per_second$"
    r"|^sm__ops_path_tensor_.*\.sum(\.per_cycle_elapsed)?$"
    r"|^(sm|smsp)__inst_executed_pipe_tensor\.sum(\.per_cycle_elapsed)?$"
    r"|^dram__bytes(_op)?_(read|write)\.sum$|^dram__bytes\.sum$"
    r"|^(lts|l1tex)__t_(bytes|sectors)\.sum$"
    r"|^gpu__time_duration\.sum$"
    r"|^device__attribute_(display_name|chip|compute_capability_major|compute_capability_minor)$"
)


def is_relevant(name: str) -> bool:
    """True for the metrics the counting reads (used to keep big raw exports small in memory)."""
    return bool(_RELEVANT.match(name))
