"""Device resolution, precision support and device memory statistics."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import sys

from common.errors import UsageError


def resolve_device(name: str):
    """`auto` picks cuda, then mps, then cpu. An explicitly requested but missing device is an error."""
    import torch

    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:  # "Invalid device string": cuda:-1, cuda:abc
        raise UsageError(
            f"{name} is not a device: use auto, cpu, cuda, cuda:N (N = 0, 1, ...) or mps"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(
                "CUDA is not available on this machine (no NVIDIA GPU or driver): use --device cpu or auto"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UsageError(
                f"{name} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
        return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(
            "MPS is not available (needs Apple silicon and macOS 12.3+): use --device cpu or auto"
        )
    return dev


SM80_PRECISIONS = ("bf16", "tf32")
"""Precisions a CUDA GPU computes natively from sm_80 (Ampere) on: bf16, and TF32 tensor-core math."""


def cuda_precision_refusal(
    precision: str, gpu_name: str | None, capability: tuple[int, int] | None
) -> str | None:
    """The one line a run of `precision` on a CUDA GPU of `capability` is refused with, None when
    the GPU runs it (or its capability is not known). Pure: `python -m train` asks it with torch's
    view of the GPU, `python -m profiling` (--dry-run, and before ncu starts) with the GPU it plans
    for, so both print the same line."""
    if precision not in SM80_PRECISIONS or capability is None or tuple(capability) >= (8, 0):
        return None
    gpu = f"{gpu_name or 'the GPU'} (sm_{capability[0]}{capability[1]})"
    if precision == "bf16":
        return (
            f"{gpu} has no native bf16 (needs sm_80+; torch would emulate it, which is not what a "
            "bf16 benchmark measures): use --precision fp16 or fp32"
        )
    return (
        f"{gpu} has no TF32 tensor cores (needs sm_80+): use --precision fp32 (IEEE FP32) or fp16"
    )


def check_precision(precision: str, device) -> None:
    """Raise UsageError when `precision` (autocast fp16/bf16, TF32 math) is not supported on `device`."""
    import torch

    if precision == "fp32":
        return
    if device.type == "cpu" and precision == "fp16":
        raise UsageError(
            "fp16 autocast is not supported for training on cpu: use --precision bf16 or fp32"
        )
    if device.type != "cuda" and precision == "tf32":
        raise UsageError(
            "--precision tf32 is TF32 tensor-core math on CUDA GPUs (sm_80+), not a mode of "
            f"{device.type}: use --precision fp32"
        )
    if device.type == "cuda" and (
        precision == "tf32" or (precision == "bf16" and not cuda_native_bf16(device))
    ):
        refusal = cuda_precision_refusal(
            precision,
            torch.cuda.get_device_name(device),
            tuple(torch.cuda.get_device_capability(device)),
        )
        if refusal:
            raise UsageError(refusal)


def cuda_native_bf16(device) -> bool:
    """Whether the CUDA `device` computes bf16 natively (sm_80+). `torch.cuda.is_bf16_supported()`
    with its default `including_emulation=True` also says yes on a T4 or V100, where bf16 is
    emulated; it also only looks at the current device, hence the `torch.cuda.device` block."""
    import torch

    with torch.cuda.device(device):
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))


def set_fp32_math(precision: str, device) -> str | None:
    """On CUDA, the math of fp32 convolutions and matmuls for `precision`: TF32 tensor cores for
    tf32, IEEE FP32 (TF32 off for cuDNN and cuBLAS) for everything else, including the fp32 ops
    autocast leaves under fp16/bf16. Returns the mode read back from torch (fp32_math_in_force);
    None off CUDA (TF32 is a CUDA mode: nothing is set). The legacy flags are used, as
    profiling.peaks does: mixing them with torch's newer fp32_precision API makes reads fail."""
    if device.type != "cuda":
        return None
    import torch

    tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return fp32_math_in_force()


