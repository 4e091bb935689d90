"""Which counters to ask ncu for: the metric list of a metric set on one chip.

`plan_metrics` chooses, for the chip profiling.ncu.chips.counters describes, the names that exist there
(fallbacks where the preferred counter does not) and says what that chip cannot count. Pure: no
mlflow, no file writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.errors import UsageError
from profiling.ncu.chips.counters import ChipCounters
from profiling.ncu.names import (
    DRAM_READ,
    DRAM_WRITE,
    L1_CHOICES,
    L2_CHOICES,
    OPS,
    PACKED_OP_COUNTERS,
    PCIE,
    PRECISIONS,
    TENSOR_INST,
    TENSOR_OPS_METRICS,
    TIME_METRIC,
    op_counter,
)

METRIC_SETS = ("roofline", "seed")
TENSOR_MODES = ("auto", "ops", "inst", "none")


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
    Both sets add the packed FP32 counters (fadd2/fmul2/ffma2) where the chip has them.
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

    # packed FP32 (fadd2/fmul2/ffma2) only where the chip has them: not a gap elsewhere
    packed = [n for n in PACKED_OP_COUNTERS if counters is not None and counters.has(n)]
    if metric_set == "roofline":
        names = ops([op_counter(op) for p in PRECISIONS for op in OPS[p]]) + packed
        names += _tensor_names(tensor, counters, capability, plan)
    else:
        names = ops([op_counter(op) for p in ("fp32", "fp16") for op in OPS[p]]) + packed
        plan.notes.append(
            "seed set: the course brief's flop_count_sp/flop_count_hp are nvprof metric names no "
            "current GPU has; fp32/fp16 FLOPs are counted from sm__sass_thread_inst_executed_op_"
            "{f,h}{add,mul,fma}_pred_on.sum instead"
        )
    names += _bytes_and_time_names(metric_set, counters, has, where, plan)
    for n in [*names, *extra]:
        n = n.strip()
        if n and n not in plan.metrics:
            plan.metrics.append(n)
    return plan


def _bytes_and_time_names(
    metric_set: str, counters, has, where: str, plan: MetricPlan
) -> list[str]:
    """The DRAM counters of a plan, then the roofline set's L2, L1 and time counters or the seed
    set's PCIe counters (adds to plan.missing and plan.notes what the chip lacks)."""
    dram = counters.dram if counters else (DRAM_READ[0], DRAM_WRITE[0])
    if not dram:
        plan.missing.append("DRAM bytes")
        plan.notes.append(
            f"{where} has no DRAM counters (no dram__bytes* metric: its memory is shared with the "
            "CPU): the profile counts FLOPs, L2/L1 bytes and kernel time, but no DRAM bytes and so "
            "no DRAM intensity"
        )
    names = list(dram)
    if metric_set == "roofline":
        for choice, what in ((L2_CHOICES, "L2 bytes"), (L1_CHOICES, "L1 bytes")):
            found = counters.first(*((n,) for n in choice)) if counters else choice[:1]
            if not found:
                plan.missing.append(what)
            names += list(found)
        if has(TIME_METRIC):
            names.append(TIME_METRIC)
        else:
            plan.missing.append("kernel time")
    else:
        if all(has(n) for n in PCIE):
            names += list(PCIE)
        else:
            plan.missing.append("PCIe bytes")
            plan.notes.append(
                f"{where} has no pcie__read/write_bytes counters: the seed set goes without"
            )
    return names


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
