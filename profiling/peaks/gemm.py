"""The compute ceiling's kernel: `torch.mm` of two n x n matrices into a preallocated output,
2 n^3 FLOPs per call (one multiply and one add per inner-product term), and the short CPU probe
that decides whether fp16/bf16 are CPU defaults (dtypes.dtype_availability)."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from profiling.peaks.dtypes import CPU_PROBE_SIZE, CPU_PROBED_DTYPES
from profiling.peaks.sampling import Clock, Measurement, Sync, device_sync, sample_kernels, timed


@contextmanager
def matmul_precision(dtype: str) -> Iterator[None]:
    """tf32 = fp32 tensors with TF32 tensor-core math allowed; fp32 = full-precision fp32 math."""
    import torch

    if dtype not in ("fp32", "tf32"):
        yield
        return
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def torch_dtype(dtype: str):
    import torch

    return {
        "fp64": torch.float64,
        "fp32": torch.float32,
        "tf32": torch.float32,
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
    }[dtype]


def measure_matmul(
    dtype: str, n: int, repeats: int, device: str = "cpu", *, sync: Sync | None = None, **timing
) -> Measurement:
    """FLOP/s of `torch.mm(a, b, out=c)` with n x n operands of `dtype` (2 n^3 FLOPs per call).

    `timing`: keyword arguments of sampling.sample_kernels (clock, warmup_s, min_sample_s,
    deadline, budget_end); `sync` defaults to the device's."""
    import torch

    td = torch_dtype(dtype)
    a = torch.empty(n, n, dtype=td, device=device).uniform_(-1, 1)
    b = torch.empty(n, n, dtype=td, device=device).uniform_(-1, 1)
    c = torch.empty(n, n, dtype=td, device=device)
    kernel = {dtype: ("flops", 2.0 * n**3, lambda: torch.mm(a, b, out=c))}
    with matmul_precision(dtype):  # the operands are freed when this returns
        return sample_kernels(kernel, repeats, sync or device_sync(device), **timing)[dtype]


def probe_cpu_ratios(
    dtypes: Sequence[str] = CPU_PROBED_DTYPES,
    n: int = CPU_PROBE_SIZE,
    rounds: int = 3,
    clock: Clock = time.perf_counter,
    mm: Callable | None = None,
) -> dict[str, float]:
    """{dtype: best fp32 time / best dtype time} of an n^3 CPU matmul (equal work, so the time
    ratio is the throughput ratio), fp32 and `dtypes` interleaved for `rounds` rounds.

    Interleaving exposes every dtype to the same interference from other processes; the decision
    it feeds (>= CPU_PROBE_MIN_RATIO or not) separates ~1 or more (a native GEMM path: AMX,
    AVX512-BF16/FP16) from a few percent (oneDNN's generic fallback). `mm` is torch.mm (injectable
    for tests).
    """
    import torch

    mm = mm or torch.mm
    ops = {}
    with matmul_precision("fp32"):
        for dtype in ("fp32", *dtypes):
            a = torch.empty(n, n, dtype=torch_dtype(dtype)).uniform_(-1, 1)
            b = torch.empty(n, n, dtype=torch_dtype(dtype)).uniform_(-1, 1)
            c = torch.empty(n, n, dtype=torch_dtype(dtype))
            ops[dtype] = lambda a=a, b=b, c=c: mm(a, b, out=c)
            ops[dtype]()  # warmup
        best = {dtype: math.inf for dtype in ops}
        for _ in range(rounds):
            for dtype, op in ops.items():
                best[dtype] = min(best[dtype], timed(op, 1, lambda: None, clock))
    bad = [d for d, t in best.items() if not t > 0]
    if bad:
        raise RuntimeError(f"probe {bad[0]}: the clock did not advance during a matmul")
    return {dtype: best["fp32"] / best[dtype] for dtype in dtypes}