def fp32_math_in_force() -> str:
    """What torch does with fp32 convolutions (cuDNN) and matmuls (cuBLAS) now: "ieee", "tf32", or
    both named when they differ ("cudnn=tf32,matmul=ieee", torch's own default)."""
    import torch

    try:
        conv = "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
        matmul = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    except RuntimeError:  # the flags were set through torch's newer API: read that one
        conv = torch.backends.cudnn.conv.fp32_precision
        matmul = torch.backends.cuda.matmul.fp32_precision
    return conv if conv == matmul else f"cudnn={conv},matmul={matmul}"


def fp32_math_note(mode: str | None) -> str:
    """How profile mode reports the fp32 math in force on its console line (read back by
    `python -m profiling` from ncu's console: fp32_math_reported)."""
    return f"(fp32 math: {mode or 'unknown'})"


def fp32_math_reported(console_text: str) -> str | None:
    """The fp32 math a profile-mode child reported (fp32_math_note), None when it said none."""
    found = re.findall(r"\(fp32 math: ([\w=,]+)\)", console_text or "")
    return found[-1] if found else None


def autocast_context(precision: str, device):
    """A zero-argument factory of the autocast context for `precision` (nullcontext for fp32 and
    tf32, which is fp32 tensors with TF32 math: set_fp32_math)."""
    import torch

    if precision in ("fp32", "tf32"):
        return contextlib.nullcontext
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device):
    """A GradScaler for fp16 on CUDA (fp16 gradients underflow without it), else None."""
    import torch

    if precision == "fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def reset_peak_memory(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def device_peak_memory_bytes(device) -> float | None:
    """Peak bytes allocated by tensors on the device since the last reset (None where not reported)."""
    import torch

    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    if device.type == "mps":
        return float(torch.mps.driver_allocated_memory())
    return None


def max_rss_bytes() -> float:
    """Peak resident set size of this process (not of DataLoader workers)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak if sys.platform == "darwin" else peak * 1024)


def cpu_times_s() -> tuple[float, float]:
    """(user, system) CPU seconds used by this process so far, all threads."""
    t = os.times()
    return t.user, t.system


def is_out_of_memory(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text.lower()
        or "DefaultCPUAllocator: can't allocate" in text  # Linux, macOS
        or "DefaultCPUAllocator: not enough memory" in text  # Windows
    )


def device_memory_bytes(device) -> tuple[int, str]:
    """Memory the training could use on `device` and where the number comes from."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory), "CUDA total memory"
    if device.type == "mps":
        return int(torch.mps.recommended_max_memory()), "MPS recommended max working set"
    import psutil

    return int(psutil.virtual_memory().available), "available RAM (psutil) at start"


def collective_backend(requested: str, device) -> str:
    """The torch.distributed backend of a data-parallel run on `device`: `auto` is nccl on CUDA and
    gloo on CPU; nccl without CUDA and MPS (no collective backend) are UsageErrors."""
    if device.type == "mps":
        raise UsageError(
            "data-parallel runs need CUDA (nccl) or the CPU (gloo); MPS has no collective backend"
        )
    if requested == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if requested == "nccl" and device.type != "cuda":
        raise UsageError(f"--backend nccl needs CUDA devices, got {device.type}: use gloo or auto")
    return requested


def rank_device(device, local_rank: int, local_world_size: int):
    """The device of the process with `local_rank` on its node: cuda:LOCAL_RANK for CUDA (one GPU
    per process), else `device`. An explicit cuda:N is kept only for a single process per node."""
    import torch

    if device.type != "cuda":
        return device
    if local_world_size == 1:
        return device
    if local_rank >= torch.cuda.device_count():
        raise UsageError(
            f"{local_world_size} processes on this node but {torch.cuda.device_count()} CUDA "
            "device(s): give torchrun --nproc-per-node at most the number of GPUs"
        )
    return torch.device("cuda", local_rank)
