"""The bandwidth ceilings' kernels, the way STREAM does it.

Three preallocated float32 arrays of `array_bytes` each, touched once before timing (so page
faults are not measured), then, sample by sample, alternately
    copy   c = a            counted as 2 arrays moved  (read a, write c)
    triad  a = b + s * c    counted as 3 arrays moved  (read b, read c, write a)
with all threads torch uses. STREAM counts bytes this way and so do we: the write-allocate read
of the destination that plain stores cause on CPUs is real traffic but is not counted, so the
numbers compare with published STREAM results. On DRAM-sized arrays this gives
`peak_dram_bytes_per_s`; on arrays that together fill half of the L2, `peak_l2_bytes_per_s`.

On CUDA one L2-resident copy (~17 MB on an H100) takes a few microseconds, about what launching a
kernel costs the CPU, so timing one launch per copy measures the launch rate. There every call of
the L2 step is one CUDA graph of `l2_copies_per_launch` copies (captured once, replayed): one launch,
the copies back to back on the GPU, bytes = copies x the bytes of one copy. docs/peaks.md says why.
"""

from __future__ import annotations

import math
from typing import Callable

from profiling.peaks.sampling import Kernel, Measurement, Sync, device_sync, sample_kernels

STREAM_KERNELS = {"copy": 2, "triad": 3}  # arrays moved per element, as STREAM counts them
STREAM_ELEMENT_BYTES = 4  # float32: MPS has no float64; bytes moved do not depend on the dtype
TRIAD_SCALAR = 0.5  # keeps repeated c = a; a = b + s*c bounded (no inf, no denormals)
# bytes one CUDA launch of the L2 step moves at least: 1 GB is 100 us at 10 TB/s, 10-20 launches' cost
L2_LAUNCH_BYTES = 1e9
L2_MAX_COPIES = 4096  # at most this many copies in one graph (capture time, graph size)

Batch = Callable[[Callable[[], object], int], Callable[[], object]]  # (call, copies) -> one call


def copies_per_launch(
    bytes_per_copy: float, launch_bytes: float = L2_LAUNCH_BYTES, max_copies: int = L2_MAX_COPIES
) -> int:
    """Copies of a kernel one launch runs so that it moves at least `launch_bytes`: between 1 and
    `max_copies`."""
    if bytes_per_copy <= 0:
        raise ValueError(f"bytes_per_copy must be positive, got {bytes_per_copy}")
    return max(1, min(max_copies, math.ceil(launch_bytes / bytes_per_copy)))


def l2_copies_per_launch(array_bytes: int, device_type: str) -> int:
    """Copies per call of the L2 STREAM step: on CUDA enough that the smaller kernel (copy, 2
    arrays) moves L2_LAUNCH_BYTES per launch; elsewhere 1 (CPU: one torch call per copy, as before;
    MPS has no graphs in torch)."""
    if device_type != "cuda" or array_bytes <= 0:
        return 1
    n = max(1, array_bytes // STREAM_ELEMENT_BYTES)
    return copies_per_launch(min(STREAM_KERNELS.values()) * n * STREAM_ELEMENT_BYTES)


def batched(kernels: dict[str, Kernel], copies: int, batch: Batch) -> dict[str, Kernel]:
    """Each kernel as one call that runs it `copies` times (made by `batch`): work per call is
    `copies` x the work of one copy, so rates stay work per second."""
    return {
        name: (unit, work * copies, batch(fn, copies)) for name, (unit, work, fn) in kernels.items()
    }


def repeat_calls(fn: Callable[[], object], copies: int) -> Callable[[], object]:
    """`copies` calls of `fn` in a Python loop (a stand-in for cuda_graph off CUDA and in tests)."""

    def call() -> None:
        for _ in range(copies):
            fn()

    return call


def cuda_graph(fn: Callable[[], object], copies: int, device: str = "cuda") -> Callable[[], object]:
    """`copies` calls of `fn` captured in one CUDA graph; the call returned replays it (one launch).

    `fn` runs once on a side stream first (PyTorch's recipe: warm up outside the capture). It must
    write in place into preallocated tensors: the graph replays the same addresses.
    """
    import torch

    dev = torch.device(device)
    side = torch.cuda.Stream(device=dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(copies):
            fn()
    return graph.replay


def stream_kernels(a, b, c) -> dict[str, Callable[[], object]]:
    """STREAM copy and triad on the preallocated arrays a, b, c (no allocation per call)."""
    import torch

    return {
        "copy": lambda: c.copy_(a),
        "triad": lambda: torch.add(b, c, alpha=TRIAD_SCALAR, out=a),
    }


def measure_stream(
    array_bytes: int,
    repeats: int,
    device: str = "cpu",
    *,
    sync: Sync | None = None,
    copies_per_call: int = 1,
    batch: Batch | None = None,
    **timing,
) -> dict[str, Measurement]:
    """STREAM copy and triad, samples alternating, on three preallocated float32 arrays of
    `array_bytes` each, allocated and first touched once (untimed) and reused by every call.

    copies_per_call > 1: every call runs each kernel that many times, made into one call by
    `batch` (default: cuda_graph on CUDA, repeat_calls elsewhere). `timing`: keyword arguments of
    sampling.sample_kernels (clock, warmup_s, min_sample_s, deadline, budget_end); `sync`
    defaults to the device's."""
    import torch

    sync = sync or device_sync(device)
    n = max(1, array_bytes // STREAM_ELEMENT_BYTES)
    a = torch.empty(n, dtype=torch.float32, device=device)
    b = torch.empty(n, dtype=torch.float32, device=device)
    c = torch.empty(n, dtype=torch.float32, device=device)
    a.fill_(1.0), b.fill_(2.0), c.fill_(0.0)  # first touch: page faults happen here, untimed
    sync()
    kernels = {
        name: ("bytes", float(STREAM_KERNELS[name] * n * STREAM_ELEMENT_BYTES), fn)
        for name, fn in stream_kernels(a, b, c).items()
    }
    if copies_per_call > 1:
        if batch is None:
            on_cuda = torch.device(device).type == "cuda"
            batch = (lambda fn, k: cuda_graph(fn, k, device)) if on_cuda else repeat_calls
        kernels = batched(kernels, copies_per_call, batch)
    out = sample_kernels(kernels, repeats, sync, **timing)
    for meas in out.values():
        meas.copies_per_call = copies_per_call
    return out
