"""Roofline maths: pure functions on raw SI numbers (FLOP/s, byte/s, FLOP/byte).

The model (Williams, Waterman & Patterson, "Roofline: an insightful visual performance model",
CACM 52(4), 2009): a kernel of arithmetic intensity I (FLOPs per DRAM byte) on a machine with peak
compute P (FLOP/s) and memory bandwidth B (byte/s) cannot exceed

    attainable(I) = min(I * B, P)

The ridge point I* = P / B separates memory-bound (I < I*) from compute-bound (I >= I*) work.
The project's one efficiency is `fraction_of_roof` = achieved / attainable(I): how close the run came
to the roof *at its own intensity* (docs/schema.md); `evaluate_point` applies it to a device's `Roof`
and says which ceilings (measured, vendor) it was held against.

Hierarchical roofline (Yang, Kurth & Williams, "Hierarchical Roofline analysis for GPUs", CCPE 2020):
the same achieved FLOP/s placed at one intensity per memory level (DRAM, L2, L1); each level with a
bandwidth ceiling gives its own bound, and the lowest one is the limiter.

Nothing here imports mlflow, reads files or plots. `DTYPES` and `LEVELS` are the project's one list
of compute dtypes and memory levels (the vendor table, the peaks runs and analysis use them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16")
"""compute ceilings' dtypes (peak_flops_per_s_<dtype>)."""
LEVELS = ("dram", "l2", "l1")
"""memory levels with a bandwidth ceiling (peak_<level>_bytes_per_s)."""
MEMORY_BOUND = "memory-bound"
COMPUTE_BOUND = "compute-bound"


def is_finite_positive(x: float | None) -> bool:
    """A usable figure: a finite number above zero (None, NaN, inf, 0, negatives and non-numbers
    are not); every ceiling, intensity and FLOP/s read from a run passes here before use."""
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def attainable_flops_per_s(
    intensity_flops_per_byte: float, peak_flops_per_s: float, bytes_per_s: float
) -> float:
    """min(I x B, P); NaN when any input is missing or not positive."""
    if not all(map(is_finite_positive, (intensity_flops_per_byte, peak_flops_per_s, bytes_per_s))):
        return math.nan
    return min(intensity_flops_per_byte * bytes_per_s, peak_flops_per_s)


def ridge_intensity(peak_flops_per_s: float, bytes_per_s: float) -> float:
    """P / B in FLOP/byte: the intensity where the bandwidth slope meets the compute ceiling."""
    if not all(map(is_finite_positive, (peak_flops_per_s, bytes_per_s))):
        return math.nan
    return peak_flops_per_s / bytes_per_s


def classify_bound(
    intensity_flops_per_byte: float, peak_flops_per_s: float, bytes_per_s: float
) -> str:
    """'memory-bound' left of the ridge, 'compute-bound' at or right of it, '' when unknown."""
    ridge = ridge_intensity(peak_flops_per_s, bytes_per_s)
    if not (is_finite_positive(intensity_flops_per_byte) and math.isfinite(ridge)):
        return ""
    return MEMORY_BOUND if intensity_flops_per_byte < ridge else COMPUTE_BOUND


def fraction_of_roof(
    achieved_flops_per_s: float,
    intensity_flops_per_byte: float,
    peak_flops_per_s: float,
    bytes_per_s: float,
) -> float:
    """The efficiency: achieved / attainable(I) = achieved / min(I x B, P) as a fraction (1.0 = on
    the roof); NaN when unknown. The only definition in the project (docs/schema.md)."""
    att = attainable_flops_per_s(intensity_flops_per_byte, peak_flops_per_s, bytes_per_s)
    if not (math.isfinite(att) and is_finite_positive(achieved_flops_per_s)):
        return math.nan
    return achieved_flops_per_s / att


def hierarchical_limiter(
    intensities: dict[str, float], bandwidths: dict[str, float], peak_flops_per_s: float
) -> tuple[str, float]:
    """(limiting level, attainable FLOP/s) over the memory levels that have both an intensity and a
    bandwidth ceiling; the level is 'compute' when the compute ceiling is the lowest bound.
    ('', NaN) when no level is usable."""
    best_level, best = "", math.nan
    for level in LEVELS:
        att = attainable_flops_per_s(
            intensities.get(level), peak_flops_per_s, bandwidths.get(level)
        )
        if math.isfinite(att) and (not math.isfinite(best) or att < best):
            best_level, best = level, att
    if best_level and best >= peak_flops_per_s:
        best_level = "compute"
    return best_level, best


TENSOR_PRECISIONS = ("tf32", "fp16", "bf16")
"""Run precisions held against a ceiling of their own dtype (tensor cores) when one is known; every
other precision (fp32, unknown ones) meets the fp32 ceiling. The one place this mapping lives."""


