"""Which dtypes a GEMM ceiling is measured for on a device. Pure: the caller supplies the facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from common.errors import UsageError
from roofline.vendor import DTYPES

DEVICE_TYPES = ("cpu", "cuda", "mps")
# CPU dtypes that join the defaults only when a probe shows them fast
CPU_PROBED_DTYPES = ("fp16", "bf16")
CPU_PROBE_SIZE = 512
# a probed dtype is a CPU default when it runs at >= 1/4 of the fp32 rate
CPU_PROBE_MIN_RATIO = 0.25


@dataclass(frozen=True)
class DtypeStatus:
    """Whether a dtype can be measured on a device, and whether it is by default."""

    measurable: bool
    default: bool
    reason: str = ""  # why it is not measurable, or not a default


def dtype_availability(
    device_type: str,
    capability: tuple[int, int] | None = None,
    bf16_supported: bool = False,
    cpu_probe_ratios: dict[str, float] | None = None,
) -> dict[str, DtypeStatus]:
    """Which dtypes a GEMM ceiling can be measured for. Pure: the caller supplies the facts.

    device_type: cpu | cuda | mps.
    capability: CUDA compute capability (major, minor); tf32 tensor cores need (8, 0) or newer.
    bf16_supported: CUDA: torch.cuda.is_bf16_supported(including_emulation=False) (native bf16,
        sm_80+); MPS: macOS 14 or newer. Ignored on CPU, where bf16 always runs (fast with
        AMX/AVX512-BF16, very slowly without) and the probe decides.
    cpu_probe_ratios: {dtype: its matmul throughput / fp32's} from a short probe
        (gemm.probe_cpu_ratios) for the dtypes in CPU_PROBED_DTYPES (fp16, bf16). CPUs without a
        native GEMM path for a dtype run it tens of times slower than fp32 (a 4096^3 matmul then
        takes minutes); such a dtype is a default only when the probe shows it at
        CPU_PROBE_MIN_RATIO of fp32 or better. A dtype left out of the mapping (not probed) is
        measurable but not a default.
    fp64 is measurable wherever the backend has it, but never a default (1/32 to 1/64 rate on most
    GPUs and slow to measure): ask for it with --dtypes.
    """
    if device_type not in DEVICE_TYPES:
        raise ValueError(
            f"device_type must be one of {', '.join(DEVICE_TYPES)}, got {device_type!r}"
        )
    if device_type == "cuda":
        return _cuda_dtypes(capability, bf16_supported)
    if device_type == "mps":
        return _mps_dtypes(bf16_supported)
    return _cpu_dtypes(cpu_probe_ratios or {})


_YES = DtypeStatus(True, True)
_OPT_IN_FP64 = DtypeStatus(True, False, "fp64 is opt-in (slow on most devices): add it to --dtypes")


def _cuda_dtypes(capability: tuple[int, int] | None, bf16_supported: bool) -> dict:
    cap = tuple(capability) if capability else (0, 0)
    cap_text = f"sm_{cap[0]}{cap[1]}" if capability else "unknown capability"
    return {
        "fp64": _OPT_IN_FP64,
        "fp32": _YES,
        "tf32": _YES
        if cap >= (8, 0)
        else DtypeStatus(False, False, f"tf32 tensor cores need sm_80+ (this GPU: {cap_text})"),
        "fp16": _YES,
        "bf16": _YES
        if bf16_supported
        else DtypeStatus(False, False, f"no native bf16 on this GPU ({cap_text}; needs sm_80+)"),
    }


def _mps_dtypes(bf16_supported: bool) -> dict:
    return {
        "fp64": DtypeStatus(False, False, "MPS has no float64"),
        "fp32": _YES,
        "tf32": DtypeStatus(False, False, "tf32 is a CUDA tensor-core mode"),
        "fp16": _YES,
        "bf16": _YES
        if bf16_supported
        else DtypeStatus(False, False, "bf16 on MPS needs macOS 14 or newer"),
    }


def _cpu_dtypes(ratios: dict[str, float]) -> dict:
    out = {
        "fp64": _OPT_IN_FP64,
        "fp32": _YES,
        "tf32": DtypeStatus(
            False, False, "tf32 is a CUDA tensor-core mode (sm_80+), not available on CPU"
        ),
    }
    for dtype in CPU_PROBED_DTYPES:
        ratio = ratios.get(dtype)
        if ratio is None:
            out[dtype] = DtypeStatus(
                True, False, f"{dtype} on CPU was not probed: add it to --dtypes to measure it"
            )
        elif ratio >= CPU_PROBE_MIN_RATIO:
            out[dtype] = _YES
        else:
            out[dtype] = DtypeStatus(
                True,
                False,
                f"{dtype} matmul ran at {ratio:.0%} of the fp32 rate in a {CPU_PROBE_SIZE}^3 probe "
                f"(no fast {dtype} path on this CPU): add it to --dtypes to measure it anyway",
            )
    return {d: out[d] for d in DTYPES}


def select_dtypes(
    requested: Sequence[str] | None, availability: dict[str, DtypeStatus]
) -> tuple[list[str], dict[str, str]]:
    """(dtypes to measure, {dtype: why skipped}). `requested` None means the device's defaults.

    Raises UsageError when a requested dtype cannot be measured on this device.
    """
    if requested is None:
        chosen = [d for d in DTYPES if availability[d].default]
    else:
        bad = [d for d in requested if not availability[d].measurable]
        if bad:
            raise UsageError("; ".join(f"--dtypes {d}: {availability[d].reason}" for d in bad))
        chosen = [d for d in DTYPES if d in requested]
    skipped = {d: availability[d].reason for d in DTYPES if d not in chosen}
    return chosen, skipped