def ceiling_dtype(precision: str, available: set[str] | frozenset[str] | list[str]) -> str:
    """The compute ceiling a run of `precision` is held against.

    fp32 runs (IEEE FP32: TF32 off on CUDA) -> the fp32 (CUDA-core / SIMD FP32) ceiling. fp16/bf16
    runs use torch.autocast: the matmuls and convolutions run in half precision on tensor cores (or
    AMX/AVX512-BF16 on CPUs); tf32 runs put fp32 convolutions and matmuls on TF32 tensor cores. Each
    is held against the ceiling of its own dtype when one is known, else against fp32 (the ceiling
    actually reached by the ops that stay in fp32). Unknown precisions fall back to fp32.
    """
    precision = (precision or "").lower()
    if precision in TENSOR_PRECISIONS and precision in available:
        return precision
    return "fp32"


@dataclass
class Roof:
    """The ceilings of one device: compute per dtype and bandwidth per memory level.

    Values are raw SI (FLOP/s, byte/s); `sources` says where each one came from, keyed like
    'flops:fp32' or 'bytes:dram' ('measured: peaks run <id>', 'vendor: <url>', ...).
    """

    device_name: str
    flops_per_s: dict[str, float] = field(default_factory=dict)
    bytes_per_s: dict[str, float] = field(default_factory=dict)  # level -> byte/s
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def dram_bytes_per_s(self) -> float:
        return self.bytes_per_s.get("dram", math.nan)

    def peak(self, dtype: str) -> float:
        return self.flops_per_s.get(dtype, math.nan)

    def source_kind(self, key: str) -> str:
        """'measured' or 'vendor': where ceiling `key` ('flops:fp32', 'bytes:dram') came from."""
        return "measured" if self.sources.get(key, "").startswith("measured") else "vendor"

    def is_empty(self) -> bool:
        return not any(
            is_finite_positive(v) for v in [*self.flops_per_s.values(), *self.bytes_per_s.values()]
        )

    def merged_over(self, fallback: "Roof | None") -> "Roof":
        """A roof taking every value from self where present, else from `fallback`."""
        if fallback is None:
            return Roof(
                self.device_name, dict(self.flops_per_s), dict(self.bytes_per_s), dict(self.sources)
            )
        out = Roof(self.device_name)
        for dtype in sorted(set(self.flops_per_s) | set(fallback.flops_per_s)):
            src = self if is_finite_positive(self.flops_per_s.get(dtype)) else fallback
            if is_finite_positive(src.flops_per_s.get(dtype)):
                out.flops_per_s[dtype] = src.flops_per_s[dtype]
                out.sources[f"flops:{dtype}"] = src.sources.get(f"flops:{dtype}", "")
        for level in sorted(set(self.bytes_per_s) | set(fallback.bytes_per_s)):
            src = self if is_finite_positive(self.bytes_per_s.get(level)) else fallback
            if is_finite_positive(src.bytes_per_s.get(level)):
                out.bytes_per_s[level] = src.bytes_per_s[level]
                out.sources[f"bytes:{level}"] = src.sources.get(f"bytes:{level}", "")
        return out


@dataclass
class PointEval:
    """A roofline point evaluated against a roof: `fraction_of_roof` is the project's one efficiency, `roof_source`
    says which ceilings it used ('measured', 'vendor' or 'measured+vendor')."""

    ceiling_dtype: str
    peak_flops_per_s: float
    dram_bytes_per_s: float
    ridge_flops_per_byte: float
    attainable_flops_per_s: float
    bound: str
    fraction_of_roof: float
    roof_source: str
    hier_limiter: str = ""


def evaluate_point(
    precision: str, achieved_flops_per_s: float, intensity: dict[str, float], roof: Roof | None
) -> PointEval:
    """Place one point (achieved FLOP/s, intensities per level) under `roof` (may be None)."""
    nan = math.nan
    if roof is None or roof.is_empty():
        return PointEval(ceiling_dtype(precision, set()), nan, nan, nan, nan, "", nan, "")
    available = {d for d, v in roof.flops_per_s.items() if is_finite_positive(v)}
    dtype = ceiling_dtype(precision, available)
    peak, bw = roof.peak(dtype), roof.dram_bytes_per_s
    ai = intensity.get("dram", nan)
    src_f = roof.sources.get(f"flops:{dtype}", "") if is_finite_positive(peak) else ""
    src_b = roof.sources.get("bytes:dram", "") if is_finite_positive(bw) else ""
    kinds = sorted({s.split(":", 1)[0] for s in (src_f, src_b) if s})
    limiter = ""
    if any(
        level != "dram"
        and is_finite_positive(intensity.get(level))
        and is_finite_positive(roof.bytes_per_s.get(level))
        for level in LEVELS
    ):
        limiter, _ = hierarchical_limiter(intensity, roof.bytes_per_s, peak)
    return PointEval(
        ceiling_dtype=dtype,
        peak_flops_per_s=peak if is_finite_positive(peak) else nan,
        dram_bytes_per_s=bw if is_finite_positive(bw) else nan,
        ridge_flops_per_byte=ridge_intensity(peak, bw),
        attainable_flops_per_s=attainable_flops_per_s(ai, peak, bw),
        bound=classify_bound(ai, peak, bw),
        fraction_of_roof=fraction_of_roof(achieved_flops_per_s, ai, peak, bw),
        roof_source="+".join(kinds),
        hier_limiter=limiter,
    )
